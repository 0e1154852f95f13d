"""The analyzer: events of a capture in, findings out.

``Analyzer.feed(event)`` takes the events of :mod:`dcpdissect.reassembly.pdus` in capture
order and returns the findings they complete; ``finish()`` returns the rest. A caller that
has already decoded a PDU passes the message along with ``feed_message(pdu, msg)``
instead, so that nothing is decoded twice: that is how a :class:`~.session.Pass`, which
also caps the findings per rule, feeds it as one of its observers. Per-message
rules live in :mod:`.rules.structure`, per-connection/per-stream state machines in
:mod:`.streams`. State is kept per open connection and per stream, never per message.
"""

from __future__ import annotations

from ..codec import decode
from ..reassembly.connections import ConnectionClosed, ConnectionOpened, StreamGap, TcpAnomaly
from ..reassembly.pdus import NotMcbp, TlsConnection, TlsProblem
from ..reassembly.framing import (ILLEGAL_MAGIC, MAX_PDU_SEGMENTS, TOO_LARGE, Hidden, LostPdu,
                                  Pdu, Resync)
from ..reassembly.tcp import LOST
from ..reassembly import tls as tls_problems
from .findings import Finding, finding_for
from .negotiation import NEGOTIATING, Negotiation
from .rollback_checks import RollbackTracker
from .rules.framing import (CAPTURE_GAP, CONNECTIONS_NOT_MCBP, FRAME_TOO_LARGE,
                            LOST_PDU, MID_STREAM_START, RESYNC_AFTER_GARBAGE, TCP_CAP,
                            TCP_OVERLAP_MISMATCH, TCP_SEQ_JUMP, TLS_CONNECTION,
                            UNCAPTURED_NOT_JUDGED, UNKNOWN_MAGIC)
from .rules.tls import TLS_AUTH_FAILED, TLS_GAP, TLS_NO_KEY, TLS_UNSUPPORTED
from .streams import StreamTracker
from .rules.structure import check_message, unjudged


class Analyzer:
    """``on_marker(pdu, label)``, when given, gets the start-seqno convention of every
    snapshot marker request fed (see :class:`.streams.StreamTracker`). ``conventions_only``
    runs just what those conventions depend on (negotiation, stream bookkeeping, snapshot
    rules): for a caller that wants the conventions and not the findings."""

    def __init__(self, on_marker=None, conventions_only: bool = False):
        self.connections: dict[int, ConnectionOpened] = {}
        self.negotiated: dict[int, Negotiation] = {}     # what each connection negotiated
        self.all_rules = not conventions_only
        self.streams = StreamTracker(on_marker, all_rules=self.all_rules)
        self.rollback = RollbackTracker()
        self.messages = 0
        self._not_judged: dict[str, Finding] = {}   # rule -> its uncaptured-not-judged note

    def feed(self, ev) -> list[Finding]:
        return self._pdu(ev) if type(ev) is Pdu else self._feed(ev)

    def feed_message(self, pdu: Pdu, msg) -> list[Finding]:
        """``feed(pdu)`` for a PDU whose :func:`~dcpdissect.codec.decode` is ``msg``."""
        return self._pdu(pdu, msg)

    # as an observer of a :class:`~.session.Pass`
    on_message = feed_message
    on_event = feed

    def _feed(self, ev) -> list[Finding]:
        kind = type(ev)
        if kind is ConnectionOpened:
            self.connections[ev.conn] = ev
            neg = self.negotiated[ev.conn] = Negotiation(start_seen=not ev.mid_stream)
            out = self.streams.on_open(ev, neg)
            if ev.mid_stream:
                out.append(Finding(MID_STREAM_START.id, f"no TCP handshake for {_ends(ev)}: the "
                                   "capture started inside the connection", ev.frame, (ev.frame,),
                                   ev.ts_ns, ev.conn))
            return out
        if kind is StreamGap:
            if ev.length and ev.cause == LOST:      # 0: a sequence jump (tcp-seq-jump)
                return [Finding(CAPTURE_GAP.id, f"{ev.length} bytes missing in "
                                f"{'client→server' if ev.direction == 0 else 'server→client'} "
                                f"before stream offset {ev.offset}", ev.frame, (ev.frame,),
                                ev.ts_ns, ev.conn)]
            return []
        if kind is Hidden:
            if ev.direction == 0:
                self._lost_bytes(ev.conn)
            return self.streams.on_hidden(ev)
        if kind is Resync:
            return self._resync(ev)
        if kind is LostPdu:
            if ev.direction == 0:
                self._lost_bytes(ev.conn)
            return [Finding(LOST_PDU.id, f"message at stream offset {ev.offset} cut by "
                            f"{_LOST_BY.get(ev.reason, ev.reason)}: "
                            f"{ev.have} of {ev.need or '?'} bytes", ev.frame, (ev.frame,),
                            ev.ts_ns, ev.conn)] + self.streams.on_lost(ev)
        if kind is TcpAnomaly:
            rid = _ANOMALY_RULES.get(ev.kind, TCP_CAP.id)
            return [Finding(rid, ev.detail, ev.frame, (ev.frame,), ev.ts_ns, ev.conn)]
        if kind is ConnectionClosed:
            out = self.streams.on_close(ev)
            self.rollback.on_close(ev.conn)
            self.connections.pop(ev.conn, None)
            self.negotiated.pop(ev.conn, None)
            return out
        if kind is TlsConnection:
            how = ("on a TLS port" if ev.by_port
                   else "it starts with a TLS record header")
            return [Finding(TLS_CONNECTION.id, f"{_ends(ev)}: TLS ({how}): encrypted, "
                            "not decoded", ev.frame, (ev.frame,), ev.ts_ns, None,
                            fields={"client": f"{ev.client[0]}:{ev.client[1]}",
                                    "server": f"{ev.server[0]}:{ev.server[1]}"})]
        if kind is NotMcbp:
            return [not_mcbp_finding(ev.ports, ev.frame, ev.ts_ns)]
        if kind is TlsProblem:
            return [Finding(_TLS_RULES[ev.rule], f"{_ends(ev)}: {ev.detail}", ev.frame,
                            (ev.frame,), ev.ts_ns, ev.conn,
                            fields={"client": f"{ev.client[0]}:{ev.client[1]}",
                                    "server": f"{ev.server[0]}:{ev.server[1]}",
                                    "client_random": ev.client_random})]
        return []

    def finish(self) -> list[Finding]:
        return self.streams.finish()

    on_finish = finish

    def _pdu(self, pdu: Pdu, msg=None) -> list[Finding]:
        self.messages += 1
        if msg is None:
            msg = decode(pdu.data)
        out = []
        neg = self.negotiated.get(pdu.conn)
        from_client = pdu.direction == 0
        if self.all_rules:
            for rid, text, fields in check_message(msg, neg, from_client):
                out.append(finding_for(rid, text, pdu, msg, fields))
            if pdu.missing:
                self._unjudged(pdu, msg, neg, from_client, out)
        if neg is not None and msg.opcode in NEGOTIATING:
            neg.on_message(msg, from_client)
        opened = self.connections.get(pdu.conn)
        out += self.streams.on_message(pdu, msg, opened, neg)
        if self.all_rules:
            out += self.rollback.on_message(pdu, msg, opened, neg)
        return out

    def _unjudged(self, pdu: Pdu, msg, neg, from_client: bool, out: list) -> None:
        """Once per rule: a message the capture cut could not be judged by it."""
        for rid, part in unjudged(msg, neg, from_client):
            if rid in self._not_judged:
                continue
            what = ("its extras" if part == "extras" else f"its {part}")
            self._not_judged[rid] = note = Finding(
                UNCAPTURED_NOT_JUDGED.id, f"{msg.name}: {what} not captured ({pdu.missing} bytes "
                f"of the message missing): " + ("no single-message rule" if rid == "extras"
                                                else f"{rid}") + " could judge it, nor the "
                "messages cut alike after it", pdu.frame, pdu.frames, pdu.ts_ns, pdu.conn,
                msg.vbucket, msg.opaque, {"rule": rid, "part": part})
            out.append(note)

    def _lost_bytes(self, conn: int) -> None:
        """Bytes of the connection were not decoded: a DcpOpen may have been among them."""
        neg = self.negotiated.get(conn)
        if neg is not None:
            neg.undecoded()

    def _resync(self, ev: Resync) -> list[Finding]:
        if ev.reason == "garbage" and ev.direction == 0:
            self._lost_bytes(ev.conn)
        out = []
        if ev.reason == "garbage":
            rid = _RESYNC_RULES.get(ev.cause)
            if rid is not None:
                out.append(Finding(rid, ev.detail, ev.frame, (ev.frame,), ev.ts_ns, ev.conn))
            out.append(Finding(RESYNC_AFTER_GARBAGE.id, f"skipped {ev.skipped} bytes to resume at "
                               f"stream offset {ev.offset}", ev.frame, (ev.frame,), ev.ts_ns, ev.conn))
        out += self.streams.on_resync(ev)
        return out


_ANOMALY_RULES = {"overlap_mismatch": TCP_OVERLAP_MISMATCH.id, "seq_jump": TCP_SEQ_JUMP.id}
_RESYNC_RULES = {ILLEGAL_MAGIC: UNKNOWN_MAGIC.id, TOO_LARGE: FRAME_TOO_LARGE.id}
_TLS_RULES = {tls_problems.NO_KEY: TLS_NO_KEY.id, tls_problems.UNSUPPORTED: TLS_UNSUPPORTED.id,
              tls_problems.AUTH_FAILED: TLS_AUTH_FAILED.id, tls_problems.TLS_GAP: TLS_GAP.id}
_LOST_BY = {"gap": "a gap", "uncaptured": "the snapshot length", "end": "the end of the capture",
            "cap": f"the framing bound (carried by more than {MAX_PDU_SEGMENTS} segments)"}


_PORTS_LISTED = 10               # ports named in the connections-not-mcbp message (fields: all)


def not_mcbp_finding(ports: dict, frame: int, ts_ns: int) -> Finding:
    """The one ``connections-not-mcbp`` finding of a capture: ``ports`` maps a server port
    to its connections judged not MCBP; ``frame`` opened the first of them."""
    by_count = sorted(ports.items(), key=lambda pn: (-pn[1], pn[0]))
    total = sum(ports.values())
    listed = ", ".join(f"{p} ({n})" for p, n in by_count[:_PORTS_LISTED])
    if len(by_count) > _PORTS_LISTED:
        listed += f" and {len(by_count) - _PORTS_LISTED} more ports"
    return Finding(CONNECTIONS_NOT_MCBP.id, f"{total} TCP connection{'s' * (total != 1)} not "
                   f"MCBP, not decoded; by server port: {listed}", frame, (frame,), ts_ns,
                   fields={"connections": total, "ports": {str(p): n for p, n in by_count}})


def _ends(ev: ConnectionOpened) -> str:
    return f"{ev.client[0]}:{ev.client[1]} → {ev.server[0]}:{ev.server[1]}"
