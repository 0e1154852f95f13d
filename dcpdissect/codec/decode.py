"""Decode one MCBP frame into a plain :class:`Message` record."""

from __future__ import annotations

import struct

from ..protocol import (
    FLEXIBLE_MAGICS, HEADER_SIZE, MAGICS, OPCODES, REQUEST_MAGICS, RESPONSE_MAGICS, Layout,
    Shape, opcode_name,
)
from .frameinfo import FrameInfoError, parse_frame_infos, stream_id_of
from .layouts import compiled

HEADER = struct.Struct(">BBHBBHIIQ")       # classic: magic opcode keylen extlen dt vb/st body opaque cas
FLEX_LENS = struct.Struct(">BB")          # flexible framing: bytes 2-3 = framing len, keylen
_EMPTY_SHAPE = Shape()


class Message:
    """One decoded MCBP message (header, framing extras, extras/value fields, key)."""

    __slots__ = (
        "magic", "opcode", "framing_len", "keylen", "extlen", "datatype", "vbucket", "status",
        "bodylen", "opaque", "cas", "frame_infos", "stream_id", "extras", "key", "value",
        "fields", "layout", "problems",
    )

    @property
    def is_request(self) -> bool:
        return self.magic in REQUEST_MAGICS

    @property
    def name(self) -> str:
        return opcode_name(self.magic, self.opcode)

    @property
    def value_len(self) -> int:
        return self.bodylen - self.framing_len - self.extlen - self.keylen

    @property
    def spec(self):
        return OPCODES.get(self.opcode) if self.magic not in (0x82, 0x83) else None

    @property
    def shape(self) -> Shape:
        spec = self.spec
        if spec is None:
            return _EMPTY_SHAPE
        return spec.request if self.is_request else spec.response

    def __repr__(self) -> str:
        where = f"vb={self.vbucket}" if self.is_request else f"status={self.status:#x}"
        return f"<Message {self.name} magic={self.magic:#04x} {where} opaque={self.opaque:#x} {self.fields}>"


def parse_header(buf, offset: int = 0) -> tuple[int, int, int, int, int, int, int, int, int, int]:
    """(magic, opcode, framing_len, keylen, extlen, datatype, vb_or_status, bodylen, opaque, cas)."""
    magic, opcode, keylen, extlen, datatype, specific, bodylen, opaque, cas = HEADER.unpack_from(buf, offset)
    framing_len = 0
    if magic in FLEXIBLE_MAGICS:
        framing_len, keylen = FLEX_LENS.unpack_from(buf, offset + 2)
    return magic, opcode, framing_len, keylen, extlen, datatype, specific, bodylen, opaque, cas


def decode(buf) -> Message:
    """Decode exactly one frame (24-byte header + body). Never raises on bad content:
    problems found while decoding are listed in ``Message.problems``.
    """
    if len(buf) < HEADER_SIZE:
        raise ValueError(f"need {HEADER_SIZE} header bytes, got {len(buf)}")
    m = Message()
    (m.magic, m.opcode, m.framing_len, m.keylen, m.extlen, m.datatype, specific,
     m.bodylen, m.opaque, m.cas) = parse_header(buf)
    request = m.magic in REQUEST_MAGICS
    m.vbucket, m.status = (specific, None) if request else (None, specific)
    m.problems = problems = []
    m.fields = {}
    m.layout = None
    m.frame_infos = []
    m.stream_id = None
    if m.magic not in REQUEST_MAGICS and m.magic not in RESPONSE_MAGICS:
        problems.append(f"unknown magic {m.magic:#04x}")

    body = memoryview(buf)[HEADER_SIZE:HEADER_SIZE + m.bodylen]
    if len(body) < m.bodylen:
        problems.append(f"frame truncated: body has {len(body)} of {m.bodylen} bytes")
    f_end = m.framing_len
    e_end = f_end + m.extlen
    k_end = e_end + m.keylen
    if k_end > m.bodylen:
        problems.append(f"framing extras {m.framing_len} + extras {m.extlen} + key {m.keylen}"
                        f" exceed body length {m.bodylen}")
    if m.framing_len:
        try:
            m.frame_infos = parse_frame_infos(body[:f_end], request)
        except FrameInfoError as exc:
            problems.append(f"bad framing extras: {exc}")
        m.stream_id = stream_id_of(m.frame_infos)
    m.extras = bytes(body[f_end:e_end])
    m.key = bytes(body[e_end:k_end])
    m.value = body[k_end:] if k_end <= len(body) else memoryview(b"")
    if k_end <= m.bodylen and len(body) == m.bodylen:
        _decode_fields(m)
    return m


def _decode_fields(m: Message) -> None:
    shape = m.shape
    fields = m.fields
    if m.extlen:
        layout = _pick_extras(shape, m.extlen)
        if layout is not None:
            st, names = compiled(layout)
            fields.update(zip(names, st.unpack_from(m.extras)))
            m.layout = layout.label
        elif m.spec is not None:
            m.problems.append(f"extras length {m.extlen} not in {shape.extras_sizes}")
    if shape.values:
        _decode_value(m, shape.values)


def _pick_extras(shape: Shape, extlen: int) -> Layout | None:
    for layout in shape.extras:
        if layout.size == extlen:
            return layout
    return None


def _decode_value(m: Message, layouts: tuple[Layout, ...]) -> None:
    n = len(m.value)
    facts = m.fields
    candidates = [lay for lay in layouts
                  if all((m.status if k == "status" else facts.get(k)) == v for k, v in lay.when)]
    for lay in candidates:
        if lay.repeated:
            if n % lay.size == 0 and (n or lay.when):
                st, names = compiled(lay)
                facts[lay.repeated] = [dict(zip(names, st.unpack_from(m.value, off)))
                                       for off in range(0, n, lay.size)]
                m.layout = lay.label
                return
        elif n == lay.size:
            st, names = compiled(lay)
            facts.update(zip(names, st.unpack_from(m.value)))
            m.layout = lay.label
            return
    if candidates:
        sizes = "/".join(f"{lay.size}{'*n' if lay.repeated else ''}" for lay in candidates)
        m.problems.append(f"value length {n} does not match {sizes}")


def magic_name(magic: int) -> str:
    return MAGICS.text(magic)
