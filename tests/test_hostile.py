"""Hostile captures: each failure class gives its finding, bounded state, and every message
that can still be decoded. Truncated and corrupt files exit 2 naming file and frame, with
all findings before the fault."""

from __future__ import annotations

import gzip
import json
import random
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dcpdissect.analysis.findings import MAX_FINDINGS_PER_RULE
from dcpdissect.analysis.run import analyze_file
from dcpdissect.capture.readers import CaptureError, open_capture
from dcpdissect.cli import main
from dcpdissect.codec import decode
from dcpdissect.fuzz.gen import many_connections
from dcpdissect.reassembly.pdus import Options, Pdu, PduStream, iter_events

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def rules(name: str) -> Counter:
    findings, _ = analyze_file(str(SAMPLES / name))
    return Counter(f.rule for f in findings)


def seqnos(name: str) -> list[int]:
    out = []
    for ev in iter_events(str(SAMPLES / name)):
        if type(ev) is Pdu:
            m = decode(ev.data)
            if m.opcode == 0x57 and m.is_request:
                out.append(m.fields["by_seqno"])
    return out


def test_absurd_body_lengths_resync_and_keep_later_messages():
    r = rules("hostile-absurd-bodylen.pcap")
    assert r["frame-too-large"] == 2 and r["resync-after-garbage"] == 2
    assert seqnos("hostile-absurd-bodylen.pcap") == [1, 2, 3, 4]
    acks = [decode(e.data).fields for e in iter_events(str(SAMPLES / "hostile-absurd-bodylen.pcap"))
            if type(e) is Pdu and e.data[1] == 0x5D]
    assert acks == [{"bytes_to_ack": 500}]


def test_framing_extras_escapes_off_the_end():
    r = rules("hostile-escape-overrun.pcap")
    assert r["framing-extras-encoding"] == 6
    assert seqnos("hostile-escape-overrun.pcap") == [1, 2]


def test_out_of_order_storm_hits_the_cap_and_stays_bounded():
    path = str(SAMPLES / "hostile-ooo-storm.pcap")
    stream = PduStream()
    peak = 0
    pdus = []
    with open_capture(path) as reader:
        for ev in stream.feed_frames(reader):
            pdus += [ev] if type(ev) is Pdu else []
            for rd in stream.table._flows.values():
                peak = max(peak, rd.buffered)
    pdus += [e for e in stream.finish() if type(e) is Pdu]
    assert peak <= stream.table.max_ooo_segments + 1
    assert stream.summary.tcp["ooo_cap_hits"] == 1
    r = rules("hostile-ooo-storm.pcap")
    assert r["tcp-cap"] == 1 and r["capture-gap"] == 1
    assert seqnos("hostile-ooo-storm.pcap") == [1, 3]        # the storm message is lost, not more


def test_sequence_jump_by_2_31():
    r = rules("hostile-seq-jump.pcap")
    assert r["tcp-seq-jump"] == 2
    assert seqnos("hostile-seq-jump.pcap") == [1, 2, 3, 4]


def test_garbage_between_messages():
    r = rules("hostile-garbage-tcp.pcap")
    # every run of garbage is reported, trailing ones and a connection of garbage included
    assert (r["unknown-magic"], r["frame-too-large"], r["resync-after-garbage"]) == (5, 1, 6)
    assert seqnos("hostile-garbage-tcp.pcap") == [1, 2, 3, 4, 5, 6]


def test_findings_flood_is_capped_per_rule():
    findings, _ = analyze_file(str(SAMPLES / "hostile-findings-flood.pcap"))
    r = Counter(f.rule for f in findings)
    assert r["unknown-opcode"] == MAX_FINDINGS_PER_RULE
    capped = [f for f in findings if f.rule == "findings-capped"]
    assert len(capped) == 1 and capped[0].fields == {"rule": "unknown-opcode", "dropped": 100}


def test_connection_table_cap_bounds_connections_and_framers(tmp_path):
    path = tmp_path / "many.pcap"
    path.write_bytes(many_connections(random.Random(5), 1500))
    stream = PduStream(Options(max_connections=1000))
    peak_conns = peak_framers = 0
    with open_capture(str(path)) as reader:
        for _ev in stream.feed_frames(reader):
            peak_conns = max(peak_conns, stream.table.open_connections)
            peak_framers = max(peak_framers, len(stream.framers))
    list(stream.finish())
    assert peak_conns == 1000 and peak_framers <= 2000
    assert stream.table.stats["connections_evicted"] >= 500
    findings, _ = analyze_file(str(path), Options(max_connections=1000))
    assert "tcp-cap" in {f.rule for f in findings}


@pytest.mark.slow
def test_100k_simultaneous_connections(tmp_path):
    """100 050 connections each with a message in flight: the table holds 100 000, evicts
    the rest with a finding, and the run completes."""
    path = tmp_path / "many.pcap"
    path.write_bytes(many_connections(random.Random(6), 100_050))
    findings, summary = analyze_file(str(path))
    r = Counter(f.rule for f in findings)
    assert summary.error is None and summary.connections >= 100_050
    assert r["tcp-cap"] == MAX_FINDINGS_PER_RULE and r["findings-capped"] >= 1
    assert summary.tcp["connections_evicted"] >= 50


# -- truncated and corrupt files ------------------------------------------------------------------

def record_ends(data: bytes, tmp_path: Path) -> list[int]:
    """Stream offset (decompressed) at the end of each frame's record."""
    p = tmp_path / "full"
    p.write_bytes(data)
    ends = []
    with open_capture(str(p)) as reader:
        for _f in reader:
            ends.append(reader.bytes_read)
    return ends


def analyze_jsonl(path: Path, capsys) -> tuple[int, list[dict], str]:
    code = main(["analyze", str(path), "--format", "jsonl", "--no-progress"])
    out, err = capsys.readouterr()
    return code, [json.loads(x) for x in out.splitlines()], err


CASES = [  # sample, how the file is damaged
    ("clean-replication.pcap", "cut-record-data"),
    ("clean-replication.pcap", "cut-record-header"),
    ("tcp-reorder.pcap", "absurd-caplen"),
    ("violations-marker.pcap", "cut-record-data"),
    ("hostile-absurd-bodylen.pcap", "cut-record-data"),
    ("hostile-seq-jump.pcap", "cut-record-header"),
    ("hostile-findings-flood.pcap", "cut-record-data"),
    ("stream-markers.pcap", "cut-record-data"),
    ("rollback-violations.pcap", "absurd-caplen"),
    ("pcapng-multi-interface.pcapng", "cut-record-data"),
    ("pcapng-multi-interface.pcapng", "bad-block-trailer"),
    ("clean-replication.pcap.gz", "cut-gzip"),
]


def damage(data: bytes, ends: list[int], how: str, k: int, pcapng: bool) -> bytes:
    """Damage record ``k`` (0-based) of ``data`` (uncompressed)."""
    start = ends[k - 1]
    if how == "cut-record-data":
        return data[:start + (40 if pcapng else 16 + 20)]
    if how == "cut-record-header":
        return data[:start + 7]
    if how == "absurd-caplen":
        bad = bytearray(data)
        struct.pack_into("<I", bad, start + 8, 0x7FFFFFF0)
        return bytes(bad)
    if how == "bad-block-trailer":
        bad = bytearray(data)
        struct.pack_into("<I", bad, ends[k] - 4, 0x1234)
        return bytes(bad)
    raise AssertionError(how)


@pytest.mark.parametrize("sample, how", CASES, ids=[f"{s}-{h}" for s, h in CASES])
def test_damaged_file_exits_2_and_keeps_findings_before_the_fault(sample, how, tmp_path, capsys):
    raw = (SAMPLES / sample).read_bytes()
    gz = sample.endswith(".gz")
    data = gzip.decompress(raw) if gz else raw
    ends = record_ends(data, tmp_path)
    k = len(ends) - 3                        # late: most findings come before the fault
    if how == "cut-gzip":
        bad = gzip.compress(data, mtime=0)
        bad = bad[:len(bad) * 2 // 3]
    else:
        bad = damage(data, ends, how, k, sample.endswith(".pcapng"))
    path = tmp_path / f"hostile-truncated-{sample}"
    path.write_bytes(bad)
    try:
        list(open_capture(str(path)))
        raise AssertionError("the damaged file read cleanly")
    except CaptureError as exc:
        fault = exc.frame
    assert fault is not None and fault >= 2
    prefix = tmp_path / "prefix"
    prefix.write_bytes(data[:ends[fault - 2]])          # frames 1 .. fault-1, a clean file
    code, got, err = analyze_jsonl(path, capsys)
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("dcpdissect: error:")]
    assert len(errors) == 1 and f"{path}: frame {fault}: " in errors[0], err
    _, want, _ = analyze_jsonl(prefix, capsys)
    # every record of the frames before the fault, then the fault as a typed record
    # (a flow_control record, the unacked bytes of a connection with a window, has no frame)
    *got, fault_record = got
    assert got == want and all(f.get("frame") is None or f["frame"] < fault for f in got)
    # ts_ns: the time of the last frame read, the clean prefix's last
    last_ts_ns = str([f.ts_ns for f in open_capture(str(prefix))][-1])
    assert fault_record == {"type": "error", "ts_ns": last_ts_ns, "file": str(path),
                            "error": errors[0].removeprefix("dcpdissect: error: ")}
    # dissect: the same exit, message, and every message before the fault
    assert main(["dissect", str(path), "--format", "jsonl"]) == 2
    out, err = capsys.readouterr()
    assert f"dcpdissect: error: {path}: frame {fault}: " in err
    *lines, last = out.splitlines(keepends=True)
    assert json.loads(last)["type"] == "error"
    assert main(["dissect", str(prefix), "--format", "jsonl"]) == 0
    assert "".join(lines) == capsys.readouterr().out
    if how != "cut-gzip":
        assert len(want) > 0 or sample.startswith(("clean", "tcp", "pcapng"))


def test_truncated_file_via_the_cli_process(tmp_path):
    data = (SAMPLES / "hostile-garbage-tcp.pcap").read_bytes()
    path = tmp_path / "hostile-truncated.pcap"
    path.write_bytes(data[:len(data) - 50])
    proc = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "analyze", str(path),
                           "--format", "jsonl"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"dcpdissect: error: {path}: frame " in proc.stderr
    assert "file cut mid-record" in proc.stderr
    records = [json.loads(x) for x in proc.stdout.splitlines()]
    assert {r["rule"] for r in records if "rule" in r} >= {"unknown-magic"}
    assert records[-1]["type"] == "error" and "file cut mid-record" in records[-1]["error"]


SAMPLE_FILES = sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".pcap", ".pcapng"))


@pytest.mark.parametrize("seed", range(40))
def test_any_cut_keeps_every_message_and_finding_before_the_fault(seed, tmp_path):
    """A file cut at a random byte decodes, up to the fault, exactly as the clean file of
    the frames before it: same PDUs with the same frames, same findings."""
    rng = random.Random(seed)
    name = rng.choice(SAMPLE_FILES)
    data = (SAMPLES / name).read_bytes()
    ends = record_ends(data, tmp_path)
    cut = tmp_path / "cut"
    cut.write_bytes(data[:rng.randrange(ends[0], len(data))])
    try:
        list(open_capture(str(cut)))
        return                                              # cut on a record boundary
    except CaptureError as exc:
        fault = exc.frame
    assert fault >= 2                                       # the cut is after frame 1
    prefix = tmp_path / "prefix"
    prefix.write_bytes(data[:ends[fault - 2]])

    def pdus(path):
        out = []
        try:
            for ev in iter_events(str(path)):
                if type(ev) is Pdu:
                    out.append((ev.data, ev.frames, ev.frame))
        except CaptureError:
            pass
        return out

    def view(path):
        return [(f.rule, f.frame, f.frames, f.message) for f in analyze_file(str(path))[0]]

    assert pdus(cut) == pdus(prefix), name
    assert view(cut) == view(prefix), name
