"""Snapshots: does the data a stream carries fit the markers that announce it?

Judges snapshot markers (ordering against the previous marker and the request, behind the
last seqno, inside OSO), the items and SeqnoAdvanced inside them (before any marker,
outside the snapshot, not increasing, after SeqnoAdvanced, duplicate keys), OSO pairing,
whether a snapshot completed before the next marker or STREAM_END, and which start-seqno
convention each marker follows (:func:`classify`). The convention of every snapshot marker
request is reported once through ``on_marker(pdu, label)``: at once, or when the first item
after the marker (or what ends its snapshot) shows it; None when no convention applies.
"""

from __future__ import annotations

from ...protocol import (ITEM_OPCODES, KEY_NAMESPACES, OSO_FLAGS, SNAPSHOT_CHECKPOINT,
                         SNAPSHOT_DISK, SNAPSHOT_FLAGS, SNAPSHOT_HISTORY, SNAPSHOT_MAY_DUPLICATE,
                         STREAM_FLAGS, opcode_code)
from ..findings import finding_for
from ..rules.lifecycle import HISTORY_DUPLICATE_KEY
from ..rules.stream import (DATA_AFTER_SEQNO_ADVANCED, DATA_BEFORE_MARKER, DATA_DUPLICATE_KEY,
                            DATA_OUTSIDE_SNAPSHOT, DATA_SEQNO_NOT_INCREASING, OSO_CONTAINS_MARKER,
                            OSO_UNPAIRED, SNAPSHOT_BEHIND_LAST_SEQNO, SNAPSHOT_END_NOT_INCREASING,
                            SNAPSHOT_FROM_CLIENT, SNAPSHOT_INCOMPLETE,
                            SNAPSHOT_START_BELOW_REQUESTED, SNAPSHOT_START_INCONSISTENT,
                            SNAPSHOT_START_OVERLAP)
from . import bounds
from .state import (FROM_LATEST, Conn, Snap, Stream, frames_of, key_text, marker_fields,
                    report_on_stream)

MARKER, STREAM_END = opcode_code("DcpSnapshotMarker"), opcode_code("DcpStreamEnd")
SEQNO_ADVANCED, OSO_SNAPSHOT = opcode_code("DcpSeqnoAdvanced"), opcode_code("DcpOsoSnapshot")
ACTIVE_VB_ONLY = STREAM_FLAGS.bit("active_vb_only")   # only an active vbucket may serve it
OSO_START, OSO_END = OSO_FLAGS.bit("start"), OSO_FLAGS.bit("end")


class Snapshots:
    """Judges the messages of each stream against its snapshots."""

    def __init__(self, on_marker=None, duplicate_keys: bool = True):
        self.on_marker = on_marker      # on_marker(pdu, label) per snapshot marker request
        self.duplicate_keys = duplicate_keys    # False: keys not kept (no convention needs them)

    # --- hooks (called by the tracker) ----------------------------------------------------

    def not_judged(self, pdu, msg, label: str | None = None) -> None:
        """A message the stream rules do not judge: a marker among them gets ``label``."""
        if self.on_marker is not None and msg.opcode == MARKER and msg.is_request:
            self.on_marker(pdu, label)

    def on_consumer_marker(self, c: Conn, pdu, msg, out) -> None:
        """A marker sent by the consumer's end of a producer connection (on a consumer
        connection memcached receives the markers ns_server relays, from the TCP client)."""
        self.not_judged(pdu, msg)
        if c.negotiation.consumer is False:
            out.append(finding_for(SNAPSHOT_FROM_CLIENT.id, "snapshot marker sent client→server: "
                                   "markers come from the producer", pdu, msg,
                                   marker_fields(msg)))

    def on_stream_message(self, st: Stream, pdu, msg, out) -> None:
        """A message the server sent on an active stream, with the stream's opaque."""
        op = msg.opcode
        if op == MARKER and "end_seqno" not in msg.fields and msg.value_len > len(msg.value):
            self._report_convention(pdu, "unknown")    # its range was not captured:
            st.cut = True                               # as if the cut hid it
            self.on_cut(st)
            return
        if st.cut and op != MARKER and not (op == OSO_SNAPSHOT and self._oso_start(msg)):
            self._after_cut(st, msg)
            return
        if op in ITEM_OPCODES:
            self._item(st, pdu, msg, out)
        elif op == MARKER:
            self._marker(st, pdu, msg, out)
        elif op == SEQNO_ADVANCED:
            self._seqno_advanced(st, pdu, msg, out)
        elif op == OSO_SNAPSHOT:
            self._oso(st, pdu, msg, out)
        elif op == STREAM_END:
            if msg.fields.get("reason") == 0 and not st.in_oso:
                self._check_complete(st, pdu, msg, out, "STREAM_END(Ok)")

    def on_stream_end(self, st: Stream, out) -> None:
        """The stream ended (or its connection did): its last marker's convention is final."""
        self._decide_convention(st, out, None)

    def on_cut(self, st: Stream) -> None:
        """A cut may have hidden messages of ``st``: its current snapshot is judged no more
        (an undecided convention stays unknown), nor its data until its next marker."""
        snap = st.snap
        if snap is not None:
            if snap.convention_undecided:
                snap.convention_undecided = False
                self._report_convention(snap.pdu, "unknown")
            snap.uncertain = True
            snap.seen_keys = None
        st.oso_seen_keys = None

    @staticmethod
    def _oso_start(msg) -> bool:
        return bool(msg.fields.get("flags", 0) & OSO_START)

    @staticmethod
    def _after_cut(st: Stream, msg) -> None:
        """A message of a stream after a cut, before its next marker: nothing is judged,
        the seqnos it shows still count."""
        spec = msg.spec
        seq = msg.fields.get(spec.seqno_field) if spec and spec.seqno_field else None
        if msg.opcode == SEQNO_ADVANCED:
            seq = msg.fields.get("by_seqno")
        if seq is not None:
            st.highest_seqno = max(st.highest_seqno, seq)
            st.last_received = seq

    # --- messages -------------------------------------------------------------------------

    def _marker(self, st: Stream, pdu, msg, out) -> None:
        f = msg.fields
        after_cut = st.cut                  # what came just before may be hidden
        if after_cut:
            st.cut = False
            st.in_oso = False               # a hidden OSO end may have closed one
            st.oso_seen_keys = None
        if "flags" not in f or f["start_seqno"] > f["end_seqno"]:
            self._report_convention(pdu, "invalid")   # malformed: the structure rules say why
            if not st.in_oso:
                self._decide_convention(st, out, None)
                st.snap, st.after_invalid_marker = None, True
            return
        start, end, flags = f["start_seqno"], f["end_seqno"], f["flags"]
        if st.in_oso:
            self._report_convention(pdu, "inside-oso")
            report_on_stream(st, out, OSO_CONTAINS_MARKER.id, f"snapshot marker [{start},{end}] "
                             f"inside the OSO snapshot of {st.describe()}", pdu, msg,
                             marker_fields(msg))
            return
        history = bool(flags & SNAPSHOT_HISTORY)
        prev = st.snap
        shown = marker_fields(msg)
        last = st.highest_seqno
        if start < last and end <= last:
            shown["last_seqno"] = last
            self._report_convention(pdu, "dropped")
            report_on_stream(st, out, SNAPSHOT_BEHIND_LAST_SEQNO.id, f"marker [{start},{end}] is "
                             f"behind the last seqno {last}: the consumer drops it", pdu, msg,
                             shown, frames_of(prev and prev.pdu))
            return                              # the old snapshot stays current
        after_non_history = history and not (st.prev_marker_flags or 0) & SNAPSHOT_HISTORY
        if prev is not None and not (after_non_history and end == prev.end):
            self._check_complete(st, pdu, msg, out, f"the marker [{start},{end}]")
        self._decide_convention(st, out, None)
        req = st.request
        prev_end = st.prev_marker_end
        # An OSO snapshot went before (it leaves no current snapshot but sets prev_end):
        # active_stream.cc completeOSOBackfill sets firstMarkerSent but leaves
        # lastSentSnapEndSeqno at 0, so this marker is not the first and may start at or
        # below the OSO snapshot's highest seqno (the MB-59759 checkpoint pin).
        after_oso = prev is None and prev_end is not None and not st.after_invalid_marker
        first = st.marker_count == 0 and prev_end is None
        # ActiveStream::snapshot / markDiskSnapshot throw on start <= the last end only on an
        # active vbucket; without ActiveVbOnly a replica vbucket may serve the stream (and
        # merge disk and memory snapshots): the capture cannot tell, so nothing is said.
        active_only = req is not None and bool(req.get("flags", 0) & ACTIVE_VB_ONLY)
        ctx = frames_of(prev and prev.pdu)
        rid = text = None
        if after_cut:
            pass                                # the markers in between may be hidden
        elif prev_end is not None and (end < prev_end or end == prev_end and not (
                history and flags & SNAPSHOT_DISK)):
            rid, text = SNAPSHOT_END_NOT_INCREASING.id, (f"end {end} is not above the previous "
                                                       f"marker's end {prev_end}")
        elif (prev_end is not None and start <= prev_end and not after_non_history
              and active_only and not after_oso):
            rid, text = SNAPSHOT_START_OVERLAP.id, (f"start {start} is not above the previous "
                                                  f"marker's end {prev_end}")
        elif (first and req is not None and not req.get("flags", 0) & FROM_LATEST
              and start < req["snap_start_seqno"]):
            rid, text = SNAPSHOT_START_BELOW_REQUESTED.id, (
                f"first marker starts at {start}, below the requested snapshot start "
                f"{req['snap_start_seqno']}")
            ctx = frames_of(st.request_pdu)
        snap = Snap(start, end, flags, pdu, msg, first)
        if after_cut and first:     # the stream's first marker may be among the hidden ones
            snap.convention_undecided = False
            self._report_convention(pdu, "unknown")
        if rid is not None:
            shown["last_seqno"] = last
            report_on_stream(st, out, rid, text, pdu, msg, shown, ctx)
            snap.faulty_marker = True
        st.snap = snap
        st.marker_count += 1
        st.prev_marker_end, st.prev_marker_flags = end, flags
        st.advanced_to = None
        st.reported_before_marker = st.after_invalid_marker = False
        if flags & SNAPSHOT_MAY_DUPLICATE or not self.duplicate_keys:
            snap.seen_keys = None   # (History alone: history-duplicate-key, in lifecycle)

    def _item(self, st: Stream, pdu, msg, out) -> None:
        spec = msg.spec
        field = spec.seqno_field if spec else None
        seq = msg.fields.get(field) if field else None
        if seq is None:
            if len(msg.extras) < msg.extlen:    # its seqno not captured: as if hidden
                st.cut = True
                self.on_cut(st)
            return
        if st.in_oso:
            st.oso_highest = max(st.oso_highest, seq)
            st.last_received = max(st.last_received or 0, seq)
            if len(msg.key) == msg.keylen:
                self._check_duplicate_key(st, st.oso_seen_keys, pdu, msg, out, None)
            return
        snap = st.snap
        highest = st.highest_seqno
        if snap is None:
            self._before_marker(st, out, f"{msg.name} seqno {seq}", pdu, msg, seq,
                                frames_of(st.request_pdu))
            st.highest_seqno = max(highest, seq)
            st.last_received = seq
            return
        outside = not snap.start <= seq <= snap.end
        if snap.convention_undecided:
            self._decide_convention(st, out, seq)
        if st.advanced_to is not None and seq <= st.advanced_to:
            report_on_stream(st, out, DATA_AFTER_SEQNO_ADVANCED.id, f"seqno {seq} after "
                             f"SeqnoAdvanced({st.advanced_to})", pdu, msg,
                             {**_item_fields(seq, snap), "advanced": st.advanced_to})
        elif seq <= highest:
            report_on_stream(st, out, DATA_SEQNO_NOT_INCREASING.id, f"seqno {seq} after seqno "
                             f"{highest}", pdu, msg,
                             {**_item_fields(seq, snap), "last_seqno": highest})
        if outside:
            report_on_stream(st, out, DATA_OUTSIDE_SNAPSHOT.id, f"seqno {seq} outside the "
                             f"snapshot [{snap.start},{snap.end}]", pdu, msg,
                             _item_fields(seq, snap), frames_of(snap.pdu))
        keys = snap.seen_keys
        if keys is not None and msg.opcode in KEY_NAMESPACES and len(msg.key) == msg.keylen:
            self._check_duplicate_key(st, keys, pdu, msg, out, snap)
        if seq == snap.end:
            snap.complete = True
            snap.seen_keys = None               # later items are outside it anyway
        if seq > highest:
            st.highest_seqno = seq
        st.last_received = seq

    def _before_marker(self, st: Stream, out, what: str, pdu, msg, seq, context) -> None:
        if not st.reported_before_marker and not st.after_invalid_marker:
            st.reported_before_marker = True
            report_on_stream(st, out, DATA_BEFORE_MARKER.id, f"{what} on {st.describe()} before "
                             "any snapshot marker", pdu, msg, {"seqno": seq}, context)

    def _check_duplicate_key(self, st: Stream, keys, pdu, msg, out, snap) -> None:
        """Duplicate keys inside the current snapshot (``snap``) or OSO snapshot (None), per
        key namespace: committed items share one, prepares have their own."""
        ns = KEY_NAMESPACES.get(msg.opcode)
        if keys is None or ns is None:
            return
        k = hash((ns, msg.key))
        if k in keys:
            where = "OSO snapshot" if snap is None else f"snapshot [{snap.start},{snap.end}]"
            what = "prepare" if ns == "prepared" else "change"
            rid = (HISTORY_DUPLICATE_KEY.id if snap is not None and snap.flags & SNAPSHOT_HISTORY
                   else DATA_DUPLICATE_KEY.id)
            report_on_stream(st, out, rid, f"second {what} of key "
                             f"{key_text(msg.key)} in the {where} of {st.describe()}", pdu,
                             msg, {"key": key_text(msg.key)})
        elif len(keys) < bounds.MAX_KEYS:
            keys.add(k)

    def _seqno_advanced(self, st: Stream, pdu, msg, out) -> None:
        seq = msg.fields.get("by_seqno")
        if seq is None:
            return
        st.last_received = max(st.last_received or 0, seq)
        if st.in_oso:
            st.oso_highest = max(st.oso_highest, seq)
            return
        snap = st.snap
        if snap is None:
            self._before_marker(st, out, f"SeqnoAdvanced({seq})", pdu, msg, seq, ())
            return
        self._decide_convention(st, out, None)
        if not snap.start <= seq <= snap.end:
            report_on_stream(st, out, DATA_OUTSIDE_SNAPSHOT.id, f"SeqnoAdvanced({seq}) outside "
                             f"the snapshot [{snap.start},{snap.end}]", pdu, msg,
                             {"seqno": seq, "snapshot": f"[{snap.start},{snap.end}]"},
                             frames_of(snap.pdu))
        if seq == snap.end:
            snap.complete = True
        st.advanced_to = seq
        st.highest_seqno = max(st.highest_seqno, seq)

    def _oso(self, st: Stream, pdu, msg, out) -> None:
        flags = msg.fields.get("flags", 0)
        if flags & OSO_START:
            if st.in_oso:
                report_on_stream(st, out, OSO_UNPAIRED.id, f"OSO start on {st.describe()} while "
                                 "an OSO snapshot is open", pdu, msg, {"flags": flags})
                return
            if st.snap is not None:
                self._check_complete(st, pdu, msg, out, "the OSO snapshot")
                self._decide_convention(st, out, None)
            st.in_oso, st.oso_highest = True, st.highest_seqno
            st.oso_seen_keys = set() if self.duplicate_keys else None
            st.oso_resume_seqno = st.highest_seqno
            st.snap, st.after_invalid_marker = None, False
        elif flags & OSO_END:
            if not st.in_oso:
                report_on_stream(st, out, OSO_UNPAIRED.id, f"OSO end on {st.describe()} without "
                                 "an OSO start", pdu, msg, {"flags": flags})
                return
            st.in_oso = False
            st.oso_seen_keys = None
            st.highest_seqno = max(st.highest_seqno, st.oso_highest)
            st.prev_marker_end = max(st.prev_marker_end or 0, st.highest_seqno)
            st.reported_before_marker = False

    # --- snapshots ------------------------------------------------------------------------

    def _check_complete(self, st: Stream, pdu, msg, out, what: str) -> None:
        snap = st.snap
        if snap is None or snap.complete or snap.faulty_marker or snap.uncertain:
            return
        report_on_stream(st, out, SNAPSHOT_INCOMPLETE.id, f"snapshot [{snap.start},{snap.end}] "
                         f"(frame {snap.pdu.frame}) of {st.describe()} ended by {what} without "
                         f"an item or SeqnoAdvanced at {snap.end}", pdu, msg,
                         {"snapshot": f"[{snap.start},{snap.end}]",
                          "last_seqno": st.highest_seqno}, frames_of(snap.pdu))

    def _decide_convention(self, st: Stream, out, first_seqno) -> None:
        """Decide the start-seqno convention of the current marker (``first_seqno`` is the
        first item after it, None when the snapshot ends without one); report it, and
        ``snapshot-start-inconsistent`` when none fits."""
        snap = st.snap
        if snap is None or not snap.convention_undecided:
            return
        snap.convention_undecided = False
        label, expected = classify(snap.start, snap.flags, snap.first_of_stream, st.request,
                                   first_seqno)
        self._report_convention(snap.pdu, label)
        if expected is None or snap.faulty_marker:
            return
        if first_seqno is not None and not snap.start <= first_seqno <= snap.end:
            return                              # data-outside-snapshot says it
        shown = marker_fields(snap.msg)
        shown["first_item_seqno"] = first_seqno
        report_on_stream(st, out, SNAPSHOT_START_INCONSISTENT.id,
                         f"marker [{snap.start},{snap.end}] ({SNAPSHOT_FLAGS.text(snap.flags)}) "
                         f"start {snap.start} fits no convention: expected {expected}", snap.pdu,
                         snap.msg, shown, frames_of(st.request_pdu))

    def _report_convention(self, pdu, label: str) -> None:
        if self.on_marker is not None:
            self.on_marker(pdu, label)


def classify(start: int, flags: int, first: bool, req: dict, first_seqno) -> tuple[str, str | None]:
    """Start-seqno convention of a marker: (label, None) when one fits, else
    ("inconsistent", what was expected). Labels: first-of-stream, checkpoint, first-item,
    backfill, no-items. ``req`` holds the stream request's fields (``filtered``: its JSON
    value has a collections or scope filter, so the first items may be filtered out).

    active_stream.cc: the first marker starts at min(snap_start, computed start), whatever
    its source: ActiveStream::snapshot (memory, after the filter), markDiskSnapshot and
    sendSnapshotAndSeqnoAdvanced (adjustStartIfFirstSnapshot), also when the filter held the
    whole first snapshot back (MB-47009: [min(snap_start, start), ...] and a SeqnoAdvanced);
    the request has snap_start <= start, so that is the requested snap_start, never above it.
    FromLatest overwrites start and snap_start with the vbucket's high seqno (producer.cc
    DcpProducer::streamRequest), which is below every item the stream sends. Only an OSO
    backfill sends no 0x56 marker first (completeOSOBackfill sets firstMarkerSent): the
    marker after it is not the first (``first`` False). A memory marker without CHK starts
    at its first item, computed after filtering (ActiveStream::snapshot). None: the request
    was not captured, the first captured marker is "unknown" and a filter is assumed
    possible."""
    if req is None:
        if first:
            return "unknown", None
        req = {"filtered": True}
    if first:
        if req.get("flags", 0) & FROM_LATEST:
            if first_seqno is None or start < first_seqno:
                return "first-of-stream", None
            return "inconsistent", (f"a start below the first item's seqno {first_seqno} "
                                    "(first-of-stream: the vbucket's high seqno at a FromLatest "
                                    "request)")
        snap_start = req.get("snap_start_seqno")
        if start == snap_start:
            return "first-of-stream", None
        return "inconsistent", (f"the requested snap_start {snap_start} (first-of-stream: "
                                "min(snap_start, computed start))")
    disk = flags & SNAPSHOT_DISK
    if disk or flags & SNAPSHOT_CHECKPOINT:
        name = "backfill" if disk else "checkpoint"
        if first_seqno is None or start <= first_seqno:
            return name, None
        expected = (f"start <= the first item's seqno {first_seqno} ({name} convention: "
                    f"{'disk' if disk else 'memory marker with CHK'})")
    else:
        if first_seqno is None:
            return "no-items", None
        if start == first_seqno or req.get("filtered") and start < first_seqno:
            return "first-item", None           # a collection filter held items back
        expected = (f"start == the first item's seqno {first_seqno} (first-item convention: "
                    "memory marker without CHK)")
    return "inconsistent", expected


def _item_fields(seq: int, snap: Snap) -> dict:
    return {"seqno": seq, "snapshot": f"[{snap.start},{snap.end}]"}
