"""Collection-aware DCP: keys with leb128 collection ids, and the system events that name the
collections (listed in builder.SCENARIOS).

``collections``: two producer connections whose HELLO enables Collections. The first streams
vb 0 unfiltered: a scope created (version 0), collections created in it as version 0, 1
(max TTL) and 2 (FlatBuffers, after ``flatbuffers_system_events``), mutations in the default
collection, in collections 8, 9 and 0x88 (a two-byte leb128 prefix), a deletion, and the drop
of collection 9. The second asks vb 1 for collections 8 and 0x88 only (its stream request's
filter ``{"collections":["8","88"]}``) and gets their mutations and no event. A third
connection did not negotiate Collections: its key is a plain key.
"""

from __future__ import annotations

import struct

from ..codec import encode
from ..codec.keys import leb128
from .dsl import T0, Script, Spec, control, dcp_open, failover, hello_exchange, marker, ok, stream_req
from .netsynth import Endpoint

PRODUCER = Endpoint("10.0.9.1", 11210)
COLLECTIONS, XATTR = 0x12, 0x06
UUID = 0xC011EC7100000000
UID = 5                              # the manifest uid the events carry
SCOPE = 8                            # "inventory"
AIRLINE, HOTEL, LANDMARK, ROUTE = 8, 9, 0x88, 0x0A


def ckey(cid: int, key: str) -> bytes:
    return leb128(cid) + key.encode()


def mut(vb: int, opaque: int, seqno: int, key: bytes) -> bytes:
    return encode(0x57, dict(by_seqno=seqno, rev_seqno=1, flags=0, expiration=0), key=key,
                  value=b'{"n":%d}' % seqno, vbucket=vb, opaque=opaque, datatype=0x01,
                  cas=0x17A1000000000000 + seqno)


def deletion(vb: int, opaque: int, seqno: int, key: bytes) -> bytes:
    return encode(0x58, dict(by_seqno=seqno, rev_seqno=2, delete_time=1_700_000_000),
                  layout="V2", key=key, vbucket=vb, opaque=opaque, cas=0x17A1000000000000 + seqno)


def event(vb: int, opaque: int, seqno: int, kind: int, version: int, name: str,
          value: bytes) -> bytes:
    return encode(0x5F, {"by_seqno": seqno, "event": kind, "version": version},
                  key=name.encode(), value=value, vbucket=vb, opaque=opaque)


def flatbuffer_collection(scope: int, cid: int) -> bytes:
    """A FlatBuffers ``Collection`` table (events.fbs) with uid, scopeId and collectionId:
    root offset, vtable (size 10, table size 20, fields 0-2 at 4, 12, 16), then the table
    (soffset back to the vtable, uid u64, scopeId u32, collectionId u32)."""
    vtable = struct.pack("<5H", 10, 20, 4, 12, 16)
    table_at = 4 + len(vtable) + 2                   # root offset, vtable, 2 bytes padding
    table = struct.pack("<iQII", table_at - 4, UID, scope, cid)
    return struct.pack("<I", table_at) + vtable + b"\x00\x00" + table


def _producer(client: Endpoint, name: str, start_ns: int, *features: int) -> Script:
    s = Script(client, PRODUCER, start_ns=start_ns)
    hello_exchange(s, 1, *features)
    s.c2s(dcp_open(name, 0x1, 2))
    s.s2c(ok(0x50, 2))
    return s


def unfiltered() -> Script:
    s = _producer(Endpoint("10.0.9.2", 50900), "collections-all", T0, XATTR, COLLECTIONS)
    s.c2s(control("flatbuffers_system_events", "true", 3))
    s.s2c(ok(0x5E, 3))
    o = 0x200
    s.c2s(stream_req(0, o))
    s.s2c(failover(o, (UUID, 0)))
    s.s2c(marker(0, o, 0, 12, "memory+checkpoint"),
          mut(0, o, 1, ckey(0, "doc-1")),
          event(0, o, 2, 3, 0, "inventory", struct.pack(">QI", UID, SCOPE)),
          event(0, o, 3, 0, 0, "airline", struct.pack(">QII", UID, SCOPE, AIRLINE)),
          event(0, o, 4, 0, 1, "hotel", struct.pack(">QIII", UID, SCOPE, HOTEL, 3600)),
          event(0, o, 5, 0, 2, "route", flatbuffer_collection(SCOPE, ROUTE)),
          event(0, o, 6, 0, 0, "landmark", struct.pack(">QII", UID, SCOPE, LANDMARK)),
          mut(0, o, 7, ckey(AIRLINE, "airline_10")),
          mut(0, o, 8, ckey(HOTEL, "hotel_21")),
          mut(0, o, 9, ckey(LANDMARK, "landmark_3")),
          mut(0, o, 10, ckey(ROUTE, "route_5")),
          deletion(0, o, 11, ckey(HOTEL, "hotel_20")),
          event(0, o, 12, 1, 0, "", struct.pack(">QII", UID, SCOPE, HOTEL)))
    s.conv.close()
    return s


def filtered() -> Script:
    s = _producer(Endpoint("10.0.9.3", 50901), "collections-filtered", T0 + 5_000_000,
                  COLLECTIONS)
    o = 0x300
    s.c2s(stream_req(1, o, value=b'{"collections":["8","88"]}'))
    s.s2c(failover(o, (UUID + 1, 0)))
    s.s2c(marker(1, o, 0, 3, "memory+checkpoint"),
          mut(1, o, 1, ckey(AIRLINE, "airline_11")),
          mut(1, o, 2, ckey(LANDMARK, "landmark_4")),
          mut(1, o, 3, ckey(AIRLINE, "airline_12")))
    s.conv.close()
    return s


def legacy() -> Script:
    s = _producer(Endpoint("10.0.9.4", 50902), "collections-unaware", T0 + 9_000_000, XATTR)
    o = 0x400
    s.c2s(stream_req(2, o))
    s.s2c(failover(o, (UUID + 2, 0)))
    s.s2c(marker(2, o, 0, 1, "memory+checkpoint"), mut(2, o, 1, b"plain-key"))
    s.conv.close()
    return s


SPECS: tuple = (
    Spec("collections", "collections.pcap",
         "collection-aware producers: leb128 collection ids in keys (one- and two-byte), the "
         "scope and collections named by system events of versions 0, 1 and 2 (FlatBuffers), "
         "a drop, a stream filtered to two collections, and a connection without Collections",
         lambda: [unfiltered(), filtered(), legacy()]),
)
