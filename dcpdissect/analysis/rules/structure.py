"""Single-message rules: what kv_engine's validator, consumer or producer refuses in one message.

The generic rules mirror ``McbpValidator::verify_header`` (daemon/mcbp_validators.cc) and
read the opcode's :class:`~dcpdissect.protocol.Shape`; the field rules are the shapes'
:class:`~dcpdissect.protocol.Check` constraints. The Lua plugin interprets the same table
data (``luagen/runtime.lua``), so a rule is written once. Rules that depend on what the
connection negotiated (HELLO, DcpOpen) apply only to messages the client sent, where that
negotiation is the receiver's, and only when the capture showed it.
"""

from __future__ import annotations

import json
import re

from ...codec import Message
from ...codec.keys import split_collection_key
from ...codec.xattr import snappy_length, xattr_problem
from ...codec.problems import EXTRAS_SIZE, FRAME_INFO, HEADER_OVERRUN, TRUNCATED, VALUE_SIZE
from ...protocol import (
    DATATYPE, DCP_OPCODES, FRAME_INFOS_NOT_FOR_DCP, MAX_COLLECTIONS_KEY_LENGTH,
    MAX_COLLECTIONS_LOGICAL_KEY_LENGTH, MAX_KEY_LENGTH, OPCODE_NAMES, REQUEST_FRAME_INFO_SIZES,
    REQUEST_FRAME_INFOS, RESERVED_COLLECTION_IDS, SERVER_MAGICS, Check, Presence, Shape,
    opcode_code, u64_text,
)
from .model import ERROR, WARNING, Rule, family

rule = family("structure")

V = "daemon/mcbp_validators.cc"
SNAPPY, XATTR = DATATYPE.bit("snappy"), DATATYPE.bit("xattr")
DCP_OPEN, GET_FAILOVER_LOG = opcode_code("DcpOpen"), opcode_code("GetFailoverLog")
VH = f"{V} McbpValidator::verify_header"
SAMPLE = "violations-validator.pcap"


def _generic(id, severity, title, rationale, sample=SAMPLE) -> Rule:
    return rule(id, severity, title, rationale, sample, single_pdu=True)


HEADER_INVARIANT = _generic(
    "header-invariant", ERROR, "framing extras + extras + key exceed the body length",
    "include/mcbp/protocol/request.h Request::isValid: the server disconnects",
    "violations-structure.pcap")
FRAMING_EXTRAS_ENCODING = _generic(
    "framing-extras-encoding", ERROR, "framing extras run past their end",
    f"{V} parseFrameExtras: 'Invalid encoding in FrameExtras', Einval",
    "violations-structure.pcap")
UNKNOWN_OPCODE = _generic(
    "unknown-opcode", WARNING, "opcode not in kv_engine's opcode table",
    "include/mcbp/protocol/opcode.h: the server answers UnknownCommand",
    "violations-structure.pcap")
EXTRAS_LENGTH = _generic(
    "extras-length", ERROR, "extras length the opcode does not allow",
    f"{VH}: 'Request must include extras of length N' (DcpDeletion: 21 with Collections or "
    "IncludeDeleteTimes, else 18); responses: the layout the receiver reads")
VALUE_LENGTH = _generic(
    "value-length", ERROR, "value length that matches no layout of the opcode",
    f"{V} dcp_snapshot_marker_validator 'valuelen not expected', dcp_cache_transfer_validator; "
    "engines/ep/src/dcp/consumer.cc handleResponse (failover log of 16-byte entries, 8-byte "
    "rollback seqno)")
KEY_PRESENCE = _generic(
    "key-presence", ERROR, "key missing where required, or present where forbidden",
    f"{VH}: 'Request must include key' / 'Request must not include key', Einval")
KEY_TOO_LONG = _generic(
    "key-too-long", ERROR, "key longer than the server accepts",
    f"{VH}: 'Key length exceeds' 250, 251 on collection-aware connections (dockey_view.h "
    "MaxCollectionsKeyLen), Einval")
VALUE_PRESENCE = _generic(
    "value-presence", ERROR, "value missing where required, or present where forbidden",
    f"{VH}: 'Request must include value' / 'Request must not include value'; a stream "
    "request value needs HELLO Collections (dcp_stream_req_validator), Einval")
CAS_INVALID = _generic(
    "cas-invalid", ERROR, "CAS set where it must be 0, or 0 where it must be set",
    f"{VH}: 'Request CAS must be set' (DcpPrepare) / 'must not be set' (Commit, Abort, "
    "SeqnoAcknowledged, CacheTransfer), Einval")
DATATYPE_INVALID = _generic(
    "datatype-invalid", ERROR, "datatype the opcode does not allow",
    f"{VH}: 'Request datatype invalid' (most DCP requests are RAW; DcpOpen RAW or JSON; "
    "deletions: valid_dcp_delete_datatype), Einval")
DATATYPE_NOT_NEGOTIATED = _generic(
    "datatype-not-negotiated", ERROR, "datatype bit the connection did not enable with HELLO",
    f"{VH}: 'Datatype (...) not enabled for the connection' (HELLO JSON, Snappy, XATTR), Einval")
DOCUMENT_KEY_INVALID = _generic(
    "document-key-invalid", ERROR, "document key without a valid collection prefix",
    f"{V} McbpValidator::is_document_key_valid (collection-aware connections): key >= 2 bytes, "
    "canonical leb128 with a stop byte, a logical key, no reserved collection id 1-7, "
    "logical key <= 246 bytes outside the default collection, Einval")
XATTR_INVALID = _generic(
    "xattr-invalid", ERROR, "a value with the xattr datatype whose xattr blob is invalid",
    f"{VH} is_valid_xattr_blob -> xattr/utils.cc validate (structure, keys, JSON values, "
    "system xattrs <= 1 MiB): XattrEinval; a snappy value is judged by its uncompressed "
    "length only")
FRAME_INFO_UNKNOWN = _generic(
    "frame-info-unknown", ERROR, "a request frame info id the server does not know",
    f"{V} parseFrameExtras: UnknownFrameInfo (3, the former OpenTracingContext, included)")
FRAME_INFO_INVALID = _generic(
    "frame-info-invalid", ERROR, "a request frame info with a size the server refuses",
    f"{V} parseFrameExtras: Barrier and PreserveTtl carry no data, DcpStreamId and "
    "ImpersonateWithTokenAuthDataId 2 bytes, Impersonate* some, Durability 1 or 3: Einval")
FRAME_INFO_NOT_SUPPORTED = _generic(
    "frame-info-not-supported", ERROR, "a frame info the DCP opcode does not support",
    f"{V} parseFrameExtras: Durability (Einval) and PreserveTtl (NotSupported) only on "
    "opcodes that support them (opcode.cc is_durability_supported), none of DCP's")
OPEN_VALUE_INVALID = _generic(
    "open-value-invalid", ERROR, "DcpOpen value is not a JSON object of known keys",
    f"{V} dcp_open_validator: value must be a JSON object whose only key is consumer_name "
    "(a string, consumer connections only), Einval")
DCP_NOT_OPEN = _generic(
    "dcp-not-open", ERROR, "a DCP command on a connection that was never opened with DcpOpen",
    f"{V} verify_common_dcp_restrictions: 'The command can only be sent on a DCP "
    "connection', Einval (judged only when the capture holds the connection's start)")
DCP_OPEN_TWICE = _generic(
    "dcp-open-twice", ERROR, "DcpOpen on a connection already opened for DCP",
    f"{V} verify_common_dcp_restrictions: 'The connection is already opened as a DCP "
    "connection', Einval")
STREAM_ID_ON_CONSUMER = _generic(
    "stream-id-on-consumer", ERROR, "a stream id frame info sent to a consumer connection",
    f"{V} verify_common_dcp_restrictions: 'Internal consumer does not support stream-id', Einval")
UNSUPPORTED_ON_SERVER = _generic(
    "unsupported-on-server", ERROR, "an opcode memcached does not accept from a client",
    f"{V} McbpValidator: DcpFlush_Unsupported has not_supported_validator (NotSupported); "
    "DcpSeqnoAdvanced and DcpOsoSnapshot have no validator or executor (UnknownCommand): "
    "only producers send them")

GENERIC = (
    HEADER_INVARIANT, FRAMING_EXTRAS_ENCODING, UNKNOWN_OPCODE, EXTRAS_LENGTH, VALUE_LENGTH,
    KEY_PRESENCE, KEY_TOO_LONG, VALUE_PRESENCE, CAS_INVALID, DATATYPE_INVALID,
    DATATYPE_NOT_NEGOTIATED, DOCUMENT_KEY_INVALID, XATTR_INVALID, FRAME_INFO_UNKNOWN,
    FRAME_INFO_INVALID, FRAME_INFO_NOT_SUPPORTED, OPEN_VALUE_INVALID, DCP_NOT_OPEN, DCP_OPEN_TWICE,
    STREAM_ID_ON_CONSUMER, UNSUPPORTED_ON_SERVER,
)


def _table_rules() -> tuple[Rule, ...]:
    """One rule per distinct Check id and per documented-but-rejected layout."""
    seen: dict[str, Rule] = {}
    for op in DCP_OPCODES:
        for shape in (op.request, op.response):
            for check in shape.checks:
                if check.title and check.rule not in seen:
                    seen[check.rule] = rule(check.rule, check.severity, check.title, check.rationale,
                                            check.sample, single_pdu=True)
            for lay in shape.extras + shape.values:
                if lay.rule and lay.rule not in seen:
                    seen[lay.rule] = rule(lay.rule, ERROR, f"{op.name} uses the {lay.label} layout, "
                                          "which servers reject", lay.note or "", "violations-marker.pcap",
                                          single_pdu=True)
    return tuple(seen.values())


RULES = GENERIC + _table_rules()

_HEADER_NAMES = ("extlen", "keylen", "value_len", "datatype", "status")
_PLACEHOLDER = re.compile(r"\{(\w+)(:x)?\}")


def _value(m: Message, name: str):
    v = m.fields.get(name, _MISSING)
    if v is not _MISSING:
        return v
    if name in _HEADER_NAMES:
        return getattr(m, name)
    return None


_MISSING = object()


def render_text(text: str, m: Message) -> str:
    """A Check's message with its ``{field}`` / ``{field:x}`` placeholders filled in."""
    def sub(match):
        v = _value(m, match.group(1))
        if v is None:
            return "?"
        return f"{v:#x}" if match.group(2) else str(v)
    return _PLACEHOLDER.sub(sub, text)


def _holds(cond: tuple, m: Message) -> bool | None:
    kind, name, arg = cond
    v = _value(m, name)
    if v is None:
        return None
    if kind == "set":
        return bool(v & arg)
    if kind == "clear":
        return not v & arg
    if kind == "eq":
        return v == arg
    return v != arg                               # "ne"


def check_passes(check: Check, m: Message) -> bool:
    """False when ``m`` breaks ``check`` (a check whose fields are missing passes)."""
    test = check.test
    return _passes(check.when, test[0], test[1], test[2:], m)


def _passes(when: tuple, kind: str, name: str, args: tuple, m: Message) -> bool:
    """check_passes of a check given as its conditions and its test in parts."""
    for cond in when:
        if not _holds(cond, m):
            return True
    v = m.fields.get(name, _MISSING)
    if v is _MISSING:
        v = _value(m, name)
    if v is None:
        return True
    if kind == "in":
        return v in args[0]
    if kind == "le":
        other = _value(m, args[0])
        return other is None or v <= other
    if kind == "ne":
        return v != args[0]
    if kind == "range":
        x, hi = _value(m, args[0]), _value(m, args[1])
        return x is None or hi is None or v <= x <= hi
    if kind == "mask":
        return not v & ~args[0]
    if kind == "only_with":
        return not v & args[0] or not v & ~(args[0] | args[1])
    if kind == "not_both":
        return not (v & args[0] and v & args[1])
    if kind == "needs":
        return not v & args[0] or bool(v & args[1])
    if kind == "one_bit":
        bits = v & args[0]
        return bits != 0 and not bits & (bits - 1)
    raise ValueError(f"unknown check {kind}")


def check_message(m: Message, negotiated=None, from_client: bool = False) -> list[tuple[str, str, dict]]:
    """(rule id, message, fields that matter) for every single-message rule ``m`` breaks.

    ``negotiated`` is the connection's :class:`~dcpdissect.analysis.negotiation.Negotiation`
    (None: unknown); ``from_client`` says the client sent ``m`` (memcached receives it).
    """
    out: list[tuple[str, str, dict]] = []
    add = out.append
    codes = {p.code for p in m.problems} if m.problems else ()
    if HEADER_OVERRUN in codes:
        add((HEADER_INVARIANT.id, f"framing extras {m.framing_len} + extras {m.extlen} + key "
             f"{m.keylen} exceed body length {m.bodylen}", _sizes(m)))
    if FRAME_INFO in codes:
        text = next(p.text for p in m.problems if p.code == FRAME_INFO)
        add((FRAMING_EXTRAS_ENCODING.id, text, {"framing_len": m.framing_len}))
    spec = m.spec
    if spec is None:
        if m.magic not in SERVER_MAGICS and m.opcode not in OPCODE_NAMES:
            add((UNKNOWN_OPCODE.id, f"opcode {m.opcode:#04x} is not a known opcode", {}))
        return out
    if HEADER_OVERRUN in codes or len(m.extras) < m.extlen:
        return out              # (extras the capture cut: nothing decoded to judge)
    request = m.is_request
    shape = spec.request if request else spec.response
    ctx = negotiated if from_client else None
    if request and shape.validated:
        if (ctx is None and not codes and not m.frame_infos and not m.datatype & XATTR
                and m.opcode != DCP_OPEN):
            _verify_header_seen(m, shape, add)
        else:
            _verify_header(m, shape, ctx, add)
        if from_client:
            _connection(m, spec, negotiated, add)
    else:
        for p in m.problems:
            if p.code == EXTRAS_SIZE:
                add((EXTRAS_LENGTH.id, f"{spec.name}: {p.text}", _sizes(m)))
            elif p.code == VALUE_SIZE:
                add((VALUE_LENGTH.id, f"{spec.name}: {p.text}", _sizes(m)))
        if m.is_request and from_client and spec.server_rejects:
            _connection(m, spec, negotiated, add)
    for check, when, kind, name, args in _split_checks(shape):
        if not _passes(when, kind, name, args, m):
            add((check.rule, render_text(check.text, m), {n: _value(m, n) for n in sorted(check.fields)}))
    return out


def unjudged(m: Message, negotiated=None, from_client: bool = False) -> list[tuple[str, str]]:
    """(rule, what was not captured) for each single-message rule that could not judge
    ``m`` because the capture cut it (``m`` holds only a prefix of its frame)."""
    spec = m.spec
    if spec is None or not m.problems or TRUNCATED not in {p.code for p in m.problems}:
        return []
    if len(m.extras) < m.extlen:
        return [("extras", "extras")]
    out = []
    shape = spec.request if m.is_request else spec.response
    value_cut = len(m.value) < m.value_len
    if value_cut and m.datatype & XATTR and shape.validated:
        out.append((XATTR_INVALID.id, "value"))
    if value_cut and m.opcode == DCP_OPEN:
        out.append((OPEN_VALUE_INVALID.id, "value"))
    ctx = negotiated if from_client else None
    if (len(m.key) < m.keylen and shape.document_key and shape.validated
            and (ctx is None or ctx.collections is not False)):
        out.append((DOCUMENT_KEY_INVALID.id, "key"))
    if value_cut and shape.values:      # value layouts whose fields were not captured
        names = {f.name for lay in shape.values if not lay.repeated for f in lay.fields}
        out.extend((check.rule, "value") for check in shape.checks if check.fields & names)
    return out


_CHECKS: dict[int, tuple] = {}      # id(shape) -> its checks, each with its parts for _passes


def _split_checks(shape: Shape) -> tuple:
    """(check, when, kind, field, arguments) of each check of ``shape``, split once."""
    got = _CHECKS.get(id(shape))
    if got is None:
        got = _CHECKS[id(shape)] = tuple((c, c.when, c.test[0], c.test[1], c.test[2:])
                                         for c in shape.checks)
    return got


_PASSED: set[tuple] = set()     # header signatures that passed _verify_header without a context
MAX_PASSED = 4096


def _verify_header_seen(m: Message, shape: Shape, add) -> None:
    """_verify_header without a negotiation, skipped for a header like one that passed: what
    it judges then is the opcode, the lengths' classes, datatype, CAS and layout (the message
    has no frame infos, no xattr and no decoder problem)."""
    sig = (id(shape), m.opcode, m.extlen, m.keylen == 0, m.keylen > MAX_COLLECTIONS_KEY_LENGTH,
           m.value_len == 0, m.value_len < shape.value_min, m.datatype, m.cas == 0, m.layout)
    if sig in _PASSED:
        return
    found = []
    _verify_header(m, shape, None, found.append)
    if found:
        for f in found:
            add(f)
    elif len(_PASSED) < MAX_PASSED:
        _PASSED.add(sig)


def _sizes(m: Message) -> dict:
    return {"framing_len": m.framing_len, "extlen": m.extlen, "keylen": m.keylen,
            "value_len": m.value_len, "bodylen": m.bodylen}


_EXTRAS: dict[tuple[int, bool | None], tuple[dict, str]] = {}


def _allowed_extras(shape: Shape, ctx) -> tuple[dict, str]:
    """The extras layouts the server accepts here, by size, and their sizes as text (cached:
    they depend only on the shape and, for DcpDeletion, the negotiation)."""
    v2 = None if ctx is None else ctx.delete_v2
    key = (id(shape), v2)
    hit = _EXTRAS.get(key)
    if hit is None:
        by_size = {lay.size: lay for lay in shape.extras if _layout_allowed(lay, v2)}
        sizes = sorted(by_size) or [0]
        hit = _EXTRAS[key] = (by_size or {0: None}, " or ".join(map(str, sizes)))
    return hit


def _verify_header(m: Message, shape: Shape, ctx, add) -> None:
    name = m.spec.name
    by_size, sizes_text = _allowed_extras(shape, ctx)
    if m.extlen not in by_size:
        add((EXTRAS_LENGTH.id, f"{name}: extras length {m.extlen}, must be {sizes_text}", _sizes(m)))
        return
    extras = by_size[m.extlen]
    _key(m, shape, ctx, add)
    value = extras.value if extras is not None and extras.value is not None else shape.value
    if shape.value_context == "collections" and ctx is not None and ctx.collections is False:
        value = Presence.FORBIDDEN
    if value is Presence.REQUIRED and not m.value_len:
        add((VALUE_PRESENCE.id, f"{name}: no value, one is required", _sizes(m)))
    elif value is Presence.FORBIDDEN and m.value_len:
        why = " (HELLO did not enable Collections)" if shape.value is not Presence.FORBIDDEN \
            and value is Presence.FORBIDDEN and shape.value_context else ""
        add((VALUE_PRESENCE.id, f"{name}: a {m.value_len}-byte value is not allowed{why}",
             _sizes(m)))
    elif shape.value_min and m.value_len < shape.value_min:
        add((VALUE_LENGTH.id, f"{name}: value of {m.value_len} bytes, at least {shape.value_min} "
             "required", _sizes(m)))
    for p in m.problems:
        if p.code == VALUE_SIZE:
            add((VALUE_LENGTH.id, f"{name}: {p.text}", _sizes(m)))
    if shape.cas is Presence.REQUIRED and not m.cas:
        add((CAS_INVALID.id, f"{name}: CAS 0, the request must carry one", {"cas": m.cas}))
    elif shape.cas is Presence.FORBIDDEN and m.cas:
        add((CAS_INVALID.id, f"{name}: CAS {u64_text(m.cas)}, must be 0", {"cas": m.cas}))
    allowed = shape.datatypes
    if m.datatype > 7 or (allowed is not None and m.datatype not in allowed):
        add((DATATYPE_INVALID.id, f"{name}: datatype {m.datatype:#04x} not allowed",
             {"datatype": m.datatype}))
    elif ctx is not None and ctx.datatypes is not None and m.datatype & ~ctx.datatypes:
        add((DATATYPE_NOT_NEGOTIATED.id, f"{name}: datatype bits {m.datatype & ~ctx.datatypes:#04x} "
             "not enabled by HELLO", {"datatype": m.datatype, "enabled": ctx.datatypes}))
    if m.datatype & XATTR and m.datatype <= 7 and len(m.value) == m.value_len:
        problem = _xattr(m)
        if problem:
            add((XATTR_INVALID.id, f"{name}: {problem}", {"datatype": m.datatype,
                                                          "value_len": m.value_len}))
    _frame_infos(m, add)
    if m.layout is not None:
        lay = next((lay for lay in shape.extras + shape.values if lay.label == m.layout), None)
        if lay is not None and lay.rule:
            add((lay.rule, f"{name}: {lay.note}", _sizes(m)))
    if m.opcode == DCP_OPEN and m.value_len and len(m.value) == m.value_len:
        _open_value(m, add)


def _xattr(m: Message) -> str | None:
    value = bytes(m.value)
    if m.datatype & SNAPPY:
        n = snappy_length(value)
        if n is None or n < 4:
            return "snappy value too short for an xattr blob"
        return None
    return xattr_problem(value)


def _layout_allowed(lay, delete_v2: bool | None) -> bool:
    if lay.context is None or delete_v2 is None:
        return True
    return delete_v2 == (lay.context == "delete_v2")


def _key(m: Message, shape: Shape, ctx, add) -> None:
    name = m.spec.name
    if shape.key is Presence.REQUIRED and not m.keylen:
        add((KEY_PRESENCE.id, f"{name}: no key, one is required", _sizes(m)))
        return
    if shape.key is Presence.FORBIDDEN and m.keylen:
        add((KEY_PRESENCE.id, f"{name}: a {m.keylen}-byte key is not allowed", _sizes(m)))
        return
    collections = None if ctx is None else ctx.collections
    limit = MAX_COLLECTIONS_KEY_LENGTH if collections in (True, None) else MAX_KEY_LENGTH
    if m.keylen > limit:
        add((KEY_TOO_LONG.id, f"{name}: key of {m.keylen} bytes, at most {limit}", _sizes(m)))
        return
    if shape.document_key and collections and len(m.key) == m.keylen:
        problem = _document_key_problem(bytes(m.key))
        if problem:
            add((DOCUMENT_KEY_INVALID.id, f"{name}: {problem}", {"key": bytes(m.key)[:16].hex()}))


def _document_key_problem(key: bytes) -> str | None:
    if len(key) <= 1:
        return "key length must be >= 2 on a collection-aware connection"
    cid, prefix, problem = split_collection_key(key)
    if problem:
        return f"collection prefix: {problem}"
    logical = len(key) - prefix
    if not logical:
        return "no logical key after the collection prefix"
    if cid in RESERVED_COLLECTION_IDS:
        return f"reserved collection id {cid}"
    limit = MAX_KEY_LENGTH if cid == 0 else MAX_COLLECTIONS_LOGICAL_KEY_LENGTH
    if logical > limit:
        return f"logical key of {logical} bytes exceeds {limit}"
    return None


def _frame_infos(m: Message, add) -> None:
    names = REQUEST_FRAME_INFOS.values
    for info in m.frame_infos:
        what = f"{m.spec.name}: frame info {info.id} ({names.get(info.id, 'unknown')})"
        sizes = REQUEST_FRAME_INFO_SIZES.get(info.id)
        if sizes is None:
            add((FRAME_INFO_UNKNOWN.id, f"{what} is not one the server knows", {"id": info.id}))
        elif info.id in FRAME_INFOS_NOT_FOR_DCP:
            add((FRAME_INFO_NOT_SUPPORTED.id, f"{what} is not supported by this opcode",
                 {"id": info.id}))
        elif (not info.data) if sizes == "+" else len(info.data) not in sizes:
            add((FRAME_INFO_INVALID.id, f"{what} with {len(info.data)} bytes of data",
                 {"id": info.id, "size": len(info.data)}))
        else:
            continue
        return


def _open_value(m: Message, add) -> None:
    try:
        doc = json.loads(bytes(m.value))
    except (ValueError, RecursionError):
        doc = None
    problem = None
    if not isinstance(doc, dict):
        problem = "value is not a JSON object"
    else:
        for key, val in doc.items():
            if key != "consumer_name":
                problem = f"unsupported JSON property {key}"
            elif (m.fields.get("flags") or 0) & 0x1:
                problem = "consumer_name on a producer connection"
            elif not isinstance(val, str):
                problem = "consumer_name must be a string"
            if problem:
                break
    if problem:
        add((OPEN_VALUE_INVALID.id, f"DcpOpen: {problem}", {"value_len": m.value_len}))


def _connection(m: Message, spec, ctx, add) -> None:
    """verify_common_dcp_restrictions and the opcodes memcached refuses from clients."""
    if spec.server_rejects:
        add((UNSUPPORTED_ON_SERVER.id, f"{spec.name} sent to the server (answered "
             f"{spec.server_rejects})", {}))
        return
    if ctx is None:
        return
    if m.stream_id is not None and ctx.consumer:
        add((STREAM_ID_ON_CONSUMER.id, f"{spec.name} with stream id {m.stream_id} on a consumer "
             "connection", {"stream_id": m.stream_id}))
    if m.opcode == DCP_OPEN:
        if ctx.dcp:
            add((DCP_OPEN_TWICE.id, "DcpOpen on a connection already opened for DCP", {}))
    elif m.opcode != GET_FAILOVER_LOG and ctx.dcp is False:
        add((DCP_NOT_OPEN.id, f"{spec.name} on a connection that sent no DcpOpen since its start",
             {}))
