"""A replica node's capture: both legs of ns_server's DCP proxy (listed in builder.SCENARIOS).

ns_server on the replica node B (10.0.5.2) opens a producer connection to the active node's
memcached (10.0.5.1:11209) and a consumer connection to its own memcached (127.0.0.1:11209),
both named ``replication:ns_1@10.0.5.1->ns_1@10.0.5.2:default`` (ns_server dcp_replicator,
dcp_proxy:connect: SelectBucket, HELLO, DcpOpen; the consumer's DcpOpen carries
``{"consumer_name": ...}``). It adds streams on the consumer leg; the consumer memcached
negotiates its DcpControls (engines/ep/src/dcp/consumer.cc DcpConsumer::DcpConsumer) and
sends its stream requests back on that leg; ns_server copies each message to the other
leg unchanged (dcp_proxy:handle_packet). One vbucket ends in a takeover: Add Stream with
TakeOver, SetVbucketState pending then active from the producer, StreamEnd.

``replica-node``: all legal. The consumer leg is closed with FIN while the producer's last
Noop is in flight (relay-not-confirmed, info); the producer leg is never closed.
``replica-node-violations``: the same, with (a) two items of vb 5 relayed in swapped order,
(b) a mutation of vb 6 whose value ns_server changed, (c) a mutation of vb 6 never relayed,
(d) a buffer ack that reaches the producer with another byte count;
plus a second proxy pair whose consumer leg receives none of 1100 Noops (window overflow).
"""

from __future__ import annotations

import struct

from ..codec import encode
from .dsl import T0, MAX_SEQNO, Script, Spec, dcp_open, deletion, doc, failover, marker, ok
from .netsynth import Endpoint

NAME = "replication:ns_1@10.0.5.1->ns_1@10.0.5.2:default"
ACTIVE = Endpoint("10.0.5.1", 11209)
LOCAL = Endpoint("127.0.0.1", 11209)
FEATURES = (0x0B, 0x06, 0x0A, 0x12, 0x11)       # JSON, XATTR, Snappy, Collections, SyncRepl
OPEN_FLAGS = 0x04 | 0x20                        # IncludeXattrs, IncludeDeleteTimes
UUID = 0xB0B0000000000000
# the consumer memcached's controls, in DcpConsumer's order (consumer.cc), flow control first
CONTROLS = (("connection_buffer_size", "10485760"), ("enable_noop", "true"),
            ("set_noop_interval", "1.000000"), ("set_priority", "high"),
            ("supports_cursor_dropping_vulcan", "true"), ("supports_hifi_MFU", "true"),
            ("send_stream_end_on_client_close_stream", "true"),
            ("enable_expiry_opcode", "true"), ("enable_sync_writes", "true"),
            ("consumer_name", "ns_1@10.0.5.2"), ("include_deleted_user_xattrs", "true"),
            ("v7_dcp_status_codes", "true"), ("flatbuffers_system_events", "true"),
            ("max_marker_version", "2.2"))


class Clock:
    """One time line for several conversations: each step starts after the clock's time
    (a conversation that is behind pauses), so that a relayed message follows its source."""

    def __init__(self, t0: int = T0, tick: int = 100_000):
        self.t, self.tick = t0, tick

    def __call__(self, s: Script) -> Script:
        pkts = s.conv.packets()
        end = pkts[-1].ts_ns + s.conv.step_ns if pkts else s.conv.start_ns
        if self.t > end:
            s.conv.pause(self.t - end)
        self.t += self.tick
        return s


def key(name: str) -> str:
    return "\x00" + name            # the default collection (leb128 id 0)


def mutation(vb: int, opaque: int, seqno: int, name: str, value: bytes) -> bytes:
    return encode(0x57, dict(by_seqno=seqno, rev_seqno=1, flags=0x02000006, expiration=0),
                  key=key(name).encode(), value=value, vbucket=vb, opaque=opaque, datatype=0x01,
                  cas=0x17B0000000000000 + (vb << 16) + seqno)


def stream_request(vb: int, opaque: int, flags: int = 0) -> bytes:
    """PassiveStream::streamRequest: end 2^64-1, the value carries the vbucket's uid."""
    return encode(0x53, dict(flags=flags, start_seqno=0, end_seqno=MAX_SEQNO, vbucket_uuid=0,
                             snap_start_seqno=0, snap_end_seqno=0),
                  vbucket=vb, opaque=opaque, value=b'{"uid":"0"}')   # raw (connection.cc)


def mem_marker(vb, opaque, start, end, flags="memory+checkpoint"):
    return marker(vb, opaque, start, end, flags, layout="V2.0", max_visible_seqno=end)


def disk_marker(vb, opaque, start, end):
    return marker(vb, opaque, start, end, "disk+checkpoint", layout="V2.2", max_visible_seqno=end,
                  high_completed_seqno=0, purge_seqno=0, high_prepared_seqno=0)


def _connect(s: Script, consumer: bool, name: str, opaque: int = 1) -> None:
    """dcp_proxy:connect: SelectBucket, HELLO, DcpOpen (ns_server's own handshake)."""
    s.c2s(encode(0x89, key=b"default", opaque=opaque))
    s.s2c(ok(0x89, opaque))
    role = "consumer" if consumer else "producer"
    value = struct.pack(f">{len(FEATURES)}H", *FEATURES)
    s.c2s(encode(0x1F, key=f"proxy-{role}/{name}".encode()[:250], value=value, opaque=opaque + 1))
    s.s2c(ok(0x1F, opaque + 1, value=value))
    if consumer:
        s.c2s(encode(0x50, {"flags": OPEN_FLAGS}, key=name.encode(), opaque=opaque + 2,
                     value=b'{"consumer_name":"ns_1@10.0.5.2"}', datatype=0x01))
    else:
        s.c2s(dcp_open(name, 0x01 | OPEN_FLAGS, opaque + 2))
    s.s2c(ok(0x50, opaque + 2))


class Proxy:
    """The two legs and the relay of each message from one to the other."""

    def __init__(self, clock: Clock, producer_client: Endpoint, consumer_client: Endpoint,
                 active: Endpoint = ACTIVE, name: str = NAME):
        self.at = clock
        self.p = Script(producer_client, active, start_ns=clock.t, step_ns=1_000)
        self.c = Script(consumer_client, LOCAL, start_ns=clock.t, step_ns=1_000)
        _connect(self.at(self.c), True, name)
        _connect(self.at(self.p), False, name)

    def down(self, *frames: bytes, relayed=None, p_kw=None, c_kw=None) -> None:
        """The producer sends ``frames``; ns_server writes ``relayed`` (default: the same)
        to the consumer memcached in one batch."""
        self.at(self.p).s2c(*frames, **(p_kw or {}))
        out = frames if relayed is None else relayed
        if out:
            self.at(self.c).c2s(*out, **(c_kw or {}))

    def up(self, *frames: bytes, relayed=None) -> None:
        """The consumer memcached sends ``frames``; ns_server writes them to the producer."""
        self.at(self.c).s2c(*frames)
        out = frames if relayed is None else relayed
        if out:
            self.at(self.p).c2s(*out)


def _replica(violations: bool) -> list[Script]:
    clock = Clock()
    px = Proxy(clock, Endpoint("10.0.5.2", 40100), Endpoint("127.0.0.1", 40200))
    c = px.c
    # ns_server adds vbuckets 5 and 6 (opaque = vbucket, dcp_consumer_conn)
    clock(c).c2s(encode(0x51, {"flags": 0}, vbucket=5, opaque=5),
                 encode(0x51, {"flags": 0}, vbucket=6, opaque=6))
    for i, (k, v) in enumerate(CONTROLS):
        px.up(encode(0x5E, key=k.encode(), value=v.encode(), opaque=0x40 + i))
        px.down(ok(0x5E, 0x40 + i))
    # the consumer's stream requests, relayed; the failover logs, relayed back
    px.up(stream_request(5, 0xA5), stream_request(6, 0xA6))
    px.down(failover(0xA5, (UUID + 5, 0)))
    px.down(failover(0xA6, (UUID + 6, 0)))
    clock(c).s2c(ok(0x51, 5, fields={"new_opaque": 0xA5}), ok(0x51, 6, fields={"new_opaque": 0xA6}))
    # vb 5: a disk snapshot [0,6]; vb 6: a memory snapshot [0,4], interleaved
    px.down(disk_marker(5, 0xA5, 0, 6), mutation(5, 0xA5, 1, "a1", doc(1)),
            mutation(5, 0xA5, 2, "a2", doc(2)))
    px.down(mem_marker(6, 0xA6, 0, 4), mutation(6, 0xA6, 1, "b1", doc(1)))
    big = mutation(5, 0xA5, 3, "a3", doc(3, 3000))
    px.down(big, p_kw={"segment_sizes": (700, 1500)}, c_kw={"segment_sizes": (2000,)})
    b2, b3 = mutation(6, 0xA6, 2, "b2", doc(2)), mutation(6, 0xA6, 3, "b3", doc(3))
    if violations:      # (b) the value changed by the proxy; (c) b3 never relayed
        b2_changed = mutation(6, 0xA6, 2, "b2", doc(2).replace(b'"seq":2', b'"seq":9'))
        px.down(b2, b3, relayed=(b2_changed,))
    else:
        px.down(b2, b3)
    px.down(deletion(6, 0xA6, 4, key("b0")))
    ack = encode(0x5D, {"bytes_to_ack": 3000}, opaque=0x30)    # of the bytes sent so far
    if violations:      # (d) the buffer ack reaches the producer with another byte count
        px.up(ack, relayed=(encode(0x5D, {"bytes_to_ack": 1024}, opaque=0x30),))
    else:
        px.up(ack)
    a4, a5 = mutation(5, 0xA5, 4, "a4", doc(4)), deletion(5, 0xA5, 5, key("a0"))
    if violations:      # (a) relayed in swapped order
        px.down(a4, a5, relayed=(a5, a4))
    else:
        px.down(a4, a5)
    px.down(mutation(5, 0xA5, 6, "a6", doc(6)))
    px.down(encode(0x5C, opaque=0x21))
    px.up(ok(0x5C, 0x21))
    # vb 7: takeover (dcp_consumer_conn:takeover, opaque = vbucket)
    clock(c).c2s(encode(0x51, {"flags": "takeover"}, vbucket=7, opaque=7))
    px.up(stream_request(7, 0xA7, flags=0x01))
    px.down(failover(0xA7, (UUID + 7, 0)))
    clock(c).s2c(ok(0x51, 7, fields={"new_opaque": 0xA7}))
    px.down(mem_marker(7, 0xA7, 0, 2, "memory+checkpoint+ack"),
            mutation(7, 0xA7, 1, "c1", doc(1)), mutation(7, 0xA7, 2, "c2", doc(2)))
    px.up(ok(0x56, 0xA7))
    px.down(encode(0x5B, {"state": 3}, vbucket=7, opaque=0xA7))        # pending
    px.up(ok(0x5B, 0xA7))
    px.down(encode(0x5B, {"state": 1}, vbucket=7, opaque=0xA7))        # active
    px.up(ok(0x5B, 0xA7))
    px.down(encode(0x55, {"reason": 0}, vbucket=7, opaque=0xA7))
    px.up(encode(0x5D, {"bytes_to_ack": 1000}, opaque=0x31))
    # the producer's last Noop is in flight when ns_server closes the consumer leg
    clock(px.p).s2c(encode(0x5C, opaque=0x22))
    clock(c).conv.close()
    scripts = [px.p, px.c]
    if violations:
        scripts += _flood(clock)
    return scripts


def _flood(clock: Clock) -> list[Script]:
    """A second proxy pair (from 10.0.5.3) whose consumer leg gets none of 1100 Noops."""
    px = Proxy(clock, Endpoint("10.0.5.2", 40300), Endpoint("127.0.0.1", 40400),
               Endpoint("10.0.5.3", 11209), "replication:ns_1@10.0.5.3->ns_1@10.0.5.2:default")
    px.up(encode(0x5E, key=b"enable_noop", value=b"true", opaque=0x40))
    px.down(ok(0x5E, 0x40))
    clock(px.p).s2c(*[encode(0x5C, opaque=0x1000 + i) for i in range(FLOOD)])
    return [px.p, px.c]


FLOOD = 1100

SPECS = (
    Spec("replica-node", "replica-node.pcap",
         "a replica node's capture of ns_server's proxy: producer leg to 10.0.5.1:11209 and "
         "consumer leg to the local memcached, controls, two vbuckets interleaved and a "
         "takeover, every message relayed unchanged; the consumer leg closed with FIN, the "
         "producer leg never closed",
         lambda: _replica(False)),
    Spec("replica-node-violations", "replica-node-violations.pcap",
         "the replica node's proxy relaying two items in swapped order, a changed value and "
         "not relaying a mutation; a second pair whose consumer leg receives nothing",
         lambda: _replica(True)),
)
