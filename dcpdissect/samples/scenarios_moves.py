"""Consumers that move, nodes that restart.

A connector (one DcpOpen name) receives items 2 and 3 of snapshot [1,4] of vbucket 0 from
node A; node A fails (no FIN) and the vbucket's new active node C, whose history branched at
3 (uuid BBBB), answers the resume:

* ``move-node-collapsed``: the resume on node C sends {3,3} start 3: accepted, data lost
  (``resume-collapsed-snapshot``, judged against the stream on node A);
* ``move-node-correct``: it sends {1,4} start 3; C answers ROLLBACK(1), the consumer
  re-requests from 1 and C's success response shows its failover log: clean.

A node restarts between two connections of the consumer (its failover log gains BBBB at 10;
the second connection reads no failover log first):

* ``restart-rollback-legal``: the resume from 12 after snapshot [0,12] is answered
  ROLLBACK(10), which the log before the restart (AAAA only) would not explain; the log
  comes with the next success and agrees: clean;
* ``restart-rollback-unexpected``: the branch is at 12, where nothing needs rolling back,
  yet the node answers ROLLBACK(10): ``rollback-unexpected``, at the ROLLBACK, once the log
  is known.
"""

from __future__ import annotations

from ..codec import encode
from .dsl import T0, Script, Spec, dcp_open, doc, failover, marker, mutation, ok, stream_req
from .netsynth import Endpoint

NAME = "connector-moves"
HOST = "10.0.6.2"
NODE_A, NODE_C = Endpoint("10.0.6.1", 11210), Endpoint("10.0.6.3", 11210)
AAAA, BBBB = 0x1111, 0x2222
LATER = 50_000_000


def _open(s: Script) -> None:
    s.c2s(dcp_open(NAME, 0x1, 1))
    s.s2c(ok(0x50, 1))


def _rollback(opaque: int, seqno: int) -> bytes:
    return encode(0x53, {"rollback_seqno": seqno}, request=False, status=0x23, opaque=opaque)


def _first(node: Endpoint, port: int, snapshot=(1, 4), items=(2, 3)) -> Script:
    """The first connection: the consumer holds what precedes ``items`` and asks from there;
    snapshot ``snapshot`` (its first marker starts at the requested snap_start), ``items``;
    then the node goes away."""
    s = Script(Endpoint(HOST, port), node, start_ns=T0)
    _open(s)
    held = items[0] - 1
    s.c2s(stream_req(0, 0x10, start=held, uuid=AAAA if held else 0))
    s.s2c(failover(0x10, (AAAA, 0)))
    s.s2c(marker(0, 0x10, *snapshot, "memory+checkpoint"),
          *[mutation(0, 0x10, i, f"k{i}", doc(i)) for i in items])
    return s


def moved(collapsed: bool) -> list[Script]:
    first = _first(NODE_A, 50600)
    s = Script(Endpoint(HOST, 50601), NODE_C, start_ns=T0 + LATER)
    _open(s)
    log = ((BBBB, 3), (AAAA, 0))
    if collapsed:
        s.c2s(stream_req(0, 0x20, start=3, uuid=AAAA, snap_start=3, snap_end=3))
        s.s2c(failover(0x20, *log), marker(0, 0x20, 3, 5, "memory+checkpoint"),
              mutation(0, 0x20, 4, "k4", doc(4)), mutation(0, 0x20, 5, "k5", doc(5)))
    else:
        s.c2s(stream_req(0, 0x20, start=3, uuid=AAAA, snap_start=1, snap_end=4))
        s.s2c(_rollback(0x20, 1))
        s.c2s(stream_req(0, 0x21, start=1, uuid=AAAA, snap_start=1, snap_end=1))
        s.s2c(failover(0x21, *log), marker(0, 0x21, 1, 5, "memory+checkpoint"),
              *[mutation(0, 0x21, i, f"k{i}", doc(i)) for i in (2, 3, 4, 5)])
    s.conv.close()
    return [first, s]


def restarted(branch: int) -> list[Script]:
    first = _first(NODE_A, 50610, snapshot=(0, 12), items=range(1, 13))
    s = Script(Endpoint(HOST, 50611), NODE_A, start_ns=T0 + LATER)
    _open(s)
    s.c2s(stream_req(0, 0x20, start=12, uuid=AAAA, snap_start=0, snap_end=12))
    s.s2c(_rollback(0x20, 10))
    s.c2s(stream_req(0, 0x21, start=10, uuid=AAAA, snap_start=10, snap_end=10))
    s.s2c(failover(0x21, (BBBB, branch), (AAAA, 0)),
          marker(0, 0x21, 10, 14, "memory+checkpoint"),
          *[mutation(0, 0x21, i, f"k{i}", doc(i)) for i in (11, 12, 13, 14)])
    s.conv.close()
    return [first, s]


SPECS = (
    Spec("move-node-collapsed", "move-node-collapsed.pcap",
         "a connector's vbucket moves from node A (no FIN) to node C: the resume on C sends "
         "{3,3} start 3 after items 2, 3 of [1,4] on A (collapsed)", lambda: moved(True)),
    Spec("move-node-correct", "move-node-correct.pcap",
         "the same move, resumed with {1,4} start 3: C rolls back to 1, the consumer "
         "re-requests", lambda: moved(False)),
    Spec("restart-rollback-legal", "restart-rollback-legal.pcap",
         "a node restarts between two connections (branch at 10): ROLLBACK(10) before the "
         "capture shows the new log, which the next success brings", lambda: restarted(10)),
    Spec("restart-rollback-unexpected", "restart-rollback-unexpected.pcap",
         "a node restarts between two connections (branch at 12): ROLLBACK(10) although "
         "nothing needs rolling back", lambda: restarted(12)),
)
