"""The analyzer: events of a capture in, findings out.

``Analyzer.feed(event)`` takes the events of :mod:`dcpdissect.reassembly.pdus` in capture
order and returns the findings they complete; ``finish()`` returns the rest. Per-message
rules live in :mod:`.structural`, per-connection/per-stream state machines in
:mod:`.streams`. State is kept per open connection and per stream, never per message.
"""

from __future__ import annotations

from ..codec import decode
from ..reassembly.connections import ConnectionClosed, ConnectionOpened, StreamGap, TcpAnomaly
from ..reassembly.framing import MAX_PDU_SEGMENTS, LostPdu, Pdu, Resync
from .findings import Finding, finding_for
from .rules import ERROR, INFO, WARNING, rule
from .rollback_checks import RollbackTracker
from .streams import StreamTracker
from .structural import check_message

rule("capture-gap", INFO, "bytes missing from the capture (lost segment)",
     "TCP reassembly: stream semantics are suppressed across the gap", "tcp-loss.pcap")
rule("lost-pdu", INFO, "a message was cut by a capture gap or the end of the capture",
     "TCP reassembly: the message header was seen but not all of its bytes", "tcp-loss.pcap")
rule("resync-after-garbage", WARNING, "bytes that are not MCBP were skipped to find the next header",
     "MCBP framing: a header must follow the previous frame's body", "violations-garbage.pcap")
rule("unknown-magic", ERROR, "a header with an illegal magic byte",
     "magic.h is_legal(): 0x80 0x81 0x08 0x18 0x82 0x83; the server disconnects",
     "violations-garbage.pcap")
rule("frame-too-large", ERROR, "frame larger than the server's 30 MiB max_packet_size",
     "daemon/settings.h max_packet_size default 30 MiB; the server disconnects",
     "violations-garbage.pcap")
rule("mid-stream-start", INFO, "the capture starts in the middle of a connection",
     "no handshake seen: decoding resynchronised on the first plausible header",
     "tcp-mid-stream.pcap")
rule("tcp-overlap-mismatch", WARNING, "a retransmission carried different bytes than the original",
     "TCP reassembly keeps the first bytes seen", "tcp-retransmit.pcap")
rule("tcp-cap", WARNING, "a reassembly bound was hit (out-of-order buffer or connection table)",
     "bounded resources: the oldest state is given up and reported", "violations-garbage.pcap")
rule("tcp-seq-jump", WARNING, "a TCP sequence number jumped farther than any window",
     "TCP reassembly: no window exceeds 2^30 bytes; the stream continues at the new number",
     "hostile-seq-jump.pcap")
rule("findings-capped", INFO, "more findings of one rule than are kept; the rest are counted",
     "bounded resources: at most MAX_FINDINGS_PER_RULE findings of each rule are kept per "
     "capture", "hostile-findings-flood.pcap")

MAX_FINDINGS_PER_RULE = 1000


class Analyzer:
    def __init__(self, max_per_rule: int = MAX_FINDINGS_PER_RULE):
        self.connections: dict[int, ConnectionOpened] = {}
        self.streams = StreamTracker()
        self.rollback = RollbackTracker()
        self.messages = 0
        self.max_per_rule = max_per_rule
        self._counts: dict[str, int] = {}
        self._dropped: dict[str, list] = {}     # rule -> [count, first Finding, last frame]

    def feed(self, ev) -> list[Finding]:
        out = self._feed(ev)
        return self._cap(out) if out else out

    def _cap(self, out: list[Finding]) -> list[Finding]:
        """Keep the first ``max_per_rule`` findings of each rule; count the others."""
        counts = self._counts
        cap = self.max_per_rule
        keep = []
        for f in out:
            n = counts[f.rule] = counts.get(f.rule, 0) + 1
            if n <= cap:
                keep.append(f)
                continue
            d = self._dropped.get(f.rule)
            if d is None:
                self._dropped[f.rule] = [1, f, f.frame]
            else:
                d[0] += 1
                d[2] = f.frame
        return keep

    def _capped(self) -> list[Finding]:
        out = []
        for rid, (n, first, last) in self._dropped.items():
            out.append(Finding("findings-capped", f"{n} more {rid} findings (frames {first.frame}"
                               f"–{last}) not kept: at most {self.max_per_rule} per rule",
                               first.frame, (first.frame,) if first.frame else (), first.ts_ns,
                               first.connection, fields={"rule": rid, "dropped": n}))
        return out

    def _feed(self, ev) -> list[Finding]:
        kind = type(ev)
        if kind is Pdu:
            return self._pdu(ev)
        if kind is ConnectionOpened:
            self.connections[ev.conn] = ev
            out = self.streams.on_open(ev)
            if ev.mid_stream:
                out.append(Finding("mid-stream-start", f"no TCP handshake for {_ends(ev)}: the "
                                   "capture started inside the connection", ev.frame, (ev.frame,),
                                   ev.ts_ns, ev.conn))
            return out
        if kind is StreamGap:
            out = self.streams.on_gap(ev)
            if ev.length:           # 0: after a sequence jump, reported as tcp-seq-jump
                out.append(Finding("capture-gap", f"{ev.length} bytes missing in "
                                   f"{'client→server' if ev.direction == 0 else 'server→client'} "
                                   f"before stream offset {ev.offset}", ev.frame, (ev.frame,),
                                   ev.ts_ns, ev.conn))
            return out
        if kind is Resync:
            return self._resync(ev)
        if kind is LostPdu:
            return [Finding("lost-pdu", f"message at stream offset {ev.offset} cut by "
                            f"{_LOST_BY.get(ev.reason, ev.reason)}: "
                            f"{ev.have} of {ev.need or '?'} bytes", ev.frame, (ev.frame,),
                            ev.ts_ns, ev.conn)]
        if kind is TcpAnomaly:
            rid = _ANOMALY_RULES.get(ev.kind, "tcp-cap")
            return [Finding(rid, ev.detail, ev.frame, (ev.frame,), ev.ts_ns, ev.conn)]
        if kind is ConnectionClosed:
            out = self.streams.on_close(ev)
            self.rollback.on_close(ev.conn)
            self.connections.pop(ev.conn, None)
            return out
        return []

    def finish(self) -> list[Finding]:
        out = self.streams.finish()
        return (self._cap(out) if out else out) + self._capped()

    def _pdu(self, pdu: Pdu) -> list[Finding]:
        self.messages += 1
        msg = decode(pdu.data)
        out = []
        for rid, text, fields in check_message(msg):
            out.append(finding_for(rid, text, pdu, msg, fields))
        opened = self.connections.get(pdu.conn)
        out += self.streams.on_message(pdu, msg, opened)
        out += self.rollback.on_message(pdu, msg, opened)
        return out

    def _resync(self, ev: Resync) -> list[Finding]:
        out = []
        if ev.reason == "garbage":
            if "illegal magic" in ev.detail:
                out.append(Finding("unknown-magic", ev.detail, ev.frame, (ev.frame,), ev.ts_ns, ev.conn))
            elif "frame limit" in ev.detail:
                out.append(Finding("frame-too-large", ev.detail, ev.frame, (ev.frame,), ev.ts_ns, ev.conn))
            out.append(Finding("resync-after-garbage", f"skipped {ev.skipped} bytes to resume at "
                               f"stream offset {ev.offset}", ev.frame, (ev.frame,), ev.ts_ns, ev.conn))
        out += self.streams.on_resync(ev)
        return out


_ANOMALY_RULES = {"overlap_mismatch": "tcp-overlap-mismatch", "seq_jump": "tcp-seq-jump"}
_LOST_BY = {"gap": "a gap", "end": "the end of the capture",
            "cap": f"the framing bound (carried by more than {MAX_PDU_SEGMENTS} segments)"}


def _ends(ev: ConnectionOpened) -> str:
    return f"{ev.client[0]}:{ev.client[1]} → {ev.server[0]}:{ev.server[1]}"
