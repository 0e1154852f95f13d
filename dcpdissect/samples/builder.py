"""Deterministic builder of the bundled sample captures.

Each sample is a small scripted DCP exchange turned into TCP packets (see ``netsynth``)
and written as pcap or pcapng. The builder also returns what a correct decoder must find
in each file: every message with the frames that carry it, and the gaps and resyncs that
the TCP pathologies cause. ``python -m dcpdissect.samples.builder DIR`` writes them all.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..codec import encode
from . import netsynth as ns
from .netsynth import Endpoint, Link, TcpConversation

MAX_SEQNO = 2**64 - 1
T0 = 1_700_000_000_000_000_000


@dataclass
class Expected:
    """One message the decoder must produce."""
    client: tuple[str, int]
    server: tuple[str, int]
    direction: int            # 0 c2s, 1 s2c
    offset: int               # stream offset in that direction
    data: bytes               # the message, or its captured prefix when ``missing``
    frames: tuple[int, ...] = ()
    missing: int = 0          # bytes of the message after ``data`` the capture lacks


@dataclass
class BuiltSample:
    name: str
    filename: str
    description: str
    data: bytes                                   # the capture file's bytes
    messages: list[Expected]                      # in stream order per direction
    gaps: int = 0
    resyncs: int = 0
    lost: int = 0                                 # messages cut by a gap or the capture start
    partial: int = 0                              # messages decoded from a captured prefix


class Script:
    """A TCP conversation that remembers the MCBP messages sent on it."""

    def __init__(self, client: Endpoint, server: Endpoint, **kw):
        self.conv = TcpConversation(client, server, **kw)
        self.messages: list[tuple[str, int, bytes]] = []
        self.offsets = {"c2s": 0, "s2c": 0}

    def send(self, direction: str, *frames: bytes, **kw) -> None:
        """Send one or more frames; several frames are coalesced into shared segments."""
        for i, frame in enumerate(frames):
            self.messages.append((direction, self.offsets[direction], frame))
            self.offsets[direction] += len(frame)
            last = i == len(frames) - 1
            self.conv.send(direction, frame, coalesce_with_next=not last or kw.get("coalesce", False),
                           segment_sizes=kw.get("segment_sizes") if last else None)

    def c2s(self, *frames, **kw):
        self.send("c2s", *frames, **kw)

    def s2c(self, *frames, **kw):
        self.send("s2c", *frames, **kw)


# --- message helpers ----------------------------------------------------------------------

def dcp_open(name: str, flags: int, opaque: int) -> bytes:
    return encode(0x50, {"flags": flags}, key=name.encode(), opaque=opaque)


def ok(opcode: int, opaque: int, **kw) -> bytes:
    return encode(opcode, kw.pop("fields", None), request=False, opaque=opaque, **kw)


def control(key: str, value: str, opaque: int) -> bytes:
    return encode(0x5E, key=key.encode(), value=value.encode(), opaque=opaque)


def hello_exchange(s: "Script", opaque: int, *features: int) -> None:
    """HELLO with these features, answered by the server with the same list."""
    value = b"".join(f.to_bytes(2, "big") for f in features)
    s.c2s(encode(0x1F, key=b"dcpdissect", value=value, opaque=opaque))
    s.s2c(ok(0x1F, opaque, value=value))


def controls_exchange(s: "Script", first_opaque: int, *pairs: tuple[str, str],
                      consumer: bool = False) -> None:
    """DcpControl requests from the DCP consumer (the TCP server on a consumer connection),
    each answered Success by the producer side."""
    ask, answer = (s.s2c, s.c2s) if consumer else (s.c2s, s.s2c)
    for i, (k, v) in enumerate(pairs):
        ask(control(k, v, first_opaque + i))
        answer(ok(0x5E, first_opaque + i))


def stream_req(vb: int, opaque: int, start=0, end=MAX_SEQNO, uuid=0, snap_start=None,
               snap_end=None, flags=0, value=b"") -> bytes:
    return encode(0x53, dict(flags=flags, start_seqno=start, end_seqno=end, vbucket_uuid=uuid,
                             snap_start_seqno=start if snap_start is None else snap_start,
                             snap_end_seqno=start if snap_end is None else snap_end),
                  vbucket=vb, opaque=opaque, value=value)


def failover(opaque: int, *entries: tuple[int, int]) -> bytes:
    return encode(0x53, {"failover_log": [dict(vbucket_uuid=u, seqno=s) for u, s in entries]},
                  request=False, opaque=opaque)


def marker(vb: int, opaque: int, start: int, end: int, flags, layout="V1", sid=None, **extra) -> bytes:
    return encode(0x56, dict(start_seqno=start, end_seqno=end, flags=flags, **extra),
                  layout=layout, vbucket=vb, opaque=opaque, stream_id=sid)


def mutation(vb: int, opaque: int, seqno: int, key: str, value: bytes, sid=None, cas=None) -> bytes:
    return encode(0x57, dict(by_seqno=seqno, rev_seqno=1, flags=0x02000006, expiration=0),
                  key=key.encode(), value=value, vbucket=vb, opaque=opaque, datatype=0x01,
                  cas=cas if cas is not None else 0x17A0000000000000 + seqno, stream_id=sid)


def deletion(vb: int, opaque: int, seqno: int, key: str, sid=None) -> bytes:
    return encode(0x58, dict(by_seqno=seqno, rev_seqno=2, delete_time=1_700_000_000),
                  layout="V2", key=key.encode(), vbucket=vb, opaque=opaque,
                  cas=0x17A0000000000000 + seqno, stream_id=sid)


def expiration(vb: int, opaque: int, seqno: int, key: str) -> bytes:
    return encode(0x59, dict(by_seqno=seqno, rev_seqno=3, delete_time=1_700_000_100),
                  key=key.encode(), vbucket=vb, opaque=opaque, cas=0x17A0000000000000 + seqno)


def doc(seqno: int, size: int = 40) -> bytes:
    body = json.dumps({"seq": seqno, "pad": "x" * max(0, size - 24)}, separators=(",", ":"))
    return body.encode()


# --- scenarios ----------------------------------------------------------------------------

CONSUMER = Endpoint("10.0.0.2", 50123)
PRODUCER_11209 = Endpoint("10.0.0.1", 11209)
CONNECTOR = Endpoint("10.0.0.3", 40001)
PRODUCER_11210 = Endpoint("10.0.0.1", 11210)


REPLICATION_NAME = "replication:ns_1@10.0.0.1->ns_1@10.0.0.2:default"
# engines/ep/src/dcp/consumer.cc DcpConsumer::DcpConsumer's controls, in its order, with
# the producer's answer (DcpProducer::control): include_deleted_user_xattrs needs the
# DcpOpen flag of that name, which this DcpOpen lacks (Einval); then the flow-control window
# (DcpConsumer::addBufferSizeControl)
REPLICATION_CONTROLS = (
    ("enable_noop", "true", 0), ("set_noop_interval", "0.100000", 0),
    ("set_priority", "high", 0), ("supports_cursor_dropping_vulcan", "true", 0),
    ("supports_hifi_MFU", "true", 0), ("send_stream_end_on_client_close_stream", "true", 0),
    ("enable_expiry_opcode", "true", 0), ("enable_sync_writes", "true", 0),
    ("consumer_name", "ns_1@10.0.0.2", 0), ("include_deleted_user_xattrs", "true", 0x04),
    ("v7_dcp_status_codes", "true", 0), ("flatbuffers_system_events", "true", 0),
    ("change_streams", "true", 0), ("max_marker_version", "2.2", 0),
    ("cache_transfer", "true", 0), ("connection_buffer_size", "10485760", 0))
HELLO_XATTR, HELLO_JSON, HELLO_COLLECTIONS = 0x06, 0x0B, 0x12


def replication(client=CONSUMER, server=PRODUCER_11209, big_value=4000, **kw) -> Script:
    """A clean intra-cluster replication stream as kv_engine's consumer negotiates it
    (through ns_server, which opens the connection): HELLO with collections, DcpOpen, the
    consumer's controls pipelined (sync replication, marker version 2.2, expiry opcode, ...),
    three vbuckets, V2.0 memory and disk markers (a disk marker is V2.0 when the server's
    dcp_snapshot_marker_purge_seqno_enabled and _hps_enabled settings are off) and a V2.2
    disk marker, collection keys, coalesced and split PDUs, a noop and a buffer ack."""
    s = Script(client, server, **kw)
    hello = b"".join(f.to_bytes(2, "big") for f in (HELLO_XATTR, HELLO_JSON, HELLO_COLLECTIONS))
    s.c2s(encode(0x1F, key=b"dcpdissect", value=hello, opaque=0xF),
          dcp_open(REPLICATION_NAME, 0x25, 1))
    s.s2c(ok(0x1F, 0xF, value=hello), ok(0x50, 1))
    s.c2s(*[control(k, v, 2 + i) for i, (k, v, _) in enumerate(REPLICATION_CONTROLS)])
    s.s2c(*[ok(0x5E, 2 + i, status=st) for i, (_, _, st) in enumerate(REPLICATION_CONTROLS)])
    for vb in range(3):
        s.c2s(stream_req(vb, 0x10 + vb))
        s.s2c(failover(0x10 + vb, (0xA1B2C3D4E5F60000 + vb, 0)))
    s.s2c(marker(0, 0x10, 0, 5, "memory+checkpoint", layout="V2.0", max_visible_seqno=5,
                 high_completed_seqno=0),
          *[mutation(0, 0x10, i, f"\x00doc-{i}", doc(i)) for i in range(1, 6)])
    s.s2c(marker(1, 0x11, 0, 4, "disk+checkpoint", layout="V2.0", max_visible_seqno=4,
                 high_completed_seqno=2),
          *[mutation(1, 0x11, i, f"\x00user::{i}", doc(i, 700)) for i in range(1, 4)],
          deletion(1, 0x11, 4, "\x00user::9"))
    s.s2c(marker(2, 0x12, 0, 6, "disk+checkpoint", layout="V2.2", max_visible_seqno=6,
                 high_completed_seqno=0, purge_seqno=0, high_prepared_seqno=0),
          *[mutation(2, 0x12, i, f"\x00order-{i}", doc(i, 60)) for i in range(1, 6)])
    s.s2c(mutation(2, 0x12, 6, "\x00order-6", doc(6, big_value)))   # split across segments
    s.s2c(marker(0, 0x10, 6, 7, "memory", layout="V2.0", max_visible_seqno=7,
                 high_completed_seqno=0),
          expiration(0, 0x10, 6, "\x00doc-1"), mutation(0, 0x10, 7, "\x00doc-7", doc(7)))
    received = sum(len(m) for d, _, m in s.messages if d == "s2c" and m[0] == 0x80
                   and m[1] != 0x5E)            # the stream messages: all it acknowledges
    s.s2c(encode(0x5C, opaque=0x20))
    s.c2s(ok(0x5C, 0x20), encode(0x5D, {"bytes_to_ack": received}, opaque=5))
    s.conv.close()
    return s


def stream_id_connector(client=CONNECTOR, server=PRODUCER_11210, marker_layout="V1",
                        **kw) -> Script:
    """A connector using stream ids: flexible framing (magic 0x08) on every stream message;
    V1 markers (enable_stream_id excludes sync replication, producer.cc DcpProducer::control);
    ``marker_layout="V2.0"`` sends its marker with an MVS anyway, as kv_engine never does."""
    s = Script(client, server, **kw)
    s.c2s(dcp_open("java-dcp-client-7f3a", 0x1, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(control("enable_stream_id", "true", 2))
    s.s2c(ok(0x5E, 2))
    s.c2s(stream_req(5, 0x31, end=3, value=b'{"sid":7}'))
    s.s2c(failover(0x31, (0x0BADCAFE00000005, 0)))
    mvs = {"max_visible_seqno": 3} if marker_layout == "V2.0" else {}
    s.s2c(marker(5, 0x31, 0, 3, "memory+checkpoint", layout=marker_layout, sid=7, **mvs),
          mutation(5, 0x31, 1, "\x00a", doc(1), sid=7),
          mutation(5, 0x31, 2, "\x00b", doc(2), sid=7),
          deletion(5, 0x31, 3, "\x00c", sid=7),
          encode(0x55, {"reason": 0}, vbucket=5, opaque=0x31, stream_id=7))
    s.conv.close()
    return s


def add_stream() -> list[Script]:
    """ns_server asks a consumer to add a stream; the consumer requests it from the producer."""
    ns_server = Script(Endpoint("10.0.0.2", 43210), Endpoint("10.0.0.2", 11209),
                       start_ns=T0, step_ns=10_000)
    consumer = Script(Endpoint("10.0.0.2", 50200), Endpoint("10.0.0.1", 11209),
                      start_ns=T0 + 5_000, step_ns=10_000)
    name = "replication:ns_1@10.0.0.1->ns_1@10.0.0.2:travel"
    ns_server.c2s(dcp_open(name, 0x0, 1))
    ns_server.s2c(ok(0x50, 1))
    ns_server.c2s(encode(0x51, {"flags": "takeover"}, vbucket=5, opaque=2))
    consumer.c2s(dcp_open(name, 0x25, 1))
    consumer.s2c(ok(0x50, 1))
    consumer.c2s(stream_req(5, 0x1000, flags=0x1))
    consumer.s2c(failover(0x1000, (0x5A5A000000000005, 0)))
    consumer.s2c(marker(5, 0x1000, 0, 2, "memory+checkpoint+ack"),
                 mutation(5, 0x1000, 1, "airline_10", doc(1)),
                 mutation(5, 0x1000, 2, "airline_11", doc(2)))
    consumer.c2s(ok(0x56, 0x1000))
    consumer.s2c(encode(0x5B, {"state": 3}, vbucket=5, opaque=0x1000))
    consumer.c2s(ok(0x5B, 0x1000))
    ns_server.conv.pause(200_000)
    ns_server.s2c(ok(0x51, 2, fields={"new_opaque": 0x1000}))
    for s in (ns_server, consumer):
        s.conv.close()
    return [ns_server, consumer]


def seed_marker_v1() -> Script:
    s = Script(Endpoint("192.168.1.20", 51000), Endpoint("192.168.1.10", 11210))
    s.s2c(encode(0x56, dict(start_seqno=0, end_seqno=8, flags=0x01), layout="V1",
                 opaque=0xDEADBEEF))
    s.conv.close()
    return s


def seed_marker_v2_0() -> Script:
    s = Script(Endpoint("192.168.1.20", 51001), Endpoint("192.168.1.10", 11210))
    s.s2c(encode(0x56, dict(start_seqno=1, end_seqno=8, flags=0x02, max_visible_seqno=8,
                            high_completed_seqno=7), layout="V2.0", opaque=0xDEADBEEF))
    s.conv.close()
    return s


def seed_add_stream() -> Script:
    """The add-stream spec's example on a consumer connection (memcached accepts Add Stream
    only after a DcpOpen, mcbp_validators.cc verify_common_dcp_restrictions)."""
    s = Script(Endpoint("192.168.1.10", 52000), Endpoint("192.168.1.20", 11210))
    s.c2s(dcp_open("replication:ns_1@192.168.1.30->ns_1@192.168.1.20:default", 0, 0xA0))
    s.s2c(ok(0x50, 0xA0))
    s.c2s(encode(0x51, {"flags": 0x01}, vbucket=5, opaque=1))
    s.s2c(encode(0x51, {"new_opaque": 0x1000}, request=False, opaque=1))
    s.conv.close()
    return s


# --- expectations -----------------------------------------------------------------------

def _expectations(scripts: list[Script], written: ns.WrittenPackets) -> tuple[list[Expected], int, int]:
    """The messages a correct decoder finds in the written capture, with the frames that
    carry them; the number of messages it cannot decode at all; and of those it decodes
    from a captured prefix.

    A byte is delivered by the first frame (in file order) carrying it. Framing holds from
    the stream's first byte (or not, when the capture starts inside the stream) and across
    missing bytes inside a message whose 24-byte header was captured: that message is
    decoded from its prefix up to the first missing byte, cited at the prefix's frames (one
    whose header was cut after its length is not decoded, but framing goes on). Missing
    bytes that cover a message boundary (or a header before its length) lose framing until
    the first captured header proven by the next message's captured header right after it
    (or, when its frame runs into missing bytes, by its layout; or, last, by ending the
    stream).
    """
    out, lost, partial = [], 0, 0
    for script in scripts:
        conv = script.conv
        for dname, dnum in (("c2s", 0), ("s2c", 1)):
            first_frame: dict[int, int] = {}
            for fno, pkt in written.data_frames(dname):
                if pkt.conversation is not conv:
                    continue
                captured = len(pkt.payload)
                if pkt.snaplen is not None:
                    captured = max(0, min(captured, pkt.snaplen - (len(pkt.frame_bytes()) - len(pkt.payload))))
                for b in range(pkt.stream_offset, pkt.stream_offset + captured):
                    first_frame.setdefault(b, fno)
            msgs = [(off, data) for d, off, data in script.messages if d == dname]
            if not msgs:
                continue
            have = first_frame.__contains__

            def captured(i: int, n: int) -> bool:
                return all(have(b) for b in range(msgs[i][0], msgs[i][0] + n))

            in_sync = have(msgs[0][0])
            for i, (off, data) in enumerate(msgs):
                end = off + len(data)
                if not in_sync:
                    nxt_header = i + 1 < len(msgs) and captured(i + 1, 24)
                    runs_into_cut = not all(have(b) for b in range(off, end + 24 if i + 1 < len(msgs) else end))
                    last = i + 1 == len(msgs) and all(have(b) for b in range(off, end))
                    in_sync = captured(i, 24) and (nxt_header or runs_into_cut or last)
                if not in_sync or not captured(i, 24):
                    lost += 1
                    # with its length (header bytes 8-11) captured, framing goes on
                    in_sync = in_sync and captured(i, 12) and (end == script.offsets[dname]
                                                               or have(end))
                    continue
                cut = next((b for b in range(off, end) if not have(b)), end)
                if cut < end:
                    partial += 1
                frames = {first_frame[b] for b in range(off, cut)}
                out.append(Expected((conv.client.ip, conv.client.port),
                                    (conv.server.ip, conv.server.port), dnum, off, data[:cut - off],
                                    tuple(sorted(frames)), end - cut))
                in_sync = end == script.offsets[dname] or have(end)
    return out, lost, partial


@dataclass
class Spec:
    name: str
    filename: str
    description: str
    scripts: Callable[[], list[Script]]
    transform: Callable[[list], list] | None = None
    fmt: str = "pcap"                      # pcap | pcapng | pcap.gz
    write_kw: dict = field(default_factory=dict)
    gaps: int = 0
    resyncs: int = 0
    snaplen: int | None = None             # every data frame of every script cut to it


def _data_pos(pkts, direction, k):
    return ns.data_indices(pkts, direction)[k]


def _reorder(pkts):
    d = ns.data_indices(pkts, "s2c")
    pkts = ns.reorder(pkts, d[6], d[8])
    return ns.reorder(pkts, d[3], d[4])


def _retransmit(pkts):
    d = ns.data_indices(pkts, "s2c")
    pkts = ns.retransmit(pkts, d[7], delay=3)
    pkts = ns.retransmit(pkts, d[2])
    d = ns.data_indices(pkts, "s2c")
    return ns.overlap(pkts, d[5], b"\xee" * len(pkts[d[5]].payload), delay=2)


def _loss(pkts):
    """Drop the middle segment of the 4000-byte document (its header was seen)."""
    d = ns.data_indices(pkts, "s2c")
    middle = next(b for a, b in zip(d, d[1:])
                  if pkts[a].payload[:2] == b"\x80\x57" and len(pkts[a].payload) == 1448
                  and len(pkts[b].payload) == 1448)
    return ns.drop(pkts, middle)


def _loss_header(pkts):
    """Drop a full segment that starts with a marker and ends inside a mutation."""
    d = ns.data_indices(pkts, "s2c")
    first = next(i for i in d if pkts[i].payload[:2] == b"\x80\x56" and len(pkts[i].payload) == 1448)
    return ns.drop(pkts, first)


def from_first_marker(pkts):
    """The capture starts at the server's first snapshot marker (no handshake, no request)."""
    first = next(i for i in ns.data_indices(pkts, "s2c") if pkts[i].payload[1] == 0x56)
    return ns.start_at(pkts, first)


def _mid_stream(pkts):
    d = ns.data_indices(pkts, "s2c")
    inside = next(i for i in d if pkts[i].payload[0] not in (0x80, 0x81, 0x08, 0x18))
    return ns.start_at(pkts, inside)      # starts inside a message, more messages follow


def _one(factory, **kw):
    return lambda: [factory(**kw)]


SPECS: tuple[Spec, ...] = (
    Spec("clean-replication", "clean-replication.pcap",
         "intra-cluster replication on 11209 negotiated as kv_engine's consumer does "
         "(V2.0, V2.2 markers) plus a stream-id connector on 11210 (flexible framing, V1 "
         "markers); coalesced and split PDUs",
         lambda: [replication(), stream_id_connector(start_ns=T0 + 500)]),
    Spec("add-stream", "add-stream.pcap",
         "ns_server adds a takeover stream on a consumer; the consumer's stream request, "
         "the acked marker and the add-stream response with the new opaque",
         add_stream),
    Spec("seed-marker-v1", "seed-marker-v1.pcap",
         "the snapshot-marker spec's V1 example, byte for byte", _one(seed_marker_v1)),
    Spec("seed-marker-v2_0", "seed-marker-v2_0.pcap",
         "the snapshot-marker spec's V2.0 example, per its field table", _one(seed_marker_v2_0)),
    Spec("seed-add-stream", "seed-add-stream.pcap",
         "the add-stream spec's request and response examples", _one(seed_add_stream)),
    Spec("tcp-reorder", "tcp-reorder.pcap", "server segments captured out of order",
         _one(replication), _reorder),
    Spec("tcp-retransmit", "tcp-retransmit.pcap",
         "retransmitted segments, one retransmission with different bytes",
         _one(replication), _retransmit),
    Spec("tcp-loss", "tcp-loss.pcap",
         "a lost segment inside a split document: gap reported, decoding resumes",
         _one(replication), _loss, gaps=1),
    Spec("tcp-loss-header", "tcp-loss-header.pcap",
         "a lost segment carrying message headers: gap, then resync on the next header",
         _one(replication), _loss_header, gaps=1, resyncs=1),
    Spec("tcp-seq-wrap", "tcp-seq-wrap.pcap", "sequence numbers wrap past 2^32 in both directions",
         _one(replication, isn_client=2**32 - 700, isn_server=2**32 - 3000)),
    Spec("tcp-mid-stream", "tcp-mid-stream.pcap",
         "capture starts in the middle of a split document, without the handshake",
         _one(replication), _mid_stream, resyncs=1),
    Spec("pcapng-multi-interface", "pcapng-multi-interface.pcapng",
         "three interfaces: Ethernet (us), raw IP (ns) and Linux SLL (2^-10 s)",
         lambda: [replication(),
                  stream_id_connector(link=Link("raw"), start_ns=T0 + 500),
                  seed_add_stream_on(Link("sll"), T0 + 900)],
         fmt="pcapng", write_kw={"interfaces": [6, 9, 0x8A]}),
    Spec("sll2", "sll2.pcap", "Linux cooked v2 capture (tcpdump -i any)",
         _one(replication, link=Link("sll2"))),
    Spec("vlan-qinq", "vlan-qinq.pcap", "Ethernet with stacked VLAN tags (QinQ 100/200)",
         _one(replication, link=Link("ethernet", vlan=(100, 200)))),
    Spec("ipv6", "ipv6.pcap", "replication over IPv6",
         _one(replication, client=Endpoint("fd00::2", 50123), server=Endpoint("fd00::1", 11209))),
    Spec("loopback-ns-be", "loopback-ns-be.pcap",
         "BSD loopback link, big-endian pcap with nanosecond timestamps",
         _one(stream_id_connector, link=Link("null")),
         write_kw={"nanosecond": True, "big_endian": True}),
    Spec("clean-replication-gz", "clean-replication.pcap.gz", "the clean stream, gzip-compressed",
         lambda: [replication()], fmt="pcap.gz"),
)


def seed_add_stream_on(link: Link, start_ns: int) -> Script:
    s = Script(Endpoint("192.168.1.10", 52000), Endpoint("192.168.1.20", 11210),
               link=link, start_ns=start_ns)
    s.c2s(dcp_open("replication:ns_1@192.168.1.30->ns_1@192.168.1.20:default", 0, 0xA0))
    s.s2c(ok(0x50, 0xA0))
    s.c2s(encode(0x51, {"flags": 0x01}, vbucket=5, opaque=1))
    s.s2c(encode(0x51, {"new_opaque": 0x1000}, request=False, opaque=1))
    s.conv.close()
    return s


def all_specs() -> tuple[Spec, ...]:
    from . import (
        scenarios_hostile, scenarios_identity, scenarios_rollback, scenarios_streams,
        scenarios_validator, scenarios_violations,
    )
    from . import scenarios_controls, scenarios_replica
    return (SPECS + tuple(scenarios_violations.SPECS) + tuple(scenarios_validator.SPECS)
            + tuple(scenarios_streams.SPECS) + tuple(scenarios_rollback.SPECS)
            + tuple(scenarios_hostile.SPECS) + tuple(scenarios_identity.SPECS)
            + tuple(scenarios_replica.SPECS) + tuple(scenarios_controls.SPECS)
            + tuple(__import__(f"{__package__}.scenarios_lifecycle", fromlist=['SPECS']).SPECS)
            + tuple(__import__(f"{__package__}.scenarios_flow", fromlist=['SPECS']).SPECS)
            + tuple(__import__(f"{__package__}.scenarios_durability", fromlist=['SPECS']).SPECS)
            + tuple(__import__(f"{__package__}.scenarios_ports", fromlist=['SPECS']).SPECS)
            + tuple(__import__(f"{__package__}.scenarios_collections", fromlist=['SPECS']).SPECS)
            + tuple(__import__(f"{__package__}.scenarios_cuts", fromlist=['SPECS']).SPECS)
            + tuple(__import__(f"{__package__}.scenarios_moves", fromlist=['SPECS']).SPECS))


def build(spec: Spec) -> BuiltSample:
    scripts = spec.scripts()
    sources = [s.conv.packets() for s in scripts]
    if spec.transform is not None:
        sources[0] = spec.transform(sources[0])
    if spec.snaplen is not None:
        sources = [[ns.truncate_capture([p], 0, spec.snaplen)[0] if p.payload else p
                    for p in src] for src in sources]
    buf = io.BytesIO()
    if spec.fmt == "pcapng":
        written = ns.write_pcapng(buf, sources, **spec.write_kw)
    else:
        written = ns.write_pcap(buf, sources, **spec.write_kw)
    data = buf.getvalue()
    if spec.fmt == "pcap.gz":
        out = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
            gz.write(data)
        data = out.getvalue()
    messages, lost, partial = _expectations(scripts, written)
    return BuiltSample(spec.name, spec.filename, spec.description, data, messages,
                       gaps=spec.gaps, resyncs=spec.resyncs, lost=lost, partial=partial)


def build_all() -> dict[str, BuiltSample]:
    return {spec.name: build(spec) for spec in all_specs()}


def write_all(directory: str | Path) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for sample in build_all().values():
        path = directory / sample.filename
        path.write_bytes(sample.data)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all(sys.argv[1] if len(sys.argv) > 1 else "samples"):
        print(p)
