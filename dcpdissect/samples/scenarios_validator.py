"""Single-message rules as kv_engine's validator judges them: violations and legal neighbours.

``violations-validator`` breaks each generic rule of ``analysis/rules/structure`` once, on
messages the client sends to memcached after HELLO and DcpOpen (so that the negotiated
features are known). ``legal-server-behaviour`` holds what healthy clusters do and the
analyzer once called wrong: 8.0 disk markers with an HPS below their start, memory markers
with a purge seqno above their end, FromLatest requests with uuid 0, Add Stream answered
synchronously without extras, markers and mutations travelling client→server on the
consumer leg of ns_server's proxy, collection keys, xattrs, GetEx and RangeScan on a KV
connection; several vbuckets interleaved, one connection closed with FIN, one never closed.
"""

from __future__ import annotations

import struct

from ..codec import encode
from ..codec.header import peek
from .dsl import MAX_SEQNO, T0, Script, Spec, control, doc, failover, marker, ok, stream_req
from .netsynth import Endpoint

PRODUCER = Endpoint("10.0.4.1", 11210)
REPLICA = Endpoint("10.0.4.2", 11209)
UUID = 0x5EED000000000000
JSON_, SNAPPY_, XATTR_, COLLECTIONS_ = 0x0B, 0x0A, 0x06, 0x12
SYNC_REPLICATION_V22 = (("enable_sync_writes", "true"), ("consumer_name", "ns_1@10.0.4.2"),
                        ("max_marker_version", "2.2"))


def hello(s: Script, *features: int, opaque: int = 0xF0) -> None:
    value = b"".join(struct.pack(">H", f) for f in features)
    s.c2s(encode(0x1F, key=b"dcpdissect-sample", value=value, opaque=opaque))
    s.s2c(ok(0x1F, opaque, value=value))


def _open(s: Script, name: str, flags: int, opaque: int = 1, value: bytes = b"") -> None:
    s.c2s(encode(0x50, {"flags": flags}, key=name.encode(), opaque=opaque, value=value,
                 datatype=0x01 if value else 0))
    s.s2c(ok(0x50, opaque))


def ckey(cid: int, key: str) -> bytes:
    """A collection-aware key: leb128 collection id, then the logical key."""
    out = bytearray()
    while True:
        byte, cid = cid & 0x7F, cid >> 7
        out.append(byte | (0x80 if cid else 0))
        if not cid:
            return bytes(out) + key.encode()


def xattrs(*pairs: tuple[bytes, bytes]) -> bytes:
    body = b"".join(struct.pack(">I", len(k) + len(v) + 2) + k + b"\0" + v + b"\0" for k, v in pairs)
    return struct.pack(">I", len(body)) + body


def item(op: int, vb: int, opaque: int, seqno: int, key: bytes, value: bytes = b"", **kw) -> bytes:
    fields = {"by_seqno": seqno, "rev_seqno": 1}
    if op == 0x60:
        fields.update(durability_level=kw.pop("level", 1))
    elif op == 0x58:
        fields.update(delete_time=0)
        kw.setdefault("layout", "V2")
    return encode(op, {**fields, **kw.pop("fields", {})}, key=key, value=value, vbucket=vb,
                  opaque=opaque, cas=kw.pop("cas", 0x17A0000000000000 + seqno), **kw)


def _consumer_leg(name: str, client_port: int, features=(JSON_, XATTR_, SNAPPY_, COLLECTIONS_)) -> Script:
    """ns_server → replica memcached: HELLO (collections, datatypes), DcpOpen consumer."""
    s = Script(Endpoint("10.0.4.3", client_port), REPLICA, start_ns=T0)
    hello(s, *features)
    _open(s, name, 0x0)
    return s


def violations_validator() -> list[Script]:
    """Each generic rule broken once, on vbucket N for the N-th message."""
    s = _consumer_leg("replication:ns_1@10.0.4.1->ns_1@10.0.4.2:default", 43500,
                      features=(JSON_, XATTR_, COLLECTIONS_))
    k = ckey(0, "doc")
    bad = [
        encode(0x5E, key=b"enable_noop", value=b"true", extras=bytes(4), opaque=0x300),  # extras-length
        encode(0x5C, key=b"k", opaque=0x301),                                          # key-presence
        encode(0x5E, key=b"set_noop_interval", opaque=0x302),                          # value-presence
        encode(0x66, value=bytes(41), opaque=0x303),                                   # value-length
        encode(0x5D, {"bytes_to_ack": 10}, datatype=0x01, opaque=0x304),               # datatype-invalid
        item(0x57, 5, 0x305, 1, ckey(0, "k" * 251), b"{}"),                            # key-too-long
        item(0x57, 6, 0x306, 1, k, b"\x00", datatype=0x02),                            # datatype-not-negotiated
        item(0x57, 7, 0x307, 1, b"\x81\x82", b"{}"),                                   # document-key-invalid
        item(0x57, 8, 0x308, 1, ckey(8, "doc"), xattrs((b"_sync", b"{oops")) + b"{}",
             datatype=0x05),                                                           # xattr-invalid
        item(0x62, 9, 0x309, 2, k, fields={"prepared_seqno": 1, "commit_seqno": 2},
             cas=5),                                                                    # cas-invalid
        item(0x57, 10, 0x30A, 0, k, b"{}"),                                            # seqno-zero
        item(0x57, 11, 0x30B, 1, k, b"{}", fields={"nmeta": 4}),                       # nmeta-not-zero
        encode(0x5B, {"state": 7}, vbucket=12, opaque=0x30C),                          # vbucket-state-invalid
        encode(0x5F, {"by_seqno": 3, "event": 2, "version": 0}, vbucket=13,
               opaque=0x30D),                                                           # system-event-invalid
        item(0x60, 14, 0x30E, 4, k, b"{}", level=0),                                    # durability-level-invalid
        encode(0x5C, opaque=0x30F, frame_infos=((3, b"abc"),)),                        # frame-info-unknown
        encode(0x5C, opaque=0x310, frame_infos=((0, b"x"),)),                          # frame-info-invalid
        encode(0x5C, opaque=0x311, frame_infos=((1, b"\x01"),)),                       # frame-info-not-supported
        encode(0x5C, opaque=0x312, stream_id=7),                                       # stream-id-on-consumer
        encode(0x64, {"by_seqno": 9}, vbucket=19, opaque=0x313),                       # unsupported-on-server
        item(0x58, 20, 0x314, 5, k, layout="V1", fields={"nmeta": 0}),                 # extras-length (V1 on V2)
        encode(0x50, {"flags": 0}, key=b"again", opaque=0x315),                        # dcp-open-twice
    ]
    for frame in bad:
        s.c2s(frame)
        h = peek(frame)
        s.s2c(ok(h.opcode, h.opaque, status=0x04))
    s.conv.close()

    # DcpOpen faults, one connection each (a DcpOpen is only valid once per connection)
    opens = []
    for i, (flags, value) in enumerate([
            (0x02, b""),                                   # open-flags-invalid
            (0x48, b""),                                   # open-flags-combination
            (0x01, b'{"consumer_name":"x"}'),              # open-value-invalid
            (0x00, b'{"consumer_name":"x"'),               # open-value-invalid (not JSON)
    ]):
        o = Script(Endpoint("10.0.4.4", 43600 + i), PRODUCER, start_ns=T0 + (i + 1) * 1_000_000)
        o.c2s(encode(0x50, {"flags": flags}, key=b"open-%d" % i, value=value, opaque=1,
                     datatype=0x01 if value else 0))
        o.s2c(ok(0x50, 1, status=0x04))
        o.conv.close()
        opens.append(o)
    raw = Script(Endpoint("10.0.4.4", 43610), PRODUCER, start_ns=T0 + 9_000_000)
    raw.c2s(encode(0x50, {"flags": 0x01}, key=b"open-raw", value=b"{}", opaque=1))  # open-value-datatype
    raw.s2c(ok(0x50, 1, status=0x04))
    raw.conv.close()
    # a DCP command on a connection that never sent DcpOpen
    plain = Script(Endpoint("10.0.4.5", 43700), PRODUCER, start_ns=T0 + 10_000_000)
    hello(plain, JSON_)
    plain.c2s(encode(0x5E, key=b"enable_noop", value=b"true", opaque=2))           # dcp-not-open
    plain.s2c(ok(0x5E, 2, status=0x04))
    plain.conv.close()
    return [s, *opens, raw, plain]


def legal_server_behaviour() -> list[Script]:
    """What healthy clusters send (see the module docstring); no warning or error."""
    p = Script(Endpoint("10.0.4.6", 50600), PRODUCER, start_ns=T0)
    hello(p, JSON_, XATTR_, SNAPPY_, COLLECTIONS_)
    _open(p, "replication:ns_1@10.0.4.1->ns_1@10.0.4.2:default", 0x25)
    # sync replication and max_marker_version=2.2 (with collections): V2.2 markers
    p.c2s(*(control(k, v, 2 + i) for i, (k, v) in enumerate(SYNC_REPLICATION_V22)))
    p.s2c(*(ok(0x5E, 2 + i) for i in range(len(SYNC_REPLICATION_V22))))
    p.c2s(stream_req(0, 0x10, start=0, uuid=0), stream_req(1, 0x11, start=0, uuid=0))
    p.s2c(failover(0x10, (UUID, 0)), failover(0x11, (UUID + 1, 0)))
    # FromLatest with uuid 0 and a start: the producer replaces both (producer.cc)
    p.c2s(stream_req(2, 0x12, start=500, uuid=0, snap_start=400, snap_end=300, flags=0x40))
    p.s2c(failover(0x12, (UUID + 2, 0)))
    # vb 0: an 8.0 disk marker whose HPS (3) is below its start (10): "no HPS"
    p.s2c(marker(0, 0x10, 0, 12, "disk+checkpoint", layout="V2.2", max_visible_seqno=12,
                 high_completed_seqno=3, purge_seqno=0, high_prepared_seqno=3))
    # vb 1 interleaved: a memory marker whose purge seqno is above its end (ignored by consumers)
    p.s2c(marker(1, 0x11, 0, 2, "memory+checkpoint", layout="V2.2", max_visible_seqno=2,
                 high_completed_seqno=0, purge_seqno=40, high_prepared_seqno=0))
    for seqno in range(1, 13):
        p.s2c(item(0x57, 0, 0x10, seqno, ckey(8, f"user::{seqno}"), doc(seqno), datatype=0x01))
        if seqno <= 2:
            p.s2c(item(0x57, 1, 0x11, seqno, ckey(0, f"k{seqno}"),
                       xattrs((b"_sync", b'{"rev":"1-a"}')) + doc(seqno), datatype=0x05))
    p.conv.close()

    # the consumer leg of ns_server's proxy: memcached is the consumer and receives the data
    c = _consumer_leg("replication:ns_1@10.0.4.1->ns_1@10.0.4.2:default", 43800)
    c.c2s(encode(0x51, {"flags": 0x10}, vbucket=3, opaque=0x40),
          encode(0x51, {"flags": 0x10}, vbucket=4, opaque=0x41),
          encode(0x51, {"flags": 0x10}, vbucket=5, opaque=0x42),
          encode(0x51, {"flags": 0x10}, vbucket=6, opaque=0x43))
    c.s2c(ok(0x51, 0x40, status=0x07),                     # NotMyVbucket: no extras
          ok(0x51, 0x41, status=0x02),                     # KeyEexists (stream exists)
          ok(0x51, 0x42, status=0x04),                     # Einval
          ok(0x51, 0x43, fields={"new_opaque": 0x2043}))   # accepted: the stream opaque
    c.s2c(stream_req(6, 0x2043, start=0, value=b'{"uid":"0"}'))
    c.c2s(failover(0x2043, (UUID + 6, 0)))
    c.c2s(marker(6, 0x2043, 0, 4, "memory+checkpoint"))
    for seqno in (1, 2, 3):
        c.c2s(item(0x57, 6, 0x2043, seqno, ckey(0, f"doc-{seqno}"), doc(seqno), datatype=0x01))
    c.c2s(item(0x58, 6, 0x2043, 4, ckey(0, "doc-0")))      # V2 deletion (collections)
    # no FIN: the capture ends with the replication connection open

    kv = Script(Endpoint("10.0.4.7", 50700), PRODUCER, start_ns=T0 + 2_000_000)
    hello(kv, JSON_, COLLECTIONS_)
    kv.c2s(encode(0x49, key=ckey(0, "doc-1"), opaque=5))             # GetEx
    kv.s2c(encode(0x49, request=False, opaque=5, extras=bytes(4), value=b"{}", datatype=0x01))
    kv.c2s(encode(0xDA, value=b'{"range":{"start":"YQ==","end":"eg=="}}', datatype=0x01,
                  opaque=6))                                          # RangeScanCreate
    kv.s2c(encode(0xDA, request=False, opaque=6, value=bytes(16)))
    kv.conv.close()
    return [p, c, kv]


SPECS: tuple[Spec, ...] = (
    Spec("violations-validator", "violations-validator.pcap",
         "each of kv_engine's validator checks broken once on a consumer connection after "
         "HELLO (collections, JSON, XATTR, Snappy) and DcpOpen, DcpOpen faults on their own "
         "connections, a DCP command on a connection that never sent DcpOpen",
         violations_validator),
    Spec("legal-server-behaviour", "legal-server-behaviour.pcap",
         "legal behaviour the analyzer must not flag: HPS below start, purge above a memory "
         "marker's end, FromLatest with uuid 0, synchronous Add Stream errors, the proxy's "
         "consumer leg, collection keys, xattrs, GetEx and RangeScan; no FIN on one connection",
         legal_server_behaviour),
)

__all__ = ["SPECS", "MAX_SEQNO"]
