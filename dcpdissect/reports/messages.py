"""One record per decoded MCBP message, for ``dissect`` (table and JSON lines)."""

from __future__ import annotations

import datetime as _dt
import json as _json

from ..codec import Message
from ..codec.settings import SETTING_OPCODES, setting_fields, setting_names
from ..protocol import (MAGICS, OPCODES, SERVER_MAGICS, STATUS, Field, Shape, shape_fields,
                        u64_text)

DIRECTIONS = ("c2s", "s2c")


_STAMPS: dict = {}                   # epoch second -> its date and time, as met so far


def iso_time(ts_ns: int) -> str:
    secs, ns = divmod(ts_ns, 1_000_000_000)
    stamp = _STAMPS.get(secs)
    if stamp is None:
        if len(_STAMPS) > 4096:
            _STAMPS.clear()
        try:
            stamp = _dt.datetime.fromtimestamp(secs, _dt.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%S")
        except (ValueError, OverflowError, OSError):
            stamp = _civil(secs)    # beyond datetime's years 1..9999 (corrupt timestamps)
        _STAMPS[secs] = stamp
    return f"{stamp}.{ns:09d}Z"


TIME_MODES = ("absolute", "relative", "delta")


class Clock:
    """Times of table rows (``--time``): ``absolute`` ISO 8601 in UTC with the date and
    microseconds (``2026-11-24T10:22:13.050011Z``), ``relative`` seconds since the
    capture's first frame (``summary.first_ts_ns``, read when a row is written), ``delta``
    seconds since the previous row of the table."""

    def __init__(self, mode: str = "absolute", summary=None):
        self.mode, self.summary, self.previous = mode, summary, None

    def text(self, ts_ns: int | None) -> str:
        if ts_ns is None:
            return "-"
        if self.mode == "absolute":
            return iso_time(ts_ns)[:-4] + "Z"
        if self.mode == "relative":
            origin = getattr(self.summary, "first_ts_ns", None)
            base = ts_ns if origin is None else origin
        else:
            base = ts_ns if self.previous is None else self.previous
            self.previous = ts_ns
        return _seconds(ts_ns - base)


def _seconds(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    secs, rest = divmod(abs(ns), 1_000_000_000)
    return f"{sign}{secs}.{rest // 1000:06d}"


def _civil(secs: int) -> str:
    """UTC date and time of any epoch second, proleptic Gregorian (H. Hinnant's algorithm)."""
    days, rem = divmod(secs, 86400)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return f"{year:04d}-{month:02d}-{day:02d}T{rem // 3600:02d}:{rem // 60 % 60:02d}:{rem % 60:02d}"


def key_text(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


_NAMED: dict = {}                    # id(shape) -> (shape, its named fields)


def _named_fields(shape: Shape) -> tuple:
    """(name, text function) of every flag or enum field of the shape's layouts, in order
    of first appearance (a name in several layouts: the last layout's text function)."""
    got = _NAMED.get(id(shape))
    if got is None or got[0] is not shape:
        named = {}
        for layout in shape.extras + shape.values:
            for f in layout.fields:
                if f.flags or f.names:
                    named[f.name] = _remembered(f.flags.text if f.flags else f.names.text)
        got = _NAMED[id(shape)] = (shape, tuple(named.items()))
    return got[1]


def _remembered(text):
    """``text`` (a flag or enum table's value -> name) with the names it gave kept."""
    seen: dict = {}

    def remembered(value):
        if type(value) is not int:
            return text(value)
        got = seen.get(value)
        if got is None:
            if len(seen) >= 1024:
                seen.clear()
            got = seen[value] = text(value)
        return got
    return remembered


def field_names(msg: Message) -> dict[str, str]:
    """Symbolic text for every decoded flag or enum field (``{"flags": "memory+ack"}``)
    and for the HELLO features of :func:`message_fields`."""
    names = _names(_named_fields(msg.shape), msg.fields)
    if msg.opcode in SETTING_OPCODES:
        names.update(setting_names(setting_fields(msg)))
    return names


def message_fields(msg: Message) -> dict:
    """The message's decoded fields, with the HELLO features and the DcpControl key and
    value (:mod:`dcpdissect.codec.settings`), which the tables give no layout."""
    if msg.opcode in SETTING_OPCODES:
        extra = setting_fields(msg)
        if extra:
            return {**msg.fields, **extra}
    return msg.fields


def _names(named: tuple, fields: dict) -> dict[str, str]:
    out = {}
    for name, text in named:
        if name in fields:
            out[name] = text(fields[name])
    return out


# -- 64-bit integers in JSON -------------------------------------------------------------
#
# JSON numbers above 2**53 are rounded by jq (1.6) and JavaScript, so two vbucket uuids or
# CAS values that differ in their low bits become equal. One rule, for every jsonl record
# (``dissect`` messages, ``analyze`` findings and ``flow_control``): an integer is written
# as a decimal string when its field is 64 bits wide -- every 8-byte field of the protocol
# tables, the header's CAS, ``ts_ns``, and in findings every seqno or uuid the rules
# report (names ending in ``seqno`` or ``uuid``, and :data:`FINDING_U64_NAMES`). The type
# depends on the name only, never on the value (seqno 5 is ``"5"``); every other integer
# stays a number. The records themselves (``message_record``, ``finding_record``, the
# pipeline's Parquet tables) keep Python ints; :func:`jsonl_line` applies the rule.

def _table_u64_names() -> frozenset:
    from ..protocol import OPCODES
    names = set()
    for op in OPCODES.values():
        for shape in (op.request, op.response):
            if shape is None:
                continue
            for lay in shape.extras + shape.values:
                names.update(f.name for f in lay.fields if f.width == 8)
    return frozenset(names)


# Finding fields that hold a seqno without saying so in their name.
FINDING_U64_NAMES = frozenset({"last_received", "previous_hcs", "advanced"})
U64_NAMES: frozenset = _table_u64_names() | {"cas", "ts_ns"} | FINDING_U64_NAMES
U64_SUFFIXES = ("seqno", "uuid")


def is_u64_name(name) -> bool:
    """Whether integers under this key are written as decimal strings in JSON."""
    return isinstance(name, str) and (name in U64_NAMES or name.endswith(U64_SUFFIXES))


_U64_SEEN: dict = {}                 # name -> is_u64_name(name), for the names met so far
_PLAIN = frozenset((str, bool, float, type(None)))
_SCALAR = _PLAIN | {int}
_ENCODER = _json.JSONEncoder(separators=(",", ":"))
try:                                 # the encoder's C core, made once rather than per line
    from json.encoder import c_make_encoder as _c_make_encoder
    _ONE_SHOT = _c_make_encoder({}, _ENCODER.default, _json.encoder.encode_basestring_ascii,
                                None, ":", ",", False, False, True)
except (ImportError, TypeError):
    _ONE_SHOT = None


def _u64(name) -> bool:
    got = _U64_SEEN.get(name)
    if got is None:
        if len(_U64_SEEN) > 4096:
            _U64_SEEN.clear()
        got = _U64_SEEN[name] = is_u64_name(name)
    return got


def json_safe(value, name=None):
    """``value`` with every integer under a 64-bit name (:func:`is_u64_name`, at any depth;
    list items take the name of their list) turned into its decimal string."""
    t = type(value)
    if t is int:
        return str(value) if _u64(name) else value
    if t in _PLAIN:
        return value
    if isinstance(value, dict):
        out = dict(value)                  # then only the values that change
        seen = _U64_SEEN
        for k, v in value.items():         # scalars inline: most values of a record are
            t = type(v)
            if t is int:
                u = seen.get(k)
                if u or (u is None and _u64(k)):
                    out[k] = str(v)
            elif t not in _PLAIN and v:    # empty containers: nothing to convert
                out[k] = json_safe(v, k)
        return out
    if isinstance(value, (list, tuple)):
        if not _u64(name):
            for v in value:
                if type(v) not in _SCALAR:
                    break
            else:
                return value               # plain scalars: written as they are
        return [json_safe(v, name) for v in value]
    return value


def _line(safe: dict) -> str:
    if _ONE_SHOT is None:
        return _ENCODER.encode(safe) + "\n"
    return "".join(_ONE_SHOT(safe, 0)) + "\n"


def jsonl_line(record: dict) -> str:
    """One JSON-lines line (with its newline) of a message, finding or flow_control
    record, 64-bit integers as decimal strings."""
    return _line(json_safe(record))


MESSAGE_U64 = ("ts_ns", "cas")                                  # 64-bit top-level values
MESSAGE_NESTED = ("frame_infos", "fields", "collection_filter")  # values that hold more


def message_line(record: dict) -> str:
    """:func:`jsonl_line` of a :func:`message_record` (the same line), without walking
    every value: of a message record's top-level values only :data:`MESSAGE_U64` are
    64-bit and only :data:`MESSAGE_NESTED` may hold 64-bit integers."""
    out = dict(record)
    for k in MESSAGE_U64:
        v = out[k]
        if type(v) is int:
            out[k] = str(v)
    for k in MESSAGE_NESTED:
        v = out.get(k)
        if v:
            out[k] = json_safe(v, k)
    return _line(out)


_HEADS: dict = {}       # magic << 8 | opcode -> (magic name, opcode name, named fields)
_STATUS_NAMES: dict = {}    # status -> its name


def _head(msg: Message) -> tuple[str, str, tuple]:
    """The names of the message's magic and opcode, and the named fields of its shape
    (:func:`_named_fields`): magic and opcode decide the shape."""
    key = msg.magic << 8 | msg.opcode
    got = _HEADS.get(key)
    if got is None:
        got = _HEADS[key] = (MAGICS.text(msg.magic), msg.name, _named_fields(msg.shape))
    return got


def _status_name(status: int | None) -> str | None:
    if status is None:
        return None
    got = _STATUS_NAMES.get(status)
    if got is None:
        got = _STATUS_NAMES[status] = STATUS.text(status)
    return got


def message_record(pdu, msg: Message, doc_key=None, stream_filter=None) -> dict:
    """The object of one message: ``dissect --format jsonl`` writes it with
    :func:`jsonl_line`; also the source of the table row and the pipeline's ``messages``
    rows (Python ints). ``doc_key`` (a :class:`~dcpdissect.analysis.collections.DocKey`)
    adds ``collection_id`` and ``collection_name`` and makes ``key`` the logical key;
    ``stream_filter`` (a stream request's ``StreamFilter``) adds ``collection_filter``."""
    fields = dict(message_fields(msg))
    magic_name, opcode_name, named = _head(msg)
    record = {
        "type": "message",
        "frame": pdu.frame,
        "frames": list(pdu.frames),
        "time": iso_time(pdu.ts_ns),
        "ts_ns": pdu.ts_ns,
        "connection": pdu.conn,
        "direction": DIRECTIONS[pdu.direction],
        "magic": msg.magic,
        "magic_name": magic_name,
        "opcode": msg.opcode,
        "opcode_name": opcode_name,
        "request": msg.is_request,
        "vbucket": msg.vbucket,
        "status": msg.status,
        "status_name": _status_name(msg.status),
        "opaque": msg.opaque,
        "cas": msg.cas,
        "datatype": msg.datatype,
        "framing_len": msg.framing_len,
        "extlen": msg.extlen,
        "keylen": msg.keylen,
        "bodylen": msg.bodylen,
        "value_len": msg.value_len,
        "stream_id": msg.stream_id,
        "frame_infos": _frame_infos(msg.frame_infos) if msg.frame_infos else [],
        "key": key_text(msg.key) if msg.key else None,
        "layout": msg.layout,
        "fields": fields,
        "names": _names(named, fields) if named else {},
        "problems": _problems(msg.problems) if msg.problems else [],
    }
    if "features" in fields:
        record["names"].update(setting_names(fields))
    if doc_key is not None:
        record["key"] = key_text(doc_key.key)
        record["collection_id"], record["collection_name"] = doc_key.collection_id, doc_key.name
    if stream_filter is not None:
        record["collection_filter"] = stream_filter._asdict()
    return record


def _frame_infos(frame_infos) -> list[dict]:
    return [{"id": fi.id, "name": fi.name, "data": fi.data.hex()} for fi in frame_infos]


def _problems(problems) -> list[str]:
    return [p.text for p in problems]


def _record_shape(record: dict) -> Shape | None:
    """The table shape a record was decoded with (None: server magic or unknown opcode)."""
    if record["magic"] in SERVER_MAGICS:
        return None
    op = OPCODES.get(record["opcode"])
    if op is None:
        return None
    return op.request if record["request"] else op.response


def _versioned(shape: Shape) -> bool:
    """Whether the shape's value layouts are versions chosen by a field of the message (the
    snapshot marker's version byte): the summary then names the layout decoded."""
    return any(k != "status" for lay in shape.values for k, _ in lay.when)


def _collection_text(ident: int, name: str | None) -> str:
    return f"{ident:#x}" + (f"({name})" if name else "")


def details(record: dict) -> str:
    """Compact one-line summary of the opcode's key fields for the table view. Labels,
    hidden fields and hex display follow the tables (``Field.short``, ``Field.shown ==
    "never"``, ``Field.display``); ``"if_set"`` fields are shown even when zero, as in the
    JSON record."""
    fields, names = record["fields"], record["names"]
    shape = _record_shape(record)
    table: dict[str, Field] = shape_fields(shape) if shape is not None else {}
    parts = []
    if record["layout"] and shape is not None and _versioned(shape):
        parts.append(record["layout"])
    for name, value in fields.items():
        f = table.get(name)
        if f is not None and f.shown == "never" or name == "control_value":
            continue
        label = f.label if f is not None else name
        if name == "control_key":           # a DcpControl: enable_noop=true
            parts.append(f"{value}={fields['control_value']}")
        elif name == "failover_log":
            parts.append("failover_log=[" + ", ".join(
                f"{u64_text(e['vbucket_uuid'])}@{u64_text(e['seqno'])}" for e in value) + "]")
        elif name in names:
            parts.append(f"{label}={names[name]}")
        elif f is not None and f.display == "hex":
            parts.append(f"{label}={value:#x}")
        else:
            parts.append(f"{label}={value}")
    if record.get("convention"):
        parts.append(f"conv={record['convention']}")
    if "collection_id" in record:
        parts.append("cid=" + _collection_text(record["collection_id"], record["collection_name"]))
    if "collection_filter" in record:
        scope, collections = record["collection_filter"].values()
        wanted = [_collection_text(c["id"], c["name"]) for c in collections]
        parts.append("filter=" + (f"scope:{_collection_text(scope['id'], scope['name'])}"
                                  if scope else "collections:" + ",".join(wanted)))
    if record["key"] is not None and "control_key" not in fields:
        parts.append(f"key={record['key']!r}")
    if record["problems"]:
        parts.append("problems: " + "; ".join(record["problems"]))
    return " ".join(parts)


TABLE_HEADERS = ("frame(s)", "time", "conn", "dir", "magic", "opcode", "vb/status",
                 "opaque", "sid", "details")


def frames_text(frames) -> str:
    if len(frames) > 1 and frames[-1] - frames[0] == len(frames) - 1:
        return f"{frames[0]}-{frames[-1]}"
    return ",".join(map(str, frames))


def table_row(record: dict, clock: Clock | None = None) -> list:
    frame_text = frames_text(record["frames"])
    if record["request"]:
        vb_status = f"vb:{record['vbucket']}"
    else:
        vb_status = record["status_name"]
    return [
        frame_text, (clock or Clock()).text(record["ts_ns"]), record["connection"],
        record["direction"],
        f"{record['magic']:#04x}", record["opcode_name"], vb_status,
        f"{record['opaque']:#010x}", "" if record["stream_id"] is None else record["stream_id"],
        details(record),
    ]


# -- JSON lines straight from the message ----------------------------------------------
#
# ``dissect --format jsonl`` writes most lines without building the record: the keys of a
# message's line, its head (magic, opcode and their names, request), its layout and the
# names and 64-bit types of its fields are the same for every message of one magic, opcode,
# layout and set of fields, so each such shape gets one precompiled format (a
# :class:`_Template`) filled with the message's values.

_encode_text = _json.encoder.encode_basestring_ascii
_TEMPLATES: dict = {}   # (magic << 8 | opcode, layout, field names) -> _Template or None


def _json_value(value, name: str) -> str:
    """The JSON text of one value of a message record, as :func:`message_line` writes it."""
    return _line(json_safe(value, name))[:-1]


class _Template:
    """The line of every message of one shape (see above): ``format`` takes the values of
    :func:`message_json`; ``named`` lists the (field name, text function) of the names
    written under ``"names"``."""

    __slots__ = ("format", "named")

    def __init__(self, msg: Message, names: tuple):
        magic_name, opcode_name, named = _head(msg)

        def const(text: str) -> str:
            return text.replace("%", "%%")
        fields = ",".join(const(_encode_text(k)) + (':"%d"' if _u64(k) else ":%d")
                          for k in names)
        self.named = tuple((k, text) for k, text in named if k in names)
        labels = ",".join(const(_encode_text(k)) + ":%s" for k, _ in self.named)
        self.format = (     # %.0s takes a value the shape does not write (a request's status)
            '{"type":"message","frame":%d,"frames":%s,"time":"%s","ts_ns":"%d","connection":%d,'
            '"direction":"%s","magic":' + str(msg.magic) + ',"magic_name":'
            + const(_encode_text(magic_name)) + ',"opcode":' + str(msg.opcode)
            + ',"opcode_name":' + const(_encode_text(opcode_name))
            + (',"request":true,"vbucket":%d,"status":null%.0s,"status_name":null%.0s,'
               if msg.is_request else
               ',"request":false,"vbucket":null%.0s,"status":%d,"status_name":%s,')
            + '"opaque":%d,"cas":"%d","datatype":%d,"framing_len":%d,"extlen":%d,'
            '"keylen":%d,"bodylen":%d,"value_len":%d,"stream_id":%s,"frame_infos":%s,'
            '"key":%s,"layout":' + const(_json_value(msg.layout, "layout"))
            + ',"fields":{' + fields + '},"names":{' + labels + '},"problems":%s')


def _template(msg: Message, names: tuple) -> _Template | None:
    """The template of the message's shape (None: a field is not an integer)."""
    got = None
    if all(type(v) is int for v in msg.fields.values()):
        got = _Template(msg, names)
    if len(_TEMPLATES) > 4096:
        _TEMPLATES.clear()
    _TEMPLATES[msg.magic << 8 | msg.opcode, msg.layout, names] = got
    return got


_STATUS_JSON: dict = {}     # status -> the JSON text of its name


def _status_json(status: int) -> str:
    got = _STATUS_JSON.get(status)
    if got is None:
        got = _STATUS_JSON[status] = _encode_text(_status_name(status))
    return got


def message_json(pdu, msg: Message, doc_key=None, stream_filter=None) -> str:
    """:func:`message_line` of :func:`message_record` with the same arguments, without its
    closing ``}`` and newline (a convention may follow: :func:`labelled_json`)."""
    fields = msg.fields
    names = tuple(fields)
    t = _TEMPLATES.get((msg.magic << 8 | msg.opcode, msg.layout, names), False)
    if t is False:
        t = None if msg.opcode in SETTING_OPCODES else _template(msg, names)
    if t is None:
        return message_line(message_record(pdu, msg, doc_key, stream_filter))[:-2]
    frames = pdu.frames
    if doc_key is not None:
        key = _encode_text(key_text(doc_key.key))
    else:
        key = _encode_text(key_text(msg.key)) if msg.key else "null"
    sid, infos, problems, named, status = (msg.stream_id, msg.frame_infos, msg.problems,
                                           t.named, msg.status)
    line = t.format % (
        pdu.frame,
        f"[{frames[0]}]" if len(frames) == 1 else "[" + ",".join(map(str, frames)) + "]",
        iso_time(pdu.ts_ns), pdu.ts_ns, pdu.conn, DIRECTIONS[pdu.direction],
        msg.vbucket, status, "null" if status is None else _status_json(status),
        msg.opaque, msg.cas, msg.datatype, msg.framing_len, msg.extlen, msg.keylen,
        msg.bodylen, msg.value_len, "null" if sid is None else sid,
        _json_value(_frame_infos(infos), "frame_infos") if infos else "[]",
        key, *fields.values(),
        *([_encode_text(text(fields[k])) for k, text in named] if named else ()),
        _json_value(_problems(problems), "problems") if problems else "[]")
    if doc_key is not None:
        line += (f',"collection_id":{_json_value(doc_key.collection_id, "collection_id")},'
                 f'"collection_name":{_json_value(doc_key.name, "collection_name")}')
    if stream_filter is not None:
        line += ',"collection_filter":' + _json_value(stream_filter._asdict(),
                                                      "collection_filter")
    return line


def labelled_json(line: str, convention: str | None) -> str:
    """A :func:`message_json` text with the marker's ``"convention"`` last."""
    return f'{line},"convention":{_json_value(convention, "convention")}'
