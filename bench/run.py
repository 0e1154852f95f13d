"""Benchmark runner: dcpdissect against tshark on the same captures, in one run.

    python bench/run.py [--sizes 100MB,1GB] [--workdir /tmp/dcpbench] [--out bench/RESULTS.md]

Needs GNU time (`apt-get install time`) for the peak RSS of each child.

For each size it generates a capture (bench/gen_capture.py) and measures, one child
process each: `dcpdissect analyze` (all rules), `dcpdissect dissect --format jsonl`, tshark
with the built-in Couchbase dissector extracting the equivalent fields, tshark with our Lua
plugin, a pure-Scapy baseline on a slice, and the Spark pipeline (local[2]) on a 4-file
corpus against single-process analyze. Wall time, MB/s, messages/s and the child's peak RSS
(from wait4) are reported with the ratios to tshark's built-in run.
"""

from __future__ import annotations

import argparse
import os
import platform
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
TIME = "/usr/bin/time"          # GNU time (Debian package "time") for the peak RSS
TSHARK_OPTS = ["-o", "tcp.reassemble_out_of_order:TRUE", "-d", "tcp.port==11209,couchbase"]


def measure(cmd: list[str], stdout=subprocess.DEVNULL) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in KiB, exit code) of one child process (GNU time's %M)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        t0 = time.perf_counter()
        proc = subprocess.run([TIME, "-q", "-f", "%M", "-o", rss.name, *cmd], stdout=stdout,
                              stderr=subprocess.DEVNULL, cwd=ROOT)
        wall = time.perf_counter() - t0
        text = rss.read().strip().splitlines()
    return wall, int(text[-1]) if text else 0, proc.returncode


def count_messages(path: Path) -> int:
    out = subprocess.run([PY, "-m", "dcpdissect.cli", "dissect", str(path), "--format", "jsonl"],
                         capture_output=True, cwd=ROOT, check=True).stdout
    return out.count(b"\n")


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
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, {tshark_v}")


def scapy_slice(path: Path, frames: int) -> list[str]:
    code = ("import sys; from scapy.all import PcapReader, TCP, bind_layers; import dcpdissect.scapy; "
            f"n=0\nfor i, p in enumerate(PcapReader({str(path)!r})):\n"
            f"    if i >= {frames}: break\n    n += 1\nprint(n)")
    return [PY, "-c", code]


def run(sizes: list[int], workdir: Path, lua_max: int) -> list[dict]:
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    lua = ROOT / "lua" / "dcpdissect.lua"
    for size in sizes:
        path = workdir / f"bench-{size >> 20}MB.pcap"
        if not path.exists() or path.stat().st_size < size:
            print(f"generating {path} ...", file=sys.stderr)
            generate(str(path), size)
        mb = path.stat().st_size / 1e6
        msgs = count_messages(path)
        print(f"{path.name}: {mb:.0f} MB, {msgs} messages", file=sys.stderr)
        runs = [
            ("tshark built-in dissector", [TSHARK, "-r", str(path), *TSHARK_OPTS, "-T", "fields",
                                           "-e", "couchbase.opcode", "-e", "couchbase.extras.by_seqno",
                                           "-e", "couchbase.extras.start_seqno",
                                           "-e", "couchbase.extras.end_seqno"]),
            ("dcpdissect analyze", [PY, "-m", "dcpdissect.cli", "analyze", str(path),
                                    "--format", "jsonl", "--fail-on", "never"]),
            ("dcpdissect dissect --format jsonl", [PY, "-m", "dcpdissect.cli", "dissect", str(path),
                                                   "--format", "jsonl"]),
        ]
        if lua.exists() and size <= lua_max:
            runs.append(("tshark + dcpdissect.lua", [TSHARK, "-r", str(path), "-o",
                                                      "tcp.reassemble_out_of_order:TRUE", "-X",
                                                      f"lua_script:{lua}", "-T", "fields",
                                                      "-e", "dcp.opcode"]))
        base = None
        for name, cmd in runs:
            print(f"  {name} ...", file=sys.stderr)
            wall, rss, code = measure(cmd)
            if base is None:
                base = wall
            rows.append({"capture": path.name, "MB": mb, "tool": name, "seconds": wall,
                         "MB/s": mb / wall, "msgs/s": msgs / wall, "rss_mib": rss / 1024,
                         "vs_tshark": base / wall, "exit": code})
        slice_frames = 20000
        wall, rss, code = measure(scapy_slice(path, slice_frames))
        frac = min(1.0, slice_frames / max(1, _frames(path)))
        rows.append({"capture": path.name, "MB": mb * frac, "tool": f"pure Scapy PcapReader "
                     f"(first {slice_frames} frames, no reassembly)", "seconds": wall,
                     "MB/s": mb * frac / wall, "msgs/s": msgs * frac / wall, "rss_mib": rss / 1024,
                     "vs_tshark": (base / (mb / (mb * frac / wall))) if base else 0, "exit": code})
    return rows


def _frames(path: Path) -> int:
    from dcpdissect.capture.readers import open_capture
    with open_capture(str(path)) as reader:
        return sum(1 for _ in reader)


def spark_vs_local(workdir: Path, size_each: int, files: int = 4) -> list[dict]:
    """The pipeline on local[2] against single-process analyze on a multi-file corpus."""
    corpus = workdir / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        p = corpus / f"node{i}.pcap"
        if not p.exists():
            generate(str(p), size_each, seed=10 + i)
        paths.append(p)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    t_local = 0.0
    rss_local = 0
    for p in paths:
        wall, rss, _ = measure([PY, "-m", "dcpdissect.cli", "analyze", str(p), "--format", "jsonl",
                                "--fail-on", "never"])
        t_local += wall
        rss_local = max(rss_local, rss)
    rows = [{"capture": f"{files} files", "MB": mb, "tool": "dcpdissect analyze, one process per file, "
             "sequential", "seconds": t_local, "MB/s": mb / t_local, "msgs/s": 0,
             "rss_mib": rss_local / 1024, "vs_tshark": 0, "exit": 0}]
    try:
        import dcpdissect.pipeline  # noqa: F401
    except ImportError:
        return rows
    out = workdir / "pipeline-out"
    shutil.rmtree(out, ignore_errors=True)
    wall, rss, code = measure([PY, "-m", "dcpdissect.cli", "pipeline", *map(str, paths), "--out",
                               str(out), "--master", "local[2]"])
    rows.append({"capture": f"{files} files", "MB": mb, "tool": "dcpdissect pipeline local[2]",
                 "seconds": wall, "MB/s": mb / wall, "msgs/s": 0, "rss_mib": rss / 1024,
                 "vs_tshark": 0, "exit": code, "speedup": t_local / wall})
    return rows


def markdown(rows: list[dict], spark_rows: list[dict], command: str) -> str:
    lines = ["# Benchmark results", "", f"Machine: {machine()}.", "",
             f"Reproduce: `{command}`", "",
             "| capture | tool | seconds | MB/s | messages/s | peak RSS (MiB) | throughput vs tshark built-in |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['capture']} | {r['tool']} | {r['seconds']:.2f} | {r['MB/s']:.1f} | "
                     f"{r['msgs/s']:.0f} | {r['rss_mib']:.0f} | {r['vs_tshark']:.2f}x |")
    if spark_rows:
        lines += ["", "| corpus | tool | seconds | MB/s | peak RSS (MiB) | speed-up |", "|---|---|---:|---:|---:|---:|"]
        for r in spark_rows:
            sp = f"{r['speedup']:.2f}x" if "speedup" in r else "1.00x"
            lines.append(f"| {r['capture']} ({r['MB']:.0f} MB) | {r['tool']} | {r['seconds']:.2f} | "
                         f"{r['MB/s']:.1f} | {r['rss_mib']:.0f} | {sp} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="dcpdissect benchmarks against tshark")
    p.add_argument("--sizes", default="100MB,1GB")
    p.add_argument("--workdir", default="/tmp/dcpbench", type=Path)
    p.add_argument("--corpus-file-size", default="50MB", type=parse_size)
    p.add_argument("--no-spark", action="store_true")
    p.add_argument("--lua-max-size", default="100MB", type=parse_size,
                   help="run the Lua plugin only on captures up to this size (it is slow)")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = run(sizes, args.workdir, args.lua_max_size)
    spark_rows = [] if args.no_spark else spark_vs_local(args.workdir, args.corpus_file_size)
    command = "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(rows, spark_rows, command.strip())
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
