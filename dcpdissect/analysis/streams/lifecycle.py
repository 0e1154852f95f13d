"""Lifecycle: nothing for a stream after its end, its close, a completed takeover, or for a
collection the stream saw dropped.

Judges the producer's stream messages against what ended the stream (kv_engine is the
authority):

* ``data-after-stream-end``: a message with the opaque of a stream after its STREAM_END,
  whatever the reason (active_stream.cc ActiveStream::endStream queues the StreamEnd as the
  stream's last message; consumer.cc DcpConsumer::streamEnd removes the stream). A new
  stream with another opaque replaces it: its messages are the new stream's, and a message
  with the old opaque while the new one is active is correlation's ``stream-opaque-mismatch``.
* ``data-after-close`` (``-undecided``): after the producer's success response to the
  consumer's CloseStream (producer.cc DcpProducer::closeStream). With the control
  ``send_stream_end_on_client_close_stream`` the stream drains until its StreamEnd(Closed)
  (ActiveStream::deadPhase), after which it is ended like any other; without it
  closeStreamInner has erased the stream before the response, so nothing of it follows, not
  even the StreamEnd that setDead queued (DcpProducer::getNextItemFromVbucket finds no
  stream); when the capture did not show the negotiation, which one applies is not known
  (info). Messages before the response are in flight and legal. The control is read as the
  DCP consumer sent it, in both connection roles (:meth:`.controls.Controls.accepted`).
* ``data-after-takeover``: after the producer's SetVbucketState(active) a takeover stream
  waits for the ack and ends (ActiveStream::takeoverSendPhase / setVBucketStateAckRecieved):
  only the StreamEnd may follow.
* ``data-for-dropped-collection``: an item whose key's collection id (leb128 prefix) the
  stream dropped with a DcpSystemEvent EndCollection (value versions 0/1:
  collections/system_event_types.h DropEventDcpData; version 2: the DroppedCollection
  FlatBuffers table of collections/events.fbs; read by :func:`~...codec.keys.system_event`);
  a BeginCollection of the same id makes it live again.

The tracker calls :meth:`Lifecycle.on_message` for every message before it dispatches it.
"""

from __future__ import annotations

from ...codec.keys import BEGIN_COLLECTION, END_COLLECTION, split_collection_key, system_event
from ...protocol import (DOCUMENT_ITEM_OPCODES, STATUS_SUCCESS, STREAM_END_REASONS,
                         STREAM_OPCODES, opcode_code)
from . import bounds
from ..rules.lifecycle import (DATA_AFTER_CLOSE, DATA_AFTER_CLOSE_UNDECIDED, DATA_AFTER_STREAM_END,
                               DATA_AFTER_TAKEOVER, DATA_FOR_DROPPED_COLLECTION)
from .controls import Controls
from .state import Conn, Stream, frames_of, key_text, report_on_stream

STREAM_END, CLOSE_STREAM = opcode_code("DcpStreamEnd"), opcode_code("DcpCloseStream")
SET_VB_STATE, SYSTEM_EVENT = opcode_code("DcpSetVbucketState"), opcode_code("DcpSystemEvent")
VB_ACTIVE = 1
CLOSE_CONTROL = "send_stream_end_on_client_close_stream"


class _Ended:
    """What made a stream's later messages illegal (kind: end, close, takeover)."""
    __slots__ = ("stream", "opaque", "kind", "pdu", "what", "drains")

    def __init__(self, stream: Stream, opaque: int, kind: str, pdu, what: str,
                 drains: bool | None = False):
        self.stream, self.opaque, self.kind, self.pdu, self.what = stream, opaque, kind, pdu, what
        self.drains = drains    # close: the stream may drain until its StreamEnd (None: unknown)


class _ConnLife:
    __slots__ = ("ended", "closing", "dropped")

    def __init__(self):
        self.ended: dict[tuple, _Ended] = {}          # (vb, sid) -> the latest end/close
        self.closing: dict[int, tuple] = {}           # CloseStream opaque -> (vb, sid)
        self.dropped: dict[tuple, tuple] = {}         # (vb, sid) -> (stream, {cid: pdu})


class Lifecycle:
    """Judges each producer stream message against the end of its stream."""

    def __init__(self, controls: Controls):
        self.controls = controls     # what the consumer negotiated (either connection role)
        self.conns: dict[int, _ConnLife] = {}

    def forget(self, c: Conn) -> None:
        self.conns.pop(c.id, None)

    def on_message(self, c: Conn, pdu, msg, from_consumer: bool, out: list) -> None:
        op = msg.opcode
        if op == CLOSE_STREAM:
            if msg.is_request and from_consumer:
                life = self._life(c)
                if len(life.closing) >= bounds.MAX_PENDING:
                    del life.closing[next(iter(life.closing))]
                life.closing[msg.opaque] = (msg.vbucket, msg.stream_id)
            elif not msg.is_request and not from_consumer:
                self._close_response(c, pdu, msg)
            return
        if not msg.is_request or from_consumer or op not in STREAM_OPCODES:
            return
        life = self.conns.get(c.id)
        if op in DOCUMENT_ITEM_OPCODES and (life is None or not life.ended and not life.dropped):
            return                  # no end, close, takeover or drop on the connection yet
        key = (msg.vbucket, msg.stream_id)
        st = c.streams.get(key)
        live = (st is not None and st.active and msg.opaque == st.opaque)
        rec = life.ended.get(key) if life is not None else None
        if not live:
            if (rec is not None and rec.kind == "end" and msg.opaque == rec.opaque
                    and (st is rec.stream or st is None or not st.active)):
                self._report(c, rec, out, DATA_AFTER_STREAM_END.id, f"{msg.name} for "
                             f"{rec.stream.describe()} after its {rec.what}", pdu, msg)
            return
        if rec is not None and rec.stream is st:
            if rec.kind == "takeover" and op == STREAM_END:
                pass
            elif rec.kind == "takeover":
                self._report(c, rec, out, DATA_AFTER_TAKEOVER.id, f"{msg.name} for "
                             f"{st.describe()} after {rec.what}: only the StreamEnd may follow",
                             pdu, msg)
            elif rec.kind == "close" and rec.drains is False:
                self._report(c, rec, out, DATA_AFTER_CLOSE.id, f"{msg.name} for {st.describe()} "
                             f"after {rec.what} (no {CLOSE_CONTROL})", pdu, msg)
            elif rec.kind == "close" and rec.drains is None:
                self._report(c, rec, out, DATA_AFTER_CLOSE_UNDECIDED.id, f"{msg.name} for "
                             f"{st.describe()} after {rec.what}; legal only if "
                             f"{CLOSE_CONTROL} was enabled, which the capture does not show",
                             pdu, msg)
        if op == STREAM_END:
            reason = msg.fields.get("reason")
            what = (f"StreamEnd({STREAM_END_REASONS.text(reason)}) at frame {pdu.frame}"
                    if reason is not None else f"StreamEnd at frame {pdu.frame}")
            life = self._life(c)
            life.ended[key] = _Ended(st, msg.opaque, "end", pdu, what)
            life.dropped.pop(key, None)
        elif op == SET_VB_STATE and msg.fields.get("state") == VB_ACTIVE:
            self._life(c).ended[key] = _Ended(st, msg.opaque, "takeover", pdu,
                                              f"SetVbucketState(active) at frame {pdu.frame}")
        elif op == SYSTEM_EVENT:
            self._system_event(c, st, key, pdu, msg)
        elif op in DOCUMENT_ITEM_OPCODES and msg.key and c.negotiation.collections:
            self._item(c, st, key, pdu, msg, out)

    def on_producer_cut(self, c: Conn) -> None:
        """A cut of the producer's direction may have hidden a collection's creation."""
        life = self.conns.get(c.id)
        if life is not None:
            life.dropped.clear()

    # --- helpers --------------------------------------------------------------------------

    def _life(self, c: Conn) -> _ConnLife:
        life = self.conns.get(c.id)
        if life is None:
            life = self.conns[c.id] = _ConnLife()
        return life

    def _close_response(self, c: Conn, pdu, msg) -> None:
        life = self.conns.get(c.id)
        key = life.closing.pop(msg.opaque, None) if life is not None else None
        if key is None or msg.status != STATUS_SUCCESS:
            return
        st = c.streams.get(key)
        if st is None or not st.active:
            return
        value = self.controls.accepted(c, CLOSE_CONTROL)
        drains = None if value is None else value == "true"    # None: not shown
        life.ended[key] = _Ended(st, st.opaque, "close", pdu, f"the CloseStream response at "
                                 f"frame {pdu.frame}", drains)

    def _system_event(self, c: Conn, st: Stream, key, pdu, msg) -> None:
        event = msg.fields.get("event")
        if event not in (BEGIN_COLLECTION, END_COLLECTION):
            return
        ids = system_event(event, msg.fields.get("version"), msg.key, msg.value or b"")
        if ids is None:
            return
        cid = ids.collection
        life = self._life(c)
        entry = life.dropped.get(key)
        if entry is None or entry[0] is not st:
            entry = life.dropped[key] = (st, {})
        if event == END_COLLECTION:
            if len(entry[1]) < bounds.MAX_KEYS:
                entry[1][cid] = pdu
        else:
            entry[1].pop(cid, None)

    def _item(self, c: Conn, st: Stream, key, pdu, msg, out) -> None:
        life = self.conns.get(c.id)
        entry = life.dropped.get(key) if life is not None else None
        if entry is None or entry[0] is not st or not entry[1]:
            return
        cid = split_collection_key(bytes(msg.key)).collection
        drop = entry[1].get(cid)
        if drop is None:
            return
        report_on_stream(st, out, DATA_FOR_DROPPED_COLLECTION.id, f"{msg.name} of key "
                         f"{key_text(msg.key)} in collection {cid:#x} on {st.describe()} after "
                         f"the collection's drop event at frame {drop.frame}", pdu, msg,
                         {"collection": f"{cid:#x}"}, frames_of(drop))

    @staticmethod
    def _report(c: Conn, rec: _Ended, out, rid, text, pdu, msg) -> None:
        """Said once the consumer's direction is known up to here: a request the capture
        hid after the end may have opened the stream again with the same opaque."""
        found: list = []
        report_on_stream(rec.stream, found, rid, text, pdu, msg, {"after": rec.what},
                         frames_of(rec.pdu))
        for f in found:
            c.defer(out, f, 1 - c.producer_direction, rec.pdu.ts_ns)

