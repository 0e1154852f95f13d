"""Tests for dcpdissect.capture.readers (pcap / pcapng / gzip / stdin)."""

from __future__ import annotations

import gzip
import io
import os
import random
import struct
import subprocess
import sys
import zlib
from fractions import Fraction
from pathlib import Path

import dpkt
import pytest
from scapy.utils import RawPcapNgReader

from dcpdissect.capture import CaptureError, Frame, open_capture
from dcpdissect.capture.readers import NO_LINKTYPE
from dcpdissect.capture import readers

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------
# builders

def pcap_bytes(records, *, order="<", nano=False, linktype=1, snaplen=65535, network_hi=0):
    """records: iterable of (sec, frac, data[, wirelen])."""
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype | network_hi)]
    for rec in records:
        sec, frac, data = rec[:3]
        wirelen = rec[3] if len(rec) > 3 else len(data)
        out.append(struct.pack(order + "IIII", sec, frac, len(data), wirelen))
        out.append(data)
    return b"".join(out)


def _pad4(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def ng_block(order, btype, body):
    body = _pad4(body)
    total = len(body) + 12
    return struct.pack(order + "II", btype, total) + body + struct.pack(order + "I", total)


def ng_opt(order, code, value):
    return struct.pack(order + "HH", code, len(value)) + _pad4(value)


def ng_opts(order, opts):
    if not opts:
        return b""
    return b"".join(ng_opt(order, c, v) for c, v in opts) + struct.pack(order + "HH", 0, 0)


def ng_shb(order, opts=()):
    body = struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1) + ng_opts(order, opts)
    return ng_block(order, 0x0A0D0D0A, body)


def ng_idb(order, linktype, snaplen=0, tsresol=None, tsoffset=None, name=None):
    opts = []
    if name is not None:
        opts.append((2, name))
    if tsresol is not None:
        opts.append((9, bytes([tsresol])))
    if tsoffset is not None:
        opts.append((14, struct.pack(order + "q", tsoffset)))
    return ng_block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + ng_opts(order, opts))


def ng_epb(order, ifid, ts_units, data, wirelen=None, opts=()):
    wirelen = len(data) if wirelen is None else wirelen
    body = struct.pack(order + "IIIII", ifid, ts_units >> 32, ts_units & 0xFFFFFFFF, len(data), wirelen)
    return ng_block(order, 6, body + _pad4(data) + ng_opts(order, opts))


def ng_spb(order, data, wirelen=None):
    wirelen = len(data) if wirelen is None else wirelen
    return ng_block(order, 3, struct.pack(order + "I", wirelen) + data)


def ng_pb(order, ifid, ts_units, data, wirelen=None):
    wirelen = len(data) if wirelen is None else wirelen
    body = struct.pack(order + "HHIIII", ifid, 0, ts_units >> 32, ts_units & 0xFFFFFFFF, len(data), wirelen)
    return ng_block(order, 2, body + data)


def ng_nrb(order):
    rec = struct.pack(order + "HH", 1, 8) + bytes([10, 0, 0, 1]) + b"db1\0"
    return ng_block(order, 4, rec + struct.pack(order + "HH", 0, 0))


def ng_isb(order, ifid):
    return ng_block(order, 5, struct.pack(order + "III", ifid, 0, 0))


def ng_custom(order):
    return ng_block(order, 0x00000BAD, struct.pack(order + "I", 32473) + b"opaque custom data")


def ng_dsb(order):
    return ng_block(order, 0x0000000A, struct.pack(order + "II", 0x544C534B, 4) + b"keys")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def read_all(path):
    with open_capture(str(path)) as r:
        return list(r)


def read_until_error(path):
    """(frames yielded before the error, the CaptureError)."""
    got = []
    with pytest.raises(CaptureError) as ei:
        with open_capture(str(path)) as r:
            for f in r:
                got.append(f)
    return got, ei.value


def random_payloads(rng, count, lo=0, hi=200):
    return [rng.randbytes(rng.randint(lo, hi)) for _ in range(count)]


# --------------------------------------------------------------------------
# classic pcap

@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_orders_and_resolutions_against_dpkt(tmp_path, order, nano):
    rng = random.Random(1)
    payloads = random_payloads(rng, 50)
    recs = [(1_700_000_000 + i, (i * 123457) % (10**9 if nano else 10**6), d, len(d) + i)
            for i, d in enumerate(payloads)]
    p = tmp_path / "t.pcap"
    p.write_bytes(pcap_bytes(recs, order=order, nano=nano, linktype=113))
    frames = read_all(p)

    with open(p, "rb") as f:
        rd = dpkt.pcap.Reader(f)
        assert rd.datalink() == 113
        oracle = list(rd)
    assert len(frames) == len(oracle) == len(recs)
    for i, (fr, (ts, buf), rec) in enumerate(zip(frames, oracle, recs)):
        assert isinstance(fr, Frame)
        assert fr.number == i + 1
        assert fr.data == buf == rec[2]
        assert type(fr.data) is bytes
        assert fr.linktype == 113
        assert fr.interface == 0
        assert fr.wirelen == rec[3]
        mult = 1 if nano else 1000
        assert fr.ts_ns == rec[0] * 10**9 + rec[1] * mult
        assert abs(fr.ts_ns / 1e9 - float(ts)) < 1e-5


def test_pcap_written_by_dpkt(tmp_path):
    p = tmp_path / "w.pcap"
    pkts = [bytes([i]) * (i + 1) for i in range(30)]
    with open(p, "wb") as f:
        w = dpkt.pcap.Writer(f, linktype=101, nano=True)
        for i, d in enumerate(pkts):
            w.writepkt(d, ts=1_600_000_000 + i)
    frames = read_all(p)
    assert [f.data for f in frames] == pkts
    assert [f.ts_ns for f in frames] == [(1_600_000_000 + i) * 10**9 for i in range(30)]
    assert {f.linktype for f in frames} == {101}


def test_pcap_linktype_ignores_fcs_bits(tmp_path):
    p = tmp_path / "fcs.pcap"
    p.write_bytes(pcap_bytes([(1, 2, b"abc")], linktype=1, network_hi=0x10000000 | 0x04000000))
    (f,) = read_all(p)
    assert f.linktype == 1


def test_pcap_reader_attributes(tmp_path):
    raw = pcap_bytes([(1, 0, b"x" * 10), (2, 0, b"y" * 20)])
    p = tmp_path / "a.pcap"
    p.write_bytes(raw)
    with open_capture(str(p)) as r:
        assert r.format == "pcap"
        assert r.compressed is False
        assert r.size == len(raw)
        assert r.path == str(p)
        first = next(iter(r))
        assert r.bytes_read == 24 + 16 + 10
        rest = list(r)
        assert r.bytes_read == len(raw)
    assert first.number == 1 and [f.number for f in rest] == [2]


def test_pcap_empty_but_valid(tmp_path):
    p = tmp_path / "e.pcap"
    p.write_bytes(pcap_bytes([]))
    assert read_all(p) == []


def test_pcap_pathlike_accepted(tmp_path):
    p = tmp_path / "pl.pcap"
    p.write_bytes(pcap_bytes([(1, 0, b"q")]))
    with open_capture(p) as r:
        assert [f.data for f in r] == [b"q"]


def test_pcap_records_across_chunk_boundaries(tmp_path):
    """Records straddling read chunks, and one record bigger than a chunk."""
    rng = random.Random(7)
    payloads = random_payloads(rng, 3000, 0, 2000)
    big = rng.randbytes(readers.CHUNK * 2 + 12345)
    payloads.insert(1500, big)
    recs = [(i, i, d) for i, d in enumerate(payloads)]
    p = tmp_path / "big.pcap"
    p.write_bytes(pcap_bytes(recs, snaplen=1 << 22))
    frames = read_all(p)
    with open(p, "rb") as f:
        oracle = [buf for _, buf in dpkt.pcap.Reader(f)]
    assert len(frames) == len(oracle)
    assert all(a.data == b for a, b in zip(frames, oracle))
    assert frames[1500].data == big


# --------------------------------------------------------------------------
# pcapng

TSRES_US, TSRES_NS, TSRES_2_10, TSRES_MS = 6, 9, 0x8A, 3


def _section1_blocks(order="<"):
    """Three interfaces with different link types and resolutions, plus skipped blocks."""
    rng = random.Random(11)
    blocks = [
        ng_shb(order, opts=[(4, b"test-app")]),
        ng_idb(order, 1, 262144, name=b"eth0"),                 # default 10^-6
        ng_nrb(order),
        ng_idb(order, 101, 65535, tsresol=TSRES_NS),
        ng_idb(order, 113, 0, tsresol=TSRES_2_10, tsoffset=100),
        ng_custom(order),
    ]
    ts = {0: 1_700_000_000_123_456, 1: 1_700_000_000_987_654_321, 2: 1_700_000_000 * 1024 + 777}
    for i in range(12):
        ifid = i % 3
        d = rng.randbytes(rng.randint(0, 90))
        blocks.append(ng_epb(order, ifid, ts[ifid] + i, d, wirelen=len(d) + 3,
                             opts=[(1, b"comment")] if i == 4 else ()))
        if i == 5:
            blocks.append(ng_isb(order, 1))
            blocks.append(ng_dsb(order))
    return blocks


def _section1(order="<"):
    return b"".join(_section1_blocks(order))


def _section2_blocks(order=">"):
    rng = random.Random(12)
    blocks = [
        ng_shb(order),
        ng_idb(order, 228, 64, tsresol=TSRES_MS),
        ng_spb(order, rng.randbytes(40)),
        ng_spb(order, rng.randbytes(100), wirelen=100),      # snaplen 64 caps caplen
        ng_idb(order, 229, 0, tsresol=TSRES_NS),
        ng_epb(order, 1, 5_000_000_000_000_000_001, rng.randbytes(33)),
        ng_pb(order, 0, 1_700_000_000_456, rng.randbytes(20), wirelen=60),
        ng_epb(order, 0, 1_700_000_000_457, rng.randbytes(7)),
        ng_isb(order, 0),
    ]
    return blocks


def _section2(order=">"):
    return b"".join(_section2_blocks(order))


def _scapy_oracle(path):
    """Frames of a single-section pcapng file according to scapy."""
    out = []
    with RawPcapNgReader(str(path)) as rd:
        for data, meta in rd:
            if meta.tshigh is None:
                ts = 0
            else:
                units = (meta.tshigh << 32) | meta.tslow
                ts = int(Fraction(units * 10**9, meta.tsresol))
            out.append((data, meta.linktype, ts, meta.wirelen))
    return out


def _with_offset(oracle, offsets_by_linktype):
    return [(d, lt, ts + offsets_by_linktype.get(lt, 0) if ts else 0, wl) for d, lt, ts, wl in oracle]


@pytest.mark.parametrize("orders", [("<", ">"), (">", "<")])
def test_pcapng_sections_and_interfaces_against_scapy(tmp_path, orders):
    s1, s2 = _section1(orders[0]), _section2(orders[1])
    (tmp_path / "s1.pcapng").write_bytes(s1)
    (tmp_path / "s2.pcapng").write_bytes(s2)
    full = tmp_path / "full.pcapng"
    full.write_bytes(s1 + s2)

    # scapy knows nothing of if_tsoffset: add it to the LINKTYPE_LINUX_SLL interface by hand;
    # nor does it number the custom block as a frame, as tshark does (frame 1, no packet)
    expected = ([(b"", NO_LINKTYPE, 0, 0)]
                + _with_offset(_scapy_oracle(tmp_path / "s1.pcapng"), {113: 100 * 10**9})
                + _scapy_oracle(tmp_path / "s2.pcapng"))
    with open_capture(str(full)) as r:
        assert r.format == "pcapng" and not r.compressed
        frames = list(r)
        assert r.bytes_read == len(s1 + s2) == r.size
    got = [(f.data, f.linktype, f.ts_ns, f.wirelen) for f in frames]
    assert got == expected
    assert [f.number for f in frames] == list(range(1, len(frames) + 1))
    assert len(frames) == 1 + 12 + 5


def test_pcapng_exact_values(tmp_path):
    """Hand-computed timestamps / interfaces, independent of any oracle."""
    p = tmp_path / "x.pcapng"
    p.write_bytes(_section1("<") + _section2(">"))
    record, *f = read_all(p)
    assert (record.number, record.linktype, record.data, record.ts_ns) == (1, NO_LINKTYPE, b"", 0)
    # section 1: interface i % 3
    assert [x.interface for x in f[:12]] == [i % 3 for i in range(12)]
    assert [x.linktype for x in f[:12]] == [(1, 101, 113)[i % 3] for i in range(12)]
    assert f[0].ts_ns == 1_700_000_000_123_456 * 1000                          # 10^-6
    assert f[1].ts_ns == 1_700_000_000_987_654_321 + 1                          # 10^-9
    assert f[2].ts_ns == (1_700_000_000 + 100) * 10**9 + ((777 + 2) * 10**9) // 1024  # 2^-10 + offset
    assert f[3].ts_ns == (1_700_000_000_123_456 + 3) * 1000
    # section 2 (interface ids restart)
    spb1, spb2, epb_v6, pb, epb = f[12:]
    assert (spb1.linktype, spb1.interface, spb1.ts_ns, len(spb1.data), spb1.wirelen) == (228, 0, 0, 40, 40)
    assert (len(spb2.data), spb2.wirelen) == (64, 100)
    assert (epb_v6.linktype, epb_v6.interface, epb_v6.ts_ns) == (229, 1, 5_000_000_000_000_000_001)
    assert (pb.linktype, pb.interface, pb.ts_ns, len(pb.data), pb.wirelen) == (228, 0, 1_700_000_000_456_000_000, 20, 60)
    assert epb.ts_ns == 1_700_000_000_457_000_000
    assert [x.number for x in f] == list(range(2, 19))


def test_pcapng_spb_without_snaplen_uses_block_body(tmp_path):
    o = "<"
    data = bytes(range(50))
    p = tmp_path / "spb.pcapng"
    p.write_bytes(ng_shb(o) + ng_idb(o, 1, 0) + ng_spb(o, data, wirelen=200) + ng_spb(o, data[:10], wirelen=5))
    a, b = read_all(p)
    assert a.data == data + b"\0\0" and a.wirelen == 200        # padded body: min(wirelen, body)
    assert b.data == data[:5] and b.wirelen == 5


def test_pcapng_tsresol_variants(tmp_path):
    o = "<"
    res = [(0, 10**9), (3, 10**6), (6, 10**3), (9, 1), (12, Fraction(1, 1000)), (0x80, 10**9), (0x94, Fraction(10**9, 2**20))]
    blocks = [ng_shb(o)]
    for r, _ in res:
        blocks.append(ng_idb(o, 1, 0, tsresol=r))
    units = 123_456_789_012_345
    for i in range(len(res)):
        blocks.append(ng_epb(o, i, units, b"z"))
    p = tmp_path / "res.pcapng"
    p.write_bytes(b"".join(blocks))
    frames = read_all(p)
    assert [f.ts_ns for f in frames] == [int(units * Fraction(k)) for _, k in res]


def test_pcapng_written_by_dpkt(tmp_path):
    p = tmp_path / "d.pcapng"
    with open(p, "wb") as f:
        w = dpkt.pcapng.Writer(f, linktype=1)
        for i in range(20):
            w.writepkt(b"pkt%d" % i, ts=1_650_000_000 + i / 4)
    frames = read_all(p)
    with open(p, "rb") as f:
        oracle = list(dpkt.pcapng.Reader(f))
    assert [x.data for x in frames] == [b for _, b in oracle]
    assert [round(x.ts_ns / 1e9, 6) for x in frames] == [round(t, 6) for t, _ in oracle]


def test_pcapng_isb_and_unknown_only(tmp_path):
    o = ">"
    p = tmp_path / "n.pcapng"
    p.write_bytes(ng_shb(o) + ng_idb(o, 1) + ng_isb(o, 0) + ng_custom(o) + ng_nrb(o))
    assert [(f.number, f.linktype, f.data) for f in read_all(p)] == [(1, NO_LINKTYPE, b"")]


# --------------------------------------------------------------------------
# gzip and stdin

@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_gzip_detected_by_magic(tmp_path, kind):
    raw = (pcap_bytes([(i, i, bytes([i]) * i) for i in range(100)]) if kind == "pcap"
           else _section1() + _section2())
    plain = tmp_path / "plain"
    plain.write_bytes(raw)
    gz = tmp_path / "capture.bin"          # name says nothing about compression
    gz.write_bytes(gzip.compress(raw))
    with open_capture(str(gz)) as r:
        assert r.compressed is True and r.format == kind and r.size is None
        frames = list(r)
        assert r.bytes_read == len(raw)
    assert frames == read_all(plain)


def test_gzip_multi_member(tmp_path):
    raw = pcap_bytes([(i, 0, b"m" * i) for i in range(40)])
    p = tmp_path / "mm.gz"
    p.write_bytes(gzip.compress(raw[:500]) + gzip.compress(raw[500:]))
    assert [f.data for f in read_all(p)] == [b"m" * i for i in range(40)]


def test_gzip_truncated_keeps_earlier_frames(tmp_path):
    rng = random.Random(3)
    raw = pcap_bytes([(i, 0, rng.randbytes(300)) for i in range(2000)])
    comp = gzip.compress(raw)
    p = tmp_path / "cut.pcap.gz"
    p.write_bytes(comp[: len(comp) // 2])
    got, err = read_until_error(p)
    assert 0 < len(got) < 2000
    assert err.frame == len(got) + 1
    assert "truncated" in err.reason
    full = read_all_bytes(raw, tmp_path)
    assert got == full[: len(got)]


def read_all_bytes(raw, tmp_path):
    p = tmp_path / "ref.pcap"
    p.write_bytes(raw)
    return read_all(p)


def test_gzip_corrupt(tmp_path):
    raw = pcap_bytes([(i, 0, bytes(200)) for i in range(50)])
    comp = bytearray(gzip.compress(raw))
    comp[-6] ^= 0xFF                     # break CRC / size trailer
    p = tmp_path / "bad.gz"
    p.write_bytes(bytes(comp))
    got, err = read_until_error(p)
    assert "gzip" in err.reason
    assert err.frame == len(got) + 1
    assert "gzip" in str(err)


def test_gzip_garbage_after_magic(tmp_path):
    p = tmp_path / "g.gz"
    p.write_bytes(b"\x1f\x8b" + b"\x00" * 30)
    with pytest.raises(CaptureError) as ei:
        with open_capture(str(p)) as r:
            list(r)
    assert "gzip" in ei.value.reason


def test_gzip_of_empty(tmp_path):
    p = tmp_path / "e.gz"
    p.write_bytes(gzip.compress(b""))
    with pytest.raises(CaptureError) as ei:
        open_capture(str(p))
    assert "0 bytes" in ei.value.reason


_STDIN_SCRIPT = (
    "import sys, json\n"
    "from dcpdissect.capture import open_capture, CaptureError\n"
    "out = []\n"
    "try:\n"
    "    with open_capture('-') as r:\n"
    "        for f in r:\n"
    "            out.append([f.number, f.ts_ns, f.linktype, f.data.hex(), f.wirelen, f.interface])\n"
    "        fmt = [r.format, r.compressed, r.size, r.bytes_read]\n"
    "    print(json.dumps({'frames': out, 'fmt': fmt}))\n"
    "except CaptureError as e:\n"
    "    print(json.dumps({'frames': out, 'error': [e.frame, e.reason, str(e)]}))\n"
)


def _run_stdin(data: bytes):
    import json
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cp = subprocess.run([sys.executable, "-c", _STDIN_SCRIPT], input=data, capture_output=True,
                        env=env, timeout=120, check=True)
    return json.loads(cp.stdout)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_stdin_subprocess(tmp_path, compress, kind):
    raw = (pcap_bytes([(i, i, bytes([i % 256]) * (i % 70)) for i in range(300)], order=">", nano=True)
           if kind == "pcap" else _section1() + _section2())
    p = tmp_path / "ref"
    p.write_bytes(raw)
    expected = [[f.number, f.ts_ns, f.linktype, f.data.hex(), f.wirelen, f.interface] for f in read_all(p)]
    res = _run_stdin(gzip.compress(raw) if compress else raw)
    assert res["frames"] == expected
    assert res["fmt"] == [kind, compress, None, len(raw)]


def test_stdin_subprocess_errors():
    res = _run_stdin(b"")
    assert res["error"][0] is None and "empty" in res["error"][1]
    assert res["error"][2].startswith("-: ")
    raw = pcap_bytes([(1, 0, b"abc"), (2, 0, b"defg")])
    res = _run_stdin(raw[:-2])
    assert len(res["frames"]) == 1
    assert res["error"][:2] == [2, "file cut mid-record (frame 2: record data truncated, got 2 of 4 bytes)"]


class _Pipe(io.RawIOBase):
    """Non-seekable stream returning at most ``step`` bytes per read."""

    def __init__(self, data: bytes, step: int):
        self._data = data
        self._pos = 0
        self._step = step

    def readable(self):
        return True

    def seekable(self):
        return False

    def seek(self, *a):
        raise io.UnsupportedOperation("not seekable")

    def tell(self):
        raise io.UnsupportedOperation("not seekable")

    def readinto(self, b):
        n = min(len(b), self._step, len(self._data) - self._pos)
        b[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


class _FakeStdin:
    def __init__(self, data, step):
        self.buffer = io.BufferedReader(_Pipe(data, step), buffer_size=7)


@pytest.mark.parametrize("step", [1, 3, 4096])
@pytest.mark.parametrize("compress", [False, True])
def test_stdin_monkeypatched_pipe(tmp_path, monkeypatch, step, compress):
    raw = _section2("<") + _section1(">")
    p = tmp_path / "ref"
    p.write_bytes(raw)
    expected = read_all(p)
    feed = gzip.compress(raw) if compress else raw
    monkeypatch.setattr(sys, "stdin", _FakeStdin(feed, step))
    with open_capture("-") as r:
        assert r.path == "-" and r.size is None and r.compressed is compress
        assert list(r) == expected


def test_stdin_raw_stream_without_read1(monkeypatch):
    """A stdin whose buffer only offers read()."""

    class Only:
        def __init__(self, data):
            self._b = io.BytesIO(data)

        def read(self, n=-1):
            return self._b.read(min(n, 5) if n and n > 0 else n)

    class S:
        def __init__(self, data):
            self.buffer = Only(data)

    raw = pcap_bytes([(i, 0, b"s" * i) for i in range(10)])
    monkeypatch.setattr(sys, "stdin", S(gzip.compress(raw)))
    with open_capture("-") as r:
        assert [f.data for f in r] == [b"s" * i for i in range(10)]


# --------------------------------------------------------------------------
# bad input

def test_missing_file(tmp_path):
    with pytest.raises(CaptureError) as ei:
        open_capture(str(tmp_path / "nope.pcap"))
    e = ei.value
    assert e.frame is None and e.reason == "no such file"
    assert str(e) == f"{tmp_path / 'nope.pcap'}: no such file"


def test_directory(tmp_path):
    with pytest.raises(CaptureError) as ei:
        open_capture(str(tmp_path))
    assert ei.value.frame is None and "directory" in ei.value.reason


@pytest.mark.parametrize("exc, reason", [
    (PermissionError(13, "Permission denied"), "permission denied"),
    (IsADirectoryError(21, "Is a directory"), "is a directory"),
    (OSError(5, "Input/output error"), "cannot open (Input/output error)"),
])
def test_open_failures_mapped(tmp_path, monkeypatch, exc, reason):
    def fail(*a, **k):
        raise exc

    monkeypatch.setattr(io, "open", fail)
    with pytest.raises(CaptureError) as ei:
        open_capture(str(tmp_path / "f.pcap"))
    assert ei.value.frame is None and ei.value.reason == reason


def test_read_error_mid_file(tmp_path, monkeypatch):
    """An OSError from the stream during iteration becomes a CaptureError after earlier frames."""
    raw = pcap_bytes([(i, 0, b"e" * 100) for i in range(5)])

    class Flaky(io.RawIOBase):
        def __init__(self):
            self._b = io.BytesIO(raw[:300])

        def readable(self):
            return True

        def readinto(self, b):
            n = self._b.readinto(b)
            if n == 0:
                raise OSError(5, "Input/output error")
            return n

    class S:
        buffer = io.BufferedReader(Flaky(), buffer_size=64)

    monkeypatch.setattr(sys, "stdin", S())
    got = []
    with pytest.raises(CaptureError) as ei:
        for f in open_capture("-"):
            got.append(f)
    assert len(got) == 2 and ei.value.frame == 3
    assert ei.value.reason == "read error (Input/output error)"


def test_empty_file(tmp_path):
    p = tmp_path / "zero.pcap"
    p.write_bytes(b"")
    with pytest.raises(CaptureError) as ei:
        open_capture(str(p))
    assert ei.value.reason == "empty file (0 bytes)" and ei.value.frame is None


@pytest.mark.parametrize("content", [b"hello world, not a capture", b"\x00\x01", b"GET / HTTP/1.1\r\n"])
def test_not_a_capture(tmp_path, content):
    p = tmp_path / "x.txt"
    p.write_bytes(content)
    with pytest.raises(CaptureError) as ei:
        open_capture(str(p))
    assert ei.value.reason == f"not a pcap or pcapng file (starts with {content[:4].hex()})"
    assert ei.value.frame is None


@pytest.mark.parametrize("cut", [2, 4, 10, 23])
def test_pcap_cut_in_global_header(tmp_path, cut):
    p = tmp_path / "g.pcap"
    p.write_bytes(pcap_bytes([(1, 0, b"abc")])[:cut])
    with pytest.raises(CaptureError) as ei:
        with open_capture(str(p)) as r:
            list(r)
    assert ei.value.reason == f"file cut mid-record (global header truncated, got {cut} of 24 bytes)"


def _three_records():
    return pcap_bytes([(1, 0, b"a" * 10), (2, 0, b"b" * 20), (3, 0, b"c" * 30)])


def test_pcap_cut_in_record_header(tmp_path):
    raw = _three_records()
    p = tmp_path / "h.pcap"
    p.write_bytes(raw[: 24 + 26 + 36 + 7])
    got, e = read_until_error(p)
    assert [f.data for f in got] == [b"a" * 10, b"b" * 20]
    assert e.frame == 3
    assert e.reason == "file cut mid-record (frame 3: record header truncated, got 7 of 16 bytes)"
    assert str(e) == f"{p}: frame 3: {e.reason}"


@pytest.mark.parametrize("got_bytes", [0, 1, 29])
def test_pcap_cut_in_record_body(tmp_path, got_bytes):
    raw = _three_records()
    p = tmp_path / "b.pcap"
    p.write_bytes(raw[: 24 + 26 + 36 + 16 + got_bytes])
    got, e = read_until_error(p)
    assert len(got) == 2 and got[1].data == b"b" * 20
    assert e.frame == 3
    assert e.reason == f"file cut mid-record (frame 3: record data truncated, got {got_bytes} of 30 bytes)"


def test_pcap_cut_in_body_across_chunk(tmp_path):
    """The cut is found after a refill, not inside the first buffer."""
    rng = random.Random(5)
    recs = [(i, 0, rng.randbytes(1000)) for i in range(2000)]
    raw = pcap_bytes(recs)
    p = tmp_path / "c.pcap"
    p.write_bytes(raw[:-500])
    got, e = read_until_error(p)
    assert len(got) == 1999 and e.frame == 2000
    assert "record data truncated, got 500 of 1000 bytes" in e.reason


@pytest.mark.parametrize("caplen", [0x10000001, 0xFFFFFFFF, 300000])
def test_pcap_absurd_caplen(tmp_path, caplen):
    raw = pcap_bytes([(1, 0, b"ok")])
    raw += struct.pack("<IIII", 2, 0, caplen, 60) + b"x" * 64
    p = tmp_path / "abs.pcap"
    p.write_bytes(raw)
    got, e = read_until_error(p)
    assert len(got) == 1 and e.frame == 2
    assert e.reason == f"record captured length {caplen} is absurd"


def test_pcap_caplen_over_default_limit_but_within_snaplen(tmp_path):
    data = b"j" * 300000
    p = tmp_path / "j.pcap"
    p.write_bytes(pcap_bytes([(1, 0, data, 10)], snaplen=400000))
    (f,) = read_all(p)
    assert f.data == data and f.wirelen == 10       # wirelen < caplen tolerated


def _ng_ok(o="<"):
    return ng_shb(o) + ng_idb(o, 1) + ng_epb(o, 0, 1, b"first") + ng_epb(o, 0, 2, b"second")


def _ng_error(tmp_path, raw):
    p = tmp_path / "bad.pcapng"
    p.write_bytes(raw)
    return read_until_error(p)


@pytest.mark.parametrize("o", ["<", ">"])
def test_pcapng_undefined_interface(tmp_path, o):
    got, e = _ng_error(tmp_path, _ng_ok(o) + ng_epb(o, 3, 3, b"third"))
    assert [f.data for f in got] == [b"first", b"second"]
    assert e.frame == 3 and "undefined interface 3" in e.reason


def test_pcapng_interfaces_reset_per_section(tmp_path):
    o = "<"
    raw = (ng_shb(o) + ng_idb(o, 1) + ng_idb(o, 101) + ng_epb(o, 1, 1, b"a")
           + ng_shb(o) + ng_idb(o, 1) + ng_epb(o, 1, 1, b"b"))
    got, e = _ng_error(tmp_path, raw)
    assert len(got) == 1 and e.frame == 2 and "undefined interface 1" in e.reason


def test_pcapng_spb_without_interface(tmp_path):
    o = "<"
    got, e = _ng_error(tmp_path, ng_shb(o) + ng_spb(o, b"x"))
    assert got == [] and e.frame == 1 and "interface" in e.reason


@pytest.mark.parametrize("bad_len", [13, 14, 8, 0, 10])
def test_pcapng_bad_block_length(tmp_path, bad_len):
    o = "<"
    raw = _ng_ok(o) + struct.pack(o + "II", 6, bad_len) + b"\0" * 40
    got, e = _ng_error(tmp_path, raw)
    assert len(got) == 2 and e.frame == 3
    assert e.reason.startswith(f"block total length {bad_len} is invalid")


def test_pcapng_absurd_block_length(tmp_path):
    o = ">"
    raw = _ng_ok(o) + struct.pack(o + "II", 6, 0x7FFFFFFC) + b"\0" * 40
    got, e = _ng_error(tmp_path, raw)
    assert len(got) == 2 and e.frame == 3 and "absurd" in e.reason


def test_pcapng_trailer_mismatch(tmp_path):
    o = "<"
    blk = bytearray(ng_epb(o, 0, 3, b"third"))
    blk[-4:] = struct.pack(o + "I", len(blk) + 4)
    got, e = _ng_error(tmp_path, _ng_ok(o) + bytes(blk))
    assert len(got) == 2 and e.frame == 3
    assert "trailing length" in e.reason


@pytest.mark.parametrize("cut", [1, 8, 11, 12, 20, 40])
def test_pcapng_cut_block(tmp_path, cut):
    o = "<"
    blk = ng_epb(o, 0, 3, b"third packet")
    got, e = _ng_error(tmp_path, _ng_ok(o) + blk[:cut])
    assert len(got) == 2 and e.frame == 3
    what = "record header" if cut < 12 else "record data"
    want = 12 if cut < 12 else len(blk)
    assert e.reason == f"file cut mid-record (frame 3: {what} truncated, got {cut} of {want} bytes)"


def test_pcapng_caplen_beyond_block(tmp_path):
    o = "<"
    blk = bytearray(ng_epb(o, 0, 3, b"abcd"))
    struct.pack_into(o + "I", blk, 20, 5000)
    got, e = _ng_error(tmp_path, _ng_ok(o) + bytes(blk))
    assert len(got) == 2 and e.frame == 3 and "5000" in e.reason


def test_pcapng_bad_byte_order_magic(tmp_path):
    o = "<"
    shb = bytearray(ng_shb(o))
    shb[8:12] = b"\xde\xad\xbe\xef"
    got, e = _ng_error(tmp_path, _ng_ok(o) + bytes(shb))
    assert len(got) == 2 and e.frame == 3 and "byte-order magic" in e.reason


def test_pcapng_unsupported_version(tmp_path):
    o = "<"
    shb = bytearray(ng_shb(o))
    struct.pack_into(o + "H", shb, 12, 2)
    got, e = _ng_error(tmp_path, bytes(shb) + ng_idb(o, 1))
    assert got == [] and e.frame == 1 and "version 2" in e.reason


def test_pcapng_short_epb(tmp_path):
    o = "<"
    got, e = _ng_error(tmp_path, _ng_ok(o) + ng_block(o, 6, b"\0" * 8))
    assert len(got) == 2 and e.frame == 3 and "too short" in e.reason


def test_capture_error_str_and_pickle():
    import pickle

    e = CaptureError("f.pcap", 7, "boom")
    assert str(e) == "f.pcap: frame 7: boom"
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.path, e2.frame, e2.reason) == ("f.pcap", 7, "boom")
    assert str(CaptureError("f.pcap", None, "bad")) == "f.pcap: bad"


# pcapng blocks that tshark numbers as frames: packet blocks and the custom block
FRAME_BLOCKS = {2, 3, 6, 0x00000BAD}


def _pcapng_ends(*sections) -> tuple[list[int], set[int]]:
    """(file offset where each frame's block ends, offsets where any block ends) of the
    sections ``(byte order, blocks)`` written one after the other."""
    frame_ends, block_ends, pos = [], set(), 0
    for order, blocks in sections:
        for block in blocks:
            pos += len(block)
            block_ends.add(pos)
            if struct.unpack_from(order + "I", block)[0] in FRAME_BLOCKS:
                frame_ends.append(pos)
    return frame_ends, block_ends


def _pcap_ends(payloads) -> tuple[list[int], set[int]]:
    ends, pos = [], 24
    for data in payloads:
        pos += 16 + len(data)
        ends.append(pos)
    return ends, {24, *ends}


def test_random_truncations_yield_the_whole_frames_then_name_the_cut(tmp_path):
    """A prefix of a capture (raw or gzip-compressed) yields exactly the frames whose
    records lie wholly in it, equal to the first frames of the whole file; a prefix that
    ends inside a record (or inside the compressed stream) raises a CaptureError naming
    the file and the frame being read (none in the pcap file header); one that ends
    between records reads cleanly."""
    payloads = [b"r" * i for i in range(30)]
    captures = [(_section1() + _section2(), 0,
                 _pcapng_ends(("<", _section1_blocks()), (">", _section2_blocks()))),
                (pcap_bytes([(i, 0, d) for i, d in enumerate(payloads)]), 24, _pcap_ends(payloads))]
    rng = random.Random(99)
    p = tmp_path / "t"
    for raw, file_header, (frame_ends, block_ends) in captures:
        whole = read_all(_write(p, raw))
        assert len(whole) == len(frame_ends)
        for comp in (False, True):
            blob = gzip.compress(raw) if comp else raw
            for cut in sorted(rng.sample(range(1, len(blob)), 40)) + [len(blob)]:
                # the bytes a prefix holds, as zlib (not the reader) decompresses them
                held = len(zlib.decompressobj(wbits=31).decompress(blob[:cut])) if comp else cut
                count = sum(1 for end in frame_ends if end <= held)
                got, error = [], None
                try:
                    with open_capture(str(_write(p, blob[:cut]))) as reader:
                        got.extend(reader)
                except CaptureError as exc:
                    error = exc
                assert got == whole[:count], (comp, cut)
                cut_between = held in block_ends and not (comp and cut < len(blob))
                if cut_between:
                    assert error is None, (comp, cut, str(error))
                else:
                    assert error is not None and error.path == str(p), (comp, cut)
                    frame = None if held < file_header else count + 1
                    assert error.frame == frame and str(p) in str(error), (comp, cut, str(error))


def test_no_raw_exceptions_on_random_corruption(tmp_path):
    rng = random.Random(1234)
    base = _section1() + _section2()
    for _ in range(200):
        raw = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        p = tmp_path / "c"
        p.write_bytes(bytes(raw))
        try:
            with open_capture(str(p)) as r:
                for f in r:
                    assert isinstance(f, Frame)
        except CaptureError as e:
            assert e.path == str(p)
