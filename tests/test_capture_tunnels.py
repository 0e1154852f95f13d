"""Decoding through tunnels: VXLAN, Geneve, GRE, ERSPAN, IP-in-IP and MPLS, nested.

The tunnel headers are built by Scapy (its own encoders, not ours) around one inner TCP
packet; the decoded segment must be the inner packet's, with the tunnel named as written
here. Truncation and bad lengths are built by hand with struct.
"""

from __future__ import annotations

import logging
import random
import struct

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.contrib.erspan import ERSPAN_II, ERSPAN_III, ERSPAN_PlatformSpecific  # noqa: E402
from scapy.contrib.geneve import GENEVE, GeneveOptions  # noqa: E402
from scapy.contrib.mpls import MPLS  # noqa: E402
from scapy.layers.inet import IP, TCP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import GRE, Dot1Q, Ether  # noqa: E402
from scapy.layers.vxlan import VXLAN  # noqa: E402
from scapy.packet import Raw, raw  # noqa: E402

from dcpdissect.capture.fragments import Defragmenter  # noqa: E402
from dcpdissect.capture.packets import MAX_NESTING, Decoder, Segment, decode_packet  # noqa: E402

MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
PAYLOAD = b"\x80\x57\x00\x05" + bytes(range(200))
SEQ, ACK = 0x01020304, 0x0A0B0C0D


def inner_ip4():
    return (IP(src="10.0.0.2", dst="10.0.0.1", id=7)
            / TCP(sport=50123, dport=11210, seq=SEQ, ack=ACK, flags="PA") / Raw(PAYLOAD))


def inner_ip6():
    return (IPv6(src="fd00::2", dst="fd00::1")
            / TCP(sport=50123, dport=11210, seq=SEQ, ack=ACK, flags="PA") / Raw(PAYLOAD))


def inner_eth(v6=False):
    return Ether(**MACS) / (inner_ip6() if v6 else inner_ip4())


def outer4(proto_layer):
    return Ether(**MACS) / IP(src="192.0.2.1", dst="192.0.2.2") / proto_layer


def outer6(proto_layer):
    return Ether(**MACS) / IPv6(src="2001:db8::1", dst="2001:db8::2") / proto_layer


def expected(v6=False, tunnel="", missing=0, payload=PAYLOAD):
    src, dst = ("fd00::2", "fd00::1") if v6 else ("10.0.0.2", "10.0.0.1")
    return Segment(src, dst, 50123, 11210, SEQ, ACK, 0x18, payload, missing, tunnel)


E4 = "192.0.2.1→192.0.2.2"
E6 = "2001:db8::1→2001:db8::2"

CASES = {
    "vxlan": (outer4(UDP(sport=40001, dport=4789) / VXLAN(vni=42) / inner_eth()),
              False, f"VXLAN vni 42 {E4}"),
    "vxlan-in-ipv6": (outer6(UDP(sport=40001, dport=4789) / VXLAN(vni=42) / inner_eth()),
                      False, f"VXLAN vni 42 {E6}"),
    "vxlan-inner-ipv6": (outer4(UDP(sport=40001, dport=4789) / VXLAN(vni=9) / inner_eth(True)),
                         True, f"VXLAN vni 9 {E4}"),
    "vxlan-source-port": (outer4(UDP(sport=4789, dport=40001) / VXLAN(vni=1) / inner_eth()),
                          False, f"VXLAN vni 1 {E4}"),
    "vxlan-no-vni-flag": (outer4(UDP(sport=40001, dport=4789) / VXLAN(flags=0, vni=5)
                                 / inner_eth()), False, f"VXLAN {E4}"),
    "geneve": (outer4(UDP(sport=40001, dport=6081) / GENEVE(vni=77, proto=0x6558)
                      / inner_eth()), False, f"Geneve vni 77 {E4}"),
    "geneve-options": (outer4(UDP(sport=40001, dport=6081) / GENEVE(
        vni=77, proto=0x6558, options=[GeneveOptions(classid=0x0102, type=0x80, data=b"abcd"),
                                       GeneveOptions(classid=0xFFFF, type=1, data=b"12345678")])
        / inner_eth()), False, f"Geneve vni 77 {E4}"),
    "geneve-ip": (outer6(UDP(sport=40001, dport=6081) / GENEVE(vni=3, proto=0x86DD)
                         / inner_ip6()), True, f"Geneve vni 3 {E6}"),
    "gre-teb": (outer4(GRE(key_present=1, key=0x123456, proto=0x6558) / inner_eth()),
                False, f"GRE key {0x123456} {E4}"),
    "gre-in-ipv6": (outer6(GRE(proto=0x0800) / inner_ip4()), False, f"GRE {E6}"),
    "erspan-i": (outer4(GRE(proto=0x88BE) / inner_eth()), False, f"ERSPAN I {E4}"),
    "erspan-ii": (outer4(GRE(seqnum_present=1, sequence_number=99, proto=0x88BE)
                         / ERSPAN_II(session_id=3, vlan=10) / inner_eth()),
                  False, f"ERSPAN II session 3 {E4}"),
    "erspan-iii": (outer4(GRE(seqnum_present=1, proto=0x22EB) / ERSPAN_III(session_id=1023)
                          / inner_eth(True)), True, f"ERSPAN III session 1023 {E4}"),
    "erspan-iii-subheader": (outer4(GRE(seqnum_present=1, proto=0x22EB)
                                    / ERSPAN_III(session_id=5, o=1)
                                    / ERSPAN_PlatformSpecific(platf_id=3, info1=7, info2=8)
                                    / inner_eth()), False, f"ERSPAN III session 5 {E4}"),
    "ipip": (outer4(inner_ip4()), False, f"IPv4-in-IPv4 {E4}"),
    "6in4": (outer4(inner_ip6()), True, f"IPv6-in-IPv4 {E4}"),
    "4in6": (outer6(inner_ip4()), False, f"IPv4-in-IPv6 {E6}"),
    "6in6": (outer6(inner_ip6()), True, f"IPv6-in-IPv6 {E6}"),
    "mpls": (Ether(**MACS, type=0x8847) / MPLS(label=16, s=1) / inner_ip4(), False, "MPLS 16"),
    "mpls-stack-ipv6": (Ether(**MACS, type=0x8847) / MPLS(label=16, s=0) / MPLS(label=1000, s=0)
                        / MPLS(label=1048575, s=1) / inner_ip6(), True, "MPLS 16/1000/1048575"),
    "mpls-multicast": (Ether(**MACS, type=0x8848) / MPLS(label=20, s=1) / inner_ip4(),
                       False, "MPLS 20"),
    "mpls-pseudowire": (Ether(**MACS, type=0x8847) / MPLS(label=30, s=1) / Raw(b"\0\0\0\0")
                        / inner_eth(), False, "MPLS 30"),
    "mpls-in-gre": (outer4(GRE(proto=0x8847) / MPLS(label=16, s=1) / inner_ip4()),
                    False, f"GRE {E4} / MPLS 16"),
    "mpls-in-ip": (outer4(MPLS(label=40, s=1) / inner_ip4()), False,
                   f"MPLS-in-IP {E4} / MPLS 40"),
    "vlan-mpls-gre-ipv6": (Ether(**MACS) / Dot1Q(vlan=100, type=0x8847) / MPLS(label=16, s=1)
                           / IP(src="192.0.2.1", dst="192.0.2.2") / GRE(proto=0x86DD)
                           / inner_ip6(), True, f"MPLS 16 / GRE {E4}"),
    "vxlan-in-gre-in-ipv6": (outer6(GRE(key_present=1, key=1, proto=0x0800)
                                    / IP(src="198.51.100.1", dst="198.51.100.2")
                                    / UDP(sport=1, dport=4789) / VXLAN(vni=2) / inner_eth()),
                             False, f"GRE key 1 {E6} / VXLAN vni 2 198.51.100.1→198.51.100.2"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inner_segment_and_tunnel(name):
    pkt, v6, tunnel = CASES[name]
    frame = raw(pkt)
    assert decode_packet(1, frame) == expected(v6, tunnel)
    # the same packet without its tunnel decodes to the same segment, with no tunnel
    plain = raw(Ether(**MACS) / (inner_ip6() if v6 else inner_ip4()))
    assert decode_packet(1, plain) == expected(v6)


@pytest.mark.parametrize("csum", [0, 1])
@pytest.mark.parametrize("key", [0, 1])
@pytest.mark.parametrize("seq", [0, 1])
@pytest.mark.parametrize("proto", [0x0800, 0x86DD, 0x6558])
def test_gre_every_optional_field(csum, key, seq, proto):
    """RFC 2784/2890: checksum (with its reserved half), key and sequence number, each
    present or not, before IPv4, IPv6 or an Ethernet frame."""
    v6 = proto == 0x86DD
    inner = inner_eth() if proto == 0x6558 else inner_ip6() if v6 else inner_ip4()
    gre = GRE(chksum_present=csum, key_present=key, seqnum_present=seq, key=0xDEADBEEF,
              sequence_number=12345, proto=proto)
    frame = raw(outer4(gre / inner))
    assert len(raw(gre)) == 4 + 4 * (csum + key + seq)
    tunnel = f"GRE key {0xDEADBEEF} {E4}" if key else f"GRE {E4}"
    assert decode_packet(1, frame) == expected(v6, tunnel)


def test_gre_routing_and_version_1_are_not_read():
    for flags in (0x4000, 0x0001):               # RFC 1701 routing; version 1 (PPTP)
        frame = raw(outer4(GRE(proto=0x0800) / inner_ip4()))
        frame = frame[:34] + struct.pack("!H", flags) + frame[36:]
        assert decode_packet(1, frame) is None


def test_vxlan_on_another_port_needs_the_option():
    frame = raw(outer4(UDP(sport=40001, dport=8472) / VXLAN(vni=1) / inner_eth()))
    assert decode_packet(1, frame) is None
    assert Decoder((8472,)).decode(1, frame) == expected(False, f"VXLAN vni 1 {E4}")
    assert Decoder((8472,)).decode(1, raw(CASES["vxlan"][0])) is not None     # 4789 stays


def test_udp_length_bounds_the_tunnel():
    """Bytes after the UDP datagram (Ethernet padding of a short frame) are not the inner
    packet's, even when the inner IPv4 length is unset (segmentation offload)."""
    pkt = outer4(UDP(sport=1, dport=4789) / VXLAN(vni=1) / Ether(**MACS)
                 / IP(src="10.0.0.2", dst="10.0.0.1", len=0) / TCP(sport=50123, dport=11210,
                                                                   seq=SEQ, ack=ACK, flags="PA")
                 / Raw(b"ab"))
    frame = raw(pkt) + b"\xee" * 10
    assert decode_packet(1, frame) == expected(False, f"VXLAN vni 1 {E4}", payload=b"ab")


def test_mpls_unknown_first_nibble():
    for first in (b"\x10", b"\x50", b"\xf0"):
        frame = raw(Ether(**MACS, type=0x8847) / MPLS(label=16, s=1) / Raw(first + b"\0" * 60))
        assert decode_packet(1, frame) is None


def test_nesting_is_bounded():
    def nested(n):
        pkt = raw(inner_ip4())
        for _ in range(n):      # a minimal IPv4 header, protocol 4, around the packet
            pkt = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(pkt), 0, 0, 64, 4, 0,
                              b"\xc0\x00\x02\x01", b"\xc0\x00\x02\x02") + pkt
        return raw(Ether(**MACS, type=0x0800)) + pkt
    seg = decode_packet(1, nested(MAX_NESTING))
    assert seg is not None and seg.tunnel.count("IPv4-in-IPv4") == MAX_NESTING
    assert decode_packet(1, nested(MAX_NESTING + 1)) is None
    assert decode_packet(1, nested(3000)) is None                     # no RecursionError
    assert decode_packet(1, raw(CASES["vxlan"][0])) is not None        # the count starts over


@pytest.mark.parametrize("name", sorted(CASES))
def test_truncated_at_every_length(name):
    """Cut anywhere in the headers: None, never an exception; cut inside the inner payload:
    the segment, with the inner IP length telling how many bytes are missing."""
    pkt, v6, tunnel = CASES[name]
    frame = raw(pkt)
    start = len(frame) - len(PAYLOAD)
    for n in range(start):
        assert decode_packet(1, frame[:n]) is None, n
    for n in range(start, len(frame) + 1):
        keep = n - start
        assert decode_packet(1, frame[:n]) == expected(v6, tunnel, len(PAYLOAD) - keep,
                                                         PAYLOAD[:keep])


def _set(frame: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(frame)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def test_bad_lengths():
    vx = raw(CASES["vxlan"][0])                 # Ether 14, IPv4 20, UDP 8 at 34, VXLAN at 42
    assert decode_packet(1, _set(vx, 16, "!H", 20 + 8 + 4)) is None     # outer IP ends in VXLAN
    assert decode_packet(1, _set(vx, 38, "!H", 12)) is None             # UDP ends in VXLAN
    seg = decode_packet(1, _set(vx, 38, "!H", 3))                       # < 8: not a bound
    assert seg == expected(False, f"VXLAN vni 42 {E4}")
    # the outer IP length cut short of the inner payload: the inner length says what is missing
    cut = _set(vx, 16, "!H", len(vx) - 14 - 50)
    seg = decode_packet(1, cut)
    assert seg == expected(False, f"VXLAN vni 42 {E4}", 50, PAYLOAD[:-50])
    gen = raw(CASES["geneve-options"][0])
    assert decode_packet(1, _set(gen, 42, "!B", 0x3F)) is None          # options beyond the end
    assert decode_packet(1, _set(gen, 42, "!B", 0x40 | (gen[42] & 0x3F))) is None   # version 1
    er = raw(CASES["erspan-iii-subheader"][0])
    assert decode_packet(1, er[:34 + 8 + 12 + 7]) is None               # subheader cut
    assert decode_packet(1, _set(er, 42, "!B", 0x30)) is None           # ERSPAN version 3


def test_mutated_headers_never_raise():
    """Random bytes written over the headers of every case, read with and without a
    defragmenter (a mutated flag may turn a packet into a fragment)."""
    rng = random.Random(7)
    decoder = Decoder((8472,), Defragmenter())
    for n in range(3000):
        frame = bytearray(raw(CASES[sorted(CASES)[n % len(CASES)]][0]))
        for _ in range(rng.randint(1, 6)):
            frame[rng.randrange(len(frame) - len(PAYLOAD))] = rng.randrange(256)
        for seg in (decode_packet(1, bytes(frame)), decoder.decode_frame(1, bytes(frame), n, n)):
            assert seg is None or isinstance(seg, Segment)
    assert decoder.depth == 0 and decoder.within == ()


def test_vxlan_on_an_unread_port_is_noted():
    """Datagrams that look like VXLAN on a port not read as VXLAN are counted per port (for
    the no-MCBP hint); other UDP is not."""
    decoder = Decoder()
    vx = raw(outer4(UDP(sport=40001, dport=8472) / VXLAN(vni=1) / inner_eth()))
    dns = raw(outer4(UDP(sport=5353, dport=53) / Raw(b"\x08\0\0\0" + bytes(40))))
    for frame in (vx, vx, dns):
        assert decoder.decode(1, frame) is None
    assert decoder.vxlan_like == {8472: 2}
    assert Decoder((8472,)).decode(1, vx) is not None
