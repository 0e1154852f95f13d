"""Engine-agnostic stages of the pipeline: the local ``analyze`` run split so that an
engine can run its parts in parallel and still produce the same result.

Stage A (per chunk, parallel)
    :func:`~.frames.index_chunk`: where the frames of each TCP flow lie in one
    :class:`~.chunks.Piece` (offsets, no payload), plus the chunk's counts.
Driver
    :class:`~.merge.FileMerge`: the flows of a file packed into analysis groups by bytes,
    with the connection numbers it foresees.
Stage B (per analysis group, parallel)
    :func:`~.groups.run_group`: the group's frames read again by offset and analysed as
    ``analyze`` does (:class:`FilePass`), each event and finding placed by its moment;
    groups that share a coupling key, or whose numbers were not foreseen, run again
    merged (:meth:`~.merge.FileMerge.again`); the results are merged in ``analyze``'s order.

Departures from one shared connection table and analyzer: the ``max_connections`` cap,
the bounded memory of closed and TLS 4-tuples and the analyzer's bounds on names, proxy
pairs, pending requests and durability streams apply per analysis group (see
:mod:`.groups`).

:func:`run_local` chains the stages in one process (the reference for engine drivers and
for tests). :func:`analyze_whole` is the path for a file read whole in one task: the
``analyze`` pass itself, plus the rows of the ``messages`` and ``streams`` tables.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
from collections import defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import NamedTuple

from ..analysis.engine import MAX_FINDINGS_PER_RULE, Analyzer
from ..analysis.findings import Finding
from ..analysis.stream_summary import StreamSummary
from ..capture.readers import TLS_KEY_LOG, CaptureError, open_capture
from ..codec import decode
from ..protocol import HEADER_SIZE
from ..reassembly.batches import in_batches
from ..reassembly.connections import ConnectionClosed, ConnectionOpened, ConnectionTable
from ..reassembly.framing import LostPdu, Pdu, Resync
from ..reassembly.pdus import Options, PduStream, StreamGap, Summary
from ..reassembly.tcp import LOST
from ..reports.messages import (
    DIRECTIONS,
    field_names,
    is_u64_name,
    iso_time,
    key_text,
    message_record,
)
from ..reports.streams import STREAM_COLUMNS as STREAM_RECORD_COLUMNS
from ..reports.streams import stream_records
from .chunks import FileIndex, index_file
from .frames import ChunkStats, index_chunk
from .groups import END, coupling_keys

NO_CAP = 1 << 62                 # findings per rule of a group: the driver caps the merged ones
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz", ".cap.gz")


# -- inputs ------------------------------------------------------------------------------

def expand_inputs(inputs: Iterable[str]) -> list[str]:
    """Files, directories (searched recursively for capture suffixes) and globs → paths,
    in a stable order, each once. Names that match nothing are kept (they become errors)."""
    out: list[str] = []
    seen = set()

    def add(p: str) -> None:
        if p not in seen:
            seen.add(p)
            out.append(p)

    for item in inputs:
        if os.path.isdir(item):
            for root, dirs, files in os.walk(item):
                dirs.sort()
                for name in sorted(files):
                    if name.lower().endswith(CAPTURE_SUFFIXES):
                        add(os.path.join(root, name))
        elif not os.path.exists(item) and glob.has_magic(item):
            for p in sorted(glob.glob(item, recursive=True)):
                if os.path.isdir(p):
                    continue
                add(p)
        else:
            add(item)
    return out


def index_inputs(paths: list[str], chunk_size: int) -> list[FileIndex]:
    return [index_file(p, chunk_size) for p in paths]


# -- connection rows ---------------------------------------------------------------------------

class ConnRow(NamedTuple):
    connection: int
    client_ip: str
    client_port: int
    server_ip: str
    server_port: int
    mid_stream: bool
    opened_frame: int
    opened_ts_ns: int
    closed_frame: int | None
    closed_ts_ns: int | None
    close_reason: str | None
    messages_c2s: int
    messages_s2c: int
    gaps: int
    gap_bytes: int
    resyncs: int
    lost_pdus: int
    tunnel: str                 # what its first segment came through ("": nothing)


COUNTED_EVENTS = frozenset((Pdu, ConnectionClosed, StreamGap, Resync, LostPdu))


def count_event(row: list, kind: type, ev) -> None:
    """Counts ``ev`` into its connection's row (the :class:`ConnRow` values as a list)."""
    if kind is Pdu:
        row[11 + ev.direction] += 1
    elif kind is ConnectionClosed:
        row[8:11] = [ev.frame, ev.ts_ns, ev.reason]
    elif kind is StreamGap:
        if ev.cause == LOST:
            row[13] += 1
            row[14] += ev.length
    elif kind is Resync:
        row[15] += 1
    elif kind is LostPdu:
        row[16] += 1


# -- summaries -------------------------------------------------------------------------------

class FileTotals:
    """Merges chunk counts and group counters of one file into its :class:`Summary`."""

    def __init__(self, path: str):
        self.path = path
        self.frames = self.tcp_segments = self.filtered = 0
        self.counts: dict = defaultdict(int)
        self.tcp: dict = dict.fromkeys(ConnectionTable().stats, 0)
        self.errors: list[CaptureError] = []
        self.ports: tuple[dict, dict] = ({}, {})     # heuristic_ports, undecoded_ports
        self.tls_randoms: dict = {}
        self.first: tuple = (END, None)              # (first frame, its time)
        self.late = self.late_max_ns = 0
        self.keylog = ""                             # the file's own TLS key log lines
        self.secrets_ignored: dict = {}

    def add_secrets(self, secrets) -> None:
        """The file's decryption secrets blocks, (frames before, type, data) each."""
        for _after, stype, data in secrets:
            if stype == TLS_KEY_LOG:
                text = data.decode("ascii", "replace")
                if text.strip():
                    self.keylog += text if text.endswith("\n") else text + "\n"
            else:
                self.secrets_ignored[stype] = self.secrets_ignored.get(stype, 0) + 1

    def add_chunk(self, c: ChunkStats) -> None:
        if c.frames and c.first_frame < self.first[0]:
            self.first = (c.first_frame, c.first_ts_ns)
        self.frames += c.frames
        self.tcp_segments += c.tcp_segments
        self.filtered += c.filtered
        self.late += c.late
        self.late_max_ns = max(self.late_max_ns, c.late_max_ns)
        if c.error is not None:
            self.errors.append(c.error)

    def add_group(self, r) -> None:
        """Counters of a :class:`~.groups.GroupResult`."""
        for k, v in r.counts.items():
            self.counts[k] += v
        for mine, theirs in zip(self.ports, r.ports):
            for port, n in theirs.items():
                mine[port] = mine.get(port, 0) + n
        for k, v in r.tcp.items():
            self.tcp[k] = self.tcp.get(k, 0) + v
        self.tls_randoms.update(r.tls_randoms)

    def summary(self) -> Summary:
        s = Summary(path=self.path, frames=self.frames, tcp_segments=self.tcp_segments)
        s.first_ts_ns = self.first[1]
        for k, v in self.counts.items():
            setattr(s, k, v)
        tcp = dict(self.tcp)
        tcp["segments"] = self.tcp_segments
        tcp["ignored_segments"] += self.filtered
        s.tcp = tcp
        s.heuristic_ports, s.undecoded_ports = (dict(sorted(d.items())) for d in self.ports)
        s.tls_randoms = dict(sorted(self.tls_randoms.items()))
        s.late_frames, s.late_max_ns = self.late, self.late_max_ns
        s.file_keylog, s.secrets_ignored = self.keylog, dict(self.secrets_ignored)
        if self.errors:
            s.error = str(min(self.errors, key=lambda e: e.frame or 0))
        return s


# -- rows for tables ---------------------------------------------------------------------------

def _jsonable(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return repr(v)


_json = json.JSONEncoder(separators=(",", ":"), default=_jsonable).encode
try:
    from json.encoder import c_make_encoder as _c_make_encoder
except ImportError:                      # pragma: no cover - no C accelerator
    _c_make_encoder = None
if _c_make_encoder is not None:
    _c_json = _c_make_encoder({}, _jsonable, json.encoder.encode_basestring_ascii, None, ":", ",",
                              False, False, True)

    def _json_fast(v) -> str:
        """``_json(v)`` for a dict or list, without building an encoder per call."""
        return "".join(_c_json(v, 0))
else:                                    # pragma: no cover
    _json_fast = _json


_INT = {int}
_INT_OBJECTS: dict = {}          # keys of an object -> its JSON text with %d for each value


def _json_objects(objects: list) -> list[str]:
    """``_json_fast`` of each dict; one of integer values only goes through a template
    made once per key sequence (the same text)."""
    out = []
    for d in objects:
        values = tuple(d.values())
        template = None
        if set(map(type, values)) == _INT:
            keys = tuple(d)
            template = _INT_OBJECTS.get(keys, _INT_OBJECTS)
            if template is _INT_OBJECTS:
                if len(_INT_OBJECTS) > 4096:
                    _INT_OBJECTS.clear()
                template = _INT_OBJECTS[keys] = "{%s}" % ",".join(
                    _json(k).replace("%", "%%") + ":%d" for k in keys) \
                    if all(type(k) is str for k in keys) else None
        out.append(_json_fast(d) if template is None else template % values)
    return out


# The ``messages`` table, defined once: column and type (string, long, int, bool, u64: an
# unsigned 64-bit integer, list<...>). Nested values (frame_infos, fields, names) are JSON text.
MESSAGE_SCHEMA = (
    ("capture_file", "string"), ("frame", "long"), ("frames", "list<long>"), ("time", "string"),
    ("ts_ns", "long"), ("connection", "int"), ("direction", "string"), ("magic", "int"),
    ("magic_name", "string"), ("opcode", "int"), ("opcode_name", "string"), ("request", "bool"),
    ("vbucket", "int"), ("status", "int"), ("status_name", "string"), ("opaque", "long"),
    ("cas", "u64"), ("datatype", "int"), ("framing_len", "int"), ("extlen", "int"),
    ("keylen", "int"), ("bodylen", "long"), ("value_len", "long"), ("stream_id", "int"),
    ("frame_infos", "string"), ("key", "string"), ("layout", "string"), ("fields", "string"),
    ("names", "string"), ("problems", "list<string>"),
)
MESSAGE_COLUMNS = tuple(name for name, _type in MESSAGE_SCHEMA)


def message_row(path: str, pdu: Pdu) -> tuple:
    """One ``messages`` row: the ``dissect --format jsonl`` record (nested values as JSON
    text) plus the capture file."""
    r = message_record(pdu, decode(pdu.data))
    r["capture_file"] = path
    r["frame_infos"] = _json(r["frame_infos"])
    r["fields"] = _json(r["fields"])
    r["names"] = _json(r["names"])
    return tuple(r[c] for c in MESSAGE_COLUMNS)


FINDING_COLUMNS = ("capture_file", "rule", "severity", "title", "message", "frame", "frames",
                   "time", "ts_ns", "connection", "vbucket", "opaque", "fields", "context", "pdu")


def finding_row(path: str, f: Finding) -> tuple:
    from ..reports.findings import finding_record
    r = finding_record(f)
    return (path, r["rule"], r["severity"], r["title"], r["message"], r["frame"], r["frames"],
            r["time"], f.ts_ns, r["connection"], r["vbucket"], r["opaque"], _json(r["fields"]),
            list(f.context), f.pdu)


def dumps(ev) -> bytes:
    return pickle.dumps(ev, protocol=pickle.HIGHEST_PROTOCOL)


loads = pickle.loads


# -- one file in one pass ---------------------------------------------------------------------

# The ``streams`` table: the records of ``dcpdissect streams``, capture file first, ``items``
# as JSON text and seqnos and uuids as decimal(20, 0) values.
STREAM_COLUMNS = ("capture_file",) + STREAM_RECORD_COLUMNS


def stream_rows(path: str, streams: list, findings: list[Finding]) -> list[tuple]:
    """The file's ``streams`` rows (:data:`STREAM_COLUMNS`) from its per-stream accounting
    (``StreamSummary.streams``) and findings."""
    return record_rows(path, stream_records(streams, findings))


def record_rows(path: str, records: list[dict]) -> list[tuple]:
    """``streams`` rows of stream records (:func:`~dcpdissect.reports.streams.stream_records`)."""
    def cell(column, value):
        if column == "items":
            return _json(value)
        if value is not None and is_u64_name(column):
            return Decimal(value)
        return value
    return [(path,) + tuple(cell(c, r[c]) for c in STREAM_RECORD_COLUMNS) for r in records]


def stream_records_in_order(streams: list) -> list[dict]:
    """The record of each stream, in order of appearance, without finding counts (the
    streams of a group; :func:`.merge.count_stream_findings` counts them)."""
    return [stream_records([st])[0] for st in streams]


HEADER_COLUMNS = ("magic", "magic_name", "opcode", "opcode_name", "request", "vbucket", "status",
                  "status_name", "opaque", "cas", "datatype", "framing_len", "extlen", "keylen",
                  "bodylen", "value_len")


class MessageColumns:
    """The ``messages`` rows of one file, column by column (the values of
    :func:`message_row`), built in batches from (Pdu, decoded Message) pairs."""

    def __init__(self, path: str):
        self.path = path
        self._iso: dict = {}
        self._opnames: dict = {}
        self._magics: dict = {}
        self._status: dict = {None: None}
        self._named: dict = {}          # id(shape) -> 1: no flag or enum fields, 2: some
        self._shapes: list = []

    def _time(self, ts_ns: int) -> str:
        secs, ns = divmod(ts_ns, 1_000_000_000)
        head = self._iso.get(secs)
        if head is None:
            if len(self._iso) > 65536:
                self._iso.clear()
            head = self._iso[secs] = iso_time(secs * 1_000_000_000)[:-11]
        return f"{head}.{ns:09d}Z"

    def _named_shape(self, shape) -> int:
        """1 for a shape without flag or enum fields (its ``names`` is ``{}``), else 2."""
        named = any(f.flags or f.names for lay in shape.extras + shape.values for f in lay.fields)
        self._shapes.append(shape)          # its id stays its own
        got = self._named[id(shape)] = 2 if named else 1
        return got

    def _lookup(self, cache: dict, key, make):
        v = cache.get(key, cache)
        if v is cache:
            v = cache[key] = make(key)
        return v

    def columns(self, pdus: list, msgs: list, time: bool = True, header: bool = True) -> dict:
        """Column name → list of values for these messages.
        ``time=False`` leaves ``time`` out (None; it follows from ``ts_ns``, see
        :func:`iso_time`). ``header=False`` leaves out the columns of :data:`HEADER_COLUMNS`
        and gives ``header``, the messages' 24-byte headers end to end, instead."""
        named, learn = self._named.get, self._named_shape
        cols = {
            "capture_file": [self.path] * len(pdus),
            "frame": [p.frame for p in pdus],
            "frames": [p.frames for p in pdus],
            "time": [self._time(p.ts_ns) for p in pdus] if time else None,
            "ts_ns": [p.ts_ns for p in pdus],
            "connection": [p.conn for p in pdus],
            "direction": [DIRECTIONS[p.direction] for p in pdus],
            "stream_id": [m.stream_id for m in msgs],
            "frame_infos": [_json([{"id": fi.id, "name": fi.name, "data": fi.data.hex()}
                                   for fi in m.frame_infos]) if m.frame_infos else "[]"
                            for m in msgs],
            "key": [key_text(m.key) if m.key else None for m in msgs],
            "layout": [m.layout for m in msgs],
            "fields": _json_objects([m.fields for m in msgs]),
            "names": ["{}" if (named(id(m.shape)) or learn(m.shape)) == 1
                      else _json(field_names(m)) for m in msgs],
            "problems": [[p.text for p in m.problems] for m in msgs],
        }
        if header:
            cols.update(self._header(msgs))
        else:
            cols["header"] = b"".join([p.data[:HEADER_SIZE] for p in pdus])
        return cols

    def _header(self, msgs: list) -> dict:
        from ..protocol import MAGICS, STATUS, opcode_name
        look = self._lookup
        magics, opnames, status = self._magics, self._opnames, self._status
        return {
            "magic": [m.magic for m in msgs],
            "magic_name": [look(magics, m.magic, MAGICS.text) for m in msgs],
            "opcode": [m.opcode for m in msgs],
            "opcode_name": [look(opnames, (m.magic, m.opcode), lambda k: opcode_name(*k))
                            for m in msgs],
            "request": [m.is_request for m in msgs],
            "vbucket": [m.vbucket for m in msgs],
            "status": [m.status for m in msgs],
            "status_name": [look(status, m.status, STATUS.text) for m in msgs],
            "opaque": [m.opaque for m in msgs],
            "cas": [m.cas for m in msgs],
            "datatype": [m.datatype for m in msgs],
            "framing_len": [m.framing_len for m in msgs],
            "extlen": [m.extlen for m in msgs],
            "keylen": [m.keylen for m in msgs],
            "bodylen": [m.bodylen for m in msgs],
            "value_len": [m.value_len for m in msgs],
        }


class FilePass:
    """The analysis of a file's events as ``analyze`` runs it: :meth:`run` feeds them to
    the Analyzer (through the per-stream accounting) and yields the ``messages`` rows
    (:meth:`MessageColumns.columns`) every ``batch_rows`` messages, each message decoded
    once for both. With ``moment`` (a function giving the moment of the event being fed,
    see :mod:`.groups`) findings are not capped and :attr:`moments` holds each one's, and
    the :func:`~.groups.coupling_keys` of the requests with an opcode in ``watch`` are
    gathered in :attr:`coupling`."""

    def __init__(self, path: str, batch_rows: int = 4096, time: bool = True,
                 header: bool = True, moment=None, watch: frozenset = frozenset()):
        self.path = path
        self.analyzer = Analyzer(NO_CAP if moment is not None else MAX_FINDINGS_PER_RULE)
        self.streams = StreamSummary(self.analyzer)
        self.findings: list[Finding] = []
        self.moment = moment
        self.moments: list = []
        self.watch = watch
        self.coupling: set = set()
        self._coupled: set = set()      # (connection, opcode, vbucket, bucket) looked at
        self.conns: dict[int, list] = {}
        self.table = MessageColumns(path)
        self.batch = (batch_rows, time, header)
        self.pdus: list = []
        self.msgs: list = []
        self.count = 0

    def run(self, events: Iterable) -> Iterator[dict]:
        feed, feed_message = self.streams.feed, self.streams.feed_message
        pdus, msgs, conns = self.pdus, self.msgs, self.conns
        batch_rows = self.batch[0]
        watch, coupled = self.watch, self._coupled
        negotiated = self.analyzer.negotiated
        for ev in events:
            kind = type(ev)
            if kind is Pdu:
                msg = decode(ev.data)
                pdus.append(ev)
                msgs.append(msg)
                row = conns[ev.conn]
                row[11 + ev.direction] += 1
                self.count += 1
                found = feed_message(ev, msg)
                if found:
                    self._found(found)
                if msg.opcode in watch:
                    neg = negotiated.get(ev.conn)
                    seen = (ev.conn, msg.opcode, msg.vbucket,
                            neg.bucket if neg is not None else None)
                    if seen not in coupled:
                        coupled.add(seen)
                        self._couple(msg, row, seen[3])
                if len(pdus) >= batch_rows:
                    yield from self.flush()
                continue
            if kind is ConnectionOpened:
                conns[ev.conn] = [ev.conn, ev.client[0], ev.client[1], ev.server[0],
                                  ev.server[1], ev.mid_stream, ev.frame, ev.ts_ns, None, None,
                                  None, 0, 0, 0, 0, 0, 0, ev.tunnel]
            elif kind in COUNTED_EVENTS:
                count_event(conns[ev.conn], kind, ev)
            found = feed(ev)
            if found:
                self._found(found)

    def _couple(self, msg, row: list, bucket: str | None) -> None:
        self.coupling.update(coupling_keys(msg, (row[1], row[2]), (row[3], row[4]), bucket))

    def _found(self, found: list[Finding]) -> None:
        self.findings += found
        if self.moment is not None:
            self.moments += [self.moment()] * len(found)

    def flush(self) -> Iterator[dict]:
        if self.pdus:
            _rows, time, header = self.batch
            yield self.table.columns(self.pdus, self.msgs, time, header)
            self.pdus.clear()
            self.msgs.clear()

    def finish(self) -> None:
        """The Analyzer's end-of-capture findings (capped and sorted like ``analyze``'s
        without ``moment``)."""
        found = self.streams.finish()
        self.findings += found
        if self.moment is None:
            self.findings.sort(key=Finding.sort_key)
        else:
            self.moments += [(END, 4, f.connection or 0) for f in found]

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


def analyze_whole(path: str, options: Options | None, result: list,
                  batch_rows: int = 4096, time: bool = True,
                  header: bool = True) -> Iterator[dict]:
    """A file read whole in one pass, exactly as ``analyze`` reads it: yields the
    ``messages`` rows (:meth:`MessageColumns.columns`) every ``batch_rows`` messages and,
    when exhausted, appends a :class:`WholeFile` (findings, summary, connection and stream
    rows) to ``result``. ``time`` and ``header``: see :meth:`MessageColumns.columns`."""
    summary = Summary(path=path)
    stream = PduStream(options, summary)
    fp = FilePass(path, batch_rows, time, header)
    error = None
    try:
        with open_capture(path) as reader:
            for batch in in_batches(stream.feed_capture(reader)):
                yield from fp.run(batch)
    except CaptureError as exc:
        summary.error = str(exc)
        error = exc
    yield from fp.run(stream.finish())
    yield from fp.flush()
    fp.finish()
    result.append(WholeFile(path, fp.findings, summary, fp.count, fp.connection_rows(),
                            stream_rows(path, fp.streams.streams, fp.findings), error))


# -- the whole thing in one process ------------------------------------------------------------

class FileResult(NamedTuple):
    path: str
    findings: list
    summary: Summary
    messages: int
    connections: list
    errors: list
    events: list | None = None
    streams: list | None = None     # rows of STREAM_COLUMNS
    reruns: int = 0                 # analysis groups run again (coupled or renumbered)


def run_local(inputs: Iterable[str], options: Options | None = None,
              chunk_size: int = 256 << 20, block_frames: int | None = None,
              groups: int = 4, keep_events: bool = False,
              clock: bool = True) -> dict[str, FileResult]:
    """Every stage in this process, in the order an engine would run them: unsplittable
    (compressed) files whole, the others indexed per chunk (stage A), their flows packed
    into about ``groups`` analysis groups and analysed per group (stage B), groups run
    again as :mod:`.merge` asks, the results merged; a file whose stage A met IP fragments
    is read whole after all. ``keep_events``: the merged events of chunked files in
    :attr:`FileResult.events`; ``clock=False`` leaves the file-wide clock out (lingering
    FINs then expire only on a group's own frames)."""
    from .groups import run_group
    from .merge import FileMerge
    options = options or Options()
    results = {}
    for path in expand_inputs(inputs):
        idx = index_file(path, chunk_size, block_frames) if block_frames else \
            index_file(path, chunk_size)
        if not idx.splittable and idx.error is None:
            results[path] = _whole_result(path, options)
            continue
        fm = FileMerge(idx, options, groups)
        for piece in idx.chunks:                        # stage A
            fm.add_chunk(*index_chunk(piece, options))
        if fm.fragmented:
            results[path] = _whole_result(path, options)
            continue
        todo = fm.plan()
        while todo:                                     # stage B, then the runs again
            for task in todo:
                got = []
                for _cols in run_group(path, task.group, task.flows, task.options, task.numbers,
                                       clock_for(idx, task.options) if clock else None, got,
                                       keep_events=keep_events):
                    pass
                fm.add_result(got[0])
            todo = fm.again()
        m = fm.merged()
        results[path] = FileResult(path, m.findings, m.summary, m.messages, m.connections,
                                   m.errors, m.events, m.streams, fm.reruns)
    return results


def _whole_result(path: str, options: Options) -> FileResult:
    """:func:`analyze_whole` of one file as a :class:`FileResult`."""
    got: list = []
    for _cols in analyze_whole(path, options, got):
        pass
    w = got[0]
    return FileResult(path, w.findings, w.summary, w.messages, w.connections,
                      [w.error] if w.error else [], None, w.streams)


def clock_for(index: FileIndex, options: Options | None = None):
    """The :class:`~.groups.TcpClock` of an indexed file (decoding as ``options`` say)."""
    from .groups import TcpClock
    return TcpClock(index.blocks if index.splittable else index.chunks,
                    vxlan_ports=options.vxlan_ports if options else ())


__all__ = [
    "DIRECTIONS",
    "END",
    "FINDING_COLUMNS",
    "HEADER_COLUMNS",
    "MESSAGE_COLUMNS",
    "MESSAGE_SCHEMA",
    "STREAM_COLUMNS",
    "ChunkStats",
    "ConnRow",
    "FilePass",
    "FileResult",
    "FileTotals",
    "MessageColumns",
    "WholeFile",
    "analyze_whole",
    "clock_for",
    "dumps",
    "expand_inputs",
    "finding_row",
    "index_inputs",
    "loads",
    "message_row",
    "record_rows",
    "run_local",
    "stream_records_in_order",
    "stream_rows",
]
