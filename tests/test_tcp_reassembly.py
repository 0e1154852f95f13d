"""Tests for TCP reassembly (dcpdissect.reassembly.tcp / .connections)."""

from __future__ import annotations

import random
from typing import NamedTuple

import pytest
from hypothesis import given, settings, strategies as st

from dcpdissect.reassembly.connections import (
    ConnectionClosed, ConnectionOpened, ConnectionTable, StreamData, StreamGap, TcpAnomaly,
)
from dcpdissect.reassembly.tcp import LOST, UNCAPTURED, DirectionReassembler, seq_diff, seq_lt

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
M = 0xFFFFFFFF


class Seg(NamedTuple):
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes
    missing: int = 0
    tunnel: str = ""


C = ("10.0.0.1", 50000)
S = ("10.0.0.2", 11210)


class Flow:
    """Builds segments of one connection; c2s/s2c take relative stream offsets."""

    def __init__(self, cisn=1000, sisn=5000, client=C, server=S):
        self.cisn, self.sisn, self.client, self.server = cisn, sisn, client, server

    def c(self, seq, payload=b"", flags=ACK, ack=0, missing=0):
        return Seg(self.client[0], self.server[0], self.client[1], self.server[1],
                   seq & M, ack & M, flags, payload, missing)

    def s(self, seq, payload=b"", flags=ACK, ack=0, missing=0):
        return Seg(self.server[0], self.client[0], self.server[1], self.client[1],
                   seq & M, ack & M, flags, payload, missing)

    def syn(self):
        return self.c(self.cisn, flags=SYN)

    def synack(self):
        return self.s(self.sisn, flags=SYN | ACK, ack=self.cisn + 1)

    def c2s(self, off, payload=b"", flags=ACK, **kw):
        return self.c(self.cisn + 1 + off, payload, flags, self.sisn + 1, **kw)

    def s2c(self, off, payload=b"", flags=ACK, **kw):
        return self.s(self.sisn + 1 + off, payload, flags, self.cisn + 1, **kw)


def run(segs, table=None, ts_step=1000, close=True):
    t = table or ConnectionTable()
    ev = []
    for i, seg in enumerate(segs, 1):
        ev.extend(t.feed(i, i * ts_step, seg))
    if close:
        ev.extend(t.close())
    return t, ev


def stream(ev, conn=1, direction=0, gap_fill=None):
    """Reassembled bytes; checks offsets are contiguous."""
    out = bytearray()
    for e in ev:
        if getattr(e, "conn", None) != conn or getattr(e, "direction", None) != direction:
            continue
        if isinstance(e, StreamData):
            assert e.offset == len(out), (e, len(out))
            out += e.data
        elif isinstance(e, StreamGap):
            assert e.offset == len(out) + e.length
            if gap_fill is None:
                raise AssertionError(f"unexpected gap {e}")
            out += gap_fill * e.length
    return bytes(out)


def of(ev, cls):
    return [e for e in ev if isinstance(e, cls)]


def chunks(data, sizes):
    out, off = [], 0
    for n in sizes:
        if off >= len(data):
            break
        out.append((off, data[off:off + n]))
        off += n
    if off < len(data):
        out.append((off, data[off:]))
    return out


# -- serial arithmetic ------------------------------------------------------

def test_serial_arithmetic():
    assert seq_lt(M, 0)
    assert seq_lt(0xFFFFFF00, 0x10)
    assert not seq_lt(0x10, 0xFFFFFF00)
    assert not seq_lt(5, 5)
    assert seq_diff(0x10, 0xFFFFFFF0) == 0x20
    assert seq_diff(0xFFFFFFF0, 0x10) == -0x20


# -- basic delivery ---------------------------------------------------------

def test_in_order():
    f = Flow()
    t, ev = run([f.syn(), f.synack(), f.c2s(0, b"", ACK), f.c2s(0, b"hello "),
                 f.c2s(6, b"world"), f.s2c(0, b"reply")])
    opened = of(ev, ConnectionOpened)
    assert opened == [ConnectionOpened(1, C, S, 1, 1000, False)]
    assert ev[0] == opened[0]
    assert stream(ev, 1, 0) == b"hello world"
    assert stream(ev, 1, 1) == b"reply"
    assert of(ev, ConnectionClosed) == [ConnectionClosed(1, None, None, "end")]
    assert t.stats["gaps"] == 0 and t.stats["retransmissions"] == 0
    assert t.stats["connections"] == 1 and t.stats["segments"] == 6


def test_many_pdus():
    rnd = random.Random(1)
    data = rnd.randbytes(200_000)
    sizes = [rnd.randint(1, 3000) for _ in range(400)]
    f = Flow()
    segs = [f.syn(), f.synack()] + [f.c2s(o, p) for o, p in chunks(data, sizes)]
    t, ev = run(segs)
    assert stream(ev) == data
    assert t.stats["out_of_order"] == 0


def test_provenance():
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"aa"), f.c2s(4, b"cc"), f.c2s(2, b"bb"), f.c2s(6, b"dd")]
    _, ev = run(segs)
    got = [(e.offset, e.data, e.frame, e.ts_ns) for e in of(ev, StreamData)]
    assert got == [(0, b"aa", 2, 2000), (2, b"bb", 4, 4000), (4, b"cc", 3, 3000),
                   (6, b"dd", 5, 5000)]


def test_both_directions_independent():
    f = Flow()
    segs = [f.syn(), f.synack(),
            f.c2s(3, b"DEF"), f.s2c(0, b"abc"), f.c2s(0, b"ABC"), f.s2c(6, b"ghi"),
            f.s2c(3, b"def")]
    t, ev = run(segs)
    assert stream(ev, 1, 0) == b"ABCDEF"
    assert stream(ev, 1, 1) == b"abcdefghi"
    assert t.stats["out_of_order"] == 2


# -- reordering, retransmission, overlap ------------------------------------

def test_out_of_order_swap():
    f = Flow()
    _, ev = run([f.syn(), f.c2s(3, b"def"), f.c2s(0, b"abc"), f.c2s(6, b"g")])
    assert stream(ev) == b"abcdefg"


def test_out_of_order_reversed_window():
    data = bytes(range(256)) * 4
    f = Flow()
    parts = chunks(data, [100] * 20)
    segs = [f.syn()] + [f.c2s(o, p) for o, p in parts[:2]]
    segs += [f.c2s(o, p) for o, p in reversed(parts[2:8])]
    segs += [f.c2s(o, p) for o, p in parts[8:]]
    t, ev = run(segs, close=False)
    assert stream(ev) == data            # delivered before close
    assert t.stats["out_of_order"] == 5


def test_exact_retransmission():
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"abc"), f.c2s(3, b"def"), f.c2s(0, b"abc"), f.c2s(6, b"ghi")]
    t, ev = run(segs)
    assert stream(ev) == b"abcdefghi"
    assert t.stats["retransmissions"] == 1
    assert not of(ev, TcpAnomaly)


def test_duplicate_segments():
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"abc"), f.c2s(0, b"abc"), f.c2s(3, b"def"), f.c2s(3, b"def"),
            f.c2s(9, b"jkl"), f.c2s(9, b"jkl"), f.c2s(6, b"ghi")]
    t, ev = run(segs)
    assert stream(ev) == b"abcdefghijkl"
    assert t.stats["duplicates"] == 3
    assert t.stats["retransmissions"] == 0


def test_partial_overlap_same_bytes():
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"abcd"), f.c2s(2, b"cdefgh"), f.c2s(8, b"ij")]
    t, ev = run(segs)
    assert stream(ev) == b"abcdefghij"
    data = of(ev, StreamData)
    assert (data[1].offset, data[1].data, data[1].frame) == (4, b"efgh", 3)
    assert not of(ev, TcpAnomaly)
    assert t.stats["retransmissions"] == 1


def test_partial_overlap_different_bytes_delivered():
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"abcd"), f.c2s(2, b"XYefgh")]
    t, ev = run(segs)
    assert stream(ev) == b"abcdefgh"
    an = of(ev, TcpAnomaly)
    assert len(an) == 1 and an[0].kind == "overlap_mismatch" and an[0].frame == 3
    assert t.stats["overlaps_mismatched"] == 1


def test_partial_overlap_different_bytes_buffered():
    f = Flow()
    # buffered [4,8) first, then a segment covering [2,10) with different bytes in [4,8)
    segs = [f.syn(), f.c2s(0, b"ab"), f.c2s(4, b"efgh"), f.c2s(2, b"cdEFGHij")]
    t, ev = run(segs)
    assert stream(ev) == b"abcdefghij"
    assert [e.kind for e in of(ev, TcpAnomaly)] == ["overlap_mismatch"]
    frames = [(e.offset, e.frame) for e in of(ev, StreamData)]
    assert frames == [(0, 2), (2, 4), (4, 3), (8, 4)]


def test_overlap_beyond_tail_window_not_compared():
    r = DirectionReassembler(1, 0, tail_window=16)
    f = Flow()
    r.feed(1, 0, f.syn())
    for i in range(10):
        r.feed(2 + i, 0, f.c2s(i * 10, bytes([65 + i]) * 10))
    assert r.feed(20, 0, f.c2s(0, b"Z" * 10)) == ()       # too old: not compared
    ev = r.feed(21, 0, f.c2s(90, b"Z" * 10))               # recent: compared
    assert [e.kind for e in ev] == ["overlap_mismatch"]


# -- losses and truncation --------------------------------------------------

def test_loss_gap_at_close():
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"abc"), f.c2s(10, b"klm"), f.c2s(13, b"nop")]
    t, ev = run(segs, close=False)
    assert stream(ev) == b"abc"
    ev += t.close()
    gaps = of(ev, StreamGap)
    assert gaps == [StreamGap(1, 0, 10, 7, 3, 3000)]
    assert stream(ev, gap_fill=b"?") == b"abc" + b"?" * 7 + b"klmnop"
    assert t.stats["gaps"] == 1 and t.stats["gap_bytes"] == 7


def test_truncated_segment_then_more_data():
    f = Flow()
    # segment [3, 103) captured with only 20 bytes: the other 80 are not captured, not lost,
    # and take their place in the stream at once (the IP length says how many they are)
    segs = [f.syn(), f.c2s(0, b"abc"), f.c2s(3, b"x" * 20, missing=80),
            f.c2s(103, b"next")]
    t, ev = run(segs, close=False)
    gaps = of(ev, StreamGap)
    assert gaps == [StreamGap(1, 0, 103, 80, 3, 3000, UNCAPTURED)]
    assert stream(ev, gap_fill=b"?") == b"abc" + b"x" * 20 + b"?" * 80 + b"next"
    assert t.stats["gaps"] == 0 and t.stats["uncaptured_bytes"] == 80
    assert t.stats["cut_segments"] == 1


def test_truncated_out_of_order():
    f = Flow()
    segs = [f.syn(), f.c2s(10, b"y" * 5, missing=35), f.c2s(50, b"z"), f.c2s(0, b"a" * 10)]
    _, ev = run(segs, close=False)
    assert of(ev, StreamGap) == [StreamGap(1, 0, 50, 35, 2, 2000, UNCAPTURED)]
    assert stream(ev, gap_fill=b"?") == b"a" * 10 + b"y" * 5 + b"?" * 35 + b"z"


def test_truncated_segments_back_to_back_then_loss():
    """Header-only capture: every segment cut; one segment lost between two cut ones is a
    lost gap of its whole on-wire length, told apart from the uncaptured bytes."""
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"h1", missing=98), f.c2s(100, b"h2", missing=98),
            f.c2s(300, b"h4", missing=98)]
    t, ev = run(segs, close=False)
    assert of(ev, StreamGap) == [
        StreamGap(1, 0, 100, 98, 2, 2000, UNCAPTURED),
        StreamGap(1, 0, 200, 98, 3, 3000, UNCAPTURED),
        StreamGap(1, 0, 300, 100, 4, 4000, LOST),
        StreamGap(1, 0, 400, 98, 4, 4000, UNCAPTURED)][:2]
    assert t.stats["gaps"] == 0            # the lost segment is still awaited (out of order)
    _, ev = run(segs, close=True)
    assert of(ev, StreamGap) == [
        StreamGap(1, 0, 100, 98, 2, 2000, UNCAPTURED),
        StreamGap(1, 0, 200, 98, 3, 3000, UNCAPTURED),
        StreamGap(1, 0, 300, 100, 4, 4000, LOST),
        StreamGap(1, 0, 400, 98, 4, 4000, UNCAPTURED)]


def test_truncated_duplicate_and_retransmission():
    """The same cut segment twice (tcpdump -i any) is a duplicate; a retransmission of the
    cut bytes neither mismatches nor delivers them again; a FIN counts the on-wire length."""
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"ab", missing=8), f.c2s(0, b"ab", missing=8),
            f.c2s(0, b"abcdefghij"), f.c2s(10, b"k", FIN | ACK, missing=4),
            f.s2c(0, b"", FIN | ACK)]
    t, ev = run(segs, close=False)
    assert stream(ev, gap_fill=b"?") == b"ab" + b"?" * 8 + b"k" + b"?" * 4
    assert t.stats["duplicates"] == 1 and t.stats["overlaps_mismatched"] == 0
    assert of(ev, ConnectionClosed) == [ConnectionClosed(1, 6, 6000, "fin", (0, 5, 5000))]


def test_fin_with_hole_waits_for_retransmission():
    f = Flow()
    segs = [f.syn(), f.synack(), f.c2s(0, b"abc"), f.c2s(6, b"ghi", FIN | ACK),
            f.s2c(0, b"", FIN | ACK), f.c2s(3, b"def")]
    t, ev = run(segs, close=False)
    assert stream(ev) == b"abcdefghi"
    # the client's FIN (frame 4) came first: the client closed
    assert of(ev, ConnectionClosed) == [ConnectionClosed(1, 6, 6000, "fin", (0, 4, 4000))]
    assert t.stats["gaps"] == 0 and t.open_connections == 0


def test_fin_with_hole_lost_after_linger():
    f = Flow()
    t = ConnectionTable(fin_linger_ns=10_000)
    segs = [f.syn(), f.synack(), f.c2s(0, b"abc"), f.c2s(6, b"ghi", FIN | ACK),
            f.s2c(0, b"", FIN | ACK)]
    _, ev = run(segs, table=t, close=False)
    assert not of(ev, ConnectionClosed)
    other = Flow(client=("10.0.0.9", 40000))
    ev += t.feed(100, 10**9, other.c2s(0, b"zz"))
    assert of(ev, StreamGap) == [StreamGap(1, 0, 6, 3, 4, 4000)]
    assert of(ev, ConnectionClosed) == [ConnectionClosed(1, 5, 5000, "fin", (0, 4, 4000))]
    assert stream(ev, gap_fill=b"?") == b"abc???ghi"
    assert isinstance(ev[-1], StreamData) and ev[-1].conn == 2


def test_fin_tail_hole():
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"abc"), f.c2s(10, b"", FIN | ACK)]
    _, ev = run(segs)
    assert of(ev, StreamGap) == [StreamGap(1, 0, 10, 7, 3, 3000)]


# -- sequence wrap, ISN, mid-stream ----------------------------------------

@pytest.mark.parametrize("with_syn", [True, False])
def test_wraparound(with_syn):
    rnd = random.Random(7)
    data = rnd.randbytes(5000)
    f = Flow(cisn=(M - 2000) if with_syn else (M - 2001))
    parts = chunks(data, [700] * 10)
    segs = ([f.syn()] if with_syn else []) + [f.c2s(o, p) for o, p in parts]
    segs[3], segs[4] = segs[4], segs[3]
    segs.append(f.c2s(*parts[2]))                      # retransmission across the wrap
    t, ev = run(segs)
    assert stream(ev) == data
    assert of(ev, ConnectionOpened)[0].mid_stream is (not with_syn)
    assert t.stats["gaps"] == 0 and t.stats["retransmissions"] == 1


def test_mid_stream_start():
    f = Flow()
    segs = [f.c2s(500, b"", ACK), f.c2s(500, b"middle"), f.s2c(77, b"resp"),
            f.c2s(506, b"more")]
    t, ev = run(segs)
    o = of(ev, ConnectionOpened)
    assert o == [ConnectionOpened(1, C, S, 2, 2000, True)]
    assert stream(ev, 1, 0) == b"middlemore"
    assert stream(ev, 1, 1) == b"resp"
    assert t.stats["ignored_segments"] == 1


def test_syn_with_data():
    f = Flow()
    segs = [f.c(f.cisn, b"tfo", SYN), f.synack(), f.c2s(3, b"rest")]
    _, ev = run(segs)
    assert stream(ev) == b"tforest"


def test_synack_first_infers_client_isn():
    f = Flow()
    segs = [f.synack(), f.c2s(0, b"abc"), f.s2c(0, b"xyz")]
    _, ev = run(segs)
    assert of(ev, ConnectionOpened)[0].client == C
    assert of(ev, ConnectionOpened)[0].mid_stream is False
    assert stream(ev, 1, 0) == b"abc" and stream(ev, 1, 1) == b"xyz"


def test_keepalive_and_window_probes():
    f = Flow()
    segs = [f.syn(), f.synack(), f.c2s(0, b"abc"),
            f.c2s(2, b"\x00"),              # keep-alive: 1 garbage byte at seq-1
            f.c2s(2, b""),                  # keep-alive: 0 bytes at seq-1
            f.c2s(3, b""),                  # pure ACK
            f.c2s(3, b"d"),                 # zero-window probe
            f.c2s(3, b"d"),                 # repeated probe
            f.c2s(3, b"defg")]              # data including the probe byte
    t, ev = run(segs)
    assert stream(ev) == b"abcdefg"
    assert not of(ev, TcpAnomaly) and not of(ev, StreamGap)


# -- connection lifecycle ---------------------------------------------------

def test_fin_then_new_syn_same_tuple():
    f = Flow()
    g = Flow(cisn=777777, sisn=999)
    segs = [f.syn(), f.synack(), f.c2s(0, b"one"),
            f.c2s(3, b"", FIN | ACK), f.s2c(0, b"", FIN | ACK), f.c2s(4, b"", ACK),
            f.c2s(3, b"", FIN | ACK),        # retransmitted FIN: ignored
            f.syn(),                        # retransmitted old SYN: ignored
            f.c2s(0, b"one"),               # late retransmission: ignored
            g.syn(), g.synack(), g.c2s(0, b"two")]
    t, ev = run(segs)
    assert [e.conn for e in of(ev, ConnectionOpened)] == [1, 2]
    closed = of(ev, ConnectionClosed)
    assert closed == [ConnectionClosed(1, 5, 5000, "fin", (0, 4, 4000)),
                      ConnectionClosed(2, None, None, "end")]
    assert ev.index(closed[0]) < ev.index(of(ev, ConnectionOpened)[1])
    assert stream(ev, 1) == b"one" and stream(ev, 2) == b"two"
    assert t.stats["ignored_segments"] == 4


def test_syn_new_isn_on_open_tuple_reuses():
    f = Flow()
    g = Flow(cisn=424242)
    segs = [f.syn(), f.c2s(0, b"old"), f.syn(), g.syn(), g.c2s(0, b"new")]
    _, ev = run(segs)
    assert [e.conn for e in of(ev, ConnectionOpened)] == [1, 2]
    assert of(ev, ConnectionClosed)[0] == ConnectionClosed(1, 4, 4000, "reused")
    assert stream(ev, 1) == b"old" and stream(ev, 2) == b"new"


def test_rst():
    f = Flow()
    segs = [f.syn(), f.synack(), f.c2s(0, b"abc"), f.c2s(6, b"ghi"),
            f.s2c(0, b"", RST | ACK), f.s2c(0, b"", RST | ACK), f.c2s(9, b"late")]
    t, ev = run(segs)
    assert of(ev, StreamGap) == [StreamGap(1, 0, 6, 3, 4, 4000)]
    # the server's RST: the server closed
    assert of(ev, ConnectionClosed) == [ConnectionClosed(1, 5, 5000, "rst", (1, 5, 5000))]
    assert isinstance(ev[-1], ConnectionClosed)
    assert len(of(ev, ConnectionOpened)) == 1
    assert t.stats["ignored_segments"] == 2


def test_ooo_cap_overflow():
    t = ConnectionTable(max_ooo_segments=4)
    f = Flow()
    segs = [f.syn(), f.c2s(0, b"aa")] + [f.c2s(4 + 2 * i, b"%02d" % i) for i in range(5)]
    _, ev = run(segs, table=t, close=False)
    an = of(ev, TcpAnomaly)
    assert [a.kind for a in an] == ["ooo_cap"] and an[0].frame == 7
    assert of(ev, StreamGap) == [StreamGap(1, 0, 4, 2, 3, 3000)]
    assert stream(ev, gap_fill=b"?") == b"aa??0001020304"
    assert t.stats["ooo_cap_hits"] == 1


def test_ooo_byte_cap_overflow():
    t = ConnectionTable(max_ooo_bytes=10)
    f = Flow()
    segs = [f.syn(), f.c2s(10, b"x" * 6), f.c2s(20, b"y" * 6)]
    _, ev = run(segs, table=t, close=False)
    assert [a.kind for a in of(ev, TcpAnomaly)] == ["ooo_cap"]
    # only the first hole is declared lost: the rest fits in the buffer again
    assert stream(ev, gap_fill=b"?") == b"?" * 10 + b"x" * 6
    assert t.stats["gaps"] == 1
    ev += t.close()
    assert stream(ev, gap_fill=b"?") == b"?" * 10 + b"x" * 6 + b"?" * 4 + b"y" * 6


def test_connection_cap_eviction():
    t = ConnectionTable(max_connections=2)
    flows = [Flow(client=("10.0.0.1", 40000 + i)) for i in range(3)]
    segs = [flows[0].c2s(0, b"a"), flows[1].c2s(0, b"b"), flows[0].c2s(1, b"c"),
            flows[2].c2s(0, b"d")]
    _, ev = run(segs, table=t, close=False)
    an = of(ev, TcpAnomaly)
    assert len(an) == 1 and an[0].kind == "connection_cap" and an[0].conn == 2
    assert of(ev, ConnectionClosed) == [ConnectionClosed(2, 4, 4000, "evicted")]
    assert t.open_connections == 2
    ev += t.feed(5, 5000, flows[1].c2s(1, b"e"))     # evicted conn reappears as new
    assert of(ev, ConnectionOpened)[-1].conn == 4
    assert of(ev, ConnectionClosed)[-1].conn == 1    # LRU is now conn 1


def test_retransmitted_handshake_single_connection():
    f = Flow()
    segs = [f.syn(), f.syn(), f.synack(), f.synack(), f.c2s(0, b"abc"), f.syn(),
            f.s2c(0, b"xy")]
    t, ev = run(segs)
    assert len(of(ev, ConnectionOpened)) == 1
    assert stream(ev, 1, 0) == b"abc" and stream(ev, 1, 1) == b"xy"
    assert t.stats["connections"] == 1


def test_tail_window_bounded():
    r = DirectionReassembler(tail_window=1000)
    f = Flow()
    r.feed(0, 0, f.syn())
    for i in range(1000):
        r.feed(i, 0, f.c2s(i * 100, b"z" * 100))
    assert 1000 <= r._tail_bytes <= 1350
    assert sum(len(e.data) for e in r._tail) == r._tail_bytes


# -- which connections are tracked ------------------------------------------

def test_port_filtering_and_tls():
    t = ConnectionTable()
    web = Flow(server=("10.0.0.2", 80))
    tls = Flow(server=("10.0.0.2", 11207))
    tls2 = Flow(client=("10.0.0.3", 1234), server=("10.0.0.2", 11207))
    segs = [web.syn(), web.c2s(0, b"GET"), tls.syn(), tls.synack(), tls.c2s(0, b"hello"),
            tls.syn(), tls2.c2s(0, b"data"), tls2.s2c(0, b"data")]
    _, ev = run(segs, table=t)
    assert ev == []
    assert t.stats["tls_connections"] == 2
    assert t.stats["ignored_segments"] == len(segs)


def test_any_port_orientation():
    t = ConnectionTable(any_port=True)
    a = Flow(client=("1.1.1.1", 2000), server=("2.2.2.2", 80))
    b = Flow(client=("1.1.1.1", 3000), server=("2.2.2.2", 443))
    segs = [a.s2c(0, b"mid"), b.syn()]
    _, ev = run(segs, table=t)
    o = of(ev, ConnectionOpened)
    assert (o[0].client, o[0].server) == (("1.1.1.1", 2000), ("2.2.2.2", 80))
    assert (o[1].client, o[1].server) == (("1.1.1.1", 3000), ("2.2.2.2", 443))
    assert stream(ev, 1, 1) == b"mid"


def test_both_ports_server_ports():
    # SYN decides; otherwise the lower port is the server
    a = Flow(client=("1.1.1.1", 11210), server=("2.2.2.2", 11209))
    _, ev = run([a.syn()])
    assert of(ev, ConnectionOpened)[0].server == ("2.2.2.2", 11209)
    _, ev = run([a.c2s(0, b"x")])
    assert of(ev, ConnectionOpened)[0].server == ("2.2.2.2", 11209)
    b = Flow(client=("1.1.1.1", 11209), server=("2.2.2.2", 11210))
    _, ev = run([b.c2s(0, b"x")])
    assert of(ev, ConnectionOpened)[0].server == ("1.1.1.1", 11209)
    assert stream(ev, 1, 1) == b"x"


def test_client_on_server_port_direction():
    f = Flow()
    _, ev = run([f.s2c(0, b"first from server"), f.c2s(0, b"q")])
    o = of(ev, ConnectionOpened)[0]
    assert (o.client, o.server, o.mid_stream) == (C, S, True)
    assert stream(ev, 1, 1) == b"first from server" and stream(ev, 1, 0) == b"q"


# -- property and performance ----------------------------------------------

@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=3000),
       isn=st.integers(min_value=0, max_value=M),
       cuts=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=60),
       rnd=st.randoms(use_true_random=False),
       with_syn=st.booleans())
def test_property_permuted_duplicated_segments(data, isn, cuts, rnd, with_syn):
    f = Flow(cisn=isn)
    parts = chunks(data, cuts)
    segs = [f.c2s(o, p) for o, p in parts]
    # random overlapping re-segmentations of already-covered ranges
    for _ in range(rnd.randint(0, 5)):
        a = rnd.randrange(len(data))
        b = rnd.randint(a + 1, min(len(data), a + 500))
        segs.append(f.c2s(a, data[a:b]))
    segs += [rnd.choice(segs) for _ in range(rnd.randint(0, 5))]
    if with_syn:
        rnd.shuffle(segs)
        order = [f.syn()] + segs
    else:
        rest = segs[1:]
        rnd.shuffle(rest)
        order = segs[:1] + rest           # mid-stream: the stream starts at the first segment
    t, ev = run(order)
    assert stream(ev) == data
    assert t.stats["gaps"] == 0 and t.stats["overlaps_mismatched"] == 0
    assert not of(ev, TcpAnomaly)


def test_direction_property_reverse_everything():
    r = DirectionReassembler()
    f = Flow()
    r.feed(0, 0, f.syn())
    data = bytes(range(256)) * 40
    ev = []
    for o, p in reversed(chunks(data, [37] * 300)):
        ev += r.feed(1, 0, f.c2s(o, p))
    assert b"".join(e.data for e in ev) == data
    assert r.buffered == 0 and r.buffered_bytes == 0


def test_performance_in_order_100k():
    f = Flow()
    t = ConnectionTable()
    payload = b"x" * 1448
    t.feed(0, 0, f.syn())
    feed = t.feed
    n = 0
    seq0 = f.cisn + 1
    for i in range(100_000):
        seg = Seg(C[0], S[0], C[1], S[1], (seq0 + i * 1448) & M, 0, ACK, payload)
        for e in feed(i + 1, i, seg):
            n += len(e.data)
    assert n == 100_000 * 1448
    assert t.stats["segments"] == 100_001


def test_an_ack_past_a_hole_declares_it_lost_at_once():
    """Later bytes wait for a hole; the other end's ACK past it shows the capture lost it:
    the gap comes at the ACK's frame, not at the connection's end."""
    f = Flow()
    segs = [f.syn(), f.synack(), f.c2s(0, b"abc"), f.c2s(6, b"ghi"),
            f.s(f.sisn + 1, b"", ACK, ack=f.cisn + 1 + 9)]
    _, ev = run(segs, close=False)
    assert of(ev, StreamGap) == [StreamGap(1, 0, 6, 3, 4, 4000, LOST)]
    assert stream(ev, gap_fill=b"?") == b"abc???ghi"


def test_data_that_comes_after_its_ack_is_kept():
    """An ACK beyond everything captured only notes it (the segment may follow in the file);
    bytes never seen are lost when the stream ends."""
    f = Flow()
    segs = [f.syn(), f.synack(), f.c2s(0, b"abc"), f.s(f.sisn + 1, b"", ACK, ack=f.cisn + 1 + 6),
            f.c2s(3, b"def")]
    _, ev = run(segs, close=False)
    assert stream(ev) == b"abcdef" and not of(ev, StreamGap)
    segs = segs[:-1]
    _, ev = run(segs, close=True)
    assert of(ev, StreamGap) == [StreamGap(1, 0, 6, 3, 4, 4000, LOST)]
