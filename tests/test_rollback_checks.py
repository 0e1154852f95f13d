"""Rollback checks in `analyze`: predicted decisions against the server's answers."""

import json
import subprocess
import sys

from dcpdissect.analysis.rules import RULES
from dcpdissect.analysis.run import analyze_file

ROLLBACK_RULES = {r.id for r in RULES.values() if r.family == "rollback"}


def rollback_findings(samples_dir, name):
    findings, summary = analyze_file(str(samples_dir / name))
    assert summary.error is None
    return [(f.rule, f.frame, f.vbucket) for f in findings if f.rule in ROLLBACK_RULES], findings


def test_success_where_rollback_required_is_flagged(samples_dir):
    got, findings = rollback_findings(samples_dir, "rollback-missed.pcap")
    assert got == [("rollback-missed", 14, 3)]
    f = next(f for f in findings if f.rule == "rollback-missed")
    assert f.severity == "error" and "rollback to 1" in f.message
    assert f.fields["snap_start_seqno"] == 1 and f.fields["snap_end_seqno"] == 4
    assert 12 in f.context                      # the stream request's frame is kept as context


def test_correct_rollback_is_not_flagged(samples_dir):
    got, findings = rollback_findings(samples_dir, "rollback-correct.pcap")
    assert got == []


def test_rollback_violations(samples_dir):
    got, _ = rollback_findings(samples_dir, "rollback-violations.pcap")
    assert got == [
        ("rollback-seqno-above-start", 30, 4),
        ("rollback-unexpected", 34, 5),
        ("rollback-loop", 38, 5),
        ("rollback-unexpected", 38, 5),
        ("rollback-not-applied", 44, 6),
        ("rollback-purge-seqno-not-sent", 78, 8),      # a connector with HELLO Collections
        ("rollback-not-applied", 86, 9),               # the same request again after ROLLBACK(10)
        ("rollback-missed", 92, 10),                   # success, its own log says rollback to 15
    ]


def test_legal_rollback_answers_are_not_flagged(samples_dir):
    """Two buckets on one node, FromLatest, a purge seqno that moved on after the marker, a
    collection-filtered resume below the purge seqno, the retry after ROLLBACK(0): at most
    'unsure' notes where the capture cannot show the server's purge seqno."""
    got, findings = rollback_findings(samples_dir, "rollback-legal.pcap")
    # the travel connector negotiates collections (for max_marker_version=2.2, whose markers
    # carry the purge seqno), so its resumes without purge_seqno get the note too
    assert got == [("rollback-purge-seqno-not-sent", 64, 3), ("rollback-prediction-unsure", 66, 3),
                   ("rollback-purge-seqno-not-sent", 68, 3), ("rollback-prediction-unsure", 70, 3),
                   ("rollback-purge-seqno-not-sent", 96, 4), ("rollback-prediction-unsure", 98, 4)]
    assert {f.severity for f in findings if f.rule in ROLLBACK_RULES} == {"info"}


def test_analyze_cli_exit_codes_for_rollback(samples_dir):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "dcpdissect.cli", "analyze", *args],
                              capture_output=True, text=True)
    bad = run(str(samples_dir / "rollback-missed.pcap"), "--format", "jsonl")
    assert bad.returncode == 1
    rows = [json.loads(x) for x in bad.stdout.splitlines()]
    assert any(r["rule"] == "rollback-missed" and r["frame"] == 14 for r in rows)
    good = run(str(samples_dir / "rollback-correct.pcap"))
    assert good.returncode == 0


def test_request_purge_seqno_feeds_the_model():
    from dcpdissect.analysis.rollback_checks import request_purge_seqno
    from dcpdissect.codec import decode, encode
    req = decode(encode(0x53, {"start_seqno": 5, "snap_start_seqno": 5, "snap_end_seqno": 5},
                        value=b'{"purge_seqno":"7"}'))
    assert request_purge_seqno(req) == 7
    assert request_purge_seqno(decode(encode(0x53, {}, value=b"not json"))) is None
