"""Negotiation samples: what the DcpControl exchange (and HELLO, DcpOpen) allows, and the
consumer's responses the producer tolerates (DcpProducer::handleResponse).

``controls-legal``: producer connections (sync replication with V2.0/V2.2 markers, change
streams, expiry opcode, v7 status codes; OSO with SeqnoAdvanced then an overlapping memory
marker; stream ids) and a consumer connection (ns_server's proxy leg: the consumer memcached
sends the controls and the stream requests server→client, the data travels client→server),
with several vbuckets interleaved: no warning or error. ``controls-violations``: each
violation on its own vbucket or connection. ``controls-undecided``: a capture started after
the negotiation, where the tolerance of KEY_EEXISTS cannot be decided.
"""

from __future__ import annotations

from ..codec import encode
from .dsl import (
    T0, Script, Spec, dcp_open, doc, failover, marker, mutation, ok, stream_req,
)
from .dsl import controls_exchange as _controls
from .dsl import from_first_marker as _after_negotiation
from .dsl import hello_exchange as _hello
from .netsynth import Endpoint

UUID = 0xC0DE000000000000
PRODUCER = Endpoint("10.0.5.1", 11210)
ACTIVE_ONLY = 0x10
COLLECTIONS = 0x12






def _stream(s: Script, vb: int, opaque: int, consumer=False, **kw) -> None:
    ask, answer = (s.s2c, s.c2s) if consumer else (s.c2s, s.s2c)
    ask(stream_req(vb, opaque, **kw))
    answer(failover(opaque, (UUID + vb, 0)))


def _expiration(vb: int, opaque: int, seqno: int, key: str) -> bytes:
    return encode(0x59, dict(by_seqno=seqno, rev_seqno=3, delete_time=1_700_000_100),
                  key=key.encode(), vbucket=vb, opaque=opaque, cas=0x17A0000000000000 + seqno)


def _commit(vb: int, opaque: int, seqno: int, key: str) -> bytes:
    return encode(0x62, dict(prepared_seqno=seqno - 1, commit_seqno=seqno), key=key.encode(),
                  vbucket=vb, opaque=opaque)


def _sa(vb: int, opaque: int, seqno: int, sid=None) -> bytes:
    return encode(0x64, {"by_seqno": seqno}, vbucket=vb, opaque=opaque, stream_id=sid)


def _oso(vb: int, opaque: int, flags: int) -> bytes:
    return encode(0x65, {"flags": flags}, vbucket=vb, opaque=opaque)


def _end(vb: int, opaque: int, sid=None) -> bytes:
    return encode(0x55, {"reason": 0}, vbucket=vb, opaque=opaque, stream_id=sid)


def _v20(vb, opaque, start, end, flags, **kw):
    return marker(vb, opaque, start, end, flags, layout="V2.0", max_visible_seqno=end,
                  high_completed_seqno=0, **kw)


def _v22(vb, opaque, start, end, flags):
    return marker(vb, opaque, start, end, flags, layout="V2.2", max_visible_seqno=end,
                  high_completed_seqno=0, purge_seqno=0, high_prepared_seqno=0)


SYNC_REPL = (("enable_noop", "true"), ("enable_sync_writes", "true"),
             ("consumer_name", "replica-a"))


# --- legal ----------------------------------------------------------------------------------

def _legal_sync_replication() -> Script:
    """Producer connection: sync replication, V2.2, change streams, expiry opcode, v7 status
    codes; vb 0 (ActiveVbOnly) and vb 1 (may be served by a replica) interleaved."""
    s = Script(Endpoint("10.0.5.2", 50500), PRODUCER, start_ns=T0)
    _hello(s, 1, 0x06, 0x0B, COLLECTIONS)
    s.c2s(dcp_open("controls-legal", 0x21, 2))           # producer | include_delete_times
    s.s2c(ok(0x50, 2))
    _controls(s, 3, *SYNC_REPL, ("max_marker_version", "2.2"), ("change_streams", "true"),
              ("enable_expiry_opcode", "true"), ("v7_dcp_status_codes", "true"))
    _stream(s, 0, 0x100, flags=ACTIVE_ONLY, value=b'{"uid":"0"}')
    _stream(s, 1, 0x101, value=b'{"uid":"0"}')
    s.s2c(_v20(0, 0x100, 0, 2, "memory+checkpoint"))
    s.s2c(_v22(1, 0x101, 0, 3, "disk+checkpoint"))
    s.s2c(mutation(0, 0x100, 1, "\x00a1", doc(1)))
    s.s2c(mutation(1, 0x101, 1, "\x00b1", doc(1)), mutation(1, 0x101, 2, "\x00b2", doc(2)))
    s.s2c(_expiration(0, 0x100, 2, "\x00a0"))
    s.s2c(mutation(1, 0x101, 3, "\x00b3", doc(3)))
    # vb 1: a replica vbucket may merge snapshots: [3,5] after [0,3] is not judged
    s.s2c(_v20(1, 0x101, 3, 5, "memory+checkpoint"))
    s.s2c(_v20(0, 0x100, 3, 4, "memory+checkpoint+history"))
    s.s2c(mutation(1, 0x101, 4, "\x00b4", doc(4)), mutation(1, 0x101, 5, "\x00b5", doc(5)))
    s.s2c(mutation(0, 0x100, 3, "\x00a3", doc(3)), mutation(0, 0x100, 4, "\x00a4", doc(4)))
    # tolerated answers: NotMyVbucket (always), StreamEnd answered KeyEnoent
    s.c2s(ok(0x57, 0x101, status=0x07))
    s.s2c(_end(0, 0x100))
    s.c2s(ok(0x55, 0x100, status=0x01))
    s.s2c(encode(0x5C, opaque=10000001))
    s.c2s(ok(0x5C, 10000001))
    s.conv.close()
    return s


def _legal_oso_and_stream_ids() -> list[Script]:
    """OSO with SeqnoAdvanced, then a memory marker starting at the checkpoint start inside
    the OSO range; a stream-id connector with two streams interleaved."""
    a = Script(Endpoint("10.0.5.2", 50501), PRODUCER, start_ns=T0 + 1_000_000)
    _hello(a, 1, 0x0B, COLLECTIONS)
    a.c2s(dcp_open("controls-legal-oso", 0x1, 2))
    a.s2c(ok(0x50, 2))
    _controls(a, 3, ("enable_noop", "true"),
              ("enable_out_of_order_snapshots", "true_with_seqno_advanced"))
    _stream(a, 2, 0x200, flags=ACTIVE_ONLY, value=b'{"collections":["8"]}')
    a.s2c(_oso(2, 0x200, 1), mutation(2, 0x200, 5, "\x08m", doc(5)),
          mutation(2, 0x200, 3, "\x08k", doc(3)), _sa(2, 0x200, 6), _oso(2, 0x200, 2))
    a.s2c(marker(2, 0x200, 5, 8, "memory+checkpoint"))
    a.s2c(mutation(2, 0x200, 7, "\x08n", doc(7)), mutation(2, 0x200, 8, "\x08o", doc(8)))
    a.conv.close()
    b = Script(Endpoint("10.0.5.2", 50502), PRODUCER, start_ns=T0 + 2_000_000)
    _hello(b, 1, 0x0B, COLLECTIONS)
    b.c2s(dcp_open("controls-legal-sid", 0x1, 2))
    b.s2c(ok(0x50, 2))
    _controls(b, 3, ("enable_noop", "true"), ("enable_stream_id", "true"))
    _stream(b, 3, 0x300, value=b'{"sid":7}')
    _stream(b, 4, 0x301, value=b'{"sid":8}')
    b.s2c(marker(3, 0x300, 0, 2, "memory+checkpoint", sid=7))
    b.s2c(marker(4, 0x301, 0, 1, "memory+checkpoint", sid=8))
    b.s2c(mutation(3, 0x300, 1, "\x00a", doc(1), sid=7))
    b.s2c(mutation(4, 0x301, 1, "\x00b", doc(1), sid=8), _end(4, 0x301, sid=8))
    b.s2c(mutation(3, 0x300, 2, "\x00c", doc(2), sid=7))
    b.conv.close()
    return [a, b]


def _legal_consumer_leg() -> Script:
    """ns_server → consumer memcached (DcpOpen without Producer): the consumer sends its
    controls and stream requests server→client; markers and items come client→server."""
    s = Script(Endpoint("10.0.5.3", 43500), Endpoint("10.0.5.2", 11209),
               start_ns=T0 + 3_000_000)
    _hello(s, 1, 0x06, 0x0B, COLLECTIONS)
    s.c2s(dcp_open("replication:ns_1@10.0.5.1->ns_1@10.0.5.2:default", 0x0, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, *SYNC_REPL, ("v7_dcp_status_codes", "true"), consumer=True)
    _stream(s, 5, 0x500, consumer=True, flags=ACTIVE_ONLY, value=b'{"uid":"0"}')
    _stream(s, 6, 0x501, consumer=True, flags=ACTIVE_ONLY, value=b'{"uid":"0"}')
    s.c2s(_v20(5, 0x500, 0, 2, "disk+checkpoint"))
    s.c2s(_v20(6, 0x501, 0, 1, "memory+checkpoint"))
    s.c2s(mutation(5, 0x500, 1, "\x00c1", doc(1)), mutation(6, 0x501, 1, "\x00d1", doc(1)))
    s.c2s(mutation(5, 0x500, 2, "\x00c2", doc(2)))
    s.c2s(encode(0x5C, opaque=10000001))
    s.s2c(ok(0x5C, 10000001))
    s.c2s(_end(5, 0x500))
    s.s2c(ok(0x55, 0x500))
    s.conv.close()
    return s


def controls_legal() -> list[Script]:
    return [_legal_sync_replication(), *_legal_oso_and_stream_ids(), _legal_consumer_leg()]


# --- violations -----------------------------------------------------------------------------

def _violations_plain() -> Script:
    """Producer connection without sync writes, change streams, OSO, expiry opcode or
    collections, with v7 status codes: one violation per vbucket."""
    s = Script(Endpoint("10.0.5.2", 50510), PRODUCER, start_ns=T0)
    s.c2s(dcp_open("controls-violations", 0x1, 1))
    s.s2c(ok(0x50, 1))
    _controls(s, 2, ("enable_noop", "true"), ("v7_dcp_status_codes", "true"))
    for vb in range(8):
        _stream(s, vb, 0x100 + vb, flags=ACTIVE_ONLY)
    s.s2c(_v20(0, 0x100, 0, 1, "memory+checkpoint"))                    # V2.0, no sync repl
    s.s2c(_v22(1, 0x101, 0, 1, "disk+checkpoint"))                      # V2.2, no 2.2
    s.s2c(marker(2, 0x102, 0, 1, "memory+checkpoint+history"))          # no change_streams
    s.s2c(marker(3, 0x103, 0, 1, "memory+checkpoint"))
    s.s2c(_expiration(3, 0x103, 1, "e"))                                # no expiry opcode
    s.s2c(marker(4, 0x104, 0, 1, "memory+checkpoint"), mutation(4, 0x104, 1, "o1", doc(1)))
    s.s2c(marker(4, 0x104, 1, 2, "memory+checkpoint"))                  # start <= 1 (active)
    s.s2c(marker(5, 0x105, 0, 2, "memory+checkpoint"), mutation(5, 0x105, 1, "s1", doc(1)))
    s.s2c(_sa(5, 0x105, 2))                                             # not a collections stream
    s.s2c(_oso(6, 0x106, 1))                                            # OSO not negotiated
    s.s2c(mutation(6, 0x106, 2, "x", doc(2)), _oso(6, 0x106, 2))
    s.s2c(marker(7, 0x107, 0, 1, "memory+checkpoint"))
    s.s2c(mutation(7, 0x107, 1, "z", doc(1), sid=9))                    # sid, not negotiated
    s.s2c(mutation(0, 0x100, 1, "v", doc(1)), mutation(1, 0x101, 1, "w", doc(1)),
          mutation(2, 0x102, 1, "h", doc(1)), mutation(4, 0x104, 2, "o2", doc(2)))
    s.c2s(ok(0x57, 0x100, status=0x02))        # KeyEexists with v7 codes: disconnects
    s.s2c(_end(1, 0x101))
    s.c2s(ok(0x55, 0x101, status=0x04))        # StreamEnd answered Einval
    s.c2s(ok(0x64, 0x105))                     # a response to SeqnoAdvanced
    s.s2c(encode(0x5C, opaque=10000001))
    s.c2s(ok(0x5C, 0x42))                      # noop answered with another opaque
    s.conv.close()
    return s


def _violations_sync_replication() -> Script:
    """Producer connection with sync replication, flatbuffers system events, collections and
    no v7 status codes."""
    s = Script(Endpoint("10.0.5.2", 50511), PRODUCER, start_ns=T0 + 1_000_000)
    _hello(s, 1, 0x0B, COLLECTIONS)
    s.c2s(dcp_open("controls-violations-sync", 0x1, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, *SYNC_REPL, ("flatbuffers_system_events", "true"))
    _stream(s, 8, 0x800, value=b'{"uid":"0"}')
    _stream(s, 9, 0x900, value=b'{"uid":"0"}')
    s.c2s(stream_req(10, 0xA00, value=b'{"sid":3}'))                    # sid, not negotiated
    s.s2c(ok(0x53, 0xA00, status=0x8D))
    s.s2c(marker(8, 0x800, 0, 2, "disk+checkpoint"))                    # V1 Disk: no HCS
    s.s2c(_v20(9, 0x900, 0, 3, "memory+checkpoint"))
    s.s2c(mutation(9, 0x900, 1, "\x00p", doc(1)), _commit(9, 0x900, 2, "\x00p"))
    s.s2c(_sa(9, 0x900, 3))                                             # sync + flatbuffers
    s.c2s(ok(0x57, 0x900, status=0x02))        # KeyEexists without v7: tolerated
    s.c2s(ok(0x62, 0x900, status=0x01))        # KeyEnoent to a commit: always disconnects
    s.conv.close()
    return s


def _violations_stream_ids() -> Script:
    """enable_stream_id: a request without sid; a message without its stream id."""
    s = Script(Endpoint("10.0.5.2", 50512), PRODUCER, start_ns=T0 + 2_000_000)
    _hello(s, 1, 0x0B, COLLECTIONS)
    s.c2s(dcp_open("controls-violations-sid", 0x1, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, ("enable_noop", "true"), ("enable_stream_id", "true"))
    s.c2s(stream_req(11, 0xB00))                                        # no sid
    s.s2c(ok(0x53, 0xB00, status=0x8D))
    _stream(s, 12, 0xC00, value=b'{"sid":4}')
    s.s2c(marker(12, 0xC00, 0, 1, "memory+checkpoint", sid=4))
    s.s2c(mutation(12, 0xC00, 1, "\x00q", doc(1)))                      # no stream id
    s.conv.close()
    return s


def _violations_consumer_leg() -> Script:
    """Consumer connection (data client→server) with sync replication: a V1 Disk marker;
    KeyEnoent to an abort; a V2.2 marker without max_marker_version."""
    s = Script(Endpoint("10.0.5.3", 43510), Endpoint("10.0.5.2", 11209),
               start_ns=T0 + 3_000_000)
    _hello(s, 1, 0x06, 0x0B, COLLECTIONS)
    s.c2s(dcp_open("replication:ns_1@10.0.5.1->ns_1@10.0.5.2:travel", 0x0, 2))
    s.s2c(ok(0x50, 2))
    _controls(s, 3, *SYNC_REPL, consumer=True)
    for vb in (13, 14, 15):
        _stream(s, vb, 0xD00 + vb, consumer=True, flags=ACTIVE_ONLY, value=b'{"uid":"0"}')
    s.c2s(marker(13, 0xD0D, 0, 1, "disk+checkpoint"))                   # V1 Disk: no HCS
    s.c2s(_v20(14, 0xD0E, 0, 2, "memory+checkpoint"))
    s.c2s(_v22(15, 0xD0F, 0, 1, "disk+checkpoint"))                     # V2.2, no 2.2
    s.c2s(mutation(14, 0xD0E, 1, "\x00r", doc(1)))
    s.c2s(encode(0x63, dict(prepared_seqno=1, abort_seqno=2), key=b"\x00r", vbucket=14,
                 opaque=0xD0E))
    s.s2c(ok(0x63, 0xD0E, status=0x01))        # KeyEnoent to an abort: disconnects
    s.conv.close()
    return s


def controls_violations() -> list[Script]:
    return [_violations_plain(), _violations_sync_replication(), _violations_stream_ids(),
            _violations_consumer_leg()]


# --- undecided ------------------------------------------------------------------------------

def controls_undecided() -> list[Script]:
    s = Script(Endpoint("10.0.5.2", 50520), PRODUCER, start_ns=T0)
    s.c2s(dcp_open("controls-undecided", 0x1, 1))
    s.s2c(ok(0x50, 1))
    _controls(s, 2, ("enable_noop", "true"), ("v7_dcp_status_codes", "true"))
    _stream(s, 0, 0x100, flags=ACTIVE_ONLY)
    s.s2c(marker(0, 0x100, 0, 2, "memory+checkpoint"), mutation(0, 0x100, 1, "a", doc(1)))
    s.c2s(ok(0x57, 0x100, status=0x02))        # KeyEexists: tolerated only without v7
    s.s2c(mutation(0, 0x100, 2, "b", doc(2)))
    s.conv.close()
    return [s]




SPECS: tuple = (
    Spec("controls-legal", "controls-legal.pcap",
         "negotiated features used as negotiated, both roles: sync replication (V2.0/V2.2, "
         "history, expiry opcode, v7 status codes), OSO with SeqnoAdvanced then an overlapping "
         "memory marker, stream ids, a consumer connection; tolerated consumer answers",
         controls_legal),
    Spec("controls-violations", "controls-violations.pcap",
         "features used without negotiation (marker versions, V1 Disk on sync replication, "
         "history, expiry, OSO, SeqnoAdvanced, stream ids), overlap on an ActiveVbOnly stream, "
         "consumer answers the producer disconnects on (v7 codes, commit/abort KeyEnoent, "
         "StreamEnd, noop opaque, SeqnoAdvanced response)", controls_violations),
    Spec("controls-undecided", "controls-undecided.pcap",
         "capture started after the DcpControl exchange: KEY_EEXISTS tolerance undecided",
         controls_undecided, _after_negotiation),
)
