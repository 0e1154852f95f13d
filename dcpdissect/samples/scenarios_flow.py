"""Flow-control, noop and datatype samples (engines/ep/src/dcp/producer.cc BufferLog,
maybeSendNoop; active_stream.cc makeResponseFromItem).

``flow-legal``: a producer connection (window 400 bytes, noops every 10 s, Snappy, Xattr and
JSON values as HELLO and DcpOpen enabled them) whose producer fills the window with the
message that crosses it, pauses until the consumer's buffer ack, resumes, then idles with
noops on time; and a consumer connection (ns_server's proxy leg: the data client→server, the
controls and buffer acks server→client) doing the same: no warning or error.

``flow-violations``: a producer connection that sends past a full window, is acked more than
it sent, sends Snappy and Xattr values the connection did not enable, stays silent beyond
twice its noop interval, and receives (and sends) answers to requests never made; a consumer
connection whose producer sends past the window. ``flow-undecided``: a capture that starts
after the negotiation, whose buffer ack cannot be judged (``flow-control-undecided``).
"""

from __future__ import annotations

import struct

from ..codec import encode
from .builder import T0, Script, Spec, dcp_open, failover, marker, ok, stream_req
from .builder import controls_exchange as _controls
from .builder import from_first_marker as _after_negotiation
from .builder import hello_exchange as _hello
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


def flow_legal() -> list[Script]:
    return [_legal_producer(), _legal_consumer_leg()]


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
    s.s2c(noop(10000001))         # answered after the capture ended
    s.conv.close()
    return [s]




def flow_violations() -> list[Script]:
    return [_violations_producer(), _violations_consumer_leg()]


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
