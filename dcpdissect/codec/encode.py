"""Encode MCBP frames from the same protocol tables the decoder uses."""

from __future__ import annotations

from ..protocol import FLEXIBLE_MAGICS, FRAME_INFO_STREAM_ID, OPCODES, Layout, Shape
from .frameinfo import encode_frame_info
from .header import pack as pack_header
from .layouts import pack


def _layout_named(layouts, label):
    for layout in layouts:
        if layout.label == label:
            return layout
    return None


def _select(shape: Shape, fields: dict, layout: str | None, status: int):
    """Choose (extras layout, value layout) for the given fields and layout label."""
    value_layout = None
    if layout is not None:
        value_layout = _layout_named(shape.values, layout)
    if value_layout is None and shape.values and layout is None:
        for cand in shape.values:
            wanted = cand.repeated or cand.fields[0].name
            if wanted in fields and all(status == v for k, v in cand.when if k == "status"):
                value_layout = cand
                break
    extras_layout = _layout_named(shape.extras, layout) if layout else None
    if extras_layout is None and value_layout is not None and value_layout.when:
        keys = {k for k, _ in value_layout.when if k != "status"}
        extras_layout = next((e for e in shape.extras
                              if keys and keys <= {f.name for f in e.fields}), None)
    if extras_layout is None and len(shape.extras) == 1:
        extras_layout = shape.extras[0]
    if extras_layout is None and shape.extras and layout is None:
        extras_layout = shape.extras[0]
    return extras_layout, value_layout


def encode(opcode: int, fields: dict | None = None, *, request: bool = True,
           magic: int | None = None, layout: str | None = None, vbucket: int = 0,
           status: int = 0, opaque: int = 0, cas: int = 0, datatype: int = 0,
           key: bytes = b"", value: bytes | None = None, extras: bytes | None = None,
           frame_infos: tuple[tuple[int, bytes], ...] = (), stream_id: int | None = None) -> bytes:
    """Build one frame. ``fields`` fill the extras/value layout chosen by ``layout``
    (a label such as ``"V2.2"``) or, when unambiguous, by the fields themselves.
    Explicit ``extras``/``value`` bytes override the layouts (for malformed frames).
    """
    fields = dict(fields or {})
    spec = OPCODES.get(opcode)
    shape = (spec.request if request else spec.response) if spec else Shape()
    ext_layout, val_layout = _select(shape, fields, layout, status)
    if val_layout is not None:
        for k, v in val_layout.when:
            if k != "status":
                fields.setdefault(k, v)
    if extras is None:
        extras = pack(ext_layout, fields) if ext_layout is not None and shape.extras else b""
    if value is None:
        value = _pack_value(val_layout, fields) if val_layout is not None else b""
    framing = b"".join(encode_frame_info(fid, data) for fid, data in frame_infos)
    if stream_id is not None:
        framing += encode_frame_info(FRAME_INFO_STREAM_ID, stream_id.to_bytes(2, "big"))
    if magic is None:
        magic = (0x08 if request else 0x18) if framing else (0x80 if request else 0x81)
    body = framing + extras + key + bytes(value)
    header = pack_header(magic, opcode, len(framing) if magic in FLEXIBLE_MAGICS else 0, len(key),
                         len(extras), datatype, vbucket if request else status, len(body), opaque,
                         cas)
    return header + body


def _pack_value(layout: Layout, fields: dict) -> bytes:
    if layout.repeated:
        return b"".join(pack(layout, entry) for entry in fields.get(layout.repeated, ()))
    return pack(layout, fields)
