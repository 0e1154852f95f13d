"""Render ``lua/dcpdissect.lua`` (a Wireshark 4.0 / Lua 5.2 dissector) from the protocol tables.

Fields, value strings, layouts and shapes come from :mod:`dcpdissect.protocol`; the
expert infos come from the single-PDU rules of :mod:`dcpdissect.analysis.structural`,
each implemented by one Lua snippet in :data:`RULE_LUA`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import engine as _engine  # noqa: F401  (registers the framing rules)
from ..analysis.rules import ERROR, INFO, RULES, WARNING
from ..protocol import (
    CACHE_TRANSFER_COMPANIONS,
    DATATYPE,
    DCP_OPCODES,
    DCP_PORTS,
    FLEXIBLE_MAGICS,
    FRAME_INFO_STREAM_ID,
    HEADER_SIZE,
    MAGICS,
    MAX_FRAME_SIZE,
    OPCODE_NAMES,
    REQUEST_FRAME_INFOS,
    REQUEST_MAGICS,
    RESPONSE_FRAME_INFOS,
    SERVER_MAGICS,
    SERVER_OPCODES,
    SNAPSHOT_FLAGS,
    STATUS,
    STREAM_FLAG_CACHE_TRANSFER,
    STREAM_FLAG_NO_VALUE,
    STREAM_FLAGS,
    STREAM_FLAGS_ALLOWED,
    Field,
    FlagSet,
    Layout,
    Shape,
    ValueNames,
)

PROTO = "dcp"
PROTO_TITLE = "Couchbase DCP (dcpdissect)"

# Short section name per opcode: its extras/value fields are named dcp.<section>.<field>.
SECTIONS = {
    0x50: "open", 0x51: "add_stream", 0x53: "stream_req", 0x54: "get_failover_log",
    0x55: "stream_end", 0x56: "snapshot", 0x57: "mutation", 0x58: "deletion",
    0x59: "expiration", 0x5B: "set_vbucket_state", 0x5D: "buffer_ack", 0x5F: "system_event",
    0x60: "prepare", 0x61: "seqno_ack", 0x62: "commit", 0x63: "abort",
    0x64: "seqno_advanced", 0x65: "oso_snapshot", 0x96: "get_failover_log",
}
# Layouts whose fields live elsewhere: repeated layouts use their list name as the
# section; "" puts the fields at the top level (dcp.rollback_seqno).
LAYOUT_SECTIONS = {"rollback": ""}

SEVERITY = {ERROR: "expert.severity.ERROR", WARNING: "expert.severity.WARN",
            INFO: "expert.severity.NOTE"}
MALFORMED_RULES = {"header-invariant", "framing-extras-encoding"}
# Framing rules of the analyzer that the segment splitter can raise by itself.
FRAMING_RULES = ("unknown-magic", "frame-too-large")


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


def lua_names(values: dict[int, str]) -> str:
    return "{" + ", ".join(f"[{k}] = {lua_str(v)}" for k, v in sorted(values.items())) + "}"


def lua_set(values) -> str:
    return "{" + ", ".join(f"[{v}] = true" for v in sorted(values)) + "}"


def ident(abbrev: str) -> str:
    return "F." + abbrev[len(PROTO) + 1:].replace(".", "_")


# --- single-PDU rules ----------------------------------------------------------------------
# Each snippet runs inside a check function with ``m`` (the message), ``f`` (decoded
# fields), ``add(rule_id, text)`` and the helpers of the rendered file in scope. A
# snippet may ``return`` to stop that opcode's checks, as the Python checker does.
RULE_LUA: dict[str, str] = {
    "header-invariant": """
if m.k_end > m.bodylen then
  add("header-invariant", fmt("framing extras %d + extras %d + key %d exceed body length %d",
      m.framing_len, m.extlen, m.keylen, m.bodylen))
end""",
    "framing-extras-encoding": """
if m.frame_error then add("framing-extras-encoding", "bad framing extras: " .. m.frame_error) end""",
    "unknown-opcode": """
if not m.spec or SERVER_MAGIC[m.magic] then
  if not SERVER_MAGIC[m.magic] and not OPCODE_NAMES[m.opcode] then
    add("unknown-opcode", fmt("opcode 0x%02x is not a known opcode", m.opcode))
  end
  return
end""",
    "marker-extras-length": """
if m.extlen ~= 20 and m.extlen ~= 1 then
  add("marker-extras-length", fmt("extras length %d (V1 is 20, V2 is 1)", m.extlen))
  return
end""",
    "marker-key": """
if m.keylen ~= 0 then add("marker-key", fmt("key of %d bytes on a snapshot marker", m.keylen)) end""",
    "marker-datatype": """
if m.datatype ~= 0 then add("marker-datatype", fmt("datatype 0x%02x, must be RAW", m.datatype)) end""",
    "marker-v1-value": """
if m.extlen == 20 and m.value_len ~= 0 then
  add("marker-v1-value", fmt("V1 marker with a %d-byte value", m.value_len))
end""",
    "marker-version": """
if m.extlen == 1 and f.version ~= 0 and f.version ~= 2 then
  add("marker-version", fmt("version byte %s%s", f.version == nil and "None" or tostring(f.version),
      f.version == 1 and " (the removed V2.1)" or ""))
  return
end""",
    "marker-v22-documented-44": """
if m.extlen == 1 and m.layout == "V2.2-doc44" then
  add("marker-v22-documented-44", "V2.2 value of 44 bytes as the spec document lists it; " ..
      "servers send and accept 52 bytes (purge seqno then HPS)")
end""",
    "marker-value-length": """
if m.extlen == 1 and m.layout ~= "V2.2-doc44" and m.layout ~= "V2.0" and m.layout ~= "V2.2" then
  add("marker-value-length", fmt("V2 version %d value of %d bytes, expected %d", f.version,
      m.value_len, f.version == 0 and 36 or 52))
  return
end""",
    "marker-unknown-flags": """
if band(flags, @snap_unknown@) ~= 0 then
  add("marker-unknown-flags", fmt("unknown flag bits 0x%x", band(flags, @snap_unknown@)))
end""",
    "marker-memory-disk": """
local kind = band(flags, @memory_disk@)
if kind == 0 or kind == @memory_disk@ then
  add("marker-memory-disk", fmt("flags %s: %s Memory and Disk", flagtext_snapshot_flags(flags),
      kind == 0 and "neither" or "both"))
end""",
    "marker-start-after-end": """
if start > stop then add("marker-start-after-end", fmt("start %s > end %s", tostring(start), tostring(stop))) end""",
    "marker-hcs-hps-without-disk": """
if not disk and (nonzero(hcs) or nonzero(hps)) then
  add("marker-hcs-hps-without-disk", fmt("HCS %s / HPS %s set without Disk", or0(hcs), or0(hps)))
end""",
    "marker-mvs-beyond-end": """
if mvs and mvs > stop then
  add("marker-mvs-beyond-end", fmt("max visible seqno %s > end %s", tostring(mvs), tostring(stop)))
end""",
    "marker-hcs-beyond-end": """
if hcs and hcs > stop and disk then
  add("marker-hcs-beyond-end", fmt("high completed seqno %s > end %s", tostring(hcs), tostring(stop)))
end""",
    "marker-hps-out-of-range": """
if nonzero(hps) and (hps < start or hps > stop) then
  add("marker-hps-out-of-range", fmt("high prepared seqno %s outside [%s, %s]", tostring(hps),
      tostring(start), tostring(stop)))
end""",
    "marker-purge-beyond-end": """
if purge and purge > stop then
  add("marker-purge-beyond-end", fmt("purge seqno %s > end %s", tostring(purge), tostring(stop)))
end""",
    "add-stream-extras-length": """
if m.extlen ~= 4 then add("add-stream-extras-length", fmt("extras length %d, must be 4", m.extlen)) end""",
    "add-stream-key-or-value": """
if m.keylen ~= 0 or m.value_len ~= 0 then
  add("add-stream-key-or-value", fmt("key %d bytes, value %d bytes", m.keylen, m.value_len))
end""",
    "add-stream-datatype": """
if m.datatype ~= 0 then add("add-stream-datatype", fmt("datatype 0x%02x, must be RAW", m.datatype)) end""",
    "stream-flags-no-value": """
if band(f.flags, @no_value@) ~= 0 then
  add("stream-flags-no-value", "flag 0x08 NoValue is no longer used (use DcpOpen NoValue)")
end""",
    "stream-flags-unknown": """
if band(f.flags, @stream_unknown@) ~= 0 then
  add("stream-flags-unknown", fmt("invalid flag bits 0x%x", band(f.flags, @stream_unknown@)))
end""",
    "stream-flags-cache-transfer": """
if band(f.flags, @cache_transfer@) ~= 0 then
  local others = band(f.flags, @ct_others@)
  if others ~= 0 then
    add("stream-flags-cache-transfer", "cache_transfer with " .. flagtext_stream_flags(others))
  end
end""",
    "add-stream-response-extras": """
if m.extlen ~= 4 then
  add("add-stream-response-extras", fmt("response extras length %d, must be 4 (the new stream opaque)", m.extlen))
end""",
    "stream-request-extras-length": """
if m.extlen ~= 48 then
  add("stream-request-extras-length", fmt("extras length %d, must be 48", m.extlen))
  return
end""",
    "stream-request-key": """
if m.keylen ~= 0 then add("stream-request-key", fmt("key of %d bytes", m.keylen)) end""",
    "stream-request-datatype": """
if m.datatype ~= 0 then add("stream-request-datatype", fmt("datatype 0x%02x, must be RAW", m.datatype)) end""",
    "stream-request-start-after-end": """
if start > stop then
  add("stream-request-start-after-end", fmt("start %s > end %s", tostring(start), tostring(stop)))
end""",
    "stream-request-snapshot-range": """
if s0 > start or start > s1 then
  local sig = ""
  if s0 == start + 1 then
    sig = " (signature of adopting a marker before its first item, JDCP-95/241)"
  elseif s1 < start then
    sig = " (signature of snap_end < start, MB-11502)"
  end
  add("stream-request-snapshot-range", fmt("snapshot [%s, %s] does not contain start %s%s",
      tostring(s0), tostring(s1), tostring(start), sig))
end""",
    "stream-request-uuid-zero": """
if uuid == U0 and start > U0 then
  add("stream-request-uuid-zero", fmt("vbucket uuid 0 with start %s: the server must roll back to 0",
      tostring(start)))
end""",
    "failover-log-length": """
if m.status == 0 and (m.value_len == 0 or m.value_len % 16 ~= 0) then
  add("failover-log-length", fmt("success value of %d bytes", m.value_len))""",
    "rollback-value-length": """
elseif m.status == @rollback@ and m.opcode == 0x53 and m.value_len ~= 8 then
  add("rollback-value-length", fmt("rollback value of %d bytes", m.value_len))
end""",
}

# Shared Lua between the rule snippets (named "@..." in the check lists below).
LUA_BLOCKS: dict[str, str] = {
    "@stop_if_header_invalid": "if m.k_end > m.bodylen then return end",
    "@stream_flags": "stream_flag_checks(m, f, add)",
    "@marker_values": """
if f.flags == nil then return end
local flags, start, stop = f.flags, f.start_seqno or U0, f.end_seqno or U0
local mvs, hcs = f.max_visible_seqno, f.high_completed_seqno
local hps, purge = f.high_prepared_seqno, f.purge_seqno
local disk = band(flags, @disk@) ~= 0""",
    "@stream_request_values": """
local start, stop = f.start_seqno, f.end_seqno
local s0, s1, uuid = f.snap_start_seqno, f.snap_end_seqno, f.vbucket_uuid
if start == nil then return end""",
}

# Which snippets run, in order, for the whole message and per (opcode, is_request).
GENERIC_CHECKS = ("header-invariant", "framing-extras-encoding", "unknown-opcode",
                  "@stop_if_header_invalid")
STREAM_FLAG_CHECKS = ("stream-flags-no-value", "stream-flags-unknown", "stream-flags-cache-transfer")
OPCODE_CHECKS = {
    (0x56, True): ("marker-extras-length", "marker-key", "marker-datatype", "marker-v1-value",
                   "marker-version", "marker-v22-documented-44", "marker-value-length",
                   "@marker_values", "marker-unknown-flags", "marker-memory-disk",
                   "marker-start-after-end", "marker-hcs-hps-without-disk", "marker-mvs-beyond-end",
                   "marker-hcs-beyond-end", "marker-hps-out-of-range", "marker-purge-beyond-end"),
    (0x51, True): ("add-stream-extras-length", "add-stream-key-or-value", "add-stream-datatype",
                   "@stream_flags"),
    (0x51, False): ("add-stream-response-extras",),
    (0x53, True): ("stream-request-extras-length", "stream-request-key", "stream-request-datatype",
                   "@stream_flags", "@stream_request_values", "stream-request-start-after-end",
                   "stream-request-snapshot-range", "stream-request-uuid-zero"),
    (0x53, False): ("failover-log-length", "rollback-value-length"),
    (0x54, False): ("failover-log-length", "rollback-value-length"),
    (0x96, False): ("failover-log-length", "rollback-value-length"),
}


def _rule_params() -> dict[str, int]:
    return {
        "disk": 0x02, "memory_disk": 0x03, "snap_unknown": 0xFFFFFFFF & ~SNAPSHOT_FLAGS.mask,
        "no_value": STREAM_FLAG_NO_VALUE,
        "stream_unknown": 0xFFFFFFFF & ~(STREAM_FLAGS_ALLOWED | STREAM_FLAG_NO_VALUE),
        "cache_transfer": STREAM_FLAG_CACHE_TRANSFER,
        "ct_others": STREAM_FLAGS.mask & ~(STREAM_FLAG_CACHE_TRANSFER | CACHE_TRANSFER_COMPANIONS),
        "rollback": 0x23,
    }


def _snippet(name: str) -> str:
    """A rule's Lua (or a shared block), indented for a check function."""
    text = (LUA_BLOCKS[name] if name.startswith("@") else RULE_LUA[name]).strip("\n")
    for param, value in _rule_params().items():
        text = text.replace(f"@{param}@", str(value))
    head = "" if name.startswith("@") else f"  -- {name}\n"
    return head + "\n".join("  " + line for line in text.splitlines())


def implemented_rules() -> set[str]:
    """Rule ids whose Lua snippet is rendered into the dissector."""
    used = set(GENERIC_CHECKS) | set(STREAM_FLAG_CHECKS)
    for ids in OPCODE_CHECKS.values():
        used |= {i for i in ids if not i.startswith("@")}
    return used & set(RULE_LUA)


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

    def table_field(self, section: str, fd: Field, names_var: dict[str, str]) -> str:
        abbrev = f"{PROTO}.{section}.{fd.name}" if section else f"{PROTO}.{fd.name}"
        old = self.fields.get(abbrev)
        if old is not None:
            if (old.width, old.display, old.flags) != (fd.width, fd.display, fd.flags):
                raise ValueError(f"{abbrev}: conflicting definitions in the protocol tables")
            return ident(abbrev)
        base = "base.HEX" if fd.display == "hex" else "base.DEC"
        vs = "nil"
        if fd.names is not None:
            vs = names_var[fd.names.name]
        ctor = (f"ProtoField.uint{fd.width * 8}({lua_str(abbrev)}, {lua_str(fd.title)}, "
                f"{base}, {vs})")
        self.add(abbrev, ctor, width=fd.width, display=fd.display, flags=fd.flags)
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


def _value_name_tables() -> list[ValueNames]:
    seen: dict[str, ValueNames] = {}
    for op in DCP_OPCODES:
        for shape in (op.request, op.response):
            for lay in shape.extras + shape.values:
                for fd in lay.fields:
                    if fd.names is not None:
                        seen.setdefault(fd.names.name, fd.names)
    return list(seen.values())


def _flag_sets() -> list[FlagSet]:
    seen: dict[str, FlagSet] = {DATATYPE.name: DATATYPE}
    for op in DCP_OPCODES:
        for shape in (op.request, op.response):
            for lay in shape.extras + shape.values:
                for fd in lay.fields:
                    if fd.flags is not None:
                        seen.setdefault(fd.flags.name, fd.flags)
    return list(seen.values())


def layout_section(lay: Layout, opcode_section: str) -> str:
    """Section of a layout's fields (dcp.<section>.<field>; "" = top level)."""
    return LAYOUT_SECTIONS.get(lay.label, lay.repeated or opcode_section)


def field_abbrevs(opcode: int, request: bool) -> dict[str, str]:
    """Field name -> display-filter name, for every layout field of one opcode direction."""
    from ..protocol import OPCODES
    op = OPCODES.get(opcode)
    if op is None:
        return {}
    shape = op.request if request else op.response
    out = {}
    for lay in shape.extras + shape.values:
        sec = layout_section(lay, SECTIONS.get(opcode, ""))
        for fd in lay.fields:
            out.setdefault(fd.name, f"{PROTO}.{sec}.{fd.name}" if sec else f"{PROTO}.{fd.name}")
    return out


def _layout_lua(lay: Layout, section: str, fs: FieldSet, names_var: dict[str, str],
                keep: set[str] | None, what: str) -> str:
    """One layout as a Lua table; ``keep`` names the fields whose values the checks,
    the Info summary or a ``when`` condition read (None: all)."""
    sec = layout_section(lay, section)
    parts = []
    for fd in sorted(lay.fields, key=lambda f: f.offset):
        var = fs.table_field(sec, fd, names_var)
        abbrev = f"{PROTO}.{sec}.{fd.name}" if sec else f"{PROTO}.{fd.name}"
        bits = fs.bits.get(abbrev)
        bits_lua = "{" + ", ".join(bits) + "}" if bits else "nil"
        kept = "true" if keep is None or fd.name in keep else "false"
        text = f"flagtext_{fd.flags.name}" if fd.flags is not None else "nil"
        parts.append(f"{{{lua_str(fd.name)}, {fd.offset}, {fd.width}, {var}, {bits_lua}, {kept}, "
                     f"{text}}}")
    when = ", ".join(f"{{{lua_str(k)}, {v}}}" for k, v in lay.when)
    rep = lua_str(lay.repeated) if lay.repeated else "nil"
    text = f"{what} ({lay.label}, {lay.size} bytes)"
    return (f"{{label = {lua_str(lay.label)}, size = {lay.size}, when = {{{when}}}, rep = {rep}, "
            f"text = {lua_str(text)},\n"
            f"      fields = {{" + ",\n        ".join(parts) + "}}")


def _shape_lua(op, request: bool, section: str, fs: FieldSet, names_var: dict[str, str]) -> str:
    shape: Shape = op.request if request else op.response
    keep = None
    if (op.code, request) not in OPCODE_CHECKS:
        keep = {"start_seqno", "end_seqno", "rollback_seqno", op.seqno_field}
        keep |= {k for lay in shape.extras + shape.values for k, _ in lay.when}
    ext = ",\n    ".join(_layout_lua(lay, section, fs, names_var, keep, "Extras")
                          for lay in shape.extras)
    val = ",\n    ".join(_layout_lua(lay, section, fs, names_var, keep, "Value")
                          for lay in shape.values)
    sizes = lua_str(repr(shape.extras_sizes))
    return f"{{extras_sizes = {sizes},\n    extras = {{{ext}}},\n    values = {{{val}}}}}"


# --- rendering -----------------------------------------------------------------------------

def render() -> str:
    """The complete Lua dissector source."""
    fs = FieldSet()
    out: list[str] = []
    w = out.append
    w(HEAD.replace("@PROTO_TITLE@", lua_str(PROTO_TITLE)))

    # value strings and flag texts
    names_var: dict[str, str] = {}
    w("-- Value strings")
    w(f"local MAGIC_NAMES = {lua_names(MAGICS.values)}")
    w(f"local OPCODE_NAMES = {lua_names(OPCODE_NAMES)}")
    w(f"local SERVER_OPCODE_NAMES = {lua_names(SERVER_OPCODES.values)}")
    w(f"local STATUS_NAMES = {lua_names(STATUS.values)}")
    w(f"local REQUEST_FRAME_INFO_NAMES = {lua_names(REQUEST_FRAME_INFOS.values)}")
    w(f"local RESPONSE_FRAME_INFO_NAMES = {lua_names(RESPONSE_FRAME_INFOS.values)}")
    for vn in _value_name_tables():
        var = names_var[vn.name] = "VS_" + vn.name.upper()
        w(f"local {var} = {lua_names(vn.values)}")
    w(f"local REQUEST_MAGIC = {lua_set(REQUEST_MAGICS)}")
    w(f"local SERVER_MAGIC = {lua_set(SERVER_MAGICS)}")
    w(f"local FLEX_MAGIC = {lua_set(FLEXIBLE_MAGICS)}")
    w(f"local HEADER_SIZE, MAX_FRAME_SIZE, STREAM_ID_INFO = {HEADER_SIZE}, {MAX_FRAME_SIZE}, "
      f"{FRAME_INFO_STREAM_ID}")
    w("")
    w("-- Flag texts (as FlagSet.text)")
    for flags in _flag_sets():
        bits = ", ".join(f"{{{mask}, {lua_str(name)}}}" for mask, name in flags.bits.items())
        w(f"local FLAGBITS_{flags.name.upper()} = {{{bits}}}")
        w(f"local function flagtext_{flags.name}(v) return flagtext(FLAGBITS_{flags.name.upper()}, "
          f"{flags.mask}, v) end")
    w("")

    # header fields
    hdr = [
        ("magic", "ProtoField.uint8(\"dcp.magic\", \"Magic\", base.HEX, MAGIC_NAMES)"),
        ("opcode", "ProtoField.uint8(\"dcp.opcode\", \"Opcode\", base.HEX, OPCODE_NAMES)"),
        ("server_opcode",
         "ProtoField.uint8(\"dcp.server_opcode\", \"Server opcode\", base.HEX, SERVER_OPCODE_NAMES)"),
        ("keylen", "ProtoField.uint16(\"dcp.keylen\", \"Key length\", base.DEC)"),
        ("framing_len", "ProtoField.uint8(\"dcp.framing_len\", \"Framing extras length\", base.DEC)"),
        ("extlen", "ProtoField.uint8(\"dcp.extlen\", \"Extras length\", base.DEC)"),
        ("datatype", "ProtoField.uint8(\"dcp.datatype\", \"Datatype\", base.HEX)"),
    ]
    for name, ctor in hdr:
        fs.add(f"dcp.{name}", ctor)
    dt_bits = []
    for mask, name in DATATYPE.bits.items():
        assert mask & (mask - 1) == 0, f"dcp.datatype.{name}: not a single bit"
        var = fs.add(f"dcp.datatype.{name}", f"ProtoField.bool(\"dcp.datatype.{name}\", "
                     f"{lua_str(name.upper())}, 8, nil, 0x{mask:x})")
        dt_bits.append(f"{{{var}, 0x{mask:x}}}")
    for name, ctor in [
        ("vbucket", "ProtoField.uint16(\"dcp.vbucket\", \"vBucket\", base.DEC)"),
        ("status", "ProtoField.uint16(\"dcp.status\", \"Status\", base.HEX, STATUS_NAMES)"),
        ("bodylen", "ProtoField.uint32(\"dcp.bodylen\", \"Total body length\", base.DEC)"),
        ("opaque", "ProtoField.uint32(\"dcp.opaque\", \"Opaque\", base.HEX)"),
        ("cas", "ProtoField.uint64(\"dcp.cas\", \"CAS\", base.HEX)"),
        ("frame_info", "ProtoField.bytes(\"dcp.frame_info\", \"Frame info\")"),
        ("frame_info.id", "ProtoField.uint16(\"dcp.frame_info.id\", \"Frame info id\", base.DEC)"),
        ("frame_info.len", "ProtoField.uint16(\"dcp.frame_info.len\", \"Frame info length\", base.DEC)"),
        ("frame_info.data", "ProtoField.bytes(\"dcp.frame_info.data\", \"Frame info data\")"),
        ("stream_id", "ProtoField.uint16(\"dcp.stream_id\", \"Stream id\", base.DEC)"),
        ("extras", "ProtoField.bytes(\"dcp.extras\", \"Extras\")"),
        ("key", "ProtoField.string(\"dcp.key\", \"Key\")"),
        ("value_len", "ProtoField.int32(\"dcp.value_len\", \"Value length\", base.DEC)"),
        ("value", "ProtoField.bytes(\"dcp.value\", \"Value\")"),
        ("garbage", "ProtoField.bytes(\"dcp.garbage\", \"Not MCBP (skipped to the end of the segment)\")"),
    ]:
        fs.add(f"dcp.{name}", ctor)

    # per-opcode shapes
    shapes = []
    for op in DCP_OPCODES:
        section = SECTIONS.get(op.code, "")
        layout_var = "nil"
        if section:
            abbrev = f"{PROTO}.{section}.layout"
            layout_var = fs.add(abbrev, f"ProtoField.string({lua_str(abbrev)}, \"Layout\")")
        req = _shape_lua(op, True, section, fs, names_var)
        rsp = _shape_lua(op, False, section, fs, names_var)
        seq = lua_str(op.seqno_field) if op.seqno_field else "nil"
        shapes.append(f"SHAPES[0x{op.code:02x}] = {{name = {lua_str(op.name)}, layout_field = {layout_var}, "
                      f"seqno = {seq},\n  req = {req},\n  rsp = {rsp}}}")
    fs.add("dcp.failover_log.count", "ProtoField.uint32(\"dcp.failover_log.count\", "
           "\"Failover log entries\", base.DEC)")

    w("-- Fields")
    w("local F = {}")
    for fld in fs.fields.values():
        w(f"{ident(fld.abbrev)} = {fld.ctor}")
    w(f"local DATATYPE_BITS = {{{', '.join(dt_bits)}}}")
    w("dcp.fields = {" + ", ".join(ident(a) for a in fs.fields) + "}")
    w("")

    # experts
    w("-- Expert infos: one per single-PDU rule of the analyzer, plus framing problems")
    expert_ids = sorted(r.id for r in RULES.values() if r.single_pdu) + list(FRAMING_RULES)
    w("local EXPERTS = {}")
    for rid in expert_ids:
        r = RULES[rid]
        group = "expert.group.MALFORMED" if rid in MALFORMED_RULES or rid in FRAMING_RULES \
            else "expert.group.PROTOCOL"
        w(f"EXPERTS[{lua_str(rid)}] = ProtoExpert.new({lua_str('dcp.expert.' + rid.replace('-', '_'))}, "
          f"{lua_str('[' + rid + '] ' + r.title)}, {group}, {SEVERITY[r.severity]})")
    w("local e_truncated = ProtoExpert.new(\"dcp.expert.truncated\", \"PDU cut by the capture "
      "(snap length)\", expert.group.MALFORMED, expert.severity.WARN)")
    w("local e_internal = ProtoExpert.new(\"dcp.expert.internal\", \"dissector error\", "
      "expert.group.UNDECODED, expert.severity.ERROR)")
    w("local e_extras_length = ProtoExpert.new(\"dcp.expert.extras_length\", \"extras length "
      "matches no layout of the opcode\", expert.group.MALFORMED, expert.severity.WARN)")
    w("local e_value_length = ProtoExpert.new(\"dcp.expert.value_length\", \"value length "
      "matches no layout of the opcode\", expert.group.MALFORMED, expert.severity.WARN)")
    w("do local list = {e_truncated, e_internal, e_extras_length, e_value_length}")
    w("  for _, id in ipairs({" + ", ".join(lua_str(i) for i in expert_ids) + "}) do "
      "list[#list + 1] = EXPERTS[id] end")
    w("  dcp.experts = list end")
    w("")

    w("-- Shapes: extras layouts (by size) and value layouts (by `when` and size) per opcode")
    w("local SHAPES = {}")
    out.extend(shapes)
    w("")

    # checks
    w("-- Single-PDU rules (same logic as dcpdissect.analysis.structural)")
    w("local function stream_flag_checks(m, f, add)")
    w("  if f.flags == nil then return end")
    for rid in STREAM_FLAG_CHECKS:
        w(_snippet(rid))
    w("end")
    w("")
    w("local OPCODE_CHECKS = {}")
    for (code, is_req), ids in OPCODE_CHECKS.items():
        w(f"OPCODE_CHECKS[{code * 2 + (1 if is_req else 0)}] = function(m, f, add)")
        for rid in ids:
            w(_snippet(rid))
        w("end")
    w("")
    w("local function check_message(m, add)")
    w("  local f = m.f")
    for rid in GENERIC_CHECKS:
        w(_snippet(rid))
    w("  local check = OPCODE_CHECKS[m.opcode * 2 + (m.request and 1 or 0)]")
    w("  if check then check(m, f, add) end")
    w("end")
    w("")
    ports = ",".join(str(p) for p in DCP_PORTS)
    w(TAIL.replace("@PORTS@", ports))
    return "\n".join(out) + "\n"


HEAD = r'''-- dcpdissect.lua: Couchbase DCP / MCBP dissector for Wireshark 4.0 (Lua 5.2).
-- Rendered from the dcpdissect protocol tables (dcpdissect/protocol/) by
-- `dcpdissect lua generate`; do not edit: change the tables or dcpdissect/luagen instead.
-- Install with `dcpdissect lua install` or load with `tshark -X lua_script:dcpdissect.lua`.
-- While loaded it owns the TCP ports of the preference dcp.tcp_ports (default 11210,11209),
-- replacing Wireshark's built-in couchbase dissector there.

local dcp = Proto("dcp", @PROTO_TITLE@)
local fmt, sbyte = string.format, string.byte
local band, rshift = bit32.band, bit32.rshift
local U0 = UInt64(0, 0)

local function nonzero(v) return v ~= nil and v ~= U0 end
local function or0(v) if v == nil then return "0" end return tostring(v) end

local function flagtext(bits, mask, v)
  local out = {}
  for i = 1, #bits do
    if band(v, bits[i][1]) ~= 0 then out[#out + 1] = bits[i][2] end
  end
  local unknown = band(v, bit32.bnot(mask))
  if unknown ~= 0 then out[#out + 1] = fmt("unknown:0x%x", unknown) end
  if #out == 0 then return "none" end
  return table.concat(out, "+")
end
'''

TAIL = r'''
-- Decoding ---------------------------------------------------------------------------------
-- Each tree item leaves two userdata (TreeItem, TvbRange) to collect. The collector runs
-- without pause and in large steps, so that garbage is freed while it is still in the CPU
-- caches: this keeps the cost per message flat over long captures (about 10% less CPU at
-- 100 MB). Wireshark has one Lua state, so the setting applies to every Lua plugin.
collectgarbage("setpause", 100)
collectgarbage("setstepmul", 1000)
-- Class methods fetched once: calling them directly skips the per-call method lookup
-- through each object's metatable.
local ti_add, ti_set_text, ti_append_text = TreeItem.add, TreeItem.set_text, TreeItem.append_text
local ti_set_generated, ti_expert = TreeItem.set_generated, TreeItem.add_proto_expert_info
local tvb_range, tvb_raw, tvb_len, tvb_reported_len = Tvb.range, Tvb.raw, Tvb.len, Tvb.reported_len
local r_uint, r_uint64 = TvbRange.uint, TvbRange.uint64
local f_magic, f_opcode, f_server_opcode, f_keylen, f_framing_len = F.magic, F.opcode, F.server_opcode, F.keylen, F.framing_len
local f_extlen, f_datatype, f_vbucket, f_status, f_bodylen = F.extlen, F.datatype, F.vbucket, F.status, F.bodylen
local f_opaque, f_cas, f_extras, f_key, f_value_len, f_value = F.opaque, F.cas, F.extras, F.key, F.value_len, F.value

local function layout_matches(lay, m)
  for i = 1, #lay.when do
    local k, v = lay.when[i][1], lay.when[i][2]
    local have
    if k == "status" then have = m.status else have = m.f[k] end
    if have ~= v then return false end
  end
  return true
end

-- Add every field of `lay` read at `base` (the caller checked the bounds); record values.
-- A flags field gets its flag names appended and one boolean item per set bit (every mask
-- is a single bit, tested with arithmetic rather than a bit32 call).
local function add_fields(tvb, tree, base, lay, vals)
  local fields = lay.fields
  for i = 1, #fields do
    local fd = fields[i]
    local r = tvb_range(tvb, base + fd[2], fd[3])
    if fd[6] then
      if fd[3] == 8 then vals[fd[1]] = r_uint64(r) else vals[fd[1]] = r_uint(r) end
    end
    local item = ti_add(tree, fd[4], r)
    local bits = fd[5]
    if bits then
      local v = r_uint(r)
      ti_append_text(item, " (" .. fd[7](v) .. ")")
      for j = 1, #bits do
        local mask = bits[j][2]
        if v % (mask + mask) >= mask then ti_add(item, bits[j][1], r) end
      end
    end
  end
end

-- Framing extras: (id << 4 | len) tags, nibble 0xF escapes to 15 + next byte.
local function dissect_frame_infos(tvb, tree, m, start, stop)
  local names = m.request and REQUEST_FRAME_INFO_NAMES or RESPONSE_FRAME_INFO_NAMES
  local sub = tree:add(F.frame_info, tvb(start, stop - start))
  sub:set_text(fmt("Framing extras (%d bytes)", stop - start))
  local pos, sid, sid_at, err = start, nil, nil, nil
  while pos < stop do
    local tag_at = pos
    local tag = tvb(pos, 1):uint()
    pos = pos + 1
    local fid, flen = rshift(tag, 4), band(tag, 0x0f)
    if fid == 0x0f then
      if pos >= stop then err = fmt("id escape byte missing at offset %d", pos - 1 - start) break end
      fid = 15 + tvb(pos, 1):uint()
      pos = pos + 1
    end
    if flen == 0x0f then
      if pos >= stop then err = fmt("length escape byte missing at offset %d", pos - 1 - start) break end
      flen = 15 + tvb(pos, 1):uint()
      pos = pos + 1
    end
    if pos + flen > stop then
      err = fmt("frame info %d length %d runs past the end (%d left)", fid, flen, stop - pos)
      break
    end
    local t = sub:add(tvb(tag_at, pos + flen - tag_at),
                      fmt("%s (id %d, %d bytes)", names[fid] or fmt("unknown:%d", fid), fid, flen))
    t:add(F.frame_info_id, tvb(tag_at, 1), fid):append_text(" (" .. (names[fid] or "unknown") .. ")")
    t:add(F.frame_info_len, tvb(tag_at, 1), flen)
    if flen > 0 then t:add(F.frame_info_data, tvb(pos, flen)) end
    if fid == STREAM_ID_INFO and flen == 2 and sid == nil then
      sid = tvb(pos, 2):uint()
      sid_at = pos
    end
    pos = pos + flen
  end
  m.frame_error = err
  if err == nil and sid ~= nil then
    m.stream_id = sid
    tree:add(F.stream_id, tvb(sid_at, 2))
  end
end

local prefixes, n_prefixes = {}, 0   -- "DcpMutation vb:3" by magic, opcode, vbucket/status

local function summary(m)
  local key = (m.magic * 256 + m.opcode) * 65536 + (m.vbucket or m.status)
  local s = prefixes[key]
  if s == nil then
    if SERVER_MAGIC[m.magic] then
      s = SERVER_OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    else
      s = OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    end
    if m.request then s = s .. " vb:" .. m.vbucket
    elseif m.status ~= 0 then s = s .. " " .. (STATUS_NAMES[m.status] or fmt("status:0x%x", m.status))
    else s = s .. " rsp" end
    if n_prefixes >= 4096 then prefixes, n_prefixes = {}, 0 end
    prefixes[key], n_prefixes = s, n_prefixes + 1
  end
  if m.stream_id then s = s .. " sid:" .. m.stream_id end
  local f = m.f
  if m.opcode == 0x56 and f.start_seqno and f.end_seqno then
    s = s .. " [" .. tostring(f.start_seqno) .. ".." .. tostring(f.end_seqno) .. "] " .. (m.layout or "")
  elseif m.spec and m.spec.seqno and f[m.spec.seqno] then
    s = s .. " seqno=" .. tostring(f[m.spec.seqno])
  elseif f.failover_log then
    s = s .. " failover_log(" .. #f.failover_log .. ")"
  elseif f.rollback_seqno then
    s = s .. " rollback_seqno=" .. tostring(f.rollback_seqno)
  end
  return s
end

local info_text = nil   -- what this dissector last wrote to the Info column

-- One Info update per dissector call; a second call for the same frame (bytes after a
-- reassembled message) appends.
local function set_info(pinfo, text)
  local col = pinfo.cols.info
  local cur = tostring(col)
  if cur == "(info)" then return end    -- no columns in this run (tshark -T fields)
  if info_text ~= nil and cur == info_text then
    col:append("; " .. text)
  else
    col:set(text)
  end
  info_text = tostring(col)
end

-- Bytes that cannot start a message, `cap` captured of `plen` (the rest of the segment).
local function dissect_garbage(tvb, tree, off, cap, plen, problem, rule)
  local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
  ti_set_text(node, "Couchbase DCP: not MCBP (" .. problem .. ")")
  ti_add(node, F.garbage, tvb_range(tvb, off, cap))
  ti_expert(node, EXPERTS[rule], "[" .. rule .. "] " .. problem ..
      fmt("; %d bytes skipped", plen))
  return "[not MCBP: " .. problem .. "]"
end

local expert_node = nil   -- the PDU node that check_message's findings go to

local function add_expert(rule, msg)
  ti_expert(expert_node, EXPERTS[rule], "[" .. rule .. "] " .. msg)
end

-- The message being dissected: one table, refilled for every message.
local msg = {magic = 0, opcode = 0, bodylen = 0, extlen = 0, datatype = 0, request = false,
             f = false, framing_len = 0, keylen = 0, k_end = 0, value_len = 0, vbucket = 0,
             status = 0, spec = false, layout = false, stream_id = false, frame_error = false}

-- One message at `off`, of which `cap` bytes are captured (`plen` in all), `head` its first
-- 12 bytes; returns its Info text. Extras fields go straight into the message's subtree.
local function dissect_message(tvb, tree, off, cap, plen, head)
  if cap < HEADER_SIZE then
    local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
    ti_set_text(node, "Couchbase DCP: header cut by the capture")
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d header bytes",
        cap, HEADER_SIZE))
    return "[cut by the capture]"
  end
  local magic, opcode, b2, b3, extlen, datatype, s1, s2, l1, l2, l3, l4 = sbyte(head, 1, 12)
  local bodylen = ((l1 * 256 + l2) * 256 + l3) * 256 + l4
  if not MAGIC_NAMES[magic] then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("illegal magic 0x%02x", magic), "unknown-magic")
  end
  if HEADER_SIZE + bodylen > MAX_FRAME_SIZE then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("body length %d exceeds the %d MiB frame limit",
        bodylen, MAX_FRAME_SIZE / 1048576), "frame-too-large")
  end
  local request, server = REQUEST_MAGIC[magic] == true, SERVER_MAGIC[magic]
  local framing_len, keylen = 0, b2 * 256 + b3
  if FLEX_MAGIC[magic] then framing_len, keylen = b2, b3 end
  local k_end = framing_len + extlen + keylen
  local m = msg
  m.magic, m.opcode, m.bodylen, m.extlen, m.datatype = magic, opcode, bodylen, extlen, datatype
  m.request, m.f, m.framing_len, m.keylen, m.k_end = request, {}, framing_len, keylen, k_end
  m.value_len, m.spec, m.layout, m.stream_id, m.frame_error = bodylen - k_end, nil, nil, nil, nil
  if request then m.vbucket, m.status = s1 * 256 + s2, nil else m.vbucket, m.status = nil, s1 * 256 + s2 end
  if not server then m.spec = SHAPES[opcode] end
  local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
  ti_add(node, f_magic, tvb_range(tvb, off, 1))
  ti_add(node, server and f_server_opcode or f_opcode, tvb_range(tvb, off + 1, 1))
  if FLEX_MAGIC[magic] then
    ti_add(node, f_framing_len, tvb_range(tvb, off + 2, 1))
    ti_add(node, f_keylen, tvb_range(tvb, off + 3, 1))
  else
    ti_add(node, f_keylen, tvb_range(tvb, off + 2, 2))
  end
  ti_add(node, f_extlen, tvb_range(tvb, off + 4, 1))
  local dtr = tvb_range(tvb, off + 5, 1)
  local dt = ti_add(node, f_datatype, dtr)
  if datatype ~= 0 then
    for i = 1, #DATATYPE_BITS do
      local bit = DATATYPE_BITS[i]
      local mask = bit[2]
      if datatype % (mask + mask) >= mask then ti_add(dt, bit[1], dtr) end
    end
  end
  ti_add(node, request and f_vbucket or f_status, tvb_range(tvb, off + 6, 2))
  local r_bodylen = tvb_range(tvb, off + 8, 4)
  ti_add(node, f_bodylen, r_bodylen)
  ti_add(node, f_opaque, tvb_range(tvb, off + 12, 4))
  ti_add(node, f_cas, tvb_range(tvb, off + 16, 8))

  local complete = cap >= HEADER_SIZE + bodylen
  if not complete then
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d bytes",
        cap, HEADER_SIZE + bodylen))
  end
  local body = off + HEADER_SIZE
  local e_end = framing_len + extlen
  -- framing extras (the part of them inside the body)
  if framing_len > 0 and complete then
    dissect_frame_infos(tvb, node, m, body, body + math.min(framing_len, bodylen))
  end
  if k_end <= bodylen and complete then
    local spec, shape = m.spec, nil
    if spec then
      if request then shape = spec.req else shape = spec.rsp end
    end
    -- extras
    if extlen > 0 then
      local ext_at = body + framing_len
      local lay = nil
      if shape then
        local ex = shape.extras
        for i = 1, #ex do
          if ex[i].size == extlen then lay = ex[i] break end
        end
      end
      if lay then
        add_fields(tvb, node, ext_at, lay, m.f)
        m.layout = lay.label
      else
        local et = ti_add(node, f_extras, tvb_range(tvb, ext_at, extlen))
        if shape then
          ti_expert(et, e_extras_length, fmt("extras length %d not in %s", extlen,
              shape.extras_sizes))
        end
      end
    end
    if keylen > 0 then ti_add(node, f_key, tvb_range(tvb, body + e_end, keylen)) end
    local n = m.value_len
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, n))
    local val_at = body + k_end
    local decoded, wanted = false, nil
    if shape and #shape.values > 0 then
      for i = 1, #shape.values do
        local lay = shape.values[i]
        if layout_matches(lay, m) then
          wanted = (wanted and wanted .. "/" or "") .. lay.size .. (lay.rep and "*n" or "")
          if lay.rep then
            if n % lay.size == 0 and (n > 0 or #lay.when > 0) then
              local vt = node:add(f_value, tvb(val_at, n))
              local entries = {}
              vt:set_text(fmt("Value: %s, %d entries", lay.rep, n / lay.size))
              vt:add(F.failover_log_count, tvb(val_at, n), n / lay.size):set_generated()
              for k = 0, n / lay.size - 1 do
                local et = vt:add(tvb(val_at + k * lay.size, lay.size), fmt("Entry %d", k))
                local entry = {}
                add_fields(tvb, et, val_at + k * lay.size, lay, entry)
                entries[#entries + 1] = entry
              end
              m.f[lay.rep] = entries
              m.layout = lay.label
              decoded = true
              break
            end
          elseif n == lay.size then
            local vt = ti_add(node, f_value, tvb_range(tvb, val_at, n))
            ti_set_text(vt, lay.text)
            add_fields(tvb, vt, val_at, lay, m.f)
            m.layout = lay.label
            decoded = true
            break
          end
        end
      end
    end
    if not decoded and n > 0 then ti_add(node, f_value, tvb_range(tvb, val_at, n)) end
    if not decoded and wanted then
      ti_expert(node, e_value_length, fmt("value length %d does not match %s", n, wanted))
    end
    if m.layout and spec and spec.layout_field then
      ti_set_generated(ti_add(node, spec.layout_field, m.layout))
    end
  elseif complete then
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, m.value_len))
  end

  local text = summary(m)
  ti_set_text(node, "Couchbase DCP, " .. text)
  expert_node = node
  check_message(m, add_expert)
  return text
end

local texts = {}   -- Info texts of the messages of one dissector call

-- Messages are cut from the TCP stream here rather than with dissect_tcp_pdus (one Lua
-- call per segment instead of two per message): a message that runs past the segment
-- asks TCP for more bytes (pinfo.desegment_offset/len) and comes back reassembled.
-- An implausible header swallows the rest of the segment.
function dcp.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "DCP"
  local captured, reported = tvb_len(tvb), tvb_reported_len(tvb)
  local can_desegment = pinfo.can_desegment > 0
  local n_texts, off = 0, 0
  while off < reported do
    local avail = captured - off
    if avail < 0 then break end
    local plen, head = reported - off, nil
    if avail < HEADER_SIZE then
      if can_desegment then
        pinfo.desegment_offset, pinfo.desegment_len = off, DESEGMENT_ONE_MORE_SEGMENT
        break
      end
    else
      head = tvb_raw(tvb, off, 12)
      local magic, _, _, _, _, _, _, _, l1, l2, l3, l4 = sbyte(head, 1, 12)
      local size = HEADER_SIZE + ((l1 * 256 + l2) * 256 + l3) * 256 + l4
      if MAGIC_NAMES[magic] and size <= MAX_FRAME_SIZE then plen = size end
    end
    if plen > avail and can_desegment then
      pinfo.desegment_offset, pinfo.desegment_len = off, plen - avail
      break
    end
    local ok, text = pcall(dissect_message, tvb, tree, off, avail < plen and avail or plen, plen, head)
    if not ok then
      ti_expert(tree, e_internal, "dcpdissect: " .. tostring(text))
      text = "[dissector error]"
    end
    n_texts = n_texts + 1
    texts[n_texts] = text
    off = off + plen
  end
  if n_texts > 0 then set_info(pinfo, table.concat(texts, "; ", 1, n_texts)) end
  return captured
end

function dcp.init()
  info_text = nil
end

-- Ports ------------------------------------------------------------------------------------
dcp.prefs.tcp_ports = Pref.range("TCP ports", "@PORTS@",
    "TCP ports decoded as DCP/MCBP (the built-in couchbase dissector is replaced there)", 65535)

local tcp_table = DissectorTable.get("tcp.port")
local owned = {}      -- port -> the dissector that had it before (false: none)

local function port_list(ranges)
  local ports = {}
  for part in string.gmatch(ranges, "[^,%s]+") do
    local a, b = string.match(part, "^(%d+)-(%d+)$")
    if a == nil then a = string.match(part, "^(%d+)$") b = a end
    if a ~= nil then
      for p = tonumber(a), math.min(tonumber(b), tonumber(a) + 1024) do ports[p] = true end
    end
  end
  return ports
end

local function take_ports(ranges)
  local wanted = port_list(ranges)
  for p, prev in pairs(owned) do
    if not wanted[p] then
      tcp_table:remove(p, dcp)
      if prev then tcp_table:add(p, prev) end
      owned[p] = nil
    end
  end
  for p in pairs(wanted) do
    if owned[p] == nil then
      owned[p] = tcp_table:get_dissector(p) or false
      tcp_table:add(p, dcp)
    end
  end
end

take_ports("@PORTS@")

function dcp.prefs_changed()
  take_ports(tostring(dcp.prefs.tcp_ports))
end'''
