"""Consumer identity across connections, and captures that start inside a connection
(listed in builder.SCENARIOS).

A consumer is its DcpOpen name on a server and bucket, not its TCP connection. The resume
pair of the DCP design discussion ("Why does a client need to provide snapshot start & end
seqnos to resume a stream?": snapshot [1,4], items 2 and 3, then a resume at start 3) is
replayed after first connections that end in the ways real captures show: not at all (the
server restarted), with a FIN one way only, or kicked by a second DcpOpen with the same
name while the capture still shows it open (kv_engine engines/ep/src/dcp/dcpconnmap.cc
DcpConnMap::newProducer: "Disconnecting existing Dcp Producer as it has the same name as a
new connection"). Two buckets of one node keep one consumer name apart. A capture started
in the middle of a connection still judges the markers it shows.
"""

from __future__ import annotations

from ..codec import encode
from . import netsynth as ns
from .dsl import T0, Script, Spec, dcp_open, doc, failover, marker, mutation, ok, stream_req
from .netsynth import Endpoint

PRODUCER = Endpoint("10.0.3.1", 11210)
CONSUMER_HOST = "10.0.3.2"
NAME = "identity-demo"
AAAA, BBBB = 0x1111, 0x2222
LATER = 50_000_000                   # the reconnection, 50 ms after the first connection

COLLAPSED = dict(start=3, uuid=AAAA, snap_start=3, snap_end=3)     # {3,3} start 3
CORRECT = dict(start=3, uuid=AAAA, snap_start=1, snap_end=4)       # {1,4} start 3


def _open(s: Script, name: str = NAME, bucket: str | None = None) -> None:
    if bucket is not None:
        s.c2s(encode(0x89, key=bucket.encode(), opaque=0xB))
        s.s2c(ok(0x89, 0xB))
    s.c2s(dcp_open(name, 0x1, 1))
    s.s2c(ok(0x50, 1))


def _partial(port: int, *, bucket: str | None = None, start_ns: int = T0,
             items=(2, 3), snapshot=(1, 4), uuid=AAAA) -> Script:
    """The design discussion's first connection: the consumer holds 1:SET(A) and asks from 1,
    snapshot [1,4] under uuid AAAA (the first marker starts at the requested snap_start),
    items 2:SET(B) and 3:SET(C), then nothing more (no close unless the caller adds one)."""
    s = Script(Endpoint(CONSUMER_HOST, port), PRODUCER, start_ns=start_ns)
    _open(s, bucket=bucket)
    held = items[0] - 1
    s.c2s(stream_req(0, 0x10, start=held, uuid=uuid if held else 0))
    s.s2c(failover(0x10, (uuid, 0)))
    s.s2c(marker(0, 0x10, *snapshot, "memory+checkpoint"),
          *[mutation(0, 0x10, i, "BCDEFGH"[i - 2] if i >= 2 else "A", doc(i)) for i in items])
    return s


def _resume(port: int, request: dict, answers: list[bytes], *, start_ns: int = T0 + LATER,
            bucket: str | None = None, log=((AAAA, 0),)) -> Script:
    """The consumer reconnects with the same name, reads the failover log and resumes."""
    s = Script(Endpoint(CONSUMER_HOST, port), PRODUCER, start_ns=start_ns)
    _open(s, bucket=bucket)
    s.c2s(encode(0x54, vbucket=0, opaque=0x11))
    s.s2c(encode(0x54, {"failover_log": [dict(vbucket_uuid=u, seqno=q) for u, q in log]},
                 request=False, opaque=0x11))
    s.c2s(stream_req(0, 0x20, **request))
    s.s2c(*answers)
    s.conv.close()
    return s


def _rolled_back() -> list[bytes]:
    """After the restart (BBBB at 3) the server sees the branch: ROLLBACK to 1."""
    return [encode(0x53, {"rollback_seqno": 1}, request=False, status=0x23, opaque=0x20)]


def _branched_stream() -> list[bytes]:
    """{3,3} start 3 hides the branch: success, 4:DEL(A) and 1:SET(A) are never sent."""
    return [failover(0x20, (BBBB, 3), (AAAA, 0)), marker(0, 0x20, 3, 5, "memory+checkpoint"),
            mutation(0, 0x20, 4, "D", doc(4)), mutation(0, 0x20, 5, "E", doc(5))]


def _continued(snap_start: int) -> list[bytes]:
    """No branch (same uuid): the stream continues from 4; the first marker starts at the
    requested snap_start."""
    return [failover(0x20, (AAAA, 0)), marker(0, 0x20, snap_start, 5, "memory+checkpoint"),
            mutation(0, 0x20, 4, "D", doc(4)), mutation(0, 0x20, 5, "E", doc(5))]


# --- (a) the server restarted: no FIN, no RST on the first connection ----------------------

def restart(request: dict) -> list[Script]:
    answers = _rolled_back() if request is CORRECT else _branched_stream()
    return [_partial(50500), _resume(50501, request, answers, log=((BBBB, 3), (AAAA, 0)))]


# --- (b) half-close: the consumer's FIN only ---------------------------------------------

def half_close(request: dict) -> list[Script]:
    first = _partial(50510)
    first.conv.close("fin", initiator="c2s")
    answers = _rolled_back() if request is CORRECT else _branched_stream()
    return [first, _resume(50511, request, answers, log=((BBBB, 3), (AAAA, 0)))]


def _one_way_fin(pkts):
    """Keep the first FIN; drop the answering FIN and the last ACK (FIN one way only)."""
    fins = [i for i, p in enumerate(pkts) if p.flags & ns.FIN]
    return [p for i, p in enumerate(pkts) if i not in fins[1:] and i <= fins[0]]


# --- (c) kicked by a second DcpOpen with the same name (no restart, old one stays open) ----

def kicked(request: dict) -> list[Script]:
    first = _partial(50520)
    first.conv.pause(2 * LATER)       # in flight when the server dropped the stream: not judged
    first.s2c(mutation(0, 0x10, 4, "D", doc(4)))
    answers = _continued(request["snap_start"])
    return [first, _resume(50521, request, answers)]


# --- resume-beyond-received after a connection that simply stops --------------------------

def beyond_after_silence() -> list[Script]:
    return [_partial(50530), _resume(50531, dict(start=4, uuid=AAAA, snap_start=1, snap_end=4),
                                     _rolled_back(), log=((BBBB, 3), (AAAA, 0)))]


# --- two buckets on one node, one consumer name -------------------------------------------

def two_buckets() -> list[Script]:
    """Bucket A stopped at 3 inside [1,4], bucket B at 5 inside [1,6]; each resumes from its
    own point (B's start 5 would be beyond A's 3)."""
    a = _partial(50540, bucket="bucket-a")
    b = _partial(50541, bucket="bucket-b", start_ns=T0 + 1_000_000, items=(2, 3, 4, 5),
                 snapshot=(1, 6), uuid=BBBB)
    ra = _resume(50542, CORRECT, _continued(1), bucket="bucket-a")
    rb = _resume(50543, dict(start=5, uuid=BBBB, snap_start=1, snap_end=6),
                 [failover(0x20, (BBBB, 0)), marker(0, 0x20, 1, 7, "memory+checkpoint"),
                  mutation(0, 0x20, 6, "F", doc(6)), mutation(0, 0x20, 7, "G", doc(7))],
                 bucket="bucket-b", start_ns=T0 + LATER + 1_000_000, log=((BBBB, 0),))
    return [a, b, ra, rb]


def two_buckets_b_complete() -> list[Script]:
    """Bucket B received all of [1,3] and resumes {3,3} start 3 (right); bucket A's stream,
    which ended later, stopped at 3 inside [1,4], where {3,3} would be collapsed."""
    b = _partial(50551, bucket="bucket-b", items=(2, 3), snapshot=(1, 3), uuid=BBBB)
    b.conv.close()
    a = _partial(50550, bucket="bucket-a", start_ns=T0 + 1_000_000)
    a.conv.pause(10_000_000)
    a.conv.close()
    rb = _resume(50552, dict(start=3, uuid=BBBB, snap_start=3, snap_end=3),
                 [failover(0x20, (BBBB, 0)), marker(0, 0x20, 3, 5, "memory+checkpoint"),
                  mutation(0, 0x20, 4, "D", doc(4)), mutation(0, 0x20, 5, "E", doc(5))],
                 bucket="bucket-b", log=((BBBB, 0),))
    return [a, b, rb]


# --- a capture that starts inside a connection ---------------------------------------------

def mid_stream(outside: bool) -> list[Script]:
    """Snapshot [1,3] with a 4000-byte item 2 (split over segments), item 3, then snapshot
    [4,6]: items 4, 5 and 6 (clean) or 4, 5 and 9 (9 is outside it). The capture starts at
    item 3 (see :func:`_from_item_3`)."""
    s = Script(Endpoint(CONSUMER_HOST, 50560), PRODUCER)
    _open(s)
    s.c2s(stream_req(0, 0x10))
    s.s2c(failover(0x10, (AAAA, 0)))
    s.s2c(marker(0, 0x10, 1, 3, "memory+checkpoint"), mutation(0, 0x10, 1, "a", doc(1)))
    s.s2c(mutation(0, 0x10, 2, "b", doc(2, 4000)))
    s.s2c(mutation(0, 0x10, 3, "c", doc(3)), marker(0, 0x10, 4, 6, "memory"))
    for i in (4, 5, 9 if outside else 6):
        s.s2c(mutation(0, 0x10, i, f"k{i}", doc(i)))
    s.conv.close()
    return [s]


def _from_item_3(pkts):
    """The capture starts with the segment that carries item 3 and the marker [4,6] (after
    the split item 2):
    no handshake, no DcpOpen, no stream request, no marker of snapshot [1,3]."""
    d = ns.data_indices(pkts, "s2c")
    big = next(k for k, i in enumerate(d) if len(pkts[i].payload) == 1448)
    third = next(i for i in d[big + 1:] if pkts[i].payload[0] == 0x80)
    return ns.start_at(pkts, third)


SPECS: tuple = (
    Spec("identity-restart-collapsed", "identity-restart-collapsed.pcap",
         "server restart, no FIN/RST on the first connection: resume {3,3} start 3 after "
         "items 2, 3 of [1,4] (collapsed)", lambda: restart(COLLAPSED)),
    Spec("identity-restart-correct", "identity-restart-correct.pcap",
         "server restart, no FIN/RST on the first connection: resume {1,4} start 3, rolled "
         "back to 1", lambda: restart(CORRECT)),
    Spec("identity-half-close-collapsed", "identity-half-close-collapsed.pcap",
         "first connection half-closed (the consumer's FIN only): resume {3,3} start 3",
         lambda: half_close(COLLAPSED), _one_way_fin),
    Spec("identity-half-close-correct", "identity-half-close-correct.pcap",
         "first connection half-closed (the consumer's FIN only): resume {1,4} start 3",
         lambda: half_close(CORRECT), _one_way_fin),
    Spec("identity-kicked-collapsed", "identity-kicked-collapsed.pcap",
         "a second DcpOpen with the same name ends the first connection's stream (still open "
         "in the capture): resume {3,3} start 3", lambda: kicked(COLLAPSED)),
    Spec("identity-kicked-correct", "identity-kicked-correct.pcap",
         "a second DcpOpen with the same name ends the first connection's stream (still open "
         "in the capture): resume {1,4} start 3", lambda: kicked(CORRECT)),
    Spec("identity-beyond-after-silence", "identity-beyond-after-silence.pcap",
         "the first connection simply stops after items 2, 3 of [1,4]: resume at start 4",
         beyond_after_silence),
    Spec("identity-two-buckets", "identity-two-buckets.pcap",
         "one consumer name in two buckets of one node: each resumes from its own point",
         two_buckets),
    Spec("identity-two-buckets-b-complete", "identity-two-buckets-b-complete.pcap",
         "bucket B resumes {3,3} start 3 after a complete [1,3]; bucket A's later point "
         "(3 inside [1,4]) must not be used", two_buckets_b_complete),
    Spec("identity-mid-stream-outside", "identity-mid-stream-outside.pcap",
         "capture starts inside a connection: item 9 outside the first captured snapshot "
         "[4,6]", lambda: mid_stream(True), _from_item_3),
    Spec("identity-mid-stream-clean", "identity-mid-stream-clean.pcap",
         "capture starts inside a connection: the first captured snapshot [4,6] is complete",
         lambda: mid_stream(False), _from_item_3),
)
