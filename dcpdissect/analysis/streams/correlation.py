"""Correlation: do the two ends of a stream agree on which stream a message belongs to?

Judges ns_server's Add Stream against the stream request the consumer then sends to the
producer (the response's new opaque and status must mirror that request's; ROLLBACK is
never forwarded), the opaque of every stream message against the stream's, and the
consumer's answers: a success response to a marker that did not ask for an ack, and a
rejected data message (held until the connection ends, to say what followed it).
"""

from __future__ import annotations

from ...protocol import SNAPSHOT_ACK, STATUS, STATUS_ROLLBACK, STATUS_SUCCESS
from ..findings import Finding, finding_for
from ..rules.stream import (ADD_STREAM_NEW_OPAQUE_MISMATCH, ADD_STREAM_ROLLBACK,
                            ADD_STREAM_STATUS_MISMATCH, SNAPSHOT_ACK_UNEXPECTED,
                            STREAM_OPAQUE_MISMATCH)
from . import bounds
from .snapshots import MARKER
from .state import AddStream, Conn, Stream, frames_of, report_on_stream


class Correlation:
    """Add Streams awaiting their stream request and response; the consumers' answers."""

    def __init__(self):
        self.adds: list[AddStream] = []     # newest last, across connections

    # --- Add Stream ↔ stream request ------------------------------------------------------

    def on_add_stream(self, c: Conn, pdu, msg) -> None:
        """ns_server asks the consumer memcached (this connection's server) for a stream."""
        self.adds.append(AddStream(c.id, c.server[0], msg.vbucket, msg.opaque, pdu))
        del self.adds[:-bounds.MAX_ADD_STREAMS]

    def on_stream_request(self, c: Conn, st: Stream) -> None:
        """A consumer's stream request answers its latest Add Stream of the vb: on the same
        connection behind ns_server's proxy (the consumer memcached sends it back to
        ns_server), or on a connection of its own from the consumer's host."""
        same = next((a for a in reversed(self.adds) if a.vb == st.vb and a.conn == c.id), None)
        add = same or next((a for a in reversed(self.adds) if a.vb == st.vb
                            and a.consumer_host == c.client[0] and a.conn != c.id), None)
        if add is not None:
            add.stream = st

    def on_add_stream_response(self, c: Conn, pdu, msg, out) -> None:
        add = next((a for a in reversed(self.adds)
                    if a.conn == c.id and a.opaque == msg.opaque), None)
        if add is not None:
            self.adds.remove(add)
        if c.cuts:
            return
        new = msg.fields.get("new_opaque")
        vb = add.vb if add is not None else None
        shown = {"status": STATUS.text(msg.status),
                 "new_opaque": None if new is None else f"{new:#x}"}
        if msg.status == STATUS_ROLLBACK:
            out.append(_about_response(ADD_STREAM_ROLLBACK.id, "add stream response carries "
                                       "ROLLBACK: the consumer must handle the rollback itself",
                                       pdu, msg, shown, frames_of(add and add.pdu), vb))
        if add is None or add.stream is None:
            return
        st = add.stream
        ctx = frames_of(add.pdu, st.request_pdu)
        shown["stream_request_opaque"] = f"{st.opaque:#x}"
        if new is not None and new != st.opaque:
            out.append(_about_response(ADD_STREAM_NEW_OPAQUE_MISMATCH.id,
                                       f"new opaque {new:#x}, but the consumer's stream request "
                                       f"for vb {st.vb} (frame {st.request_pdu.frame}) used "
                                       f"{st.opaque:#x}", pdu, msg, shown, ctx, vb))
        elif (st.response_status is not None and msg.status != st.response_status
              and msg.status != STATUS_ROLLBACK):
            shown["stream_request_status"] = STATUS.text(st.response_status)
            out.append(_about_response(ADD_STREAM_STATUS_MISMATCH.id,
                                       f"status {STATUS.text(msg.status)}, but the stream "
                                       f"request for vb {st.vb} got "
                                       f"{STATUS.text(st.response_status)}", pdu, msg, shown,
                                       ctx, vb))
        if new == st.opaque:
            st.add_stream_frame = pdu.frame

    # --- stream messages ------------------------------------------------------------------

    def on_foreign_opaque(self, st: Stream, pdu, msg, out) -> None:
        """The server sent a message on ``st`` with another opaque than the stream's."""
        via = (f" (the add-stream response at frame {st.add_stream_frame} announced it)"
               if st.add_stream_frame is not None else "")
        report_on_stream(st, out, STREAM_OPAQUE_MISMATCH.id,
                         f"{msg.name} for {st.describe()} with opaque {msg.opaque:#x}; the "
                         f"stream's opaque is {st.opaque:#x}{via}", pdu, msg,
                         {"opaque": f"{msg.opaque:#x}", "stream_opaque": f"{st.opaque:#x}"},
                         frames_of(st.request_pdu))

    def on_marker(self, c: Conn, st: Stream, pdu) -> None:
        """After snapshots.py judged a marker: one that opened a snapshot with the Ack flag
        awaits the consumer's ack."""
        snap = st.snap
        if snap is not None and snap.pdu is pdu and snap.flags & SNAPSHOT_ACK:
            c.awaiting_ack[st.opaque] = c.awaiting_ack.get(st.opaque, 0) + 1

    # --- the consumer's answers -----------------------------------------------------------

    def on_consumer_response(self, c: Conn, pdu, msg, out) -> None:
        op = msg.opcode
        if op == MARKER:
            n = c.awaiting_ack.get(msg.opaque, 0)
            if n:
                c.awaiting_ack[msg.opaque] = n - 1
            elif msg.status == STATUS_SUCCESS and not c.acks_unknown:   # errors are no acks
                c.defer(out, _about_response(SNAPSHOT_ACK_UNEXPECTED.id,
                                             f"response to a snapshot marker (opaque "
                                             f"{msg.opaque:#x}) although no marker awaiting an "
                                             "ack had the Ack flag", pdu, msg,
                                             {"status": STATUS.text(msg.status)}, (),
                                             _vb_of(c, msg.opaque)), c.producer_direction)

    def on_cut(self, c: Conn) -> None:
        """A cut of the producer's direction may have hidden markers that ask for an ack:
        how many acks are owed is no longer known."""
        c.acks_unknown = True
        c.awaiting_ack.clear()

    def on_close(self, c: Conn, what: str) -> list[Finding]:
        """The connection ended (``what`` says how): the rejections it held, and what the
        server sent after each."""
        out = []
        for held in c.held_errors:
            after = c.producer_messages - held.producer_messages
            held.finding.message += f"; then {what}" + (
                f", after {after} more producer message(s)" if after else "")
            out.append(held.finding)
        c.held_errors.clear()
        return out


def _about_response(rid, text, pdu, msg, fields, context, vbucket) -> Finding:
    """A finding about a response, which carries no vbucket: that of the stream it answers."""
    f = finding_for(rid, text, pdu, msg, fields, context)
    f.vbucket = vbucket
    return f


def _vb_of(c: Conn, opaque: int):
    return next((st.vb for st in c.streams.values() if st.opaque == opaque), None)
