"""Controls: what the DcpControl exchange (and HELLO, DcpOpen) allows each side to send.

Follows, per connection and in both roles (on a consumer connection the consumer memcached
sends the DcpControl requests and the stream request, server→client), the controls the
producer accepted, and judges:

* the producer's stream messages against what the stream negotiated when it was requested
  (kv_engine copies sync replication, the marker version and change streams into the
  ActiveStream when it is created): V2.0/V2.2 markers, a V1 Disk marker on a sync-replication
  stream, History/MayContainDuplicates, OSO, SeqnoAdvanced, DcpExpiration, stream ids;
* the consumer's stream request against ``enable_stream_id``;
* the consumer's responses as engines/ep/src/dcp/producer.cc DcpProducer::handleResponse
  does: which statuses it takes for which opcode (``Opcode.reply`` in the protocol tables)
  and which errors it tolerates (``v7_dcp_status_codes``), the Noop responses, responses to
  opcodes it never expects an answer to.

A connection is judged only when the capture showed its whole negotiation: its start, its
accepted DcpOpen, and no cut of the consumer's requests so far. Otherwise a control may have
been sent where the capture does not show it and nothing is said (the status verdicts that depend on a control are then
reported as ``consumer-error-response-undecided``, info). The stream request's collection
filter (``collections`` or ``scope`` in its JSON value) is recorded here too, as the
request's ``filtered`` field the start-seqno conventions read.
"""

from __future__ import annotations

import json

from ...protocol import (DCP_OPEN_FLAGS, FEATURE_COLLECTIONS, NO_REPLY_OPCODES, OPCODES,
                         OSO_FLAGS, SNAPSHOT_DISK, SNAPSHOT_HISTORY, SNAPSHOT_MAY_DUPLICATE,
                         STATUS, STATUS_SUCCESS, STREAM_OPCODES, SYNC_WRITES, SyncWrite,
                         opcode_code, status_code)
from ..findings import finding_for
from ..rules.structure import check_message
from ..rules.stream import (CONSUMER_ERROR_RESPONSE, CONSUMER_ERROR_RESPONSE_UNDECIDED,
                            CONSUMER_NOOP_OPAQUE_MISMATCH, CONSUMER_RESPONSE_UNEXPECTED,
                            EXPIRATION_NOT_NEGOTIATED, OSO_NOT_NEGOTIATED,
                            SEQNO_ADVANCED_NOT_ENABLED, SNAPSHOT_HISTORY_NOT_NEGOTIATED,
                            SNAPSHOT_V1_DISK_SYNC_REPLICATION, SNAPSHOT_VERSION_NOT_NEGOTIATED,
                            STREAM_ID_MESSAGE_MISMATCH, STREAM_ID_REQUEST_MISMATCH)
from . import bounds
from .state import Conn, HeldError, Stream, report_on_stream

OP = {n: opcode_code(n) for n in (
    "DcpStreamReq", "DcpAddStream", "DcpControl", "DcpNoop", "DcpSnapshotMarker",
    "DcpExpiration", "DcpSeqnoAdvanced", "DcpOsoSnapshot")}
ADD_STREAM, CONTROL, NOOP = OP["DcpAddStream"], OP["DcpControl"], OP["DcpNoop"]
KEY_ENOENT, KEY_EEXISTS, NOT_MY_VBUCKET = (status_code(n) for n in ("KeyEnoent", "KeyEexists",
                                                                   "NotMyVbucket"))
STREAM_NOT_FOUND, OPAQUE_NO_MATCH = (status_code(n) for n in ("DcpStreamNotFound",
                                                               "OpaqueNoMatch"))
# errorMessageHandler: statuses that mean "affects only one stream" whatever was negotiated
ALWAYS_TOLERATED = frozenset({NOT_MY_VBUCKET, STREAM_NOT_FOUND, OPAQUE_NO_MATCH})
# errorMessageHandler: KeyEnoent to these means the consumer never saw the prepare
COMPLETIONS = (SyncWrite.COMMIT, SyncWrite.ABORT)
OSO_START = OSO_FLAGS.bit("start")
NOOP_INITIAL_OPAQUE = 10000000     # producer.cc: noopCtx.opaque, pre-incremented per noop
_PRODUCER_FLAG, _DELETE_TIMES, _SKIP_DELETES = (DCP_OPEN_FLAGS.bit(n) for n in (
    "producer", "include_delete_times", "skip_deletes_in_initial_backfill"))
MAX_CONNS = 4096                   # connections whose controls are remembered


def tolerated(opcode: int, status: int, v7: bool | None) -> bool | None:
    """DcpProducer::handleResponse's errorMessageHandler: does the producer keep the
    connection after this error status? None when it depends on ``v7_dcp_status_codes``
    and the capture does not show whether it was accepted."""
    if status in ALWAYS_TOLERATED:
        return True
    if status == KEY_EEXISTS or (status == KEY_ENOENT
                                 and SYNC_WRITES.get(opcode) not in COMPLETIONS):
        return None if v7 is None else not v7
    return False


class Negotiated:
    """What a stream (or the connection, when ``stream`` is None) may receive (fixed
    when made: ``controls`` is a copy of the controls accepted by then)."""
    __slots__ = ("controls", "collections", "open_flags", "stream_ids")

    def __init__(self, controls: dict, collections: bool, open_flags: int):
        self.controls, self.collections, self.open_flags = controls, collections, open_flags
        self.stream_ids = self.on("enable_stream_id")     # read on every producer message

    def on(self, key: str, value: str = "true") -> bool:
        return self.controls.get(key) == value

    @property
    def sync_writes(self) -> bool:             # producer.cc control(): enable_sync_writes
        return self.on("enable_sync_writes")

    @property
    def sync_replication(self) -> bool:        # ... and a non-empty consumer_name
        return self.sync_writes and bool(self.controls.get("consumer_name"))

    @property
    def marker_v22(self) -> bool:              # max_marker_version=2.2 (needs collections)
        return self.on("max_marker_version", "2.2")

    @property
    def oso(self) -> bool:
        return self.controls.get("enable_out_of_order_snapshots") in (
            "true", "true_with_seqno_advanced")

    @property
    def expiry_opcode(self) -> bool | None:
        """enableExpiryOpcode = "true" && IncludeDeleteTime (the DcpOpen flag, unknown on a
        consumer connection: ns_server opens the producer leg)."""
        if not self.on("enable_expiry_opcode"):
            return False
        return None if self.open_flags is None else bool(self.open_flags & _DELETE_TIMES)


class ConnControls:
    """One connection's accepted controls, pending control requests, noop opaque and the
    negotiation each stream was requested under."""
    __slots__ = ("conn", "controls", "pending", "noop_opaque", "noop_ts", "streams", "unseen",
                 "awaiting")

    def __init__(self, conn: Conn):
        self.conn = conn
        self.controls: dict[str, str] = {}
        self.pending: dict[int, tuple[str, str]] = {}
        self.noop_opaque = None if conn.mid_stream else NOOP_INITIAL_OPAQUE
        self.noop_ts = -1                   # when the producer sent that noop
        self.streams: dict[tuple, tuple[Stream, Negotiated | None]] = {}
        self.unseen = False                 # a control request may have gone uncaptured
        # (stream key, its Negotiated, control opaques it waits for): streams requested while
        # earlier control requests were still unanswered
        self.awaiting: list[tuple[tuple, Negotiated, set]] = []


def _known(c: Conn, rec: ConnControls) -> bool:
    """The capture shows the connection's whole negotiation so far."""
    return not c.mid_stream and not rec.unseen and c.negotiation.open_flags is not None


def _text(raw) -> str:
    return bytes(raw).decode("utf-8", "replace")


def _value_json(msg):
    if not msg.value_len:
        return None
    try:
        v = json.loads(bytes(msg.value))
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


class Controls:
    """Judges messages against the controls, HELLO features and DcpOpen flags negotiated."""

    def __init__(self):
        self.conns: dict[int, ConnControls] = {}

    def _record(self, c: Conn) -> ConnControls:
        rec = self.conns.get(c.id)
        if rec is None or rec.conn is not c:
            if rec is None and len(self.conns) >= MAX_CONNS:
                del self.conns[next(iter(self.conns))]
            rec = self.conns[c.id] = ConnControls(c)
        return rec

    def accepted(self, c: Conn, key: str) -> str | None:
        """The value of the control ``key`` the producer accepted on ``c`` so far ("" when
        none was), whichever end of the TCP connection the DCP consumer is; None when the
        capture does not show the connection's whole negotiation."""
        rec = self.conns.get(c.id)
        if rec is None or rec.conn is not c:
            rec = self._record(c)
        return rec.controls.get(key, "") if _known(c, rec) else None

    # --- the hook (called by the tracker after it dispatched the message) -----------------

    def on_cut(self, c: Conn, consumer_side: bool) -> None:
        """A cut of the consumer's direction may have hidden control requests (the
        negotiation of later streams is unknown); of the producer's, a noop or the answers
        to the control requests awaiting one."""
        rec = self.conns.get(c.id)
        if rec is None or rec.conn is not c:
            return
        if consumer_side:
            rec.unseen = True
        else:
            rec.noop_opaque = None
            if rec.pending:         # their answers may be hidden: accepted or not, unknown
                rec.unseen = True
                for key, _neg, _waiting in rec.awaiting:     # also for streams asked meanwhile
                    entry = rec.streams.get(key)
                    if entry is not None:
                        rec.streams[key] = (entry[0], None)
                rec.awaiting.clear()

    def on_message(self, c: Conn, pdu, msg, from_consumer: bool, out: list) -> None:
        rec = self.conns.get(c.id)
        if rec is None or rec.conn is not c:
            rec = self._record(c)
        op = msg.opcode
        if msg.is_request:
            if op == ADD_STREAM:
                return
            if from_consumer:
                if op == CONTROL:
                    if len(msg.value) != msg.value_len or len(msg.key) != msg.keylen:
                        rec.unseen = True           # which control: not captured
                        return
                    if len(rec.pending) >= 64:
                        del rec.pending[next(iter(rec.pending))]
                    rec.pending[msg.opaque] = (_text(msg.key), _text(msg.value))
                elif op == OP["DcpStreamReq"]:
                    self._stream_request(c, rec, pdu, msg, out)
            elif op == NOOP:
                rec.noop_opaque, rec.noop_ts = msg.opaque, pdu.ts_ns
            elif op in STREAM_OPCODES and rec.streams:     # else no stream's controls known
                self._producer_message(c, rec, pdu, msg, out)
        elif op == ADD_STREAM:
            return
        elif not from_consumer:
            if op == CONTROL:
                kv = rec.pending.pop(msg.opaque, None)
                if kv is not None and msg.status == STATUS_SUCCESS and len(rec.controls) < 256:
                    rec.controls[kv[0]] = kv[1]
                if kv is not None and rec.awaiting:
                    self._answered(rec, msg.opaque, kv if msg.status == STATUS_SUCCESS else None)
        else:
            self._consumer_response(c, rec, pdu, msg, out)

    # --- the consumer's stream request ----------------------------------------------------

    def _negotiated(self, c: Conn, rec: ConnControls, has_value: bool) -> Negotiated | None:
        if not _known(c, rec):
            return None
        features = c.negotiation.features
        collections = has_value or bool(features and FEATURE_COLLECTIONS in features)
        flags = c.negotiation.open_flags
        # on a consumer connection the DcpOpen seen is ns_server's to the consumer memcached
        producer_flags = None if c.negotiation.consumer else flags
        return Negotiated(dict(rec.controls), collections, producer_flags)

    def _stream_request(self, c: Conn, rec: ConnControls, pdu, msg, out) -> None:
        value = _value_json(msg)
        st = c.stream_requests.get(msg.opaque)
        if st is not None and st.request_pdu is pdu:
            # active_stream.cc: the start after filtering; only a collection/scope filter
            # holds items back (kv_engine's own consumer always sends {"uid":...}); a value
            # the capture cut may hold one
            st.request["filtered"] = msg.value_cut or (
                bool(value) and ("collections" in value or "scope" in value))
            neg = self._negotiated(c, rec, bool(msg.value_len))
            key = (st.vb, st.sid)
            if key not in rec.streams and len(rec.streams) >= bounds.MAX_STREAMS:
                del rec.streams[next(iter(rec.streams))]
            rec.streams[key] = (st, neg)
            if neg is not None and rec.pending and len(rec.awaiting) < bounds.MAX_PENDING:
                # controls sent before it, answered after it: the server applied them first
                rec.awaiting.append((key, neg, set(rec.pending)))
        else:
            neg = self._negotiated(c, rec, bool(msg.value_len))
        if neg is None or msg.value_cut:
            return                      # (a value the capture cut: its sid is not known)
        has_sid = value is not None and "sid" in value
        if has_sid != neg.stream_ids:
            why = ("carries a stream id (sid) but enable_stream_id was not accepted"
                   if has_sid else "has no stream id (sid) although enable_stream_id was "
                   "accepted")
            out.append(finding_for(STREAM_ID_REQUEST_MISMATCH.id, f"stream request for vb "
                                   f"{msg.vbucket} {why}: the producer answers "
                                   "DcpStreamIdInvalid", pdu, msg,
                                   {"sid": value.get("sid") if has_sid else None,
                                    "enable_stream_id": neg.stream_ids}))

    # --- the producer's stream messages ---------------------------------------------------

    @staticmethod
    def _answered(rec: ConnControls, opaque: int, accepted: tuple[str, str] | None) -> None:
        """A control answered after streams were requested: it was requested before them,
        so what it enabled is theirs too."""
        keep = []
        for key, neg, waiting in rec.awaiting:
            if opaque in waiting:
                waiting.discard(opaque)
                if accepted is not None:
                    neg.controls[accepted[0]] = accepted[1]
                    neg.stream_ids = neg.on("enable_stream_id")
            if waiting:
                keep.append((key, neg, waiting))
        rec.awaiting = keep

    def _stream_of(self, c: Conn, rec: ConnControls, msg):
        """(stream, negotiation) of a producer message, or (None, None)."""
        st = c.streams.get((msg.vbucket, msg.stream_id))
        if st is None or st.opaque != msg.opaque:
            st = next((s for (vb, _), s in c.streams.items()
                       if vb == msg.vbucket and s.opaque == msg.opaque), None)
        if st is None or st.response_status != STATUS_SUCCESS:
            return None, None
        entry = rec.streams.get((st.vb, st.sid))
        if entry is None or entry[0] is not st or entry[1] is None:
            return None, None
        return st, entry[1]

    def _producer_message(self, c: Conn, rec: ConnControls, pdu, msg, out) -> None:
        st, neg = self._stream_of(c, rec, msg)
        if st is None:
            return
        op = msg.opcode
        if (msg.stream_id is not None) != neg.stream_ids:
            why = (f"carries stream id {msg.stream_id} but enable_stream_id was not accepted"
                   if msg.stream_id is not None else
                   "has no stream id although enable_stream_id was accepted")
            report_on_stream(st, out, STREAM_ID_MESSAGE_MISMATCH.id, f"{msg.name} on "
                             f"{st.describe()} {why}", pdu, msg, {"sid": msg.stream_id})
        if op == OP["DcpSnapshotMarker"]:
            self._marker(c, st, neg, pdu, msg, out)
        elif op == OP["DcpExpiration"]:
            # a connection setting, read when the message is sent (DcpProducer::step)
            now = self._negotiated(c, rec, False)
            if now is not None and now.expiry_opcode is False:
                report_on_stream(st, out, EXPIRATION_NOT_NEGOTIATED.id, f"DcpExpiration on "
                                 f"{st.describe()} without enable_expiry_opcode (and the "
                                 "DcpOpen flag include_delete_times): the producer sends a "
                                 "deletion instead", pdu, msg,
                                 {"enable_expiry_opcode": now.controls.get(
                                     "enable_expiry_opcode")})
        elif op == OP["DcpOsoSnapshot"]:
            if (msg.fields.get("flags", 0) & OSO_START and not neg.oso
                    and not ((now := self._negotiated(c, rec, False)) and now.oso)):
                report_on_stream(st, out, OSO_NOT_NEGOTIATED.id, f"OSO snapshot on "
                                 f"{st.describe()} without enable_out_of_order_snapshots",
                                 pdu, msg, {})
        elif op == OP["DcpSeqnoAdvanced"]:
            self._seqno_advanced(st, neg, pdu, msg, out)

    def _marker(self, c: Conn, st: Stream, neg: Negotiated, pdu, msg, out) -> None:
        f = msg.fields
        flags = f.get("flags")
        if flags is None or msg.problems or any(check_message(msg, c.negotiation,
                                                              pdu.direction == 0)):
            return            # one finding per defect: the single-message rules judge it
        version = {None: "V1", 0: "V2.0", 2: "V2.2"}.get(f.get("version"))
        if version is None:
            return                              # 2.1 or unknown: the structure rules say why
        shown = {"version": version, "enable_sync_writes": neg.controls.get("enable_sync_writes"),
                 "consumer_name": neg.controls.get("consumer_name"),
                 "max_marker_version": neg.controls.get("max_marker_version")}
        if version == "V2.0" and not neg.sync_replication:
            report_on_stream(st, out, SNAPSHOT_VERSION_NOT_NEGOTIATED.id, f"V2.0 marker on "
                             f"{st.describe()}, but the stream was requested without sync "
                             "replication (enable_sync_writes and consumer_name accepted)",
                             pdu, msg, shown)
        elif version == "V2.2" and not neg.marker_v22:
            report_on_stream(st, out, SNAPSHOT_VERSION_NOT_NEGOTIATED.id, f"V2.2 marker on "
                             f"{st.describe()}, but the stream was requested without "
                             "max_marker_version=2.2 accepted", pdu, msg, shown)
        elif version == "V1" and flags & SNAPSHOT_DISK and neg.sync_replication:
            report_on_stream(st, out, SNAPSHOT_V1_DISK_SYNC_REPLICATION.id, f"V1 Disk marker "
                             f"on the sync-replication stream {st.describe()}: no HCS, the "
                             "consumer throws 'missing HCS'", pdu, msg, shown)
        if flags & (SNAPSHOT_HISTORY | SNAPSHOT_MAY_DUPLICATE) and not neg.on("change_streams"):
            report_on_stream(st, out, SNAPSHOT_HISTORY_NOT_NEGOTIATED.id, f"marker on "
                             f"{st.describe()} with History/MayContainDuplicates, but the "
                             "stream was requested without change_streams accepted", pdu,
                             msg, {"flags": flags})

    def _seqno_advanced(self, st: Stream, neg: Negotiated, pdu, msg, out) -> None:
        # active_stream.cc isSeqnoAdvancedEnabled; inside OSO also completeBackfillInner
        # with enable_out_of_order_snapshots=true_with_seqno_advanced
        skip_deletes = bool((neg.open_flags or 0) & _SKIP_DELETES)
        enabled = neg.collections and (not neg.sync_writes
                                       or not neg.on("flatbuffers_system_events")
                                       or skip_deletes)
        if enabled or (st.in_oso and neg.on("enable_out_of_order_snapshots",
                                            "true_with_seqno_advanced")):
            return
        why = ("not a collections stream (no HELLO Collections, no stream-request value)"
               if not neg.collections else
               "a sync-writes stream with flatbuffers_system_events")
        report_on_stream(st, out, SEQNO_ADVANCED_NOT_ENABLED.id, f"SeqnoAdvanced on "
                         f"{st.describe()}, {why}: the producer never sends it there", pdu,
                         msg, {"collections": neg.collections})

    # --- the consumer's responses ---------------------------------------------------------

    def _consumer_response(self, c: Conn, rec: ConnControls, pdu, msg, out) -> None:
        op, status = msg.opcode, msg.status
        v7 = (rec.controls.get("v7_dcp_status_codes") == "true") if _known(c, rec) else None
        shown = {"status": STATUS.text(status), "opcode": f"{op:#04x}"}
        vb = _vb_of(c, msg.opaque)
        if op in NO_REPLY_OPCODES:
            out.append(_about(finding_for(CONSUMER_RESPONSE_UNEXPECTED.id, f"consumer answered "
                                          f"{msg.name} (opaque {msg.opaque:#x}, "
                                          f"{STATUS.text(status)}): the producer expects no "
                                          "response to it and disconnects", pdu, msg, shown),
                              vb))
            return
        if op == OP["DcpNoop"]:
            expected = rec.noop_opaque
            if expected is None or msg.opaque == expected:
                return
            verdict = tolerated(op, status, v7)
            shown["noop_opaque"] = f"{expected:#x}"
            if verdict is False:      # unless a cut hid a later noop
                f = _about(finding_for(
                    CONSUMER_NOOP_OPAQUE_MISMATCH.id, f"noop response with opaque "
                    f"{msg.opaque:#x} ({STATUS.text(status)}), but the producer's last noop "
                    f"had opaque {expected:#x}: the producer disconnects", pdu, msg, shown), vb)
                held: list = []
                c.defer(held, f, c.producer_direction, rec.noop_ts)
                for f in held:
                    self._hold(c, f)
            elif verdict is None:
                self._undecided(pdu, msg, shown, out, vb)
            return
        spec = OPCODES.get(op)
        reply = spec.reply if spec is not None else None
        if reply is None or reply.taken is None or STATUS.text(status) in reply.taken:
            return          # taken as it is, or not an answer to the producer's streams
        verdict = tolerated(op, status, v7)
        if verdict is None:
            self._undecided(pdu, msg, shown, out, vb)
        elif verdict is False:
            f = _about(finding_for(CONSUMER_ERROR_RESPONSE.id, f"consumer answered {msg.name} "
                                   f"(opaque {msg.opaque:#x}) with {STATUS.text(status)}"
                                   + (" with v7_dcp_status_codes accepted" if v7 and status
                                      in (KEY_ENOENT, KEY_EEXISTS) else ""),
                                   pdu, msg, shown), vb)
            self._hold(c, f)

    def _hold(self, c: Conn, f) -> None:
        """Reported when the connection ends (correlation.py says what followed)."""
        if len(c.held_errors) < bounds.MAX_ERRORS:
            c.held_errors.append(HeldError(f, c.producer_messages))

    def _undecided(self, pdu, msg, shown, out, vb) -> None:
        out.append(_about(finding_for(
            CONSUMER_ERROR_RESPONSE_UNDECIDED.id, f"consumer answered {msg.name} (opaque "
            f"{msg.opaque:#x}) with {STATUS.text(msg.status)}: the producer tolerates it "
            "unless v7_dcp_status_codes was accepted, which the capture does not show", pdu,
            msg, shown), vb))


def _about(f, vb):
    f.vbucket = vb
    return f


def _vb_of(c: Conn, opaque: int):
    return next((st.vb for st in c.streams.values() if st.opaque == opaque), None)
