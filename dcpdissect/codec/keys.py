"""Document keys of collection-aware connections: an unsigned leb128 collection id, then the
logical key (kv_engine include/mcbp/protocol/unsigned_leb128.h, McbpValidator::is_document_key_valid).
"""

from __future__ import annotations

from typing import NamedTuple

MAX_LEB128_BYTES = 5          # a uint32 collection id


class CollectionKey(NamedTuple):
    collection: int | None    # None: the prefix could not be decoded
    prefix_len: int           # bytes of the leb128 prefix
    problem: str | None       # why kv_engine would refuse the prefix, or None


def split_collection_key(key: bytes) -> CollectionKey:
    """The collection id and where the logical key starts; ``problem`` names an encoding the
    server rejects (no stop byte, non-canonical leb128)."""
    value = 0
    for i, byte in enumerate(key[:MAX_LEB128_BYTES]):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if i and byte == 0:
                return CollectionKey(None, i + 1, "non-canonical leb128")
            return CollectionKey(value, i + 1, None)
    return CollectionKey(None, 0, "no stop byte")
