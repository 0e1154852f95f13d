"""File sets: several files of one capture point read as one capture. Captures are split
with the real ``editcap`` (``-c`` by frames, ``-i`` by time, ``-r`` by frame ranges) and
``tcpdump -C``; the oracle is the whole file's analysis and ``mergecap``'s merge. The
sweep over every sample and fuzzed captures is ``tests/fileset_sweep.py``."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dcpdissect.analysis.run import analyze_file
from dcpdissect.capture.fileset import FileSet, group_rings, ring_family, ring_number
from dcpdissect.pipeline.core import capture_units, run_local
from dcpdissect.reports.findings import finding_record

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
SEED = SAMPLES / "resume-collapsed.pcap"    # its one finding is at frame 28 of 34


def records(findings) -> list[str]:
    return [json.dumps(finding_record(f), sort_keys=True, default=str) for f in findings]


def editcap(src: Path, where: Path, *args: str) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["editcap", *args, str(src), str(where / ("ring" + src.suffix))],
                   check=True, capture_output=True)
    return sorted(str(p) for p in where.iterdir())


def cli(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dcpdissect", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_a_ring_buffer_whose_clock_stepped_back_is_read_in_ring_order(tmp_path):
    """The seed split into three ring files, the second one's clock set back a day (an NTP
    step): the files are read in ring order, as the capture was written, so the set gives
    the findings of the three files concatenated (``mergecap -a``), frame for frame, not of
    their merge by time (which would put the second file first)."""
    files = editcap(SEED, tmp_path / "ring", "-c", "12")
    assert len(files) == 3
    stepped = tmp_path / "stepped"
    subprocess.run(["editcap", "-t", "-86400", files[1], str(stepped)], check=True)
    shutil.move(stepped, files[1])
    whole = tmp_path / "concatenated.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(whole), *files], check=True)
    by_time = tmp_path / "by-time.pcap"
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(by_time), *files], check=True)
    want, _ = analyze_file(str(whole))
    got, _ = analyze_file(FileSet(files[::-1]))
    assert records(got) == records(want)
    assert [(f.rule, f.frame) for f in want] == [("resume-collapsed-snapshot", 28)]
    assert records(analyze_file(str(by_time))[0]) != records(want)     # the case is met


@pytest.mark.parametrize("sample,how", [
    ("resume-collapsed.pcap", ("-c", "12")),
    ("resume-collapsed.pcap", ("-i", "0.01")),
    ("rollback-violations.pcap", ("-c", "7")),
    ("clean-replication.pcap", ("-c", "5")),           # legal: stays clean when split
    ("stream-markers.pcap", ("-i", "0.00001")),
    ("pcapng-multi-interface.pcapng", ("-c", "9")),    # blocks out of time order
])
def test_split_gives_the_whole_files_findings(sample, how, tmp_path):
    whole, summary = analyze_file(str(SAMPLES / sample))
    files = editcap(SAMPLES / sample, tmp_path / "ring", *how)
    assert len(files) >= 2
    got, s = analyze_file(FileSet(files[::-1]))          # the order given does not matter
    assert records(got) == records(whole)
    assert (s.frames, s.connections, s.pdus, s.gaps) == \
        (summary.frames, summary.connections, summary.pdus, summary.gaps)
    [piped] = run_local([str(tmp_path / "ring")]).values()
    assert records(piped.findings) == records(whole)
    if sample == "clean-replication.pcap":
        assert whole == []


def test_seed_split_in_three_cli_jsonl(tmp_path):
    """The seed's resume split into three ring files: each alone has no finding; read as
    one, the finding at frame 28 (file 3, its frame 4, with editcap -c 12)."""
    files = editcap(SEED, tmp_path, "-c", "12")
    assert len(files) == 3
    for f in files:
        assert "resume-collapsed-snapshot" not in {x.rule for x in analyze_file(f)[0]}
    proc = cli("analyze", str(tmp_path), "--format", "jsonl")      # a directory
    assert proc.returncode == 1, proc.stderr
    [rec] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert (rec["rule"], rec["frame"], rec["file"], rec["file_frame"]) == \
        ("resume-collapsed-snapshot", 28, files[2], 4)
    glob = cli("analyze", str(tmp_path / "ring_*.pcap"), "--format", "jsonl")    # quoted glob
    assert glob.stdout == proc.stdout
    table = cli("analyze", *files)
    assert f"frames 25–34: {files[2]} frames 1–10" in table.stdout
    assert "34 frames, 2 TCP connections, 16 messages" in table.stderr
    # messages say their file and frame too (tshark numbers frame 28's DcpSnapshotMarker)
    msgs = [json.loads(line) for line in cli("dissect", *files, "--format", "jsonl")
            .stdout.splitlines()]
    assert [(m["frame"], m["file"], m["file_frame"]) for m in msgs if m["frame"] == 28] == \
        [(28, files[2], 4)]
    assert len(msgs) == 16


def test_overlapping_files_are_merged_as_mergecap_merges(tmp_path):
    """Two files that interleave in time (odd and even frame ranges): merged, numbered as
    mergecap numbers them, with the findings of the whole file."""
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    subprocess.run(["editcap", "-r", str(SEED), str(a), "1-8", "17-24", "33-34"], check=True)
    subprocess.run(["editcap", "-r", str(SEED), str(b), "9-16", "25-32"], check=True)
    merged = tmp_path / "merged.pcap"
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(merged), str(b), str(a)], check=True)
    got, summary = analyze_file(FileSet([str(b), str(a)]))
    assert records(got) == records(analyze_file(str(merged))[0]) == \
        records(analyze_file(str(SEED))[0])
    runs = list(summary.frame_files.runs())
    assert runs[:3] == [(1, 8, str(a), 1), (9, 16, str(b), 1), (17, 24, str(a), 9)]
    assert summary.locate(28) == (str(b), 12)


def test_tcpdump_ring_names(tmp_path):
    """A real ``tcpdump -C 1`` ring (trace.pcap, trace.pcap1, ...) of a capture over 1 MB:
    recognised, grouped into one capture, and read with the whole capture's findings."""
    if shutil.which("tcpdump") is None:
        pytest.fail("tcpdump is not installed")
    big = tmp_path / "big.pcap"
    parts = []
    for i in range(16):             # 16 copies of an 80 kB capture, 10 s apart
        part = tmp_path / f"part{i}.pcap"
        subprocess.run(["editcap", "-t", str(10 * i), str(SAMPLES / "hostile-ooo-storm.pcap"),
                        str(part)], check=True)
        parts.append(str(part))
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(big), *parts], check=True)
    ring = tmp_path / "ring"
    ring.mkdir()
    subprocess.run(["tcpdump", "-Z", "root", "-r", str(big), "-w", str(ring / "trace.pcap"),
                    "-C", "1"], check=True, capture_output=True)
    names = sorted(p.name for p in ring.iterdir())
    assert names == ["trace.pcap", "trace.pcap1"]
    paths = [str(ring / n) for n in names]
    assert [ring_number(p) for p in paths] == [None, 1]
    assert group_rings(paths + [str(SEED)]) == [paths, [str(SEED)]]
    [unit, _] = capture_units(paths + [str(SEED)])
    whole = analyze_file(str(big))[0]
    assert whole and records(analyze_file(unit)[0]) == records(whole)


def test_ring_names():
    assert ring_number("x/dump_00012_20261127153000.pcapng") == 12
    assert ring_number("x/trace.pcap17") == 17
    assert ring_number("x/trace.pcap") is None
    assert ring_number("x/2026-11-27-15:30:00.pcap") is None      # tcpdump -G: by time
    assert ring_family("d/a_00001_20261127153000.pcap") == \
        ring_family("d/a_00002_20261127160000.pcap") != ring_family("d/b_00001_20261127153000.pcap")
    assert group_rings(["d/t.pcap", "d/a.pcap", "d/t.pcap1", "d/t.pcap2"]) == \
        [["d/t.pcap", "d/t.pcap1", "d/t.pcap2"], ["d/a.pcap"]]


def test_unreadable_file_of_a_set(tmp_path):
    """A file cut mid-record and a file that is no capture: one error line naming the
    first, exit 2, and what the others hold decoded (the finding, at frame 28, is before
    the cut at frame 34, the last frame of the third file)."""
    files = editcap(SEED, tmp_path / "ring", "-c", "12")
    Path(files[2]).write_bytes(Path(files[2]).read_bytes()[:-5])
    text = tmp_path / "ring" / "notes.pcap"
    text.write_text("not a capture\n")
    proc = cli("analyze", *files, str(text), "--format", "jsonl")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(
        f"dcpdissect: error: {files[2]}: frame 10: file cut mid-record")
    recs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["type"], r.get("rule"), r.get("frame")) for r in recs] == \
        [("finding", "resume-collapsed-snapshot", 28), ("error", None, None)]
    assert "33 frames" in proc.stderr
    alone = cli("analyze", str(text), files[0])        # the bad file named, the good read
    assert alone.returncode == 2
    assert alone.stderr.splitlines()[-1] == \
        f"dcpdissect: error: {text}: not a pcap or pcapng file (starts with 6e6f7420)"


@pytest.mark.tshark
def test_evidence_bundle_and_annotated_copy_of_a_set(tmp_path):
    files = editcap(SEED, tmp_path / "ring", "-c", "12")
    annotated = tmp_path / "annotated.pcapng"
    proc = cli("analyze", *files, "--evidence", str(tmp_path / "ev"), "--annotate",
               str(annotated))
    assert proc.returncode == 1, proc.stderr
    # the annotated copy is the merged capture: tshark finds the comment at frame 28 of 34
    shown = subprocess.run(["tshark", "-r", str(annotated), "-T", "fields", "-e",
                            "frame.number", "-e", "frame.comment"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    assert len(shown) == 34
    assert [line.split("\t")[0] for line in shown if "resume-collapsed-snapshot" in line] == \
        ["28"]
    tsv = (tmp_path / "ev" / "frames.tsv").read_text().splitlines()
    assert tsv[0] == "evidence_frame\toriginal_frame\tcut_bytes\tfile\tfile_frame"
    rows = [r.split("\t") for r in tsv[1:]]
    assert all(r[3] == files[(int(r[1]) - 1) // 12] and int(r[4]) == (int(r[1]) - 1) % 12 + 1
               for r in rows)
    assert "3 files read as one" in (tmp_path / "ev" / "README.txt").read_text()
    # the trimmed capture gives the finding back
    again = cli("analyze", str(tmp_path / "ev" / "evidence.pcapng"), "--format", "jsonl")
    assert json.loads(again.stdout)["rule"] == "resume-collapsed-snapshot"


def test_stdin_is_read_alone():
    proc = cli("analyze", "-", str(SEED))
    assert proc.returncode == 2
    assert proc.stderr.startswith("dcpdissect: error: stdin (-) is read alone")


@pytest.mark.spark
@pytest.mark.skipif(shutil.which("java") is None, reason="needs java")
def test_spark_pipeline_keeps_a_ring_together(spark, tmp_path):
    """The seed split in three ring files next to a lone capture: the ring is one capture
    in the real Spark pipeline (its finding found), the lone file its own."""
    from dcpdissect.pipeline.spark import run_pipeline
    files = editcap(SEED, tmp_path / "ring", "-c", "12")
    lone = str(SAMPLES / "rollback-correct.pcap")
    res = run_pipeline(spark, [str(tmp_path / "ring"), lone], str(tmp_path / "out"),
                       progress=None)
    name = str(FileSet(files))
    assert res.paths == [name, lone]
    assert records(res.findings[name]) == records(analyze_file(str(SEED))[0])
    assert res.findings[lone] == []
    assert res.summaries[name].frames == 34
    import pyarrow.parquet as pq
    [row] = pq.read_table(tmp_path / "out" / "findings").to_pylist()
    assert (row["capture_file"], row["frame"], row["file"], row["file_frame"]) == \
        (name, 28, files[2], 4)


def test_decryption_secrets_of_a_file_open_its_tls(tmp_path):
    """A pcapng whose key log is a decryption secrets block, its blocks cut into two files
    (editcap 4.0 cannot write such a file): the TLS connections are opened with the first
    file's secrets and the resume in the second is found, as in the whole file."""
    src = SAMPLES / "pcapng" / "tls13-resume-collapsed-dsb.pcapng"
    data, blocks, pos = src.read_bytes(), [], 0
    while pos < len(data):
        kind, size = struct.unpack_from("<II", data, pos)
        blocks.append((kind, data[pos:pos + size]))
        pos += size
    head = b"".join(b for kind, b in blocks if kind in (0x0A0D0D0A, 1))    # SHB, IDB
    rest = [b for kind, b in blocks if kind not in (0x0A0D0D0A, 1)]        # DSB first
    half = len(rest) // 2
    files = [tmp_path / f"r_0000{n}_20261127000000.pcapng" for n in (1, 2)]
    files[0].write_bytes(head + b"".join(rest[:half]))
    files[1].write_bytes(head + b"".join(rest[half:]))
    whole, summary = analyze_file(str(src))
    got, s = analyze_file(FileSet(map(str, files)))
    assert summary.tls_decrypted == s.tls_decrypted == 2
    assert records(got) == records(whole) and whole


def test_every_table_names_the_files_of_a_set(tmp_path):
    """``editcap -c 12`` cuts the seed's 34 frames into files of 12, 12 and 10: each table
    command ends with where its frames came from."""
    files = editcap(SEED, tmp_path / "ring", "-c", "12")
    for command in ("analyze", "dissect", "streams", "connections"):
        proc = cli(command, str(tmp_path / "ring"))
        assert proc.returncode == (1 if command == "analyze" else 0), (command, proc.stderr)
        assert proc.stdout.endswith(f"\nfiles\nframes 1–12: {files[0]} frames 1–12\n"
                                    f"frames 13–24: {files[1]} frames 1–12\n"
                                    f"frames 25–34: {files[2]} frames 1–10\n"), command
