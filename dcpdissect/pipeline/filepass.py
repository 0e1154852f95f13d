"""The observers a pass over one capture file gets in the pipeline, and the file read
whole in one task.

:class:`FileRows` watches a :class:`~dcpdissect.analysis.session.Pass` that also runs the
analyzer with its per-stream accounting: it builds the connection rows and the
``messages`` rows (:class:`~.tables.MessageColumns`, in batches of ``batch_rows``) from the
messages the pass decoded once, and gathers the :func:`~.coupling.coupling_keys` of the
requests with an opcode in ``watch``. :func:`analyze_whole` is ``analyze``'s pass itself
with those rows; :func:`~.groups.run_group` runs the same pass over an analysis group.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ..analysis.engine import Analyzer
from ..analysis.findings import MAX_FINDINGS_PER_RULE, Finding
from ..analysis.session import Pass
from ..analysis.stream_summary import StreamSummary
from ..capture.readers import CaptureError
from ..reassembly.connections import ConnectionOpened
from ..reassembly.pdus import Options, Summary, iter_events
from .coupling import coupling_keys
from .tables import COUNTED_EVENTS, ConnRow, MessageColumns, count_event, stream_rows


class FileRows:
    """The connection and ``messages`` rows of the messages a pass hands out (after the
    analyzer: the coupling keys read the bucket its negotiation selected). ``time`` and
    ``header``: see :meth:`~.tables.MessageColumns.columns`; ``pseudonyms``: document keys
    as their pseudonyms. :meth:`drain` yields the batches of rows ready."""

    def __init__(self, path: str, analyzer: Analyzer, batch_rows: int = 4096,
                 time: bool = True, header: bool = True, watch: frozenset = frozenset(),
                 pseudonyms=None):
        self.negotiated = analyzer.negotiated
        self.conns: dict[int, list] = {}
        self.table = MessageColumns(path, pseudonyms)
        self.batch_rows, self.time, self.header = batch_rows, time, header
        self.watch = watch
        self.coupling: set = set()
        self._coupled: set = set()      # (connection, opcode, vbucket, bucket) looked at
        self.pdus: list = []
        self.msgs: list = []
        self.ready: list[dict] = []
        self.count = 0

    def on_message(self, pdu, msg) -> None:
        self.pdus.append(pdu)
        self.msgs.append(msg)
        row = self.conns[pdu.conn]
        row[11 + pdu.direction] += 1
        self.count += 1
        if msg.opcode in self.watch:
            neg = self.negotiated.get(pdu.conn)
            seen = (pdu.conn, msg.opcode, msg.vbucket, neg.bucket if neg is not None else None)
            if seen not in self._coupled:
                self._coupled.add(seen)
                self.coupling.update(coupling_keys(msg, (row[1], row[2]), (row[3], row[4]),
                                                   seen[3]))
        if len(self.pdus) >= self.batch_rows:
            self._batch()

    def on_event(self, ev) -> None:
        kind = type(ev)
        if kind is ConnectionOpened:
            self.conns[ev.conn] = [ev.conn, ev.client[0], ev.client[1], ev.server[0],
                                   ev.server[1], ev.mid_stream, ev.frame, ev.ts_ns, None, None,
                                   None, 0, 0, 0, 0, 0, 0, ev.tunnel]
        elif kind in COUNTED_EVENTS:
            count_event(self.conns[ev.conn], kind, ev)

    def on_finish(self) -> None:
        if self.pdus:
            self._batch()

    def _batch(self) -> None:
        self.ready.append(self.table.columns(self.pdus, self.msgs, self.time, self.header))
        self.pdus.clear()
        self.msgs.clear()

    def drain(self) -> Iterator[dict]:
        yield from self.ready
        self.ready.clear()

    def connection_rows(self) -> list[ConnRow]:
        return [ConnRow(*r) for r in self.conns.values()]


class WholeFile(NamedTuple):
    path: str
    findings: list
    summary: Summary
    messages: int
    connections: list           # [ConnRow]
    streams: list               # rows of STREAM_COLUMNS
    error: CaptureError | None


def analyze_whole(path, options: Options | None, result: list,
                  batch_rows: int = 4096, time: bool = True,
                  header: bool = True, pseudonyms=None) -> Iterator[dict]:
    """A file (or :class:`~dcpdissect.capture.fileset.FileSet`, named by its ``str``) read
    whole in one pass, exactly as ``analyze`` reads it: yields the
    ``messages`` rows (:meth:`~.tables.MessageColumns.columns`, document keys as their
    ``pseudonyms`` when given) every ``batch_rows`` messages and, when exhausted, appends a
    :class:`WholeFile` (findings, summary, connection and stream rows) to ``result``."""
    source, path = path, str(path)
    summary = Summary()
    analyzer = Analyzer()
    streams = StreamSummary(analyzer)
    rows = FileRows(path, analyzer, batch_rows, time, header, pseudonyms=pseudonyms)
    run = Pass([streams, rows], MAX_FINDINGS_PER_RULE)
    for _ in run.steps(iter_events(source, options, summary)):
        yield from rows.drain()
    run.finish()
    yield from rows.drain()
    findings = sorted(run.findings, key=Finding.sort_key)
    result.append(WholeFile(path, findings, summary, rows.count, rows.connection_rows(),
                            stream_rows(path, streams.streams, findings), run.error))
