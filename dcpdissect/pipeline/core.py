"""Engine-agnostic stages of the pipeline: the local ``analyze`` run split so that an
engine can run the stages in parallel and still produce the same result.

Stage A (per chunk, parallel)
    :func:`scan_chunk`: frames of one :class:`~.chunks.Piece` → TCP segments of the
    connections a ``ConnectionTable`` with the same options would look at, each with a
    flow key (the unordered endpoint pair), plus a per-chunk count of frames, TCP segments
    and read faults.
Stage B (per flow, parallel; input grouped by flow, in frame order)
    :func:`flow_events`: a fresh :class:`~dcpdissect.reassembly.pdus.PduStream` per flow
    fed with that flow's segments → events, each with a sort key that places it where the
    local run emits it: ``(frame, phase, sub, sub2, seq)``. Phase 1 holds the events of the
    segment of ``frame``; phase 0 holds the lingering-FIN expiries that the local connection
    table triggers *before* it (on any TCP segment of the file, so a flow asks a
    :class:`TcpClock` for the first such segment); phase 2 with ``frame = END`` holds the
    end-of-capture flush, ordered by connection like ``ConnectionTable.close()``.
Stage C (per capture file, serial: the one step that needs every connection of a file)
    :class:`FileAnalysis`: events in sort-key order, connection ids renumbered in order of
    their ``ConnectionOpened`` (as the local table assigns them), fed to the
    :class:`~dcpdissect.analysis.engine.Analyzer` → findings and per-connection rows.

Departures from one shared connection table (documented in docs/pipeline.md): the
``max_connections`` cap and the bounded memory of closed and TLS 4-tuples apply per flow.

:func:`run_local` chains the stages in one process (the reference for engine drivers and
for tests). :func:`analyze_whole` is the path for a file read whole in one task: the
``analyze`` pass itself, plus the rows of the ``messages`` and ``streams`` tables.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
from array import array
from bisect import bisect_right
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import NamedTuple

from ..analysis.engine import Analyzer
from ..analysis.findings import Finding
from ..analysis.stream_summary import StreamSummary
from ..capture.packets import Segment, decode_packet
from ..capture.readers import CaptureError, open_capture
from ..codec import decode
from ..protocol import HEADER_SIZE, TLS_PORTS
from ..reassembly.connections import ConnectionClosed, ConnectionOpened, ConnectionTable
from ..reassembly.framing import LostPdu, Pdu, Resync
from ..reassembly.pdus import Options, PduStream, StreamGap, Summary
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
from .chunks import FileIndex, Piece, index_file, read_piece

END = 1 << 62                    # sort-key frame of end-of-capture events
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz", ".cap.gz")
_TICK = Segment("", "", 0, 0, 0, 0, 0, b"", False)   # an untracked segment: only advances the clock


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


# -- stage A -------------------------------------------------------------------------------

class SegmentRow(NamedTuple):
    flow: str
    frame: int
    ts_ns: int
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes
    truncated: bool


class ChunkStats(NamedTuple):
    path: str
    offset: int
    first_frame: int
    frames: int                 # frames read
    tcp_segments: int           # of which decode to TCP
    filtered: int               # TCP segments no connection table would track
    error: CaptureError | None
    first_ts_ns: int | None = None      # time of the chunk's first frame


def flow_key(seg) -> str:
    a = (seg.src, seg.sport)
    b = (seg.dst, seg.dport)
    if b < a:
        a, b = b, a
    return f"{a[0]} {a[1]} {b[0]} {b[1]}"


class _Filter:
    """Which segments a ConnectionTable built from ``options`` would look at."""

    def __init__(self, options: Options):
        # The heuristic (PduStream) looks at the first bytes of every connection.
        self.any_port = options.any_port or options.heuristic
        server = options.server_ports
        self.ports = server | (frozenset(TLS_PORTS) - server)
        self.tls = frozenset() if options.heuristic else frozenset(TLS_PORTS) - server

    def keep(self, seg) -> bool:
        return self.any_port or seg.sport in self.ports or seg.dport in self.ports


def scan_chunk(piece: Piece, options: Options, result: list) -> Iterator[SegmentRow]:
    """Stage A: the :class:`SegmentRow` of one chunk; its :class:`ChunkStats` is appended
    to ``result`` when exhausted. Payloads of segments that only a TLS port makes
    interesting are cut to one byte (the table only counts those connections)."""
    filt = _Filter(options)
    keep, tls, server = filt.keep, filt.tls, options.server_ports
    frames = tcp = filtered = 0
    error = first_ts = None
    new = tuple.__new__
    try:
        for frame in read_piece(piece):
            if not frames:
                first_ts = frame.ts_ns
            frames += 1
            seg = decode_packet(frame.linktype, frame.data)
            if seg is None:
                continue
            tcp += 1
            if not keep(seg):
                filtered += 1
                continue
            payload = seg.payload
            if payload and (seg.sport in tls or seg.dport in tls) and not (
                    seg.sport in server or seg.dport in server):
                payload = payload[:1]
            yield new(SegmentRow, (flow_key(seg), frame.number, frame.ts_ns, seg.src, seg.dst,
                                   seg.sport, seg.dport, seg.seq, seg.ack, seg.flags,
                                   payload, seg.truncated))
    except CaptureError as exc:
        error = exc
    except Exception as exc:            # noqa: BLE001 - a chunk must never fail the job
        error = CaptureError(piece.path, piece.first_frame + frames, f"read error ({exc!r})")
    result.append(ChunkStats(piece.path, piece.offset, piece.first_frame, frames, tcp, filtered,
                             error, first_ts))


# -- stage B -------------------------------------------------------------------------------

class TcpClock:
    """Answers "first TCP segment of the file after frame a and before frame b with a
    timestamp of at least t" by re-reading the index blocks that may hold it."""

    def __init__(self, blocks: list[Piece], cache: int = 8):
        self.blocks = sorted(blocks, key=lambda p: p.first_frame)
        self.starts = [p.first_frame for p in self.blocks]
        self._cache: OrderedDict = OrderedDict()
        self._size = cache

    def _segments(self, i: int):
        got = self._cache.get(i)
        if got is None:
            frames, stamps = array("q"), array("q")
            try:
                for f in read_piece(self.blocks[i]):
                    if decode_packet(f.linktype, f.data) is not None:
                        frames.append(f.number)
                        stamps.append(f.ts_ns)
            except CaptureError:
                pass
            got = self._cache[i] = (frames, stamps)
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(i)
        return got

    def first(self, after: int, before: int, min_ts: int) -> tuple[int, int] | None:
        i = max(0, bisect_right(self.starts, after + 1) - 1)
        for j in range(i, len(self.blocks)):
            p = self.blocks[j]
            if p.first_frame >= before:
                return None
            if p.frames >= 0 and p.first_frame + p.frames <= after + 1:
                continue
            if p.max_ts is not None and p.max_ts < min_ts:
                continue
            frames, stamps = self._segments(j)
            for k in range(bisect_right(frames, after), len(frames)):
                f = frames[k]
                if f >= before:
                    return None
                if stamps[k] >= min_ts:
                    return f, stamps[k]
        return None


def clock_for(index: FileIndex) -> TcpClock:
    return TcpClock(index.blocks if index.splittable else index.chunks)


class _FlowStream(PduStream):
    """A PduStream fed segment by segment."""

    def feed_segment(self, frame: int, ts_ns: int, seg) -> Iterator:
        self.now = (frame, ts_ns)
        events = self.table.feed(frame, ts_ns, seg)
        return self._route(events) if events else iter(())


class FlowResult:
    """Counters of one flow, merged per file into its :class:`Summary`."""

    def __init__(self, stream: PduStream, ticks: int):
        s = stream.summary
        self.counts = {k: getattr(s, k) for k in ("connections", "pdus", "gaps", "gap_bytes",
                                                   "resyncs", "lost_pdus", "tls_connections",
                                                   "tls_decrypted")}
        self.ports = (dict(s.heuristic_ports), dict(s.undecoded_ports))
        self.tcp = dict(stream.table.stats)
        self.tcp["segments"] -= ticks
        self.tcp["ignored_segments"] -= ticks


def flow_events(segments: Iterable, options: Options, clock: TcpClock | None,
                result: list) -> Iterator[tuple]:
    """Stage B for one flow: ``segments`` are (frame, ts_ns, Segment) in frame order; yields
    ``(frame, phase, sub, sub2, seq, event)``; appends a :class:`FlowResult` to ``result``
    when exhausted."""
    stream = _FlowStream(options)
    table = stream.table
    closing = table._closing            # conn id -> lingering connection (the table's own)
    entered: dict[int, int] = {}        # conn id -> frame it joined ``closing``
    ticks = 0
    prev = 0

    def linger(frame: int, ts_ns: int):
        nonlocal ticks
        while closing:
            conn = min(closing.values(), key=lambda c: c.deadline)
            if frame != END and ts_ns >= conn.deadline:
                at = (frame, ts_ns)
            else:
                at = clock.first(prev, frame, conn.deadline) if clock is not None else None
                if at is None:
                    return
            key = entered.get(conn.id, 0)
            ticks += 1
            for seq, ev in enumerate(stream.feed_segment(at[0], at[1], _TICK)):
                yield at[0], 0, key, 0, seq, ev
            if conn.id in closing:      # pragma: no cover - expiry always removes it
                return

    for frame, ts_ns, seg in segments:
        if closing:
            yield from linger(frame, ts_ns)
        before = set(closing) if closing else ()
        for seq, ev in enumerate(stream.feed_segment(frame, ts_ns, seg)):
            yield frame, 1, 0, 0, seq, ev
        for cid in closing:
            if cid not in before:
                entered[cid] = frame
        prev = frame
    if closing:
        yield from linger(END, 0)
    opened = stream.connections
    for seq, ev in enumerate(stream.finish()):
        o = opened.get(ev.conn)
        yield END, 2, o.frame if o else 0, ev.conn, seq, ev
    result.append(FlowResult(stream, ticks))


def segment_of(row) -> Segment:
    return Segment(row.src, row.dst, row.sport, row.dport, row.seq, row.ack, row.flags,
                   row.payload, row.truncated)


# -- stage C -------------------------------------------------------------------------------

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


COUNTED_EVENTS = frozenset((Pdu, ConnectionClosed, StreamGap, Resync, LostPdu))


def count_event(row: list, kind: type, ev) -> None:
    """Counts ``ev`` into its connection's row (the :class:`ConnRow` values as a list)."""
    if kind is Pdu:
        row[11 + ev.direction] += 1
    elif kind is ConnectionClosed:
        row[8:11] = [ev.frame, ev.ts_ns, ev.reason]
    elif kind is StreamGap:
        row[13] += 1
        row[14] += ev.length
    elif kind is Resync:
        row[15] += 1
    elif kind is LostPdu:
        row[16] += 1


class FileAnalysis:
    """Stage C for one capture file: feed events (with their flow) in sort-key order."""

    def __init__(self, path: str, keep_events: bool = False):
        self.path = path
        self.events: list | None = [] if keep_events else None
        self.analyzer = Analyzer()
        self.streams = StreamSummary(self.analyzer)
        self.findings: list[Finding] = []
        self.ids: dict[tuple[str, int], int] = {}
        self.conns: dict[int, list] = {}
        self.messages = 0

    def feed(self, flow: str, ev) -> list[Finding]:
        kind = type(ev)
        if ev.conn is None:         # TlsConnection: not a numbered connection
            pass
        elif kind is ConnectionOpened:
            gid = len(self.ids) + 1
            self.ids[(flow, ev.conn)] = gid
            ev = ev._replace(conn=gid)
            self.conns[gid] = [gid, ev.client[0], ev.client[1], ev.server[0], ev.server[1],
                               ev.mid_stream, ev.frame, ev.ts_ns, None, None, None, 0, 0, 0, 0, 0, 0]
        else:
            gid = self.ids[(flow, ev.conn)]
            ev = ev._replace(conn=gid)
            if kind is Pdu:
                self.messages += 1
            count_event(self.conns[gid], kind, ev)
        if self.events is not None:
            self.events.append(ev)
        found = self.streams.feed(ev)
        self.findings += found
        return found

    def finish(self) -> list[Finding]:
        rest = self.streams.finish()
        self.findings += rest
        self.findings.sort(key=Finding.sort_key)
        return rest

    def connection_rows(self) -> list[ConnRow]:
        return [ConnRow(*r) for r in self.conns.values()]

    def stream_rows(self) -> list[tuple]:
        """The ``streams`` rows, after :meth:`finish`."""
        return stream_rows(self.path, self.streams.streams, self.findings)


# -- summaries -------------------------------------------------------------------------------

class FileTotals:
    """Merges chunk counts and flow counters of one file into its :class:`Summary`."""

    def __init__(self, path: str):
        self.path = path
        self.frames = self.tcp_segments = self.filtered = 0
        self.counts: dict = defaultdict(int)
        self.tcp: dict = dict.fromkeys(ConnectionTable().stats, 0)
        self.errors: list[CaptureError] = []
        self.ports: tuple[dict, dict] = ({}, {})     # heuristic_ports, undecoded_ports
        self.first: tuple = (END, None)              # (first frame, its time)

    def add_chunk(self, c: ChunkStats) -> None:
        if c.frames and c.first_frame < self.first[0]:
            self.first = (c.first_frame, c.first_ts_ns)
        self.frames += c.frames
        self.tcp_segments += c.tcp_segments
        self.filtered += c.filtered
        if c.error is not None:
            self.errors.append(c.error)

    def add_flow(self, r: FlowResult) -> None:
        for k, v in r.counts.items():
            self.counts[k] += v
        for mine, theirs in zip(self.ports, r.ports):
            for port, n in theirs.items():
                mine[port] = mine.get(port, 0) + n
        for k, v in r.tcp.items():
            self.tcp[k] = self.tcp.get(k, 0) + v

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


def finding_from_row(r: dict) -> Finding:
    return Finding(r["rule"], r["message"], r["frame"], tuple(r["frames"] or ()), r["ts_ns"],
                   r["connection"], r["vbucket"], r["opaque"], json.loads(r["fields"] or "{}"),
                   r["pdu"], tuple(r["context"] or ()))


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
    def cell(column, value):
        if column == "items":
            return _json(value)
        if value is not None and is_u64_name(column):
            return Decimal(value)
        return value
    return [(path,) + tuple(cell(c, r[c]) for c in STREAM_RECORD_COLUMNS)
            for r in stream_records(streams, findings)]


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
        self._named: dict = {}

    def _time(self, ts_ns: int) -> str:
        secs, ns = divmod(ts_ns, 1_000_000_000)
        head = self._iso.get(secs)
        if head is None:
            if len(self._iso) > 65536:
                self._iso.clear()
            head = self._iso[secs] = iso_time(secs * 1_000_000_000)[:-11]
        return f"{head}.{ns:09d}Z"

    def _names(self, m) -> str:
        shape = m.shape
        got = self._named.get(id(shape))
        if got is None:
            named = any(f.flags or f.names for lay in shape.extras + shape.values for f in lay.fields)
            got = self._named[id(shape)] = (shape, named)
        return _json(field_names(m)) if got[1] else "{}"

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
            "fields": [_json_fast(m.fields) for m in msgs],
            "names": [self._names(m) for m in msgs],
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
    rows) to ``result``. Each message is decoded once, for the Analyzer and the rows.
    ``time`` and ``header``: see :meth:`MessageColumns.columns`."""
    summary = Summary(path=path)
    stream = PduStream(options, summary)
    streams = StreamSummary(Analyzer())
    feed, feed_message = streams.feed, streams.feed_message
    findings: list[Finding] = []
    conns: dict[int, list] = {}
    table = MessageColumns(path)
    pdus: list = []
    msgs: list = []
    error = None
    count = 0

    def run(events):
        nonlocal count
        for ev in events:
            kind = type(ev)
            if kind is Pdu:
                msg = decode(ev.data)
                pdus.append(ev)
                msgs.append(msg)
                count_event(conns[ev.conn], kind, ev)
                count += 1
                found = feed_message(ev, msg)
                if found:
                    findings.extend(found)
                if len(pdus) >= batch_rows:
                    yield table.columns(pdus, msgs, time, header)
                    pdus.clear()
                    msgs.clear()
                continue
            if kind is ConnectionOpened:
                conns[ev.conn] = [ev.conn, ev.client[0], ev.client[1], ev.server[0],
                                  ev.server[1], ev.mid_stream, ev.frame, ev.ts_ns, None, None,
                                  None, 0, 0, 0, 0, 0, 0]
            elif kind in COUNTED_EVENTS:
                count_event(conns[ev.conn], kind, ev)
            found = feed(ev)
            if found:
                findings.extend(found)

    try:
        with open_capture(path) as reader:
            yield from run(stream.feed_frames(reader))
    except CaptureError as exc:
        summary.error = str(exc)
        error = exc
    yield from run(stream.finish())
    if pdus:
        yield table.columns(pdus, msgs, time, header)
    findings += streams.finish()
    findings.sort(key=Finding.sort_key)
    result.append(WholeFile(path, findings, summary, count, [ConnRow(*r) for r in conns.values()],
                            stream_rows(path, streams.streams, findings), error))


# -- the whole thing in one process ------------------------------------------------------------

class FileResult(NamedTuple):
    path: str
    findings: list
    summary: Summary
    messages: int
    connections: list
    errors: list
    events: list | None = None


def run_local(inputs: Iterable[str], options: Options | None = None,
              chunk_size: int = 256 << 20, block_frames: int | None = None,
              keep_events: bool = False) -> dict[str, FileResult]:
    """Every stage in this process, in the order an engine would run them."""
    options = options or Options()
    paths = expand_inputs(inputs)
    indexes = [index_file(p, chunk_size, block_frames) if block_frames else index_file(p, chunk_size)
               for p in paths]
    results = {}
    for idx in indexes:
        totals = FileTotals(idx.path)
        flows: dict[str, list] = defaultdict(list)
        for piece in idx.chunks:                        # stage A
            stats: list = []
            for r in scan_chunk(piece, options, stats):
                flows[r.flow].append(r)
            totals.add_chunk(stats[0])
        clock = clock_for(idx)
        keyed = []
        flow_results: list = []
        for flow in sorted(flows):                      # stage B
            rows = sorted(flows[flow], key=lambda r: r.frame)
            segs = ((r.frame, r.ts_ns, segment_of(r)) for r in rows)
            for *key, ev in flow_events(segs, options, clock, flow_results):
                keyed.append((tuple(key), flow, loads(dumps(ev))))
        for r in flow_results:
            totals.add_flow(r)
        keyed.sort(key=lambda k: k[0])
        fa = FileAnalysis(idx.path, keep_events)        # stage C
        for _key, flow, ev in keyed:
            fa.feed(flow, ev)
        fa.finish()
        if idx.error is not None:
            totals.errors.append(idx.error)
        summary = totals.summary()
        results[idx.path] = FileResult(idx.path, fa.findings, summary, fa.messages,
                                       fa.connection_rows(), totals.errors, fa.events)
    return results


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
    "FileAnalysis",
    "FileResult",
    "FileTotals",
    "FlowResult",
    "MessageColumns",
    "SegmentRow",
    "TcpClock",
    "WholeFile",
    "analyze_whole",
    "clock_for",
    "dumps",
    "expand_inputs",
    "finding_from_row",
    "finding_row",
    "flow_events",
    "flow_key",
    "index_inputs",
    "loads",
    "message_row",
    "run_local",
    "scan_chunk",
    "segment_of",
]
