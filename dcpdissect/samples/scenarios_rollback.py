"""Rollback scenarios: stream requests answered right and wrong against the failover log."""

from __future__ import annotations

from ..codec import encode
from .builder import Script, Spec, dcp_open, failover, marker, mutation, ok, stream_req
from .netsynth import Endpoint

SERVER = Endpoint("10.0.0.1", 11210)
SEED_LOG = ((0x2222, 3), (0x1111, 0))      # the seed discussion's failover table
LOG = ((0xB, 10), (0xA, 0))


def failover_log(opaque: int, entries) -> bytes:
    return encode(0x54, {"failover_log": [dict(vbucket_uuid=u, seqno=s) for u, s in entries]},
                  request=False, opaque=opaque)


def rollback(opaque: int, seqno: int) -> bytes:
    return encode(0x53, {"rollback_seqno": seqno}, request=False, status=0x23, opaque=opaque)


def _opened(name: str, port: int) -> Script:
    s = Script(Endpoint("10.0.0.5", port), SERVER)
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
        s.s2c(marker(3, 0x10, 3, 5, "memory+checkpoint"),
              *[mutation(3, 0x10, i, f"k{i}", b'{"v":1}') for i in range(4, 6)])
    s.conv.close()
    return [s]


def _violations() -> list[Script]:
    s = _opened("connector-b", 41001)
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
          *[mutation(8, 0x28, i, f"p{i}", b'{"v":2}') for i in (10, 11, 12)],
          encode(0x55, {"reason": 0}, vbucket=8, opaque=0x28))
    s.c2s(stream_req(8, 0x38, start=12, uuid=0xC, snap_start=0, snap_end=12))  # no purge_seqno
    s.s2c(failover(0x38, (0xC, 0)))
    s.conv.close()
    return [s]


SPECS = (
    Spec("rollback-missed", "rollback-missed.pcap",
         "the seed's resume answered with success although the failover log requires a "
         "rollback to 1 (possible data loss)", lambda: _seed_request(False)),
    Spec("rollback-correct", "rollback-correct.pcap",
         "the same resume correctly answered ROLLBACK(1), then a request from 1 succeeds",
         lambda: _seed_request(True)),
    Spec("rollback-violations", "rollback-violations.pcap",
         "rollback above the start, unexpected rollbacks in a loop, a request ignoring its "
         "rollback, and a decision that depends on the unknown high seqno", _violations),
)
