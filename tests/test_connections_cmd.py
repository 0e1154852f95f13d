"""``dcpdissect connections``: one record per MCBP connection; its tcp.stream, frames, bytes
and duration are tshark's own, its close is the FIN or RST tshark shows."""

import csv
import io
import json
import subprocess
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from dcpdissect.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def records(capsys, path, *options) -> list[dict]:
    assert main(["connections", str(path), "--format", "jsonl", *options]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def tshark_streams(path) -> dict:
    """tcp.stream -> {"ports": {src port: [frames, bytes]}, "frames": {frame numbers},
    "times": [...]} as tshark numbers and counts them."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", "udp.port==8472,vxlan", "-T", "fields",
         "-e", "frame.number", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "frame.len",
         "-e", "frame.time_epoch"], capture_output=True, text=True, check=True).stdout
    streams: dict = {}
    for line in out.splitlines():
        frame, stream, sport, length, epoch = line.split("\t")
        if not stream:
            continue
        s = streams.setdefault(int(stream.split(",")[-1]), {
            "ports": defaultdict(lambda: [0, 0]), "frames": set(), "times": []})
        s["frames"].add(int(frame))
        s["ports"][int(sport.split(",")[-1])][0] += 1
        s["ports"][int(sport.split(",")[-1])][1] += int(length)
        s["times"].append(Decimal(epoch))
    return streams


@pytest.mark.tshark
@pytest.mark.parametrize("sample", [
    "samples/identity-restart-correct.pcap",    # two connections, one reconnect
    "samples/ports-heuristic.pcap",             # non-MCBP conversations take numbers too
    "samples/pcapng/tls13-late-dsb.pcapng",     # conn 1 is tcp.stream 1 (TLS before it)
    "samples/encap/vxlan-8472.pcap",            # inside VXLAN (UDP 8472)
    "samples/real/replication-vxlan-any.pcap",  # -i any: each segment plain and in VXLAN
    "samples/real/two-interfaces.pcapng",       # file order is not time order
    "tests/tcp_streams/port-reuse-lo.pcap",     # a new SYN on the same ports: a new stream
])
def test_tcp_stream_frames_and_bytes_are_tsharks(capsys, sample):
    path = ROOT / sample
    theirs = tshark_streams(path)
    ours = records(capsys, path, "--vxlan-port", "8472")
    assert ours and theirs
    for r in ours:
        s = theirs[r["tcp_stream"]]
        assert r["first_frame"] in s["frames"], (sample, r)
        client, server = (int(r[k].rsplit(":", 1)[1]) for k in ("client", "server"))
        assert [r["frames_c2s"], r["bytes_c2s"]] == s["ports"][client], (sample, r)
        assert [r["frames_s2c"], r["bytes_s2c"]] == s["ports"][server], (sample, r)
        assert Decimal(str(r["duration"])) == max(s["times"]) - min(s["times"])
        first_ns = int(min(s["times"]) * 1_000_000_000)
        assert int(r["ts_ns"]) == first_ns


def test_how_each_connection_ended(capsys):
    """lifecycle-legal (tshark: FIN from 11210 at frame 120, RST from client port 50704 at
    frame 92, FIN from 11209 at frame 160); identity-half-close-correct: the client's FIN
    at frame 14 is never answered before the capture ends."""
    ended = [(r["connection"], r["close_reason"], r["closed_by"], r["close_frame"])
             for r in records(capsys, SAMPLES / "lifecycle-legal.pcap")]
    assert ended == [(1, "fin", "server", 120), (2, "rst", "client", 92),
                     (3, "fin", "server", 160)]
    ended = [(r["close_reason"], r["closed_by"], r["close_frame"])
             for r in records(capsys, SAMPLES / "identity-half-close-correct.pcap")]
    assert ended == [("end", "client", 14), ("fin", "client", 30)]


def test_role_name_messages_and_the_table(capsys):
    [one, two] = records(capsys, SAMPLES / "identity-restart-correct.pcap")
    assert (one["role"], one["dcp_name"], one["messages_c2s"], one["messages_s2c"]) == \
        ("producer", "identity-demo", 2, 5)
    assert (two["close_reason"], two["closed_by"], two["close_frame"]) == ("fin", "client", 29)
    assert one["close_reason"] == "end" and one["closed_by"] is None
    assert main(["connections", str(SAMPLES / "identity-restart-correct.pcap"),
                 "--time", "relative"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:3] == ["conn", "tcp.stream", "client"]
    assert rows[2].split()[:4] == ["1", "0", "10.0.3.2:50500", "10.0.3.1:11210"]
    assert "0.000000" in rows[2] and rows[2].endswith("open at capture end")
    assert "0.050000" in rows[3] and rows[3].endswith("FIN by client (frame 29)")


def test_tunnel_column_csv_and_output_file(capsys, tmp_path):
    out = tmp_path / "conns.csv"
    assert main(["connections", str(SAMPLES / "encap" / "vxlan.pcap"), "--format", "csv",
                 "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    [row] = list(csv.DictReader(io.StringIO(out.read_text())))
    assert (row["type"], row["tcp_stream"], row["tunnel"]) == \
        ("connection", "0", "VXLAN vni 42 10.9.0.1→10.9.0.2")
    assert (row["duration"], row["closed_by"], row["bucket"]) == ("0.001993000", "client", "")
    assert main(["connections", str(SAMPLES / "encap" / "vxlan.pcap")]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.split()[-1] == "tunnel"


def test_records_match_the_schema(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "jsonl-schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    seen = 0
    for sample in ("lifecycle-legal.pcap", "encap/vxlan.pcap", "tcp-mid-stream.pcap",
                   "identity-half-close-correct.pcap", "ports-heuristic.pcap"):
        for r in records(capsys, SAMPLES / sample):
            errors = list(validator.iter_errors(r))
            assert not errors, f"{sample}: {errors[0].message}"
            seen += 1
    assert seen >= 7
