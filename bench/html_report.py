"""The HTML report of a 300 MB capture with findings: its time against the table's, its
size, and what headless Chromium shows.

    python bench/html_report.py [--size 300MB] [--workdir /tmp/dcpbench]
                                [--out bench/HTML_RESULTS.md] [--shots docs]

The capture is the replication benchmark capture (bench/gen_capture.py: 4 connections, 64
vbuckets, clean) merged (mergecap) with real samples that hold findings, each moved into the
capture's time span (editcap -t): a rollback loop and rollbacks not applied
(rollback-violations.pcap) on the benchmark's own server, a collapsed resume
(resume-collapsed.pcap), a resume collapsed across a move to another server
(move-node-collapsed.pcap), durability and marker violations. Not committed: it is rebuilt
in the work directory when missing.

Measured in one run, one after the other: ``analyze`` (table) and ``analyze --format html``
(three times each, alternating; the best of each), the page's size, Chromium's time to load and
screenshot the page against its time for about:blank, and two screenshots at 1400 px wide:
the top of the page (what is above the fold) and the timeline of the rollback loop.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from gen_capture import generate, parse_size  # noqa: E402

CLI = [sys.executable, "-m", "dcpdissect.cli"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# (sample, seconds it is moved by): inside the benchmark capture's ~1.5 s
FINDINGS = (("rollback-violations.pcap", 0.30), ("resume-collapsed.pcap", 0.55),
            ("move-node-collapsed.pcap", 0.80), ("durability-violations.pcap", 1.05),
            ("violations-marker.pcap", 1.20))
WIDTH, FOLD = 1400, 1000


def capture(workdir: Path, size: int) -> Path:
    base = workdir / f"bench-{size >> 20}MB.pcap"
    if not base.exists() or base.stat().st_size < size:
        print(f"generating {base} ...", file=sys.stderr)
        generate(str(base), size, shape="replication")
    out = workdir / f"html-findings-{size >> 20}MB.pcap"
    if out.exists() and out.stat().st_mtime > base.stat().st_mtime:
        return out
    moved = []
    for name, shift in FINDINGS:
        path = workdir / f"moved-{name}"
        subprocess.run(["editcap", "-t", str(shift), str(ROOT / "samples" / name), str(path)],
                       check=True)
        moved.append(str(path))
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(out), str(base), *moved], check=True)
    for path in moved:
        os.unlink(path)
    return out


def timed(cmd: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr}")
    return took


def screenshot(url: str, png: Path, height: int) -> float:
    """Chromium's wall time to load ``url`` and write its screenshot."""
    return timed([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  f"--screenshot={png}", f"--window-size={WIDTH},{height}", url])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="300MB")
    p.add_argument("--workdir", default="/tmp/dcpbench")
    p.add_argument("--out", default=str(HERE / "HTML_RESULTS.md"))
    p.add_argument("--shots", default=str(ROOT / "docs"))
    args = p.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = capture(workdir, parse_size(args.size))
    page = workdir / "report.html"
    table_cmd = [*CLI, "analyze", str(path), "--fail-on", "never", "--no-progress"]
    html_cmd = [*table_cmd, "--format", "html", "-o", str(page)]
    load = os.getloadavg()[0]
    table, html = [], []
    for _ in range(3):
        print("  analyze (table) ...", file=sys.stderr)
        table.append(timed(table_cmd))
        print("  analyze --format html ...", file=sys.stderr)
        html.append(timed(html_cmd))
    text = page.read_text(encoding="utf-8")
    findings = len(re.findall(r'<tr id="finding-\d+"', text))
    timelines = len(re.findall(r'<figure id="timeline-\d+"', text))
    counts = re.search(r'<p class="counts">(.*?)</p>', text).group(1)
    counts = re.sub(r"<[^>]+>", "", counts)
    loop = re.search(r'<tr id="finding-\d+">.*?<code>rollback-loop</code>.*?'
                     r'href="#timeline-(\d+)"', text)
    shots = Path(args.shots)
    blank = screenshot("about:blank", workdir / "blank.png", FOLD)
    render = screenshot(page.as_uri(), shots / "report-300mb-top.png", FOLD)
    if loop:        # the loop's figure as the page draws it, with the page's style
        figure = re.search(rf'<figure id="timeline-{loop.group(1)}">.*?</figure>', text, re.S)
        style = re.search(r"<style>.*?</style>", text, re.S).group(0)
        alone = workdir / "rollback-loop.html"
        alone.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8">{style}</head>'
                         f"<body>{figure.group(0).replace('<details>', '<details open>')}"
                         "</body></html>", encoding="utf-8")
        screenshot(alone.as_uri(), shots / "report-300mb-rollback-loop.png", 900)
    size_mb = page.stat().st_size / 1e6
    ratio = min(html) / min(table)
    lines = [
        "# The HTML report of a 300 MB capture", "",
        "Written by `python bench/html_report.py` (the method is in its docstring).", "",
        f"Capture: `{path.name}`, {path.stat().st_size / 1e6:.0f} MB, {findings} findings "
        f"({counts}); {timelines} timelines on the page. 1-minute load average before the "
        f"run: {load:.1f} (2 cores).", "",
        "| measure | value | target |", "|---|---:|---|",
        f"| `analyze` (table), best of 3 | {min(table):.1f} s | |",
        f"| `analyze --format html`, best of 3 | {min(html):.1f} s | |",
        f"| html / table | {ratio:.2f}x | ≤ 2x: {'met' if ratio <= 2 else 'not met'} |",
        "| html / table, round by round | "
        + ", ".join(f"{h / t:.2f}x" for h, t in zip(html, table)) + " | |",
        f"| page size | {size_mb:.2f} MB | ≤ 5 MB: {'met' if size_mb <= 5 else 'not met'} |",
        f"| Chromium: load and screenshot the page | {render:.1f} s | |",
        f"| Chromium: the same for about:blank | {blank:.1f} s | |", "",
        f"Screenshots ({WIDTH} px wide): `docs/report-300mb-top.png` (the first {FOLD} px: "
        "what is above the fold) and `docs/report-300mb-rollback-loop.png` (the timeline of "
        "the rollback loop).", ""]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
