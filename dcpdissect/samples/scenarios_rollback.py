"""Rollback scenarios: stream requests answered right and wrong against the failover log."""

from __future__ import annotations

from ..codec import encode
from .dsl import T0, Script, Spec, control, dcp_open, failover, marker, mutation, ok, stream_req
from .netsynth import Endpoint

SERVER = Endpoint("10.0.0.1", 11210)
SEED_LOG = ((0x2222, 3), (0x1111, 0))      # the seed discussion's failover table
LOG = ((0xB, 10), (0xA, 0))


def failover_log(opaque: int, entries) -> bytes:
    return encode(0x54, {"failover_log": [dict(vbucket_uuid=u, seqno=s) for u, s in entries]},
                  request=False, opaque=opaque)


def rollback(opaque: int, seqno: int) -> bytes:
    return encode(0x53, {"rollback_seqno": seqno}, request=False, status=0x23, opaque=opaque)


def _opened(name: str, port: int, bucket: str | None = None, collections: bool = False,
            start_ns: int = T0, marker_v22: bool = False) -> Script:
    """A connector's connection; ``marker_v22``: it asks for V2.2 markers (which carry the
    purge seqno), a control the producer accepts only with HELLO Collections."""
    s = Script(Endpoint("10.0.0.5", port), SERVER, start_ns=start_ns)
    if collections:
        s.c2s(encode(0x1F, key=b"connector", value=b"\x00\x0b\x00\x12", opaque=0xF0))
        s.s2c(ok(0x1F, 0xF0, value=b"\x00\x0b\x00\x12"))
    if bucket:
        s.c2s(encode(0x89, key=bucket.encode(), opaque=0xF1))
        s.s2c(ok(0x89, 0xF1))
    if marker_v22:
        s.c2s(dcp_open(name, 0x1, 1), control("max_marker_version", "2.2", 2))
        s.s2c(ok(0x50, 1), ok(0x5E, 2))
    else:
        s.c2s(dcp_open(name, 0x1, 1))
        s.s2c(ok(0x50, 1))
    return s


def _seed_request(answer_rollback: bool) -> list[Script]:
    """The seed's resume (uuid 0x1111, snapshot {1,4}, start 3) against table [{2222,3},{1111,0}]."""
    s = _opened("connector-a", 41000)
    s.c2s(encode(0x54, vbucket=3, opaque=2))
    s.s2c(failover_log(2, SEED_LOG))
    s.c2s(stream_req(3, 0x10, start=3, uuid=0x1111, snap_start=1, snap_end=4))
    if answer_rollback:
        s.s2c(rollback(0x10, 1))
        s.c2s(stream_req(3, 0x11, start=1, uuid=0x1111, snap_start=1, snap_end=1))
        s.s2c(failover(0x11, *SEED_LOG))
        s.s2c(marker(3, 0x11, 1, 5, "memory+checkpoint"),
              *[mutation(3, 0x11, i, f"k{i}", b'{"v":1}') for i in range(2, 6)])
    else:
        s.s2c(failover(0x10, *SEED_LOG))
        s.s2c(marker(3, 0x10, 1, 5, "memory+checkpoint"),
              *[mutation(3, 0x10, i, f"k{i}", b'{"v":1}') for i in range(4, 6)])
    s.conv.close()
    return [s]


def _violations() -> list[Script]:
    s = _opened("connector-b", 41001, collections=True, marker_v22=True)
    for vb in (4, 5, 6, 7):
        s.c2s(encode(0x54, vbucket=vb, opaque=0x40 + vb))
        s.s2c(failover_log(0x40 + vb, LOG))
    s.c2s(stream_req(4, 0x24, start=20, uuid=0xA))                  # model: rollback to 10
    s.s2c(rollback(0x24, 25))                                       # above the start
    for _ in range(2):                                              # loop: same answer twice
        s.c2s(stream_req(5, 0x25, start=5, uuid=0xA, flags=0x80))   # model: no rollback
        s.s2c(rollback(0x25, 5))
    s.c2s(stream_req(6, 0x26, start=20, uuid=0xA))
    s.s2c(rollback(0x26, 10))
    s.c2s(stream_req(6, 0x36, start=15, uuid=0xA))                  # ignores ROLLBACK(10)
    s.s2c(rollback(0x36, 10))
    s.c2s(stream_req(7, 0x27, start=30, uuid=0xB))                  # depends on the high seqno
    s.s2c(failover(0x27, *LOG))
    s.c2s(stream_req(8, 0x28, end=12))                              # a disk backfill with purge 7
    s.s2c(failover(0x28, (0xC, 0)))
    s.s2c(marker(8, 0x28, 0, 12, "disk+checkpoint", layout="V2.2", max_visible_seqno=12,
                 purge_seqno=7),
          *[mutation(8, 0x28, i, f"\x00p{i}", b'{"v":2}') for i in (10, 11, 12)],
          encode(0x55, {"reason": 0}, vbucket=8, opaque=0x28))
    s.conv.close()
    # a connector (HELLO Collections) resumes vb 8 without the purge seqno its disk marker carried
    c = _opened("connector-c", 41002, collections=True, start_ns=T0 + 5_000_000,
                marker_v22=True)
    c.c2s(stream_req(8, 0x28, end=12))
    c.s2c(failover(0x28, (0xC, 0)))
    c.s2c(marker(8, 0x28, 0, 12, "disk+checkpoint", layout="V2.2", max_visible_seqno=12,
                 purge_seqno=7),
          *[mutation(8, 0x28, i, f"\x00p{i}", b'{"v":2}') for i in (10, 11, 12)],
          encode(0x55, {"reason": 0}, vbucket=8, opaque=0x28))
    c.c2s(stream_req(8, 0x38, start=12, uuid=0xC, snap_start=0, snap_end=12))  # no purge_seqno
    c.s2c(failover(0x38, (0xC, 0)))
    # the identical request sent again after ROLLBACK(10): the rollback was ignored
    c.c2s(stream_req(9, 0x29, start=20, uuid=0xA))
    c.s2c(rollback(0x29, 10))
    c.c2s(stream_req(9, 0x39, start=20, uuid=0xA))
    c.s2c(rollback(0x39, 10))
    # a success whose own failover log says the client's history branched at 15 < 20
    c.c2s(stream_req(10, 0x2A, start=20, uuid=0xA, snap_start=20, snap_end=25))
    c.s2c(failover(0x2A, (0xB, 15), (0xA, 0)))
    c.conv.close()
    return [s, c]


def _legal() -> list[Script]:
    """Server behaviour the model must accept: two buckets on one node with their own
    failover logs, FromLatest requests, a purge seqno that moved on after the marker, a
    collection-filtered resume below the purge seqno (exempt), kv_engine's consumer's retry
    after ROLLBACK(0)."""
    out = []
    for i, (bucket, log) in enumerate((("travel", ((0xA1, 40), (0xA0, 0))),
                                       ("beer", ((0xB1, 9), (0xB0, 0))))):
        s = _opened(f"connector-{bucket}", 42000 + i, bucket=bucket, start_ns=T0 + i * 1000,
                    collections=True, marker_v22=True)
        s.c2s(encode(0x54, vbucket=0, opaque=2))
        s.s2c(failover_log(2, log))
        out.append(s)
    travel, beer = out
    beer.c2s(stream_req(0, 0x10, start=30, uuid=0xB1, snap_start=30, snap_end=30))  # fine in beer
    beer.s2c(failover(0x10, (0xB1, 9), (0xB0, 0)))
    travel.c2s(stream_req(0, 0x10, start=45, uuid=0xA1, snap_start=45, snap_end=45))
    travel.s2c(failover(0x10, (0xA1, 40), (0xA0, 0)))
    # FromLatest: uuid 0 with a start is replaced by the latest uuid and the high seqno
    travel.c2s(stream_req(1, 0x11, start=500, uuid=0, snap_start=500, snap_end=500, flags=0x40))
    travel.s2c(failover(0x11, (0xA1, 40), (0xA0, 0)))
    # FromLatest with an older uuid: ROLLBACK to the branch point, above the stale "start"
    travel.c2s(stream_req(2, 0x12, start=3, uuid=0xA0, snap_start=3, snap_end=3, flags=0x40))
    travel.s2c(rollback(0x12, 40))
    # purge seqno 7 seen in a disk marker; later the server purged further: ROLLBACK(0) is right
    travel.c2s(stream_req(3, 0x13, end=12))
    travel.s2c(failover(0x13, (0xC, 0)))
    travel.s2c(marker(3, 0x13, 0, 12, "disk+checkpoint", layout="V2.2", max_visible_seqno=12,
                      purge_seqno=7),
               *[mutation(3, 0x13, i, f"\x00q{i}", b'{"v":3}') for i in (10, 11, 12)],
               encode(0x55, {"reason": 0}, vbucket=3, opaque=0x13))
    travel.c2s(stream_req(3, 0x23, start=9, uuid=0xC, snap_start=9, snap_end=9))
    travel.s2c(rollback(0x23, 0))
    travel.c2s(stream_req(3, 0x33, start=9, uuid=0xC, snap_start=9, snap_end=9))   # the retry
    travel.s2c(rollback(0x33, 0))
    travel.c2s(stream_req(3, 0x43, start=0, uuid=0xC))
    travel.s2c(failover(0x43, (0xC, 0)))
    for s in out:
        s.conv.close()
    # a collection-filtered resume below the purge seqno: the server may apply the exemption
    c = _opened("connector-filtered", 42010, collections=True, start_ns=T0 + 3_000_000,
                marker_v22=True)
    c.c2s(stream_req(4, 0x14, end=12, value=b'{"collections":["8"]}'))
    c.s2c(failover(0x14, (0xD, 0)))
    c.s2c(marker(4, 0x14, 0, 12, "disk+checkpoint", layout="V2.2", max_visible_seqno=12,
                 purge_seqno=7),
          *[mutation(4, 0x14, i, f"\x08c{i}", b'{"v":4}') for i in (10, 11, 12)],
          encode(0x55, {"reason": 0}, vbucket=4, opaque=0x14))
    c.conv.pause(1_000_000)
    c.c2s(stream_req(4, 0x24, start=5, uuid=0xD, snap_start=5, snap_end=5,
                     value=b'{"collections":["8"],"purge_seqno":"0"}'))
    c.s2c(failover(0x24, (0xD, 0)))
    c.conv.close()
    return [*out, c]


SPECS = (
    Spec("rollback-missed", "rollback-missed.pcap",
         "the seed's resume answered with success although the failover log requires a "
         "rollback to 1 (possible data loss)", lambda: _seed_request(False)),
    Spec("rollback-correct", "rollback-correct.pcap",
         "the same resume correctly answered ROLLBACK(1), then a request from 1 succeeds",
         lambda: _seed_request(True)),
    Spec("rollback-violations", "rollback-violations.pcap",
         "rollback above the start, unexpected rollbacks in a loop, requests ignoring their "
         "rollback, a decision that depends on the unknown high seqno, a connector resuming "
         "without its purge seqno, a success contradicted by its own failover log", _violations),
    Spec("rollback-legal", "rollback-legal.pcap",
         "legal server answers: two buckets on one node, FromLatest, a purge seqno that moved "
         "on, a collection-filtered resume below the purge seqno, the retry after ROLLBACK(0)",
         _legal),
)
