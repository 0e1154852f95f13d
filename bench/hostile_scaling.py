"""Time against input size for each hostile capture class: no quadratic behaviour.

    python bench/hostile_scaling.py [--scale 1.0]

For every class, a small and a 10x larger capture are analysed (``analyze_file``, the
whole path); the per-unit cost of the large one must stay within ``--max-growth`` (2x) of
the small one's (a quadratic class would grow ~10x). Prints one row per class and exits 1
when a class is not near-linear.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dcpdissect.analysis.run import analyze_file
from dcpdissect.codec import encode
from dcpdissect.fuzz.gen import MASK, Flow, many_connections, pcap_bytes


def ooo_storm(n: int) -> bytes:
    """n 8-byte segments captured in reverse order (the first one last)."""
    f = Flow()
    frames = f.syn()
    segs = f.segments(1, b"\x80" * 8 * n, [8] * n)
    return pcap_bytes(frames + segs[1:][::-1] + segs[:1])


def retransmit_storm(n: int) -> bytes:
    """n 1-byte in-order segments, each followed by a retransmission of an older byte."""
    f = Flow(isn_s=5000)
    frames = f.syn()
    for k in range(n):
        frames.append(f.seg(1, b"\x80"))
        frames.append(f.seg(1, b"\x80", seq=5001 + (k * 7919) % (k + 1), advance=False))
    return pcap_bytes(frames)


def connections(n: int) -> bytes:
    return many_connections(random.Random(1), n)


def garbage(n: int) -> bytes:
    """n KiB of random bytes on one connection, in 1 KiB segments."""
    rng = random.Random(2)
    f = Flow()
    frames = f.syn()
    data = rng.randbytes(n << 10)
    return pcap_bytes(frames + f.segments(1, data, [1024] * n))


def seq_jumps(n: int) -> bytes:
    """n messages, the sequence number jumping by 2^31 before each."""
    f = Flow()
    frames = f.syn()
    msg = encode(0x5C, opaque=1)
    for _ in range(n):
        f.nxt[1] = (f.nxt[1] + (1 << 31)) & MASK
        frames.append(f.seg(1, msg))
    return pcap_bytes(frames)


def absurd_lengths(n: int) -> bytes:
    """n headers with body length 0xFFFFFFFF, each followed by two good messages."""
    f = Flow()
    frames = f.syn()
    bad = struct.pack(">BBHBBHIIQ", 0x80, 0x57, 0, 0, 0, 0, 0xFFFFFFFF, 9, 0)
    good = encode(0x5C, opaque=1)
    for _ in range(n):
        frames.append(f.seg(1, bad + good + good))
    return pcap_bytes(frames)


def findings_flood(n: int) -> bytes:
    """n requests with an unknown opcode (one finding each, capped per rule)."""
    f = Flow()
    frames = f.syn()
    pdu = struct.pack(">BBHBBHIIQ", 0x80, 0xEE, 0, 0, 0, 0, 0, 1, 0)
    for k in range(0, n, 50):
        frames.append(f.seg(0, pdu * min(50, n - k)))
    return pcap_bytes(frames)


def trickle(n: int) -> bytes:
    """One message of n bytes delivered one byte per segment."""
    f = Flow()
    frames = f.syn()
    msg = encode(0x57, dict(by_seqno=1, rev_seqno=1, flags=0, expiration=0), key=b"k",
                 value=b"v" * max(0, n - 60), vbucket=0, opaque=1)
    return pcap_bytes(frames + f.segments(1, msg, [1] * len(msg)))


CLASSES = [  # name, generator, small size, unit
    ("out-of-order storm", ooo_storm, 10_000, "segments"),
    ("retransmission storm", retransmit_storm, 10_000, "segments"),
    ("simultaneous connections", connections, 10_000, "connections"),
    ("garbage run", garbage, 1_000, "KiB"),
    ("sequence jumps", seq_jumps, 5_000, "jumps"),
    ("absurd body lengths", absurd_lengths, 5_000, "headers"),
    ("findings flood", findings_flood, 10_000, "PDUs"),
    ("1-byte segment trickle", trickle, 10_000, "bytes"),
]


def measure(gen, n: int, tmp: str) -> tuple[float, int]:
    path = os.path.join(tmp, "bench.pcap")
    with open(path, "wb") as f:
        f.write(gen(n))
    size = os.path.getsize(path)
    gc.collect()
    t = time.perf_counter()
    _findings, summary = analyze_file(path)
    elapsed = time.perf_counter() - t
    assert summary.error is None, summary.error
    return elapsed, size


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiply every size")
    p.add_argument("--factor", type=int, default=10, help="large size / small size")
    p.add_argument("--max-growth", type=float, default=2.0,
                   help="allowed growth of the per-unit cost from small to large")
    p.add_argument("--only", help="run only classes whose name contains this")
    args = p.parse_args(argv)
    ok = True
    print(f"{'class':26} {'small':>16} {'large':>16} {'time small':>11} {'time large':>11} "
          f"{'per unit':>19} {'growth':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, gen, small, unit in CLASSES:
            if args.only and args.only not in name:
                continue
            a = max(1, int(small * args.scale))
            b = a * args.factor
            ta, _ = measure(gen, a, tmp)
            tb, size_b = measure(gen, b, tmp)
            ua, ub = ta / a * 1e6, tb / b * 1e6
            growth = ub / ua if ua else float("inf")
            verdict = growth <= args.max_growth
            ok &= verdict
            print(f"{name:26} {a:>8} {unit:7} {b:>8} {unit:7} {ta:>10.2f}s {tb:>10.2f}s "
                  f"{ua:>8.1f}→{ub:>6.1f} µs {growth:>6.2f}x {'ok' if verdict else 'SUPERLINEAR'}",
                  flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"peak RSS {rss} MiB; near-linear: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
