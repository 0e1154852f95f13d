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


def leb128(value: int) -> bytes:
    """The unsigned leb128 encoding of ``value`` (a collection id prefix)."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


# -- DcpSystemEvent values -----------------------------------------------------------------
#
# Event ids (include/memcached/protocol_binary.h mcbp::systemevent::id): 0 BeginCollection,
# 1 EndCollection, 3 CreateScope, 4 DropScope, 5 ModifyCollection. The key is the new collection's or scope's name (create and modify;
# drops have none: engines/ep/src/dcp/response.h CollectionCreateProducerMessage::getKey,
# SystemEventProducerMessage::makeWithFlatBuffersValue). Versions 0 and 1 carry the packed
# big-endian structs of engines/ep/src/collections/system_event_types.h (CreateEventDcpData,
# CreateWithMaxTtlEventDcpData, DropEventDcpData: manifest uid u64, scope id u32, collection
# id u32[, max ttl u32]; CreateScopeEventDcpData, DropScopeEventDcpData: manifest uid u64,
# scope id u32); version 2 a FlatBuffers table of engines/ep/src/collections/events.fbs
# (Collection, DroppedCollection, Scope, DroppedScope: field 0 uid, field 1 scopeId, field 2
# collectionId in the collection tables).

BEGIN_COLLECTION, END_COLLECTION, CREATE_SCOPE, DROP_SCOPE, MODIFY_COLLECTION = 0, 1, 3, 4, 5
COLLECTION_EVENTS = frozenset({BEGIN_COLLECTION, END_COLLECTION, MODIFY_COLLECTION})
SCOPE_EVENTS = frozenset({CREATE_SCOPE, DROP_SCOPE})


class SystemEvent(NamedTuple):
    event: int
    scope: int                    # scope id
    collection: int | None        # collection id (None: a scope event)
    name: str | None              # the created or modified collection's or scope's name


def system_event(event: int, version: int, key: bytes, value: bytes) -> SystemEvent | None:
    """The ids and name a collection or scope event carries (None: not such an event, or a
    value that does not hold them)."""
    if event not in COLLECTION_EVENTS and event not in SCOPE_EVENTS:
        return None
    collection_event = event in COLLECTION_EVENTS
    value = bytes(value)
    if version in (0, 1):
        if len(value) < (16 if collection_event else 12):
            return None
        scope = int.from_bytes(value[8:12], "big")
        collection = int.from_bytes(value[12:16], "big") if collection_event else None
    elif version == 2:
        scope = _flatbuffer_uint(value, 1)
        collection = _flatbuffer_uint(value, 2) if collection_event else None
        if scope is None or (collection_event and collection is None):
            return None
    else:
        return None
    name = bytes(key).decode("utf-8", "backslashreplace") if key else None
    return SystemEvent(event, scope, collection, name)


def _flatbuffer_uint(buf: bytes, field: int) -> int | None:
    """Field ``field`` (a uint32) of a FlatBuffers root table; 0 when absent (the schema's
    default); None when the buffer is malformed."""
    n = len(buf)
    if n < 8:
        return None
    table = int.from_bytes(buf[0:4], "little")
    if table + 4 > n:
        return None
    vtable = table - int.from_bytes(buf[table:table + 4], "little", signed=True)
    if vtable < 0 or vtable + 4 > n:
        return None
    vt_size = int.from_bytes(buf[vtable:vtable + 2], "little")
    slot = 4 + 2 * field
    if slot + 2 > vt_size or vtable + slot + 2 > n:
        return 0
    at = int.from_bytes(buf[vtable + slot:vtable + slot + 2], "little")
    if not at:
        return 0
    if table + at + 4 > n:
        return None
    return int.from_bytes(buf[table + at:table + at + 4], "little")
