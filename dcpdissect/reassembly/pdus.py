"""Capture file -> TCP connections -> framed MCBP PDUs, as one stream of events.

Every stage is a plain iterator so that the CLI and the Spark job share it. Events are
``Pdu``, ``Resync``, ``LostPdu`` (framing), ``StreamGap``, ``ConnectionOpened``,
``ConnectionClosed`` and ``TcpAnomaly`` (TCP). A fault in the capture file is raised as
``CaptureError`` only after everything decoded before it has been yielded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

from ..capture.packets import decode_packet
from ..capture.readers import CaptureError, Frame, open_capture
from ..protocol import DCP_PORTS, TLS_PORTS
from .connections import ConnectionClosed, ConnectionOpened, ConnectionTable, StreamData, StreamGap
from .framing import LostPdu, Pdu, PduFramer, Resync


@dataclass
class Options:
    ports: tuple[int, ...] = ()          # extra server ports to decode
    any_port: bool = False               # heuristic: try every TCP connection
    max_connections: int = 100_000

    @property
    def server_ports(self) -> frozenset[int]:
        return frozenset(DCP_PORTS) | frozenset(self.ports)


@dataclass
class Summary:
    """Per-capture counters printed on stderr and kept in reports."""
    path: str = ""
    frames: int = 0
    tcp_segments: int = 0
    connections: int = 0
    pdus: int = 0
    gaps: int = 0
    gap_bytes: int = 0
    resyncs: int = 0
    lost_pdus: int = 0
    tls_connections: int = 0
    tcp: dict = field(default_factory=dict)
    error: str | None = None

    def line(self) -> str:
        text = (f"{self.path}: {self.frames} frames, {self.connections} TCP connections, "
                f"{self.pdus} PDUs, {self.gaps} gaps ({self.gap_bytes} bytes), "
                f"{self.resyncs} resyncs, {self.tls_connections} TLS connections skipped")
        mismatched = self.tcp.get("overlaps_mismatched", 0)
        if mismatched:
            text += f", {mismatched} overlapping retransmissions with different bytes"
        return text + (f"; stopped: {self.error}" if self.error else "")


class PduStream:
    """Feeds frames through TCP reassembly and MCBP framing; iterate for events."""

    def __init__(self, options: Options | None = None, summary: Summary | None = None):
        self.options = options or Options()
        self.summary = summary or Summary()
        self.table = ConnectionTable(server_ports=self.options.server_ports,
                                     tls_ports=frozenset(TLS_PORTS) - self.options.server_ports,
                                     any_port=self.options.any_port,
                                     max_connections=self.options.max_connections)
        self.framers: dict[tuple[int, int], PduFramer] = {}
        self.connections: dict[int, ConnectionOpened] = {}
        self.now: tuple[int, int] | None = None     # (frame, ts) being processed

    def feed_frames(self, frames: Iterable[Frame]) -> Iterator:
        summary = self.summary
        for frame in frames:
            summary.frames += 1
            seg = decode_packet(frame.linktype, frame.data)
            if seg is None:
                continue
            summary.tcp_segments += 1
            self.now = (frame.number, frame.ts_ns)
            events = self.table.feed(frame.number, frame.ts_ns, seg)
            if events:
                yield from self._route(events)

    def finish(self) -> Iterator:
        self.now = None
        yield from self._route(self.table.close())
        for framer in list(self.framers.values()):
            out = framer.close()
            self._tally(out)
            yield from out
        self.framers.clear()
        self.summary.tls_connections = self.table.stats.get("tls_connections", 0)
        self.summary.tcp = dict(self.table.stats)

    def _framer(self, conn: int, direction: int) -> PduFramer:
        key = (conn, direction)
        framer = self.framers.get(key)
        if framer is None:
            opened = self.connections.get(conn)
            in_sync = opened is not None and not opened.mid_stream
            framer = self.framers[key] = PduFramer(conn, direction, in_sync=in_sync)
        return framer

    def _route(self, events) -> Iterator:
        for ev in events:
            kind = type(ev)
            if kind is StreamData:
                out = self._framer(ev.conn, ev.direction).data(
                    ev.offset, ev.data, ev.frame, ev.ts_ns, self.now)
                if out:
                    self._tally(out)
                    yield from out
            elif kind is StreamGap:
                self.summary.gaps += 1
                self.summary.gap_bytes += ev.length
                yield ev
                out = self._framer(ev.conn, ev.direction).gap(ev.offset, ev.length, ev.frame, ev.ts_ns)
                self._tally(out)
                yield from out
            elif kind is ConnectionOpened:
                self.summary.connections += 1
                self.connections[ev.conn] = ev
                yield ev
            elif kind is ConnectionClosed:
                for direction in (0, 1):
                    framer = self.framers.pop((ev.conn, direction), None)
                    if framer is not None:
                        out = framer.close()
                        self._tally(out)
                        yield from out
                yield ev
                self.connections.pop(ev.conn, None)     # state per open connection only
            else:
                yield ev

    def _tally(self, events: list) -> None:
        summary = self.summary
        for ev in events:
            kind = type(ev)
            if kind is Pdu:
                summary.pdus += 1
            elif kind is Resync:
                summary.resyncs += 1
            elif kind is LostPdu:
                summary.lost_pdus += 1


def iter_events(path: str, options: Options | None = None, summary: Summary | None = None,
                reader_hook=None) -> Iterator:
    """All events of one capture file. On a capture fault, flush and yield what was
    decoded, record the fault in ``summary.error`` and raise the ``CaptureError``."""
    stream = PduStream(options, summary)
    stream.summary.path = path
    try:
        with open_capture(path) as reader:
            if reader_hook is not None:
                reader_hook(reader)
            yield from stream.feed_frames(reader)
    except CaptureError as exc:
        stream.summary.error = str(exc)
        yield from stream.finish()
        raise
    yield from stream.finish()


__all__ = ["Options", "Summary", "PduStream", "iter_events", "Pdu", "Resync", "LostPdu",
           "StreamGap", "ConnectionOpened", "ConnectionClosed", "CaptureError"]
