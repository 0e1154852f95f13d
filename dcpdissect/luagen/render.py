"""Render ``lua/dcpdissect.lua`` (a Wireshark 4.0-4.6, Lua 5.2-5.4 dissector) from the protocol tables.

The runtime is Lua source beside this module: ``runtime.lua`` (decoding, desegmentation,
ports) and ``checks.lua`` (the interpreter of the single-message rules, the connection's
negotiation); :func:`render` joins them and inserts the tables they read:
value strings, fields, expert infos (one per single-message rule of the analyzer), the
per-opcode shapes with their constraints, and the header unpacking.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from ..analysis.rules import ERROR, INFO, RULES, WARNING
from ..analysis.rules.framing import FRAME_TOO_LARGE, UNKNOWN_MAGIC
from ..analysis.rules.structure import FRAMING_EXTRAS_ENCODING, HEADER_INVARIANT
from ..protocol import (
    DATATYPE, DATATYPE_FEATURES, DCP_OPCODES, DCP_OPEN_FLAGS, DCP_PORTS, FEATURE_COLLECTIONS,
    FLEXIBLE_MAGICS, FRAME_INFO_STREAM_ID, FRAME_INFOS_NOT_FOR_DCP, HEADER_SIZE, MAGICS,
    MAX_COLLECTIONS_KEY_LENGTH, MAX_COLLECTIONS_LOGICAL_KEY_LENGTH, MAX_FRAME_SIZE, MAX_KEY_LENGTH,
    MAX_SYSTEM_XATTR_BYTES, MAX_XATTR_KEY_LENGTH, TLS_PORTS,
    OPCODE_NAMES, REQUEST_FRAME_INFO_SIZES, REQUEST_FRAME_INFOS, REQUEST_MAGICS,
    RESPONSE_FRAME_INFOS, SERVER_MAGICS, SERVER_OPCODES, STATUS, Check, Field, FlagSet, Layout,
    Opcode, Shape, ValueNames,
)
from ..protocol.filters import PROTO, filter_name, filter_section
from ..protocol.header import CLASSIC_HEADER, FLEXIBLE_HEADER

PROTO_TITLE = "Couchbase DCP (dcpdissect)"
SEVERITY = {ERROR: "expert.severity.ERROR", WARNING: "expert.severity.WARN",
            INFO: "expert.severity.NOTE"}
MALFORMED_RULES = {r.id for r in (HEADER_INVARIANT, FRAMING_EXTRAS_ENCODING, UNKNOWN_MAGIC,
                                  FRAME_TOO_LARGE)}
# Framing rules of the analyzer that the segment splitter raises by itself.
FRAMING_RULES = (UNKNOWN_MAGIC.id, FRAME_TOO_LARGE.id)


def lua_str(text: str) -> str:
    """A Lua double-quoted string literal."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= o < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:03d}" for b in ch.encode())
    return '"' + "".join(out) + '"'


def lua_value(v) -> str:
    """A Lua literal for a table datum (str, int, bool, None, tuple/list/frozenset)."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return lua_str(v)
    if isinstance(v, frozenset):
        return lua_set(v)
    return "{" + ", ".join(lua_value(x) for x in v) + "}"


def lua_names(values: dict[int, str]) -> str:
    return "{" + ", ".join(f"[{k}] = {lua_str(v)}" for k, v in sorted(values.items())) + "}"


def lua_set(values) -> str:
    return "{" + ", ".join(f"[{v}] = true" for v in sorted(values)) + "}"


def ident(abbrev: str) -> str:
    return "F." + abbrev[len(PROTO) + 1:].replace(".", "_")


# --- fields --------------------------------------------------------------------------------

@dataclass
class LuaField:
    abbrev: str
    ctor: str
    width: int = 0
    display: str = ""
    flags: FlagSet | None = None


class FieldSet:
    """Every ProtoField of the dissector, in declaration order, without duplicates."""

    def __init__(self):
        self.fields: dict[str, LuaField] = {}
        self.bits: dict[str, list[str]] = {}     # flags abbrev -> Lua {bool field, mask} pairs

    def add(self, abbrev: str, ctor: str, **kw) -> str:
        if abbrev not in self.fields:
            self.fields[abbrev] = LuaField(abbrev, ctor, **kw)
        return ident(abbrev)

    def table_field(self, section: str, fd: Field) -> str:
        abbrev = filter_name(section, fd.name)
        old = self.fields.get(abbrev)
        if old is not None:
            if (old.width, old.display, old.flags) != (fd.width, fd.display, fd.flags):
                raise ValueError(f"{abbrev}: conflicting definitions in the protocol tables")
            return ident(abbrev)
        base = "base.HEX" if fd.display == "hex" else "base.DEC"
        vs = names_var(fd.names) if fd.names is not None else "nil"
        self.add(abbrev, f"ProtoField.uint{fd.width * 8}({lua_str(abbrev)}, {lua_str(fd.title)}, "
                 f"{base}, {vs})", width=fd.width, display=fd.display, flags=fd.flags)
        if fd.flags is not None:
            bits = []
            for mask, name in fd.flags.bits.items():
                assert mask & (mask - 1) == 0, f"{abbrev}.{name}: not a single bit"
                title = fd.flags.titles.get(mask, name)
                b_abbrev = f"{abbrev}.{name}"
                var = self.add(b_abbrev, f"ProtoField.bool({lua_str(b_abbrev)}, "
                               f"{lua_str(title)}, {fd.width * 8}, nil, 0x{mask:x})")
                bits.append(f"{{{var}, 0x{mask:x}}}")
            self.bits[abbrev] = bits
        return ident(abbrev)


HEADER_FIELDS = (
    ("magic", "ProtoField.uint8(\"dcp.magic\", \"Magic\", base.HEX, MAGIC_NAMES)"),
    ("opcode", "ProtoField.uint8(\"dcp.opcode\", \"Opcode\", base.HEX, OPCODE_NAMES)"),
    ("server_opcode",
     "ProtoField.uint8(\"dcp.server_opcode\", \"Server opcode\", base.HEX, SERVER_OPCODE_NAMES)"),
    ("keylen", "ProtoField.uint16(\"dcp.keylen\", \"Key length\", base.DEC)"),
    ("framing_len", "ProtoField.uint8(\"dcp.framing_len\", \"Framing extras length\", base.DEC)"),
    ("extlen", "ProtoField.uint8(\"dcp.extlen\", \"Extras length\", base.DEC)"),
    ("datatype", "ProtoField.uint8(\"dcp.datatype\", \"Datatype\", base.HEX)"),
)
BODY_FIELDS = (
    ("vbucket", "ProtoField.uint16(\"dcp.vbucket\", \"vBucket\", base.DEC)"),
    ("status", "ProtoField.uint16(\"dcp.status\", \"Status\", base.HEX, STATUS_NAMES)"),
    ("bodylen", "ProtoField.uint32(\"dcp.bodylen\", \"Total body length\", base.DEC)"),
    ("opaque", "ProtoField.uint32(\"dcp.opaque\", \"Opaque\", base.HEX)"),
    ("cas", "ProtoField.uint64(\"dcp.cas\", \"CAS\", base.DEC)"),
    ("frame_info", "ProtoField.bytes(\"dcp.frame_info\", \"Frame info\")"),
    ("frame_info.id", "ProtoField.uint16(\"dcp.frame_info.id\", \"Frame info id\", base.DEC)"),
    ("frame_info.len", "ProtoField.uint16(\"dcp.frame_info.len\", \"Frame info length\", base.DEC)"),
    ("frame_info.data", "ProtoField.bytes(\"dcp.frame_info.data\", \"Frame info data\")"),
    ("stream_id", "ProtoField.uint16(\"dcp.stream_id\", \"Stream id\", base.DEC)"),
    ("extras", "ProtoField.bytes(\"dcp.extras\", \"Extras\")"),
    ("key", "ProtoField.string(\"dcp.key\", \"Key\")"),
    ("collection_id", "ProtoField.uint32(\"dcp.collection_id\", \"Collection ID\", base.HEX)"),
    ("collection_name", "ProtoField.string(\"dcp.collection_name\", \"Collection\")"),
    ("value_len", "ProtoField.int32(\"dcp.value_len\", \"Value length\", base.DEC)"),
    ("value", "ProtoField.bytes(\"dcp.value\", \"Value\")"),
    ("garbage", "ProtoField.bytes(\"dcp.garbage\", \"Not MCBP (skipped to the end of the segment)\")"),
    ("failover_log.count", "ProtoField.uint32(\"dcp.failover_log.count\", \"Failover log entries\", "
     "base.DEC)"),
    ("by_seqno", "ProtoField.uint64(\"dcp.by_seqno\", \"Seqno (any opcode)\", base.DEC)"),
    ("response_in", "ProtoField.framenum(\"dcp.response_in\", \"Response in\", base.NONE)"),
    ("response_to", "ProtoField.framenum(\"dcp.response_to\", \"Request in\", base.NONE)"),
    ("time", "ProtoField.relative_time(\"dcp.time\", \"Time since request\")"),
)


def names_var(vn: ValueNames) -> str:
    return "VS_" + vn.name.upper()


def _table_fields():
    for op in DCP_OPCODES:
        for shape in (op.request, op.response):
            for lay in shape.extras + shape.values:
                yield from lay.fields


# --- sections ------------------------------------------------------------------------------

def value_strings() -> list[str]:
    out = ["-- Value strings",
           f"local MAGIC_NAMES = {lua_names(MAGICS.values)}",
           f"local OPCODE_NAMES = {lua_names(OPCODE_NAMES)}",
           f"local SERVER_OPCODE_NAMES = {lua_names(SERVER_OPCODES.values)}",
           f"local STATUS_NAMES = {lua_names(STATUS.values)}",
           f"local REQUEST_FRAME_INFO_NAMES = {lua_names(REQUEST_FRAME_INFOS.values)}",
           f"local RESPONSE_FRAME_INFO_NAMES = {lua_names(RESPONSE_FRAME_INFOS.values)}"]
    seen = set()
    for fd in _table_fields():
        if fd.names is not None and fd.names.name not in seen:
            seen.add(fd.names.name)
            out.append(f"local {names_var(fd.names)} = {lua_names(fd.names.values)}")
    out += ["", "-- Flag texts (as FlagSet.text)"]
    flag_sets = {DATATYPE.name: DATATYPE}
    for fd in _table_fields():
        if fd.flags is not None:
            flag_sets.setdefault(fd.flags.name, fd.flags)
    for flags in flag_sets.values():
        bits = ", ".join(f"{{{mask}, {lua_str(name)}}}" for mask, name in flags.bits.items())
        out.append(f"local FLAGBITS_{flags.name.upper()} = {{{bits}}}")
        out.append(f"local function flagtext_{flags.name}(v) return flagtext("
                   f"FLAGBITS_{flags.name.upper()}, {flags.mask}, v) end")
    return out


def constants() -> list[str]:
    sizes = {k: ("+" if v == "+" else frozenset(v)) for k, v in REQUEST_FRAME_INFO_SIZES.items()}
    return [
        "", "-- Protocol constants",
        f"local REQUEST_MAGIC = {lua_set(REQUEST_MAGICS)}",
        f"local SERVER_MAGIC = {lua_set(SERVER_MAGICS)}",
        f"local FLEX_MAGIC = {lua_set(FLEXIBLE_MAGICS)}",
        f"local HEADER_SIZE, MAX_FRAME_SIZE, STREAM_ID_INFO = {HEADER_SIZE}, {MAX_FRAME_SIZE}, "
        f"{FRAME_INFO_STREAM_ID}",
        "local FRAME_INFO_SIZES = {" + ", ".join(f"[{k}] = {lua_value(v)}" for k, v in sizes.items()) + "}",
        f"local FRAME_INFOS_NOT_FOR_DCP = {lua_set(FRAME_INFOS_NOT_FOR_DCP)}",
        f"local FEATURE_COLLECTIONS = {FEATURE_COLLECTIONS}",
        "local DATATYPE_FEATURES = {" + ", ".join(f"[{k}] = {v}" for k, v in DATATYPE_FEATURES.items()) + "}",
        f"local OPEN_PRODUCER, OPEN_DELETE_TIMES = {DCP_OPEN_FLAGS.bit('producer')}, "
        f"{DCP_OPEN_FLAGS.bit('include_delete_times')}",
        f"local MAX_KEY_LENGTH, MAX_COLLECTIONS_KEY_LENGTH = {MAX_KEY_LENGTH}, {MAX_COLLECTIONS_KEY_LENGTH}",
        f"local MAX_COLLECTIONS_LOGICAL_KEY_LENGTH = {MAX_COLLECTIONS_LOGICAL_KEY_LENGTH}",
        f"local MAX_XATTR_KEY_LENGTH, MAX_SYSTEM_XATTR_BYTES = {MAX_XATTR_KEY_LENGTH}, "
        f"{MAX_SYSTEM_XATTR_BYTES}",
    ]


def fields(fs: FieldSet) -> list[str]:
    dt_bits = []
    for mask, name in DATATYPE.bits.items():
        assert mask & (mask - 1) == 0, f"dcp.datatype.{name}: not a single bit"
        var = fs.add(f"dcp.datatype.{name}", f"ProtoField.bool(\"dcp.datatype.{name}\", "
                     f"{lua_str(name.upper())}, 8, nil, 0x{mask:x})")
        dt_bits.append(f"{{{var}, 0x{mask:x}}}")
    out = ["", "-- Fields", "local F = {}"]
    out += [f"{ident(f.abbrev)} = {f.ctor}" for f in fs.fields.values()]
    out.append(f"local DATATYPE_BITS = {{{', '.join(dt_bits)}}}")
    out.append("dcp.fields = {" + ", ".join(ident(a) for a in fs.fields) + "}")
    return out


def expert_rule_ids() -> list[str]:
    return sorted(r.id for r in RULES.values() if r.single_pdu) + list(FRAMING_RULES)


def experts() -> list[str]:
    out = ["", "-- Expert infos: one per single-message rule of the analyzer, plus framing problems",
           "local EXPERTS = {}"]
    ids = expert_rule_ids()
    for rid in ids:
        r = RULES[rid]
        group = "expert.group.MALFORMED" if rid in MALFORMED_RULES else "expert.group.PROTOCOL"
        out.append(f"EXPERTS[{lua_str(rid)}] = ProtoExpert.new("
                   f"{lua_str('dcp.expert.' + rid.replace('-', '_'))}, "
                   f"{lua_str('[' + rid + '] ' + r.title)}, {group}, {SEVERITY[r.severity]})")
    out += [
        "local e_truncated = ProtoExpert.new(\"dcp.expert.truncated\", \"PDU cut by the capture "
        "(snap length)\", expert.group.UNDECODED, expert.severity.NOTE)",
        "local e_internal = ProtoExpert.new(\"dcp.expert.internal\", \"dissector error\", "
        "expert.group.UNDECODED, expert.severity.ERROR)",
        "do local list = {e_truncated, e_internal}",
        "  for _, id in ipairs({" + ", ".join(lua_str(i) for i in ids) + "}) do "
        "list[#list + 1] = EXPERTS[id] end",
        "  dcp.experts = list end",
    ]
    return out


def rule_severities() -> list[str]:
    """Every rule's severity, for the findings that packet comments carry."""
    sev = {ERROR: "error", WARNING: "warning", INFO: "info"}
    return ["", "-- The severity of every rule of the analyzer (findings in packet comments)",
            "local RULE_SEVERITY = {" + ", ".join(
                f"[{lua_str(r.id)}] = {lua_str(sev[r.severity])}"
                for r in sorted(RULES.values(), key=lambda r: r.id)) + "}"]


def _check_lua(c: Check) -> str:
    when = ", ".join(lua_value(cond) for cond in c.when)
    return (f"{{rule = {lua_str(c.rule)}, text = {lua_str(c.text)}, test = {lua_value(c.test)}, "
            f"when = {{{when}}}}}")


def _layout_lua(op: Opcode, lay: Layout, fs: FieldSet, keep: set[str] | None, what: str) -> str:
    """One layout as a Lua table; ``keep`` names the fields whose values the checks, the Info
    summary or a ``when`` condition read (None: all)."""
    sec = filter_section(op, lay)
    parts = []
    for fd in sorted(lay.fields, key=lambda f: f.offset):
        var = fs.table_field(sec, fd)
        abbrev = filter_name(sec, fd.name)
        bits = fs.bits.get(abbrev)
        bits_lua = "{" + ", ".join(bits) + "}" if bits else "nil"
        kept = keep is None or fd.name in keep
        text = f"flagtext_{fd.flags.name}" if fd.flags is not None else "nil"
        parts.append(f"{{name = {lua_str(fd.name)}, offset = {fd.offset}, width = {fd.width}, "
                     f"field = {var}, bits = {bits_lua}, kept = {lua_value(kept)}, text = {text}}}")
    when = ", ".join(f"{{{lua_str(k)}, {v}}}" for k, v in lay.when)
    rep = lua_str(lay.repeated) if lay.repeated else "nil"
    extra = "".join(f", {k} = {lua_value(v)}" for k, v in (
        ("value", lay.value.value if lay.value else None), ("context", lay.context),
        ("rule", lay.rule), ("note", lay.note)) if v is not None)
    return (f"{{label = {lua_str(lay.label)}, size = {lay.size}, when = {{{when}}}, rep = {rep}, "
            f"text = {lua_str(f'{what} ({lay.label}, {lay.size} bytes)')}{extra},\n"
            f"      fields = {{" + ",\n        ".join(parts) + "}}")


def _kept_fields(op: Opcode, shape: Shape) -> set[str]:
    keep = {"start_seqno", "end_seqno", "snap_start_seqno", "snap_end_seqno", "vbucket_uuid",
            "rollback_seqno", "flags", "reason", op.seqno_field}
    keep |= {k for lay in shape.extras + shape.values for k, _ in lay.when}
    for c in shape.checks:
        keep |= c.fields
    return keep


def _shape_lua(op: Opcode, request: bool, fs: FieldSet) -> str:
    shape: Shape = op.request if request else op.response
    keep = _kept_fields(op, shape)
    ext = ",\n    ".join(_layout_lua(op, lay, fs, keep, "Extras") for lay in shape.extras)
    val = ",\n    ".join(_layout_lua(op, lay, fs, keep, "Value") for lay in shape.values)
    checks = ",\n    ".join(_check_lua(c) for c in shape.checks)
    sizes = sorted({lay.size for lay in shape.extras}) or [0]
    props = {"size_set": frozenset(sizes), "sizes_text": " or ".join(map(str, sizes)),
             "extras_context": any(lay.context for lay in shape.extras),
             "validated": shape.validated, "key": shape.key.value, "value": shape.value.value,
             "value_context": shape.value_context, "value_min": shape.value_min,
             "cas": shape.cas.value, "datatypes": shape.datatypes,
             "document_key": shape.document_key, "keep_value": shape.value_kind == "json",
             "text_value": shape.value_kind in ("json", "text")}
    props_lua = ", ".join(f"{k} = {lua_value(v)}" for k, v in props.items() if v is not None)
    return (f"{{extras_sizes = {lua_str(repr(shape.extras_sizes))}, {props_lua},\n"
            f"    extras = {{{ext}}},\n    values = {{{val}}},\n    checks = {{{checks}}}}}")


def shapes(fs: FieldSet) -> list[str]:
    out = []
    for op in DCP_OPCODES:
        layout_var = "nil"
        if op.section:
            abbrev = filter_name(op.section, "layout")
            layout_var = fs.add(abbrev, f"ProtoField.string({lua_str(abbrev)}, \"Layout\")")
        req, rsp = _shape_lua(op, True, fs), _shape_lua(op, False, fs)
        seq = lua_str(op.seqno_field) if op.seqno_field else "nil"
        rejects = lua_str(op.server_rejects) if op.server_rejects else "nil"
        out.append(f"SHAPES[0x{op.code:02x}] = {{name = {lua_str(op.name)}, layout_field = {layout_var}, "
                   f"seqno = {seq}, server_rejects = {rejects}, document = {lua_value(op.document)}, "
                   f"item = {lua_value(op.item)}, stream = {lua_value(op.stream)}, "
                   f"vbucket = {lua_value(op.per_vbucket)},"
                   f"\n  req = {req},\n  rsp = {rsp}}}")
    return out


def header_unpack() -> str:
    """Lua that reads the header fields from ``head`` (its 24 bytes), from the header tables."""
    names = [f"h{i}" for i in range(1, HEADER_SIZE + 1)]
    lines = [f"local {', '.join(names)} = sbyte(head, 1, {HEADER_SIZE})"]

    def expr(f) -> str:
        parts = names[f.offset:f.offset + f.width]
        text = parts[0]
        for p in parts[1:]:
            text = f"({text}) * 256 + {p}"
        return text

    for f in CLASSIC_HEADER:
        if f.width == 8:
            lines.append(f"local {f.name}_zero = " + " + ".join(names[f.offset:f.offset + 8]) + " == 0")
        else:
            lines.append(f"local {f.name} = {expr(f)}")
    flex = [f for f in FLEXIBLE_HEADER if f not in CLASSIC_HEADER]
    lines.append("local " + ", ".join(f.name for f in flex if f.name not in {c.name for c in CLASSIC_HEADER})
                 + " = 0")
    lines.append("if FLEX_MAGIC[magic] then " + " ".join(f"{f.name} = {expr(f)}" for f in flex) + " end")
    return "\n  ".join(lines)


def render() -> str:
    """The complete Lua dissector source."""
    fs = FieldSet()
    for name, ctor in HEADER_FIELDS + BODY_FIELDS:
        fs.add(f"dcp.{name}", ctor)
    shape_lines = shapes(fs)           # registers the table fields, before they are declared
    tables = (value_strings() + constants() + fields(fs) + experts() + rule_severities()
              + ["", "-- Shapes: layouts (extras by size, value by `when` and size) and "
                 "constraints per opcode", "local SHAPES = {}"] + shape_lines)
    source = resources.files(__package__)
    runtime, checks = (source.joinpath(name).read_text() for name in ("runtime.lua", "checks.lua"))
    checks = checks.split("\n\n", 1)[1]       # without its file header
    return (runtime.replace("@PROTO_TITLE@", lua_str(PROTO_TITLE))
            .replace("--@TABLES@\n", "\n".join(tables) + "\n")
            .replace("--@CHECKS@\n", checks)
            .replace("@HEADER_UNPACK@", header_unpack())
            .replace("@PORTS@", ",".join(str(p) for p in DCP_PORTS))
            .replace("@TLS_PORTS@", ",".join(str(p) for p in TLS_PORTS)))
