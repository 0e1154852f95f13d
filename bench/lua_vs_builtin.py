"""Time tshark with the generated Lua dissector against tshark's built-in Couchbase dissector.

    python bench/lua_vs_builtin.py [--size-mb 100] [--workdir /tmp/dcp-lua-bench] [--repeat 3]

Builds a large replication capture (snapshot markers V1/V2.0 and many mutations, coalesced
and split across 1448-byte segments, server port 11209) with the sample builder's helpers,
then runs, in the same process and on the same file:

* built-in:  tshark -r big.pcap -d tcp.port==11209,couchbase -T fields -e couchbase.opcode
* lua:       tshark -r big.pcap -X lua_script:lua/dcpdissect.lua -T fields -e dcp.opcode

all with ``-o tcp.reassemble_out_of_order:TRUE``, alternating the two (so that a change in
the load of the machine hits both alike), and prints wall and CPU times (best of
``--repeat`` runs), the CPU time per message and the ratios.
V2.2 markers are left out: the built-in dissector reports them as Malformed and skips the
rest of their segment, which would make it look faster.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dcpdissect.codec import encode
from dcpdissect.samples import netsynth as ns
from dcpdissect.samples.dsl import (
    Script,
    control,
    dcp_open,
    deletion,
    doc,
    failover,
    marker,
    mutation,
    ok,
    stream_req,
)
from dcpdissect.samples.scenarios_basic import CONSUMER, PRODUCER_11209

TSHARK = shutil.which("tshark") or "tshark"
LUA = ROOT / "lua" / "dcpdissect.lua"
COMMON = ["-o", "tcp.reassemble_out_of_order:TRUE"]


def conversation(index: int, target_bytes: int, vbuckets: int = 16) -> tuple[list, int]:
    """Packets of one replication connection carrying about ``target_bytes``; (packets, PDUs)."""
    client = ns.Endpoint(CONSUMER.ip, CONSUMER.port + index)
    s = Script(client, PRODUCER_11209, start_ns=1_700_000_000_000_000_000 + index * 500)
    s.c2s(dcp_open(f"replication:bench-{index}", 0x25, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(control("enable_noop", "true", 2))
    s.s2c(ok(0x5E, 2))
    for vb in range(vbuckets):
        s.c2s(stream_req(vb, 0x100 + vb))
        s.s2c(failover(0x100 + vb, (0xA1B2C3D4E5F60000 + vb, 0)))
    seqno = [0] * vbuckets
    sent, rounds = 0, 0
    while sent < target_bytes:
        vb = rounds % vbuckets
        start = seqno[vb] + 1
        end = start + 19
        if rounds % 2:
            first = marker(vb, 0x100 + vb, start, end, "memory+checkpoint")
        else:
            first = marker(vb, 0x100 + vb, start, end, "disk+checkpoint", layout="V2.0",
                           max_visible_seqno=end, high_completed_seqno=start)
        frames = [first]
        for q in range(start, end + 1):
            if q % 10 == 0:
                frames.append(deletion(vb, 0x100 + vb, q, f"doc-{vb}-{q - 1}"))
            else:
                frames.append(mutation(vb, 0x100 + vb, q, f"doc-{vb}-{q}", doc(q, 60 + (q * 37) % 500)))
        seqno[vb] = end
        s.s2c(*frames)
        sent += sum(len(f) for f in frames)
        rounds += 1
        if rounds % 8 == 0:
            s.c2s(encode(0x5D, {"bytes_to_ack": sent & 0xFFFFFFFF}, opaque=3))
        if rounds % 50 == 0:
            s.s2c(encode(0x5C, opaque=0x20))
            s.c2s(ok(0x5C, 0x20))
    s.conv.close()
    return s.conv.packets(), len(s.messages)


def build(path: Path, size_mb: int, connections: int = 4) -> int:
    """Write the capture; returns the number of MCBP messages in it."""
    sources, messages = [], 0
    # payload is ~85% of the file (headers and pure ACKs are the rest)
    per_conn = int(size_mb * 1e6 * 0.85) // connections
    for k in range(connections):
        pkts, n = conversation(k, per_conn)
        sources.append(pkts)
        messages += n
    ns.write_pcap(str(path), sources)
    return messages


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one tshark run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0 or b"Lua: Error" in stderr:
        raise SystemExit(stderr.decode(errors="replace"))
    return wall, usage.ru_utime + usage.ru_stime


def count_values(cmd: list[str]) -> int:
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    return sum(len([v for v in line.split(b",") if v]) for line in out.splitlines())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--workdir", default="/tmp/dcp-lua-bench")
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant (best is kept)")
    args = ap.parse_args(argv)

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    big = work / f"big-{args.size_mb}mb.pcap"
    t0 = time.perf_counter()
    if not big.exists():
        messages = build(big, args.size_mb)
        print(f"built {big} ({big.stat().st_size / 1e6:.1f} MB, {messages} messages) in "
              f"{time.perf_counter() - t0:.1f} s")
    else:
        print(f"reusing {big} ({big.stat().st_size / 1e6:.1f} MB)")

    runs = {
        "built-in": [TSHARK, "-r", str(big), *COMMON, "-d", "tcp.port==11209,couchbase",
                     "-T", "fields", "-e", "couchbase.opcode"],
        "lua": [TSHARK, "-r", str(big), "-X", f"lua_script:{LUA}", *COMMON,
                "-T", "fields", "-e", "dcp.opcode"],
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, cmd in runs.items():
            results[name].append(timed(cmd))
    pdus = {name: count_values([*cmd, "-E", "occurrence=a", "-E", "aggregator=,"])
            for name, cmd in runs.items()}
    best, cpu = {}, {}
    for name, cmd in runs.items():
        best[name] = min(w for w, _ in results[name])
        cpu[name] = min(c for _, c in results[name])
        print(f"{name:9s} wall {best[name]:7.2f} s  cpu {cpu[name]:7.2f} s  "
              f"({cpu[name] / max(pdus[name], 1) * 1e6:5.1f} us/message)   {' '.join(cmd[1:])}")
    print(f"PDUs shown: built-in {pdus['built-in']}, lua {pdus['lua']}")
    print(f"ratio lua / built-in: wall {best['lua'] / best['built-in']:.2f}x, "
          f"cpu {cpu['lua'] / cpu['built-in']:.2f}x")
    print(f"tshark: {subprocess.run([TSHARK, '-v'], capture_output=True, text=True, check=False).stdout.splitlines()[0]}; "
          f"cpus: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
