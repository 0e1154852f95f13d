"""Stream-semantics samples: markers versus data, OSO, consumer responses, Add Stream
correlation and resume fidelity across connections (listed in builder.SCENARIOS).

Each violation travels on its own vbucket of an otherwise ordinary conversation, so a
finding points at one message.
"""

from __future__ import annotations

import struct

from ..codec import encode
from .dsl import (
    T0, Script, Spec, dcp_open, doc, failover, marker, mutation, deletion, ok, stream_req,
)
from .netsynth import Endpoint

PRODUCER = Endpoint("10.0.2.1", 11210)
UUID = 0x5EED000000000000


def _open(s: Script, name: str, flags: int = 0x1) -> None:
    s.c2s(dcp_open(name, flags, 1))
    s.s2c(ok(0x50, 1))


def _stream(s: Script, vb: int, opaque: int | None = None, **kw) -> int:
    opaque = 0x100 + vb if opaque is None else opaque
    s.c2s(stream_req(vb, opaque, **kw))
    s.s2c(failover(opaque, (kw.get("uuid") or UUID + vb, 0)))
    return opaque


def _items(vb: int, opaque: int, *seqnos: int, key: str = "k") -> list[bytes]:
    return [mutation(vb, opaque, i, f"{key}{i}", doc(i)) for i in seqnos]


def _seqno_advanced(vb: int, opaque: int, seqno: int) -> bytes:
    return encode(0x64, {"by_seqno": seqno}, vbucket=vb, opaque=opaque)


def _oso(vb: int, opaque: int, flags: int) -> bytes:
    return encode(0x65, {"flags": flags}, vbucket=vb, opaque=opaque)


def _stream_end(vb: int, opaque: int, reason: int = 0) -> bytes:
    return encode(0x55, {"reason": reason}, vbucket=vb, opaque=opaque)


def _hello(opaque: int, *features: int) -> tuple[bytes, bytes]:
    value = struct.pack(f">{len(features)}H", *features)
    return (encode(0x1F, key=b"dcpdissect", value=value, opaque=opaque),
            ok(0x1F, opaque, value=value))


def stream_markers() -> list[Script]:
    """One consumer, one vbucket per marker/data rule."""
    s = Script(Endpoint("10.0.2.2", 50400), PRODUCER)
    _open(s, "stream-rules")
    s.c2s(encode(0x5E, key=b"change_streams", value=b"true", opaque=2))
    s.s2c(ok(0x5E, 2))
    mk = marker
    # vb 0: a mutation before any marker
    o = _stream(s, 0)
    s.s2c(*_items(0, o, 1))
    # vb 1: [0,5] left at 2, then [3,4]: end not increasing (and [0,5] incomplete)
    o = _stream(s, 1)
    s.s2c(mk(1, o, 0, 5, "memory+checkpoint"), *_items(1, o, 1, 2))
    s.s2c(mk(1, o, 3, 4, "memory+checkpoint"), *_items(1, o, 3, 4))
    # vb 2: [0,3] complete, then [3,6]: start overlaps the previous end
    o = _stream(s, 2)
    s.s2c(mk(2, o, 0, 3, "memory+checkpoint"), *_items(2, o, 1, 2, 3))
    s.s2c(mk(2, o, 3, 6, "memory+checkpoint"), *_items(2, o, 4, 5, 6))
    # vb 3: [0,3] complete, then [1,2]: behind the last seqno (R16)
    o = _stream(s, 3)
    s.s2c(mk(3, o, 0, 3, "memory+checkpoint"), *_items(3, o, 1, 2, 3))
    s.s2c(mk(3, o, 1, 2, "memory+checkpoint"))
    # vb 4: request snapshot [5,5], first marker starts at 4 (R17, MB-59759)
    o = _stream(s, 4, start=5, uuid=UUID + 4)
    s.s2c(mk(4, o, 4, 8, "memory+checkpoint"), *_items(4, o, 6, 7, 8))
    # vb 5: seqno 5 outside [0,3]
    o = _stream(s, 5)
    s.s2c(mk(5, o, 0, 3, "memory+checkpoint"), *_items(5, o, 1, 2, 5))
    # vb 6: seqno 2 after 3
    o = _stream(s, 6)
    s.s2c(mk(6, o, 0, 5, "memory+checkpoint"), *_items(6, o, 1, 3, 2, 4, 5))
    # vb 7: STREAM_END(Ok) before the snapshot [0,3] reached 3
    o = _stream(s, 7)
    s.s2c(mk(7, o, 0, 3, "memory+checkpoint"), *_items(7, o, 1, 2), _stream_end(7, o))
    # vb 8: seqno 3 after SeqnoAdvanced(3)
    o = _stream(s, 8)
    s.s2c(mk(8, o, 0, 5, "memory+checkpoint"), *_items(8, o, 1), _seqno_advanced(8, o, 3),
          *_items(8, o, 3), _seqno_advanced(8, o, 5))
    # vb 9: key k1 mutated twice in [0,3]; twice again in [4,5] which may hold duplicates
    o = _stream(s, 9)
    s.s2c(mk(9, o, 0, 3, "memory+checkpoint"), mutation(9, o, 1, "k1", doc(1)),
          mutation(9, o, 2, "k2", doc(2)), mutation(9, o, 3, "k1", doc(3)))
    s.s2c(mk(9, o, 4, 5, "memory+checkpoint+may_contain_duplicates"),
          mutation(9, o, 4, "k1", doc(4)), mutation(9, o, 5, "k1", doc(5)))
    # vb 10: memory marker without CHK whose start is not its first item's seqno
    o = _stream(s, 10)
    s.s2c(mk(10, o, 0, 2, "memory+checkpoint"), *_items(10, o, 1, 2))
    s.s2c(mk(10, o, 3, 5, "memory"), *_items(10, o, 4, 5))
    # vb 11 (no finding): a non-history disk marker then a History one with the same end
    o = _stream(s, 11)
    s.s2c(mk(11, o, 0, 6, "disk+checkpoint"), *_items(11, o, 1, 2))
    s.s2c(mk(11, o, 3, 6, "disk+checkpoint+history+may_contain_duplicates"),
          mutation(11, o, 3, "k1", doc(3)), mutation(11, o, 4, "k1", doc(4)),
          *_items(11, o, 5, 6))
    s.conv.close()
    return [s]


def stream_oso() -> list[Script]:
    """OSO snapshots: a correct one (SeqnoAdvanced inside), a marker inside one, an
    unpaired end."""
    s = Script(Endpoint("10.0.2.2", 50401), PRODUCER)
    _open(s, "stream-oso")
    req, rsp = _hello(2, 0x12)
    s.c2s(req)
    s.s2c(rsp)
    s.c2s(encode(0x5E, key=b"enable_out_of_order_snapshots", value=b"true", opaque=3))
    s.s2c(ok(0x5E, 3))
    o = _stream(s, 0)
    s.s2c(_oso(0, o, 1), mutation(0, o, 5, "a", doc(5)), mutation(0, o, 3, "b", doc(3)),
          mutation(0, o, 4, "c", doc(4)), _seqno_advanced(0, o, 6), _oso(0, o, 2))
    s.s2c(marker(0, o, 7, 8, "memory+checkpoint"), *_items(0, o, 7, 8))
    o = _stream(s, 1)
    s.s2c(_oso(1, o, 1), mutation(1, o, 2, "a", doc(2)), marker(1, o, 0, 3, "disk+checkpoint"),
          _oso(1, o, 2))
    o = _stream(s, 2)
    s.s2c(marker(2, o, 0, 1, "memory+checkpoint"), *_items(2, o, 1), _oso(2, o, 2))
    s.conv.close()
    return [s]


def stream_consumer() -> list[Script]:
    """Consumer-side messages: an error response to a mutation (then the connection
    closes), a response to a marker without Ack, a marker sent by the client, and a
    stream-request value without HELLO Collections."""
    a = Script(Endpoint("10.0.2.2", 50410), PRODUCER, start_ns=T0)
    _open(a, "stream-consumer-a")
    req, rsp = _hello(2, 0x06)
    a.c2s(req)
    a.s2c(rsp)
    o = _stream(a, 0, value=b'{"collections":["0"]}')
    a.s2c(*_items(0, o, 1))
    a.c2s(ok(0x57, o, status=0x22))
    a.conv.close("fin", initiator="s2c")
    b = Script(Endpoint("10.0.2.2", 50411), PRODUCER, start_ns=T0 + 10_000_000)
    _open(b, "stream-consumer-b")
    o = _stream(b, 1)
    b.s2c(marker(1, o, 0, 1, "memory+checkpoint"), *_items(1, o, 1))
    b.c2s(ok(0x56, o))
    b.c2s(marker(1, o, 2, 3, "memory"))
    b.conv.close()
    return [a, b]


def stream_add_stream() -> list[Script]:
    """ns_server adds four streams on a consumer; the consumer's answers break one Add
    Stream correlation rule each (vb 5 new opaque, vb 6 ROLLBACK, vb 7 later opaque,
    vb 8 status)."""
    name = "replication:ns_1@10.0.2.1->ns_1@10.0.2.2:beer"
    ns = Script(Endpoint("10.0.2.2", 43400), Endpoint("10.0.2.2", 11209),
                start_ns=T0, step_ns=10_000)
    cons = Script(Endpoint("10.0.2.2", 50420), Endpoint("10.0.2.1", 11209),
                  start_ns=T0 + 2_000_000, step_ns=10_000)
    ns.c2s(dcp_open(name, 0x0, 1))
    ns.s2c(ok(0x50, 1))
    for a, vb in ((2, 5), (3, 6), (4, 7), (5, 8)):
        ns.c2s(encode(0x51, {"flags": 0}, vbucket=vb, opaque=a))
    _open(cons, name, 0x25)
    for vb, b in ((5, 0x2000), (6, 0x2002), (7, 0x2003)):
        _stream(cons, vb, b)
    cons.c2s(stream_req(8, 0x2004))
    cons.s2c(ok(0x53, 0x2004, status=0x07))
    cons.s2c(marker(7, 0x2003, 0, 1, "memory+checkpoint"), mutation(7, 0x9999, 1, "k1", doc(1)))
    ns.conv.pause(10_000_000)
    ns.s2c(ok(0x51, 2, fields={"new_opaque": 0x2001}))
    ns.s2c(ok(0x51, 3, fields={"new_opaque": 0x2002}, status=0x23))
    ns.s2c(ok(0x51, 4, fields={"new_opaque": 0x2003}))
    ns.s2c(ok(0x51, 5, fields={"new_opaque": 0x2004}))
    for s in (ns, cons):
        s.conv.close()
    return [ns, cons]


# --- the first marker's start (active_stream.cc: min(snap_start, computed start)) ---------

FROM_LATEST = 0x40
FILTER_8 = b'{"collections":["8"]}'


def _first_marker_producer(name: str, port: int) -> Script:
    s = Script(Endpoint("10.0.2.2", port), PRODUCER, start_ns=T0)
    _open(s, name)
    req, rsp = _hello(2, 0x12)                              # HELLO Collections
    s.c2s(req)
    s.s2c(rsp)
    s.c2s(encode(0x5E, key=b"enable_out_of_order_snapshots", value=b"true", opaque=3))
    s.s2c(ok(0x5E, 3))
    return s


def _first_marker_consumer_leg(name: str, port: int) -> Script:
    """ns_server's proxy leg to a consumer memcached: the consumer's stream requests travel
    server→client, the producer's markers and items client→server."""
    c = Script(Endpoint("10.0.2.3", port), Endpoint("10.0.2.4", 11209), start_ns=T0 + 1_000_000)
    c.c2s(dcp_open(name, 0x0, 1))
    c.s2c(ok(0x50, 1))
    return c


def _consumer_stream(c: Script, vb: int, opaque: int, **kw) -> int:
    c.s2c(stream_req(vb, opaque, **kw))
    c.c2s(failover(opaque, (kw.get("uuid") or UUID + vb, 0)))
    return opaque


def _ckey(key: str, cid: int = 0) -> str:
    return chr(cid) + key                                   # leb128 of a collection id < 128


def first_marker_legal() -> list[Script]:
    """First markers as kv_engine sends them, vbuckets interleaved: a resume whose marker
    starts at snap_start below start; a backfill from 0; FromLatest (the high seqno, below the
    first item); a collection filter that held the whole first snapshot back (MB-47009: the
    marker from snap_start and a SeqnoAdvanced); an OSO backfill, after which the first 0x56
    marker is not the stream's first; and on a consumer connection a resume and a backfill.
    The producer closes its connection; the consumer's connection is still open at the end."""
    s = _first_marker_producer("first-marker-legal", 50440)
    o0 = _stream(s, 0, start=5, uuid=UUID, snap_start=3, snap_end=5)
    o1 = _stream(s, 1)
    o2 = _stream(s, 2, flags=FROM_LATEST)
    o3 = _stream(s, 3, value=FILTER_8)
    o4 = _stream(s, 4, value=FILTER_8)
    k = _ckey
    s.s2c(marker(0, o0, 3, 8, "memory+checkpoint"), marker(1, o1, 0, 4, "disk+checkpoint"),
          mutation(0, o0, 6, k("a6"), doc(6)), mutation(1, o1, 1, k("b1"), doc(1)),
          marker(2, o2, 10, 12, "memory+checkpoint"), mutation(1, o1, 2, k("b2"), doc(2)),
          mutation(2, o2, 11, k("c11"), doc(11)), mutation(0, o0, 7, k("a7"), doc(7)),
          marker(3, o3, 0, 4, "memory+checkpoint"), _seqno_advanced(3, o3, 4),
          _oso(4, o4, 1), mutation(4, o4, 3, k("m", 8), doc(3)),
          mutation(4, o4, 1, k("k", 8), doc(1)), _oso(4, o4, 2),
          mutation(1, o1, 3, k("b3"), doc(3)), mutation(1, o1, 4, k("b4"), doc(4)),
          mutation(2, o2, 12, k("c12"), doc(12)), mutation(0, o0, 8, k("a8"), doc(8)),
          marker(3, o3, 5, 6, "memory+checkpoint"), mutation(3, o3, 6, k("f6", 8), doc(6)),
          marker(4, o4, 7, 9, "memory+checkpoint"), mutation(4, o4, 8, k("n", 8), doc(8)),
          mutation(4, o4, 9, k("o", 8), doc(9)))
    s.conv.close(initiator="s2c")
    c = _first_marker_consumer_leg("replication:ns_1@10.0.2.1->ns_1@10.0.2.4:first", 43440)
    o5 = _consumer_stream(c, 5, 0x500, start=3, uuid=UUID + 5, snap_start=2, snap_end=3)
    o6 = _consumer_stream(c, 6, 0x600)
    c.c2s(marker(5, o5, 2, 5, "memory+checkpoint"), marker(6, o6, 0, 2, "disk+checkpoint"),
          mutation(6, o6, 1, "d1", doc(1)), mutation(5, o5, 4, "e4", doc(4)),
          mutation(5, o5, 5, "e5", doc(5)), mutation(6, o6, 2, "d2", doc(2)))
    return [s, c]


def first_marker_violations() -> list[Script]:
    """First markers above the requested snap_start, one per vbucket, interleaved: from 0 at
    the first item; a resume at start instead of snap_start; FromLatest at its first item;
    a collection-filtered stream whose first items were held back (kv_engine still starts at
    snap_start); and on a consumer connection from 0 at the first item."""
    s = _first_marker_producer("first-marker-violations", 50441)
    o10 = _stream(s, 10)
    o11 = _stream(s, 11, start=5, uuid=UUID + 11, snap_start=3, snap_end=5)
    o12 = _stream(s, 12, flags=FROM_LATEST)
    o13 = _stream(s, 13, value=FILTER_8)
    k = _ckey
    each = [marker(10, o10, 1, 3, "memory+checkpoint"),           # VIOLATION (snap_start 0)
            marker(11, o11, 5, 9, "disk+checkpoint"),             # VIOLATION (snap_start 3)
            mutation(10, o10, 1, k("a1"), doc(1)), mutation(11, o11, 6, k("b6"), doc(6)),
            marker(12, o12, 11, 12, "memory"),                    # VIOLATION (its first item)
            mutation(12, o12, 11, k("c11"), doc(11)), mutation(10, o10, 2, k("a2"), doc(2)),
            marker(13, o13, 3, 4, "memory+checkpoint"),           # VIOLATION (snap_start 0)
            mutation(13, o13, 4, k("d4", 8), doc(4)), mutation(10, o10, 3, k("a3"), doc(3)),
            mutation(12, o12, 12, k("c12"), doc(12))]
    for m in each:
        s.s2c(m)                                      # one frame per message
    for i in (7, 8, 9):
        s.s2c(mutation(11, o11, i, k(f"b{i}"), doc(i)))
    s.conv.close()
    c = _first_marker_consumer_leg("replication:ns_1@10.0.2.1->ns_1@10.0.2.4:first-v", 43441)
    o14 = _consumer_stream(c, 14, 0xE00)
    c.c2s(marker(14, o14, 1, 2, "memory+checkpoint"))             # VIOLATION (snap_start 0)
    c.c2s(mutation(14, o14, 1, "e1", doc(1)), mutation(14, o14, 2, "e2", doc(2)))
    c.conv.close("rst", initiator="s2c")
    return [s, c]


# --- resume fidelity (DCP design discussion: "Why does a client need to provide snapshot
# start & end seqnos to resume a stream?") ---------------------------------------------

RESUME_NAME = "resume-demo"
AAAA, BBBB = 0x1111, 0x2222


def _first_connection() -> Script:
    """The consumer holds 1:SET(A) and resumes from 1: snapshot start=1 end=4 under uuid
    AAAA; items 2:SET(B), 3:SET(C); disconnect."""
    s = Script(Endpoint("10.0.2.2", 50430), PRODUCER, start_ns=T0)
    _open(s, RESUME_NAME)
    s.c2s(stream_req(0, 0x10, start=1, uuid=AAAA))
    s.s2c(failover(0x10, (AAAA, 0)))
    s.s2c(marker(0, 0x10, 1, 4, "memory+checkpoint"), mutation(0, 0x10, 2, "B", doc(2)),
          mutation(0, 0x10, 3, "C", doc(3)))
    s.conv.close()
    return s


def _reconnect(request: bytes, *answers: bytes) -> Script:
    """After a restart the vbucket has branched (BBBB at 3): the consumer reconnects,
    reads the failover log and resumes."""
    s = Script(Endpoint("10.0.2.2", 50431), PRODUCER, start_ns=T0 + 50_000_000)
    _open(s, RESUME_NAME)
    s.c2s(encode(0x54, vbucket=0, opaque=0x11))
    s.s2c(encode(0x54, {"failover_log": [dict(vbucket_uuid=BBBB, seqno=3),
                                         dict(vbucket_uuid=AAAA, seqno=0)]},
                 request=False, opaque=0x11))
    s.c2s(request)
    s.s2c(*answers)
    s.conv.close()
    return s


def resume_correct() -> list[Script]:
    """uuid 1111 snapshot {1,4} start 3: the server sees the branch and rolls back to 1."""
    return [_first_connection(),
            _reconnect(stream_req(0, 0x20, start=3, uuid=AAAA, snap_start=1, snap_end=4),
                       encode(0x53, {"rollback_seqno": 1}, request=False, status=0x23,
                              opaque=0x20))]


def resume_collapsed() -> list[Script]:
    """uuid 1111 snapshot {3,3} start 3: no rollback, 4:DEL(A) and 1:SET(A) are lost."""
    return [_first_connection(),
            _reconnect(stream_req(0, 0x20, start=3, uuid=AAAA, snap_start=3, snap_end=3),
                       failover(0x20, (BBBB, 3), (AAAA, 0)),
                       marker(0, 0x20, 3, 5, "memory+checkpoint"),
                       mutation(0, 0x20, 4, "D", doc(4)), deletion(0, 0x20, 5, "B"))]


def resume_beyond() -> list[Script]:
    """The consumer received up to 3 but resumes at 4."""
    return [_first_connection(),
            _reconnect(stream_req(0, 0x20, start=4, uuid=AAAA, snap_start=1, snap_end=4),
                       encode(0x53, {"rollback_seqno": 1}, request=False, status=0x23,
                              opaque=0x20))]


SPECS: tuple = (
    Spec("stream-markers", "stream-markers.pcap",
         "markers versus data: one vbucket per rule (data before marker, end not increasing, "
         "overlap, behind last seqno, below requested, outside, out of order, incomplete, "
         "SeqnoAdvanced, duplicate key, start-seqno convention)", stream_markers),
    Spec("stream-oso", "stream-oso.pcap",
         "OSO: a correct snapshot with SeqnoAdvanced inside, a 0x56 inside one, an unpaired end",
         stream_oso),
    Spec("stream-consumer", "stream-consumer.pcap",
         "consumer ERANGE to a mutation then the producer closes; marker response without Ack; "
         "marker from the client; stream-request value without HELLO Collections",
         stream_consumer),
    Spec("stream-add-stream", "stream-add-stream.pcap",
         "Add Stream correlation: wrong new opaque, ROLLBACK forwarded, stream messages with "
         "another opaque, status not mirrored", stream_add_stream),
    Spec("stream-first-marker-legal", "stream-first-marker-legal.pcap",
         "first markers as kv_engine sends them (min(snap_start, computed start)): a resume, a "
         "backfill, FromLatest, a wholly filtered first snapshot, the marker after an OSO "
         "backfill; a producer and a consumer connection", first_marker_legal),
    Spec("stream-first-marker", "stream-first-marker.pcap",
         "first markers above the requested snap_start: at the first item, at start, "
         "FromLatest at its first item, a collection filter; a producer and a consumer "
         "connection", first_marker_violations),
    Spec("resume-correct", "resume-correct.pcap",
         "resume after a partial snapshot: uuid 1111 snapshot {1,4} start 3 (rolled back to 1)",
         resume_correct),
    Spec("resume-collapsed", "resume-collapsed.pcap",
         "resume after a partial snapshot collapsed to {3,3} start 3: no rollback, data lost",
         resume_collapsed),
    Spec("resume-beyond", "resume-beyond.pcap",
         "resume at start 4 after receiving only up to seqno 3", resume_beyond),
)
