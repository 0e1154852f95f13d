"""Connections named in every output (legend: client and server ip:port, role, bucket,
DcpOpen name) and table times as absolute ISO 8601, relative or delta. Expected values are
read off the samples' bytes with tshark's own dissector, not with our code."""

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from dcpdissect.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def run(capsys, *argv) -> str:
    main([str(a) for a in argv])
    return capsys.readouterr().out


def _tshark(path, *fields, filt):
    out = subprocess.run(["tshark", "-r", str(path), "-2", "-d", "tcp.port==11210,couchbase",
                          "-Y", filt, "-T", "fields", *sum((["-e", f] for f in fields), [])],
                         capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]




@pytest.mark.tshark
def test_dissect_legend_matches_tshark(capsys):
    """identity-two-buckets: four connections, two buckets; the legend's endpoints,
    buckets and DcpOpen names are those tshark reads from the SelectBucket and DcpOpen
    requests of each TCP stream."""
    path = SAMPLES / "identity-two-buckets.pcap"
    out = run(capsys, "dissect", path)
    legend = [line.split() for line in out[out.index("\nconnections\n"):].splitlines()[4:]]
    select = _tshark(path, "tcp.srcport", "couchbase.key", filt="couchbase.opcode == 0x89 "
                     "&& couchbase.magic == 0x80")
    opens = _tshark(path, "ip.src", "tcp.srcport", "ip.dst", "tcp.dstport", "couchbase.key",
                    filt="couchbase.opcode == 0x50 && couchbase.magic == 0x80")
    assert len(legend) == len(opens) == 4
    bucket_of = {int(port): key for port, key in select}
    for row, (src, sport, dst, dport, name) in zip(legend, opens):
        conn, client, server, role, bucket, dcp_name, _first = row
        assert client == f"{src}:{sport}" and server == f"{dst}:{dport}"
        assert dcp_name == name and bucket == bucket_of[int(sport)] and role == "producer"
    assert {row[4] for row in legend} == {"bucket-a", "bucket-b"}


def test_findings_jsonl_carry_their_connection(capsys):
    lines = run(capsys, "analyze", SAMPLES / "resume-collapsed.pcap", "--format",
                "jsonl").splitlines()
    info = json.loads(lines[0])["connection_info"]
    assert info == {"connection": 2, "client": "10.0.2.2:50431", "server": "10.0.2.1:11210",
                    "role": "producer", "bucket": None, "dcp_name": "resume-demo",
                    "first_frame": 17, "time": "2023-11-14T22:13:20.050000000Z",
                    "start_captured": True}


def test_analyze_table_names_the_connections_of_findings(capsys):
    out = run(capsys, "analyze", SAMPLES / "resume-collapsed.pcap")
    legend = out[out.index("connections\n"):].splitlines()
    # the finding is on connection 2 and cites connection 1 (the previous stream)
    assert [line.split()[0] for line in legend[3:]] == ["1", "2"]
    assert "10.0.2.2:50431" in legend[4] and "resume-demo" in legend[4]


def test_markdown_names_the_connection(capsys):
    out = run(capsys, "analyze", SAMPLES / "resume-collapsed.pcap", "--format", "markdown")
    assert "10.0.2.2:50431 → 10.0.2.1:11210 (producer" in out


def test_mid_stream_connection_has_no_role(capsys):
    out = run(capsys, "dissect", SAMPLES / "tcp-mid-stream.pcap")
    legend = out[out.index("\nconnections\n"):].splitlines()[4:]
    assert legend and all(row.split()[3:6] == ["-", "-", "-"] for row in legend)


@pytest.mark.tshark
@pytest.mark.parametrize("mode,field", [("absolute", "frame.time_epoch"),
                                        ("relative", "frame.time_relative"),
                                        ("delta", "frame.time_delta_displayed")])
def test_table_times_match_tshark(capsys, mode, field):
    """Each dissect row's time equals tshark's for the row's last frame: the epoch for
    absolute (rendered as ISO 8601 UTC), seconds since the first frame for relative, and
    for delta the difference to the previous row."""
    path = SAMPLES / "clean-replication.pcap"
    out = run(capsys, "dissect", path, "--time", mode, "--opcode", "DcpSnapshotMarker")
    table = out[:out.index("\nconnections\n")]
    rows = [line.split() for line in table.splitlines()[2:] if line and line[0].isdigit()]
    frames = [int(r[0].split("-")[-1].split(",")[-1]) for r in rows]
    assert len(frames) >= 3
    if mode == "delta":
        filt = "frame.number in {" + ",".join(map(str, frames)) + "}"
        want = [float(x[0]) for x in _tshark(path, field, filt=filt)]
        want[0] = 0.0       # the first row has no previous row
    else:
        times = {int(n): t for n, t in _tshark(path, "frame.number", field, filt="frame")}
        want = [times[f] for f in frames]
    for row, expected in zip(rows, want):
        got = row[1]
        if mode == "absolute":
            stamp = dt.datetime.fromtimestamp(float(expected), dt.timezone.utc)
            assert got == stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), (got, expected)
        else:
            assert abs(float(got) - float(expected)) < 1e-6, (got, expected)
