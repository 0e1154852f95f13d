"""Scapy's read()/iread(): what comes before a fault in the capture is kept (with a warning
naming the file and frame), iread() streams, and wrpcap() of read()'s packets is a valid
capture that tshark (with the Lua plugin) and read() decode into the same messages."""

from __future__ import annotations

import os
import struct
import subprocess
import threading
import warnings
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.packet import raw
from scapy.utils import wrpcap

from dcpdissect.capture.readers import CaptureError
from dcpdissect.samples.builder import all_specs, build
from dcpdissect.scapy import MCBP, CaptureWarning, iread, read

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
LUA = ROOT / "lua" / "dcpdissect.lua"
SPECS = {s.name: s for s in all_specs()}


def records(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every record of a little-endian classic pcap."""
    assert data[:4] == b"\xd4\xc3\xb2\xa1"
    out, pos = [], 24
    while pos < len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        out.append((pos, pos + 16 + incl))
        pos += 16 + incl
    return out


def complete_before(sample, frame: int) -> Counter:
    """The messages the builder wrote whose every frame precedes ``frame``."""
    return Counter(m.data for m in sample.messages if m.frames and max(m.frames) < frame)


def read_warned(path) -> tuple[list, list]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pkts = read(str(path))
    return pkts, [w for w in caught if issubclass(w.category, CaptureWarning)]


@pytest.mark.parametrize("name", ["clean-replication", "collections", "tcp-reorder"])
def test_cut_mid_frame_keeps_every_pdu_before_it_and_warns(tmp_path, name):
    sample = build(SPECS[name])
    data = (SAMPLES / sample.filename).read_bytes()
    recs = records(data)
    k = len(recs) // 2                           # cut inside record k (frame k + 1)
    start, end = recs[k]
    path = tmp_path / f"cut-{name}.pcap"
    path.write_bytes(data[:start + 16 + (end - start - 16) // 2])
    pkts, warned = read_warned(path)
    want = complete_before(sample, k + 1)
    assert sum(want.values()) > 0
    assert Counter(raw(p[MCBP]) for p in pkts) == want
    assert len(warned) == 1
    text = str(warned[0].message)
    assert text.startswith(f"{path}: frame {k + 1}: ") and "truncated" in text
    assert f"the {len(pkts)} PDUs before it were kept" in text


def test_garbage_record_header_keeps_every_pdu_before_it(tmp_path):
    sample = build(SPECS["clean-replication"])
    data = bytearray((SAMPLES / sample.filename).read_bytes())
    recs = records(bytes(data))
    k = 40
    struct.pack_into("<II", data, recs[k][0] + 8, 0x7FFFFFF0, 0x7FFFFFF0)   # absurd lengths
    path = tmp_path / "garbage.pcap"
    path.write_bytes(bytes(data))
    pkts, warned = read_warned(path)
    assert Counter(raw(p[MCBP]) for p in pkts) == complete_before(sample, k + 1)
    assert len(pkts) > 20 and len(warned) == 1
    assert str(warned[0].message).startswith(f"{path}: frame {k + 1}: ")


def test_a_file_that_is_no_capture_raises(tmp_path):
    text = tmp_path / "notes.pcap"
    text.write_text("not a capture at all\n" * 10)
    with pytest.raises(CaptureError):
        read(str(text))
    with pytest.raises(CaptureError):
        read(str(tmp_path / "missing.pcap"))


def test_iread_yields_before_the_file_is_complete(tmp_path):
    """A capture still being written (a FIFO): the first packet arrives while the second
    half of the file has not been written yet."""
    data = (SAMPLES / "clean-replication.pcap").read_bytes()
    fifo = tmp_path / "live.pcap"
    os.mkfifo(fifo)
    released = threading.Event()

    def writer():
        with open(fifo, "wb") as f:
            f.write(data[:len(data) // 2])
            f.flush()
            released.wait(20)
            f.write(data[len(data) // 2:])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        packets = iread(str(fifo))
        first = next(packets)
        early = not released.is_set()
    finally:
        released.set()
    rest = list(packets)
    thread.join()
    assert early
    assert [raw(p[MCBP]) for p in [first, *rest]] == [raw(p[MCBP]) for p in read(str(SAMPLES / "clean-replication.pcap"))]


def endpoints(pkt) -> tuple:
    ip = pkt[IP] if IP in pkt else pkt[IPv6]
    return ip.src, pkt[TCP].sport, ip.dst, pkt[TCP].dport


def by_direction(pkts) -> dict:
    """Endpoints -> the PDUs sent that way, in stream order."""
    out = defaultdict(list)
    for p in sorted(pkts, key=lambda p: p[TCP].seq):
        out[endpoints(p)].append(raw(p[MCBP]))
    return dict(out)


# MCBP on a port the plugin does not own by default
PORT_PREFS = {"ports-heuristic.pcap": ("-o", "dcp.tcp_ports:11210,11209,12000")}
WRITTEN = sorted(p.name for p in SAMPLES.iterdir() if p.is_file())


def tshark_view(path: Path, sample: str) -> tuple[int, int, list[str]]:
    """(MCBP messages the plugin shows, packets tshark calls malformed, other problems: Lua
    errors, stderr, exit status)."""
    proc = subprocess.run(["tshark", "-r", str(path), "-X", f"lua_script:{LUA}",
                           *PORT_PREFS.get(sample, ()), "-T", "fields", "-e", "dcp.magic",
                           "-e", "_ws.malformed", "-e", "_ws.lua.error"],
                          capture_output=True, text=True)
    problems = [line for line in proc.stderr.splitlines() if "dangerous" not in line]
    count = malformed = 0
    for line in proc.stdout.splitlines():
        magic, bad, lua_error = (line.split("\t") + ["", ""])[:3]
        count += len([m for m in magic.split(",") if m])
        malformed += bool(bad)
        if lua_error:
            problems.append(line)
    if proc.returncode:
        problems.append(f"tshark exit {proc.returncode}")
    return count, malformed, problems


@pytest.mark.tshark
@pytest.mark.slow
def test_wrpcap_of_read_is_a_valid_capture_of_the_same_messages(tmp_path):
    """Every sample: tshark shows as many messages as read() gave, no Lua error, and no
    malformed packet unless the sample's own messages are malformed on purpose (tshark
    says so of the original capture too); read() of the written file gives the same PDUs
    in each direction."""

    def check(name):
        pkts = read(str(SAMPLES / name))
        out = tmp_path / (name.replace(".", "_") + "-written.pcap")
        wrpcap(str(out), pkts)
        count, malformed, problems = tshark_view(out, name)
        if malformed and not tshark_view(SAMPLES / name, name)[1]:
            problems.append(f"{malformed} malformed packets")
        same = by_direction(read(str(out))) == by_direction(pkts)
        return name, len(pkts), count, problems, same

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(check, WRITTEN))
    assert len(results) >= 60
    bad = [r for r in results if not (r[1] == r[2] and not r[3] and r[4])]
    assert bad == []
    assert sum(r[1] for r in results) > 2000
