"""Tests for dcpdissect.capture.packets.decode_packet."""

from __future__ import annotations

import ipaddress
import random
import socket
import struct

import dpkt
import pytest

from dcpdissect.capture import SUPPORTED_LINKTYPES, Segment, decode_packet

SRC4, DST4 = "10.1.2.3", "192.168.100.200"
SRC6, DST6 = "2001:db8::1", "fe80::abcd:2"
MAC_A, MAC_B = b"\x00\x11\x22\x33\x44\x55", b"\x66\x77\x88\x99\xaa\xbb"


# --------------------------------------------------------------------------
# builders (plain struct, so that the decoder is not checked against itself)

def tcp(sport=40000, dport=11210, seq=1000, ack=2000, flags=0x18, payload=b"", options=b""):
    options += b"\x00" * (-len(options) % 4)
    doff = (20 + len(options)) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, doff << 4, flags, 65535, 0, 0) + options + payload


def ipv4(l4, proto=6, src=SRC4, dst=DST4, frag=0x4000, options=b"", total=None):
    options += b"\x00" * (-len(options) % 4)
    ihl = (20 + len(options)) // 4
    total = 20 + len(options) + len(l4) if total is None else total
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 1, frag, 64, proto, 0,
                      socket.inet_aton(src), socket.inet_aton(dst))
    return hdr + options + l4


def ipv6(l4, nh=6, src=SRC6, dst=DST6, ext=b"", plen=None):
    plen = len(ext) + len(l4) if plen is None else plen
    return (struct.pack("!IHBB", 0x60000000, plen, nh, 64)
            + socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst) + ext + l4)


def ext8(nh, body_len_units=0, fill=b"\x01"):
    """Hop-by-hop / routing / destination options header: (len+1)*8 bytes."""
    size = (body_len_units + 1) * 8
    return bytes([nh, body_len_units]) + fill * (size - 2)


def ah(nh, words=4):
    """Authentication header: (payload len + 2) * 4 bytes."""
    size = (words + 2) * 4
    return bytes([nh, words]) + b"\0" * (size - 2)


def frag6(nh, offset=0, more=False):
    return struct.pack("!BBHI", nh, 0, (offset << 3) | int(more), 0xABCD)


def eth(l3, etype=0x0800, vlans=()):
    """Ethernet II frame; ``vlans`` lists the TPIDs of stacked tags, outermost first."""
    if not vlans:
        return MAC_B + MAC_A + struct.pack("!H", etype) + l3
    # TPID, then for each tag: TCI followed by the next TPID (or the real EtherType)
    tags = b"".join(struct.pack("!HH", 100 + i, t) for i, t in enumerate(list(vlans[1:]) + [etype]))
    return MAC_B + MAC_A + struct.pack("!H", vlans[0]) + tags + l3


def sll(l3, proto=0x0800):
    return struct.pack("!HHH8sH", 0, 1, 6, MAC_A + b"\0\0", proto) + l3


def sll2(l3, proto=0x0800):
    return struct.pack("!HHIHBB8s", proto, 0, 2, 1, 0, 6, MAC_A + b"\0\0") + l3


def check(seg, src, dst, payload, *, sport=40000, dport=11210, seq=1000, ack=2000, flags=0x18, missing=0):
    assert isinstance(seg, Segment)
    assert seg == Segment(src, dst, sport, dport, seq, ack, flags, payload, missing)
    assert type(seg.payload) is bytes


PAYLOAD = b"\x80\x57\x00\x05" + b"hello dcp" * 3


# --------------------------------------------------------------------------
# link types

def test_supported_linktypes():
    assert set(SUPPORTED_LINKTYPES) == {0, 1, 12, 14, 101, 108, 113, 228, 229, 276}
    assert all(isinstance(v, str) and v for v in SUPPORTED_LINKTYPES.values())


def test_ethernet_ipv4():
    check(decode_packet(1, eth(ipv4(tcp(payload=PAYLOAD)))), SRC4, DST4, PAYLOAD)


def test_ethernet_ipv6():
    check(decode_packet(1, eth(ipv6(tcp(payload=PAYLOAD)), 0x86DD)), SRC6, DST6, PAYLOAD)


def test_ethernet_padding_trimmed():
    frame = eth(ipv4(tcp(payload=b"ab", flags=0x10)))
    frame += b"\0" * (60 - len(frame)) + b"FCS!"
    seg = decode_packet(1, frame)
    check(seg, SRC4, DST4, b"ab", flags=0x10)


def test_ethernet_padding_trimmed_ipv6():
    frame = eth(ipv6(tcp(payload=b"")), 0x86DD) + b"\xee" * 8
    check(decode_packet(1, frame), SRC6, DST6, b"")


@pytest.mark.parametrize("vlans", [(0x8100,), (0x88A8, 0x8100), (0x9100, 0x88A8, 0x8100), (0x8100,) * 5])
@pytest.mark.parametrize("v6", [False, True])
def test_vlan_stacks(vlans, v6):
    l3 = ipv6(tcp(payload=PAYLOAD)) if v6 else ipv4(tcp(payload=PAYLOAD))
    frame = eth(l3, 0x86DD if v6 else 0x0800, vlans)
    check(decode_packet(1, frame), SRC6 if v6 else SRC4, DST6 if v6 else DST4, PAYLOAD)


def test_vlan_tag_parsed_by_dpkt_too():
    frame = eth(ipv4(tcp(payload=PAYLOAD)), 0x0800, (0x88A8, 0x8100))
    e = dpkt.ethernet.Ethernet(frame)
    assert bytes(e.data.data.data) == PAYLOAD
    assert decode_packet(1, frame).payload == PAYLOAD


def test_vlan_cut_short():
    frame = eth(ipv4(tcp()), 0x0800, (0x8100,))
    assert decode_packet(1, frame[:16]) is None


@pytest.mark.parametrize("v6", [False, True])
def test_linux_sll(v6):
    l3 = ipv6(tcp(payload=PAYLOAD)) if v6 else ipv4(tcp(payload=PAYLOAD))
    frame = sll(l3, 0x86DD if v6 else 0x0800)
    assert dpkt.sll.SLL(frame).ethtype == (0x86DD if v6 else 0x0800)
    check(decode_packet(113, frame), SRC6 if v6 else SRC4, DST6 if v6 else DST4, PAYLOAD)


def test_linux_sll_vlan():
    frame = sll(struct.pack("!HH", 7, 0x0800) + ipv4(tcp(payload=PAYLOAD)), 0x8100)
    check(decode_packet(113, frame), SRC4, DST4, PAYLOAD)


@pytest.mark.parametrize("v6", [False, True])
def test_linux_sll2(v6):
    l3 = ipv6(tcp(payload=PAYLOAD)) if v6 else ipv4(tcp(payload=PAYLOAD))
    frame = sll2(l3, 0x86DD if v6 else 0x0800)
    assert len(frame) - len(l3) == 20
    check(decode_packet(276, frame), SRC6 if v6 else SRC4, DST6 if v6 else DST4, PAYLOAD)


@pytest.mark.parametrize("linktype", [0, 108])
@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("family", [2, 24, 28, 30, 10])
def test_bsd_null_and_loop(linktype, byteorder, family):
    v6 = family != 2
    l3 = ipv6(tcp(payload=PAYLOAD)) if v6 else ipv4(tcp(payload=PAYLOAD))
    frame = family.to_bytes(4, byteorder) + l3
    check(decode_packet(linktype, frame), SRC6 if v6 else SRC4, DST6 if v6 else DST4, PAYLOAD)


def test_bsd_null_other_family():
    assert decode_packet(0, (17).to_bytes(4, "little") + ipv4(tcp())) is None
    assert decode_packet(0, b"\x02\x00") is None


def test_bsd_loop_against_dpkt():
    frame = (2).to_bytes(4, "big") + ipv4(tcp(payload=PAYLOAD))
    lo = dpkt.loopback.Loopback(frame)
    assert bytes(lo.data.data.data) == PAYLOAD
    assert decode_packet(108, frame).payload == PAYLOAD


@pytest.mark.parametrize("linktype", [101, 228, 229, 12, 14])
@pytest.mark.parametrize("v6", [False, True])
def test_raw_ip(linktype, v6):
    l3 = ipv6(tcp(payload=PAYLOAD)) if v6 else ipv4(tcp(payload=PAYLOAD))
    check(decode_packet(linktype, l3), SRC6 if v6 else SRC4, DST6 if v6 else DST4, PAYLOAD)


def test_raw_ip_bad_version():
    pkt = bytearray(ipv4(tcp()))
    pkt[0] = 0x55
    assert decode_packet(101, bytes(pkt)) is None
    assert decode_packet(101, b"") is None


@pytest.mark.parametrize("linktype", [127, 105, 2, 9999, -1])
def test_unknown_linktype(linktype):
    assert decode_packet(linktype, eth(ipv4(tcp()))) is None


# --------------------------------------------------------------------------
# not TCP

def test_arp():
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, MAC_A, b"\n\0\0\1", b"\0" * 6, b"\n\0\0\2")
    assert decode_packet(1, eth(arp, 0x0806)) is None


def test_udp_and_icmp():
    udp = struct.pack("!HHHH", 53, 53, 12, 0) + b"abcd"
    assert decode_packet(1, eth(ipv4(udp, proto=17))) is None
    assert decode_packet(1, eth(ipv4(b"\x08\0\0\0\0\0\0\0", proto=1))) is None
    assert decode_packet(1, eth(ipv6(udp, nh=17), 0x86DD)) is None
    assert decode_packet(1, eth(ipv6(b"\x80\0\0\0", nh=58), 0x86DD)) is None


def test_ethertype_mismatch_and_8023():
    assert decode_packet(1, eth(ipv6(tcp()), 0x0800)) is None          # says v4, carries v6
    assert decode_packet(1, eth(ipv4(tcp()), 0x86DD)) is None
    assert decode_packet(1, eth(b"\x42\x42\x03" + b"\0" * 40, 46)) is None   # 802.3 length field


# --------------------------------------------------------------------------
# IPv4 details

def test_ipv4_options_and_tcp_options():
    pkt = ipv4(tcp(payload=PAYLOAD, options=b"\x02\x04\x05\xb4\x01\x03\x03\x07\x04\x02"),
               options=b"\x94\x04\x00\x00")
    seg = decode_packet(101, pkt)
    check(seg, SRC4, DST4, PAYLOAD)
    d = dpkt.ip.IP(pkt)
    assert d.data.data == seg.payload


@pytest.mark.parametrize("frag, expected", [
    (0x4000, True),      # DF
    (0x0000, True),
    (0x2000, False),     # MF: first fragment
    (0x0010, False),     # offset != 0
    (0x2010, False),
    (0x6001, False),
])
def test_ipv4_fragments(frag, expected):
    seg = decode_packet(101, ipv4(tcp(payload=PAYLOAD), frag=frag))
    assert (seg is not None) is expected


def test_ipv4_bad_header_lengths():
    pkt = bytearray(ipv4(tcp(payload=PAYLOAD)))
    pkt[0] = 0x44                                 # IHL 4 < 5
    assert decode_packet(101, bytes(pkt)) is None
    assert decode_packet(101, ipv4(tcp(), total=10)) is None       # total < IHL
    assert decode_packet(101, ipv4(tcp(), total=30)) is None       # no room for TCP header


def test_ipv4_tso_zero_total_length():
    seg = decode_packet(1, eth(ipv4(tcp(payload=PAYLOAD * 10), total=0)))
    check(seg, SRC4, DST4, PAYLOAD * 10)


@pytest.mark.parametrize("keep", [1, 10, len(PAYLOAD) - 1])
def test_ipv4_truncated_capture(keep):
    frame = eth(ipv4(tcp(payload=PAYLOAD)))
    cut = frame[: len(frame) - len(PAYLOAD) + keep]
    check(decode_packet(1, cut), SRC4, DST4, PAYLOAD[:keep], missing=len(PAYLOAD) - keep)


def test_ipv4_truncated_in_headers():
    frame = eth(ipv4(tcp(payload=PAYLOAD, options=b"\x01" * 12)))
    for n in range(0, 14 + 20 + 32):
        assert decode_packet(1, frame[:n]) is None, n
    # headers complete, payload empty -> a segment whose whole payload was not captured
    seg = decode_packet(1, frame[: 14 + 20 + 32])
    check(seg, SRC4, DST4, b"", missing=len(PAYLOAD))


def test_tcp_bad_data_offset():
    t = bytearray(tcp(payload=PAYLOAD))
    t[12] = 0x40                                  # 16-byte header
    assert decode_packet(101, ipv4(bytes(t))) is None
    t[12] = 0xF0                                  # 60-byte header, longer than the segment
    assert decode_packet(101, ipv4(bytes(t[:30]))) is None


def test_tcp_flags_and_numbers():
    t = tcp(sport=1, dport=65535, seq=0xFFFFFFFF, ack=0x80000000, flags=0x13, payload=b"")
    seg = decode_packet(228, ipv4(t, src="0.0.0.0", dst="255.255.255.255"))
    check(seg, "0.0.0.0", "255.255.255.255", b"", sport=1, dport=65535, seq=0xFFFFFFFF,
          ack=0x80000000, flags=0x13)


# --------------------------------------------------------------------------
# IPv6 details

@pytest.mark.parametrize("chain", [
    [0],
    [0, 60],
    [0, 43, 60],
    [51],
    [0, 43, 51, 60],
    [44],             # atomic fragment
    [0, 44, 60],
])
def test_ipv6_extension_headers(chain):
    ext = b""
    nexts = chain[1:] + [6]
    for h, nh in zip(chain, nexts):
        if h == 51:
            ext += ah(nh)
        elif h == 44:
            ext += frag6(nh)
        else:
            ext += ext8(nh, body_len_units=len(ext) % 3)
    pkt = ipv6(tcp(payload=PAYLOAD), nh=chain[0], ext=ext)
    seg = decode_packet(229, pkt)
    check(seg, SRC6, DST6, PAYLOAD)
    # dpkt agrees on the payload (it knows these extension headers too)
    assert bytes(dpkt.ip6.IP6(pkt).data.data) == PAYLOAD


@pytest.mark.parametrize("offset, more", [(0, True), (1, False), (100, True)])
def test_ipv6_real_fragments(offset, more):
    pkt = ipv6(tcp(payload=PAYLOAD), nh=44, ext=frag6(6, offset, more))
    assert decode_packet(229, pkt) is None


def test_ipv6_no_next_header_and_unknown():
    assert decode_packet(229, ipv6(b"", nh=59)) is None
    assert decode_packet(229, ipv6(tcp(), nh=0, ext=ext8(59))) is None
    assert decode_packet(229, ipv6(tcp(), nh=0, ext=ext8(135))) is None


def test_ipv6_extension_beyond_packet():
    ext = bytes([6, 200]) + b"\0" * 6             # claims 1608 bytes
    assert decode_packet(229, ipv6(tcp(payload=PAYLOAD), nh=0, ext=ext)) is None


@pytest.mark.parametrize("keep", [1, 17])
def test_ipv6_truncated_capture(keep):
    pkt = ipv6(tcp(payload=PAYLOAD), nh=60, ext=ext8(6))
    cut = pkt[: len(pkt) - len(PAYLOAD) + keep]
    check(decode_packet(229, cut), SRC6, DST6, PAYLOAD[:keep], missing=len(PAYLOAD) - keep)
    for n in range(0, len(pkt) - len(PAYLOAD)):
        assert decode_packet(229, pkt[:n]) is None


def test_ipv6_zero_payload_length_uses_capture():
    pkt = ipv6(tcp(payload=PAYLOAD), plen=0)
    check(decode_packet(229, pkt), SRC6, DST6, PAYLOAD)


def test_ipv6_addresses_compressed():
    seg = decode_packet(229, ipv6(tcp(), src="::ffff:1.2.3.4", dst="2001:0db8:0000:0000:0000:0000:0000:0001"))
    assert seg.src == "::ffff:1.2.3.4" and seg.dst == "2001:db8::1"


# --------------------------------------------------------------------------
# input types, oracle cross-check, fuzz

def test_bytes_like_inputs():
    frame = eth(ipv4(tcp(payload=PAYLOAD)))
    for obj in (bytearray(frame), memoryview(frame)):
        seg = decode_packet(1, obj)
        check(seg, SRC4, DST4, PAYLOAD)
    assert decode_packet(1, None) is None
    assert decode_packet(1, 12345) is None


def _random_tcp_frame(rng):
    v6 = rng.random() < 0.4
    payload = rng.randbytes(rng.randint(0, 300))
    t = dpkt.tcp.TCP(sport=rng.randint(1, 65535), dport=rng.randint(1, 65535),
                     seq=rng.getrandbits(32), ack=rng.getrandbits(32), flags=rng.getrandbits(8),
                     data=payload)
    if rng.random() < 0.5:
        t.opts = b"\x02\x04\x05\xb4\x01\x01\x04\x02"
        t.off = 7
    if v6:
        src, dst = rng.randbytes(16), rng.randbytes(16)
        tb = bytes(t)
        ip = dpkt.ip6.IP6(src=src, dst=dst, nxt=6, hlim=64, data=t, plen=len(tb))
        frame = bytes(dpkt.ethernet.Ethernet(src=MAC_A, dst=MAC_B, type=0x86DD, data=ip))
        addrs = (str(ipaddress.IPv6Address(src)), str(ipaddress.IPv6Address(dst)))
    else:
        src, dst = rng.randbytes(4), rng.randbytes(4)
        ip = dpkt.ip.IP(src=src, dst=dst, p=6, data=t)
        frame = bytes(dpkt.ethernet.Ethernet(src=MAC_A, dst=MAC_B, type=0x0800, data=ip))
        addrs = (socket.inet_ntoa(src), socket.inet_ntoa(dst))
    if len(frame) < 60:
        frame += b"\0" * (60 - len(frame))
    return frame, addrs


def test_against_dpkt_random_frames():
    rng = random.Random(2024)
    for _ in range(500):
        frame, (src, dst) = _random_tcp_frame(rng)
        seg = decode_packet(1, frame)
        e = dpkt.ethernet.Ethernet(frame)
        t = e.data.data
        assert seg == Segment(src, dst, t.sport, t.dport, t.seq, t.ack, t.flags, bytes(t.data), False)


def test_fuzz_never_raises():
    rng = random.Random(31337)
    linktypes = list(SUPPORTED_LINKTYPES) + [2, 127, 147]
    seeds = [eth(ipv4(tcp(payload=PAYLOAD))), eth(ipv6(tcp(payload=PAYLOAD), nh=0, ext=ext8(6)), 0x86DD),
             sll(ipv4(tcp())), sll2(ipv6(tcp()), 0x86DD), (2).to_bytes(4, "little") + ipv4(tcp()),
             ipv6(tcp(), nh=44, ext=frag6(6)), eth(ipv4(tcp()), 0x0800, (0x8100, 0x8100))]
    count = 0
    for i in range(6000):
        lt = rng.choice(linktypes)
        mode = i % 3
        if mode == 0:
            data = rng.randbytes(rng.randint(0, 120))
        else:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if mode == 2:
                data = data[: rng.randint(0, len(data))]
            data = bytes(data)
        seg = decode_packet(lt, data)
        if seg is not None:
            count += 1
            assert isinstance(seg, Segment) and type(seg.payload) is bytes
            assert isinstance(seg.src, str) and isinstance(seg.dst, str)
            assert 0 <= seg.flags <= 255 and len(seg.payload) <= len(data)
    assert count > 0
    # every truncation of every seed, on every link type
    for s in seeds:
        for n in range(len(s) + 1):
            for lt in linktypes:
                decode_packet(lt, s[:n])
