"""Durability: sync writes (prepares and their resolution) as the replica's passive DM sees them.

Follows, per stream, the prepares outstanding by key (DcpPrepare keys live in the
durability-prepare namespace: a prepare and the commit, abort or mutation that resolves it
name the same document key), the snapshot each message arrives in (Disk or Memory: kv_engine
relaxes its checks while the open checkpoint is a Disk one), the duplicate-prepare window a
Disk marker opens (VBucket::setDuplicatePrepareWindow) and the HCS the passive durability
monitor holds. Which messages are prepares, commits, aborts or writes committed by themselves
is the protocol tables' (``Opcode.sync_write``). It judges:

* commits and aborts of a key with no outstanding prepare, aborts after a commit of the same
  prepare, completions whose prepare seqno is not the outstanding one, completions out of
  prepare order inside a Memory snapshot, a second prepare (or a mutation) over an outstanding
  prepare outside what a Disk snapshot allows, the HCS of Disk markers going backwards;
* prepare, commit and abort on a stream requested without ``enable_sync_writes`` accepted
  (only when the capture shows the controls: :mod:`.controls` records them per stream);
* the replica's error reply that follows a message it rejects (same opaque and opcode).

What the capture cannot show: the replica's own state before the stream. A prepare whose seqno
is at or below the stream's requested start (or below the first captured marker of a stream
whose request was not captured) may be outstanding on the replica from an earlier stream, so a
completion of it is reported as ``sync-prepare-unseen`` (info) and never as an error.
"""

from __future__ import annotations

from ...protocol import SNAPSHOT_DISK, STATUS, STATUS_SUCCESS, SYNC_WRITES, SyncWrite, opcode_code
from . import bounds
from ..findings import finding_for
from ..rules.durability import (SYNC_ABORT_AFTER_COMMIT, SYNC_ABORT_AFTER_COMMIT_DISK,
                                SYNC_ABORT_WITHOUT_PREPARE, SYNC_COMMIT_WITHOUT_PREPARE,
                                SYNC_COMPLETION_OUT_OF_ORDER, SYNC_COMPLETION_SEQNO_MISMATCH,
                                SYNC_HCS_BACKWARDS, SYNC_MUTATION_WHILE_PENDING,
                                SYNC_PREPARE_UNSEEN, SYNC_PREPARE_WHILE_PENDING,
                                SYNC_REPLICA_ERROR_REPLY, SYNC_WRITE_NOT_NEGOTIATED)
from .state import FROM_LATEST, Conn, Stream, frames_of, key_text, report_on_stream

MARKER = opcode_code("DcpSnapshotMarker")
PREPARE, COMMIT, ABORT, MUTATION = (SyncWrite.PREPARE, SyncWrite.COMMIT, SyncWrite.ABORT,
                                    SyncWrite.MUTATION)
MAX_TRACKED = 65536          # streams whose durability state is remembered
UNKNOWN = object()


class Pending:
    __slots__ = ("seqno", "pdu")

    def __init__(self, seqno: int, pdu):
        self.seqno, self.pdu = seqno, pdu


class DurState:
    """One stream's sync-write state."""
    __slots__ = ("floor", "pending", "resolved", "highest_prepare", "dup_threshold", "hcs",
                 "disk_hcs_pdu", "awaiting")

    def __init__(self, floor: int):
        self.floor = floor                  # seqnos <= floor: the replica may know them already
        self.pending: dict[bytes, Pending] = {}          # outstanding prepares by key
        self.resolved: dict[bytes, tuple] = {}   # key -> (prepare seqno, "commit"|"abort", pdu)
        self.highest_prepare = 0
        self.dup_threshold = 0              # VBucket::allowedDuplicatePrepareThreshold
        self.hcs = 0                        # the passive DM's HCS as far as the stream shows
        self.disk_hcs_pdu = None            # the Disk marker that set it last
        self.awaiting = None                # (opcode, pdu, rule) a rejection reply may follow


class Durability:
    """Judges the sync-write messages of each stream."""

    def __init__(self, controls=None):
        self.controls = controls           # the tracker's Controls: per-stream negotiation
        self.states: dict[tuple, tuple[Stream, DurState]] = {}

    # --- hooks (called by the tracker) ----------------------------------------------------

    def on_message(self, c: Conn, pdu, msg, from_consumer: bool, out: list) -> None:
        op = msg.opcode
        sync = SYNC_WRITES.get(op)     # the message's part in sync writes (protocol tables)
        if sync is None and op != MARKER:
            return
        if not msg.is_request:
            if from_consumer and msg.status != STATUS_SUCCESS:
                self._reply(c, pdu, msg, out)
            return
        if from_consumer:
            return
        st = c.streams.get((msg.vbucket, msg.stream_id))
        if st is None or not st.active or st.cut or st.opaque != msg.opaque:
            return
        entry = self.states.get((c.id, st.vb, st.sid))
        ds = entry[1] if entry is not None and entry[0] is st else self._state(c, st, msg)
        if ds is None:
            return
        if ds.floor is None:        # the first marker after a cut: prepares before it may be hidden
            ds.floor = max(st.highest_seqno, msg.fields.get("start_seqno", 1) - 1)
        if len(msg.key) != msg.keylen:
            return                          # the key was not captured whole
        if op == MARKER:
            self._marker(st, ds, pdu, msg, out)
            return
        if sync is MUTATION and not ds.pending:
            return                           # nothing outstanding for it to complete
        if st.snap is None and not st.in_oso:
            return                           # no valid snapshot: the stream rules say why
        if "by_seqno" not in msg.fields and sync not in (COMMIT, ABORT):
            return
        disk = st.in_oso or bool(st.snap.flags & SNAPSHOT_DISK)
        key = bytes(msg.key)
        if sync is not MUTATION:
            self._negotiated(c, st, pdu, msg, out)
        if sync is PREPARE:
            self._prepare(st, ds, key, disk, pdu, msg, out)
        elif sync is MUTATION:
            self._committed(st, ds, key, disk, pdu, msg, out)
        elif "prepared_seqno" in msg.fields:
            self._completion(st, ds, key, disk, pdu, msg, out)

    def on_producer_cut(self, c: Conn) -> None:
        """A cut of the producer's direction may have hidden prepares and completions: what
        is outstanding is unknown; from each stream's next marker on, completions of
        prepares before it are unsure (``sync-prepare-unseen``)."""
        for (cid, _, _), (st, ds) in self.states.items():
            if cid == c.id:
                ds.pending.clear()
                ds.resolved.clear()
                ds.floor = None
                ds.awaiting = None

    def on_stream_end(self, c: Conn, st: Stream) -> None:
        key = (c.id, st.vb, st.sid)
        entry = self.states.get(key)
        if entry is not None and entry[0] is st:
            del self.states[key]

    # --- state ----------------------------------------------------------------------------

    def _state(self, c: Conn, st: Stream, msg) -> DurState | None:
        key = (c.id, st.vb, st.sid)
        entry = self.states.get(key)
        if entry is not None and entry[0] is st:
            return entry[1]
        req = st.request
        if req is not None and not req.get("flags", 0) & FROM_LATEST:
            floor = req.get("start_seqno", 0)
        elif msg.opcode == MARKER and "start_seqno" in msg.fields:
            floor = max(0, msg.fields["start_seqno"] - 1)
        else:
            return None         # not from a marker: wait for one to know where we start
        if entry is None and len(self.states) >= MAX_TRACKED:
            del self.states[next(iter(self.states))]
        ds = DurState(floor)
        self.states[key] = (st, ds)
        return ds

    # --- messages -------------------------------------------------------------------------

    def _marker(self, st: Stream, ds: DurState, pdu, msg, out) -> None:
        snap = st.snap
        if snap is None or snap.pdu is not pdu:
            return                          # dropped or malformed: the stream rules judge it
        if not snap.flags & SNAPSHOT_DISK:
            return
        # passive_stream.cc processMarker → VBucket::setDuplicatePrepareWindow
        ds.dup_threshold = ds.highest_prepare
        hcs = msg.fields.get("high_completed_seqno")
        if hcs is None:
            return                          # V1: no HCS (snapshot-v1-disk-sync-replication)
        if hcs < ds.hcs:
            before = (f"the previous Disk marker's HCS {ds.hcs}" if ds.disk_hcs_pdu is not None
                      else f"the HCS {ds.hcs} the completions on the stream reached")
            report_on_stream(st, out, SYNC_HCS_BACKWARDS.id, f"Disk marker on {st.describe()} "
                             f"carries HCS {hcs}, below {before}: the replica's passive DM "
                             "throws at the snapshot end (monotonic HCS)", pdu, msg,
                             {"high_completed_seqno": hcs, "previous_hcs": ds.hcs},
                             frames_of(ds.disk_hcs_pdu))
        ds.hcs = max(ds.hcs, hcs)
        ds.disk_hcs_pdu = pdu

    def _negotiated(self, c: Conn, st: Stream, pdu, msg, out) -> None:
        if self.controls is None:
            return
        rec = self.controls.conns.get(c.id)
        entry = rec.streams.get((st.vb, st.sid)) if rec is not None and rec.conn is c else None
        if entry is None or entry[0] is not st or entry[1] is None:
            return                          # the controls were not captured: not judged
        neg = entry[1]
        if neg.sync_writes:
            return
        report_on_stream(st, out, SYNC_WRITE_NOT_NEGOTIATED.id, f"{msg.name} on "
                         f"{st.describe()}, a stream requested without enable_sync_writes "
                         "accepted: the producer sends mutations only", pdu, msg,
                         {"enable_sync_writes": neg.controls.get("enable_sync_writes")})

    def _prepare(self, st: Stream, ds: DurState, key: bytes, disk: bool, pdu, msg, out):
        seqno = msg.fields["by_seqno"]
        old = ds.pending.get(key)
        if old is not None and old.seqno > ds.dup_threshold:
            where = ("in a Disk snapshot, after the duplicate-prepare window"
                     if disk else "in a Memory snapshot")
            self._flag(st, ds, out, SYNC_PREPARE_WHILE_PENDING.id, f"prepare of {key_text(key)} "
                       f"(seqno {seqno}) on {st.describe()} {where}, while its prepare at seqno "
                       f"{old.seqno} is outstanding: the replica "
                       + ("throws (VBucket::processSet)" if disk else
                          "answers SyncWriteInProgress"), pdu, msg,
                       {"prepared_seqno": old.seqno}, frames_of(old.pdu), reply=not disk)
            return
        if old is None and len(ds.pending) >= bounds.MAX_KEYS:
            ds.pending.clear()              # too many: what was outstanding is unknown now
            ds.floor = max(ds.floor, ds.highest_prepare)
        ds.pending[key] = Pending(seqno, pdu)
        ds.resolved.pop(key, None)
        ds.highest_prepare = max(ds.highest_prepare, seqno)

    def _committed(self, st: Stream, ds: DurState, key: bytes, disk: bool, pdu, msg, out):
        old = ds.pending.get(key)
        if old is None:
            return
        if disk:                            # VBucket::processSet: the mutation completes it
            self._resolve(ds, key, old.seqno, "commit", pdu)
            return
        self._flag(st, ds, out, SYNC_MUTATION_WHILE_PENDING.id, f"{msg.name} of "
                   f"{key_text(key)} (seqno {msg.fields['by_seqno']}) on {st.describe()} in a "
                   f"Memory snapshot while its prepare at seqno {old.seqno} is outstanding: the "
                   "replica answers SyncWriteInProgress", pdu, msg,
                   {"prepared_seqno": old.seqno}, frames_of(old.pdu), reply=True)

    def _completion(self, st: Stream, ds: DurState, key: bytes, disk: bool, pdu, msg, out):
        commit = SYNC_WRITES[msg.opcode] is COMMIT
        kind = "commit" if commit else "abort"
        p = msg.fields["prepared_seqno"]
        old = ds.pending.get(key)
        shown = {"prepared_seqno": p}
        if old is not None:
            if p != old.seqno and (not disk or p < st.snap.start):
                why = ("in a Memory snapshot" if not disk else
                       f"below the Disk snapshot's start {st.snap.start}")
                self._flag(st, ds, out, SYNC_COMPLETION_SEQNO_MISMATCH.id, f"{kind} of "
                           f"{key_text(key)} on {st.describe()} names prepare seqno {p}, but "
                           f"the outstanding prepare is at seqno {old.seqno} ({why}): the "
                           "replica throws", pdu, msg, shown, frames_of(old.pdu))
                return
            if not disk:
                first = min(ds.pending.values(), key=lambda q: q.seqno)
                if first.seqno < old.seqno:
                    self._flag(st, ds, out, SYNC_COMPLETION_OUT_OF_ORDER.id, f"{kind} of "
                               f"{key_text(key)} (prepare seqno {old.seqno}) on "
                               f"{st.describe()} in a Memory snapshot while the older prepare "
                               f"at seqno {first.seqno} is unresolved: the replica's passive "
                               "DM throws", pdu, msg, shown, frames_of(first.pdu, old.pdu))
                    return
            self._resolve(ds, key, old.seqno, kind, pdu)
            return
        prev = ds.resolved.get(key)
        if prev is not None and prev[0] == p and prev[1] == "commit" and not commit:
            if disk:
                self._flag(st, ds, out, SYNC_ABORT_AFTER_COMMIT_DISK.id, f"abort of "
                           f"{key_text(key)} (prepare seqno {p}) on {st.describe()} in a Disk "
                           "snapshot after that prepare was committed: the replica records "
                           "an abort for it", pdu, msg, shown, frames_of(prev[2]))
            else:
                self._flag(st, ds, out, SYNC_ABORT_AFTER_COMMIT.id, f"abort of {key_text(key)} "
                           f"(prepare seqno {p}) on {st.describe()} after that prepare was "
                           "committed: no prepare is outstanding, the replica answers Einval",
                           pdu, msg, shown, frames_of(prev[2]), reply=True)
            return
        if not commit and disk:
            return                          # VBucket::abort: legal in a Disk snapshot
        if p <= ds.floor:
            report_on_stream(st, out, SYNC_PREPARE_UNSEEN.id, f"{kind} of {key_text(key)} on "
                             f"{st.describe()}: its prepare (seqno {p}) is not after the "
                             f"stream's start ({ds.floor}); the replica may hold it from before",
                             pdu, msg, shown)
            return
        again = (f" (that prepare was {prev[1]}ed at frame {prev[2].frame})"
                 if prev is not None and prev[0] == p else "")
        if commit:
            self._flag(st, ds, out, SYNC_COMMIT_WITHOUT_PREPARE.id, f"commit of {key_text(key)} "
                       f"on {st.describe()} with no outstanding prepare{again}: prepare seqno "
                       f"{p} is after the stream's start {ds.floor} and was not sent; the "
                       "replica answers KeyEnoent", pdu, msg, shown,
                       frames_of(prev and prev[2]), reply=True)
        else:
            self._flag(st, ds, out, SYNC_ABORT_WITHOUT_PREPARE.id, f"abort of {key_text(key)} on "
                       f"{st.describe()} in a Memory snapshot with no outstanding "
                       f"prepare{again}: prepare seqno {p} is after the stream's start "
                       f"{ds.floor} and was not sent; the replica answers Einval", pdu, msg,
                       shown, frames_of(prev and prev[2]), reply=True)

    def _resolve(self, ds: DurState, key: bytes, seqno: int, kind: str, pdu) -> None:
        del ds.pending[key]
        if key not in ds.resolved and len(ds.resolved) >= bounds.MAX_KEYS:
            del ds.resolved[next(iter(ds.resolved))]
        ds.resolved[key] = (seqno, kind, pdu)
        ds.hcs = max(ds.hcs, seqno)

    def _flag(self, st, ds, out, rid, text, pdu, msg, shown, context=(), reply=False):
        report_on_stream(st, out, rid, text, pdu, msg, shown, context)
        ds.awaiting = (msg.opcode, pdu, rid) if reply else None

    # --- the replica's answer -------------------------------------------------------------

    def _reply(self, c: Conn, pdu, msg, out) -> None:
        for (cid, _, _), (st, ds) in self.states.items():
            if cid != c.id or st.opaque != msg.opaque or ds.awaiting is None:
                continue
            op, offending, rid = ds.awaiting
            if op != msg.opcode:
                continue
            ds.awaiting = None
            f = finding_for(SYNC_REPLICA_ERROR_REPLY.id, f"the replica answered the {msg.name} "
                            f"of frame {offending.frame} on {st.describe()} ({rid}) with "
                            f"{STATUS.text(msg.status)}", pdu, msg,
                            {"status": STATUS.text(msg.status), "rule": rid},
                            (offending.frame,))
            f.vbucket = st.vb
            out.append(f)
            return
