"""The 24-byte MCBP header, as data: which bytes hold which field, for which magics.

Two framings share the header. Classic framing (magics 0x80 0x81 0x82 0x83) has a 2-byte
key length at bytes 2-3; flexible framing (0x08 0x18) splits those bytes into the framing
extras length and a 1-byte key length. Bytes 6-7 are the vBucket in a request and the
status in a response (``specific``). All fields are unsigned big-endian integers.

``codec.header`` compiles these tables into the one ``struct.Struct`` that unpacks a header
(and the numpy dtype of the pipeline); kv_engine's ``include/mcbp/protocol/request.h`` /
``response.h`` are the reference.
"""

from __future__ import annotations

from typing import NamedTuple

from .constants import FLEXIBLE_MAGICS, HEADER_SIZE, MAGICS


class HeaderField(NamedTuple):
    name: str      # as in codec.header.Header, codec.Message and the ``messages`` columns
    offset: int
    width: int     # bytes; unsigned big-endian
    title: str


CLASSIC_HEADER: tuple[HeaderField, ...] = (
    HeaderField("magic", 0, 1, "Magic"),
    HeaderField("opcode", 1, 1, "Opcode"),
    HeaderField("keylen", 2, 2, "Key length"),
    HeaderField("extlen", 4, 1, "Extras length"),
    HeaderField("datatype", 5, 1, "Datatype"),
    HeaderField("specific", 6, 2, "vBucket (request) or status (response)"),
    HeaderField("bodylen", 8, 4, "Total body length"),
    HeaderField("opaque", 12, 4, "Opaque"),
    HeaderField("cas", 16, 8, "CAS"),
)

FLEXIBLE_HEADER: tuple[HeaderField, ...] = (
    *CLASSIC_HEADER[:2],
    HeaderField("framing_len", 2, 1, "Framing extras length"),
    HeaderField("keylen", 3, 1, "Key length"),
    *CLASSIC_HEADER[3:],
)

CLASSIC_MAGICS = frozenset(MAGICS.values) - FLEXIBLE_MAGICS

# Which magics use which layout.
HEADER_LAYOUTS: tuple[tuple[frozenset[int], tuple[HeaderField, ...]], ...] = (
    (CLASSIC_MAGICS, CLASSIC_HEADER),
    (FLEXIBLE_MAGICS, FLEXIBLE_HEADER),
)

# Every field of either layout, in wire order (a classic header has framing_len 0).
HEADER_FIELDS: tuple[str, ...] = tuple(f.name for f in FLEXIBLE_HEADER)


def header_layout(magic: int) -> tuple[HeaderField, ...]:
    """The layout a header with this magic uses (classic for an unknown magic: its bytes
    2-3 are read as one key length, as the server would before rejecting the magic)."""
    return FLEXIBLE_HEADER if magic in FLEXIBLE_MAGICS else CLASSIC_HEADER


def header_field(layout: tuple[HeaderField, ...], name: str) -> HeaderField:
    for f in layout:
        if f.name == name:
            return f
    raise KeyError(name)


def _check(layout: tuple[HeaderField, ...]) -> None:
    at = 0
    for f in layout:
        if f.offset != at or f.width not in (1, 2, 4, 8):
            raise ValueError(f"header field {f.name} at {f.offset} (width {f.width}) after byte {at}")
        at += f.width
    if at != HEADER_SIZE:
        raise ValueError(f"header layout is {at} bytes, not {HEADER_SIZE}")


for _magics, _layout in HEADER_LAYOUTS:
    _check(_layout)
