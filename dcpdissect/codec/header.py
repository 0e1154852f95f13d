"""The one place that unpacks (and packs) the 24-byte MCBP header.

Everything is compiled once, at import, from the tables of :mod:`dcpdissect.protocol.header`:
``HEADER`` is the ``struct.Struct`` of the classic layout; a flexible header is the same
bytes with the 2-byte key length split into (framing extras length, key length), and
``unpack`` / ``peek`` split it with the shift and mask that follow from the two tables. This
is the hot path of decoding and framing: no per-call allocation beyond the returned tuple
(``unpack`` gives a plain tuple, ``peek`` the named :class:`Header`, about 0.1 µs dearer).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..protocol.constants import FLEXIBLE_MAGICS, HEADER_SIZE
from ..protocol.header import (
    CLASSIC_HEADER, FLEXIBLE_HEADER, HEADER_FIELDS, HeaderField, header_field,
)

_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def struct_format(layout: tuple[HeaderField, ...]) -> str:
    """The ``struct`` format of a header layout (big-endian, no padding)."""
    return ">" + "".join(_CODES[f.width] for f in layout)


def numpy_dtype(layout: tuple[HeaderField, ...] = CLASSIC_HEADER) -> list[tuple[str, str]]:
    """A numpy structured dtype (as a list: numpy is not imported here) for an array of
    headers laid out end to end."""
    return [(f.name, "u1" if f.width == 1 else f">u{f.width}") for f in layout]


class Header(NamedTuple):
    """One header, flexible framing resolved (``framing_len`` 0 for classic framing);
    ``specific`` is the vBucket of a request or the status of a response."""
    magic: int
    opcode: int
    framing_len: int
    keylen: int
    extlen: int
    datatype: int
    specific: int
    bodylen: int
    opaque: int
    cas: int


def _split() -> tuple[int, int]:
    """(shift of framing_len, mask of keylen) inside the classic 2-byte key length."""
    whole = header_field(CLASSIC_HEADER, "keylen")
    framing, key = header_field(FLEXIBLE_HEADER, "framing_len"), header_field(FLEXIBLE_HEADER, "keylen")
    end = whole.offset + whole.width
    assert whole.offset == framing.offset and key.offset + key.width == end, "flexible split moved"
    return 8 * (end - framing.offset - framing.width), (1 << 8 * key.width) - 1


assert Header._fields == HEADER_FIELDS, "Header fields must follow protocol.header"
assert tuple(f.name for f in CLASSIC_HEADER) == tuple(n for n in HEADER_FIELDS if n != "framing_len")

HEADER = struct.Struct(struct_format(CLASSIC_HEADER))
_FRAMING_SHIFT, _KEY_MASK = _split()
_BODYLEN_FIELD = header_field(CLASSIC_HEADER, "bodylen")
_BODYLEN_OFFSET = _BODYLEN_FIELD.offset
_unpack = HEADER.unpack_from
_bodylen = struct.Struct(">" + _CODES[_BODYLEN_FIELD.width]).unpack_from
# for loops that cannot afford a call per header: bodylen = unpack_bodylen(buf, pos + BODYLEN_OFFSET)[0]
unpack_bodylen, BODYLEN_OFFSET = _bodylen, _BODYLEN_OFFSET
_new = tuple.__new__
_FLEXIBLE = FLEXIBLE_MAGICS


def unpack(buf, pos: int = 0) -> tuple[int, int, int, int, int, int, int, int, int, int]:
    """The fields of :class:`Header`, in its order, as a plain tuple (for hot loops that
    take the values apart at once; ``buf`` must hold the 24 bytes at ``pos``)."""
    magic, opcode, keylen, extlen, datatype, specific, bodylen, opaque, cas = _unpack(buf, pos)
    if magic in _FLEXIBLE:
        return (magic, opcode, keylen >> _FRAMING_SHIFT, keylen & _KEY_MASK, extlen, datatype,
                specific, bodylen, opaque, cas)
    return magic, opcode, 0, keylen, extlen, datatype, specific, bodylen, opaque, cas


def peek(buf, pos: int = 0) -> Header:
    """The header at ``buf[pos:pos + 24]`` (``buf`` must hold those 24 bytes)."""
    return _new(Header, unpack(buf, pos))


def body_length(buf, pos: int = 0) -> int:
    """The body length of the header at ``pos`` (only those 4 bytes are read)."""
    return _bodylen(buf, pos + _BODYLEN_OFFSET)[0]


def frame_size(buf, pos: int = 0) -> int:
    """Bytes of the whole frame (header + body) whose header starts at ``pos``."""
    return HEADER_SIZE + _bodylen(buf, pos + _BODYLEN_OFFSET)[0]


def pack(magic: int, opcode: int, framing_len: int, keylen: int, extlen: int, datatype: int,
         specific: int, bodylen: int, opaque: int, cas: int) -> bytes:
    """The 24 header bytes (``framing_len`` must be 0 unless ``magic`` is flexible)."""
    if magic in _FLEXIBLE:
        keylen |= framing_len << _FRAMING_SHIFT
    elif framing_len:
        raise ValueError(f"framing extras need a flexible magic, not {magic:#04x}")
    return HEADER.pack(magic, opcode, keylen, extlen, datatype, specific, bodylen, opaque, cas)
