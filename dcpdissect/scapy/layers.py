"""Scapy layers for MCBP / DCP, generated from the protocol tables.

``MCBP`` is the 24-byte header (classic and flexible framing) followed by its framing
extras (``FrameInfo`` entries). The body after it is one class per opcode variant, built
at import time from the extras and value ``Layout``s of ``dcpdissect.protocol`` (field
names, widths, flag and value names all come from there), or ``MCBPGeneric`` (raw
extras / key / value) whenever the bytes do not fit a table layout.

Lengths left unset (``extlen``, ``keylen``, ``framing_len``, ``bodylen``, the frame-info
length nibble) are computed when the packet is built, and so is ``magic``: a response
body or an explicit ``status`` makes it a response, framing extras make it flexible.
"""

from __future__ import annotations

import re
import struct

from scapy.config import conf
from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    ConditionalField,
    EnumField,
    Field as ScapyField,
    FlagsField,
    IntEnumField,
    IntField,
    LongField,
    MultipleTypeField,
    PacketListField,
    ShortEnumField,
    ShortField,
    StrField,
    StrFixedLenField,
    StrLenField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import TCP
from scapy.packet import NoPayload, Packet, bind_bottom_up, bind_top_down

from ..codec.header import frame_size
from ..codec.keys import leb128, split_collection_key
from ..protocol import (
    CLASSIC_HEADER,
    DATATYPE,
    DCP_OPCODES,
    DCP_PORTS,
    FLEXIBLE_HEADER,
    FLEXIBLE_MAGICS,
    FRAME_INFO_ESCAPE,
    FRAME_INFO_STREAM_ID,
    HEADER_SIZE,
    MAGICS,
    MAX_FRAME_SIZE,
    OPCODE_NAMES,
    REQUEST_FRAME_INFOS,
    REQUEST_MAGICS,
    RESPONSE_FRAME_INFOS,
    RESPONSE_MAGICS,
    SERVER_MAGICS,
    STATUS,
    Field,
    Layout,
    Presence,
    Shape,
    header_field,
    opcode_name,
)

MAX_LIST_ITEMS = 100_000          # failover-log entries / frame infos accepted per PDU
_LEGAL_MAGICS = frozenset(MAGICS.values)


def _put(buf: bytearray, layout, name: str, value: int) -> None:
    """Write a computed length into its header field (offset and width from the table)."""
    f = header_field(layout, name)
    buf[f.offset:f.offset + f.width] = value.to_bytes(f.width, "big")


# --- fields ---------------------------------------------------------------------------------

class _MagicField(ByteEnumField):
    """The magic byte. Left unset, it follows the body class and the framing extras."""

    def i2h(self, pkt, x):
        return pkt._auto_magic() if x is None and pkt is not None else x

    def i2m(self, pkt, x):
        return pkt._auto_magic() if x is None else x

    def i2repr(self, pkt, x):
        return super().i2repr(pkt, self.i2h(pkt, x))


class _OpcodeField(ByteEnumField):
    """Opcode; server magics (0x82/0x83) use their own name table."""

    def i2repr(self, pkt, x):
        if not isinstance(x, int):
            return super().i2repr(pkt, x)
        magic = pkt._magic() if pkt is not None else 0x80
        return f"{opcode_name(magic, x)} ({x:#04x})"


class _FrameIdField(BitField):
    """Frame-info id nibble, shown with its name from the request or response table."""

    def i2repr(self, pkt, x):
        if x is None:
            return "None"
        parent = pkt.parent if pkt is not None else None
        request = not isinstance(parent, MCBP) or parent._magic() not in RESPONSE_MAGICS
        names = (REQUEST_FRAME_INFOS if request else RESPONSE_FRAME_INFOS).values
        fid = pkt.frame_id if pkt is not None else x
        return f"{x} ({'escape: ' if x == FRAME_INFO_ESCAPE else ''}{names.get(fid, f'unknown:{fid}')})"


_PLAIN = {1: ByteField, 2: ShortField, 4: IntField, 8: LongField}
_HEX = {1: XByteField, 2: XShortField, 4: XIntField, 8: XLongField}
_ENUM = {1: ByteEnumField, 2: ShortEnumField, 4: IntEnumField}


def scapy_field(f: Field, default: int = 0):
    """The Scapy field for one table ``Field`` (width, display, flag or value names)."""
    if f.flags is not None:
        return FlagsField(f.name, default, f.width * 8, dict(f.flags.bits))
    if f.names is not None:
        if f.width in _ENUM:
            return _ENUM[f.width](f.name, default, dict(f.names.values))
        return EnumField(f.name, default, dict(f.names.values), fmt="Q")
    return (_HEX if f.display == "hex" else _PLAIN)[f.width](f.name, default)


def layout_fields(layout: Layout, defaults: dict | None = None) -> list:
    """Scapy fields for a whole layout, gaps filled with zero bytes."""
    out, pos = [], 0
    defaults = defaults or {}
    for f in sorted(layout.fields, key=lambda f: f.offset):
        if f.offset > pos:
            out.append(StrFixedLenField(f"pad_{pos}", b"\0" * (f.offset - pos), f.offset - pos))
        out.append(scapy_field(f, defaults.get(f.name, 0)))
        pos = f.offset + f.width
    if layout.size > pos:
        out.append(StrFixedLenField(f"pad_{pos}", b"\0" * (layout.size - pos), layout.size - pos))
    return out


def _raw_if_short(min_len):
    """A ``dispatch_hook`` that falls back to Raw when fewer than ``min_len`` bytes come."""
    def dispatch_hook(cls, _pkt=None, *args, **kwargs):
        if _pkt and len(_pkt) < min_len:
            return conf.raw_layer
        return cls
    return classmethod(dispatch_hook)


# --- framing extras -----------------------------------------------------------------------

class FrameInfo(Packet):
    """One framing-extras entry: id and length nibbles (15 = escape, the next byte adds
    15), then the data. A 2-byte DcpStreamId (id 2) is decoded as ``stream_id``."""

    name = "MCBP frame info"
    fields_desc = [
        _FrameIdField("id", 0, 4),
        BitField("len", None, 4),
        ConditionalField(ByteField("id_ext", 0), lambda p: p.getfieldval("id") == FRAME_INFO_ESCAPE),
        ConditionalField(ByteField("len_ext", None), lambda p: p._len_escaped()),
        ConditionalField(ShortField("stream_id", None), lambda p: p._is_stream_id()),
        ConditionalField(StrLenField("data", b"", length_from=lambda p: p.data_len),
                         lambda p: not p._is_stream_id()),
    ]

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kwargs):
        if _pkt:
            tag = _pkt[0]
            need = 1 + ((tag >> 4) == FRAME_INFO_ESCAPE) + ((tag & 0x0F) == FRAME_INFO_ESCAPE)
            if tag == (FRAME_INFO_STREAM_ID << 4 | 2):
                need = 3
            if len(_pkt) < need:
                return conf.raw_layer
        return cls

    def _is_stream_id(self) -> bool:
        return (self.getfieldval("id") == FRAME_INFO_STREAM_ID
                and self.getfieldval("len") in (2, None) and "data" not in self.fields)

    def _data_size(self) -> int:
        return 2 if self._is_stream_id() else len(self.getfieldval("data") or b"")

    def _len_escaped(self) -> bool:
        n = self.getfieldval("len")
        return n == FRAME_INFO_ESCAPE or (n is None and self._data_size() >= FRAME_INFO_ESCAPE)

    @property
    def frame_id(self) -> int:
        """The id with its escape byte applied."""
        fid = self.getfieldval("id")
        return fid + (self.getfieldval("id_ext") or 0) if fid == FRAME_INFO_ESCAPE else fid

    @property
    def data_len(self) -> int:
        """The data length with its escape byte applied."""
        n = self.getfieldval("len")
        if n is None:
            return self._data_size()
        return n + (self.getfieldval("len_ext") or 0) if n == FRAME_INFO_ESCAPE else n

    @property
    def frame_data(self) -> bytes:
        """The entry's data bytes (the stream id re-encoded when decoded as one)."""
        if self._is_stream_id():
            return (self.getfieldval("stream_id") or 0).to_bytes(2, "big")
        return bytes(self.getfieldval("data") or b"")

    def post_build(self, pkt, pay):
        if self.getfieldval("len") is None:
            n = self._data_size()
            b = bytearray(pkt)
            b[0] = (b[0] & 0xF0) | min(n, FRAME_INFO_ESCAPE)
            if n >= FRAME_INFO_ESCAPE and self.getfieldval("len_ext") is None:
                b[1 + (self.getfieldval("id") == FRAME_INFO_ESCAPE)] = n - FRAME_INFO_ESCAPE
            pkt = bytes(b)
        return pkt + pay

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        return f"frame info {self.frame_id} {self.frame_data.hex()}"


# --- header ---------------------------------------------------------------------------------

class _CollectionIdField(ScapyField):
    """The leb128 collection id before a document key (collection-aware connections). A
    prefix the server would refuse (no stop byte, non-canonical) is left in the key (None)."""

    def __init__(self, name: str):
        super().__init__(name, None, fmt="I")

    def addfield(self, pkt, s, val):
        return s if val is None else s + leb128(val)

    def getfield(self, pkt, s):
        cid, prefix, problem = split_collection_key(s[:pkt._header_len("keylen")])
        if problem or cid is None:
            return s, None
        return s[prefix:], cid

    def i2repr(self, pkt, x):
        if x is None:
            return "None"
        name = pkt._collection_name() if pkt is not None else None
        return f"{x:#x}" + (f" ({name})" if name else "")


def _flexible(p) -> bool:
    return p._magic() in FLEXIBLE_MAGICS


def _request(p) -> bool:
    return p._magic() in REQUEST_MAGICS


class MCBP(Packet):
    """The MCBP header: classic (keylen 2 bytes) or flexible framing (magics 0x08/0x18:
    framing_len and a 1-byte keylen), vbucket for requests or status for responses,
    then the framing extras. ``stream_id=`` adds a DcpStreamId frame info."""

    name = "MCBP"
    show_summary = False         # the body layer's line says it all
    TCP_BATCH = 64               # PDUs chained per tcp_reassemble call
    fields_desc = [
        _MagicField("magic", None, dict(MAGICS.values)),
        _OpcodeField("opcode", 0, dict(OPCODE_NAMES)),
        ConditionalField(ByteField("framing_len", None), _flexible),
        MultipleTypeField([(ByteField("keylen", None), _flexible)], ShortField("keylen", None)),
        ByteField("extlen", None),
        FlagsField("datatype", 0, 8, dict(DATATYPE.bits)),
        ConditionalField(ShortField("vbucket", 0), _request),
        ConditionalField(ShortEnumField("status", 0, dict(STATUS.values)),
                         lambda p: not _request(p)),
        IntField("bodylen", None),
        XIntField("opaque", 0),
        LongField("cas", 0),
        ConditionalField(PacketListField("frame_infos", [], FrameInfo,
                                         length_from=lambda p: p._framing_span(),
                                         max_count=MAX_LIST_ITEMS), _flexible),
    ]

    collections: bool | None = None     # keys carry a collection id (HELLO Collections)
    collection_name: str | None = None  # the name of the key's collection, when known

    def __init__(self, _pkt=b"", *args, stream_id=None, collections=None, **fields):
        if collections is not None:     # read while dissecting the body
            object.__setattr__(self, "collections", collections)
        super().__init__(_pkt, *args, **fields)
        if stream_id is not None:
            infos = list(self.getfieldval("frame_infos") or [])
            infos.append(FrameInfo(id=FRAME_INFO_STREAM_ID, stream_id=stream_id))
            self.frame_infos = infos

    # magic and lengths ------------------------------------------------------------------
    def _magic(self) -> int:
        m = self.getfieldval("magic")
        return self._auto_magic() if m is None else m

    def _auto_magic(self) -> int:
        body = self.payload
        response = ("status" in self.fields or "status" in self.overloaded_fields
                    or (isinstance(body, McbpBody) and body._request is False))
        flexible = bool(self.getfieldval("frame_infos"))
        return (0x18 if flexible else 0x81) if response else (0x08 if flexible else 0x80)

    def _framing_span(self) -> int:
        framing = self.getfieldval("framing_len") or 0
        body = self.getfieldval("bodylen")
        return framing if body is None else min(framing, body)

    @property
    def is_request(self) -> bool:
        return self._magic() in REQUEST_MAGICS

    @property
    def stream_id(self) -> int | None:
        """The DcpStreamId frame info's value, if any (as the fast codec reads it)."""
        if self._magic() not in FLEXIBLE_MAGICS:
            return None
        for fi in self.getfieldval("frame_infos") or ():
            if isinstance(fi, FrameInfo) and fi.frame_id == FRAME_INFO_STREAM_ID \
                    and fi.data_len == 2 and len(fi.frame_data) == 2:
                return int.from_bytes(fi.frame_data, "big")
        return None

    @property
    def body(self):
        """The body layer (a ``McbpBody``), or None."""
        return self.payload if isinstance(self.payload, McbpBody) else None

    def post_build(self, pkt, pay):
        b = bytearray(pkt)
        flexible = self._magic() in FLEXIBLE_MAGICS
        framing = len(pkt) - HEADER_SIZE
        own = len(pay)
        body = self.payload
        if isinstance(body, McbpBody):
            tail = body.payload
            if not isinstance(tail, NoPayload):
                own -= len(tail.do_build())
            extlen, keylen = body._extras_len(), body._key_len()
        else:
            extlen = keylen = 0
        layout = FLEXIBLE_HEADER if flexible else CLASSIC_HEADER
        if self.getfieldval("extlen") is None:
            _put(b, layout, "extlen", extlen)
        if self.getfieldval("keylen") is None:
            _put(b, layout, "keylen", keylen)
        if flexible and self.getfieldval("framing_len") is None:
            _put(b, layout, "framing_len", framing)
        if self.getfieldval("bodylen") is None:
            _put(b, layout, "bodylen", framing + own)
        return bytes(b) + pay

    # dissection --------------------------------------------------------------------------
    def do_dissect(self, s):
        if len(s) >= HEADER_SIZE:
            return super().do_dissect(s)
        # Truncated header: keep what can be read, the rest goes to a Raw layer.
        n = min(len(s), 2)
        for name, i in (("magic", 0), ("opcode", 1))[:n]:
            self.fields[name] = s[i]
        self.raw_packet_cache_fields = {}
        self.raw_packet_cache = s[:n]
        self.explicit = 1
        return s[n:]

    def extract_padding(self, s):
        bodylen = self.getfieldval("bodylen")
        if "bodylen" not in self.fields or bodylen is None:
            return s, None
        n = max(bodylen - self._framing_span(), 0)
        return s[:n], s[n:]

    def guess_payload_class(self, payload):
        if "bodylen" not in self.fields:
            return conf.raw_layer
        return self._body_class(payload) or MCBPGeneric

    def do_dissect_payload(self, s):
        if s:
            return super().do_dissect_payload(s)
        if "bodylen" in self.fields:
            cls = self._body_class(b"")
            if cls is not None and cls is not MCBPGeneric:
                self.add_payload(cls(_internal=1, _underlayer=self))

    def _body_class(self, body: bytes):
        """The body class whose table layout fits these body bytes (None: no table entry)."""
        f = self.fields
        magic = f.get("magic")
        if magic in SERVER_MAGICS:
            return MCBPGeneric
        if magic in REQUEST_MAGICS:
            request = True
        elif magic in RESPONSE_MAGICS:
            request = False
        else:
            return MCBPGeneric
        candidates = BODY_DISPATCH.get((f.get("opcode"), request))
        if not candidates:
            return MCBPGeneric
        extlen, keylen = f.get("extlen") or 0, f.get("keylen") or 0
        framing, bodylen = f.get("framing_len") or 0, f["bodylen"]
        vlen = bodylen - framing - extlen - keylen          # on the wire
        cut = len(body) < bodylen - framing                 # the capture kept a prefix
        if vlen < 0 or len(body) > bodylen - framing or cut and len(body) < extlen:
            return MCBPGeneric
        status = f.get("status")
        for cls in candidates:
            if cls._accepts(extlen, vlen, body[:extlen], status):
                return cut_class(cls) if cut else cls
        return MCBPGeneric

    # display, matching, stream reassembly ---------------------------------------------------
    def mysummary(self):
        return info_line(self, None)

    def hashret(self):
        return struct.pack(">I", self.opaque or 0)

    def answers(self, other):
        return (isinstance(other, MCBP) and other.is_request and not self.is_request
                and other.opaque == self.opaque and other.opcode == self.opcode)

    @classmethod
    def tcp_reassemble(cls, data, metadata, session):
        """For ``sniff(session=TCPSession)``: every complete PDU at the front of the buffer
        (up to ``TCP_BATCH``, chained ``MCBP/body/MCBP/body...``), the bytes after them
        handed back as Padding. Returning them together sidesteps TCPSession's
        miscounting when several PDUs and a partial one share a segment. A buffer that
        does not start with a plausible header is returned as Raw (no resynchronisation).
        """
        pos, end, first = 0, len(data), None
        for _ in range(cls.TCP_BATCH):
            if end - pos < HEADER_SIZE:
                metadata["tcp_min_len"] = HEADER_SIZE
                break
            total = frame_size(data, pos)
            if data[pos] not in _LEGAL_MAGICS or total > MAX_FRAME_SIZE:   # data[pos]: the magic
                if first is None:
                    return conf.raw_layer(data)
                break
            if end - pos < total:
                metadata["tcp_min_len"] = total
                break
            pkt = cls(data[pos:pos + total])
            if first is None:
                first = pkt
            else:
                first.add_payload(pkt)
            pos += total
        if first is None:
            return None
        metadata.pop("tcp_min_len", None)
        if pos < end:
            first.add_payload(conf.padding_layer(data[pos:]))
        return first


# --- bodies ---------------------------------------------------------------------------------

class McbpBody(Packet):
    """Base of the body layers: what follows the header and framing extras."""

    name = "MCBP body"
    fields_desc = []
    _opcode: int | None = None
    _request: bool | None = None
    _extras_layout: Layout | None = None
    _value_layout: Layout | None = None
    _has_key = False
    _has_value = False
    layout: str | None = None            # table label of the variant ("V2.2", "failover_log"...)

    def extract_padding(self, s):
        return b"", s

    def _header(self):
        u = self.underlayer
        return u if isinstance(u, MCBP) else None

    def _header_len(self, name: str) -> int:
        h = self._header()
        return (h.getfieldval(name) or 0) if h is not None else 0

    def _extras_len(self) -> int:
        return self._extras_layout.size if self._extras_layout is not None else 0

    def _key_len(self) -> int:
        if "key" not in self.default_fields:
            return 0
        return len(self.getfieldval("key") or b"") + self._prefix_len()

    def _prefix_len(self) -> int:
        """Bytes of the collection id before the key (0: none)."""
        cid = self.fields.get("collection_id")
        return 0 if cid is None else len(leb128(cid))

    def _collection_aware(self) -> bool:
        """The key starts with a collection id: set on the layer, or read from a
        connection that negotiated collections (``MCBP(data, collections=True)``)."""
        if "collection_id" in self.fields:
            return True
        h = self._header()
        return bool(h is not None and h.collections)

    def _collection_name(self) -> str | None:
        h = self._header()
        return h.collection_name if h is not None else None

    def _extra_key(self) -> bool:
        """A key the table does not expect: shown when set or present on the wire."""
        return "key" in self.fields or self._header_len("keylen") > 0

    def _extra_value(self) -> bool:
        """A value the table does not expect: shown when set or present on the wire."""
        if "value" in self.fields:
            return True
        h = self._header()
        if h is None or h.getfieldval("bodylen") is None:
            return False
        return (h.getfieldval("bodylen") - h._framing_span() - self._header_len("extlen")
                - self._header_len("keylen")) > 0

    @classmethod
    def _accepts(cls, extlen, vlen, extras, status) -> bool:
        """Whether a body with these lengths (and extras bytes, header status) decodes
        as this class, by the same rules as the fast codec."""
        ext, val = cls._extras_layout, cls._value_layout
        if extlen != (ext.size if ext is not None else 0):
            return False
        if val is None:
            return True
        for name, want in val.when:
            got = status if name == "status" else _field_value(ext, name, extras)
            if got != want:
                return False
        return vlen % val.size == 0 if val.repeated else vlen == val.size

    @classmethod
    def _value_names(cls) -> set[str]:
        """Names of the fields that decode the value layout (pads included)."""
        val = cls._value_layout
        if val is None:
            return set()
        if val.repeated:
            return {val.repeated}
        ext = cls._extras_layout
        names = {f.name for f in layout_fields(val)}
        return names - ({f.name for f in layout_fields(ext)} if ext is not None else set())

    @classmethod
    def _extras_len_of(cls) -> int:
        return cls._extras_layout.size if cls._extras_layout is not None else 0

    @property
    def key_bytes(self) -> bytes:
        """The key (empty when the layer has none)."""
        return bytes(self.getfieldval("key") or b"") if "key" in self.default_fields else b""

    @property
    def value_bytes(self) -> bytes:
        """The value section as bytes, whether decoded into fields or kept raw."""
        data = self.do_build()
        tail = self.payload
        if not isinstance(tail, NoPayload):
            data = data[:len(data) - len(tail.do_build())]
        return data[self._extras_len() + self._key_len():]

    def table_fields(self) -> dict:
        """The decoded fields under their table names (repeated entries as dicts)."""
        out = {}
        for layout in (self._extras_layout, self._value_layout):
            if layout is None:
                continue
            if layout.repeated:
                out[layout.repeated] = [
                    {f.name: int(e.getfieldval(f.name)) for f in layout.fields}
                    for e in self.getfieldval(layout.repeated) if not isinstance(e, conf.raw_layer)]
            else:
                out.update((f.name, int(self.getfieldval(f.name))) for f in layout.fields)
        return out

    def mysummary(self):
        h = self._header()
        return info_line(h, self) if h is not None else self.name


def _field_value(layout: Layout | None, name: str, extras: bytes):
    if layout is None:
        return None
    for f in layout.fields:
        if f.name == name:
            return int.from_bytes(extras[f.offset:f.offset + f.width], "big")
    return None


class MCBPGeneric(McbpBody):
    """Any body the tables do not describe (or that does not fit them): raw sections."""

    name = "MCBP body (raw)"
    fields_desc = [
        StrLenField("extras", b"", length_from=lambda p: p._header_len("extlen")),
        StrLenField("key", b"", length_from=lambda p: p._header_len("keylen")),
        StrField("value", b""),
    ]
    _has_key = _has_value = True

    def _extras_len(self) -> int:
        return len(self.getfieldval("extras") or b"")


_CUT: dict[type, type] = {}


def cut_class(cls: type) -> type:
    """``cls`` for a body the capture cut short: its extras and key decoded, the value the
    captured bytes of it (``value``, raw), since a layout's fields need the whole value."""
    if cls._value_layout is None:
        return cls                      # extras and a raw value: it reads a prefix as is
    got = _CUT.get(cls)
    if got is None:
        head = [f for f in cls.fields_desc if f.name not in cls._value_names()]
        got = _CUT[cls] = type(cls.__name__ + "Cut", (cls,), {
            "__doc__": f"{cls.__doc__[:-1]}, cut short by the capture (the value as captured).",
            "__module__": __name__,
            "name": f"{cls.name} (cut)",
            "fields_desc": head + [StrField("value", b"")],
            "dispatch_hook": _raw_if_short(cls._extras_len_of()),
            "_value_layout": None, "_has_value": True,
        })
    return got


# --- generation from the tables ---------------------------------------------------------

BODY_CLASSES: dict[str, type] = {}                       # class name -> class
BODY_DISPATCH: dict[tuple[int, bool], list[type]] = {}   # (opcode, request) -> candidates
ALIASES = {"DcpStreamReq": "DcpStreamRequest"}           # table name -> class name


def _suffix(label: str) -> str:
    head, *rest = label.split("-")
    return head.replace(".", "_") + "".join(p.capitalize() for p in rest)


def _camel(text: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_\-. ]+", text) if p)


def _variants(op, request: bool, shape: Shape):
    """(class name, extras layout, value layout) for each body variant of one direction,
    in dispatch order: layouts with a structured value first, then extras-only ones."""
    stem = ALIASES.get(op.name, op.name) + ("" if request else "Response")
    linked = [v for v in shape.values if any(k != "status" for k, _ in v.when)]
    by_status = [v for v in shape.values if v not in linked]
    strict, loose = [], []
    for i, ext in enumerate(shape.extras):
        names = {f.name for f in ext.fields}
        strict += [(stem + _suffix(v.label), ext, v) for v in linked
                   if {k for k, _ in v.when if k != "status"} <= names]
        plain = i == 0 and not linked and not by_status
        loose.append((stem if plain else stem + _suffix(ext.label), ext, None))
    if by_status:
        strict += [("Dcp" + _camel(v.repeated or v.label), None, v) for v in by_status]
    elif not shape.extras:
        loose.append((stem, None, None))
    return strict + loose


def _make_entry(name: str, layout: Layout) -> type:
    return type(name, (Packet,), {
        "__doc__": f"One {layout.repeated} entry ({layout.size} bytes).",
        "__module__": __name__,
        "name": name,
        "fields_desc": layout_fields(layout),
        "extract_padding": lambda self, s: (b"", s),
        "dispatch_hook": _raw_if_short(layout.size),
    })


def _display_name(name, op, request, shape, val, label) -> str:
    if val is not None and not any(k != "status" for k, _ in val.when):
        return name
    text = op.name + ("" if request else " response")
    if label and len(_variants(op, request, shape)) > 1:
        text += " " + label
    return text


def _make_body(name, op, request, shape, ext, val, classes: dict[str, type]) -> type:
    defaults = {k: v for k, v in val.when if k != "status"} if val is not None else {}
    has_key = shape.key is not Presence.FORBIDDEN
    has_value = shape.value is not Presence.FORBIDDEN and not shape.values
    fields = layout_fields(ext, defaults) if ext is not None else []
    if op.document and request and has_key:     # read with makeDocKey: a collection prefix
        fields.append(ConditionalField(_CollectionIdField("collection_id"),
                                       lambda p: p._collection_aware()))
        key = StrLenField("key", b"",
                          length_from=lambda p: p._header_len("keylen") - p._prefix_len())
    else:
        key = StrLenField("key", b"", length_from=lambda p: p._header_len("keylen"))
    fields.append(key if has_key else ConditionalField(key, lambda p: p._extra_key()))
    min_len = ext.size if ext is not None else 0
    if val is not None and val.repeated:
        entry = _make_entry(name + "Entry", val)
        classes[entry.__name__] = entry
        fields.append(PacketListField(val.repeated, [], entry, max_count=MAX_LIST_ITEMS))
    elif val is not None:
        fields += layout_fields(val)
        min_len += val.size
    elif has_value:
        fields.append(StrField("value", b""))
    else:
        fields.append(ConditionalField(StrField("value", b""), lambda p: p._extra_value()))
    label = val.label if val is not None else (ext.label if ext is not None else None)
    doc = f"{op.title} {'request' if request else 'response'}" + (f", {label}" if label else "")
    if val is not None and val.note:
        doc += f" ({val.note})"
    return type(name, (McbpBody,), {
        "__doc__": doc + ".",
        "__module__": __name__,
        "name": _display_name(name, op, request, shape, val, label),
        "fields_desc": fields,
        "dispatch_hook": _raw_if_short(min_len),
        "_opcode": op.code, "_request": request, "_extras_layout": ext, "_value_layout": val,
        "_has_key": has_key, "_has_value": has_value, "layout": label,
    })


def generate(opcodes, classes: dict[str, type], dispatch: dict[tuple[int, bool], list[type]]) -> None:
    """Build the body classes of ``opcodes`` into ``classes`` (name -> class) and
    ``dispatch`` ((opcode, request) -> candidates, read by ``MCBP.guess_payload_class``).
    A response layout shared by several opcodes (the failover log) becomes one class, the
    first opcode's (or the one already in ``classes``)."""
    shared: dict[tuple[int, int], type] = {
        (id(c._extras_layout), id(c._value_layout)): c for c in classes.values()
        if isinstance(c, type) and issubclass(c, McbpBody) and c._request is False
        and c._value_layout is not None}
    for op in opcodes:
        for request, shape in ((True, op.request), (False, op.response)):
            if not request and shape == Shape():
                continue
            for name, ext, val in _variants(op, request, shape):
                key = (id(ext), id(val))
                cls = shared.get(key) if val is not None and not request else None
                if cls is None:
                    cls = _make_body(name, op, request, shape, ext, val, classes)
                    classes[name] = cls
                    overload = {"opcode": op.code}
                    if not request:
                        overload.update((k, v) for k, v in (val.when if val else ()) if k == "status")
                        shared[key] = cls
                    bind_top_down(MCBP, cls, **overload)
                dispatch.setdefault((op.code, request), []).append(cls)


generate(DCP_OPCODES, BODY_CLASSES, BODY_DISPATCH)
globals().update(BODY_CLASSES)
for _table_name, _class_name in ALIASES.items():
    globals()[_table_name] = BODY_CLASSES[_class_name]


# --- summary line -------------------------------------------------------------------------

def _field_text(f: Field, value: int) -> str:
    if f.flags is not None:
        return f.flags.text(value)
    if f.names is not None:
        return f.names.text(value)
    return f"{value:#x}" if f.display == "hex" else str(value)


def info_line(header: MCBP, body: McbpBody | None) -> str:
    """One line like Wireshark's Info column: opcode, direction, vb or status, fields."""
    if body is None and isinstance(header.payload, McbpBody):
        body = header.payload
    magic = header._magic()
    code = header.getfieldval("opcode") or 0
    parts = [opcode_name(magic, code)]
    if magic in REQUEST_MAGICS:
        parts += ["request", f"vb:{header.getfieldval('vbucket') or 0}"]
    else:
        parts.append("response" if magic in RESPONSE_MAGICS else f"magic:{magic:#04x}")
        parts.append(STATUS.text(header.getfieldval("status") or 0))
    sid = header.stream_id
    if sid is not None:
        parts.append(f"sid:{sid}")
    if body is not None:
        for layout in (body._extras_layout, body._value_layout):
            if layout is None:
                continue
            if layout.repeated:
                entries = [e for e in body.getfieldval(layout.repeated)
                           if not isinstance(e, conf.raw_layer)]
                shown = [
                    "@".join(_field_text(f, int(e.getfieldval(f.name))) for f in layout.fields)
                    for e in entries[:4]]
                if len(entries) > 4:
                    shown.append(f"... {len(entries)} entries")
                parts.append(f"{layout.repeated}=[{', '.join(shown)}]")
                continue
            for f in layout.fields:
                value = int(body.getfieldval(f.name))
                if f.shown == "never" or (f.shown == "if_set" and not value):
                    continue
                parts.append(f"{f.label}={_field_text(f, value)}")
        cid = body.fields.get("collection_id")
        if cid is not None:
            name = header.collection_name
            parts.append(f"cid={cid:#x}" + (f"({name})" if name else ""))
        key = body.getfieldval("key") if "key" in body.default_fields else None
        if key:
            parts.append(f"key={key.decode('utf-8', 'backslashreplace')!r}")
        value = body.getfieldval("value") if "value" in body.default_fields else None
        if value:
            parts.append(f"value_len={len(value)}")
    return " ".join(parts)


# --- TCP ports ----------------------------------------------------------------------------

for _port in DCP_PORTS:
    bind_bottom_up(TCP, MCBP, dport=_port)
    bind_bottom_up(TCP, MCBP, sport=_port)
bind_top_down(TCP, MCBP, dport=DCP_PORTS[0])


__all__ = ["MCBP", "FrameInfo", "McbpBody", "MCBPGeneric", "BODY_CLASSES", "BODY_DISPATCH",
           "info_line", "scapy_field", "layout_fields", *BODY_CLASSES, *ALIASES]
