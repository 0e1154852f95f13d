"""The basic samples: a clean intra-cluster replication and a stream-id connector, an Add
Stream, the protocol specs' seed examples, and the clean stream through TCP pathologies
(reorder, retransmission, loss, sequence wrap, a capture that starts mid-stream), link
types and capture formats.
"""

from __future__ import annotations

from ..codec import encode
from . import netsynth as ns
from .dsl import (
    T0, Script, Spec, control, dcp_open, deletion, doc, expiration, failover, marker, mutation, ok,
    stream_req,
)
from .netsynth import Endpoint, Link

CONSUMER = Endpoint("10.0.0.2", 50123)
PRODUCER_11209 = Endpoint("10.0.0.1", 11209)
CONNECTOR = Endpoint("10.0.0.3", 40001)
PRODUCER_11210 = Endpoint("10.0.0.1", 11210)


REPLICATION_NAME = "replication:ns_1@10.0.0.1->ns_1@10.0.0.2:default"
# engines/ep/src/dcp/consumer.cc DcpConsumer::DcpConsumer's controls, in its order, with
# the producer's answer (DcpProducer::control): include_deleted_user_xattrs needs the
# DcpOpen flag of that name, which this DcpOpen lacks (Einval); then the flow-control window
# (DcpConsumer::addBufferSizeControl)
REPLICATION_CONTROLS = (
    ("enable_noop", "true", 0), ("set_noop_interval", "0.100000", 0),
    ("set_priority", "high", 0), ("supports_cursor_dropping_vulcan", "true", 0),
    ("supports_hifi_MFU", "true", 0), ("send_stream_end_on_client_close_stream", "true", 0),
    ("enable_expiry_opcode", "true", 0), ("enable_sync_writes", "true", 0),
    ("consumer_name", "ns_1@10.0.0.2", 0), ("include_deleted_user_xattrs", "true", 0x04),
    ("v7_dcp_status_codes", "true", 0), ("flatbuffers_system_events", "true", 0),
    ("change_streams", "true", 0), ("max_marker_version", "2.2", 0),
    ("cache_transfer", "true", 0), ("connection_buffer_size", "10485760", 0))
HELLO_XATTR, HELLO_JSON, HELLO_COLLECTIONS = 0x06, 0x0B, 0x12


def replication(client=CONSUMER, server=PRODUCER_11209, big_value=4000, **kw) -> Script:
    """A clean intra-cluster replication stream as kv_engine's consumer negotiates it
    (through ns_server, which opens the connection): HELLO with collections, DcpOpen, the
    consumer's controls pipelined (sync replication, marker version 2.2, expiry opcode, ...),
    three vbuckets, V2.0 memory and disk markers (a disk marker is V2.0 when the server's
    dcp_snapshot_marker_purge_seqno_enabled and _hps_enabled settings are off) and a V2.2
    disk marker, collection keys, coalesced and split PDUs, a noop and a buffer ack."""
    s = Script(client, server, **kw)
    hello = b"".join(f.to_bytes(2, "big") for f in (HELLO_XATTR, HELLO_JSON, HELLO_COLLECTIONS))
    s.c2s(encode(0x1F, key=b"dcpdissect", value=hello, opaque=0xF),
          dcp_open(REPLICATION_NAME, 0x25, 1))
    s.s2c(ok(0x1F, 0xF, value=hello), ok(0x50, 1))
    s.c2s(*[control(k, v, 2 + i) for i, (k, v, _) in enumerate(REPLICATION_CONTROLS)])
    s.s2c(*[ok(0x5E, 2 + i, status=st) for i, (_, _, st) in enumerate(REPLICATION_CONTROLS)])
    for vb in range(3):
        s.c2s(stream_req(vb, 0x10 + vb))
        s.s2c(failover(0x10 + vb, (0xA1B2C3D4E5F60000 + vb, 0)))
    s.s2c(marker(0, 0x10, 0, 5, "memory+checkpoint", layout="V2.0", max_visible_seqno=5,
                 high_completed_seqno=0),
          *[mutation(0, 0x10, i, f"\x00doc-{i}", doc(i)) for i in range(1, 6)])
    s.s2c(marker(1, 0x11, 0, 4, "disk+checkpoint", layout="V2.0", max_visible_seqno=4,
                 high_completed_seqno=2),
          *[mutation(1, 0x11, i, f"\x00user::{i}", doc(i, 700)) for i in range(1, 4)],
          deletion(1, 0x11, 4, "\x00user::9"))
    s.s2c(marker(2, 0x12, 0, 6, "disk+checkpoint", layout="V2.2", max_visible_seqno=6,
                 high_completed_seqno=0, purge_seqno=0, high_prepared_seqno=0),
          *[mutation(2, 0x12, i, f"\x00order-{i}", doc(i, 60)) for i in range(1, 6)])
    s.s2c(mutation(2, 0x12, 6, "\x00order-6", doc(6, big_value)))   # split across segments
    s.s2c(marker(0, 0x10, 6, 7, "memory", layout="V2.0", max_visible_seqno=7,
                 high_completed_seqno=0),
          expiration(0, 0x10, 6, "\x00doc-1"), mutation(0, 0x10, 7, "\x00doc-7", doc(7)))
    received = sum(len(m) for d, _, m in s.messages if d == "s2c" and m[0] == 0x80
                   and m[1] != 0x5E)            # the stream messages: all it acknowledges
    s.s2c(encode(0x5C, opaque=0x20))
    s.c2s(ok(0x5C, 0x20), encode(0x5D, {"bytes_to_ack": received}, opaque=5))
    s.conv.close()
    return s


def stream_id_connector(client=CONNECTOR, server=PRODUCER_11210, marker_layout="V1",
                        **kw) -> Script:
    """A connector using stream ids: flexible framing (magic 0x08) on every stream message;
    V1 markers (enable_stream_id excludes sync replication, producer.cc DcpProducer::control);
    ``marker_layout="V2.0"`` sends its marker with an MVS anyway, as kv_engine never does."""
    s = Script(client, server, **kw)
    s.c2s(dcp_open("java-dcp-client-7f3a", 0x1, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(control("enable_stream_id", "true", 2))
    s.s2c(ok(0x5E, 2))
    s.c2s(stream_req(5, 0x31, end=3, value=b'{"sid":7}'))
    s.s2c(failover(0x31, (0x0BADCAFE00000005, 0)))
    mvs = {"max_visible_seqno": 3} if marker_layout == "V2.0" else {}
    s.s2c(marker(5, 0x31, 0, 3, "memory+checkpoint", layout=marker_layout, sid=7, **mvs),
          mutation(5, 0x31, 1, "\x00a", doc(1), sid=7),
          mutation(5, 0x31, 2, "\x00b", doc(2), sid=7),
          deletion(5, 0x31, 3, "\x00c", sid=7),
          encode(0x55, {"reason": 0}, vbucket=5, opaque=0x31, stream_id=7))
    s.conv.close()
    return s


def add_stream() -> list[Script]:
    """ns_server asks a consumer to add a stream; the consumer requests it from the producer."""
    ns_server = Script(Endpoint("10.0.0.2", 43210), Endpoint("10.0.0.2", 11209),
                       start_ns=T0, step_ns=10_000)
    consumer = Script(Endpoint("10.0.0.2", 50200), Endpoint("10.0.0.1", 11209),
                      start_ns=T0 + 5_000, step_ns=10_000)
    name = "replication:ns_1@10.0.0.1->ns_1@10.0.0.2:travel"
    ns_server.c2s(dcp_open(name, 0x0, 1))
    ns_server.s2c(ok(0x50, 1))
    ns_server.c2s(encode(0x51, {"flags": "takeover"}, vbucket=5, opaque=2))
    consumer.c2s(dcp_open(name, 0x25, 1))
    consumer.s2c(ok(0x50, 1))
    consumer.c2s(stream_req(5, 0x1000, flags=0x1))
    consumer.s2c(failover(0x1000, (0x5A5A000000000005, 0)))
    consumer.s2c(marker(5, 0x1000, 0, 2, "memory+checkpoint+ack"),
                 mutation(5, 0x1000, 1, "airline_10", doc(1)),
                 mutation(5, 0x1000, 2, "airline_11", doc(2)))
    consumer.c2s(ok(0x56, 0x1000))
    consumer.s2c(encode(0x5B, {"state": 3}, vbucket=5, opaque=0x1000))
    consumer.c2s(ok(0x5B, 0x1000))
    ns_server.conv.pause(200_000)
    ns_server.s2c(ok(0x51, 2, fields={"new_opaque": 0x1000}))
    for s in (ns_server, consumer):
        s.conv.close()
    return [ns_server, consumer]


def seed_marker_v1() -> Script:
    s = Script(Endpoint("192.168.1.20", 51000), Endpoint("192.168.1.10", 11210))
    s.s2c(encode(0x56, dict(start_seqno=0, end_seqno=8, flags=0x01), layout="V1",
                 opaque=0xDEADBEEF))
    s.conv.close()
    return s


def seed_marker_v2_0() -> Script:
    s = Script(Endpoint("192.168.1.20", 51001), Endpoint("192.168.1.10", 11210))
    s.s2c(encode(0x56, dict(start_seqno=1, end_seqno=8, flags=0x02, max_visible_seqno=8,
                            high_completed_seqno=7), layout="V2.0", opaque=0xDEADBEEF))
    s.conv.close()
    return s


def seed_add_stream(**link) -> Script:
    """The add-stream spec's example on a consumer connection (memcached accepts Add Stream
    only after a DcpOpen, mcbp_validators.cc verify_common_dcp_restrictions); ``link`` and
    ``start_ns`` as a :class:`Script` takes them."""
    s = Script(Endpoint("192.168.1.10", 52000), Endpoint("192.168.1.20", 11210), **link)
    s.c2s(dcp_open("replication:ns_1@192.168.1.30->ns_1@192.168.1.20:default", 0, 0xA0))
    s.s2c(ok(0x50, 0xA0))
    s.c2s(encode(0x51, {"flags": 0x01}, vbucket=5, opaque=1))
    s.s2c(encode(0x51, {"new_opaque": 0x1000}, request=False, opaque=1))
    s.conv.close()
    return s


def _reorder(pkts):
    d = ns.data_indices(pkts, "s2c")
    pkts = ns.reorder(pkts, d[6], d[8])
    return ns.reorder(pkts, d[3], d[4])


def _retransmit(pkts):
    d = ns.data_indices(pkts, "s2c")
    pkts = ns.retransmit(pkts, d[7], delay=3)
    pkts = ns.retransmit(pkts, d[2])
    d = ns.data_indices(pkts, "s2c")
    return ns.overlap(pkts, d[5], b"\xee" * len(pkts[d[5]].payload), delay=2)


def _loss(pkts):
    """Drop the middle segment of the 4000-byte document (its header was seen)."""
    d = ns.data_indices(pkts, "s2c")
    middle = next(b for a, b in zip(d, d[1:])
                  if pkts[a].payload[:2] == b"\x80\x57" and len(pkts[a].payload) == 1448
                  and len(pkts[b].payload) == 1448)
    return ns.drop(pkts, middle)


def _loss_header(pkts):
    """Drop a full segment that starts with a marker and ends inside a mutation."""
    d = ns.data_indices(pkts, "s2c")
    first = next(i for i in d if pkts[i].payload[:2] == b"\x80\x56" and len(pkts[i].payload) == 1448)
    return ns.drop(pkts, first)


def _mid_stream(pkts):
    d = ns.data_indices(pkts, "s2c")
    inside = next(i for i in d if pkts[i].payload[0] not in (0x80, 0x81, 0x08, 0x18))
    return ns.start_at(pkts, inside)      # starts inside a message, more messages follow


def _one(factory, **kw):
    return lambda: [factory(**kw)]


SPECS: tuple[Spec, ...] = (
    Spec("clean-replication", "clean-replication.pcap",
         "intra-cluster replication on 11209 negotiated as kv_engine's consumer does "
         "(V2.0, V2.2 markers) plus a stream-id connector on 11210 (flexible framing, V1 "
         "markers); coalesced and split PDUs",
         lambda: [replication(), stream_id_connector(start_ns=T0 + 500)]),
    Spec("add-stream", "add-stream.pcap",
         "ns_server adds a takeover stream on a consumer; the consumer's stream request, "
         "the acked marker and the add-stream response with the new opaque",
         add_stream),
    Spec("seed-marker-v1", "seed-marker-v1.pcap",
         "the snapshot-marker spec's V1 example, byte for byte", _one(seed_marker_v1)),
    Spec("seed-marker-v2_0", "seed-marker-v2_0.pcap",
         "the snapshot-marker spec's V2.0 example, per its field table", _one(seed_marker_v2_0)),
    Spec("seed-add-stream", "seed-add-stream.pcap",
         "the add-stream spec's request and response examples", _one(seed_add_stream)),
    Spec("tcp-reorder", "tcp-reorder.pcap", "server segments captured out of order",
         _one(replication), _reorder),
    Spec("tcp-retransmit", "tcp-retransmit.pcap",
         "retransmitted segments, one retransmission with different bytes",
         _one(replication), _retransmit),
    Spec("tcp-loss", "tcp-loss.pcap",
         "a lost segment inside a split document: gap reported, decoding resumes",
         _one(replication), _loss, gaps=1),
    Spec("tcp-loss-header", "tcp-loss-header.pcap",
         "a lost segment carrying message headers: gap, then resync on the next header",
         _one(replication), _loss_header, gaps=1, resyncs=1),
    Spec("tcp-seq-wrap", "tcp-seq-wrap.pcap", "sequence numbers wrap past 2^32 in both directions",
         _one(replication, isn_client=2**32 - 700, isn_server=2**32 - 3000)),
    Spec("tcp-mid-stream", "tcp-mid-stream.pcap",
         "capture starts in the middle of a split document, without the handshake",
         _one(replication), _mid_stream, resyncs=1),
    Spec("pcapng-multi-interface", "pcapng-multi-interface.pcapng",
         "three interfaces: Ethernet (us), raw IP (ns) and Linux SLL (2^-10 s)",
         lambda: [replication(),
                  stream_id_connector(link=Link("raw"), start_ns=T0 + 500),
                  seed_add_stream(link=Link("sll"), start_ns=T0 + 900)],
         fmt="pcapng", write_kw={"interfaces": [6, 9, 0x8A]}),
    Spec("sll2", "sll2.pcap", "Linux cooked v2 capture (tcpdump -i any)",
         _one(replication, link=Link("sll2"))),
    Spec("vlan-qinq", "vlan-qinq.pcap", "Ethernet with stacked VLAN tags (QinQ 100/200)",
         _one(replication, link=Link("ethernet", vlan=(100, 200)))),
    Spec("ipv6", "ipv6.pcap", "replication over IPv6",
         _one(replication, client=Endpoint("fd00::2", 50123), server=Endpoint("fd00::1", 11209))),
    Spec("loopback-ns-be", "loopback-ns-be.pcap",
         "BSD loopback link, big-endian pcap with nanosecond timestamps",
         _one(stream_id_connector, link=Link("null")),
         write_kw={"nanosecond": True, "big_endian": True}),
    Spec("clean-replication-gz", "clean-replication.pcap.gz", "the clean stream, gzip-compressed",
         lambda: [replication()], fmt="pcap.gz"),
)


