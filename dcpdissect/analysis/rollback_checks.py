"""Rollback checks: predict each stream request's answer and compare with the server's.

The model is kv_engine's ``FailoverTable::needsRollback`` as ``DcpProducer::streamRequest``
calls it (engines/ep/src/dcp/producer.cc). Per server, bucket and vbucket the latest
failover log of the capture is kept (``FAILOVER_LOG_OPCODES`` responses); a successful
stream request is judged against the log in its own response, which the producer reads
under the same lock as its decision. The highest seqno seen is a lower bound of the high
seqno, a disk marker's purge seqno a lower bound of the purge seqno (compaction moves it
on). A conclusion is reported as sure only when those unknowns, FromLatest's substitution
and the collection purge exemption cannot change it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..protocol import (
    FAILOVER_LOG_OPCODES, STATUS_ROLLBACK, STATUS_SUCCESS, STREAM_FLAGS, STREAM_OPCODES,
    opcode_code, u64_text,
)
from .findings import Finding, finding_for
from .rollback import REASON_AHEAD, REASON_NO_UUID, Decision, FailoverEntry, needs_rollback, sanitize
from .rules.rollback import (ROLLBACK_LOOP, ROLLBACK_MISSED, ROLLBACK_NOT_APPLIED,
                             ROLLBACK_PREDICTION_UNSURE, ROLLBACK_PURGE_SEQNO_NOT_SENT,
                             ROLLBACK_SEQNO_ABOVE_START, ROLLBACK_UNEXPECTED)

IGNORE_PURGED_TOMBSTONES = STREAM_FLAGS.bit("ignore_purged_tombstones")
STRICT_VBUUID = STREAM_FLAGS.bit("strict_vbuuid")
FROM_LATEST = STREAM_FLAGS.bit("from_latest")
STREAM_REQ = opcode_code("DcpStreamReq")
MARKER = opcode_code("DcpSnapshotMarker")


@dataclass
class _Request:
    opcode: int
    vbucket: int
    fields: dict
    pdu: object
    msg: object


@dataclass
class _LastRollback:
    seqno: int
    uuid: int
    start: int
    snap: tuple[int, int]
    table: list


MAX_PENDING = 65536       # unanswered stream / failover-log requests remembered
KV_REPLICATION = "replication:"   # DcpOpen names of kv_engine's own replication consumers


@dataclass
class _Waiting:
    """A ROLLBACK answered where the capture does not show the node's failover log as it
    was then (only one from another connection, maybe before the node restarted)."""
    req: _Request
    msg: object
    pdu: object
    negotiated: object


MAX_WAITING = 4096        # ROLLBACKs waiting for their node's failover log


class RollbackTracker:
    def __init__(self):
        self.pending: dict[tuple[int, int], _Request] = {}
        # (server, bucket, vb) -> (table, the connection whose response carried it)
        self.tables: dict[tuple, tuple[list[FailoverEntry], int]] = {}
        self.high: dict[tuple, int] = {}        # (server, bucket, vb) -> highest seqno seen
        self.purge: dict[tuple, int] = {}       # (server, bucket, vb) -> highest purge seqno seen
        self.seen_purge: dict[tuple, int] = {}  # (consumer name, bucket, vb) -> purge
        self.rollbacks: dict[tuple, _LastRollback] = {}     # (consumer, bucket, vb)
        self.waiting: dict[tuple, list[_Waiting]] = {}      # (server, bucket, vb) -> ROLLBACKs

    def on_close(self, conn: int) -> None:
        for key in [k for k in self.pending if k[0] == conn]:
            del self.pending[key]

    def on_message(self, pdu, msg, opened, negotiated=None) -> list[Finding]:
        """Requests are taken from either side: behind ns_server's proxy the consumer's
        stream request travels server→client."""
        if opened is None:
            return []
        key = (opened.server, getattr(negotiated, "bucket", None), msg.vbucket)
        op = msg.opcode
        if msg.is_request:
            if op in FAILOVER_LOG_OPCODES:
                pending = self.pending
                if len(pending) >= MAX_PENDING:      # never answered: forget the oldest
                    del pending[next(iter(pending))]
                pending[(pdu.conn, msg.opaque)] = _Request(op, msg.vbucket, msg.fields, pdu, msg)
                if op == STREAM_REQ and "start_seqno" in msg.fields:
                    return self._check_request(pdu, msg, opened, negotiated, key)
            elif op in STREAM_OPCODES and msg.vbucket is not None:
                self._observe(key, msg, negotiated)
            return []
        req = self.pending.pop((pdu.conn, msg.opaque), None) if op in FAILOVER_LOG_OPCODES else None
        if req is None:
            return []
        key = key[:2] + (req.vbucket,)
        log = msg.fields.get("failover_log")
        if msg.status == STATUS_SUCCESS and log:
            # the response's own log is the one the producer decided with (producer.cc)
            self.tables[key] = ([FailoverEntry(e["vbucket_uuid"], e["seqno"]) for e in log],
                                pdu.conn)
            out = self._judge(req, msg, pdu, opened, negotiated, key, success=True) \
                if req.opcode == STREAM_REQ else []
            for w in self.waiting.pop(key, ()):
                out += self._model(w.req, w.msg, w.pdu, w.negotiated, key, False)
            return out
        if req.opcode == STREAM_REQ and msg.status == STATUS_ROLLBACK and "rollback_seqno" in msg.fields:
            return self._judge(req, msg, pdu, opened, negotiated, key, success=False)
        return []

    # -- internals ---------------------------------------------------------------------
    def _observe(self, key, msg, negotiated) -> None:
        """A producer's stream message: its seqno bounds the high seqno, a disk marker's
        purge seqno the purge seqno."""
        f = msg.fields
        seen = seen_seqno(f)
        if seen and seen > self.high.get(key, 0):
            self.high[key] = seen
        purge = f.get("purge_seqno") if msg.opcode == MARKER else None
        if purge:
            self.purge[key] = max(purge, self.purge.get(key, 0))
            name = getattr(negotiated, "name", None)
            if name:
                self.seen_purge[(name,) + key[1:]] = purge

    def _check_request(self, pdu, msg, opened, negotiated, key) -> list[Finding]:
        """R11: a request after ROLLBACK(R) must start at or below R with a uuid below R;
        R13: a connector resuming should pass on the purge seqno it was sent."""
        f = msg.fields
        out = []
        name = getattr(negotiated, "name", None)
        purge = self.seen_purge.get((name,) + key[1:]) if name else None
        sent = request_purge_seqno(msg)
        if (purge and f["start_seqno"] and sent != purge and not msg.value_cut
                and not name.startswith(KV_REPLICATION)
                and getattr(negotiated, "collections", None)):
            out.append(finding_for(ROLLBACK_PURGE_SEQNO_NOT_SENT.id,
                                   f"request purge_seqno {sent if sent is not None else 'absent'}; "
                                   f"this consumer's last disk marker for the vbucket carried "
                                   f"purge seqno {purge}", pdu, msg,
                                   {"purge_seqno": sent, "last_marker_purge_seqno": purge}))
        last = self.rollbacks.get(_consumer(opened, negotiated) + key[1:])
        if last is None:
            return out
        if last.seqno == 0 and f["start_seqno"] == last.start:
            return out         # kv_engine's consumer retries with an older uuid after ROLLBACK(0)
        above = {e.uuid for e in last.table if e.seqno > last.seqno}
        problems = []
        if f["start_seqno"] > last.seqno and not f.get("flags", 0) & FROM_LATEST:
            problems.append(f"start {f['start_seqno']} > rollback seqno {last.seqno}")
        if f["vbucket_uuid"] in above:
            problems.append(f"uuid {u64_text(f['vbucket_uuid'])} belongs to history above {last.seqno}")
        if not problems:
            return out
        return out + [finding_for(ROLLBACK_NOT_APPLIED.id, "; ".join(problems), pdu, msg,
                            {"start_seqno": f["start_seqno"], "vbucket_uuid": f["vbucket_uuid"],
                             "previous_rollback_seqno": last.seqno})]

    def _judge(self, req: _Request, msg, pdu, opened, negotiated, key, success: bool) -> list[Finding]:
        if "start_seqno" not in req.fields:
            return []
        start, uuid, snap, flags, shown = _asked(req, msg, success)
        from_latest = bool(flags & FROM_LATEST)
        context = tuple(req.pdu.frames)
        out: list[Finding] = []
        if not success:
            r = msg.fields["rollback_seqno"]
            rb_key = _consumer(opened, negotiated) + key[1:]
            last = self.rollbacks.get(rb_key)
            if r > start and not from_latest:        # FromLatest replaced start by the high seqno
                out.append(finding_for(ROLLBACK_SEQNO_ABOVE_START.id,
                                       f"ROLLBACK({r}) for a request starting at {start}",
                                       pdu, msg, shown, context))
            if r == start and last and (last.uuid, last.start, last.snap, last.seqno) == (uuid, start, snap, r):
                out.append(finding_for(ROLLBACK_LOOP.id, f"ROLLBACK({r}) answered again to the same "
                                       f"request (uuid {u64_text(uuid)}, start {start}, snapshot "
                                       f"[{snap[0]}, {snap[1]}])", pdu, msg, shown, context))
            table, conn = self.tables.get(key, ([], None))
            self.rollbacks[rb_key] = _LastRollback(r, uuid, start, snap, list(table))
            if conn != pdu.conn:
                # the node's log as it was when it answered is not known yet (a log from
                # another connection may be from before a restart): it comes with the
                # node's next successful answer
                waiting = self.waiting.setdefault(key, [])
                if len(waiting) < MAX_WAITING:
                    waiting.append(_Waiting(req, msg, pdu, negotiated))
                for finding in out:
                    finding.vbucket = req.vbucket
                return out
        for finding in out:
            finding.vbucket = req.vbucket
        return out + self._model(req, msg, pdu, negotiated, key, success)

    def _model(self, req: _Request, msg, pdu, negotiated, key, success: bool) -> list[Finding]:
        """The server's answer against needsRollback on the node's failover log."""
        start, uuid, snap, flags, shown = _asked(req, msg, success)
        from_latest = bool(flags & FROM_LATEST)
        context = tuple(req.pdu.frames)
        out: list[Finding] = []
        table = self.tables.get(key, (None, None))[0]
        if table is None or start == 0 and not flags & STRICT_VBUUID and not from_latest:
            return out
        high_lb = self.high.get(key, 0)
        table = sanitize(table, high_lb, max_entries=None)
        if from_latest:
            d, sure = _from_latest(table, uuid, high_lb)
        else:
            d, sure = self._decide(req, table, start, uuid, snap, flags, high_lb, key, negotiated, success)
        model = (f"model: rollback to {d.seqno} ({d.reason})" if d.rollback else "model: no rollback")
        shown["model"] = model
        if success and d.rollback:
            if sure:
                out.append(finding_for(ROLLBACK_MISSED.id, f"success for uuid {u64_text(uuid)} start "
                                       f"{start} snapshot [{snap[0]}, {snap[1]}]; {model}", pdu,
                                       msg, shown, context))
            else:
                out.append(finding_for(ROLLBACK_PREDICTION_UNSURE.id, f"{model} if the server's "
                                       f"high and purge seqnos were the ones seen ({high_lb}, "
                                       f"{self.purge.get(key, 0)}); it answered success, which is "
                                       "right if they were larger or the collection purge exemption "
                                       "applied", pdu, msg, shown, context))
        elif not success and not d.rollback:
            rolled_to = msg.fields["rollback_seqno"]
            if sure and (rolled_to or flags & IGNORE_PURGED_TOMBSTONES):
                out.append(finding_for(ROLLBACK_UNEXPECTED.id, f"ROLLBACK({rolled_to}) "
                                       f"for uuid {u64_text(uuid)} start {start}; {model}", pdu, msg, shown,
                                       context))
            else:
                out.append(finding_for(ROLLBACK_PREDICTION_UNSURE.id, f"{model}, but the purge "
                                       "seqno is only known as a lower bound: a purge rollback "
                                       "to 0 cannot be excluded", pdu, msg, shown, context))
        for finding in out:
            finding.vbucket = req.vbucket
        return out

    def _decide(self, req, table, start, uuid, snap, flags, high_lb, key, negotiated, success):
        """needsRollback with what the capture shows, and whether the unknowns (the high and
        purge seqnos, the collection exemption) could change the answer."""
        ignore_purge = bool(flags & IGNORE_PURGED_TOMBSTONES)
        purge_lb = 0 if ignore_purge else self.purge.get(key, 0)
        remote = request_purge_seqno(req.msg) or 0
        d = needs_rollback(table, start, high_lb, uuid, snap[0], snap[1], purge_lb,
                           remote_purge=remote, strict_uuid=bool(flags & STRICT_VBUUID))
        uuid_pos = next((i for i, e in enumerate(table) if e.uuid == uuid), None)
        if d.rollback and d.reason.startswith("purge"):
            # the actual purge seqno is >= the one seen, so the rule holds when the client's
            # differs from every candidate; the exemption needs a filtered (non pass-through)
            # stream, which only kv_engine's own replication is known not to be
            sure = remote < purge_lb and _pass_through(req.msg, negotiated)
        elif d.rollback and uuid_pos == 0:
            # the client's uuid is the newest: only the unknown high seqno (>= the seqnos seen)
            # decides, and a success shows it was at least the snapshot end
            return (Decision(False), True) if success else (d, False)
        elif d.rollback:
            sure = d.reason == REASON_NO_UUID or uuid_pos is not None
        else:
            sure = ignore_purge or start == 0 or not success
        return d, sure


def seen_seqno(fields: dict):
    """The seqno a producer's stream message shows the vbucket holds (its high seqno is at
    least this): an item's, a commit's or abort's, a marker's end; None for none."""
    return (fields.get("by_seqno") or fields.get("commit_seqno") or fields.get("abort_seqno")
            or fields.get("end_seqno"))


def _asked(req: _Request, msg, success: bool) -> tuple:
    """(start, uuid, (snap_start, snap_end), flags, the fields a finding shows) of a stream
    request and its answer."""
    f = req.fields
    start, uuid = f["start_seqno"], f["vbucket_uuid"]
    snap = (f["snap_start_seqno"], f["snap_end_seqno"])
    shown = {"start_seqno": start, "vbucket_uuid": uuid, "snap_start_seqno": snap[0],
             "snap_end_seqno": snap[1]}
    if not success:
        shown["rollback_seqno"] = msg.fields["rollback_seqno"]
    return start, uuid, snap, f.get("flags", 0), shown


def _consumer(opened, negotiated) -> tuple:
    """Who asked, across connections and nodes: the DcpOpen name, else the client's address
    on that server."""
    name = getattr(negotiated, "name", None)
    return (name,) if name else (opened.client[0], opened.server)


def _pass_through(msg, negotiated) -> bool:
    """A stream whose filter is pass-through (no collection purge exemption): kv_engine's
    replication on a collection-aware connection without a collection or scope filter."""
    name = getattr(negotiated, "name", None) or ""
    if not name.startswith(KV_REPLICATION) or not getattr(negotiated, "collections", None):
        return False
    try:
        value = json.loads(bytes(msg.value)) if msg.value_len else {}
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and not {"collections", "scope"} & set(value)


def _from_latest(table, uuid, high_lb) -> tuple[Decision, bool]:
    """FromLatest: the producer sets start and the snapshot to its high seqno H and a uuid
    of 0 to the latest one before deciding (producer.cc); H >= the highest seqno seen."""
    uuid = uuid or table[0].uuid
    pos = next((i for i in range(len(table) - 1, -1, -1) if table[i].uuid == uuid), None)
    if pos is None:
        return Decision(True, 0, REASON_NO_UUID), high_lb > 0
    if pos == 0:
        return Decision(False), True
    upper = table[pos - 1].seqno
    return Decision(True, upper, REASON_AHEAD.format(upper=upper)), high_lb > upper


def request_purge_seqno(msg) -> int | None:
    """The ``purge_seqno`` (a decimal string) of a stream request's JSON value, if any."""
    if not msg.value_len:
        return None
    try:
        value = json.loads(bytes(msg.value))
        return int(value["purge_seqno"]) if isinstance(value, dict) and "purge_seqno" in value else None
    except (ValueError, TypeError, RecursionError, OverflowError):   # deep nesting, 1e999
        return None
