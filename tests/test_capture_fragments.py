"""IP fragments reassembled by the decoder: in order, out of order, duplicated, overlapping,
incomplete, timed out, over the caps; IPv4 and IPv6, outer and inner (inside VXLAN).

Fragments are cut by Scapy's ``fragment``/``fragment6`` (not ours) or by hand with struct
where a test needs overlaps or odd sizes.
"""

from __future__ import annotations

import logging
import random
import struct

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.layers.inet import IP, TCP, UDP, fragment  # noqa: E402
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, fragment6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.layers.vxlan import VXLAN  # noqa: E402
from scapy.packet import Raw, raw  # noqa: E402

from dcpdissect.capture.fragments import Defragmenter, Reassembled  # noqa: E402
from dcpdissect.capture.packets import Decoder, Segment, decode_packet  # noqa: E402

MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
PAYLOAD = bytes(random.Random(5).randbytes(4000))
SEQ, ACK = 1000, 2000


def tcp_packet(v6=False, payload=PAYLOAD, ident=0x1234):
    tcp = TCP(sport=50123, dport=11210, seq=SEQ, ack=ACK, flags="PA") / Raw(payload)
    if v6:
        return IPv6(src="fd00::2", dst="fd00::1") / IPv6ExtHdrFragment(id=ident) / tcp
    return IP(src="10.0.0.2", dst="10.0.0.1", id=ident, flags=0) / tcp


def segment(v6=False, payload=PAYLOAD, missing=0, tunnel="", frames=()):
    src, dst = ("fd00::2", "fd00::1") if v6 else ("10.0.0.2", "10.0.0.1")
    return Segment(src, dst, 50123, 11210, SEQ, ACK, 0x18, payload, missing, tunnel, frames)


def frames_of(v6=False, size=1400, **kw):
    pkt = tcp_packet(v6, **kw)
    parts = fragment6(pkt, size + 48) if v6 else fragment(pkt, size)
    return [raw(Ether(**MACS) / p) for p in parts]


def run(frames, decoder=None, t0=0, step=1000):
    """Decode frames 1, 2, ...: [(frame number, segment)] of those that gave one."""
    decoder = decoder or Decoder((), Defragmenter())
    out = []
    for n, data in enumerate(frames, 1):
        seg = decoder.decode_frame(1, data, n, t0 + n * step)
        if seg is not None:
            out.append((n, seg))
    return out


@pytest.mark.parametrize("v6", [False, True])
def test_in_order(v6):
    frames = frames_of(v6)
    assert len(frames) == 3
    assert run(frames) == [(3, segment(v6, frames=(1, 2, 3)))]


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_out_of_order_and_duplicated(v6, seed):
    """Any order, with repeats: the packet comes with the fragment that completes it, once;
    a repeat after that is a new, incomplete packet."""
    frames = frames_of(v6, size=600)
    rng = random.Random(seed)
    order = list(range(len(frames)))
    rng.shuffle(order)
    dup = order[rng.randrange(len(order))]
    order.insert(rng.randrange(len(order)), dup)
    fed = [frames[i] for i in order]
    decoder = Decoder((), Defragmenter())
    got = run(fed, decoder)
    complete_at = next(k for k in range(1, len(order) + 1)
                       if set(order[:k]) == set(range(len(frames))))
    frames_seen = tuple(sorted({n for n in range(1, complete_at + 1)}))
    assert got == [(complete_at, segment(v6, frames=frames_seen))]
    decoder.defragmenter.finish()
    stats = decoder.defragmenter.stats
    assert stats["reassembled"] == 1
    assert stats["incomplete"] == (1 if complete_at < len(order) else 0)


def _frag4(payload: bytes, offset: int, more: bool, ident=0x99, proto=6) -> bytes:
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident,
                      (0x2000 if more else 0) | (offset >> 3), 64, proto, 0,
                      bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
    return raw(Ether(**MACS, type=0x0800)) + hdr + payload


def _tcp_bytes(payload: bytes) -> bytes:
    return raw(TCP(sport=50123, dport=11210, seq=SEQ, ack=ACK, flags="PA") / Raw(payload))


def test_overlapping_fragments_keep_the_first_bytes():
    whole = _tcp_bytes(b"A" * 96)            # 116 bytes: fragments of 8-byte units
    first = _frag4(whole[:64], 0, True)
    overlap = _frag4(b"B" * 40, 48, True)    # bytes 48..88, 16 of them already seen
    last = _frag4(whole[80:], 80, False)     # bytes 80..116, 8 of them seen from "overlap"
    got = run([first, overlap, last])
    expect = bytearray(whole)
    expect[64:88] = b"B" * 24                # first seen: "overlap" owns 64..88
    assert got == [(3, segment(payload=bytes(expect[20:]), frames=(1, 2, 3)))]


def test_incomplete_and_invalid_are_counted():
    whole = _tcp_bytes(b"x" * 300)
    decoder = Decoder((), Defragmenter())
    got = run([_frag4(whole[:160], 0, True), _frag4(whole[200:], 200, False),   # hole 160..200
               _frag4(b"z" * 16, 65528, True, ident=5)], decoder)               # ends past 65535
    assert got == []
    d = decoder.defragmenter
    d.finish()
    assert (d.stats["incomplete"], d.stats["invalid"], d.unreassembled) == (1, 1, 2)


def test_timing_out():
    """The first fragment is older than the limit when the last one comes: given up."""
    whole = _tcp_bytes(b"t" * 300)
    parts = [_frag4(whole[:160], 0, True), _frag4(whole[160:], 160, False)]
    decoder = Decoder((), Defragmenter(timeout_ns=10_000))
    assert run(parts, decoder, step=20_000) == []
    assert decoder.defragmenter.stats["timed_out"] == 1
    decoder = Decoder((), Defragmenter(timeout_ns=10_000))
    assert [n for n, _ in run(parts, decoder, step=5_000)] == [2]


def test_caps_evict_the_oldest():
    decoder = Decoder((), Defragmenter(max_bytes=1000, max_packets=3))
    starts = [_frag4(_tcp_bytes(b"c" * 600)[:400], 0, True, ident=i) for i in range(5)]
    assert run(starts, decoder) == []
    d = decoder.defragmenter
    assert d.held <= 1000 and len(d.pending) <= 2 and d.stats["evicted"] == 3
    # a packet that was evicted no longer completes; the newest one still does
    tail = _tcp_bytes(b"c" * 600)[400:]
    got = run([_frag4(tail, 400, False, ident=0), _frag4(tail, 400, False, ident=4)], decoder)
    assert [seg.payload for _n, seg in got] == [b"c" * 600]


def test_snaplen_cut_fragment():
    """The last fragment cut by the snaplen: the packet completes on the wire lengths and
    says how many bytes the capture lost."""
    frames = frames_of(size=1400)
    cut = frames[:-1] + [frames[-1][:-100]]
    assert run(cut) == [(3, segment(payload=PAYLOAD[:-100], missing=100, frames=(1, 2, 3)))]
    # a middle fragment cut: the bytes after its cut are not delivered either
    cut = [frames[0], frames[1][:-50], frames[2]]
    got = run(cut)
    kept = len(frames[0]) - 14 - 20 - 20 + len(frames[1]) - 50 - 14 - 20
    assert got == [(3, segment(payload=PAYLOAD[:kept], missing=len(PAYLOAD) - kept,
                               frames=(1, 2, 3)))]


def test_without_a_defragmenter_fragments_are_counted():
    decoder = Decoder()
    frames = frames_of()
    assert [decoder.decode(1, f) for f in frames] == [None] * 3
    assert decoder.fragments == 3 and decoder.last_fragment in frames[2]
    assert all(decode_packet(1, f) is None for f in frames)


def _vxlan(inner: bytes, ident=1) -> bytes:
    return raw(Ether(**MACS) / IP(src="192.0.2.1", dst="192.0.2.2", id=ident, flags=0)
               / UDP(sport=40000, dport=4789) / VXLAN(vni=42) / Raw(inner))


def test_outer_fragments_of_a_tunnel():
    """VXLAN datagrams larger than the outer MTU, fragmented by the outer IPv4."""
    inner = raw(Ether(**MACS) / tcp_packet())
    outer = Ether(**MACS) / IP(src="192.0.2.1", dst="192.0.2.2", id=77, flags=0) \
        / UDP(sport=40000, dport=4789) / VXLAN(vni=42) / Raw(inner)
    frames = [raw(Ether(**MACS) / p) for p in fragment(outer[IP], 1480)]
    assert len(frames) == 3
    assert run(frames) == [(3, segment(tunnel="VXLAN vni 42 192.0.2.1→192.0.2.2",
                                       frames=(1, 2, 3)))]


def test_inner_fragments_inside_a_tunnel():
    """Each inner IPv6 fragment in its own VXLAN datagram."""
    inner = [raw(Ether(**MACS) / p) for p in fragment6(tcp_packet(True), 1448)]
    frames = [_vxlan(f, i) for i, f in enumerate(inner)]
    assert run(frames) == [(3, segment(True, tunnel="VXLAN vni 42 192.0.2.1→192.0.2.2",
                                       frames=(1, 2, 3)))]


def test_fragments_inside_fragments():
    """Inner IPv4 fragments, each in a VXLAN datagram that the outer IPv4 fragments too."""
    frames = []
    for i, part in enumerate(fragment(tcp_packet(), 2000)):
        outer = IP(src="192.0.2.1", dst="192.0.2.2", id=100 + i, flags=0) \
            / UDP(sport=40000, dport=4789) / VXLAN(vni=42) / Ether(**MACS) / part
        frames += [raw(Ether(**MACS) / p) for p in fragment(outer, 1200)]
    got = run(frames)
    assert got == [(len(frames), segment(tunnel="VXLAN vni 42 192.0.2.1→192.0.2.2",
                                         frames=tuple(range(1, len(frames) + 1))))]


def test_every_truncation_of_a_fragment_is_harmless():
    frames = frames_of(size=1400)
    for n in range(len(frames[0])):
        decoder = Decoder((), Defragmenter())
        got = run([frames[0][:n], frames[1], frames[2]], decoder)
        if got:
            (_n, seg), = got
            assert PAYLOAD.startswith(seg.payload) and seg.missing == len(PAYLOAD) - len(seg.payload)


def test_reassembled_result():
    d = Defragmenter()
    assert d.add(("k",), 8, False, b"b" * 8, 8, 17, (2,), 0) is None
    got = d.add(("k",), 0, True, b"a" * 8, 8, 6, (1,), 0)
    assert got == Reassembled(6, b"a" * 8 + b"b" * 8, 0, (1, 2))


def test_random_fragments_against_a_byte_model():
    """Random cuts, orders, repeats and overlapping fragments with other bytes: the packet
    is complete exactly when a byte-by-byte model (first byte written wins) is, and equal
    to it."""
    rng = random.Random(11)
    for _ in range(400):
        total = rng.randrange(8, 400)
        truth = rng.randbytes(total)
        cuts = sorted({0, total} | {rng.randrange(0, total, 8) for _ in range(rng.randrange(4))})
        frags = [(a, b) for a, b in zip(cuts, cuts[1:])]
        for _ in range(rng.randrange(3)):           # overlapping fragments, other bytes
            a = rng.randrange(0, total, 8)
            frags.append((a, min(total, a + rng.randrange(8, 80, 8))))
        rng.shuffle(frags)
        d = Defragmenter()
        model, filled, last_seen, got = bytearray(total), [False] * total, False, None
        for n, (a, b) in enumerate(frags, 1):
            data = truth[a:b] if rng.random() < 0.7 else rng.randbytes(b - a)
            for i in range(a, b):
                if not filled[i]:
                    model[i], filled[i] = data[i - a], True
            last_seen |= b == total
            got = d.add(("k",), a, b != total, data, b - a, 6, (n,), n)
            if all(filled) and last_seen:
                assert got is not None and got.data == bytes(model) and got.missing == 0
                break
            assert got is None
        else:
            assert not (all(filled) and last_seen)
