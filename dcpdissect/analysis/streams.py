"""Per-connection and per-stream state machines (stream semantics, correlation, resume).

The tracker follows each DCP connection (DcpOpen, accepted DcpControl keys, HELLO
features) and each stream on it, keyed by (connection, vbucket, stream id): the stream
request and its response, the current snapshot, the last seqno, OSO and SeqnoAdvanced
state. Rules about markers versus data, Add Stream correlation and resume fidelity across
connections are judged here. Nothing is judged across a capture gap or resync, nor for a
stream whose request the capture did not see: one ``semantics-suppressed`` note says so.
"""

from __future__ import annotations

import json

from ..protocol import (
    ITEM_OPCODES, STREAM_OPCODES,
    SNAPSHOT_ACK, SNAPSHOT_CHECKPOINT, SNAPSHOT_DISK, SNAPSHOT_FLAGS, SNAPSHOT_HISTORY,
    SNAPSHOT_MAY_DUPLICATE, STATUS, STATUS_ROLLBACK, STATUS_SUCCESS,
)
from .findings import Finding
from .rules import ERROR, INFO, WARNING


TOLERATED_STATUSES = frozenset({0x01, 0x02, 0x07, 0x0A, 0x0B})
# Document keys per namespace: committed items (mutation, deletion, expiration) share one;
# prepares live in their own (the durability-prepare namespace of the checkpoint).
KEYED_OPCODES = {0x57: "item", 0x58: "item", 0x59: "item", 0x60: "prepare"}
HELLO, HELLO_COLLECTIONS = 0x1F, 0x12
FROM_LATEST = 0x40
MAX_KEYS = 1024          # key hashes remembered per snapshot (until it completes)
MAX_PER_RULE = 10        # findings per stream and rule
MAX_PENDING = 4096       # unanswered requests remembered per connection
MAX_RESUME = 65536       # (consumer, vbucket) resume points remembered
MAX_ERRORS = 100         # consumer error findings held per connection until it closes
MAX_STREAMS = 65536      # streams (and unknown stream keys) tracked per connection


class Snap:
    """The current snapshot of a stream."""
    __slots__ = ("start", "end", "flags", "pdu", "msg", "first", "complete", "keys",
                 "erred", "pending", "nitems")

    def __init__(self, start, end, flags, pdu, msg, first):
        self.start, self.end, self.flags = start, end, flags
        self.pdu, self.msg, self.first = pdu, msg, first
        self.complete = False
        self.keys: set | None = set()
        self.erred = False
        self.pending = True          # start-seqno convention not decided yet
        self.nitems = 0


class Stream:
    __slots__ = ("conn", "vb", "sid", "opaque", "req", "req_pdu", "status", "active",
                 "suppressed", "snap", "markers", "prev_end", "prev_flags", "last_seqno",
                 "received", "advanced", "in_oso", "oso_max", "oso_base", "oso_keys", "counts", "add",
                 "before_marker", "ended", "unsure")

    def __init__(self, conn, vb, sid, opaque, req, pdu):
        self.conn, self.vb, self.sid, self.opaque = conn, vb, sid, opaque
        self.req, self.req_pdu = req, pdu
        self.status = None
        self.active = self.suppressed = self.in_oso = self.before_marker = self.ended = False
        self.unsure = False          # the last marker could not be judged (malformed)
        self.snap: Snap | None = None
        self.markers = 0
        self.prev_end = self.prev_flags = None
        self.last_seqno = 0 if req.get("flags", 0) & FROM_LATEST else req.get("start_seqno", 0)
        self.received = None         # last seqno actually received (item or SeqnoAdvanced)
        self.advanced = None
        self.oso_max = self.oso_base = 0
        self.oso_keys: set | None = None
        self.counts: dict[str, int] = {}
        self.add = None              # (add-stream opaque, frame) once correlated

    def describe(self) -> str:
        sid = f" sid {self.sid}" if self.sid is not None else ""
        return f"vb {self.vb}{sid}"


class Conn:
    __slots__ = ("id", "client", "server", "mid_stream", "name", "open_flags", "controls",
                 "hello", "pending", "streams", "acks", "tainted", "errors", "unknown")

    def __init__(self, ev):
        self.id, self.client, self.server = ev.conn, ev.client, ev.server
        self.mid_stream = ev.mid_stream
        self.name = self.open_flags = None
        self.controls: dict[str, str] = {}
        self.hello: set | None = None
        self.pending: dict[tuple[int, int], object] = {}   # (opcode, opaque) -> request info
        self.streams: dict[tuple, Stream] = {}
        self.acks: dict[int, int] = {}
        self.tainted: str | None = None
        self.errors: list[list] = []                      # [finding, s2c messages after it]
        self.unknown: set = set()


class AddStream:
    __slots__ = ("conn", "host", "vb", "opaque", "pdu", "stream")

    def __init__(self, conn, host, vb, opaque, pdu):
        self.conn, self.host, self.vb, self.opaque, self.pdu = conn, host, vb, opaque, pdu
        self.stream: Stream | None = None


class StreamTracker:
    """Tracks DCP connections and streams; each hook returns the findings it completes.

    When ``conventions`` is a dict (None by default: analyze does not need it), it maps
    (connection, frame, stream offset) of every server-sent snapshot marker to its
    start-seqno convention (see :func:`.conventions.classify_markers`).
    """

    def __init__(self):
        self.conns: dict[int, Conn] = {}
        self.adds: list[AddStream] = []
        self.resume: dict[tuple, dict] = {}
        self.conventions: dict[tuple[int, int, int], str] | None = None

    # --- hooks ----------------------------------------------------------------------------

    def on_open(self, ev) -> list[Finding]:
        self.conns[ev.conn] = Conn(ev)
        return []

    def on_message(self, pdu, msg, opened) -> list[Finding]:
        c = self.conns.get(pdu.conn)
        if c is None:
            if opened is None:
                return []
            c = self.conns[pdu.conn] = Conn(opened)
        out: list[Finding] = []
        if msg.magic in (0x82, 0x83):
            return out
        if pdu.direction == 1:
            for entry in c.errors:
                entry[1] += 1
        if msg.is_request:
            if pdu.direction == 0:
                self._client_request(c, pdu, msg, out)
            elif msg.opcode in STREAM_OPCODES:
                self._stream_message(c, pdu, msg, out)
        else:
            if pdu.direction == 1:
                self._server_response(c, pdu, msg, out)
            else:
                self._client_response(c, pdu, msg, out)
        return out

    def on_gap(self, ev) -> list[Finding]:
        side = "client→server" if ev.direction == 0 else "server→client"
        return self._taint(ev, f"{ev.length} bytes of {side} missing before frame {ev.frame}")

    def on_resync(self, ev) -> list[Finding]:
        if ev.reason == "mid_stream":
            return []
        side = "client→server" if ev.direction == 0 else "server→client"
        return self._taint(ev, f"{ev.skipped} {side} bytes skipped to resynchronise at frame "
                               f"{ev.frame}")

    def on_close(self, ev) -> list[Finding]:
        c = self.conns.pop(ev.conn, None)
        if c is None:
            return []
        out = self._flush_errors(c, f"the connection was closed ({ev.reason}"
                                    + (f" at frame {ev.frame})" if ev.frame else ")"))
        for st in c.streams.values():
            self._end_stream(c, st, out)
        return out

    def finish(self) -> list[Finding]:
        out: list[Finding] = []
        for c in list(self.conns.values()):
            out += self._flush_errors(c, "the connection stayed open to the end of the capture")
            for st in c.streams.values():
                self._end_stream(c, st, out)
        self.conns.clear()
        return out

    # --- client requests ------------------------------------------------------------------

    def _client_request(self, c: Conn, pdu, msg, out) -> None:
        op, f = msg.opcode, msg.fields
        if len(c.pending) >= MAX_PENDING:           # requests never answered: forget the oldest
            del c.pending[next(iter(c.pending))]
        if op == 0x50:
            c.pending[(op, msg.opaque)] = (bytes(msg.key).decode("utf-8", "replace"), f.get("flags"))
        elif op == 0x5E:
            c.pending[(op, msg.opaque)] = (bytes(msg.key).decode("utf-8", "replace"),
                                          bytes(msg.value).decode("utf-8", "replace"))
        elif op == HELLO:
            c.pending[(op, msg.opaque)] = True
        elif op == 0x56:
            # memcached receives markers on a consumer connection (ns_server relays them)
            if not c.tainted and c.open_flags is not None and c.open_flags & 0x01:
                out.append(_finding("snapshot-from-client", "snapshot marker sent client→server: "
                                    "markers come from the producer", pdu, msg,
                                    _marker_fields(msg)))
        elif op == 0x51:
            self.adds.append(AddStream(c.id, c.server[0], msg.vbucket, msg.opaque, pdu))
            del self.adds[:-256]
        elif op == 0x53 and "start_seqno" in f:
            self._stream_request(c, pdu, msg, out)

    def _stream_request(self, c: Conn, pdu, msg, out) -> None:
        f = dict(msg.fields)
        f["filtered"] = bool(msg.value_len)      # a JSON value: collection filter, sid, ...
        sid = None
        if msg.value_len:
            try:
                sid = json.loads(bytes(msg.value)).get("sid")
            except (ValueError, AttributeError, RecursionError):
                sid = None
            if type(sid) is not int or not 0 <= sid <= 0xFFFF:
                sid = None          # the server rejects anything but a 16-bit id
        st = Stream(c.id, msg.vbucket, sid, msg.opaque, f, pdu)
        old = c.streams.get((msg.vbucket, sid))
        if old is not None and old.active:
            self._end_stream(c, old, out)
        elif old is None and len(c.streams) >= MAX_STREAMS:    # forget the oldest stream
            self._end_stream(c, c.streams.pop(next(iter(c.streams))), out)
        c.streams[(msg.vbucket, sid)] = st
        c.unknown.discard((msg.vbucket, sid))
        c.pending[(0x53, msg.opaque)] = st
        for add in reversed(self.adds):
            if add.vb == msg.vbucket and add.host == c.client[0] and add.conn != c.id:
                add.stream = st
                break
        self._check_resume(c, st, pdu, msg, out)

    # --- server responses -----------------------------------------------------------------

    def _server_response(self, c: Conn, pdu, msg, out) -> None:
        op = msg.opcode
        if op == 0x51:
            self._add_stream_response(c, pdu, msg, out)
            return
        info = c.pending.pop((op, msg.opaque), None)
        if info is None:
            return
        ok = msg.status == STATUS_SUCCESS
        if op == 0x50 and ok:
            c.name, c.open_flags = info
        elif op == 0x5E and ok:
            c.controls[info[0]] = info[1]
        elif op == HELLO and ok:
            v = bytes(msg.value)
            c.hello = {int.from_bytes(v[i:i + 2], "big") for i in range(0, len(v) - 1, 2)}
        elif op == 0x53:
            st: Stream = info
            st.status = msg.status
            if ok:
                st.active = True
            elif msg.status == STATUS_ROLLBACK:
                c.pending[(0x53, msg.opaque)] = st     # the consumer may re-request (same opaque)

    def _add_stream_response(self, c: Conn, pdu, msg, out) -> None:
        add = next((a for a in reversed(self.adds)
                    if a.conn == c.id and a.opaque == msg.opaque), None)
        if add is not None:
            self.adds.remove(add)
        if c.tainted:
            return
        new = msg.fields.get("new_opaque")
        vb = add.vb if add is not None else None
        shown = {"status": STATUS.text(msg.status),
                 "new_opaque": None if new is None else f"{new:#x}"}
        if msg.status == STATUS_ROLLBACK:
            out.append(_finding("add-stream-rollback", "add stream response carries ROLLBACK: "
                                "the consumer must handle the rollback itself", pdu, msg, shown,
                                _ctx(add and add.pdu), vb))
        if add is None or add.stream is None:
            return
        st = add.stream
        ctx = _ctx(add.pdu, st.req_pdu)
        shown["stream_request_opaque"] = f"{st.opaque:#x}"
        if new is not None and new != st.opaque:
            out.append(_finding("add-stream-new-opaque-mismatch",
                                f"new opaque {new:#x}, but the consumer's stream request for vb "
                                f"{st.vb} (frame {st.req_pdu.frame}) used {st.opaque:#x}",
                                pdu, msg, shown, ctx, vb))
        elif st.status is not None and msg.status != st.status and msg.status != STATUS_ROLLBACK:
            shown["stream_request_status"] = STATUS.text(st.status)
            out.append(_finding("add-stream-status-mismatch",
                                f"status {STATUS.text(msg.status)}, but the stream request for "
                                f"vb {st.vb} got {STATUS.text(st.status)}", pdu, msg, shown, ctx,
                                vb))
        if new == st.opaque:
            st.add = (msg.opaque, pdu.frame)

    # --- client responses (consumer side) --------------------------------------------------

    def _client_response(self, c: Conn, pdu, msg, out) -> None:
        if c.tainted:
            return
        op = msg.opcode
        if op == 0x56:
            n = c.acks.get(msg.opaque, 0)
            if n:
                c.acks[msg.opaque] = n - 1
            elif msg.status == STATUS_SUCCESS:     # error answers (EINVAL, ERANGE) are not acks
                out.append(_finding("snapshot-ack-unexpected",
                                    f"response to a snapshot marker (opaque {msg.opaque:#x}) "
                                    "although no marker awaiting an ack had the Ack flag", pdu,
                                    msg, {"status": STATUS.text(msg.status)},
                                    vb=_vb_of(c, msg.opaque)))
        elif (op in ITEM_OPCODES and msg.status != STATUS_SUCCESS
              and msg.status not in TOLERATED_STATUSES):     # stream gone: not a rejection
            text = (f"consumer answered {msg.name} (opaque {msg.opaque:#x}) with "
                    f"{STATUS.text(msg.status)}")
            f = _finding("consumer-error-response", text, pdu, msg,
                         {"status": STATUS.text(msg.status), "opcode": f"{op:#04x}"},
                         vb=_vb_of(c, msg.opaque))
            if len(c.errors) < MAX_ERRORS:
                c.errors.append([f, 0])

    def _flush_errors(self, c: Conn, what: str) -> list[Finding]:
        out = []
        for f, after in c.errors:
            f.message += f"; then {what}" + (f", after {after} more server message(s)"
                                             if after else "")
            out.append(f)
        c.errors.clear()
        return out

    # --- stream messages (server side) ----------------------------------------------------

    def _stream_message(self, c: Conn, pdu, msg, out) -> None:
        key = (msg.vbucket, msg.stream_id)
        st = c.streams.get(key)
        if st is None or st.suppressed:
            if msg.opcode == 0x56:
                self._label((pdu.conn, pdu.frame, pdu.offset), "unknown")
            if st is None and key not in c.unknown and not c.tainted and len(c.unknown) < MAX_STREAMS:
                c.unknown.add(key)
                why = ("the capture started inside the connection" if c.mid_stream
                       else "it was not captured")
                out.append(_finding("semantics-suppressed",
                                    f"no stream request seen for vb {msg.vbucket} on this "
                                    f"connection ({why}): stream rules are not applied to it",
                                    pdu, msg))
            return
        if not st.active:
            return
        if msg.opaque != st.opaque:
            via = (f" (the add-stream response at frame {st.add[1]} announced it)"
                   if st.add else "")
            self._emit(st, out, "stream-opaque-mismatch",
                       f"{msg.name} for {st.describe()} with opaque {msg.opaque:#x}; the stream's "
                       f"opaque is {st.opaque:#x}{via}", pdu, msg,
                       {"opaque": f"{msg.opaque:#x}", "stream_opaque": f"{st.opaque:#x}"},
                       _ctx(st.req_pdu))
            return
        op = msg.opcode
        if op == 0x56:
            self._marker(c, st, pdu, msg, out)
        elif op in ITEM_OPCODES:
            self._item(st, pdu, msg, out)
        elif op == 0x64:
            self._seqno_advanced(st, pdu, msg, out)
        elif op == 0x65:
            self._oso(st, pdu, msg, out)
        elif op == 0x55:
            if msg.fields.get("reason") == 0 and not st.in_oso:
                self._check_complete(st, pdu, msg, out, "STREAM_END(Ok)")
            self._end_stream(c, st, out)

    def _marker(self, c: Conn, st: Stream, pdu, msg, out) -> None:
        f = msg.fields
        ckey = (pdu.conn, pdu.frame, pdu.offset)
        if "flags" not in f or f["start_seqno"] > f["end_seqno"]:
            self._label(ckey, "invalid")  # malformed: the structural rules say why
            if not st.in_oso:
                self._settle(st, out, None)
                st.snap, st.unsure = None, True
            return
        start, end, flags = f["start_seqno"], f["end_seqno"], f["flags"]
        if st.in_oso:
            self._label(ckey, "inside-oso")
            self._emit(st, out, "oso-contains-marker", f"snapshot marker [{start},{end}] inside the "
                       f"OSO snapshot of {st.describe()}", pdu, msg, _marker_fields(msg))
            return
        history = bool(flags & SNAPSHOT_HISTORY)
        prev = st.snap
        shown = _marker_fields(msg)
        last = st.last_seqno
        if start < last and end <= last:
            shown["last_seqno"] = last
            self._label(ckey, "dropped")
            self._emit(st, out, "snapshot-behind-last-seqno", f"marker [{start},{end}] is "
                       f"behind the last seqno {last}: the consumer drops it", pdu, msg, shown,
                       _ctx(prev and prev.pdu))
            return                              # the old snapshot stays current
        if prev is not None and not (history and not (st.prev_flags or 0) & SNAPSHOT_HISTORY
                                     and end == prev.end):
            self._check_complete(st, pdu, msg, out, f"the marker [{start},{end}]")
        self._settle(st, out, None)
        first = st.markers == 0
        req = st.req
        ctx = _ctx(prev and prev.pdu)
        rid = text = None
        if st.prev_end is not None and (end < st.prev_end or end == st.prev_end and not (
                history and flags & SNAPSHOT_DISK)):
            rid, text = "snapshot-end-not-increasing", (f"end {end} is not above the previous "
                                                      f"marker's end {st.prev_end}")
        elif (st.prev_end is not None and start <= st.prev_end
              and not (history and not (st.prev_flags or 0) & SNAPSHOT_HISTORY)):
            rid, text = "snapshot-start-overlap", (f"start {start} is not above the previous "
                                                 f"marker's end {st.prev_end}")
        elif first and not req.get("flags", 0) & FROM_LATEST and start < req["snap_start_seqno"]:
            rid, text = "snapshot-start-below-requested", (
                f"first marker starts at {start}, below the requested snapshot start "
                f"{req['snap_start_seqno']}")
            ctx = _ctx(st.req_pdu)
        snap = Snap(start, end, flags, pdu, msg, first)
        if rid is not None:
            shown["last_seqno"] = last
            self._emit(st, out, rid, text, pdu, msg, shown, ctx)
            snap.erred = True
        st.snap = snap
        st.markers += 1
        st.prev_end, st.prev_flags = end, flags
        st.advanced = None
        st.before_marker = st.unsure = False
        if flags & (SNAPSHOT_HISTORY | SNAPSHOT_MAY_DUPLICATE):
            snap.keys = None
        if flags & SNAPSHOT_ACK:
            c.acks[st.opaque] = c.acks.get(st.opaque, 0) + 1
        self._label(ckey, "pending")

    def _item(self, st: Stream, pdu, msg, out) -> None:
        field = msg.spec.seqno_field if msg.spec else None
        seq = msg.fields.get(field) if field else None
        if seq is None:
            return
        if st.in_oso:
            st.oso_max = max(st.oso_max, seq)
            st.received = max(st.received or 0, seq)
            self._dup(st, st.oso_keys, pdu, msg, out, None)
            return
        snap = st.snap
        if snap is None:
            if not st.before_marker and not st.unsure:
                st.before_marker = True
                self._emit(st, out, "data-before-marker", f"{msg.name} seqno {seq} on "
                           f"{st.describe()} before any snapshot marker", pdu, msg,
                           {"seqno": seq}, _ctx(st.req_pdu))
            st.last_seqno = max(st.last_seqno, seq)
            st.received = seq
            return
        outside = not snap.start <= seq <= snap.end
        self._settle(st, out, seq)
        snap.nitems += 1
        if st.advanced is not None and seq <= st.advanced:
            self._emit(st, out, "data-after-seqno-advanced", f"seqno {seq} after "
                       f"SeqnoAdvanced({st.advanced})", pdu, msg,
                       {**_item_fields(seq, snap), "advanced": st.advanced})
        elif seq <= st.last_seqno:
            self._emit(st, out, "data-seqno-not-increasing", f"seqno {seq} after seqno "
                       f"{st.last_seqno}", pdu, msg,
                       {**_item_fields(seq, snap), "last_seqno": st.last_seqno})
        if outside:
            self._emit(st, out, "data-outside-snapshot", f"seqno {seq} outside the snapshot "
                       f"[{snap.start},{snap.end}]", pdu, msg, _item_fields(seq, snap),
                       _ctx(snap.pdu))
        if snap.keys is not None:
            self._dup(st, snap.keys, pdu, msg, out, snap)
        if seq == snap.end:
            snap.complete = True
            snap.keys = None                    # later items are outside it anyway
        st.last_seqno = max(st.last_seqno, seq)
        st.received = seq

    def _dup(self, st: Stream, keys, pdu, msg, out, snap) -> None:
        """Duplicate keys inside the current snapshot (``snap``) or OSO snapshot (None)."""
        ns = KEYED_OPCODES.get(msg.opcode)
        if keys is None or ns is None:
            return
        k = hash((ns, msg.key))
        if k in keys:
            where = "OSO snapshot" if snap is None else f"snapshot [{snap.start},{snap.end}]"
            what = "prepare" if ns == "prepare" else "change"
            self._emit(st, out, "data-duplicate-key", f"second {what} of key "
                       f"{_key_text(msg.key)} in the {where} of {st.describe()}", pdu, msg,
                       {"key": _key_text(msg.key)})
        elif len(keys) < MAX_KEYS:
            keys.add(k)

    def _seqno_advanced(self, st: Stream, pdu, msg, out) -> None:
        seq = msg.fields.get("by_seqno")
        if seq is None:
            return
        st.received = max(st.received or 0, seq)
        if st.in_oso:
            st.oso_max = max(st.oso_max, seq)
            return
        snap = st.snap
        if snap is None:
            if not st.before_marker and not st.unsure:
                st.before_marker = True
                self._emit(st, out, "data-before-marker", f"SeqnoAdvanced({seq}) on "
                           f"{st.describe()} before any snapshot marker", pdu, msg, {"seqno": seq})
            return
        self._settle(st, out, None)
        if not snap.start <= seq <= snap.end:
            self._emit(st, out, "data-outside-snapshot", f"SeqnoAdvanced({seq}) outside the "
                       f"snapshot [{snap.start},{snap.end}]", pdu, msg,
                       {"seqno": seq, "snapshot": f"[{snap.start},{snap.end}]"}, _ctx(snap.pdu))
        if seq == snap.end:
            snap.complete = True
        st.advanced = seq
        st.last_seqno = max(st.last_seqno, seq)

    def _oso(self, st: Stream, pdu, msg, out) -> None:
        flags = msg.fields.get("flags", 0)
        if flags & 0x01:
            if st.in_oso:
                self._emit(st, out, "oso-unpaired", f"OSO start on {st.describe()} while an OSO "
                           "snapshot is open", pdu, msg, {"flags": flags})
                return
            if st.snap is not None:
                self._check_complete(st, pdu, msg, out, "the OSO snapshot")
                self._settle(st, out, None)
            st.in_oso, st.oso_max, st.oso_keys = True, st.last_seqno, set()
            st.oso_base = st.last_seqno
            st.snap, st.unsure = None, False
        elif flags & 0x02:
            if not st.in_oso:
                self._emit(st, out, "oso-unpaired", f"OSO end on {st.describe()} without an "
                           "OSO start", pdu, msg, {"flags": flags})
                return
            st.in_oso = False
            st.oso_keys = None
            st.last_seqno = max(st.last_seqno, st.oso_max)
            st.prev_end = max(st.prev_end or 0, st.last_seqno)
            st.before_marker = False

    # --- snapshots ------------------------------------------------------------------------

    def _check_complete(self, st: Stream, pdu, msg, out, what: str) -> None:
        snap = st.snap
        if snap is None or snap.complete or snap.erred:
            return
        self._emit(st, out, "snapshot-incomplete", f"snapshot [{snap.start},{snap.end}] "
                   f"(frame {snap.pdu.frame}) of {st.describe()} ended by {what} without an item "
                   f"or SeqnoAdvanced at {snap.end}", pdu, msg,
                   {"snapshot": f"[{snap.start},{snap.end}]", "last_seqno": st.last_seqno},
                   _ctx(snap.pdu))

    def _settle(self, st: Stream, out, first_seqno) -> None:
        """Decide the start-seqno convention of the current marker (``first_seqno`` is the
        first item after it, None when the snapshot ends without one)."""
        snap = st.snap
        if snap is None or not snap.pending:
            return
        snap.pending = False
        label, expected = classify(snap.start, snap.flags, snap.first, st.req, first_seqno)
        self._label((snap.pdu.conn, snap.pdu.frame, snap.pdu.offset), label)
        if expected is None or snap.erred:
            return
        if first_seqno is not None and not snap.start <= first_seqno <= snap.end:
            return                              # data-outside-snapshot says it
        shown = _marker_fields(snap.msg)
        shown["first_item_seqno"] = first_seqno
        self._emit(st, out, "snapshot-start-inconsistent",
                   f"marker [{snap.start},{snap.end}] ({SNAPSHOT_FLAGS.text(snap.flags)}) start "
                   f"{snap.start} fits no convention: expected {expected}", snap.pdu, snap.msg,
                   shown, _ctx(st.req_pdu))

    def _end_stream(self, c: Conn, st: Stream, out) -> None:
        if st.ended:
            return
        st.ended = True
        if st.active and not st.suppressed:
            self._settle(st, out, None)
            self._remember(c, st)
        st.active = False

    # --- resume fidelity ------------------------------------------------------------------

    def _consumer(self, c: Conn, vb: int):
        if c.name is None:
            return None
        return (c.name, c.server, vb)

    def _remember(self, c: Conn, st: Stream) -> None:
        key = self._consumer(c, st.vb)
        if key is None or st.req.get("flags", 0) & FROM_LATEST:
            return
        snap = st.snap
        x = st.received if st.received is not None else st.req.get("start_seqno", 0)
        if st.in_oso:       # oso_snapshot.md: resume from the seqno held before the OSO start
            x, snap = st.oso_base, None
        if len(self.resume) >= MAX_RESUME:
            del self.resume[next(iter(self.resume))]
        self.resume[key] = {"conn": st.conn, "x": x, "snap": snap and (snap.start, snap.end),
                            "frame": snap.pdu.frame if snap else st.req_pdu.frame,
                            "oso": st.in_oso}

    def _check_resume(self, c: Conn, st: Stream, pdu, msg, out) -> None:
        key = self._consumer(c, st.vb)
        rec = self.resume.get(key) if key else None
        if rec is None or rec["conn"] == c.id or c.tainted:
            return
        del self.resume[key]
        f = st.req
        if f.get("flags", 0) & FROM_LATEST:
            return
        start, s0, s1 = f["start_seqno"], f["snap_start_seqno"], f["snap_end_seqno"]
        x = rec["x"]
        shown = {"start_seqno": start, "snap_start_seqno": s0, "snap_end_seqno": s1,
                 "last_received": x, "previous_connection": rec["conn"]}
        if start > x:
            oso = (" before an OSO snapshot it did not complete (items inside one are no "
                   "consistent point)") if rec["oso"] else ""
            out.append(_finding("resume-beyond-received", f"resume of vb {st.vb} at start {start}, "
                                f"but the previous stream (connection {rec['conn']}) received up "
                                f"to seqno {x}{oso}", pdu, msg, shown, (rec["frame"],)))
            return
        if rec["snap"] is None:
            return
        s, e = rec["snap"]
        shown["previous_snapshot"] = f"[{s},{e}]"
        if not (s <= x < e and start == x):
            return
        how = None
        if s1 < e:
            how = f"sends snapshot [{s0},{s1}] start {start}"
        elif s0 == start and s < x:          # needsRollback then takes the range as [start,start]
            how = f"sends snapshot [{s0},{s1}] with snap_start == start {start}, read as [{x},{x}]"
        if how is not None:
            out.append(_finding("resume-collapsed-snapshot",
                                f"resume of vb {st.vb} {how}; the previous stream (connection "
                                f"{rec['conn']}) stopped at {x} inside snapshot [{s},{e}] (frame "
                                f"{rec['frame']}), so it must send [{s},{e}]: the server cannot "
                                "see that a rollback is needed", pdu, msg, shown, (rec["frame"],)))

    # --- helpers --------------------------------------------------------------------------

    def _taint(self, ev, why: str) -> list[Finding]:
        c = self.conns.get(ev.conn)
        if c is None:
            return []
        for st in c.streams.values():
            st.suppressed = True
        c.errors.clear()
        c.pending.clear()
        if c.tainted:
            return []
        c.tainted = why
        return [Finding("semantics-suppressed", f"stream rules stop for the streams open on this "
                        f"connection: {why}", ev.frame, (ev.frame,), ev.ts_ns, ev.conn)]

    def _label(self, key, label: str) -> None:
        if self.conventions is not None:
            self.conventions[key] = label

    def _emit(self, st: Stream, out, rid, text, pdu, msg, fields=None, context=()) -> None:
        n = st.counts.get(rid, 0) + 1
        st.counts[rid] = n
        if n > MAX_PER_RULE:
            return
        if n == MAX_PER_RULE:
            text += " (further occurrences on this stream are not reported)"
        out.append(_finding(rid, text, pdu, msg, fields, context))


def classify(start: int, flags: int, first: bool, req: dict, first_seqno) -> tuple[str, str | None]:
    """Start-seqno convention of a marker: (label, None) when one fits, else
    ("inconsistent", what was expected). Labels: first-of-stream, checkpoint, first-item,
    backfill, no-items. ``req`` holds the stream request's fields (``filtered``: it had a
    JSON value, so items may be held back by a collection filter)."""
    if first and (req.get("flags", 0) & FROM_LATEST
                  or start in (req.get("start_seqno"), req.get("snap_start_seqno"))):
        return "first-of-stream", None
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
            return "first-item", None           # a filter may hold back the first item
        expected = (f"start == the first item's seqno {first_seqno} (first-item convention: "
                    "memory marker without CHK)")
    if first:
        expected = (f"the requested start {req.get('start_seqno')} or snap_start "
                    f"{req.get('snap_start_seqno')} (first-of-stream), or {expected}")
    return "inconsistent", expected


def _finding(rid, text, pdu, msg, fields=None, context=(), vb=None) -> Finding:
    """A finding about one message (``vb`` for responses, which carry no vbucket)."""
    return Finding(rid, text, pdu.frame, pdu.frames, pdu.ts_ns, pdu.conn,
                   msg.vbucket if vb is None else vb, msg.opaque, dict(fields or {}), pdu.data,
                   tuple(context))


def _vb_of(c: Conn, opaque: int):
    return next((st.vb for st in c.streams.values() if st.opaque == opaque), None)


def _item_fields(seq: int, snap) -> dict:
    return {"seqno": seq, "snapshot": f"[{snap.start},{snap.end}]"}


def _ctx(*pdus) -> tuple[int, ...]:
    return tuple(p.frame for p in pdus if p is not None)


def _marker_fields(msg) -> dict:
    f = msg.fields
    return {"start_seqno": f.get("start_seqno"), "end_seqno": f.get("end_seqno"),
            "flags": SNAPSHOT_FLAGS.text(f.get("flags", 0))}


def _key_text(key) -> str:
    k = bytes(key)
    try:
        s = k.decode("utf-8")
        return repr(s) if s.isprintable() else k.hex()
    except UnicodeDecodeError:
        return k.hex()
