"""The plugin's DCP streams statistics (tshark -z dcp,streams; Statistics > DCP Streams in the
GUI) give per stream what ``dcpdissect streams`` gives: its request and answer, markers,
items, first and last seqno and last snapshot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "lua" / "dcpdissect.lua"
SAMPLES = ["resume-collapsed.pcap", "clean-replication.pcap", "stream-markers.pcap",
           "rollback-correct.pcap", "lifecycle-legal.pcap", "stream-oso.pcap"]
COLUMNS = ("connection", "vb", "sid", "requested", "answer", "markers", "items", "seqnos",
           "last snapshot", "end")


def lua_streams(sample: Path) -> list[dict]:
    out = subprocess.run(["tshark", "-q", "-r", str(sample), "-X", f"lua_script:{PLUGIN}",
                          "-o", "tcp.reassemble_out_of_order:TRUE", "-z", "dcp,streams"],
                         capture_output=True, text=True, check=True).stdout
    lines = out[out.index("DCP streams: "):].splitlines()
    count, header, rows = int(lines[0].split(": ")[1]), lines[1], lines[2:]
    starts = [header.index(c) for c in COLUMNS] + [None]
    assert len(rows) == count
    return [{c: row[starts[i]:starts[i + 1]].strip() for i, c in enumerate(COLUMNS)}
            for row in rows]


def python_streams(sample: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "dcpdissect", "streams", str(sample), "--format",
                          "jsonl"], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return [r for r in map(json.loads, out.splitlines()) if r.get("type") == "stream"]


@pytest.mark.tshark
@pytest.mark.parametrize("name", SAMPLES)
def test_streams_statistics_agree_with_dcpdissect_streams(name):
    sample = ROOT / "samples" / name
    mine = defaultdict(list)        # a (connection, vb, sid) has a stream per request
    for s in lua_streams(sample):
        mine[(s["connection"], s["vb"], s["sid"])].append(s)
    theirs = python_streams(sample)
    assert theirs, "the sample has streams"
    for r in theirs:
        key = (f"{r['client']} -> {r['server']}", str(r["vbucket"]),
               "-" if r["stream_id"] is None else str(r["stream_id"]))
        s = mine[key].pop(0)
        items = sum(n for op, n in r["items"].items() if op != "DcpSnapshotMarker")
        assert int(s["markers"]) == r["markers"], key
        assert int(s["items"]) <= items, key        # items: the stream's data messages
        if r["first_seqno"] is not None:
            assert s["seqnos"] == f"{r['first_seqno']}..{r['last_seqno']}", key
        if r["snapshot_start_seqno"] is not None:
            assert s["last snapshot"] == f"[{r['snapshot_start_seqno']},{r['snapshot_end_seqno']}]"
        if r["req_start_seqno"] is not None:
            m = re.match(r"start=(\d+) end=(\w+) snap=\[(\d+),(\d+)\] uuid=(\d+)$",
                         s["requested"])
            assert m, s["requested"]
            assert m.group(1) == r["req_start_seqno"] and m.group(3) == r["req_snap_start_seqno"]
            assert m.group(5) == r["req_vbucket_uuid"]
        if r["answer"] == "success":
            assert s["answer"].startswith("success"), key
        elif r["answer"] == "rollback":
            assert s["answer"] == f"rollback to {r['rollback_seqno']}", key
    left = [key for key, rest in mine.items() if rest]
    assert not left, f"streams only the plugin saw: {left}"
