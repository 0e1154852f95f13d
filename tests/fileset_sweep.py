"""Ring buffers: every sample and fuzzed captures split into 2 to 10 files with ``editcap -c``
and ``editcap -i`` give exactly the findings of the whole file, read as one file set by
``analyze`` and by the pipeline, unless the capture's timestamps go back in time further
than the time-order window (fuzzed captures): the files are then merged by time, and the
findings are those of ``mergecap``'s merge of the files (``python tests/fileset_sweep.py
[--fuzz N]``, numbers on stdout).

For each capture and each split (``-c`` into about 2, 3, 5 and 10 files by frame count;
``-i`` into about 2, 3, 5 and 10 files by time): the findings of the files read as one
set (:class:`~dcpdissect.capture.fileset.FileSet`, the order of the files shuffled) and of
the pipeline over the split's directory (its ring-buffer names group it into one capture)
are compared, record for record (rule, frame, message, fields...), with the findings of the
whole file; so are the frame, connection, message and gap counts. editcap stops at a
capture fault, so a capture read only up to a fault is compared over the frames editcap
copied (counted apart).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from redaction_sweep import every_sample, fuzzed  # noqa: E402

from dcpdissect.analysis.run import analyze_file  # noqa: E402
from dcpdissect.capture.fileset import FileSet  # noqa: E402
from dcpdissect.pipeline.core import run_local  # noqa: E402
from dcpdissect.reassembly.pdus import Options, Summary  # noqa: E402
from dcpdissect.reports.findings import finding_record  # noqa: E402

OPTIONS = Options(ports=(12000,))
PARTS = (2, 3, 5, 10)
COUNTS = ("frames", "connections", "pdus", "gaps", "gap_bytes", "resyncs", "lost_pdus")


def records(findings) -> list[str]:
    return [json.dumps(finding_record(f), sort_keys=True, default=str) for f in findings]


def counts(summary: Summary) -> tuple:
    return tuple(getattr(summary, k) for k in COUNTS)


def editcap_frames(path: Path) -> tuple[int, float]:
    """(frames, duration in seconds) of what editcap reads of ``path``."""
    out = subprocess.run(["capinfos", "-M", "-c", "-u", "-T", "-r", str(path)],
                         capture_output=True, text=True).stdout.strip().split("\t")
    try:
        return int(out[1]), float(out[2] or 0)
    except (IndexError, ValueError):
        return 0, 0.0


def split(path: Path, where: Path, how: str, value: str) -> list[Path]:
    where.mkdir(parents=True)
    subprocess.run(["editcap", how, value, str(path), str(where / ("ring" + path.suffix))],
                   capture_output=True)
    return sorted(where.iterdir())


def check(path: Path, work: Path, totals: Counter, failed: list, late: dict) -> None:
    whole, summary = analyze_file(str(path), OPTIONS)
    want = (records(whole), counts(summary))
    frames, duration = editcap_frames(path)
    if frames < 2:
        totals["captures too small to split"] += 1
        return
    totals["captures"] += 1
    totals["captures read up to a fault"] += bool(summary.error)
    totals["whole findings"] += len(whole)
    if summary.error:           # editcap copies the frames before the fault
        want = _up_to_fault(path, work / "whole")
    for parts in PARTS:
        splits = [("-c", str(-(-frames // parts)))]
        if duration > 0:
            splits.append(("-i", f"{duration / parts:.9f}"))
        for how, value in splits:
            files = split(path, work / f"{how}{parts}", how, value)
            if len(files) < 2:
                totals[f"{how} splits into one file (skipped)"] += 1
                continue
            totals[f"{how} splits"] += 1
            totals[f"{how} files"] += len(files)
            shuffled = [str(f) for f in files]
            random.Random(parts).shuffle(shuffled)
            got, s = analyze_file(FileSet(shuffled), OPTIONS)
            same = (records(got), counts(s)) == want
            totals[f"{how} splits equal in analyze"] += same
            [piped] = run_local([str(work / f"{how}{parts}")], OPTIONS).values()
            same_pipe = (records(piped.findings), counts(piped.summary)) == want
            totals[f"{how} splits equal in the pipeline"] += same_pipe
            if same and same_pipe:
                continue
            merged = _mergecap(files, work / f"{how}{parts}-merged")
            if (records(got), counts(s)) == merged == \
                    (records(piped.findings), counts(piped.summary)):
                totals[f"{how} splits not equal, equal to mergecap's merge"] += 1
                late[path.name] = max(late.get(path.name, 0), summary.late_max_ns)
            else:
                failed.append((path.name, how, value, len(files), len(want[0]), len(got),
                               len(piped.findings)))


def _mergecap(files: list[Path], where: Path) -> tuple:
    """The findings and counts of ``mergecap``'s merge of ``files``."""
    where.mkdir(parents=True)
    merged = where / "merged.pcapng"
    subprocess.run(["mergecap", "-w", str(merged), *map(str, files)], capture_output=True)
    found, s = analyze_file(str(merged), OPTIONS)
    return records(found), counts(s)


def _up_to_fault(path: Path, where: Path) -> tuple:
    """The findings and counts of the frames editcap copies of a capture with a fault."""
    where.mkdir(parents=True)
    copy = where / ("copy" + path.suffix)
    subprocess.run(["editcap", str(path), str(copy)], capture_output=True)
    found, s = analyze_file(str(copy), OPTIONS)
    return records(found), counts(s)


def main(argv: list[str]) -> int:
    count = int(argv[argv.index("--fuzz") + 1]) if "--fuzz" in argv else 20
    totals: Counter = Counter()
    failed: list = []
    late: dict = {}             # capture -> how far its frames went back in time (ns)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fileset-sweep-") as tmp:
        work = Path(tmp)
        for kind, captures in (("sample", every_sample(work)), ("fuzzed", fuzzed(work, count))):
            for i, capture in enumerate(captures):
                totals[f"{kind} captures"] += 1
                check(capture, work / f"{kind}-{i}", totals, failed, late)
    for k, v in totals.items():
        print(f"{k}: {v}")
    for name, ns in late.items():
        print(f"  equal to mergecap's merge only: {name} (frames up to {ns / 1e9:.0f} s "
              "back in time)")
    for f in failed:
        print("  differs: {} editcap {} {} ({} files): whole {} findings, set {}, "
              "pipeline {}".format(*f))
    print(f"{time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
