"""Tests for the TCP conversation synthesiser and the capture writers.

Files are checked with independent readers: dpkt for classic pcap and frame
decoding, scapy's RawPcapNgReader for pcapng, and tshark where marked.
"""

from __future__ import annotations

import io
import struct
import subprocess
from decimal import Decimal

import dpkt
import pytest
from scapy.utils import RawPcapNgReader, RawPcapReader

from dcpdissect.samples.netsynth import (
    ACK,
    FIN,
    PSH,
    RST,
    SYN,
    Endpoint,
    Link,
    TcpConversation,
    data_indices,
    drop,
    overlap,
    reorder,
    retransmit,
    start_at,
    truncate_capture,
    write_pcap,
    write_pcapng,
)
from dcpdissect.capture.pcapwrite import PcapngWriter, PcapWriter


C4, S4 = Endpoint("192.168.1.10", 51000), Endpoint("192.168.1.20", 11210)
C6, S6 = Endpoint("fd00::10", 51000), Endpoint("fd00::20", 11210)
M32 = 1 << 32


def make_conv(v6: bool = False, **kw) -> TcpConversation:
    c, s = (C6, S6) if v6 else (C4, S4)
    return TcpConversation(c, s, **kw)


def payload(n: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


# ---------------------------------------------------------------------------
# independent decoding helpers
# ---------------------------------------------------------------------------

def read_pcap_dpkt(path):
    with open(path, "rb") as f:
        r = dpkt.pcap.Reader(f)
        return r.datalink(), list(r)


def decode_ip(linktype: int, frame: bytes):
    """Return the dpkt IP/IP6 object of a frame, using dpkt's link decoders."""
    if linktype == dpkt.pcap.DLT_EN10MB:
        return dpkt.ethernet.Ethernet(frame).data
    if linktype == 113:
        return dpkt.sll.SLL(frame).data
    if linktype == 276:
        return dpkt.sll2.SLL2(frame).data
    if linktype == 0:
        return dpkt.loopback.Loopback(frame).data
    if linktype == 101:
        return dpkt.ip.IP(frame) if frame[0] >> 4 == 4 else dpkt.ip6.IP6(frame)
    raise AssertionError(linktype)


def tcp_of(ip):
    tcp = ip.data
    assert isinstance(tcp, dpkt.tcp.TCP)
    return tcp


def decoded(path):
    lt, recs = read_pcap_dpkt(path)
    return [(ts, tcp_of(decode_ip(lt, buf))) for ts, buf in recs]


def stream_bytes(segments, base):
    """Reassemble payload by sequence number relative to ``base`` (mod 2^32)."""
    data = {}
    for tcp in segments:
        off = (tcp.seq - base) % M32
        for k, b in enumerate(tcp.data):
            data.setdefault(off + k, b)
    return bytes(data[k] for k in range(len(data)))


def ones_complement_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = 0
    for (w,) in struct.iter_unpack("!H", data):
        s += w
        s = (s & 0xFFFF) + (s >> 16)
    return s


def tshark(path, *args) -> list[str]:
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if line]


# ---------------------------------------------------------------------------
# conversation planning
# ---------------------------------------------------------------------------

def test_handshake_flags_and_seq_ack(tmp_path):
    conv = make_conv(isn_client=1000, isn_server=5000, mss=1448)
    conv.send("c2s", b"hello")
    conv.send("s2c", b"world!")
    conv.close()
    path = tmp_path / "hs.pcap"
    write_pcap(path, conv)
    segs = [t for _, t in decoded(path)]
    syn, synack, ack = segs[:3]
    assert syn.flags == dpkt.tcp.TH_SYN and syn.seq == 1000 and syn.ack == 0
    assert synack.flags == dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK
    assert synack.seq == 5000 and synack.ack == 1001
    assert ack.flags == dpkt.tcp.TH_ACK and ack.seq == 1001 and ack.ack == 5001
    # MSS option only on SYN / SYN-ACK
    for t in (syn, synack):
        opts = dpkt.tcp.parse_opts(t.opts)
        assert opts == [(dpkt.tcp.TCP_OPT_MSS, struct.pack("!H", 1448))]
    assert all(t.opts == b"" for t in segs[2:])
    assert all(t.win == 65535 for t in segs)
    d1, a1, d2, a2 = segs[3:7]
    assert d1.flags == PSH | ACK and d1.seq == 1001 and d1.ack == 5001 and d1.data == b"hello"
    assert a1.flags == ACK and a1.sport == S4.port and a1.ack == 1006 and a1.data == b""
    assert d2.seq == 5001 and d2.ack == 1006 and d2.data == b"world!"
    assert a2.ack == 5007
    fin1, fin2, last = segs[7:]
    assert fin1.flags == FIN | ACK and fin1.seq == 1006 and fin1.ack == 5007
    assert fin2.flags == FIN | ACK and fin2.seq == 5007 and fin2.ack == 1007
    assert last.flags == ACK and last.seq == 1007 and last.ack == 5008
    assert len(segs) == 10


def test_no_handshake_starts_at_isn_plus_one():
    conv = make_conv(handshake=False, isn_client=77, isn_server=99)
    conv.send("s2c", b"abc")
    pkts = conv.packets()
    assert [p.flag_str for p in pkts] == ["PA", "A"]
    assert pkts[0].seq == 100 and pkts[0].ack == 78


def test_rst_close():
    conv = make_conv()
    conv.send("c2s", b"x")
    conv.close("rst", initiator="s2c")
    last = conv.packets()[-1]
    assert last.flags == RST | ACK and last.direction == "s2c"
    with pytest.raises(RuntimeError):
        conv.send("c2s", b"late")


def test_timestamps_step_and_pause():
    conv = make_conv(start_ns=10_000, step_ns=250)
    conv.send("c2s", b"a")
    conv.pause(1_000_000)
    conv.send("c2s", b"b")
    ts = [p.ts_ns for p in conv.packets()]
    assert ts[:5] == [10_000, 10_250, 10_500, 10_750, 11_000]
    assert ts[5] == 11_250 + 1_000_000


def test_segmentation_at_mss(tmp_path):
    conv = make_conv(mss=1000)
    data = payload(3500)
    conv.send("c2s", data)
    path = tmp_path / "mss.pcap"
    write_pcap(path, conv)
    segs = [t for _, t in decoded(path) if t.data]
    assert [len(t.data) for t in segs] == [1000, 1000, 1000, 500]
    assert b"".join(t.data for t in segs) == data
    assert [p.stream_offset for p in conv.packets() if p.payload] == [0, 1000, 2000, 3000]


def test_custom_segment_sizes():
    conv = make_conv(mss=1448)
    conv.send("c2s", payload(100), segment_sizes=[10, 20])
    conv.send("c2s", payload(3000), segment_sizes=[2000])  # explicit piece may exceed the MSS
    sizes = [len(p.payload) for p in conv.packets() if p.payload]
    assert sizes == [10, 20, 70, 2000, 1000]
    with pytest.raises(ValueError):
        conv.send("c2s", b"abc", segment_sizes=[2, 2])
    with pytest.raises(ValueError):
        conv.send("c2s", b"abc", segment_sizes=[0, 3])


def test_coalescing():
    conv = make_conv(mss=1448)
    a, b, c = payload(100, 1), payload(200, 2), payload(50, 3)
    conv.send("c2s", a, coalesce_with_next=True)
    conv.send("c2s", b, coalesce_with_next=True)
    conv.send("c2s", c)
    data = [p for p in conv.packets() if p.payload]
    assert len(data) == 1 and data[0].payload == a + b + c

    conv = make_conv(mss=1448)
    conv.send("c2s", payload(1000, 1), coalesce_with_next=True)
    conv.send("c2s", payload(1000, 2))
    assert [len(p.payload) for p in conv.packets() if p.payload] == [1448, 552]

    # a message in the other direction ends the group
    conv = make_conv()
    conv.send("c2s", b"AAAA", coalesce_with_next=True)
    conv.send("s2c", b"BBBB")
    conv.send("c2s", b"CCCC")
    assert [p.payload for p in conv.packets() if p.payload] == [b"AAAA", b"BBBB", b"CCCC"]

    # explicit sizes: the last piece of a coalescing send joins the next send
    conv = make_conv()
    conv.send("c2s", b"a" * 30, segment_sizes=[10, 20], coalesce_with_next=True)
    conv.send("c2s", b"b" * 40, segment_sizes=[5, 35])
    assert [p.payload for p in conv.packets() if p.payload] == [
        b"a" * 10,
        b"a" * 20 + b"b" * 5,
        b"b" * 35,
    ]


def test_ack_every_other_segment():
    conv = make_conv(mss=100, ack_every=2, handshake=False)
    conv.send("c2s", payload(500))
    flags = [(p.direction, p.flag_str, p.ack) for p in conv.packets()]
    base_c = conv.data_base["c2s"]
    assert [f[:2] for f in flags] == [
        ("c2s", "PA"), ("c2s", "PA"), ("s2c", "A"),
        ("c2s", "PA"), ("c2s", "PA"), ("s2c", "A"),
        ("c2s", "PA"), ("s2c", "A"),
    ]
    assert [f[2] for f in flags if f[0] == "s2c"] == [base_c + 200, base_c + 400, base_c + 500]


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize(
    "link",
    [
        Link("ethernet"),
        Link("ethernet", vlan=(100,)),
        Link("ethernet", vlan=(10, 20)),
        Link("sll"),
        Link("sll2"),
        Link("null"),
        Link("raw"),
    ],
    ids=["eth", "vlan", "qinq", "sll", "sll2", "null", "raw"],
)
def test_payload_roundtrip_and_checksums(tmp_path, link, v6):
    conv = make_conv(v6=v6, link=link, mss=536)
    cdata, sdata = payload(2001, 5), payload(777, 9)
    conv.send("c2s", cdata[:1000], coalesce_with_next=True)
    conv.send("c2s", cdata[1000:])
    conv.send("s2c", sdata, segment_sizes=[1, 2, 3])
    conv.close()
    path = tmp_path / "rt.pcap"
    write_pcap(path, conv)
    lt, recs = read_pcap_dpkt(path)
    assert lt == link.linktype
    segs = {"c2s": [], "s2c": []}
    ip_ids = {"c2s": [], "s2c": []}
    for _, frame in recs:
        ip = decode_ip(lt, frame)
        tcp = tcp_of(ip)
        d = "c2s" if tcp.sport == C4.port else "s2c"
        segs[d].append(tcp)
        raw_ip = bytes(ip)
        if v6:
            assert isinstance(ip, dpkt.ip6.IP6)
            assert ip.hlim == 64 and ip.flow == 0 and ip.nxt == 6
            src, dst = ip.src, ip.dst
            pseudo = src + dst + struct.pack("!I3xB", len(ip.data), 6)
        else:
            assert isinstance(ip, dpkt.ip.IP)
            assert ip.ttl == 64 and ip.df and not ip.mf and ip.offset == 0
            assert ones_complement_sum(raw_ip[:20]) == 0xFFFF
            ip_ids[d].append(ip.id)
            pseudo = ip.src + ip.dst + struct.pack("!BBH", 0, 6, len(ip.data))
        assert ones_complement_sum(pseudo + bytes(tcp)) == 0xFFFF
        # dpkt recomputes the checksum when it is zeroed
        want = tcp.sum
        tcp.sum = 0
        ip.data = tcp
        if v6:
            again = dpkt.ip6.IP6(bytes(ip))
        else:
            ip.sum = 0
            again = dpkt.ip.IP(bytes(ip))
        assert again.data.sum == want
    base = conv.data_base
    assert stream_bytes(segs["c2s"], base["c2s"]) == cdata == conv.sent("c2s")
    assert stream_bytes(segs["s2c"], base["s2c"]) == sdata == conv.sent("s2c")
    if not v6:
        for ids in ip_ids.values():
            assert ids == list(range(ids[0], ids[0] + len(ids)))


def test_link_headers_decoded_by_dpkt():
    ip = make_conv().packets()[0].ip_bytes()
    eth = dpkt.ethernet.Ethernet(Link("ethernet", vlan=(10, 20)).frame(ip, "c2s"))
    assert [t.id for t in eth.vlan_tags] == [10, 20]
    assert eth.src == bytes.fromhex("020000000001") and eth.dst == bytes.fromhex("020000000002")
    assert bytes(eth)[12:14] == b"\x88\xa8" and bytes(eth)[16:18] == b"\x81\x00"
    sll = dpkt.sll.SLL(Link("sll").frame(ip, "s2c"))
    assert sll.type == 0 and sll.hdr[:6] == bytes.fromhex("020000000002") and sll.ethtype == 0x0800
    sll = dpkt.sll.SLL(Link("sll").frame(ip, "c2s"))
    assert sll.type == 4
    sll2 = dpkt.sll2.SLL2(Link("sll2", ifindex=7).frame(ip, "c2s"))
    assert sll2.intindex == 7 and sll2.ethtype == 0x0800 and sll2.type == 4 and sll2.hlen == 6
    assert Link("null").frame(ip)[:4] == b"\x02\0\0\0"
    assert Link("null", null_byteorder="big").frame(ip)[:4] == b"\0\0\0\x02"
    assert Link("raw").frame(ip) == ip
    assert [Link(k).linktype for k in ("ethernet", "sll", "sll2", "null", "raw")] == [1, 113, 276, 0, 101]
    with pytest.raises(ValueError):
        Link("token-ring")
    with pytest.raises(ValueError):
        Link("sll", vlan=(5,))


def test_mixed_ip_versions_rejected():
    with pytest.raises(ValueError):
        TcpConversation(C4, S6)


# ---------------------------------------------------------------------------
# sequence wrap
# ---------------------------------------------------------------------------

def test_sequence_wrap(tmp_path):
    conv = make_conv(isn_client=M32 - 3000, isn_server=M32 - 1, mss=1448)
    data = payload(10000, 3)
    conv.send("c2s", data)
    conv.send("s2c", b"reply")
    conv.close()
    pkts = conv.packets()
    assert pkts[0].seq == M32 - 3000
    assert pkts[1].seq == M32 - 1 and pkts[2].ack == 0  # server ISN + 1 wraps to 0
    path = tmp_path / "wrap.pcap"
    write_pcap(path, conv)
    segs = [t for _, t in decoded(path)]
    cseqs = [t.seq for t in segs if t.sport == C4.port and t.data]
    assert all(0 <= s < M32 for s in cseqs)
    assert any(s < 100000 for s in cseqs) and any(s > M32 - 5000 for s in cseqs)
    assert stream_bytes([t for t in segs if t.sport == C4.port], conv.data_base["c2s"]) == data
    reply = [t for t in segs if t.sport == S4.port and t.data][0]
    assert reply.seq == 0 and reply.ack == (M32 - 3000 + 1 + 10000) % M32


@pytest.mark.tshark
def test_sequence_wrap_tshark(tmp_path):
    conv = make_conv(isn_client=M32 - 3000, isn_server=M32 - 700)
    conv.send("c2s", payload(10000))
    conv.send("s2c", payload(3000))
    conv.close()
    path = tmp_path / "wrap.pcap"
    write_pcap(path, conv)
    rows = tshark(path, "-T", "fields", "-e", "tcp.seq", "-e", "tcp.seq_raw", "-e", "tcp.srcport",
                  "-e", "tcp.analysis.flags")
    assert len(rows) == len(conv.packets())
    isn = {C4.port: M32 - 3000, S4.port: M32 - 700}
    for row in rows:
        rel, raw, sport, *flags = row.split("\t")
        assert flags in ([], [""])
        # relative sequence numbers stay continuous across the wrap
        assert int(rel) == (int(raw) - isn[int(sport)]) % M32
    assert max(int(r.split("\t")[0]) for r in rows) == 10002  # data + SYN + FIN


# ---------------------------------------------------------------------------
# pathologies
# ---------------------------------------------------------------------------

def basic_packets():
    conv = make_conv(mss=100)
    conv.send("c2s", payload(350))
    conv.close()
    return conv.packets()


def test_reorder():
    pkts = basic_packets()
    d = data_indices(pkts)
    i, j = d[0], d[1]
    out = reorder(pkts, i, j)
    assert out[i].seq == pkts[j].seq and out[j].seq == pkts[i].seq
    assert out[i].payload == pkts[j].payload
    assert [p.ts_ns for p in out] == [p.ts_ns for p in pkts]
    assert pkts[i].seq < pkts[j].seq  # original list untouched
    assert len(out) == len(pkts)


def test_retransmit_and_overlap():
    pkts = basic_packets()
    i = data_indices(pkts)[1]
    out = retransmit(pkts, i, delay=3)
    assert len(out) == len(pkts) + 1
    dup = out[i + 3]
    assert (dup.seq, dup.payload, dup.direction) == (pkts[i].seq, pkts[i].payload, "c2s")
    assert dup.note == "retransmission" and dup.ip_id != pkts[i].ip_id
    ts = [p.ts_ns for p in out]
    assert ts == sorted(ts) and out[i + 2].ts_ns < dup.ts_ns < out[i + 4].ts_ns
    assert out[:i + 3] == pkts[:i + 3] and out[i + 4:] == pkts[i + 3:]

    bad = b"Z" * len(pkts[i].payload)
    out = overlap(pkts, i, bad)
    assert out[i + 1].seq == pkts[i].seq and out[i + 1].payload == bad and out[i + 1].note == "overlap"
    with pytest.raises(ValueError):
        overlap(pkts, 0, b"x")  # SYN carries no payload

    end = retransmit(pkts, len(pkts) - 1, delay=5)
    assert end[-1].seq == pkts[-1].seq and end[-1].ts_ns > pkts[-1].ts_ns


def test_drop_and_start_at():
    pkts = basic_packets()
    i = data_indices(pkts)[2]
    out = drop(pkts, i)
    assert len(out) == len(pkts) - 1 and pkts[i] not in out
    mid = start_at(pkts, data_indices(pkts)[1])
    assert not any(p.flags & SYN for p in mid)
    assert mid[0].payload == pkts[data_indices(pkts)[1]].payload


def test_truncate_capture(tmp_path):
    pkts = basic_packets()
    i = data_indices(pkts)[0]
    out = truncate_capture(pkts, i, 60)
    path = tmp_path / "trunc.pcap"
    write_pcap(path, out)
    recs = list(RawPcapReader(str(path)))
    data, meta = recs[i]
    assert meta.caplen == 60 and len(data) == 60
    assert meta.wirelen == 14 + 20 + 20 + 100 == pkts[i].wirelen
    assert data == pkts[i].frame_bytes()[:60]
    assert all(m.caplen == m.wirelen for n, (_, m) in enumerate(recs) if n != i)


@pytest.mark.tshark
def test_pathologies_seen_by_tshark(tmp_path):
    conv = make_conv(mss=100)
    conv.send("c2s", payload(600))
    conv.close()
    pkts = conv.packets()
    d = data_indices(pkts)

    def flags(pk, name):
        path = tmp_path / f"{name}.pcap"
        write_pcap(path, pk)
        rows = tshark(path, "-T", "fields", "-e", "frame.number", "-e", "tcp.analysis.flags",
                      "-e", "tcp.analysis.retransmission", "-e", "tcp.analysis.out_of_order",
                      "-e", "tcp.analysis.lost_segment", "-e", "frame.len", "-e", "frame.cap_len")
        return [r.split("\t") for r in rows]

    clean = flags(pkts, "clean")
    assert all(r[1] == "" for r in clean)

    rows = flags(retransmit(pkts, d[1], delay=2), "retrans")
    hit = [r for r in rows if r[1]]
    assert len(hit) >= 1 and int(hit[0][0]) == d[1] + 3 and (hit[0][2] or hit[0][3])

    rows = flags(reorder(pkts, d[1], d[2]), "reorder")
    assert any(r[3] or r[2] for r in rows)

    rows = flags(drop(pkts, d[2]), "drop")
    assert any(r[4] for r in rows)

    rows = flags(truncate_capture(pkts, d[0], 40), "trunc")
    assert rows[d[0]][5:] == [str(pkts[d[0]].wirelen), "40"]


# ---------------------------------------------------------------------------
# writers
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("nanosecond", [False, True])
@pytest.mark.parametrize("big_endian", [False, True])
def test_pcap_variants_dpkt(tmp_path, nanosecond, big_endian):
    conv = make_conv(start_ns=1_700_000_000_123_456_789, step_ns=1001)
    conv.send("c2s", b"ping")
    path = tmp_path / "v.pcap"
    write_pcap(path, conv, nanosecond=nanosecond, big_endian=big_endian)
    raw = path.read_bytes()
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    assert raw[:4] == struct.pack(">I" if big_endian else "<I", magic)
    lt, recs = read_pcap_dpkt(path)
    assert lt == 1 and len(recs) == len(conv.packets())
    for (ts, frame), p in zip(recs, conv.packets()):
        assert frame == p.frame_bytes()
        if nanosecond:
            assert Decimal(ts) == Decimal(p.ts_ns) / Decimal(10**9)
        else:
            assert round(ts * 1e6) == p.ts_ns // 1000


@pytest.mark.tshark
@pytest.mark.parametrize("nanosecond,big_endian", [(False, False), (True, False), (False, True), (True, True)])
def test_pcap_variants_tshark(tmp_path, nanosecond, big_endian):
    conv = make_conv(start_ns=1_700_000_000_123_456_789, step_ns=1001)
    conv.send("c2s", b"ping")
    path = tmp_path / "v.pcap"
    write_pcap(path, conv, nanosecond=nanosecond, big_endian=big_endian)
    rows = tshark(path, "-T", "fields", "-e", "frame.time_epoch", "-e", "tcp.len")
    assert len(rows) == len(conv.packets())
    for row, p in zip(rows, conv.packets()):
        sec, frac = row.split("\t")[0].split(".")
        got = int(sec) * 10**9 + int(frac.ljust(9, "0"))
        assert got == (p.ts_ns if nanosecond else p.ts_ns // 1000 * 1000)


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.parametrize("v6", [False, True])
def test_tshark_checksums_and_protocols(tmp_path, v6):
    links = {
        "eth": (Link("ethernet"), "eth:ethertype:"),
        "vlan": (Link("ethernet", vlan=(100,)), "eth:ethertype:vlan:ethertype:"),
        "qinq": (Link("ethernet", vlan=(10, 20)), "eth:ethertype:ieee8021ad:ethertype:vlan:ethertype:"),
        "sll": (Link("sll"), "sll:ethertype:"),
        "sll2": (Link("sll2"), "sll:ethertype:"),
        "null": (Link("null"), "null:"),
        "raw": (Link("raw"), "raw:"),
    }
    ipname = "ipv6" if v6 else "ip"
    for name, (link, prefix) in links.items():
        conv = make_conv(v6=v6, link=link, mss=700)
        conv.send("c2s", payload(1500, 1), coalesce_with_next=True)
        conv.send("c2s", payload(33, 2))
        conv.send("s2c", payload(999, 3))
        conv.close()
        path = tmp_path / f"{name}.pcap"
        write_pcap(path, conv)
        rows = tshark(
            path,
            "-o", "tcp.check_checksum:TRUE",
            "-o", "ip.check_checksum:TRUE",
            "-T", "fields",
            "-e", "frame.protocols",
            "-e", "tcp.checksum.status",
            "-e", "ip.checksum.status",
            "-e", "tcp.analysis.flags",
        )
        assert len(rows) == len(conv.packets())
        for row in rows:
            protos, tcp_status, ip_status, analysis = row.split("\t")
            assert protos.startswith(prefix + ipname + ":tcp"), (name, protos)
            assert tcp_status == "1", (name, row)  # 1 = good
            assert ip_status == ("" if v6 else "1"), (name, row)
            assert analysis == ""
        bad = tshark(path, "-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
                     "-Y", "tcp.checksum.status == 0 || ip.checksum.status == 0")
        assert bad == []


@pytest.mark.tshark
def test_tshark_vlan_ids(tmp_path):
    conv = make_conv(link=Link("ethernet", vlan=(10, 20)))
    conv.send("c2s", b"x")
    path = tmp_path / "q.pcap"
    write_pcap(path, conv)
    rows = tshark(path, "-T", "fields", "-e", "ieee8021ad.id", "-e", "vlan.id")
    assert set(rows) == {"10\t20"}


def three_conversations():
    a = TcpConversation(C4, S4, link=Link("ethernet"), start_ns=1_700_000_000_000_000_000, step_ns=1_000_003)
    b = TcpConversation(C6, S6, link=Link("sll2"), start_ns=1_700_000_000_000_500_000, step_ns=999_999)
    c = TcpConversation(Endpoint("127.0.0.1", 40001), Endpoint("127.0.0.1", 11210), link=Link("null"),
                        start_ns=1_700_000_000_000_250_001, step_ns=777_777_777)
    for n, conv in enumerate((a, b, c)):
        conv.send("c2s", payload(300 + n, n), coalesce_with_next=True)
        conv.send("c2s", payload(20, n + 1))
        conv.send("s2c", payload(2000 + n, n + 2))
        conv.close()
    return a, b, c


def expected_units(ts_ns: int, tsresol: int) -> int:
    per_s = 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol
    return ts_ns * per_s // 10**9


def test_pcapng_three_interfaces_scapy(tmp_path):
    convs = three_conversations()
    resols = [6, 9, 0x8A]
    path = tmp_path / "three.pcapng"
    written = write_pcapng(path, convs, interfaces=resols)
    assert len(written) == sum(len(c.packets()) for c in convs)
    assert [p.ts_ns for p in written] == sorted(p.ts_ns for p in written)
    assert sorted(set(written.interface_ids)) == [0, 1, 2]
    owner = {id(c): n for n, c in enumerate(convs)}
    reader = RawPcapNgReader(str(path))
    recs = list(reader)
    reader.close()
    assert len(recs) == len(written)
    for (data, meta), p, iface in zip(recs, written, written.interface_ids):
        n = owner[id(p.conversation)]
        assert iface == n
        assert meta.linktype == convs[n].link.linktype
        assert meta.tsresol == (1024 if resols[n] == 0x8A else 10 ** resols[n])
        assert (meta.tshigh << 32) | meta.tslow == expected_units(p.ts_ns, resols[n])
        assert data == p.frame_bytes() and meta.wirelen == len(data)
        assert meta.ifname == f"synth{n}-{convs[n].link.kind}".encode()


@pytest.mark.tshark
def test_pcapng_three_interfaces_tshark(tmp_path):
    convs = three_conversations()
    resols = [6, 9, 0x8A]
    path = tmp_path / "three.pcapng"
    written = write_pcapng(path, convs, interfaces=resols)
    rows = tshark(path, "-T", "fields", "-e", "frame.time_epoch", "-e", "frame.interface_id",
                  "-e", "frame.protocols", "-e", "tcp.srcport")
    assert len(rows) == len(written)
    for row, p, iface in zip(rows, written, written.interface_ids):
        epoch, ifid, protos, sport = row.split("\t")
        assert int(ifid) == iface
        resol = resols[iface]
        units = expected_units(p.ts_ns, resol)
        per_s = 1024 if resol == 0x8A else 10**resol
        want = Decimal(units) / Decimal(per_s)
        assert abs(Decimal(epoch) - want) < Decimal("1e-9"), (row, want)
        assert protos.split(":")[0] == {0: "eth", 1: "sll", 2: "null"}[iface]
        assert int(sport) == p.src.port


def test_pcapng_same_link_and_resolution_share_interface(tmp_path):
    a = make_conv(start_ns=1_000_000_000)
    b = TcpConversation(Endpoint("10.1.1.1", 1), Endpoint("10.1.1.2", 2), start_ns=1_000_000_500)
    c = make_conv(start_ns=1_000_000_700, link=Link("ethernet", vlan=(5,)))
    for conv in (a, b, c):
        conv.send("c2s", b"q")
    buf = io.BytesIO()
    written = write_pcapng(buf, [a, b, c], interfaces=[9, 9, 6])
    assert sorted(set(written.interface_ids)) == [0, 1]
    buf.seek(0)
    # two IDBs only
    raw = buf.getvalue()
    pos, idbs = 0, 0
    while pos < len(raw):
        btype, blen = struct.unpack_from("<II", raw, pos)
        idbs += btype == 1
        pos += blen
    assert idbs == 2


def test_merge_multiple_conversations_pcap(tmp_path):
    a = make_conv(start_ns=1_000, step_ns=10)
    b = TcpConversation(Endpoint("10.9.0.1", 3000), Endpoint("10.9.0.2", 11210), start_ns=1_005, step_ns=10)
    a.send("c2s", b"from-a")
    b.send("c2s", b"from-b")
    path = tmp_path / "merge.pcap"
    written = write_pcap(path, [a, b])
    ts = [p.ts_ns for p in written]
    assert ts == sorted(ts)
    assert [p.conversation for p in written[:4]] == [a, b, a, b]
    # stable for equal timestamps: first source first
    c = make_conv(start_ns=1_000, step_ns=10)
    c.send("c2s", b"c")
    tied = write_pcap(io.BytesIO(), [c, a])
    assert all(x.conversation is c for x in tied[0::2]) and all(x.conversation is a for x in tied[1::2])
    with pytest.raises(ValueError):
        write_pcap(io.BytesIO(), [a, make_conv(link=Link("raw"))])


def test_frame_numbers_of_data(tmp_path):
    conv = make_conv(mss=100)
    conv.send("c2s", payload(250))
    conv.send("s2c", b"ok")
    pkts = retransmit(conv.packets(), data_indices(conv.packets())[0], delay=2)
    path = tmp_path / "fn.pcap"
    written = write_pcap(path, pkts)
    lt, recs = read_pcap_dpkt(path)
    frames = written.data_frames()
    assert [n for n, _ in frames] == [n + 1 for n in data_indices(pkts)]
    for n, p in frames:
        assert tcp_of(decode_ip(lt, recs[n - 1][1])).data == p.payload
    assert written.frame_number(pkts[4]) == 5
    assert [n for n, p in written.data_frames("s2c")] == [len(pkts) - 1]


def test_deterministic_output():
    def build():
        convs = three_conversations()
        buf1, buf2 = io.BytesIO(), io.BytesIO()
        write_pcap(buf1, [convs[0]])
        write_pcapng(buf2, convs, interfaces=[6, 9, 0x8A])
        return buf1.getvalue(), buf2.getvalue()

    assert build() == build()


def test_pcapng_writer_blocks_and_sections():
    buf = io.BytesIO()
    w = PcapngWriter(buf, big_endian=True)
    i0 = w.add_interface(1, tsresol=9, name="eth0")
    w.write(i0, 1_234_567_890_123_456_789, b"\x01\x02\x03", wirelen=10)
    w.new_section()
    assert w.add_interface(101) == 0
    w.write(0, 5_000_000, b"\x45" + b"\0" * 19)
    raw = buf.getvalue()
    pos, blocks = 0, []
    while pos < len(raw):
        btype, blen = struct.unpack_from(">II", raw, pos)
        assert blen % 4 == 0
        assert struct.unpack_from(">I", raw, pos + blen - 4)[0] == blen
        blocks.append((btype, raw[pos + 8 : pos + blen - 4]))
        pos += blen
    assert [b[0] for b in blocks] == [0x0A0D0D0A, 1, 6, 0x0A0D0D0A, 1, 6]
    assert blocks[0][1][:4] == b"\x1a\x2b\x3c\x4d"
    epb = blocks[2][1]
    iface, hi, lo, cap, orig = struct.unpack_from(">5I", epb)
    assert (iface, (hi << 32) | lo, cap, orig) == (0, 1_234_567_890_123_456_789, 3, 10)
    assert epb[20:24] == b"\x01\x02\x03\x00"
    idb = blocks[1][1]
    assert struct.unpack_from(">HHI", idb) == (1, 0, 262144)
    opts = idb[8:]
    assert opts[:8] == struct.pack(">HH", 2, 4) + b"eth0"
    assert opts[8:16] == struct.pack(">HH", 9, 1) + b"\x09\0\0\0"
    assert opts[16:] == b"\0\0\0\0"


def test_pcap_writer_snaplen_and_wirelen():
    buf = io.BytesIO()
    w = PcapWriter(buf, linktype=101, snaplen=8)
    w.write(1_500_000_123, b"0123456789abcdef")
    raw = buf.getvalue()
    assert struct.unpack_from("<IHHiIII", raw) == (0xA1B2C3D4, 2, 4, 0, 0, 8, 101)
    assert struct.unpack_from("<IIII", raw, 24) == (1, 500_000, 8, 16)
    assert raw[40:] == b"01234567"
    with pytest.raises(ValueError):
        w.write(0, b"abc", wirelen=2)


def test_pcapng_notes_as_comments(tmp_path):
    conv = make_conv()
    conv.send("c2s", b"payload")
    pkts = retransmit(conv.packets(), data_indices(conv.packets())[0])
    path = tmp_path / "c.pcapng"
    written = write_pcapng(path, pkts, interfaces=9, comments=True)
    reader = RawPcapNgReader(str(path))
    metas = [m for _, m in reader]
    reader.close()
    notes = [(m.comments or [None])[0] for m in metas]
    assert notes == [p.note.encode() if p.note else None for p in written]
    assert notes.count(b"retransmission") == 1
