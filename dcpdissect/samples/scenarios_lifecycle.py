"""Stream-lifecycle samples: after the end, the close, a takeover or a dropped collection;
change-stream (history) snapshots (listed in builder.SCENARIOS).

``lifecycle-legal``: a Slow end and a correct re-request, a takeover that ends cleanly, a
close answered then silence (one message in flight before the response), a StreamEnd before
a close answered KEY_ENOENT, history snapshots with MayContainDuplicates and a duplicate, a
dropped collection with nothing of it after; with send_stream_end_on_client_close_stream, on
a producer connection and on a consumer connection (the controls and the CloseStream
server→client), closed streams that drain up to their StreamEnd(Closed) while other vbuckets
go on. The connections end with a FIN from either side and an RST.
``lifecycle-violations``: each rule on its own vbucket, the vbuckets interleaved, on a
producer connection and on a consumer connection (data client→server): among them a
StreamEnd(Closed) after the close response without the control (both roles) and a message
after the StreamEnd(Closed) a drained close ended with.
``lifecycle-undecided``: a capture started after the negotiation, data after a close.
"""

from __future__ import annotations

import struct

from ..codec import encode
from .dsl import T0, Script, Spec, controls_exchange, dcp_open, failover, marker, ok, stream_req
from .dsl import from_first_marker as _after_negotiation
from .netsynth import Endpoint
from .scenarios_validator import ckey

PRODUCER = Endpoint("10.0.7.1", 11210)
UUID = 0x11FE000000000000
COLLECTIONS = 0x12
TAKEOVER = 0x01
HISTORY_DUP = "disk+checkpoint+history+may_contain_duplicates"


def mut(vb: int, opaque: int, seqno: int, key: bytes) -> bytes:
    return encode(0x57, dict(by_seqno=seqno, rev_seqno=1, flags=0, expiration=0), key=key,
                  value=b'{"v":%d}' % seqno, vbucket=vb, opaque=opaque, datatype=0x01,
                  cas=0x17A0000000000000 + seqno)


def end(vb: int, opaque: int, reason: int = 0) -> bytes:
    return encode(0x55, {"reason": reason}, vbucket=vb, opaque=opaque)


def set_vb(vb: int, opaque: int, state: int) -> bytes:
    return encode(0x5B, {"state": state}, vbucket=vb, opaque=opaque)


def close(vb: int, opaque: int) -> bytes:
    return encode(0x52, vbucket=vb, opaque=opaque)


def drop(vb: int, opaque: int, seqno: int, cid: int) -> bytes:
    value = struct.pack(">QII", 7, 0, cid)       # DropEventDcpData: uid, scope, collection
    return encode(0x5F, {"by_seqno": seqno, "event": 1, "version": 0}, key=b"",
                  value=value, vbucket=vb, opaque=opaque)


def seqno_advanced(vb: int, opaque: int, seqno: int) -> bytes:
    return encode(0x64, {"by_seqno": seqno}, vbucket=vb, opaque=opaque)


def _producer_conn(client: Endpoint, name: str, *controls: str) -> Script:
    s = Script(client, PRODUCER, start_ns=T0)
    value = struct.pack(">H", COLLECTIONS)
    s.c2s(encode(0x1F, key=b"lifecycle", value=value, opaque=1))
    s.s2c(ok(0x1F, 1, value=value))
    s.c2s(dcp_open(name, 0x1, 2))
    s.s2c(ok(0x50, 2))
    for i, key in enumerate(controls):
        s.c2s(encode(0x5E, key=key.encode(), value=b"true", opaque=3 + i))
        s.s2c(ok(0x5E, 3 + i))
    return s


def _stream(s: Script, vb: int, opaque: int, start: int = 0, consumer=False, **kw) -> int:
    ask, answer = (s.s2c, s.c2s) if consumer else (s.c2s, s.s2c)
    ask(stream_req(vb, opaque, start=start, uuid=UUID + vb if start else 0, **kw))
    answer(failover(opaque, (UUID + vb, 0)))
    return opaque


def _consumer_conn(client: Endpoint, server: Endpoint, name: str, start_ns: int,
                   *controls: str) -> Script:
    """ns_server's proxy leg to a consumer memcached: the consumer sends its controls (and
    stream requests, CloseStreams) server→client, the producer's messages come client→server."""
    c = Script(client, server, start_ns=start_ns)
    c.c2s(dcp_open(name, 0x0, 1))
    c.s2c(ok(0x50, 1))
    controls_exchange(c, 2, *((key, "true") for key in controls), consumer=True)
    return c


def each(send, *frames: bytes) -> None:
    """One frame per message: a finding's frame names its message."""
    for f in frames:
        send(f)


def k(name: str, cid: int = 0) -> bytes:
    return ckey(cid, name)


# --- legal --------------------------------------------------------------------------------

def lifecycle_legal() -> list[Script]:
    s = _producer_conn(Endpoint("10.0.7.2", 50700), "lifecycle-legal", "change_streams")
    # vb 0: StreamEnd(Slow), then a correct re-request from where it stopped
    o = _stream(s, 0, 0x100)
    s.s2c(marker(0, o, 0, 2, "memory+checkpoint"), mut(0, o, 1, k("a1")), mut(0, o, 2, k("a2")),
          end(0, o, 4))
    o = _stream(s, 0, 0x101, start=2)
    s.s2c(marker(0, o, 2, 4, "memory+checkpoint"), mut(0, o, 3, k("a3")), mut(0, o, 4, k("a4")))
    # vb 1: takeover: pending, acked, the rest, active, acked, StreamEnd(Ok)
    o = _stream(s, 1, 0x110, flags=TAKEOVER)
    s.s2c(marker(1, o, 0, 1, "memory+checkpoint"), mut(1, o, 1, k("t1")), set_vb(1, o, 3))
    s.c2s(ok(0x5B, o))
    s.s2c(marker(1, o, 2, 2, "memory+checkpoint"), mut(1, o, 2, k("t2")), set_vb(1, o, 1))
    s.c2s(ok(0x5B, o))
    s.s2c(end(1, o, 0))
    # vb 2: a close; one mutation in flight before the response, then silence
    o = _stream(s, 2, 0x120)
    s.s2c(marker(2, o, 0, 3, "memory+checkpoint"), mut(2, o, 1, k("c1")))
    s.c2s(close(2, 0x121))
    s.s2c(mut(2, o, 2, k("c2")), ok(0x52, 0x121))
    # vb 3: a disk History snapshot with MayContainDuplicates repeats a key; then memory
    o = _stream(s, 3, 0x130)
    s.s2c(marker(3, o, 0, 3, HISTORY_DUP),              # V1: no sync replication negotiated
          mut(3, o, 1, k("h")), mut(3, o, 2, k("h")), mut(3, o, 3, k("h")),
          marker(3, o, 4, 5, "memory+checkpoint+history"), mut(3, o, 4, k("h")),
          mut(3, o, 5, k("g")))
    # vb 4: collection 8 dropped at seqno 2; only collection 9 after
    o = _stream(s, 4, 0x140)
    s.s2c(marker(4, o, 0, 4, "memory+checkpoint"), mut(4, o, 1, k("x", 8)), drop(4, o, 2, 8),
          mut(4, o, 3, k("x", 9)), mut(4, o, 4, k("y", 9)))
    # vb 5: the stream ends at its end seqno; a CloseStream crossing the StreamEnd finds no
    # stream (KEY_ENOENT)
    o = _stream(s, 5, 0x150, end=1)
    s.s2c(marker(5, o, 0, 1, "memory+checkpoint"), mut(5, o, 1, k("e1")), end(5, o, 0))
    s.c2s(close(5, 0x151))
    s.s2c(ok(0x52, 0x151, status=0x01))
    s.conv.close(initiator="s2c")
    return [s, _legal_drain_producer(), _legal_drain_consumer()]


def _legal_drain_producer() -> Script:
    """send_stream_end_on_client_close_stream: vb 6 drains to its StreamEnd(Closed) while
    vb 7 goes on; the client resets the connection."""
    s = _producer_conn(Endpoint("10.0.7.2", 50704), "lifecycle-legal-drain",
                       "send_stream_end_on_client_close_stream")
    o6, o7 = _stream(s, 6, 0x160), _stream(s, 7, 0x170)
    each(s.s2c, marker(6, o6, 0, 4, "memory+checkpoint"), marker(7, o7, 0, 3, "memory+checkpoint"),
         mut(6, o6, 1, k("d1")), mut(7, o7, 1, k("f1")))
    s.c2s(close(6, 0x161))
    each(s.s2c, mut(6, o6, 2, k("d2")), ok(0x52, 0x161),     # in flight, then answered
         mut(7, o7, 2, k("f2")), mut(6, o6, 3, k("d3")),     # the closed stream drains
         end(6, o6, 1), mut(7, o7, 3, k("f3")))              # StreamEnd(Closed)
    s.conv.close("rst")
    return s


def _legal_drain_consumer() -> Script:
    """The same on a consumer connection: vb 8 closed by the consumer memcached drains while
    vb 9 goes on; the connection ends with the server's FIN."""
    c = _consumer_conn(Endpoint("10.0.7.4", 50705), Endpoint("10.0.7.5", 11209),
                       "replication:lifecycle-legal", T0 + 2 * 10**9,
                       "send_stream_end_on_client_close_stream")
    o8 = _stream(c, 8, 0x180, consumer=True)
    o9 = _stream(c, 9, 0x190, consumer=True)
    each(c.c2s, marker(8, o8, 0, 3, "memory+checkpoint"), marker(9, o9, 0, 2, "memory+checkpoint"),
         mut(8, o8, 1, b"g1"), mut(9, o9, 1, b"h1"))
    c.s2c(close(8, 0x181))
    each(c.c2s, ok(0x52, 0x181), mut(8, o8, 2, b"g2"), mut(9, o9, 2, b"h2"), end(8, o8, 1))
    c.conv.close(initiator="s2c")
    return c


# --- violations ---------------------------------------------------------------------------

def lifecycle_violations() -> list[Script]:
    s = _producer_conn(Endpoint("10.0.7.3", 50701), "lifecycle-violations", "change_streams")
    o10, o11, o12, o13 = (_stream(s, vb, 0x200 + vb) for vb in (10, 11, 12, 13))
    o14, o15 = _stream(s, 14, 0x20E), _stream(s, 15, 0x20F, end=2)
    o16, o17 = _stream(s, 16, 0x210), _stream(s, 17, 0x211)
    each(s.s2c, marker(10, o10, 0, 1, "memory+checkpoint"), marker(11, o11, 0, 1, "memory+checkpoint"),
          mut(10, o10, 1, k("a")), marker(12, o12, 0, 3, "memory+checkpoint"),
          mut(11, o11, 1, k("b")), end(10, o10, 4),                # vb 10: Slow
          mut(12, o12, 1, k("c")), marker(13, o13, 0, 2, "memory+checkpoint"),
          mut(10, o10, 2, k("a2")),                                # after Slow: end
          mut(13, o13, 1, k("d")), end(11, o11, 7),                # vb 11: FilterEmpty
          set_vb(13, o13, 1),                                      # vb 13: takeover done
          marker(11, o11, 2, 2, "memory"))                         # after FilterEmpty: end
    s.c2s(close(12, 0x2FC))
    each(s.s2c, mut(12, o12, 2, k("c2")), ok(0x52, 0x2FC),              # in flight, then answered
          mut(13, o13, 2, k("d2")),                                # after takeover
          mut(12, o12, 3, k("c3")),                                # after close
          end(13, o13, 0), mut(13, o13, 3, k("d3")),               # after the takeover's end
          marker(14, o14, 0, 3, "memory+checkpoint"), mut(14, o14, 1, k("x", 8)),
          marker(15, o15, 0, 2, "memory+checkpoint+history"), mut(15, o15, 1, k("h")),
          drop(14, o14, 2, 8), mut(15, o15, 2, k("h")),            # History: duplicate
          mut(14, o14, 3, k("x3", 8)),                              # dropped collection
          end(15, o15, 0), seqno_advanced(15, o15, 3),             # after Ok at the end
          marker(16, o16, 0, 1, "memory+checkpoint"), end(16, o16, 5),    # BackfillFail
          end(17, o17, 8), mut(16, o16, 1, k("e")),                # after BackfillFail
          mut(17, o17, 1, k("f")))                                 # after LostPrivileges
    o18 = _stream(s, 18, 0x212)
    each(s.s2c, marker(18, o18, 0, 2, "memory+checkpoint"), mut(18, o18, 1, k("g")))
    s.c2s(close(18, 0x2FD))
    each(s.s2c, ok(0x52, 0x2FD), end(18, o18, 1))                  # StreamEnd after close
    s.conv.close()
    # a consumer connection: ns_server (client) sends the data to the consumer memcached
    c = _consumer_conn(Endpoint("10.0.7.4", 50702), Endpoint("10.0.7.5", 11209),
                       "replication:lifecycle", T0 + 10**9)
    for vb, o in ((20, 0x300), (21, 0x301), (22, 0x302)):
        _stream(c, vb, o, consumer=True)
    each(c.c2s, marker(20, 0x300, 0, 1, "memory+checkpoint"), marker(21, 0x301, 0, 1, "memory+checkpoint"),
          mut(20, 0x300, 1, b"p"), end(20, 0x300, 2),             # StateChanged
          mut(21, 0x301, 1, b"q"), set_vb(21, 0x301, 1),
          mut(20, 0x300, 2, b"p2"),                                # after StateChanged
          marker(21, 0x301, 2, 2, "memory"),                       # after takeover
          marker(22, 0x302, 0, 2, "memory+checkpoint"), mut(22, 0x302, 1, b"r"))
    c.s2c(close(22, 0x3FF))
    each(c.c2s, ok(0x52, 0x3FF), end(22, 0x302, 1))                # StreamEnd after close
    c.conv.close()
    return [s, c, _violations_after_drain()]


def _violations_after_drain() -> Script:
    """With send_stream_end_on_client_close_stream: vb 19 drains to its StreamEnd(Closed),
    then a message of it follows; vb 24 goes on."""
    s = _producer_conn(Endpoint("10.0.7.3", 50706), "lifecycle-violations-drain",
                       "send_stream_end_on_client_close_stream")
    o19, o24 = _stream(s, 19, 0x213), _stream(s, 24, 0x218)
    each(s.s2c, marker(19, o19, 0, 3, "memory+checkpoint"), marker(24, o24, 0, 2, "memory+checkpoint"),
         mut(19, o19, 1, k("i")))
    s.c2s(close(19, 0x2FE))
    each(s.s2c, ok(0x52, 0x2FE), mut(19, o19, 2, k("i2")), mut(24, o24, 1, k("j")),
         end(19, o19, 1), mut(19, o19, 3, k("i3")),             # after StreamEnd(Closed)
         mut(24, o24, 2, k("j2")))
    s.conv.close()
    return s


# --- undecided ----------------------------------------------------------------------------

def lifecycle_undecided() -> list[Script]:
    s = _producer_conn(Endpoint("10.0.7.6", 50703), "lifecycle-undecided")
    o = _stream(s, 5, 0x150)
    s.s2c(marker(5, o, 0, 3, "memory+checkpoint"), mut(5, o, 1, k("u1")))
    # one segment with a second client message: the mid-stream decoder syncs on the pair
    s.c2s(close(5, 0x151), close(6, 0x152))
    each(s.s2c, ok(0x52, 0x151), mut(5, o, 2, k("u2")))
    s.conv.close()
    return [s]




SPECS: tuple = (
    Spec("lifecycle-legal", "lifecycle-legal.pcap",
         "stream ends and closes as kv_engine does them: Slow end and re-request, takeover, "
         "close with a message in flight, history snapshots with 0x20, a dropped collection",
         lifecycle_legal),
    Spec("lifecycle-violations", "lifecycle-violations.pcap",
         "data after StreamEnd (Slow, FilterEmpty, Ok, BackfillFail, LostPrivileges, "
         "StateChanged), after a close response, after a takeover, for a dropped collection, "
         "a History snapshot repeating a key; a consumer connection", lifecycle_violations),
    Spec("lifecycle-undecided", "lifecycle-undecided.pcap",
         "capture started after the negotiation: data after a close response is undecided",
         lifecycle_undecided, _after_negotiation),
)
