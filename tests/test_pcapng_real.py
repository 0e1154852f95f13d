"""pcapng as Wireshark's tools write it (samples/pcapng, see dcpdissect.samples.pcapng_capture):
decryption secrets blocks written by editcap, files of several sections and interfaces
(dumpcap, mergecap, cat, and hand-built blocks for what the tools cannot write: FCS,
big-endian sections, binary time resolutions), and dumpcap's blocks out of time order.
Frame numbers and times are tshark's; the out-of-order capture must give what its
reordercap copy gives, and would not without the time order."""

import importlib.util
import json
import re
import shutil
import subprocess
import warnings
from collections import Counter
from pathlib import Path

import pytest

from dcpdissect.analysis.engine import Analyzer
from dcpdissect.analysis.run import analyze_file
from dcpdissect.capture.order import FRAME_BYTES, TimeKeys, TimeOrder
from dcpdissect.capture.packets import decode_packet
from dcpdissect.capture.pcapwrite import PcapngWriter
from dcpdissect.capture.readers import NO_LINKTYPE, Frame, open_capture
from dcpdissect.cli import main
from dcpdissect.pipeline import core
from dcpdissect.reassembly.pdus import (ConnectionClosed, ConnectionOpened, Options, Pdu,
                                        PduStream, iter_events)

ROOT = Path(__file__).resolve().parent.parent
NG = ROOT / "samples" / "pcapng"
TLS = ROOT / "samples" / "tls"
TWO, REORDERED = NG / "two-interfaces.pcapng", NG / "two-interfaces-reordered.pcapng"
MERGED, SECTIONS, VARIANTS = NG / "merged.pcapng", NG / "sections.pcapng", NG / "variants.pcapng"
RESUME, RESUME_KEYS = TLS / "tls13-resume-collapsed.pcap", TLS / "tls13-resume-collapsed.keylog"
PROBLEMS, PROBLEM_KEYS = TLS / "tls-problems.pcap", TLS / "tls-problems.keylog"
INJECTED = {"tls13-resume-collapsed-dsb.pcapng": (RESUME, RESUME_KEYS),
            "tls-problems-dsb.pcapng": (PROBLEMS, PROBLEM_KEYS)}


def section_orders(path) -> list[str]:
    """The byte order of each section header of a file."""
    shb = rb"\x0a\x0d\x0d\x0a.{4}(\x4d\x3c\x2b\x1a|\x1a\x2b\x3c\x4d)"
    return ["<" if m.group(1)[0] == 0x4D else ">"
            for m in re.finditer(shb, Path(path).read_bytes(), re.S)]


def frames(path) -> list[Frame]:
    with open_capture(str(path)) as reader:
        return list(reader)


def tshark(path, *fields, extra=()) -> list[list[str]]:
    out = subprocess.run(["tshark", "-r", str(path), *extra, "-T", "fields",
                          *(a for f in fields for a in ("-e", f))],
                         capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def findings(path, options=None) -> list[tuple]:
    found, _summary = analyze_file(str(path), options)
    return [(f.rule, f.frame, f.connection, f.vbucket, f.message) for f in found]


def by_time(path) -> dict[int, int]:
    """frame number -> its timestamp."""
    return {f.number: f.ts_ns for f in frames(path)}


def stream_view(path, options=None, frame_key=None) -> list[tuple]:
    """Every event of ``iter_events`` as plain values, frames mapped by ``frame_key``."""
    key = frame_key or (lambda n: n)
    out = []
    for ev in iter_events(str(path), options):
        kind = type(ev)
        if kind is Pdu:
            out.append(("pdu", ev.conn, ev.direction, ev.offset, ev.data,
                        tuple(key(n) for n in ev.frames)))
        elif kind is ConnectionOpened:
            out.append(("opened", ev.conn, ev.client, ev.server, key(ev.frame)))
        elif kind is ConnectionClosed:
            out.append(("closed", ev.conn, ev.reason, key(ev.frame)))
    return out


def file_order_findings(path) -> list[tuple]:
    """The findings of the frames fed to reassembly as the file holds them (no time order)."""
    stream, analyzer, found = PduStream(), Analyzer(), []
    with open_capture(str(path)) as reader:
        for ev in stream.feed_frames(reader):
            found += analyzer.feed(ev)
    for ev in stream.finish():
        found += analyzer.feed(ev)
    return sorted((f.rule, f.frame, f.connection) for f in found + analyzer.finish())


# -- frames as tshark numbers and times them --------------------------------------------------

@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.parametrize("name", sorted(p.name for p in NG.glob("*.pcapng")))
def test_frame_numbers_times_and_tcp_lengths_are_tsharks(name):
    want = tshark(NG / name, "frame.number", "frame.time_epoch", "tcp.len")
    got = []
    for f in frames(NG / name):
        seg = decode_packet(f.linktype, f.data)
        got.append([str(f.number), f"{f.ts_ns // 10**9}.{f.ts_ns % 10**9:09d}" if f.ts_ns else "",
                    "" if seg is None else str(len(seg.payload))])
    assert got == want


def test_the_samples_hold_what_they_say():
    two = frames(TWO)
    assert [f.ts_ns for f in two] != sorted(f.ts_ns for f in two)      # dumpcap's order
    assert {f.interface for f in two} == {0, 1}
    reordered = frames(REORDERED)
    assert [f.ts_ns for f in reordered] == sorted(f.ts_ns for f in reordered)
    assert sorted((f.ts_ns, f.data) for f in two) == [(f.ts_ns, f.data) for f in reordered]
    assert section_orders(SECTIONS) == ["<", "<"]
    assert section_orders(VARIANTS) == ["<", ">"]
    assert [f.number for f in frames(VARIANTS) if f.linktype == NO_LINKTYPE] == [7]
    assert {f.linktype for f in frames(VARIANTS)} == {NO_LINKTYPE, 1, 113}


# -- time order ---------------------------------------------------------------------------------

def test_out_of_order_capture_gives_what_reordercap_gives():
    """The same events (frames mapped to the reordered file's by their times) and
    findings; every frame keeps its own number."""
    times, reordered = by_time(TWO), {ts: n for n, ts in by_time(REORDERED).items()}
    assert stream_view(TWO, frame_key=lambda n: reordered[times[n]]) == stream_view(REORDERED)
    assert findings(TWO) == findings(REORDERED) == []


def test_without_the_time_order_the_same_capture_gives_false_findings():
    assert file_order_findings(REORDERED) == []
    # in file order answers are read before their requests, buffer acks before the data
    # they acknowledge, and holes wait for data that already came
    got = file_order_findings(TWO)
    assert [f for f in got if f[0] not in ("capture-gap", "semantics-suppressed")] == [
        ("buffer-ack-exceeds-sent", 21, 1), ("response-without-request", 44, 2),
        ("response-without-request", 45, 2), ("response-without-request", 57, 2)]


@pytest.mark.tshark
def test_messages_are_those_tshark_decodes_in_the_reordered_copy():
    """tshark's own reassembly needs reordercap's copy; ours reads dumpcap's file as is."""
    times, reordered = by_time(TWO), {ts: n for n, ts in by_time(REORDERED).items()}
    rows = tshark(REORDERED, "frame.number", "couchbase.opcode",
                  extra=("-d", "tcp.port==11210,couchbase", "-Y", "couchbase"))
    want = Counter((int(n), int(op, 16)) for n, ops in rows for op in ops.split(","))
    ours = Counter((reordered[times[ev.frame]], ev.data[1]) for ev in iter_events(str(TWO))
                   if type(ev) is Pdu)
    assert ours == want and sum(ours.values()) == 45
    assert len(tshark(TWO, "couchbase.opcode", extra=("-d", "tcp.port==11210,couchbase",
                                                      "-Y", "couchbase"))) < 45


def test_sections_and_merges_give_the_same_stream():
    """cat of two dumpcap files (two sections, out of order), mergecap's merge and the
    hand-built variant: the same messages, connections and findings."""
    ref = [ev[:-1] for ev in stream_view(MERGED)]
    for path in (SECTIONS, VARIANTS):
        assert [ev[:-1] for ev in stream_view(path)] == ref, path
    times, merged = by_time(SECTIONS), {ts: n for n, ts in by_time(MERGED).items()}
    assert stream_view(SECTIONS, frame_key=lambda n: merged[times[n]]) == stream_view(MERGED)
    assert findings(SECTIONS) == findings(MERGED) == findings(VARIANTS) == []
    assert file_order_findings(SECTIONS) != []


def test_late_frame_is_processed_and_reported_once(tmp_path, capsys):
    """A frame read after frames more than the window newer: processed where it was read,
    counted, and one info line says by how much."""
    src = frames(MERGED)
    shift = 3_000_000_000
    conn2 = next(i for i, f in enumerate(src) if f.ts_ns - src[0].ts_ns > 400_000_000
                 and decode_packet(f.linktype, f.data).flags & 0x02)      # second SYN
    late = conn2 - 1                                    # the first connection's last frame
    order = [f for i, f in enumerate(src) if i != late] + [src[late]]
    path = tmp_path / "late.pcapng"
    with open(path, "wb") as fh:
        out = PcapngWriter(fh)
        for i in range(2):
            out.add_interface(1, tsresol=9)
        for f in order:
            moved = f.ts_ns + shift if src.index(f) >= conn2 else f.ts_ns
            out.write(f.interface, moved, f.data, f.wirelen)
    rc, _out, err = run(capsys, "analyze", path, "--fail-on", "never")
    lines = [line for line in err.splitlines() if "time-order window" in line]
    behind = (src[-1].ts_ns + shift - src[late].ts_ns) / 1e9
    assert lines == [f"dcpdissect: info: {path}: 1 frame came later than the time-order window "
                     f"(2 s) allows, up to {behind:.6f} s out of order; each was processed "
                     "as soon as it was read"]
    assert rc == 0
    # the late frame (the first connection's last ACK, the file's last) leaves as soon as
    # it is read, before the frames still in the window, with its own number; the findings
    # are those of the capture in order (none)
    read = frames(path)
    newest = max(f.ts_ns for f in read)
    out = [f.number for f in TimeOrder(read)]
    assert out.index(len(src)) == sum(f.ts_ns <= newest - 2_000_000_000 for f in read[:-1])
    assert findings(path) == findings(MERGED) == []


def test_window_is_bounded_in_frames_and_time():
    """Frames leave once a block's worth of newer frames or the window's time passed:
    never more than two blocks are held; equal times keep file order."""
    block = 5
    src = [Frame(n, 1_000 + (n * 7919) % 13, 1, b"x", 1, 0) for n in range(1, 200)]
    held, out = [], []

    def reading():
        for f in src:
            held.append(f.number - 1 - len(out))        # read before f and not out yet
            yield f

    for f in TimeOrder(reading(), window_ns=10**9, block_bytes=block * (1 + FRAME_BYTES)):
        out.append(f)
    assert max(held) <= 2 * block
    assert sorted(f.number for f in out) == [f.number for f in src]
    keys = TimeKeys(window_ns=10**9, block_bytes=block * (1 + FRAME_BYTES))
    ranked = sorted(src, key=lambda f: (keys.key(f.ts_ns, 1), f.number))
    assert out == ranked
    same = [f.number for f in TimeOrder([Frame(n, 7 if n % 2 else 9, 1, b"", 0, 0)
                                         for n in range(1, 9)])]
    assert same == [1, 3, 5, 7, 2, 4, 6, 8]             # equal times keep file order
    # by time alone: with a 3-unit window a frame 12 units behind is late, not held
    assert [f.number for f in TimeOrder([Frame(1, 100, 1, b"", 0, 0), Frame(2, 120, 1, b"", 0, 0),
                                         Frame(3, 108, 1, b"", 0, 0), Frame(4, 119, 1, b"", 0, 0)],
                                        window_ns=3)] == [1, 3, 4, 2]


@pytest.mark.parametrize("chunk_size,block", [(1 << 30, None), (3000, 4), (1, 1)])
def test_pipeline_groups_follow_the_time_order(chunk_size, block):
    for path in (TWO, SECTIONS, VARIANTS):
        got = core.run_local([str(path)], chunk_size=chunk_size, block_frames=block,
                             keep_events=True)[str(path)]
        ref = list(iter_events(str(path)))
        assert got.events == ref, path
        found, summary = analyze_file(str(path))
        assert got.findings == found and got.summary == summary


def test_front_ends_read_the_out_of_order_capture_in_time_order(capsys):
    from dcpdissect.scapy import read
    want = [ev.data for ev in iter_events(str(REORDERED)) if type(ev) is Pdu]
    assert [bytes(p["MCBP"]) for p in read(str(TWO))] == want
    for cmd in ("dissect", "streams"):
        rc, out, _err = run(capsys, cmd, TWO, "--format", "jsonl")
        rc2, out2, _err2 = run(capsys, cmd, REORDERED, "--format", "jsonl")
        assert rc == rc2 == 0
        rows = [json.loads(line) for line in out.splitlines()]
        rows2 = [json.loads(line) for line in out2.splitlines()]
        assert len(rows) == len(rows2) and rows
        if cmd == "dissect":
            assert [r["opcode"] for r in rows] == [r["opcode"] for r in rows2]


# -- Ethernet FCS ---------------------------------------------------------------------------------

def test_fcs_is_not_payload():
    """variants.pcapng ends frames of its second interface (section 1: if_fcslen; section
    2: epb_flags) in an FCS. Where the IP length bounds the payload the FCS would be a
    trailer anyway; where it is 0 (offload) it would become 4 bytes of TCP payload."""
    raw = VARIANTS.read_bytes()
    checked = {"bounded": 0, "unbounded": 0}
    for f in frames(VARIANTS):
        if f.linktype == NO_LINKTYPE or f.interface != 1:
            continue
        at = raw.index(f.data)
        stored = raw[at:at + len(f.data) + 4]             # the frame as the block holds it
        whole, ours = decode_packet(1, stored), decode_packet(1, f.data)
        if stored[16:18] == b"\0\0":                     # IP total length 0
            assert whole.payload == ours.payload + stored[-4:]
            checked["unbounded"] += 1
        else:
            assert whole.payload == ours.payload
            checked["bounded"] += 1
    assert checked["unbounded"] == 1 and checked["bounded"] > 20


# -- decryption secrets blocks ------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(INJECTED))
def test_injected_secrets_give_the_key_logs_findings(name, capsys):
    original, keys = INJECTED[name]
    rc, out, err = run(capsys, "analyze", NG / name, "--format", "jsonl", "--fail-on", "never")
    rc2, out2, err2 = run(capsys, "analyze", original, "--format", "jsonl", "--fail-on", "never",
                          "--tls-keylog", keys)
    assert rc == rc2 == 0 and out == out2 and "opened with the key log" in err
    # merged with a given key log (here the same lines): the same again
    rc3, out3, _ = run(capsys, "analyze", NG / name, "--format", "jsonl", "--fail-on", "never",
                       "--tls-keylog", keys)
    assert out3 == out
    for cmd in ("dissect", "streams"):
        _rc, got, _err = run(capsys, cmd, NG / name, "--format", "jsonl")
        _rc, want, _err = run(capsys, cmd, original, "--format", "jsonl", "--tls-keylog", keys)
        assert got == want and got, cmd


def test_unknown_secrets_type_is_said_once(capsys):
    _rc, _out, err = run(capsys, "analyze", NG / "tls-problems-dsb.pcapng", "--fail-on", "never")
    notes = [line for line in err.splitlines() if "decryption secrets" in line]
    assert notes == [f"dcpdissect: note: {NG / 'tls-problems-dsb.pcapng'}: decryption secrets "
                     "of type 0x5353484b (1 block) ignored: only TLS key logs (0x544c534b) are used"]
    _rc, _out, err = run(capsys, "analyze", NG / "tls13-resume-collapsed-dsb.pcapng")
    assert "decryption secrets" not in err


def test_secrets_merge_with_a_given_key_log():
    """tls13-half-dsb holds the first connection's lines; the file given holds the rest."""
    lines = RESUME_KEYS.read_text().splitlines()
    first = next(line for line in lines if line and line[0] != "#").split()[1]
    rest = "".join(line + "\n" for line in lines if line and first not in line)
    full = Options(tls_keylog=RESUME_KEYS.read_text())
    half = NG / "tls13-half-dsb.pcapng"
    assert findings(half, Options(tls_keylog=rest)) == findings(RESUME, full)
    opened = [e for e in iter_events(str(half)) if type(e) is ConnectionOpened]
    assert len(opened) == 1                    # alone, only the first connection opens


def test_late_secrets_open_the_connections_decided_after_them():
    """The secrets block follows the first ClientHello (frame 4): that connection stays
    encrypted, the second opens as with the key log."""
    late = NG / "tls13-late-dsb.pcapng"
    assert [f[:3] for f in findings(late) if f[0].startswith("tls")] == \
        [("tls-connection", 4, None)]
    keys = Options(tls_keylog=RESUME_KEYS.read_text())
    second = [(e.direction, e.data, e.frames) for e in iter_events(str(RESUME), keys)
              if type(e) is Pdu and e.conn == 2]
    assert [(e.direction, e.data, e.frames) for e in iter_events(str(late))
            if type(e) is Pdu] == second and second


@pytest.mark.parametrize("name", ["tls-problems-dsb.pcapng", "tls13-late-dsb.pcapng"])
@pytest.mark.parametrize("chunk_size,block", [(1 << 30, None), (2000, 3)])
def test_pipeline_uses_the_files_secrets(name, chunk_size, block):
    path = str(NG / name)
    got = core.run_local([path], chunk_size=chunk_size, block_frames=block,
                         keep_events=block is not None)[path]
    found, summary = analyze_file(path)
    assert got.findings == found and got.summary == summary
    assert summary.tls_decrypted and summary.secrets_ignored == (
        {0x5353484B: 1} if name.startswith("tls-problems") else {})


def test_scapy_read_uses_the_files_secrets():
    from dcpdissect.scapy import read
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [bytes(p["MCBP"]) for p in read(str(NG / "tls13-resume-collapsed-dsb.pcapng"))]
    want = [bytes(p["MCBP"]) for p in read(str(RESUME), tls_keylog=RESUME_KEYS.read_text())]
    assert got == want and got


def test_evidence_bundle_ships_only_the_matching_lines(tmp_path, capsys):
    for src, extra, out in ((NG / "tls-problems-dsb.pcapng", (), tmp_path / "a"),
                            (PROBLEMS, ("--tls-keylog", PROBLEM_KEYS), tmp_path / "b")):
        run(capsys, "analyze", src, *extra, "--evidence", out, "--fail-on", "never")
    shipped = (tmp_path / "a" / "keylog.txt").read_text()
    assert shipped == (tmp_path / "b" / "keylog.txt").read_text()
    assert 0 < len(shipped.splitlines()) < len(PROBLEM_KEYS.read_text().splitlines())


@pytest.mark.tshark
@pytest.mark.parametrize("name", sorted(INJECTED))
def test_tshark_decrypts_the_injected_files_without_a_key_log(name):
    original, keys = INJECTED[name]

    def decrypted(path, *extra):
        out = subprocess.run(["tshark", "-r", str(path), "-d", "tcp.port==11207,tls", *extra,
                              "-x"], capture_output=True, text=True, check=True).stdout
        return out.count("Decrypted TLS")

    assert decrypted(NG / name) == decrypted(original, "-o", f"tls.keylog_file:{keys}") > 0
    assert decrypted(original) == 0


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("java") is None or not importlib.util.find_spec("pyspark"),
                    reason="needs java and pyspark")
def test_spark_pipeline_orders_and_decrypts(spark, tmp_path):
    """Whole (one chunk) and chunked: the out-of-order capture and the secrets blocks give
    analyze's findings and summaries."""
    from dcpdissect.pipeline.spark import run_pipeline
    paths = [str(p) for p in (TWO, SECTIONS, NG / "tls-problems-dsb.pcapng",
                              NG / "tls13-late-dsb.pcapng")]
    for chunk_size in (1 << 30, 3000):
        res = run_pipeline(spark, paths, str(tmp_path / f"out{chunk_size}"),
                           chunk_size=chunk_size, progress=None)
        for path in paths:
            found, summary = analyze_file(path)
            assert res.findings[path] == found and res.summaries[path] == summary, path
        assert res.whole == (frozenset(paths) if chunk_size > 1 << 20 else frozenset())


def test_dumpcap_like_block_order_gives_the_findings_and_evidence(tmp_path, capsys):
    """A capture with findings whose blocks come as dumpcap drains two buffers (each batch
    of frames: the server's, then the client's): the findings of the capture in order, each
    citing its own frame, and an evidence bundle that reproduces them."""
    src = frames(ROOT / "samples" / "violations-marker.pcap")
    order = []
    for i in range(0, len(src), 8):
        batch = src[i:i + 8]
        server = [f for f in batch if decode_packet(f.linktype, f.data).sport == 11210]
        order += server + [f for f in batch if f not in server]
    assert order != src
    path = tmp_path / "drained.pcapng"
    with open(path, "wb") as fh:
        out = PcapngWriter(fh)
        out.add_interface(src[0].linktype, tsresol=9)
        for f in order:
            out.write(0, f.ts_ns, f.data, f.wirelen)
    number = {f.ts_ns: n for n, f in enumerate(order, 1)}
    want = [(rule, number[src[frame - 1].ts_ns], conn, vb, msg)
            for rule, frame, conn, vb, msg in findings(ROOT / "samples" / "violations-marker.pcap")]
    assert sorted(findings(path)) == sorted(want) and want
    assert file_order_findings(path) != sorted(r[:3] for r in want)
    _rc, _out, err = run(capsys, "analyze", path, "--evidence", tmp_path / "bundle",
                         "--fail-on", "never")
    assert "evidence written" in err and "does not reproduce" not in err
