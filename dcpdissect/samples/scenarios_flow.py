"""Flow-control, noop and datatype samples (engines/ep/src/dcp/producer.cc BufferLog,
maybeSendNoop; active_stream.cc makeResponseFromItem).

``flow-legal``: a producer connection (window 400 bytes, noops every 10 s, Snappy, Xattr and
JSON values as HELLO and DcpOpen enabled them) whose producer fills the window with the
message that crosses it, pauses until the consumer's buffer ack, resumes, then idles with
noops on time; and a consumer connection (ns_server's proxy leg: the data client→server, the
controls and buffer acks server→client) doing the same: no warning or error.

Later in the same captures, the consumer's silence against the producer's idle disconnect
(DcpProducer::maybeDisconnect, dcp_idle_timeout 360 s by default): in ``flow-legal`` a noop
answered 300 s late, a consumer that leaves a noop unanswered but keeps sending buffer acks
(each resets the producer's idle timer), a silent consumer on a connection without noops,
and on a consumer connection a noop answered 200 s late; the connections end with a FIN from
either side and an RST.

``flow-violations``: a producer connection that sends past a full window, is acked more than
it sent, sends Snappy and Xattr values the connection did not enable, stays silent beyond
twice its noop interval, and receives (and sends) answers to requests never made; a consumer
connection whose producer sends past the window; then consumers that leave a noop unanswered
past the idle timeout: the producer closes the connection (a producer connection, and
ns_server's side of a consumer connection), or keeps it (its timeout is set higher).
``flow-undecided``: a capture that starts after the negotiation, whose buffer ack cannot be
judged (``flow-control-undecided``), and whose noop then goes unanswered for 400 s (not
judged either).
"""

from __future__ import annotations

import struct

from ..codec import encode
from .dsl import T0, Script, Spec, dcp_open, failover, marker, ok, stream_req
from .dsl import controls_exchange as _controls
from .dsl import from_first_marker as _after_negotiation
from .dsl import hello_exchange as _hello
from .netsynth import Endpoint

UUID = 0xF10E000000000000
SNAPPY, XATTR, JSON = 0x0A, 0x06, 0x0B        # HELLO features
S = 1_000_000_000






def _stream(s: Script, vb: int, opaque: int, consumer=False) -> None:
    ask, answer = (s.s2c, s.c2s) if consumer else (s.c2s, s.s2c)
    ask(stream_req(vb, opaque))
    answer(failover(opaque, (UUID + vb, 0)))


def value(seqno: int) -> bytes:
    """A 100-byte JSON document: a mutation of a 2-byte key is 24 + 31 + 2 + 100 = 157 bytes."""
    body = f'{{"seqno":{seqno},"pad":"'.encode()
    return body + b"x" * (100 - len(body) - 2) + b'"}'


def _snappy(data: bytes) -> bytes:
    assert len(data) < 60
    return bytes([len(data), (len(data) - 1) << 2]) + data


def _xattrs(k: bytes, v: bytes) -> bytes:
    body = struct.pack(">I", len(k) + len(v) + 2) + k + b"\0" + v + b"\0"
    return struct.pack(">I", len(body)) + body


def mut(vb: int, opaque: int, seqno: int, data: bytes | None = None, datatype=0x01) -> bytes:
    return encode(0x57, dict(by_seqno=seqno, rev_seqno=1, flags=0x02000006, expiration=0),
                  key=f"k{seqno}".encode(), value=value(seqno) if data is None else data,
                  vbucket=vb, opaque=opaque, datatype=datatype, cas=0x17A0000000000000 + seqno)


def ack(n: int, opaque: int) -> bytes:
    return encode(0x5D, {"bytes_to_ack": n}, opaque=opaque)


def noop(opaque: int) -> bytes:
    return encode(0x5C, opaque=opaque)


MARKER_BYTES, MUT_BYTES = 44, 157
SNAPPY_DOC = _snappy(b'{"compressed":true}')
XATTR_DOC = _xattrs(b"_sync", b'{"rev":1}') + b'{"with":"xattrs"}'


# --- legal ----------------------------------------------------------------------------------

def _legal_producer() -> Script:
    s = Script(Endpoint("10.0.6.2", 50600), Endpoint("10.0.6.1", 11210), start_ns=T0)
    _hello(s, 1, SNAPPY, XATTR, JSON)
    s.c2s(dcp_open("flow-legal-producer", 0x05, 2))      # producer | include_xattrs
    s.s2c(ok(0x50, 2))
    _controls(s, 3, ("connection_buffer_size", "400"), ("enable_noop", "true"),
              ("set_noop_interval", "10"))
    _stream(s, 0, 0x100)
    s.s2c(marker(0, 0x100, 0, 6, "memory+checkpoint"))
    for seqno in (1, 2, 3):       # the third crosses the window: 358 < 400 before it
        s.s2c(mut(0, 0x100, seqno))
    s.conv.pause(3 * S)           # full: the producer waits for the ack
    s.c2s(ack(MARKER_BYTES + 3 * MUT_BYTES, 20))
    s.s2c(mut(0, 0x100, 4, SNAPPY_DOC, 0x03))            # snappy + JSON, both enabled
    s.s2c(mut(0, 0x100, 5, XATTR_DOC, 0x05))             # xattr + JSON, include_xattrs
    s.s2c(mut(0, 0x100, 6))
    for n in (1, 2):              # idle: noops every 12 s (interval 10 s)
        s.conv.pause(12 * S)
        s.s2c(noop(10000000 + n))
        s.c2s(ok(0x5C, 10000000 + n))
    sent = len(mut(0, 0x100, 4, SNAPPY_DOC, 0x03)) + len(mut(0, 0x100, 5, XATTR_DOC, 0x05))
    s.c2s(ack(sent + MUT_BYTES, 21))
    s.conv.close()
    return s


def _legal_consumer_leg() -> Script:
    """ns_server → consumer memcached: the producer's data client→server, acks server→client."""
    s = Script(Endpoint("10.0.6.3", 43600), Endpoint("10.0.6.2", 11209),
               start_ns=T0 + 2_000_000)
    _hello(s, 1, SNAPPY, XATTR, JSON)
    s.c2s(dcp_open("replication:ns_1@10.0.6.1->ns_1@10.0.6.2:flow", 0x0, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, ("connection_buffer_size", "300"), ("enable_noop", "true"),
              ("set_noop_interval", "5"), consumer=True)
    _stream(s, 1, 0x200, consumer=True)
    s.c2s(marker(1, 0x200, 0, 3, "memory+checkpoint"))
    s.c2s(mut(1, 0x200, 1))
    s.c2s(mut(1, 0x200, 2))       # crosses the 300-byte window
    s.conv.pause(S)
    s.s2c(ack(MARKER_BYTES + 2 * MUT_BYTES, 0x30))
    s.c2s(mut(1, 0x200, 3))
    s.conv.pause(8 * S)
    s.c2s(noop(10000001))
    s.s2c(ok(0x5C, 10000001))
    s.s2c(ack(MUT_BYTES, 0x31))
    s.conv.close()
    return s


# --- the consumer's silence (dcp_idle_timeout) ---------------------------------------------

IDLE = 360 * S                  # engines/ep/configuration.json dcp_idle_timeout (default)
LATER = 100 * S                 # after the first connections of the same capture


def _idle_producer(port: int, name: str, start_ns: int, *controls, window=None) -> Script:
    """A producer connection with two streams (vb 5 and 6) whose markers and first items
    interleave."""
    s = Script(Endpoint("10.0.6.2", port), Endpoint("10.0.6.1", 11210), start_ns=start_ns)
    _hello(s, 1, JSON)
    s.c2s(dcp_open(name, 0x01, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, *controls)
    _stream(s, 5, 0x510)
    _stream(s, 6, 0x610)
    s.s2c(marker(5, 0x510, 0, 9, "memory+checkpoint"), marker(6, 0x610, 0, 9, "memory+checkpoint"),
          mut(5, 0x510, 1), mut(6, 0x610, 1))
    return s


def _idle_consumer_leg(port: int, name: str, start_ns: int) -> Script:
    """ns_server's proxy leg to a consumer memcached: the consumer enables noops and requests
    vb 7 and 8 server→client; markers, items and noops come client→server."""
    c = Script(Endpoint("10.0.6.3", port), Endpoint("10.0.6.2", 11209), start_ns=start_ns)
    _hello(c, 1, JSON)
    c.c2s(dcp_open(name, 0x0, 2))
    c.s2c(ok(0x50, 2))
    _controls(c, 3, ("enable_noop", "true"), ("set_noop_interval", "20"), consumer=True)
    _stream(c, 7, 0x710, consumer=True)
    _stream(c, 8, 0x810, consumer=True)
    c.c2s(marker(7, 0x710, 0, 9, "memory+checkpoint"), marker(8, 0x810, 0, 9, "memory+checkpoint"),
          mut(7, 0x710, 1), mut(8, 0x810, 1))
    return c


def _legal_late_answer() -> Script:
    """A noop answered 300 s late, before the timeout; the next one on time; the client
    closes."""
    s = _idle_producer(50640, "flow-legal-late", T0 + LATER, ("enable_noop", "true"),
                       ("set_noop_interval", "20"))
    s.conv.pause(20 * S)
    s.s2c(noop(10000001))
    s.conv.pause(150 * S)
    s.s2c(mut(5, 0x510, 2))        # the producer streams on while its noop is unanswered
    s.conv.pause(150 * S)
    s.c2s(ok(0x5C, 10000001))      # 300 s late: the idle timer had not run out
    s.s2c(mut(6, 0x610, 2))
    s.conv.pause(20 * S)
    s.s2c(noop(10000002))
    s.c2s(ok(0x5C, 10000002))
    s.conv.close()
    return s


def _legal_acks_keep_it_alive() -> Script:
    """A noop left unanswered for 500 s by a consumer whose buffer acks (every 100 s) reset
    the producer's idle timer (DcpProducer::bufferAcknowledgement); the server resets the
    connection."""
    s = _idle_producer(50641, "flow-legal-acks", T0 + LATER + S, ("connection_buffer_size", "4096"),
                       ("enable_noop", "true"), ("set_noop_interval", "20"))
    s.conv.pause(20 * S)
    s.s2c(noop(10000001))
    for seqno in (2, 3, 4, 5, 6):
        s.conv.pause(100 * S)
        s.s2c(mut(5 + seqno % 2, 0x510 + 0x100 * (seqno % 2), seqno))
        s.c2s(ack(MUT_BYTES, 20 + seqno))
    s.c2s(ok(0x5C, 10000001))
    s.conv.close("rst", initiator="s2c")
    return s


def _legal_without_noops() -> Script:
    """No enable_noop: a consumer silent for 400 s is not disconnected for it; the server
    closes the connection later, for its own reasons."""
    s = _idle_producer(50642, "flow-legal-no-noop", T0 + LATER + 2 * S)
    s.conv.pause(400 * S)
    s.s2c(mut(5, 0x510, 2), mut(6, 0x610, 2))
    s.conv.close(initiator="s2c")
    return s


def _legal_consumer_leg_late_answer() -> Script:
    c = _idle_consumer_leg(43640, "replication:ns_1@10.0.6.1->ns_1@10.0.6.2:idle",
                           T0 + LATER + 3 * S)
    c.conv.pause(20 * S)
    c.c2s(noop(10000001))
    c.conv.pause(200 * S)
    c.s2c(ok(0x5C, 10000001))      # 200 s late: before the timeout
    c.c2s(mut(7, 0x710, 2), mut(8, 0x810, 2))
    c.conv.close(initiator="s2c")
    return c


def flow_legal() -> list[Script]:
    return [_legal_producer(), _legal_consumer_leg(), _legal_late_answer(),
            _legal_acks_keep_it_alive(), _legal_without_noops(),
            _legal_consumer_leg_late_answer()]


# --- violations -----------------------------------------------------------------------------

def _violations_producer() -> Script:
    s = Script(Endpoint("10.0.6.12", 50610), Endpoint("10.0.6.1", 11210), start_ns=T0)
    _hello(s, 1, JSON)                                  # no Snappy, no Xattr
    s.c2s(dcp_open("flow-violations-producer", 0x01, 2))  # producer, no include_xattrs
    s.s2c(ok(0x50, 2))
    _controls(s, 3, ("connection_buffer_size", "300"), ("enable_noop", "true"),
              ("set_noop_interval", "4"))
    _stream(s, 2, 0x300)
    s.s2c(marker(2, 0x300, 0, 5, "memory+checkpoint"))
    s.s2c(mut(2, 0x300, 1))
    s.s2c(mut(2, 0x300, 2))       # crosses the window: 358 >= 300
    s.s2c(mut(2, 0x300, 3))       # VIOLATION flow-control-window-exceeded
    s.c2s(ack(MARKER_BYTES + 2 * MUT_BYTES, 20))
    s.c2s(ack(1000, 21))          # VIOLATION buffer-ack-exceeds-sent (157 unacked)
    s.s2c(mut(2, 0x300, 4, SNAPPY_DOC, 0x03))          # VIOLATION snappy without HELLO
    s.s2c(mut(2, 0x300, 5, XATTR_DOC, 0x05))           # VIOLATION xattr without the flag
    s.conv.pause(20 * S)          # > 2 * 4 s + 5 s without a noop
    s.s2c(noop(10000001))         # VIOLATION noop-interval-exceeded
    s.c2s(ok(0x5C, 10000001))
    s.c2s(ok(0x57, 0x999))        # VIOLATION response-without-request (consumer)
    s.s2c(ok(0x5E, 77))           # VIOLATION response-without-request (server)
    s.conv.close()
    return s


def _violations_consumer_leg() -> Script:
    s = Script(Endpoint("10.0.6.13", 43610), Endpoint("10.0.6.2", 11209),
               start_ns=T0 + 2_000_000)
    _hello(s, 1, JSON)
    s.c2s(dcp_open("replication:ns_1@10.0.6.1->ns_1@10.0.6.2:flow-v", 0x0, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, ("connection_buffer_size", "200"), consumer=True)
    _stream(s, 3, 0x400, consumer=True)
    s.c2s(marker(3, 0x400, 0, 2, "memory+checkpoint"))
    s.c2s(mut(3, 0x400, 1))       # crosses the 200-byte window: 201
    s.c2s(mut(3, 0x400, 2))       # VIOLATION flow-control-window-exceeded
    s.s2c(ack(MARKER_BYTES + 2 * MUT_BYTES, 0x30))
    s.conv.close()
    return s


def flow_undecided() -> list[Script]:
    """The capture starts after the negotiation (at the first snapshot marker): the window,
    the noop settings and the bytes sent before are unknown."""
    s = Script(Endpoint("10.0.6.14", 50620), Endpoint("10.0.6.1", 11210), start_ns=T0)
    _hello(s, 1, JSON)
    s.c2s(dcp_open("flow-undecided", 0x01, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, ("connection_buffer_size", "300"), ("enable_noop", "true"))
    _stream(s, 4, 0x500)
    s.s2c(marker(4, 0x500, 0, 2, "memory+checkpoint"), mut(4, 0x500, 1), mut(4, 0x500, 2))
    s.c2s(ack(MARKER_BYTES + 2 * MUT_BYTES, 40))     # INFO flow-control-undecided
    s.s2c(noop(10000001))         # never answered: the noop settings are not in the capture
    s.conv.pause(400 * S)
    s.s2c(marker(4, 0x500, 3, 3, "memory"), mut(4, 0x500, 3))
    s.conv.close(initiator="s2c")
    return [s]




def _violations_idle_disconnect() -> Script:
    """The consumer answers the first noop, never the second, and sends nothing else: 360 s
    after its answer the producer closes the connection (idle disconnect)."""
    s = _idle_producer(50650, "flow-violations-idle", T0 + LATER, ("enable_noop", "true"),
                       ("set_noop_interval", "20"))
    s.conv.pause(20 * S)
    s.s2c(noop(10000001))
    s.c2s(ok(0x5C, 10000001))      # the consumer's last message
    s.conv.pause(20 * S)
    s.s2c(noop(10000002))          # VIOLATION consumer-idle-timeout (never answered)
    s.conv.pause(100 * S)
    s.s2c(mut(5, 0x510, 2), mut(6, 0x610, 2))
    s.conv.pause(IDLE - 120 * S + S // 10)
    s.conv.close(initiator="s2c")  # maybeDisconnect, at the next connection manager run
    return s


def _violations_idle_consumer_leg() -> Script:
    """The consumer memcached never answers ns_server's noop: 360 s on, ns_server (the
    producer's side of this leg) closes the connection."""
    c = _idle_consumer_leg(43650, "replication:ns_1@10.0.6.1->ns_1@10.0.6.2:idle-v",
                           T0 + LATER + S)
    c.conv.pause(20 * S)
    c.c2s(noop(10000001))          # VIOLATION consumer-idle-timeout
    c.conv.pause(IDLE - 20 * S + S // 5)
    c.conv.close()                 # the client's FIN: ns_server, the producer's side
    return c


def _violations_idle_kept() -> Script:
    """The noop goes unanswered for 400 s and the producer keeps streaming: its
    dcp_idle_timeout is set above the default; the consumer's silence is still reported."""
    s = _idle_producer(50651, "flow-violations-kept", T0 + LATER + 2 * S, ("enable_noop", "true"),
                       ("set_noop_interval", "20"))
    s.conv.pause(20 * S)
    s.s2c(noop(10000001))          # VIOLATION consumer-idle-timeout
    s.conv.pause(400 * S)
    s.s2c(mut(5, 0x510, 2))
    s.c2s(ok(0x5C, 10000001))
    s.conv.close("rst")
    return s


def flow_violations() -> list[Script]:
    return [_violations_producer(), _violations_consumer_leg(), _violations_idle_disconnect(),
            _violations_idle_consumer_leg(), _violations_idle_kept()]


SPECS: tuple = (
    Spec("flow-legal", "flow-legal.pcap",
         "flow control that pauses at a full window and resumes on buffer acks, noops on time, "
         "Snappy/Xattr/JSON values as negotiated; a producer and a consumer connection",
         flow_legal),
    Spec("flow-violations", "flow-violations.pcap",
         "a producer past a full window (both roles), a buffer ack beyond the bytes sent, "
         "Snappy and Xattr values not enabled, a noop interval exceeded, answers to requests "
         "never made", flow_violations),
    Spec("flow-undecided", "flow-undecided.pcap",
         "capture started after the negotiation: buffer acks and noops whose window and "
         "interval are unknown (one info)", flow_undecided, _after_negotiation),
)
