"""``python -m dcpdissect.fuzz --inputs 1000000 --seed 1 --jobs 2``"""

from __future__ import annotations

import argparse
import sys
import time

from . import Runner, run
from .gen import make_input


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpdissect.fuzz",
                                description="fuzz the capture → findings path and the PDU codecs")
    p.add_argument("--inputs", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per input (hang)")
    p.add_argument("--mem-limit", type=int, default=512, help="MiB traced per input")
    p.add_argument("--trace-every", type=int, default=50,
                   help="measure allocations (tracemalloc) on every Nth input")
    p.add_argument("--no-scapy", action="store_true", help="skip the Scapy layer on PDU inputs")
    p.add_argument("--crash-dir", default="fuzz-crashes")
    p.add_argument("--replay", type=int, metavar="N", help="run input N of the seed once and show it")
    args = p.parse_args(argv)

    if args.replay is not None:
        inp = make_input(args.seed, args.replay)
        runner = Runner(time_limit=args.time_limit)
        f = runner.run(args.replay, inp)
        runner.close()
        print(f"input {args.replay} ({inp.how}, {inp.kind}, {len(inp.data)} bytes): "
              f"{'ok' if f is None else f.kind}")
        if f is not None:
            print(f.error, f.trace, sep="\n")
        return 0 if f is None else 1

    last = [0.0]

    def progress(rep):
        now = time.monotonic()
        if now - last[0] >= 10:
            last[0] = now
            print(rep.text(), file=sys.stderr, flush=True)

    rep = run(args.inputs, args.seed, args.jobs, time_limit=args.time_limit,
              mem_limit=args.mem_limit << 20, trace_every=args.trace_every,
              scapy=not args.no_scapy, crash_dir=args.crash_dir, progress=progress)
    print(f"seed {args.seed}, {args.jobs} jobs")
    print(f"inputs tried   {rep.inputs}")
    print(f"crashes        {rep.crashes}")
    print(f"hangs          {rep.hangs}")
    print(f"memory         {rep.memory} (inputs over {args.mem_limit} MiB traced)")
    print(f"peak memory    {rep.peak_traced / (1 << 20):.1f} MiB traced by one input, "
          f"{rep.peak_rss / (1 << 20):.0f} MiB peak RSS of a process")
    print(f"slowest input  {rep.slowest * 1000:.0f} ms")
    print(f"inputs/s       {rep.rate:.0f} ({rep.seconds:.1f} s)")
    print("by generator   " + ", ".join(f"{k} {v}" for k, v in sorted(rep.by_how.items())))
    if rep.failures:
        print(f"failing inputs written to {args.crash_dir}/")
        for f in rep.failures[:20]:
            print(f"  {f.number} {f.kind} {f.how}: {f.error}")
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
