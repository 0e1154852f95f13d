"""Following a stream: ``dissect --follow``, ``--vbucket`` with the responses of its
requests, ``--conn``, ``--stream-id``, ``--from``/``--to``; ``analyze --rule`` and
``--exclude-rule``. The expected messages are those the sample scenarios write
(dcpdissect/samples/scenarios_*.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dcpdissect.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples"


def rows(capsys, *argv) -> list[tuple]:
    """(frame, connection, direction, opcode name, vbucket or status name, opaque)."""
    assert main(["dissect", *map(str, argv), "--format", "jsonl"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [(r["frame"], r["connection"], r["direction"], r["opcode_name"],
             r["vbucket"] if r["request"] else r["status_name"], r["opaque"])
            for r in out if "opcode_name" in r]


def test_vbucket_shows_failover_logs_and_rollback_answers(capsys):
    """rollback-correct: GetFailoverLog(vb 3) and its log, the resume answered ROLLBACK(1),
    the request from 1 answered with the failover log, then the marker and mutations 2..5."""
    got = rows(capsys, SAMPLE / "rollback-correct.pcap", "--vbucket", "3")
    assert [(d, op, what, o) for _f, _c, d, op, what, o in got] == [
        ("c2s", "DcpGetFailoverLog", 3, 0x2), ("s2c", "DcpGetFailoverLog", "Success", 0x2),
        ("c2s", "DcpStreamReq", 3, 0x10), ("s2c", "DcpStreamReq", "Rollback", 0x10),
        ("c2s", "DcpStreamReq", 3, 0x11), ("s2c", "DcpStreamReq", "Success", 0x11),
        ("s2c", "DcpSnapshotMarker", 3, 0x11)] + [("s2c", "DcpMutation", 3, 0x11)] * 4


def test_follow_close_stream_and_its_response(capsys):
    """lifecycle-legal vb 2: the stream, a CloseStream, a mutation still in flight and the
    close's response."""
    got = rows(capsys, SAMPLE / "lifecycle-legal.pcap", "--follow", "vb:2")
    assert [(d, op, what, o) for _f, _c, d, op, what, o in got] == [
        ("c2s", "DcpStreamReq", 2, 0x120), ("s2c", "DcpStreamReq", "Success", 0x120),
        ("s2c", "DcpSnapshotMarker", 2, 0x120), ("s2c", "DcpMutation", 2, 0x120),
        ("c2s", "DcpCloseStream", 2, 0x121), ("s2c", "DcpMutation", 2, 0x120),
        ("s2c", "DcpCloseStream", "Success", 0x121)]


def test_follow_on_the_consumer_leg_with_buffer_acks(capsys):
    """flow-legal vb 1 (ns_server's consumer leg: the stream request server→client, the
    data client→server): the buffer acks of that connection are shown, its noops are not."""
    got = rows(capsys, SAMPLE / "flow-legal.pcap", "--follow", "vb:1")
    assert [(d, op, o) for _f, _c, d, op, _w, o in got] == [
        ("s2c", "DcpStreamReq", 0x200), ("c2s", "DcpStreamReq", 0x200),
        ("c2s", "DcpSnapshotMarker", 0x200), ("c2s", "DcpMutation", 0x200),
        ("c2s", "DcpMutation", 0x200), ("s2c", "DcpBufferAcknowledgement", 0x30),
        ("c2s", "DcpMutation", 0x200), ("s2c", "DcpBufferAcknowledgement", 0x31)]
    assert {c for _f, c, *_ in got} == {2}
    # vb 0 lives on connection 1: none of connection 2's acks
    vb0 = rows(capsys, SAMPLE / "flow-legal.pcap", "--follow", "vb:0")
    assert {c for _f, c, *_ in vb0} == {1}
    assert sum(op == "DcpBufferAcknowledgement" for _f, _c, _d, op, _w, _o in vb0) == 2


def test_stream_id_matches_the_request_value_and_frame_infos(capsys):
    """clean-replication: the connector asks for vb 5 with {"sid": 7} in the request's
    value; its data carries stream id 7 in a frame info."""
    by_sid = rows(capsys, SAMPLE / "clean-replication.pcap", "--stream-id", "7")
    followed = rows(capsys, SAMPLE / "clean-replication.pcap", "--follow", "vb:5,sid:7,conn:2")
    assert by_sid == followed
    assert [op for _f, _c, _d, op, _w, _o in by_sid] == [
        "DcpStreamReq", "DcpStreamReq", "DcpSnapshotMarker", "DcpMutation", "DcpMutation",
        "DcpDeletion", "DcpStreamEnd"]
    assert rows(capsys, SAMPLE / "clean-replication.pcap", "--follow", "vb:5,conn:1") == []


def test_conn_filter(capsys):
    got = rows(capsys, SAMPLE / "resume-collapsed.pcap", "--conn", "2")
    everything = rows(capsys, SAMPLE / "resume-collapsed.pcap")
    assert got == [r for r in everything if r[1] == 2] and got


def test_time_window_relative_and_iso(capsys):
    everything = rows(capsys, SAMPLE / "rollback-correct.pcap")
    # frames of this sample are 1 µs apart from 2023-11-14T22:13:20Z: frame n at n-1 µs
    rel = rows(capsys, SAMPLE / "rollback-correct.pcap", "--from", "0.000011", "--to", "0.000017")
    iso = rows(capsys, SAMPLE / "rollback-correct.pcap", "--from",
               "2023-11-14T22:13:20.000011+00:00", "--to", "2023-11-14T22:13:20.000017")
    assert rel == iso == [r for r in everything if 12 <= r[0] <= 18]
    assert [r[0] for r in rel] == [12, 14, 16, 18]


@pytest.mark.parametrize("argv, words", [
    (["dissect", "FILE", "--follow", "sid:3"], "vb:N is required"),
    (["dissect", "FILE", "--follow", "vb:70000"], "out of range"),
    (["dissect", "FILE", "--from", "yesterday"], "ISO 8601"),
    (["analyze", "FILE", "--rule", "rollback-mised"], "did you mean rollback-missed"),
    (["analyze", "FILE", "--exclude-rule", "nothing-like-it"], "docs/rules.md"),
])
def test_bad_filters_are_one_line_and_exit_2(argv, words):
    argv = [str(SAMPLE / "rollback-correct.pcap") if a == "FILE" else a for a in argv]
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dcpdissect: error:") and words in lines[0]


def test_analyze_rule_and_exclude_rule(capsys):
    path = str(SAMPLE / "rollback-violations.pcap")

    def rules(*extra):
        main(["analyze", path, "--format", "jsonl", "--fail-on", "never", *extra])
        return [json.loads(line)["rule"] for line in capsys.readouterr().out.splitlines()
                if '"rule"' in line]

    everything = rules()
    assert {"rollback-loop", "rollback-missed", "rollback-unexpected"} <= set(everything)
    assert rules("--rule", "rollback-loop", "--rule", "rollback-missed") == \
        [r for r in everything if r in ("rollback-loop", "rollback-missed")]
    assert rules("--exclude-rule", "rollback-unexpected") == \
        [r for r in everything if r != "rollback-unexpected"]
    assert main(["analyze", path, "--rule", "rollback-unexpected"]) == 0    # warnings only
    assert main(["analyze", path, "--rule", "rollback-missed"]) == 1
