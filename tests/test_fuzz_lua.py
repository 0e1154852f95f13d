"""The Lua dissector under tshark over a few hundred fuzzed captures: no Lua errors."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dcpdissect.fuzz.gen import make_input

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua" / "dcpdissect.lua"
FILES = 200
MAX_BYTES = 150_000          # keeps the run to about a minute


def tshark(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tshark", "-r", str(path), "-X", f"lua_script:{LUA}",
                           "-o", "tcp.reassemble_out_of_order:TRUE", *extra],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.tshark
def test_fuzzed_captures_raise_no_lua_errors(tmp_path):
    paths, kinds = [], set()
    n = 0
    while len(paths) < FILES:
        inp = make_input(11, n, pdu_share=0.0)
        n += 1
        if len(inp.data) > MAX_BYTES:
            continue
        path = tmp_path / f"fuzz-{n:04d}-{inp.how}.pcap"
        path.write_bytes(inp.data)
        paths.append(path)
        kinds.add(inp.how)
    assert {"mutate-file", "stream", "seq-jump", "garbage-tcp", "ooo-storm"} <= kinds

    def run(path):
        return tshark(path, "-Y", "_ws.lua.error || dcp.expert.internal", "-T", "fields",
                      "-e", "frame.number", "-e", "_ws.lua.error")

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, paths))
    bad = []
    for path, proc in zip(paths, results):
        lua_lines = [line for line in proc.stderr.splitlines() if "lua" in line.lower()]
        if proc.stdout.strip() or lua_lines:
            bad.append((path.name, proc.stdout[:300], lua_lines[:3]))
    assert bad == []
    # the dissector really ran on them
    shown = sum(len(tshark(p, "-Y", "dcp", "-T", "fields", "-e", "frame.number").stdout.split())
                for p in paths[:20])
    assert shown > 50
