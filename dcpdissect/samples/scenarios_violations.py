"""Violation samples: each rule of the per-message and framing catalogue broken once.

Every malformed message travels on its own vbucket (or opaque) inside an otherwise
well-formed conversation, so that one finding points at one PDU.
"""

from __future__ import annotations

from ..codec import encode, peek
from ..codec.header import pack as pack_header
from ..protocol import HEADER_SIZE
from . import netsynth as ns
from .dsl import (
    T0,
    Script,
    Spec,
    dcp_open,
    doc,
    failover,
    marker,
    mutation,
    ok,
    stream_req,
)
from .netsynth import Endpoint

CONSUMER = Endpoint("10.0.1.2", 50300)
PRODUCER = Endpoint("10.0.1.1", 11210)
NS_SERVER = Endpoint("10.0.1.2", 43300)
REPLICA = Endpoint("10.0.1.2", 11209)
UUID = 0x7E57000000000000


def _inject(s: Script, direction: str, raw: bytes) -> None:
    """Send bytes that are not an MCBP message (they shift later stream offsets)."""
    s.conv.send(direction, raw)
    s.offsets[direction] += len(raw)


def _open(s: Script, name: str) -> None:
    s.c2s(dcp_open(name, 0x1, 1))
    s.s2c(ok(0x50, 1))


def _streams(s: Script, vbuckets) -> None:
    for vb in vbuckets:
        s.c2s(stream_req(vb, 0x100 + vb))
        s.s2c(failover(0x100 + vb, (UUID + vb, 0)))


def _v2(vb: int, version: int, value: bytes) -> bytes:
    return encode(0x56, extras=bytes([version]), value=value, vbucket=vb, opaque=0x100 + vb)


def _bad_markers() -> list[bytes]:
    """Snapshot markers for vbuckets 0, 1, 2, ...; each breaks the rule named beside it."""
    mk = lambda vb, *a, **kw: marker(vb, 0x100 + vb, *a, **kw)
    v1 = lambda vb, **kw: encode(0x56, dict(start_seqno=0, end_seqno=4, flags=0x01), layout="V1",
                                 vbucket=vb, opaque=0x100 + vb, **kw)
    return [
        encode(0x56, extras=b"\x00" * 5, vbucket=0, opaque=0x100),          # extras-length
        _v2(1, 1, bytes(36)),                                                # marker-version
        _v2(2, 0, bytes(40)),                                                # value-length
        mk(3, 0, 4, "disk", layout="V2.2-doc44", max_visible_seqno=4,       # marker-v22-documented-44
           high_completed_seqno=0, purge_seqno=0),
        v1(4, value=b"oops"),                                                # value-presence
        v1(5, key=b"k"),                                                     # key-presence
        v1(6, datatype=0x01),                                                # datatype-invalid
        mk(7, 0, 4, 0x41),                                                   # marker-unknown-flags
        mk(8, 0, 4, 0x04),                                                   # marker-memory-disk
        mk(9, 0, 4, "memory", layout="V2.0", max_visible_seqno=4,           # marker-hcs-without-disk
           high_completed_seqno=3),
        mk(10, 9, 5, "memory"),                                              # marker-start-after-end
        mk(11, 0, 5, "disk", layout="V2.0", max_visible_seqno=9,            # marker-mvs-beyond-end
           high_completed_seqno=0),
        mk(12, 0, 5, "disk", layout="V2.0", max_visible_seqno=5,            # marker-hcs-beyond-end
           high_completed_seqno=9),
        mk(13, 0, 5, "disk", layout="V2.2", max_visible_seqno=5,            # marker-hps-beyond-end
           high_completed_seqno=0, purge_seqno=0, high_prepared_seqno=9),
        mk(14, 0, 5, "disk", layout="V2.2", max_visible_seqno=5,            # marker-purge-beyond-end
           high_completed_seqno=0, purge_seqno=9, high_prepared_seqno=0),
        mk(15, 0, 5, "memory", layout="V2.2", max_visible_seqno=5,          # marker-hps-without-disk
           high_completed_seqno=0, purge_seqno=0, high_prepared_seqno=4),
    ]


def violations_marker() -> list[Script]:
    """A producer on 11210 sends one broken snapshot marker per vbucket, each followed by
    a mutation; the last vbucket gets a well-formed marker."""
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    _open(s, "violations-marker")
    bad = _bad_markers()
    _streams(s, range(len(bad) + 1))
    for vb, frame in enumerate(bad):
        s.s2c(frame, mutation(vb, 0x100 + vb, 1, f"key-{vb:02d}", doc(vb)))
    good = len(bad)
    s.s2c(marker(good, 0x100 + good, 0, 1, "memory+checkpoint"),
          mutation(good, 0x100 + good, 1, "key-ok", doc(good)))
    s.conv.close()
    return [s]


def violations_add_stream() -> list[Script]:
    """ns_server sends malformed add-stream requests to a consumer on 11209."""
    s = Script(NS_SERVER, REPLICA, start_ns=T0)
    _open(s, "replication:ns_1@10.0.1.1->ns_1@10.0.1.2:default")
    add = lambda vb, **kw: encode(0x51, kw.pop("fields", {"flags": 0x01}), vbucket=vb, opaque=0x20 + vb, **kw)
    requests = [
        add(0, extras=b"\x00\x00\x00\x01\x00\x00\x00\x00"),          # extras-length
        add(1, key=b"vb"),                                           # key-presence
        add(2, datatype=0x01),                                       # datatype-invalid
        add(3, fields={"flags": 0x201}),                              # stream-flags-unknown
        add(4, fields={"flags": 0x08}),                               # stream-flags-no-value
        add(5, fields={"flags": 0x104}),                              # stream-flags-cache-transfer
        add(6),                                                      # well-formed
    ]
    for vb, req in enumerate(requests):
        s.c2s(req)
        if vb == 6:
            s.s2c(encode(0x51, request=False, opaque=0x20 + vb, extras=b""))  # add-stream-response-extras
        elif vb in (3, 4, 5):
            s.s2c(encode(0x51, request=False, status=0x04, opaque=0x20 + vb))
        else:
            s.s2c(ok(0x51, 0x20 + vb, fields={"new_opaque": 0x1000 + vb}))
    s.conv.close()
    return [s]


def violations_stream_request() -> list[Script]:
    """A consumer sends malformed stream requests to a producer on 11210; the producer
    answers three well-formed requests with a short failover log, a short rollback and an
    empty failover log."""
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    _open(s, "violations-stream-request")
    einval = lambda vb: encode(0x53, request=False, status=0x04, opaque=0x200 + vb)
    base = dict(flags=0, start_seqno=0, end_seqno=2**64 - 1, vbucket_uuid=UUID,
                snap_start_seqno=0, snap_end_seqno=0)
    req = lambda vb, **kw: encode(0x53, {**base, **kw.pop("f", {})}, vbucket=vb,
                                  opaque=0x200 + vb, **kw)
    bad = [
        req(0, extras=bytes(40)),                                        # extras-length
        req(1, key=b"x"),                                                # key-presence
        req(2, datatype=0x01),                                           # datatype-invalid
        req(3, f=dict(start_seqno=10, end_seqno=5, snap_start_seqno=10,  # stream-request-start-after-end
                      snap_end_seqno=10)),
        req(4, f=dict(start_seqno=5, snap_start_seqno=6, snap_end_seqno=8)),  # stream-request-snapshot-range
        req(5, f=dict(start_seqno=5, snap_start_seqno=5, snap_end_seqno=5,    # stream-request-uuid-zero
                      vbucket_uuid=0)),
    ]
    for vb, frame in enumerate(bad):
        s.c2s(frame)
        s.s2c(einval(vb))
    s.c2s(req(6))
    s.s2c(encode(0x53, request=False, opaque=0x206, value=bytes(20)))     # value-length (16*n)
    s.c2s(req(7, f=dict(start_seqno=3, snap_start_seqno=3, snap_end_seqno=3)))
    s.s2c(encode(0x53, request=False, status=0x23, opaque=0x207, value=bytes(4)))  # value-length (8)
    s.c2s(req(8))
    s.s2c(encode(0x53, request=False, opaque=0x208))                     # failover-log-empty
    s.conv.close()
    return [s]


def _flex(opcode: int, framing: bytes, rest: bytes = b"", vb: int = 0, opaque: int = 0) -> bytes:
    """A flexible-framing request with explicit framing-extras bytes."""
    body = framing + rest
    return pack_header(0x08, opcode, len(framing), 0, 0, 0, vb, len(body), opaque, 0) + body


def violations_structure() -> list[Script]:
    """Header-level faults: a key longer than the body, framing extras with a missing
    escape byte, an unknown opcode; each between well-formed messages."""
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    _open(s, "violations-structure")
    _streams(s, [0])
    s.s2c(marker(0, 0x100, 0, 3, "memory+checkpoint"))
    long_key = bytearray(mutation(0, 0x100, 1, "doc-1", doc(1)))
    long_key[:HEADER_SIZE] = pack_header(*peek(long_key)._replace(keylen=0x400))  # header-invariant
    s.s2c(bytes(long_key))
    s.s2c(mutation(0, 0x100, 2, "doc-2", doc(2)))
    s.c2s(_flex(0x5E, b"\x2f", opaque=7))                              # framing-extras-encoding
    s.s2c(encode(0x5E, request=False, status=0x04, opaque=7))
    s.c2s(encode(0xEE, opaque=8))                                      # unknown-opcode
    s.s2c(encode(0xEE, request=False, status=0x81, opaque=8))
    s.s2c(mutation(0, 0x100, 3, "doc-3", doc(3)))
    s.conv.close()
    return [s]


GARBAGE = b"\x42<garbage: not a header>\x00\x01\x02"
HUGE = pack_header(0x80, 0x57, 0, 0, 0, 0, 0, 48 << 20, 0, 0)


def violations_garbage() -> list[Script]:
    """Framing faults: non-MCBP bytes with an illegal magic between two messages, a header
    claiming a 48 MiB body followed by valid messages, and (first connection) a lost
    segment followed by more out-of-order segments than the reassembly buffer holds."""
    flood = Script(Endpoint("10.0.1.3", 50400), PRODUCER, start_ns=T0)
    flood.c2s(dcp_open("violations-tcp-cap", 0x1, 1))
    flood.s2c(ok(0x50, 1))                                   # dropped by the transform
    big = mutation(0, 0x100, 1, "k", bytes(range(256)) * 4)
    noop = encode(0x5C, opaque=0x30)
    for frame in (big, noop):          # one byte per segment; the last shares the NOOP's
        flood.messages.append(("s2c", flood.offsets["s2c"], frame))
        flood.offsets["s2c"] += len(frame)
    flood.conv.send("s2c", big + noop, segment_sizes=[1] * (len(big) - 1))
    flood.conv.close()

    s = Script(CONSUMER, PRODUCER, start_ns=T0 + 5_000_000)
    _open(s, "violations-garbage")
    _streams(s, [0])
    s.s2c(marker(0, 0x100, 0, 5, "memory+checkpoint"), mutation(0, 0x100, 1, "doc-1", doc(1)))
    _inject(s, "s2c", GARBAGE)                                         # unknown-magic
    s.s2c(mutation(0, 0x100, 2, "doc-2", doc(2)), mutation(0, 0x100, 3, "doc-3", doc(3)))
    _inject(s, "s2c", HUGE)                                            # frame-too-large
    s.s2c(mutation(0, 0x100, 4, "doc-4", doc(4)), mutation(0, 0x100, 5, "doc-5", doc(5)))
    s.s2c(encode(0x5C, opaque=0x31))
    s.conv.close()
    return [flood, s]


def _flood_transform(pkts):
    """Lose the first server data segment and keep no pure ACKs (to keep the file small)."""
    first = ns.data_indices(pkts, "s2c")[0]
    pkts = ns.drop(pkts, first)
    return [p for p in pkts if p.payload or p.flags & 0x07]


SPECS: tuple[Spec, ...] = (
    Spec("violations-marker", "violations-marker.pcap",
         "one malformed snapshot marker per vbucket (extras, version, value length, flags, "
         "seqno ranges), each breaking one rule", violations_marker),
    Spec("violations-add-stream", "violations-add-stream.pcap",
         "malformed add-stream requests (extras, key, datatype, flags) and a response "
         "without the new opaque", violations_add_stream),
    Spec("violations-stream-request", "violations-stream-request.pcap",
         "malformed stream requests (extras, key, datatype, seqno ranges, uuid 0), a short "
         "failover log and a short rollback response", violations_stream_request),
    Spec("violations-structure", "violations-structure.pcap",
         "a key longer than the body, a framing-extras escape past the end, an unknown opcode",
         violations_structure),
    Spec("violations-garbage", "violations-garbage.pcap",
         "garbage with an illegal magic between messages, a 48 MiB header, and an "
         "out-of-order buffer overflow after a lost segment",
         violations_garbage, _flood_transform, gaps=1, resyncs=3),
)
