"""The pipeline's tables: the ``messages``, ``findings``, ``connections`` and ``streams``
rows of one capture file (schemas defined once, values built in batches), the merged
:class:`Summary` of a file read in parts, and the pickling of results between tasks."""

from __future__ import annotations

import json
import pickle
from collections import defaultdict
from decimal import Decimal
from typing import NamedTuple

from ..analysis.findings import Finding
from ..capture.readers import TLS_KEY_LOG, CaptureError
from ..codec import decode
from ..codec.settings import SETTING_OPCODES
from ..protocol import HEADER_SIZE
from ..reassembly.connections import ConnectionClosed, ConnectionTable
from ..reassembly.framing import LostPdu, Pdu, Resync
from ..reassembly.pdus import StreamGap, Summary
from ..reassembly.tcp import LOST
from ..reports.messages import (DIRECTIONS, field_names, is_u64_name, iso_time, key_text,
                                message_fields, message_record)
from ..reports.redact import document_parts
from ..reports.streams import STREAM_COLUMNS as STREAM_RECORD_COLUMNS
from ..reports.streams import stream_records
from .coupling import END
from .frames import ChunkStats


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
                   "time", "ts_ns", "connection", "vbucket", "opaque", "fields", "context", "pdu",
                   "file", "file_frame")


def finding_row(path: str, f: Finding, where: tuple[str, int] | None = None) -> tuple:
    """One ``findings`` row (:data:`FINDING_COLUMNS`); ``where``: the file and its frame
    number of the finding's frame when the capture is a file set."""
    from ..reports.findings import finding_record
    r = finding_record(f)
    return (path, r["rule"], r["severity"], r["title"], r["message"], r["frame"], r["frames"],
            r["time"], f.ts_ns, r["connection"], r["vbucket"], r["opaque"], _json(r["fields"]),
            list(f.context), f.pdu) + (where or (None, None))


def dumps(ev) -> bytes:
    return pickle.dumps(ev, protocol=pickle.HIGHEST_PROTOCOL)


loads = pickle.loads


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
    :func:`message_row`), built in batches from (Pdu, decoded Message) pairs; a document key
    as its pseudonym, given ``pseudonyms`` (:class:`~dcpdissect.reports.redact.Pseudonyms`)."""

    def __init__(self, path: str, pseudonyms=None):
        self.path = path
        self.pseudonyms = pseudonyms
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
            "key": [self._key(m) if m.key else None for m in msgs],
            "layout": [m.layout for m in msgs],
            "fields": _json_objects([message_fields(m) for m in msgs]),
            "names": ["{}" if m.opcode not in SETTING_OPCODES
                      and (named(id(m.shape)) or learn(m.shape)) == 1
                      else _json(field_names(m)) for m in msgs],
            "problems": [[p.text for p in m.problems] for m in msgs],
        }
        if header:
            cols.update(self._header(msgs))
        else:
            cols["header"] = b"".join([p.data[:HEADER_SIZE] for p in pdus])
        return cols

    def _key(self, m) -> str:
        if self.pseudonyms is not None and document_parts(m.magic, m.opcode)[0]:
            return key_text(self.pseudonyms(m.key))
        return key_text(m.key)

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
