"""Compile protocol-table layouts into precompiled ``struct.Struct`` objects."""

from __future__ import annotations

import struct

from ..protocol import Layout

_WIDTH_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
_CACHE: dict[int, tuple[struct.Struct, tuple[str, ...]]] = {}


def compiled(layout: Layout) -> tuple[struct.Struct, tuple[str, ...]]:
    """The (Struct, field names) pair that packs/unpacks ``layout`` (gaps become padding)."""
    hit = _CACHE.get(id(layout))
    if hit is None:
        fmt, names, pos = [">"], [], 0
        for f in sorted(layout.fields, key=lambda f: f.offset):
            if f.offset > pos:
                fmt.append(f"{f.offset - pos}x")
            fmt.append(_WIDTH_CODES[f.width])
            names.append(f.name)
            pos = f.offset + f.width
        if layout.size > pos:
            fmt.append(f"{layout.size - pos}x")
        hit = _CACHE[id(layout)] = (struct.Struct("".join(fmt)), tuple(names))
    return hit


def unpack(layout: Layout, buf, offset: int = 0) -> dict[str, int]:
    st, names = compiled(layout)
    return dict(zip(names, st.unpack_from(buf, offset)))


def pack(layout: Layout, values: dict) -> bytes:
    """Pack ``values`` (missing fields are 0; flag fields accept ``"a+b"`` text)."""
    st, names = compiled(layout)
    by_name = {f.name: f for f in layout.fields}
    out = []
    for name in names:
        v = values.get(name, 0)
        if not isinstance(v, int):
            flags = by_name[name].flags
            v = flags.parse(v) if flags is not None else int(v)
        out.append(v)
    return st.pack(*out)
