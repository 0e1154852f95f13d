"""Framing extras (flexible framing): nibble-encoded id/length entries with escapes."""

from __future__ import annotations

from typing import NamedTuple

from ..protocol import FRAME_INFO_STREAM_ID, REQUEST_FRAME_INFOS, RESPONSE_FRAME_INFOS


class FrameInfo(NamedTuple):
    id: int
    name: str
    data: bytes


class FrameInfoError(ValueError):
    """The framing extras run past their end (the server answers Einval)."""


def parse_frame_infos(buf: bytes, request: bool) -> list[FrameInfo]:
    """Decode every entry; raises FrameInfoError on an escape or data past the end."""
    names = (REQUEST_FRAME_INFOS if request else RESPONSE_FRAME_INFOS).values
    out, pos, end = [], 0, len(buf)
    while pos < end:
        tag = buf[pos]
        pos += 1
        fid, flen = tag >> 4, tag & 0x0F
        if fid == 0x0F:
            if pos >= end:
                raise FrameInfoError(f"id escape byte missing at offset {pos - 1}")
            fid = 15 + buf[pos]
            pos += 1
        if flen == 0x0F:
            if pos >= end:
                raise FrameInfoError(f"length escape byte missing at offset {pos - 1}")
            flen = 15 + buf[pos]
            pos += 1
        if pos + flen > end:
            raise FrameInfoError(f"frame info {fid} length {flen} runs past the end ({end - pos} left)")
        out.append(FrameInfo(fid, names.get(fid, f"unknown:{fid}"), bytes(buf[pos:pos + flen])))
        pos += flen
    return out


def encode_frame_info(fid: int, data: bytes) -> bytes:
    """One entry; ids and lengths of 15 or more use the escape byte."""
    out = bytearray([0])
    tag_id, tag_len = fid, len(data)
    if fid >= 15:
        tag_id = 0x0F
        out.append(fid - 15)
    if len(data) >= 15:
        tag_len = 0x0F
        out.append(len(data) - 15)
    out[0] = tag_id << 4 | tag_len
    return bytes(out) + bytes(data)


def stream_id_of(infos: list[FrameInfo]) -> int | None:
    for info in infos:
        if info.id == FRAME_INFO_STREAM_ID and len(info.data) == 2:
            return int.from_bytes(info.data, "big")
    return None
