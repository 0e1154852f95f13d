"""Wall time of ``dcpdissect pipeline`` (Spark, local[N]) against ``dcpdissect analyze`` run
file after file in one process, on a generated corpus of equal-sized captures.

    python bench/pipeline_vs_analyze.py [CAPTURE...] [--files 4] [--size 32MB]
                                        [--master local[2]] [--chunk-size 256MB]
                                        [--workdir /tmp/dcp-pipeline-bench]

Without CAPTURE arguments, a corpus of ``--files`` generated captures is used. Prints the
corpus, the wall time of ``analyze`` (one process, file after file, then as many processes
side by side as the master has cores: the ceiling on this machine), the Spark session start,
and two pipeline jobs in that session (the first pays for starting Python workers and
warming up the JVM) with their speed-up over ``analyze``, and checks that both found the
same findings and message counts per file.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_capture import generate

from dcpdissect.analysis.run import analyze_file
from dcpdissect.pipeline.chunks import parse_size


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("captures", nargs="*", help="capture files (default: a generated corpus)")
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--size", type=parse_size, default="32MB")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--chunk-size", type=parse_size, default="256MB")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting (repeatable)")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/dcp-pipeline-bench"))
    args = p.parse_args(argv)

    paths = list(args.captures)
    if not paths:
        corpus = args.workdir / "corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        for i in range(args.files):
            path = corpus / f"capture-{i}.pcap"
            if not path.exists() or path.stat().st_size < args.size:
                generate(str(path), args.size, connections=4, vbuckets=16, seed=i + 1)
            paths.append(str(path))
    total = sum(os.path.getsize(x) for x in paths)
    print(f"corpus: {len(paths)} files, {total / 1e6:.0f} MB; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")

    t, cpu = time.monotonic(), time.process_time()
    local = {x: analyze_file(x) for x in paths}
    t_local = time.monotonic() - t
    print(f"analyze, one process, file after file: {t_local:.1f} s "
          f"(CPU {time.process_time() - cpu:.1f} s)")
    cores = args.master[6:-1] if args.master.startswith("local[") else ""
    cores = int(cores) if cores.isdigit() else os.cpu_count() or 1
    with ProcessPoolExecutor(cores) as pool:
        list(pool.map(len, [()] * cores))            # workers started
        t = time.monotonic()
        list(pool.map(analyze_file, paths))
        t_pool = time.monotonic() - t
    print(f"analyze in {cores} processes side by side (what {cores} cores give here): "
          f"{t_pool:.1f} s; speed-up {t_local / t_pool:.2f}x")

    from dcpdissect.pipeline.spark import run_pipeline, spark_session
    out = args.workdir / "tables"
    shutil.rmtree(out, ignore_errors=True)
    t = time.monotonic()
    spark = spark_session(args.master, conf=dict(c.split("=", 1) for c in args.conf))
    t_session = time.monotonic() - t
    same = True
    for label in ("first job (cold: Python workers and JVM start up)", "second job (warm)"):
        t = time.monotonic()
        res = run_pipeline(spark, paths, str(out), chunk_size=args.chunk_size, progress=None)
        t_job = time.monotonic() - t
        print(f"pipeline {args.master}, {label}: {t_job:.1f} s (" +
              ", ".join(f"{k} {v:.1f} s" for k, v in res.timings.items() if k != "total") +
              f"); speed-up over analyze {t_local / t_job:.2f}x")
        same = same and all(
            [(f.rule, f.frame) for f in res.findings[x]] == [(f.rule, f.frame) for f in local[x][0]]
            and res.messages[x] == local[x][1].pdus for x in paths)
    spark.stop()
    print(f"Spark session start: {t_session:.1f} s")
    print(f"same findings and message counts: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
