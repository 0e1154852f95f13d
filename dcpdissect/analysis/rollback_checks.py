"""Rollback checks: predict each stream request's answer and compare with the server's.

For every vbucket of every server the latest failover log seen in the capture (the responses
of the opcodes in ``FAILOVER_LOG_OPCODES``: get failover log, successful stream requests) is
kept; the highest seqno seen from that server for
the vbucket is a lower bound of its high seqno, and a V2.2 marker's purge seqno gives its
purge seqno. A conclusion is reported as sure only when the unknowns cannot change it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..protocol import (
    FAILOVER_LOG_OPCODES, STATUS_ROLLBACK, STATUS_SUCCESS, STREAM_FLAGS, opcode_code,
)
from .findings import Finding, finding_for
from .rollback import REASON_NO_UUID, FailoverEntry, needs_rollback, sanitize
from .rules import ERROR, INFO, WARNING

IGNORE_PURGED_TOMBSTONES = STREAM_FLAGS.bit("ignore_purged_tombstones")
STRICT_VBUUID = STREAM_FLAGS.bit("strict_vbuuid")
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


class RollbackTracker:
    def __init__(self):
        self.pending: dict[tuple[int, int], _Request] = {}
        self.tables: dict[tuple, list[FailoverEntry]] = {}     # (server, vb) -> table
        self.high: dict[tuple, int] = {}                        # (server, vb) -> max seqno seen
        self.purge: dict[tuple, int] = {}                       # (server, vb) -> purge seqno
        self.rollbacks: dict[tuple, _LastRollback] = {}         # (client ip, server, vb)

    def on_close(self, conn: int) -> None:
        for key in [k for k in self.pending if k[0] == conn]:
            del self.pending[key]

    def on_message(self, pdu, msg, opened) -> list[Finding]:
        if opened is None:
            return []
        server = opened.server
        op = msg.opcode
        if msg.is_request:
            if op in FAILOVER_LOG_OPCODES and pdu.direction == 0:
                pending = self.pending
                if len(pending) >= MAX_PENDING:      # never answered: forget the oldest
                    del pending[next(iter(pending))]
                pending[(pdu.conn, msg.opaque)] = _Request(op, msg.vbucket, msg.fields, pdu, msg)
                if op == STREAM_REQ and "start_seqno" in msg.fields:
                    return self._check_request(pdu, msg, opened)
            elif pdu.direction == 1 and msg.vbucket is not None:
                self._observe(server, msg)
            return []
        req = self.pending.pop((pdu.conn, msg.opaque), None) if op in FAILOVER_LOG_OPCODES else None
        if req is None:
            return []
        log = msg.fields.get("failover_log")
        if msg.status == STATUS_SUCCESS and log:
            table = [FailoverEntry(e["vbucket_uuid"], e["seqno"]) for e in log]
            key = (server, req.vbucket)
            if req.opcode == STREAM_REQ:
                out = self._judge(req, msg, pdu, opened, success=True)
                self.tables[key] = table
                return out
            self.tables[key] = table
            return []
        if req.opcode == STREAM_REQ and msg.status == STATUS_ROLLBACK and "rollback_seqno" in msg.fields:
            return self._judge(req, msg, pdu, opened, success=False)
        return []

    # -- internals ---------------------------------------------------------------------
    def _observe(self, server, msg) -> None:
        key = (server, msg.vbucket)
        f = msg.fields
        seen = f.get("by_seqno") or f.get("commit_seqno") or f.get("abort_seqno") or f.get("end_seqno")
        if seen and seen > self.high.get(key, 0):
            self.high[key] = seen
        if msg.opcode == MARKER and "purge_seqno" in f:
            self.purge[key] = f["purge_seqno"]

    def _check_request(self, pdu, msg, opened) -> list[Finding]:
        """R11: a request after ROLLBACK(R) must start at or below R with a uuid below R."""
        f = msg.fields
        out = []
        purge = self.purge.get((opened.server, msg.vbucket))
        sent = request_purge_seqno(msg)
        if purge and f["start_seqno"] and sent != purge:
            out.append(finding_for("rollback-purge-seqno-not-sent",
                                   f"request purge_seqno {sent if sent is not None else 'absent'}; "
                                   f"the last disk marker carried purge seqno {purge}", pdu, msg,
                                   {"purge_seqno": sent, "last_marker_purge_seqno": purge}))
        last = self.rollbacks.get((opened.client[0], opened.server, msg.vbucket))
        if last is None:
            return out
        same = (f["vbucket_uuid"], f["start_seqno"]) == (last.uuid, last.start)
        if same or (last.seqno == 0 and f["start_seqno"] == last.start):
            return out         # a retry, or kv_engine's retry with an older uuid after ROLLBACK(0)
        above = {e.uuid for e in last.table if e.seqno > last.seqno}
        problems = []
        if f["start_seqno"] > last.seqno:
            problems.append(f"start {f['start_seqno']} > rollback seqno {last.seqno}")
        if f["vbucket_uuid"] in above:
            problems.append(f"uuid {f['vbucket_uuid']:#x} belongs to history above {last.seqno}")
        if not problems:
            return out
        return out + [finding_for("rollback-not-applied", "; ".join(problems), pdu, msg,
                            {"start_seqno": f["start_seqno"], "vbucket_uuid": f"{f['vbucket_uuid']:#x}",
                             "previous_rollback_seqno": last.seqno})]

    def _judge(self, req: _Request, msg, pdu, opened, success: bool) -> list[Finding]:
        f = req.fields
        if "start_seqno" not in f:
            return []
        key = (opened.server, req.vbucket)
        start, uuid = f["start_seqno"], f["vbucket_uuid"]
        snap = (f["snap_start_seqno"], f["snap_end_seqno"])
        flags = f.get("flags", 0)
        shown = {"start_seqno": start, "vbucket_uuid": f"{uuid:#x}", "snap_start_seqno": snap[0],
                 "snap_end_seqno": snap[1]}
        context = tuple(req.pdu.frames)
        out: list[Finding] = []
        if not success:
            r = msg.fields["rollback_seqno"]
            shown["rollback_seqno"] = r
            rb_key = (opened.client[0], opened.server, req.vbucket)
            last = self.rollbacks.get(rb_key)
            if r > start:
                out.append(finding_for("rollback-seqno-above-start",
                                       f"ROLLBACK({r}) for a request starting at {start}",
                                       pdu, msg, shown, context))
            if r == start and last and (last.uuid, last.start, last.snap, last.seqno) == (uuid, start, snap, r):
                out.append(finding_for("rollback-loop", f"ROLLBACK({r}) answered again to the same "
                                       f"request (uuid {uuid:#x}, start {start}, snapshot "
                                       f"[{snap[0]}, {snap[1]}])", pdu, msg, shown, context))
            self.rollbacks[rb_key] = _LastRollback(r, uuid, start, snap,
                                                   list(self.tables.get(key, [])))
        table = self.tables.get(key)
        if table is None or start == 0 and not flags & STRICT_VBUUID:
            return out
        table = sanitize(table, self.high.get(key, 0))
        high_lb = self.high.get(key, 0)
        purge_known = flags & IGNORE_PURGED_TOMBSTONES or key in self.purge
        local_purge = 0 if flags & IGNORE_PURGED_TOMBSTONES else self.purge.get(key, 0)
        d = needs_rollback(table, start, high_lb, uuid, snap[0], snap[1], local_purge,
                           remote_purge=request_purge_seqno(req.msg) or 0,
                           strict_uuid=bool(flags & STRICT_VBUUID))
        uuid_pos = next((i for i, e in enumerate(table) if e.uuid == uuid), None)
        upper_known = uuid_pos is not None and uuid_pos > 0
        if d.rollback:
            sure = d.reason == REASON_NO_UUID or upper_known
        else:
            sure = bool(purge_known) or start == 0
        model = (f"model: rollback to {d.seqno} ({d.reason})" if d.rollback else "model: no rollback")
        shown["model"] = model
        if success and d.rollback:
            if sure:
                out.append(finding_for("rollback-missed", f"success for uuid {uuid:#x} start {start} "
                                       f"snapshot [{snap[0]}, {snap[1]}]; {model}", pdu, msg, shown,
                                       context))
            else:
                out.append(finding_for("rollback-prediction-unsure", f"{model} if the server's high "
                                       f"seqno were {high_lb} (the highest seen); it answered success, "
                                       "which is right if its high seqno was larger", pdu, msg,
                                       shown, context))
        elif not success and not d.rollback:
            if sure:
                out.append(finding_for("rollback-unexpected", f"ROLLBACK({msg.fields['rollback_seqno']}) "
                                       f"for uuid {uuid:#x} start {start}; {model}", pdu, msg, shown,
                                       context))
            else:
                out.append(finding_for("rollback-prediction-unsure", f"{model}, but the purge seqno "
                                       "is not visible in the capture: a purge rollback to 0 "
                                       "cannot be excluded", pdu, msg, shown, context))
        for finding in out:
            finding.vbucket = req.vbucket
        return out


def request_purge_seqno(msg) -> int | None:
    """The ``purge_seqno`` (a decimal string) of a stream request's JSON value, if any."""
    if not msg.value_len:
        return None
    try:
        value = json.loads(bytes(msg.value))
        return int(value["purge_seqno"]) if isinstance(value, dict) and "purge_seqno" in value else None
    except (ValueError, TypeError, RecursionError, OverflowError):   # deep nesting, 1e999
        return None
