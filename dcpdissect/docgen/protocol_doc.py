"""The protocol tables as a Markdown field reference (docs/protocol.md).

Everything comes from the tables of :mod:`dcpdissect.protocol`, read when :func:`render`
runs: opcodes with their roles, layouts, fields, validator constraints and checks; the
header; frame infos; HELLO features; datatypes; status codes; flag sets and value names;
the display-filter names of the fields (:mod:`dcpdissect.protocol.filters`). The Scapy
body classes come from :data:`dcpdissect.scapy.layers.BODY_DISPATCH`.
"""

from __future__ import annotations

from .. import protocol
from ..protocol import constants as C
from ..protocol import header as H
from ..protocol.filters import field_filters
from ..protocol.model import Check, Field, FlagSet, Layout, Opcode, Presence, Shape, ValueNames
from ..scapy import layers

GENERATED = "<!-- generated from dcpdissect/protocol/ by python -m dcpdissect.regen -->"


def _tables():
    """The opcode tables as they are now (a test may have patched them)."""
    return protocol.DCP_OPCODES, protocol.shape_fields


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text) -> str:
    return f"`{text}`"


def _anchor(text: str) -> str:
    """GitHub's anchor of a heading."""
    out = "".join(ch for ch in text.lower() if ch.isalnum() or ch in " -_")
    return "#" + out.replace(" ", "-")


def _op_heading(op: Opcode) -> str:
    return f"0x{op.code:02X} {op.name}"


# --- words for the table data ---------------------------------------------------------------

def _bits_text(flags: FlagSet | None, mask: int) -> str:
    text = f"0x{mask:x}"
    if flags is not None:
        names = [n for n in flags.names(mask) if not n.startswith("unknown:")]
        if names and flags.parse("+".join(names)) == mask:
            text += f" ({'+'.join(names)})"
    return text


def _value_text(name: str, value, fields: dict[str, Field]) -> str:
    if name == "status":
        return f"0x{value:02x} ({C.STATUS.text(value)})"
    if name == "datatype":
        return f"{value} ({_datatype_text(value)})"
    f = fields.get(name)
    if f is not None and f.names is not None:
        return f"{value} ({f.names.text(value)})"
    if f is not None and f.flags is not None:
        return _bits_text(f.flags, value)
    return str(value)


def _datatype_text(value: int) -> str:
    return "raw" if value == C.DATATYPE_RAW else C.DATATYPE.text(value)


def _check_words(c: Check, fields: dict[str, Field]) -> str:
    kind, a, *rest = c.test
    fl = fields[a].flags if a in fields else None
    if kind == "le":
        return f"`{a}` ≤ `{rest[0]}`"
    if kind == "range":
        return f"`{a}` ≤ `{rest[0]}` ≤ `{rest[1]}`"
    if kind == "ne":
        return f"`{a}` ≠ {_value_text(a, rest[0], fields)}"
    if kind == "in":
        values = rest[0]
        if len(values) == 1:
            return f"`{a}` = {_value_text(a, values[0], fields)}"
        return f"`{a}` is one of " + ", ".join(_value_text(a, v, fields) for v in values)
    if kind == "mask":
        width = fields[a].width if a in fields else 4
        forbidden = ~rest[0] & ((1 << 8 * width) - 1)
        if bin(forbidden).count("1") < bin(rest[0]).count("1"):
            return f"`{a}` has no bit of {_bits_text(fl, forbidden)}"
        return f"`{a}` has no bit outside {_bits_text(fl, rest[0])}"
    if kind == "only_with":
        return (f"when `{a}` has {_bits_text(fl, rest[0])}, its other bits are within "
                f"{_bits_text(fl, rest[1])}")
    if kind == "not_both":
        return f"`{a}` does not have both {_bits_text(fl, rest[0])} and {_bits_text(fl, rest[1])}"
    if kind == "needs":
        return f"`{a}` with {_bits_text(fl, rest[0])} also has {_bits_text(fl, rest[1])}"
    if kind == "one_bit":
        return f"`{a}` has exactly one bit of {_bits_text(fl, rest[0])}"
    return _code(repr(c.test))


def _condition_words(cond: tuple, fields: dict[str, Field]) -> str:
    kind, a, v = cond
    fl = fields[a].flags if a in fields else None
    if kind == "set":
        return f"`{a}` has a bit of {_bits_text(fl, v)}"
    if kind == "clear":
        return f"`{a}` has no bit of {_bits_text(fl, v)}"
    if kind == "eq":
        return f"`{a}` = {_value_text(a, v, fields)}"
    if kind == "ne":
        return f"`{a}` ≠ {_value_text(a, v, fields)}"
    return _code(repr(cond))


def _presence(p: Presence) -> str:
    return p.value


def _datatypes_text(datatypes) -> str:
    if datatypes is None:
        return "any valid datatype"
    if datatypes == C.DATATYPE_ALL:
        return f"any (0x00-0x{C.DATATYPE_MAX:02x})"
    return ", ".join(_datatype_text(d) for d in sorted(datatypes))


def _set_name(fs: FlagSet | ValueNames) -> str:
    return f"[{fs.name}]({_anchor(fs.name)})"


# --- opcodes --------------------------------------------------------------------------------

def _roles(op: Opcode) -> list[str]:
    out = []
    if op.document:
        out.append("document")
    if op.stream:
        out.append("stream")
    if op.item:
        out.append("item")
    return out


def _opcode_index(opcodes) -> list[str]:
    out = ["| code | name | title | section | sender | roles |", "|---|---|---|---|---|---|"]
    for op in opcodes:
        out.append(f"| `0x{op.code:02X}` | [{op.name}]({_anchor(_op_heading(op))}) | {_cell(op.title)} "
                   f"| `{op.section}` | {op.sender.value} | {', '.join(_roles(op)) or '—'} |")
    return out


def _scapy_classes(op: Opcode, request: bool) -> list[str]:
    """The Scapy body classes of one direction, in dispatch order, with their layouts."""
    out = []
    aliases = {v: k for k, v in layers.ALIASES.items()}
    for cls in layers.BODY_DISPATCH.get((op.code, request), ()):
        parts = [f"{kind} {lay.label}" for kind, lay in (("extras", cls._extras_layout),
                                                          ("value", cls._value_layout))
                 if lay is not None]
        what = ", ".join(parts) if parts else "no layout"
        if cls._extras_layout is not None and cls._value_layout is None and (
                op.request if request else op.response).values:
            what += ", value not decoded"
        if cls.__name__ in aliases:
            what += f"; alias `{aliases[cls.__name__]}`"
        text = f"`{cls.__name__}` ({what})"
        val = cls._value_layout
        if val is not None and val.repeated:
            text += f", entries `{cls.__name__}Entry`"
        out.append(text)
    return out


def _layout_lines(op: Opcode, lay: Layout, kind: str, abbrevs: dict[str, str]) -> list[str]:
    facts = [f"{lay.size} byte{'s' if lay.size != 1 else ''}"]
    if lay.repeated:
        facts = [f"a list of {lay.size}-byte entries, `{lay.repeated}`"]
    if lay.when:
        fields = {f.name: f for f in lay.fields}
        facts.append("when " + " and ".join(_condition_words(("eq", k, v), fields) for k, v in lay.when))
    if lay.context:
        ctx = lay.context
        facts.append(f"context `{ctx}` ("
                     + ("negotiated: DcpOpen IncludeDeleteTimes or HELLO Collections"
                        if ctx == "delete_v2" else
                        "not negotiated: neither DcpOpen IncludeDeleteTimes nor HELLO Collections"
                        if ctx == "!delete_v2" else "negotiated feature") + ")")
    if lay.value is not None:
        facts.append(f"value {_presence(lay.value)} after it")
    if lay.rule:
        facts.append(f"decoding it raises rule `{lay.rule}`")
    out = [f"**{kind} {lay.label}**: " + "; ".join(facts) + "."]
    if lay.note:
        out[0] += f" {lay.note[0].upper()}{lay.note[1:]}."
    out += ["", "| offset | width | field | title | filter | display | summary | values |",
            "|---|---|---|---|---|---|---|---|"]
    for f in sorted(lay.fields, key=lambda f: f.offset):
        values = ""
        if f.flags is not None:
            values = f"flags {_set_name(f.flags)}"
        elif f.names is not None:
            values = f"names {_set_name(f.names)}"
        shown = {"always": f"`{f.label}`", "if_set": f"`{f.label}` if not 0",
                 "never": "hidden"}.get(f.shown, f.shown)
        abbrev = abbrevs.get(f.name, "")
        out.append(f"| {f.offset} | {f.width} | `{f.name}` | {_cell(f.title)} | "
                   f"{_code(abbrev) if abbrev else '—'} | {f.display} | {shown} | {values} |")
    out.append("")
    return out


def _constraints(op: Opcode, shape: Shape, request: bool) -> list[str]:
    out = []
    if request:
        out.append("validated by the server (`McbpValidator::verify_header` and the opcode's "
                   "validator)" if shape.validated else "not validated by the server")
    sizes = ", ".join(str(s) for s in shape.extras_sizes)
    out.append(f"extras length {sizes}")
    key = f"key {_presence(shape.key)}"
    if shape.document_key:
        key += " (a document key: leb128 collection prefix on collection-aware connections)"
    out.append(key)
    value = f"value {_presence(shape.value)}"
    extra = []
    if shape.value_kind:
        extra.append(shape.value_kind)
    if shape.value_min:
        extra.append(f"at least {shape.value_min} bytes")
    if shape.value_context:
        extra.append(f"needs HELLO {shape.value_context.capitalize()}")
    if extra:
        value += f" ({', '.join(extra)})"
    out.append(value)
    out.append(f"CAS {_presence(shape.cas)}")
    out.append(f"datatypes: {_datatypes_text(shape.datatypes)}")
    return out


def _checks(shape: Shape, fields: dict[str, Field]) -> list[str]:
    if not shape.checks:
        return []
    out = ["| rule | severity | test (must hold) | applies when |", "|---|---|---|---|"]
    for c in shape.checks:
        when = " and ".join(_condition_words(cond, fields) for cond in c.when) or "always"
        out.append(f"| [`{c.rule}`](rules.md) | {c.severity} | {_cell(_check_words(c, fields))} "
                   f"| {_cell(when)} |")
    return out + [""]


def _direction(op: Opcode, request: bool, shape_fields) -> list[str]:
    shape = op.request if request else op.response
    if not request and shape == Shape():
        return []
    out = [f"#### {'Request' if request else 'Response'}", ""]
    out.append("Constraints: " + "; ".join(_constraints(op, shape, request)) + ".")
    out.append("")
    classes = _scapy_classes(op, request)
    if classes:
        out += ["Scapy: " + ", ".join(classes) + ".", ""]
    abbrevs = field_filters(op, request)
    for lay in shape.extras:
        out += _layout_lines(op, lay, "Extras", abbrevs)
    for lay in shape.values:
        out += _layout_lines(op, lay, "Value", abbrevs)
    out += _checks(shape, shape_fields(shape))
    return out


def _opcode(op: Opcode, shape_fields) -> list[str]:
    facts = [f"kv_engine name `{op.name}`", f"filter section `dcp.{op.section}`",
             f"sent by the {op.sender.value}" if op.sender.value != "either" else "sent by either end"]
    if op.document:
        facts.append("**document**: its key and value are customer data (redacted in evidence "
                     "bundles)")
    if op.stream:
        facts.append("**stream**: belongs to a vbucket stream (the stream rules follow it)")
    if op.item:
        facts.append("**item**: an item of the stream's current snapshot")
    if op.seqno_field:
        facts.append(f"seqno field `{op.seqno_field}`")
    if op.server_rejects:
        facts.append(f"memcached answers a client's request with `{op.server_rejects}`")
    out = [f"### {_op_heading(op)}", "", f"{op.title}: " + "; ".join(facts) + ".", ""]
    out += _direction(op, True, shape_fields)
    out += _direction(op, False, shape_fields)
    return out


# --- the rest of the tables -----------------------------------------------------------------

def _header() -> list[str]:
    out = ["## Header", "",
           f"Every message starts with a {C.HEADER_SIZE}-byte header (unsigned big-endian "
           f"integers). A frame is at most {C.MAX_FRAME_SIZE} bytes (header + body, "
           f"{C.MAX_FRAME_SIZE >> 20} MiB: the server's default).", ""]
    for magics, layout in H.HEADER_LAYOUTS:
        kind = "Flexible framing" if layout is H.FLEXIBLE_HEADER else "Classic framing"
        names = ", ".join(f"0x{m:02x} {C.MAGICS.text(m)}" for m in sorted(magics))
        out += [f"**{kind}** (magics {names}):", "",
                "| offset | width | field | title |", "|---|---|---|---|"]
        out += [f"| {f.offset} | {f.width} | `{f.name}` | {_cell(f.title)} |" for f in layout]
        out.append("")
    out += ["| magic | name | request | flexible | server |", "|---|---|---|---|---|"]
    for m, name in sorted(C.MAGICS.values.items()):
        out.append(f"| `0x{m:02x}` | {name} | {'yes' if m in C.REQUEST_MAGICS else 'no'} | "
                   f"{'yes' if m in C.FLEXIBLE_MAGICS else 'no'} | "
                   f"{'yes' if m in C.SERVER_MAGICS else 'no'} |")
    out += ["", "Server magics (0x82/0x83) use their own opcodes:", "",
            "| opcode | name |", "|---|---|"]
    out += [f"| `0x{k:02x}` | {v} |" for k, v in sorted(C.SERVER_OPCODES.values.items())]
    return out + [""]


def _sizes_text(sizes) -> str:
    if sizes == "+":
        return "any non-empty"
    return ", ".join(str(s) for s in sizes) + " bytes"


def _frame_infos() -> list[str]:
    out = ["## Frame infos", "",
           "Framing extras (flexible framing) are a list of entries: one byte `id << 4 | len`; "
           f"a nibble of {C.FRAME_INFO_ESCAPE} is an escape (the next byte, plus "
           f"{C.FRAME_INFO_ESCAPE}, is the id or length). Id {C.FRAME_INFO_STREAM_ID} carries "
           "the stream id (`dcp.stream_id`).", "",
           "**Request frame infos** (any other id: `UnknownFrameInfo`):", "",
           "| id | name | legal sizes | on DCP opcodes |", "|---|---|---|---|"]
    for k, name in sorted(C.REQUEST_FRAME_INFOS.values.items()):
        sizes = C.REQUEST_FRAME_INFO_SIZES.get(k)
        legal = _sizes_text(sizes) if sizes is not None else "rejected (unknown to the server)"
        dcp = "rejected" if k in C.FRAME_INFOS_NOT_FOR_DCP else ("—" if sizes is None else "accepted")
        out.append(f"| {k} | {name} | {legal} | {dcp} |")
    out += ["", "**Response frame infos**:", "", "| id | name |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in sorted(C.RESPONSE_FRAME_INFOS.values.items())]
    return out + [""]


def _hello() -> list[str]:
    out = ["## HELLO features", "",
           "The server's HELLO response lists the features it enabled for the connection.", "",
           "| id | name | effect |", "|---|---|---|"]
    for k, name in sorted(C.HELLO_FEATURES.values.items()):
        effect = []
        if k in C.DATATYPE_FEATURES:
            effect.append(f"enables datatype {_datatype_text(C.DATATYPE_FEATURES[k])}")
        if k == C.FEATURE_COLLECTIONS:
            effect.append("collection-aware keys; stream request values")
        out.append(f"| `0x{k:02x}` | {name} | {'; '.join(effect)} |")
    return out + [""]


def _datatypes() -> list[str]:
    out = ["## Datatype", "", "| bit | name | filter |", "|---|---|---|"]
    out += [f"| `0x{bit:02x}` | {name} | `dcp.datatype.{name}` |"
            for bit, name in C.DATATYPE.bits.items()]
    out += ["", f"Valid datatypes: 0x00 (raw) to 0x{C.DATATYPE_MAX:02x}. Deletions accept "
            + _datatypes_text(C.DELETION_DATATYPES) + ".", ""]
    return out


def _status() -> list[str]:
    out = ["## Status codes", "", "| status | name |", "|---|---|"]
    out += [f"| `0x{k:02x}` | {v} |" for k, v in sorted(C.STATUS.values.items())]
    return out + [""]


def _limits() -> list[str]:
    ids = C.RESERVED_COLLECTION_IDS
    return ["## Limits", "",
            "| limit | value |", "|---|---|",
            f"| key length | {C.MAX_KEY_LENGTH} |",
            f"| key length with a collection prefix | {C.MAX_COLLECTIONS_KEY_LENGTH} |",
            f"| logical key length outside the default collection | "
            f"{C.MAX_COLLECTIONS_LOGICAL_KEY_LENGTH} |",
            f"| reserved collection ids | {ids.start}-{ids.stop - 1} |",
            f"| frame size (header + body) | {C.MAX_FRAME_SIZE} |",
            f"| DCP ports | {', '.join(map(str, C.DCP_PORTS))} |",
            f"| TLS ports (not decoded) | {', '.join(map(str, C.TLS_PORTS))} |", ""]


def _named_sets(opcodes) -> list[str]:
    flag_sets: dict[str, FlagSet] = {}
    value_names: dict[str, ValueNames] = {}
    for op in opcodes:
        for shape in (op.request, op.response):
            for lay in shape.extras + shape.values:
                for f in lay.fields:
                    if f.flags is not None:
                        flag_sets.setdefault(f.flags.name, f.flags)
                    if f.names is not None:
                        value_names.setdefault(f.names.name, f.names)
    out = ["## Flag sets", "",
           "A flags field `F` has one boolean display filter per bit, `F.<bit name>`.", ""]
    for fs in flag_sets.values():
        out += [f"### {fs.name}", "", "| bit | name | title |", "|---|---|---|"]
        out += [f"| `0x{bit:x}` | {name} | {_cell(fs.titles.get(bit, ''))} |"
                for bit, name in fs.bits.items()]
        out.append("")
    out += ["## Value names", ""]
    for vn in value_names.values():
        out += [f"### {vn.name}", "", "| value | name |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in sorted(vn.values.items())]
        out.append("")
    return out


def render() -> str:
    """docs/protocol.md."""
    opcodes, shape_fields = _tables()
    out = [
        "# DCP protocol reference", "", GENERATED, "",
        "Rendered from the tables in `dcpdissect/protocol/`, the ones the codec, the Scapy "
        "layers, the Lua plugin and the analyzer's single-message rules read. Field *filter* "
        "names are the Lua plugin's display filters ([lua.md](lua.md)); *summary* is how the "
        "one-line summaries (Scapy's, and `dissect`'s table) label a field (*if not 0*: "
        "Scapy omits it when 0; *hidden*: neither shows it); rule ids are described in "
        "[rules.md](rules.md); the Scapy classes are `dcpdissect.scapy`'s "
        "([scapy.md](scapy.md)). Roles: **document** opcodes carry customer data in their "
        "key and value, **stream** opcodes belong to a vbucket stream, **item** opcodes are "
        "the items of a snapshot.", "",
        "Contents: [Opcodes](#opcodes) · [Header](#header) · [Frame infos](#frame-infos) · "
        "[HELLO features](#hello-features) · [Datatype](#datatype) · "
        "[Status codes](#status-codes) · [Limits](#limits) · [Flag sets](#flag-sets) · "
        "[Value names](#value-names).", "",
        "## Opcodes", "",
        f"{len(opcodes)} opcodes have layouts; the other client opcodes of kv_engine's "
        "`opcode.h` are known by name only (`dcpdissect/protocol/client_opcodes.py`).", "",
    ]
    out += _opcode_index(opcodes) + [""]
    for op in opcodes:
        out += _opcode(op, shape_fields)
    out += _header() + _frame_infos() + _hello() + _datatypes() + _status() + _limits()
    out += _named_sets(opcodes)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"

