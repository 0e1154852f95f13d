"""Benchmark runner: dcpdissect against tshark on the same captures, in one run.

    python bench/run.py [--sizes 100MB,300MB,1GB] [--many-vbuckets 150MB] [--chunked 1GB]
                        [--corpus-file-size 250MB] [--workdir /tmp/dcpbench] [--out bench/RESULTS.md]

Needs GNU time (`apt-get install time`) for the peak RSS and CPU time of each child.

Every performance target is measured in this one run, each tool in its own child process, one
after the other on the same machine and files:

* per capture (replication shape at each ``--sizes``, and the many-vbuckets shape):
  tshark's built-in Couchbase dissector (``-T fields``), ``dcpdissect analyze`` (all rules),
  ``dcpdissect dissect --format jsonl``, tshark with our Lua plugin (captures up to
  ``--lua-max-size``) and a pure-Scapy slice; wall, CPU, peak RSS, messages/s, ratios;
* a cProfile of ``analyze`` on the many-vbuckets capture and on the largest replication
  capture of at most 300 MB: where the time goes per stage and the top functions;
* the pipeline in chunked mode (``--chunk-size 64MB``, local[2]) on the ``--chunked`` capture:
  ``analyze`` wall / (pipeline wall after session start x 2);
* the pipeline on a 4-file corpus at local[2], cold and warm, against file-after-file
  ``analyze`` (bench/pipeline_vs_analyze.py).

The measured part of bench/RESULTS.md is rewritten; the text after the ANALYSIS marker is
kept.
"""

from __future__ import annotations

import argparse
import os
import platform
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from gen_capture import generate, parse_size  # noqa: E402

PY = sys.executable
TSHARK = shutil.which("tshark") or "tshark"
TIME = "/usr/bin/time"          # GNU time (Debian package "time"): peak RSS and CPU time
TSHARK_OPTS = ["-o", "tcp.reassemble_out_of_order:TRUE", "-d", "tcp.port==11209,couchbase"]
ANALYSIS = "<!-- ANALYSIS: written by hand below this line, kept by bench/run.py -->"
CLI = [PY, "-m", "dcpdissect.cli"]
PURE = "Python source only: "     # rows run with DCPDISSECT_PURE=1 (no compiled modules)


def load() -> float:
    return os.getloadavg()[0]


def measure(cmd: list[str], env: dict | None = None) -> dict:
    """Wall and CPU seconds, peak RSS (MiB), exit code, stderr and the 1-minute load
    average before and after, of one child process (``env``: added to the environment)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf, \
            tempfile.TemporaryFile("w+") as err:
        before = load()
        t0 = time.perf_counter()
        proc = subprocess.run([TIME, "-q", "-f", "%M %U %S", "-o", tf.name, *cmd],
                              stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT,
                              env={**os.environ, **(env or {})})
        wall = time.perf_counter() - t0
        fields = (tf.read().strip().splitlines() or ["0 0 0"])[-1].split()
        err.seek(0)
        stderr = err.read()
    return {"seconds": wall, "cpu": float(fields[1]) + float(fields[2]),
            "rss_mib": int(fields[0]) / 1024, "exit": proc.returncode, "stderr": stderr,
            "load": (before + load()) / 2}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    tshark_v = subprocess.run([TSHARK, "-v"], capture_output=True, text=True).stdout.splitlines()[0]
    status = subprocess.run([PY, "-m", "dcpdissect.kernel"], capture_output=True,
                            text=True, cwd=ROOT).stderr.strip().splitlines()
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, {tshark_v.rstrip('.')}; "
            f"{status[-1] if status else 'kernel: unknown'}")


def scapy_slice(path: Path, frames: int) -> list[str]:
    code = ("from scapy.all import PcapReader; import dcpdissect.scapy\n"
            f"for i, p in enumerate(PcapReader({str(path)!r})):\n"
            f"    if i >= {frames}: break\n")
    return [PY, "-c", code]


def capture(workdir: Path, size: int, shape: str) -> Path:
    name = "bench" if shape == "replication" else shape
    path = workdir / f"{name}-{size >> 20}MB.pcap"
    if not path.exists() or path.stat().st_size < size:
        print(f"generating {path} ...", file=sys.stderr)
        generate(str(path), size, shape=shape)
    return path


def _frames(path: Path) -> int:
    from dcpdissect.capture.readers import open_capture
    with open_capture(str(path)) as reader:
        return sum(1 for _ in reader)


def analyze_cmd(path: Path) -> list[str]:
    """``dcpdissect analyze`` as every row measures it (all rules, jsonl)."""
    return [*CLI, "analyze", str(path), "--format", "jsonl", "--fail-on", "never",
            "--no-progress"]


def per_capture(path: Path, lua: bool, scapy: bool) -> list[dict]:
    mb = path.stat().st_size / 1e6
    lua_file = ROOT / "lua" / "dcpdissect.lua"
    runs = [
        ("tshark built-in dissector", [TSHARK, "-r", str(path), *TSHARK_OPTS, "-T", "fields",
                                       "-e", "couchbase.opcode", "-e", "couchbase.extras.by_seqno",
                                       "-e", "couchbase.extras.start_seqno",
                                       "-e", "couchbase.extras.end_seqno"]),
        ("dcpdissect analyze", analyze_cmd(path)),
        ("dcpdissect dissect --format jsonl", [*CLI, "dissect", str(path), "--format", "jsonl"]),
        (PURE + "dcpdissect analyze", analyze_cmd(path)),
        (PURE + "dcpdissect dissect --format jsonl", [*CLI, "dissect", str(path), "--format",
                                                      "jsonl"]),
    ]
    if lua:
        runs.append(("tshark + dcpdissect.lua", [TSHARK, "-r", str(path), "-o",
                                                  "tcp.reassemble_out_of_order:TRUE", "-X",
                                                  f"lua_script:{lua_file}", "-T", "fields",
                                                  "-e", "dcp.opcode"]))
    rows, base, msgs = [], None, 0
    for name, cmd in runs:
        print(f"  {path.name}: {name} ...", file=sys.stderr)
        r = measure(cmd, {"DCPDISSECT_PURE": "1"} if name.startswith(PURE) else None)
        if name == "dcpdissect analyze":
            m = re.search(r"(\d+) PDUs", r["stderr"])
            msgs = int(m.group(1)) if m else 0
        base = base or r
        rows.append({**r, "capture": path.name, "MB": mb, "tool": name,
                     "vs_tshark": base["seconds"] / r["seconds"],
                     "cpu_vs_tshark": r["cpu"] / base["cpu"] if base["cpu"] else 0})
    for r in rows:
        r["msgs"] = msgs
    if scapy:
        n = 20000
        r = measure(scapy_slice(path, n))
        frac = min(1.0, n / max(1, _frames(path)))
        rows.append({**r, "capture": path.name, "MB": mb * frac, "msgs": msgs * frac,
                     "tool": f"pure Scapy PcapReader (first {n} frames, no reassembly)",
                     "vs_tshark": base["seconds"] * frac / r["seconds"],
                     "cpu_vs_tshark": r["cpu"] / (base["cpu"] * frac) if base["cpu"] else 0})
    return rows


# -- profile ----------------------------------------------------------------------------------

STAGES = (   # (stage, function) -- cumulative time of the function, not nested in one another
    ("read, packet decode, TCP reassembly, framing", "reassembly/pdus.py", "feed_frames"),
    ("decode (codec.decode)", "codec/decode.py", "decode"),
    ("structure rules (check_message)", "rules/structure.py", "check_message"),
    ("stream rules (StreamTracker.on_message)", "streams/tracker.py", "on_message"),
    ("rollback rules", "rollback_checks.py", "on_message"),
)


def profile(path: Path, workdir: Path, wall: float, msgs: int) -> list[str]:
    out = workdir / f"{path.stem}.prof"
    subprocess.run([PY, "-m", "cProfile", "-o", str(out), "-m", "dcpdissect.cli", "analyze",
                    str(path), "--format", "jsonl", "--fail-on", "never", "--no-progress"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, check=False,
                   env={**os.environ, "DCPDISSECT_PURE": "1"})
    st = pstats.Stats(str(out))
    total = st.total_tt
    cum = {}
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in st.stats.items():
        for stage, suffix, name in STAGES:
            if func == name and file.endswith(suffix):
                cum[stage] = cum.get(stage, 0.0) + ct
    us = wall / msgs * 1e6 if msgs else 0
    lines = [f"### `analyze` profile: {path.name} ({msgs} messages)", "",
             "Python source only (cProfile does not see inside compiled modules). "
             f"Unprofiled: {wall:.2f} s wall = {us:.1f} µs per message "
             f"({msgs / wall:,.0f} messages/s). Under cProfile: {total:.1f} s; each stage's "
             "share of it, and that share of the unprofiled µs per message:", "",
             "| stage | profiled s | share | ≈ µs per message |", "|---|---:|---:|---:|"]
    rest = total
    for stage, _s, _n in STAGES:
        t = cum.get(stage, 0.0)
        rest -= t
        lines.append(f"| {stage} | {t:.2f} | {t / total:.0%} | {us * t / total:.1f} |")
    lines.append(f"| the rest (analyzer dispatch, finding caps, output, CLI loop) | {rest:.2f} | "
                 f"{rest / total:.0%} | {us * rest / total:.1f} |")
    lines += ["", "Top functions by own time:", "", "| function | calls | own s | cumulative s |",
              "|---|---:|---:|---:|"]
    top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:15]
    for (file, line, func), (_cc, nc, tt, ct, _callers) in top:
        where = file.replace(str(ROOT) + "/", "") if file.startswith(str(ROOT)) else Path(file).name
        lines.append(f"| `{where}:{line}({func})` | {nc} | {tt:.2f} | {ct:.2f} |")
    return lines + [""]


def report_time(path: Path, rows: list[dict], workdir: Path) -> dict:
    """``analyze --format html`` against ``analyze``'s table, on the same capture."""
    page = workdir / f"{path.stem}.html"
    times = {}
    for fmt, extra in (("table", []), ("html", ["-o", str(page)])):
        print(f"  {path.name}: dcpdissect analyze --format {fmt} ...", file=sys.stderr)
        times[fmt] = measure([*CLI, "analyze", str(path), "--format", fmt, *extra,
                              "--fail-on", "never", "--no-progress"])["seconds"]
    size = page.stat().st_size if page.exists() else 0
    page.unlink(missing_ok=True)
    return {"capture": path.name, "seconds": times["html"], "table": times["table"],
            "ratio": times["html"] / times["table"], "bytes": size}


# -- the pipeline ---------------------------------------------------------------------------

def pipeline_chunked(path: Path, workdir: Path, analyze_wall: float) -> dict:
    """The chunked pipeline on ``path`` against ``analyze``'s wall time on it."""
    print(f"  pipeline chunked on {path.name} ...", file=sys.stderr)
    out = workdir / "pipeline-chunked"
    shutil.rmtree(out, ignore_errors=True)
    r = measure([*CLI, "pipeline", str(path), "--out", str(out), "--master", "local[2]",
                 "--chunk-size", "64MB", "--fail-on", "never"])
    m = re.search(r"pipeline: done in ([\d.]+) s", r["stderr"])
    job = float(m.group(1)) if m else float("nan")
    stages = re.findall(r"pipeline: .*", r["stderr"])
    shutil.rmtree(out, ignore_errors=True)
    return {**r, "job": job, "efficiency": analyze_wall / (job * 2), "stages": stages,
            "analyze": analyze_wall, "capture": path.name}


def corpus(workdir: Path, size_each: int, files: int = 4) -> list[str]:
    paths = []
    for i in range(files):
        p = workdir / "corpus" / f"node{i}.pcap"
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.stat().st_size < size_each:
            generate(str(p), size_each, seed=10 + i)
        paths.append(str(p))
    proc = subprocess.run([PY, str(HERE / "pipeline_vs_analyze.py"), *paths, "--master", "local[2]",
                           "--workdir", str(workdir / "pva")], capture_output=True, text=True,
                          cwd=ROOT)
    return proc.stdout.strip().splitlines() + ([f"(exit {proc.returncode}: "
                                                f"{proc.stderr.strip()[-500:]})"]
                                               if proc.returncode else [])


# -- report ---------------------------------------------------------------------------------

def table(rows: list[dict]) -> list[str]:
    lines = ["| capture | tool | wall s | CPU s | MB/s | messages/s | µs/message | peak RSS MiB "
             "| load | throughput vs tshark | CPU vs tshark |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        us = r["seconds"] / r["msgs"] * 1e6 if r["msgs"] else 0
        lines.append(f"| {r['capture']} | {r['tool']} | {r['seconds']:.2f} | {r['cpu']:.2f} | "
                     f"{r['MB'] / r['seconds']:.1f} | {r['msgs'] / r['seconds']:,.0f} | {us:.1f} | "
                     f"{r['rss_mib']:.0f} | {r['load']:.1f} | {_ratio(r['vs_tshark'])} | "
                     f"{_ratio(r['cpu_vs_tshark'])} |" + (f" (exit {r['exit']})" if r["exit"] not in (0, 1) else ""))
    return lines


def _ratio(x: float) -> str:
    return "(not run)" if x != x else f"{x:.2f}x"


def _find(rows, capture, tool):
    return next((r for r in rows if r["capture"] == capture and r["tool"] == tool), None)


def targets(rows: list[dict], sizes_paths: list[Path], many: Path | None, chunked: dict | None,
            corpus_lines: list[str], shared: dict | None = None,
            html: dict | None = None) -> list[str]:
    out = ["| target | measured in this run | |", "|---|---|---|"]

    def verdict(ok):
        return "met" if ok else "**missed**"

    big = [p for p in sizes_paths if p.stat().st_size >= 250e6
           and _find(rows, p.name, "tshark built-in dissector")]
    for p in big:
        a, t = _find(rows, p.name, "dcpdissect analyze"), _find(rows, p.name, "tshark built-in dissector")
        out.append(f"| `analyze` ≥ 8x tshark built-in ({p.name}) | {a['vs_tshark']:.1f}x "
                   f"({a['seconds']:.1f} s vs {t['seconds']:.1f} s) | {verdict(a['vs_tshark'] >= 8)} |")
    rss = [(p.name, _find(rows, p.name, "dcpdissect analyze")["rss_mib"]) for p in sizes_paths]
    out.append("| `analyze` peak RSS ≤ 64 MB, flat with size | " + ", ".join(
        f"{r:.0f} MiB ({n})" for n, r in rss) + f" | {verdict(max(r for _n, r in rss) <= 64)} |")
    if many is not None:
        a = _find(rows, many.name, "dcpdissect analyze")
        rate = a["msgs"] / a["seconds"]
        t = _find(rows, many.name, "tshark built-in dissector")
        out.append(f"| `analyze` ≥ 4x tshark built-in ({many.name}, 1024 vbuckets) | "
                   f"{a['vs_tshark']:.1f}x ({a['seconds']:.1f} s vs {t['seconds']:.1f} s) | "
                   f"{verdict(a['vs_tshark'] >= 4)} |")
        out.append(f"| `analyze` ≥ 200k messages/s on the many-vbuckets capture | {rate:,.0f}/s = "
                   f"{1e6 / rate:.1f} µs per message | {verdict(rate >= 200_000)} |")
    for p in [p for p in sizes_paths if _find(rows, p.name, "tshark built-in dissector")] + (
            [many] if many else []):
        d = _find(rows, p.name, "dcpdissect dissect --format jsonl")
        out.append(f"| `dissect --format jsonl` ≥ 2x tshark -T fields ({p.name}) | "
                   f"{d['vs_tshark']:.2f}x | {verdict(d['vs_tshark'] >= 2)} |")
    for run, target in ((chunked, "pipeline chunked (64 MB chunks, local[2]) efficiency ≥ 0.6"),
                        (shared, "the same, 4 consumers of one vbucket ({capture}) ≥ 0.6")):
        if run is not None:
            out.append(f"| {target.format(capture=run['capture'])} | {run['efficiency']:.2f} "
                       f"(analyze {run['analyze']:.1f} s / ({run['job']:.1f} s after session "
                       f"start x 2)) | {verdict(run['efficiency'] >= 0.6)} |")
    if html is not None:
        out.append(f"| `analyze --format html` ≤ 2x the table's time ({html['capture']}) | "
                   f"{html['ratio']:.2f}x ({html['seconds']:.1f} s vs {html['table']:.1f} s; "
                   f"page {html['bytes'] / 1e6:.1f} MB) | {verdict(html['ratio'] <= 2)} |")
    warm = next((ln for ln in corpus_lines if "second job (warm)" in ln), None)
    if warm:
        sp = float(re.search(r"speed-up over analyze ([\d.]+)x", warm).group(1))
        out.append(f"| pipeline on the 4-file corpus, local[2], warm ≥ 1.6x analyze | {sp:.2f}x | "
                   f"{verdict(sp >= 1.6)} |")
    for r in rows:
        if r["tool"] == "tshark + dcpdissect.lua":
            out.append(f"| Lua plugin CPU ≤ 2x built-in ({r['capture']}) | {r['cpu_vs_tshark']:.2f}x "
                       f"({r['cpu']:.1f} s vs {_find(rows, r['capture'], 'tshark built-in dissector')['cpu']:.1f} s CPU) "
                       f"| {verdict(r['cpu_vs_tshark'] <= 2)} |")
    out.append("| pipeline on a real Spark standalone cluster, findings equal `analyze` | "
               "tests/test_spark_cluster.py (not timed here) | see the test run |")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="dcpdissect benchmarks against tshark")
    p.add_argument("--sizes", default="100MB,300MB,1GB")
    p.add_argument("--many-vbuckets", default="150MB", help="size of the many-vbuckets capture "
                                                            "(0: none)")
    p.add_argument("--chunked", default="1GB", help="capture for the chunked pipeline (0: none)")
    p.add_argument("--shared", default="300MB", help="capture of 4 consumers of one vbucket for "
                                                      "the chunked pipeline (0: none)")
    p.add_argument("--rss-size", default="2GB", help="capture on which only analyze's peak RSS "
                                                     "is measured (0: none)")
    p.add_argument("--corpus-file-size", default="250MB", type=parse_size)
    p.add_argument("--workdir", default="/tmp/dcpbench", type=Path)
    p.add_argument("--no-spark", action="store_true")
    p.add_argument("--lua-max-size", default="100MB", type=parse_size,
                   help="run the Lua plugin only on captures up to this size (it is slow)")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    started, load0 = time.monotonic(), load()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    paths = [capture(args.workdir, s, "replication") for s in sizes]
    many_size = parse_size(args.many_vbuckets)
    many = capture(args.workdir, many_size, "many-vbuckets") if many_size else None
    rows: list[dict] = []
    for i, path in enumerate(paths + ([many] if many else [])):
        rows += per_capture(path, path.stat().st_size <= args.lua_max_size * 1.05, scapy=i == 0)
    prof: list[str] = []
    for path in ([many] if many else []) + [max((q for q in paths if q.stat().st_size <= 330e6),
                                               key=lambda q: q.stat().st_size, default=None)]:
        if path is not None:
            a = _find(rows, path.name, PURE + "dcpdissect analyze")
            print(f"  profiling analyze on {path.name} ...", file=sys.stderr)
            prof += profile(path, args.workdir, a["seconds"], a["msgs"])
    html = report_time(max(paths, key=lambda q: q.stat().st_size if q.stat().st_size <= 330e6
                           else 0), rows, args.workdir)
    rss_size = parse_size(args.rss_size)
    if rss_size:
        path = capture(args.workdir, rss_size, "replication")
        print(f"  {path.name}: dcpdissect analyze (peak RSS) ...", file=sys.stderr)
        r = measure(analyze_cmd(path))
        m = re.search(r"(\d+) PDUs", r["stderr"])
        rows.append({**r, "capture": path.name, "MB": path.stat().st_size / 1e6,
                     "tool": "dcpdissect analyze", "msgs": int(m.group(1)) if m else 0,
                     "vs_tshark": float("nan"), "cpu_vs_tshark": float("nan")})
        paths_rss = paths + [path]
    else:
        paths_rss = paths
    chunked = shared = None
    corpus_lines: list[str] = []
    if not args.no_spark:
        size = parse_size(args.shared)
        if size:
            path = capture(args.workdir, size, "shared-vbuckets")
            shared = pipeline_chunked(path, args.workdir, measure(analyze_cmd(path))["seconds"])
        size = parse_size(args.chunked)
        if size:
            path = capture(args.workdir, size, "replication")
            a = _find(rows, path.name, "dcpdissect analyze") or measure(analyze_cmd(path))
            chunked = pipeline_chunked(path, args.workdir, a["seconds"])
        print("  pipeline on the corpus ...", file=sys.stderr)
        corpus_lines = corpus(args.workdir, args.corpus_file_size)
    minutes = (time.monotonic() - started) / 60
    command = "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = ["# Benchmark results", "", f"Machine: {machine()}.", "",
            f"Command: `{command.strip()}` — one run, {minutes:.0f} minutes; load average "
            f"(1 min) {load0:.1f} at the start, {load():.1f} at the end (the `load` column: "
            "during each child). Others were using the machine: compare tools by the ratios "
            "of one capture, measured one after another.", "", "## Targets", ""]
    text += targets(rows, paths_rss, many, chunked, corpus_lines, shared, html)
    text += ["", "## Per capture", ""] + table(rows)
    text += ["", "\"CPU s\" is the child's user + system time (GNU time), \"peak RSS\" its "
             "maximum resident set. Messages are the MCBP PDUs `analyze` counted. The Scapy "
             "row is a slice (first 20 000 frames, no reassembly), its rates scaled to the "
             "slice. `dissect --format jsonl` includes its analyzer pass for the start-seqno "
             "conventions. 20% of the replication shape's markers are V2.2, which tshark "
             "4.0's built-in dissector reports as Malformed, skipping the rest of their "
             "segment: this flatters the tshark rows.", ""]
    if chunked is not None:
        text += ["## Pipeline, chunked mode", "",
                 f"`dcpdissect pipeline {chunked['capture']} --master local[2] --chunk-size 64MB`: "
                 f"{chunked['seconds']:.1f} s wall with the session start, {chunked['job']:.1f} s "
                 f"after it, {chunked['cpu']:.1f} s CPU of the driver process tree, peak RSS "
                 f"{chunked['rss_mib']:.0f} MiB (driver JVM + Python); `analyze` on the same file "
                 f"{chunked['analyze']:.1f} s: efficiency {chunked['efficiency']:.2f}. Stages:", ""]
        text += [f"    {ln}" for ln in chunked["stages"]] + [""]
    if corpus_lines:
        text += ["## Pipeline on a 4-file corpus (bench/pipeline_vs_analyze.py)", ""]
        text += [f"    {ln}" for ln in corpus_lines] + [""]
    text += ["## Profiles", ""] + prof
    old = args.out.read_text() if args.out.exists() else ""
    kept = old.split(ANALYSIS, 1)[1] if ANALYSIS in old else "\n"
    args.out.write_text("\n".join(text) + "\n" + ANALYSIS + kept)
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
