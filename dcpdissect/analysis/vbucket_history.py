"""What a capture shows of one vbucket's rollback inputs, for ``rollback-check --capture``.

The server decides a rollback from its failover table, high seqno and purge seqno. A capture
shows the table whole (the failover log of a DcpGetFailoverLog response or a successful
DcpStreamReq response), but the two seqnos only as lower bounds: the highest seqno its
producers sent (an item's, or a snapshot marker's end) and the highest purge seqno of a
disk snapshot marker. :class:`VbucketHistory` watches a pass for one vbucket number and
keeps, for each node (server address and bucket), the last failover log and both bounds,
each with the frame it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol import FAILOVER_LOG_OPCODES, STATUS_SUCCESS, STREAM_OPCODES, opcode_code
from .rollback import FailoverEntry
from .rollback_checks import seen_seqno

MARKER = opcode_code("DcpSnapshotMarker")
MAX_PENDING = 65536       # failover-log requests for the vbucket awaiting their answer


@dataclass
class Seen:
    """A value and the frame that showed it (None: not shown)."""
    value: int = 0
    frame: int | None = None


@dataclass
class NodeHistory:
    """One node's view of the vbucket: ``table`` newest first, from ``table_frame``."""
    server: tuple
    bucket: str | None
    table: list | None = None
    table_frame: int | None = None
    table_opcode: str = ""
    high: Seen | None = None
    purge: Seen | None = None

    def high_bound(self) -> Seen:
        """The high seqno's lower bound: the highest seqno its producers sent, or, when
        higher, the failover log's highest entry (no entry passes the high seqno)."""
        logged = Seen(max(e.seqno for e in self.table), self.table_frame)
        return self.high if self.high is not None and self.high.value >= logged.value \
            else logged


class VbucketHistory:
    """An observer of a :class:`~.session.Pass` beside ``analyzer`` (whose connections and
    negotiations name each message's node): :meth:`last` is the node whose failover log
    the capture showed last."""

    def __init__(self, vbucket: int, analyzer):
        self.vbucket, self.analyzer = vbucket, analyzer
        self.nodes: dict[tuple, NodeHistory] = {}
        self.pending: dict[tuple, int] = {}     # (connection, opaque) -> opcode asked
        self.last_key: tuple | None = None

    def on_message(self, pdu, msg) -> None:
        op = msg.opcode
        if msg.is_request:
            if msg.vbucket != self.vbucket:
                return
            if op in FAILOVER_LOG_OPCODES:
                if len(self.pending) >= MAX_PENDING:
                    del self.pending[next(iter(self.pending))]
                self.pending[(pdu.conn, msg.opaque)] = op
            elif op in STREAM_OPCODES:
                self._stream_message(pdu, msg)
            return
        asked = self.pending.pop((pdu.conn, msg.opaque), None) if op in FAILOVER_LOG_OPCODES \
            else None
        log = msg.fields.get("failover_log")
        if asked is None or msg.status != STATUS_SUCCESS or not log:
            return
        node = self._node(pdu.conn)
        if node is None:
            return
        node.table = [FailoverEntry(e["vbucket_uuid"], e["seqno"]) for e in log]
        node.table_frame, node.table_opcode = pdu.frame, msg.name
        self.last_key = (node.server, node.bucket)

    def _stream_message(self, pdu, msg) -> None:
        node = self._node(pdu.conn)
        if node is None:
            return
        seen = seen_seqno(msg.fields)
        if seen and (node.high is None or seen > node.high.value):
            node.high = Seen(seen, pdu.frame)
        purge = msg.fields.get("purge_seqno") if msg.opcode == MARKER else None
        if purge and (node.purge is None or purge > node.purge.value):
            node.purge = Seen(purge, pdu.frame)

    def _node(self, conn: int) -> NodeHistory | None:
        opened = self.analyzer.connections.get(conn)
        if opened is None:
            return None
        bucket = getattr(self.analyzer.negotiated.get(conn), "bucket", None)
        key = (opened.server, bucket)
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = NodeHistory(opened.server, bucket)
        return node

    def last(self) -> NodeHistory | None:
        """The node whose failover log for the vbucket the capture showed last."""
        return None if self.last_key is None else self.nodes[self.last_key]
