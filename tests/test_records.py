"""One record per concern, one spelling per value: typed jsonl records that join with jq,
vbucket uuids spelled in decimal by every human output, and ``rollback-check`` reading
the spellings the outputs print."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from dcpdissect.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
ROLLBACKS = SAMPLES / "rollback-violations.pcap"
RESUME = SAMPLES / "resume-collapsed.pcap"


class Run(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def dcpdissect(capsys, monkeypatch):
    """``dcpdissect ARGV`` in this process, ``stdin`` its standard input."""
    def run(*argv, stdin: str = "") -> Run:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return Run(code, out, err)
    return run


@pytest.fixture
def records(dcpdissect):
    def run(*argv) -> list[dict]:
        return [json.loads(line) for line in dcpdissect(*argv).stdout.splitlines()]
    return run


# rollback-violations.pcap's stream requests, as tshark decodes them (couchbase.vbucket,
# couchbase.extras.vbucket_uuid): frame -> (vbucket, uuid)
REQUESTS = {28: (4, 0xA), 32: (5, 0xA), 36: (5, 0xA), 40: (6, 0xA), 44: (6, 0xA),
            48: (7, 0xB), 52: (8, 0), 72: (8, 0), 78: (8, 0xC), 82: (9, 0xA), 86: (9, 0xA),
            90: (10, 0xA)}

JOIN = """inputs | . as $f | $s[]
  | select(.connection == $f.connection and .vbucket == $f.vbucket
           and .req_vbucket_uuid == $f.vbucket_uuid and .request_frame == $f.request_frame)
  | [$f.rule, $f.frame, .vbucket, .req_vbucket_uuid, .request_frame, .answer] | @json"""


def test_jq_joins_findings_and_streams_on_vbucket_uuid(dcpdissect, tmp_path):
    """Each finding of the sample joins, with jq, the one stream it concerns: the request
    frames and uuids below are tshark's decoding of the sample, the rules its README's."""
    findings, streams = tmp_path / "findings.jsonl", tmp_path / "streams.jsonl"
    findings.write_text(dcpdissect("analyze", ROLLBACKS, "--format", "jsonl").stdout)
    streams.write_text(dcpdissect("streams", ROLLBACKS, "--format", "jsonl").stdout)
    proc = subprocess.run(["jq", "-r", "-n", "--slurpfile", "s", str(streams), JOIN,
                           str(findings)], capture_output=True, text=True, check=True)
    joined = [tuple(json.loads(line)) for line in proc.stdout.splitlines()]
    assert joined == [
        ("rollback-seqno-above-start", 30, 4, "10", 28, "rollback"),
        ("rollback-unexpected", 34, 5, "10", 32, "rollback"),
        ("rollback-loop", 38, 5, "10", 36, "rollback"),
        ("rollback-unexpected", 38, 5, "10", 36, "rollback"),
        ("rollback-not-applied", 44, 6, "10", 44, "rollback"),
        ("rollback-purge-seqno-not-sent", 78, 8, "12", 78, "success"),
        ("rollback-not-applied", 86, 9, "10", 86, "rollback"),
        ("rollback-missed", 92, 10, "10", 90, "success"),
    ]
    for rule, _frame, vb, uuid, request, _answer in joined:
        assert REQUESTS[request] == (vb, int(uuid)), rule
    # on the uuid alone, a finding meets every request of its history: the retries of vb 5
    proc = subprocess.run(["jq", "-n", "--slurpfile", "s", str(streams),
                           '[inputs | select(.rule == "rollback-loop") | . as $f | $s[]'
                           ' | select(.vbucket == $f.vbucket and .req_vbucket_uuid == '
                           '$f.vbucket_uuid) | .request_frame]', str(findings)],
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == [32, 36]


def test_every_finding_of_a_stream_names_its_request(records):
    """Every finding of resume-collapsed is on the resumed stream (frame 28's request,
    uuid 0x1111 as tshark decodes it); the records of all three commands carry type and
    ts_ns, ts_ns the frame's time (frame 28: 1700000000.050011 in tshark)."""
    found = records("analyze", RESUME, "--format", "jsonl")
    assert [(f["type"], f["rule"], f["vbucket_uuid"], f["request_frame"], f["ts_ns"])
            for f in found] == [("finding", "resume-collapsed-snapshot", "4369", 28,
                                 "1700000000050011000")]
    streams = records("streams", RESUME, "--format", "jsonl")
    assert [(s["type"], s["request_frame"], s["ts_ns"]) for s in streams] == [
        ("stream", 8, "1700000000000007000"), ("stream", 28, "1700000000050011000")]
    messages = records("dissect", RESUME, "--format", "jsonl")
    assert {m["type"] for m in messages} == {"message"}
    assert all(isinstance(m["ts_ns"], str) for m in messages)


def test_a_finding_outside_any_stream_has_no_uuid(records):
    """flow-violations: the findings on vb 2 and 3 name their streams' requests (frames 24
    and 59, uuid 0, as tshark decodes them with -d tcp.port==11209,couchbase for 59); the
    connection-level ones (buffer acks, noops, idle consumers, stray responses) fall in no
    stream: vbucket_uuid and request_frame are null, never a guess."""
    found = [f for f in records("analyze", SAMPLES / "flow-violations.pcap", "--format",
                                "jsonl") if f["type"] == "finding"]
    by_vb = {2: ("0", 24), 3: ("0", 59)}
    loose = {"buffer-ack-exceeds-sent", "noop-interval-exceeded", "response-without-request",
             "consumer-idle-timeout"}
    assert {f["rule"] for f in found} >= loose
    for f in found:
        expected = (None, None) if f["rule"] in loose else by_vb[f["vbucket"]]
        assert (f["vbucket_uuid"], f["request_frame"]) == expected, f


def test_the_uuid_reads_the_same_in_every_human_output(dcpdissect, records):
    """resume-collapsed's uuid 0x1111 (tshark) is 4369 in dissect's rows, the streams table,
    the finding's Markdown and HTML reports and rollback-check; no output spells it hex."""
    outputs = {
        "dissect": dcpdissect("dissect", RESUME).stdout,
        "streams": dcpdissect("streams", RESUME).stdout,
        "markdown": dcpdissect("analyze", RESUME, "--format", "markdown").stdout,
        "html": dcpdissect("analyze", RESUME, "--format", "html").stdout,
    }
    assert "uuid=4369" in outputs["dissect"]
    assert "failover_log=[8738@3, 4369@0]" in outputs["dissect"]
    assert "uuid 4369" in outputs["streams"]
    assert '"vbucket_uuid":"4369"' in outputs["markdown"]     # the finding's JSON block
    assert "uuid 4369" in outputs["html"]
    for name, text in outputs.items():
        assert not re.search(r"0x0*(1111|2222)\b", text), name
    # the rollback rules' messages and fields: rollback-violations' uuid 0xa is 10
    found = records("analyze", ROLLBACKS, "--format", "jsonl")
    missed = next(f for f in found if f["rule"] == "rollback-missed")
    assert missed["message"].startswith("success for uuid 10 start 20")
    assert missed["fields"]["vbucket_uuid"] == "10"


def test_markdown_json_block_writes_seqnos_as_jsonl_does(dcpdissect):
    text = dcpdissect("analyze", RESUME, "--format", "markdown").stdout
    block = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    record = json.loads(block)
    assert record["fields"]["start_seqno"] == "3" and record["ts_ns"] == "1700000000050011000"


# -- rollback-check -------------------------------------------------------------------------

SPELLINGS = [
    '[{"id":8738,"seq":3},{"id":4369,"seq":0}]',              # JSON numbers (humpty_dumpty)
    '[{"id":"8738","seq":"3"},{"id":"4369","seq":"0"}]',      # jsonl's decimal strings
    '[{"id":"0x2222","seq":3},{"id":"0x1111","seq":"0x0"}]',  # Wireshark's hex
]


def test_rollback_check_reads_decimal_and_hex_in_both_inputs(dcpdissect, tmp_path,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    for table in SPELLINGS:
        (tmp_path / "failover.json").write_text(table)
        proc = dcpdissect("rollback-check", "failover.json", "10", "0",
                          stdin="4369 1 4 3\n0x1111 1 4 3\n0x1111 0x1 0x4 0x3\n")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == (
            "Simulating behaviour of VBucket with highSeqno: 10, purgeSeqno:0, failoverTable:\n"
            "[\n"
            '    {"id":8738,"seq":3}\n'
            '    {"id":4369,"seq":0}\n'
            "]\n"
            "\n" + 3 * (
                "Testing UUID:4369 snapshot:{1,4} start:3\n"
                "  Rollback:true\n"
                "  Requested rollback seqno:1\n"
                "  Reason: consumer ahead of producer - producer upper at 3\n")), table


@pytest.mark.parametrize("table, argv, says", [
    ('[{"id":"0x2222x","seq":3}]', ("10", "0"),
     "failover.json: entry 0 id: '0x2222x' is not a number from 0 to 2^64-1 in decimal or 0x hex"),
    ('[{"id":-1,"seq":3}]', ("10", "0"), "failover.json: entry 0 id: -1 is not a number"),
    ('[{"id":1.5,"seq":3}]', ("10", "0"), "failover.json: entry 0 id: 1.5 is not a number"),
    ('[{"id":1,"seq":3}', ("10", "0"), "failover.json: not JSON"),
    ('[{"id":1,"seq":3}]', ("ten", "0"), "HIGH_SEQNO: 'ten' is not a number"),
    ('[{"id":1,"seq":3}]', ("10",), "give FAILOVER.json HIGH_SEQNO PURGE_SEQNO, or --capture"),
    ('[{"id":1,"seq":3}]', ("10", "0", "--capture", RESUME, "--vbucket", "0"),
     "--capture takes the failover table"),
])
def test_rollback_check_says_what_is_wrong_in_one_line(table, argv, says, dcpdissect, tmp_path,
                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "failover.json").write_text(table)
    proc = dcpdissect("rollback-check", "failover.json", *argv, stdin="4369 1 4 3\n")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("dcpdissect: error: ")
    assert says in proc.stderr and "invalid literal" not in proc.stderr


def test_rollback_check_takes_a_vbucket_from_a_capture(dcpdissect):
    """resume-collapsed, as tshark decodes it: the last failover log of vb 0 is frame 30's
    DcpStreamReq response [0x2222@3, 0x1111@0]; the highest seqno sent is 5 (frame 30); no
    disk marker. The resume the consumer should have sent (uuid 4369, snapshot [1,4],
    start 3) must roll back to 1."""
    proc = dcpdissect("rollback-check", "--capture", RESUME, "--vbucket", "0",
                      stdin="4369 1 4 3\n0x1111 3 3 3\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "Simulating behaviour of VBucket with highSeqno: 5, purgeSeqno:0, failoverTable:\n"
        "[\n"
        '    {"id":8738,"seq":3}\n'
        '    {"id":4369,"seq":0}\n'
        "]\n"
        "\n"
        "Testing UUID:4369 snapshot:{1,4} start:3\n"
        "  Rollback:true\n"
        "  Requested rollback seqno:1\n"
        "  Reason: consumer ahead of producer - producer upper at 3\n"
        "Testing UUID:4369 snapshot:{3,3} start:3\n"
        "  Rollback:false\n")
    err = proc.stderr
    assert (f"{RESUME}: vb 0 on 10.0.2.1:11210: failover log of frame 30 (DcpStreamReq "
            "response, 2 entries)") in err
    assert "high seqno 5: at least, the highest seqno its producers sent (frame 30)" in err
    assert "purge seqno 0: no disk snapshot marker" in err
    assert "only as lower bounds" in err
    proc = dcpdissect("rollback-check", "--capture", RESUME, "--vbucket", "0", "--format",
                      "jsonl", stdin="4369 1 4 3\n")
    assert json.loads(proc.stdout) == {"type": "rollback_check", "ts_ns": None, "vbucket_uuid": "4369",
                      "snap_start_seqno": "1", "snap_end_seqno": "4", "start_seqno": "3",
                      "high_seqno": "5", "purge_seqno": "0", "rollback": True,
                      "rollback_seqno": "1",
                      "reason": "consumer ahead of producer - producer upper at 3",
                      "failover_log_frame": 30, "high_seqno_frame": 30,
                      "purge_seqno_frame": None}


def test_rollback_check_capture_without_the_vbucket(dcpdissect):
    proc = dcpdissect("rollback-check", "--capture", RESUME, "--vbucket", "9", stdin="")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"dcpdissect: error: {RESUME}: no failover log of vb 9 (no "
                           "successful DcpGetFailoverLog or DcpStreamReq response for it)\n")


def test_rollback_check_high_seqno_from_the_failover_log(dcpdissect):
    """rollback-violations' vb 4 (tshark): frame 14 is a DcpGetFailoverLog response
    [0xb@10, 0xa@0]; no producer message of vb 4 follows, so the high seqno is at least the
    log's highest entry, 10, from that frame."""
    proc = dcpdissect("rollback-check", "--capture", ROLLBACKS, "--vbucket", "4", "--format",
                      "jsonl", stdin="10 1 10 10\n")
    record = json.loads(proc.stdout)
    assert (record["high_seqno"], record["high_seqno_frame"], record["failover_log_frame"],
            record["rollback"]) == ("10", 14, 14, False)
    assert ("high seqno 10: at least, the failover log's highest entry (frame 14); no higher "
            "seqno was sent") in proc.stderr
