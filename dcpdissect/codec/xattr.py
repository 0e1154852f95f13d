"""Extended-attribute blobs at the start of a value with the xattr datatype bit.

The blob is a 4-byte length, then pairs (4-byte length, key, NUL, JSON value, NUL); kv_engine
refuses a blob whose structure, keys or values are wrong, or whose system xattrs exceed
1 MiB (xattr/utils.cc ``validate``, key_validator.cc ``is_valid_xattr_key``).
A snappy-compressed value is judged by its uncompressed length only (the varint at its start).
"""

from __future__ import annotations

import json
import string

from ..protocol import MAX_SYSTEM_XATTR_BYTES, MAX_XATTR_KEY_LENGTH

_PUNCT_OR_CONTROL = set(string.punctuation.encode()) | set(range(32)) | {127}


def snappy_length(data: bytes) -> int | None:
    """The uncompressed length a snappy buffer announces (None: no valid varint)."""
    value = 0
    for i, byte in enumerate(data[:5]):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value
    return None


def _key_valid(key: bytes) -> bool:
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if not key or "\0" in text:
        return False
    system = key[0] in (ord("_"), ord("$"))
    if key[0] in _PUNCT_OR_CONTROL and not system:
        return False
    dot = min((i for i, ch in enumerate(key) if ch in b".["), default=len(key))
    return not (dot == 0 or dot >= MAX_XATTR_KEY_LENGTH or (system and dot == 1))


def xattr_problem(value: bytes) -> str | None:
    """Why kv_engine would refuse the xattr blob at the start of ``value`` (None: valid)."""
    if len(value) < 4:
        return "no room for the xattr blob length"
    size = int.from_bytes(value[:4], "big") + 4
    if size > len(value):
        return f"xattr blob length {size - 4} exceeds the value"
    offset, system, keys = 4, 4, set()
    while offset < size:
        if offset + 7 > size:
            return "truncated xattr pair"
        pair = int.from_bytes(value[offset:offset + 4], "big")
        offset += 4
        if offset + pair > size:
            return "xattr pair runs past the blob"
        end_key = value.find(b"\0", offset, size)
        end_value = value.find(b"\0", end_key + 1, size) if end_key >= 0 else -1
        if end_value < 0:
            return "xattr pair without its NUL terminators"
        key, val = value[offset:end_key], value[end_key + 1:end_value]
        offset = end_value + 1
        if not _key_valid(key):
            return f"invalid xattr key {key[:20]!r}"
        try:
            json.loads(val)
        except (ValueError, RecursionError):
            return f"xattr {key[:20]!r} value is not JSON"
        if pair != len(key) + len(val) + 2:
            return "xattr pair length does not match its key and value"
        if key in keys:
            return f"duplicate xattr key {key[:20]!r}"
        keys.add(key)
        if key[:1] == b"_":
            system += 4 + len(key) + len(val) + 2
    if offset != size:
        return "xattr blob does not end on a pair"
    if system > MAX_SYSTEM_XATTR_BYTES:
        return f"system xattrs use {system} bytes, more than {MAX_SYSTEM_XATTR_BYTES}"
    return None
