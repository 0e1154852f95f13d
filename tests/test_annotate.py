"""``analyze --annotate OUT.pcapng``: a copy of the capture with one packet comment
``[rule] message`` per finding on each of its frames, read back with the real tshark
(``frame.comment``), and shown by the Lua plugin under its "dcpdissect findings" tree."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import RULES

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
LUA = ROOT / "lua" / "dcpdissect.lua"

pytestmark = pytest.mark.tshark


def analyze(*args, check_rc=None):
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "analyze", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def tshark(path, *args) -> str:
    proc = subprocess.run(["tshark", "-r", str(path), *args], capture_output=True, text=True,
                          check=True, timeout=120)
    return proc.stdout


def frames_matching(path, display_filter: str, *extra) -> list[int]:
    out = tshark(path, *extra, "-Y", display_filter, "-T", "fields", "-e", "frame.number")
    return [int(n) for n in out.split()]


def test_resume_collapsed_comment_on_its_frame(tmp_path):
    out = tmp_path / "annotated.pcapng"
    proc = analyze(SAMPLES / "resume-collapsed.pcap", "--annotate", out, check_rc=1)
    assert f"annotated capture written to {out}: 34 frames, 1 with finding comments" in proc.stderr
    assert frames_matching(out, 'frame.comment contains "resume-collapsed"') == [28]
    comment = tshark(out, "-Y", "frame.number == 28", "-T", "fields", "-e", "frame.comment")
    assert comment.startswith("[resume-collapsed-snapshot] resume of vb 0 sends snapshot [3,3] "
                              "start 3; the previous stream (connection 1) stopped at 3")
    assert frames_matching(out, "frame.comment") == [28]


def test_every_finding_on_exactly_its_frames(tmp_path):
    """A sample with several rules, two of them on one frame: tshark lists each rule's
    comment on exactly the frames analyze names for it."""
    out = tmp_path / "annotated.pcapng"
    proc = analyze(SAMPLES / "rollback-violations.pcap", "--format", "jsonl", "--annotate",
                   out, "--fail-on", "never", check_rc=0)
    expected: dict[str, set[int]] = defaultdict(set)
    per_frame: dict[int, int] = defaultdict(int)
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if "rule" not in rec:
            continue
        frames = set(rec["frames"]) | ({rec["frame"]} if rec["frame"] else set())
        expected[rec["rule"]] |= frames
        for n in frames:
            per_frame[n] += 1
    assert len(expected) >= 5
    for rule, frames in expected.items():
        assert frames_matching(out, f'frame.comment contains "[{rule}]"') == sorted(frames), rule
    assert frames_matching(out, "frame.comment") == sorted(per_frame)
    shared = [n for n, count in per_frame.items() if count > 1]
    assert shared, "the sample should have a frame with two findings"
    comments = tshark(out, "-Y", f"frame.number == {shared[0]}", "-T", "fields",
                      "-e", "frame.comment", "-E", "occurrence=a", "-E", "aggregator=\x1f")
    assert len(comments.rstrip("\n").split("\x1f")) == per_frame[shared[0]]


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["pcapng-multi-interface.pcapng", "sll2.pcap",
                                    "clean-replication.pcap.gz"])
def test_frames_copied_as_captured(tmp_path, sample):
    """Timestamps (to the nanosecond), link types, captured and original lengths and bytes
    are those of the input, whatever its format."""
    out = tmp_path / "copy.pcapng"
    analyze(SAMPLES / sample, "--annotate", out, "--fail-on", "never", check_rc=0)
    fields = ["-T", "fields", "-e", "frame.number", "-e", "frame.time_epoch", "-e", "frame.len",
              "-e", "frame.cap_len", "-e", "frame.encap_type", "-e", "frame.md5_hash",
              "-o", "frame.generate_md5_hash:TRUE"]
    src = tshark(SAMPLES / sample, *fields)
    assert src.count("\n") > 5
    assert tshark(out, *fields) == src
    assert out.read_bytes()[:4] == b"\n\r\r\n"      # a pcapng section header block


def test_lua_plugin_shows_the_findings_tree(tmp_path):
    out = tmp_path / "annotated.pcapng"
    analyze(SAMPLES / "resume-collapsed.pcap", "--annotate", out, check_rc=1)
    lua = ["-X", f"lua_script:{LUA}"]
    detail = tshark(out, *lua, "-V", "-Y", "frame.number == 28")
    tree = detail[detail.index("dcpdissect findings"):]
    assert "Finding: [resume-collapsed-snapshot] resume of vb 0" in tree
    assert "[Rule: resume-collapsed-snapshot]" in tree
    # tshark marks the long expert line "[truncated]"; the rule is an error
    assert "Expert Info (Error/Protocol): [resume-collapsed-snapshot] resume of vb 0" in tree
    assert "[Severity: error]" in tree
    experts = tshark(out, *lua, "-Y", "frame.number == 28", "-T", "fields",
                     "-e", "_ws.expert.message")
    assert experts.startswith("[resume-collapsed-snapshot] resume of vb 0 sends snapshot [3,3]")
    assert frames_matching(out, 'dcpfindings.rule == "resume-collapsed-snapshot"', *lua) == [28]
    # frames without a comment have no such tree
    assert "dcpdissect findings" not in tshark(out, *lua, "-V", "-Y", "frame.number == 26")


def test_lua_plugin_gives_each_finding_its_rules_severity(tmp_path):
    out = tmp_path / "annotated.pcapng"
    analyze(SAMPLES / "controls-violations.pcap", "--annotate", out, check_rc=1)
    lines = tshark(out, "-X", f"lua_script:{LUA}", "-Y", "dcpfindings", "-T", "fields",
                   "-e", "dcpfindings.rule", "-e", "dcpfindings.severity",
                   "-e", "_ws.expert.severity", "-E", "occurrence=a",
                   "-E", "aggregator=|").splitlines()
    # Wireshark's expert severities: error 0x00800000, warning 0x00600000, note 0x00400000
    wireshark = {"error": "8388608", "warning": "6291456", "info": "4194304"}
    seen = set()
    for line in lines:
        rules, severities, experts = (part.split("|") for part in line.split("\t"))
        assert severities == [RULES[rule].severity for rule in rules], line
        for severity in severities:
            assert wireshark[severity] in experts, line
        seen.update(severities)
    assert seen == {"error", "warning", "info"}


def test_annotate_refuses_stdin_and_redact(tmp_path):
    out = tmp_path / "a.pcapng"
    for extra in (["-"], [SAMPLES / "resume-collapsed.pcap", "--redact"]):
        proc = analyze(*extra, "--annotate", out, check_rc=2)
        assert proc.stderr.startswith("dcpdissect: error: --annotate ")
        assert len(proc.stderr.splitlines()) == 1
        assert not out.exists()


def test_annotate_target_that_cannot_be_written(tmp_path):
    proc = analyze(SAMPLES / "resume-collapsed.pcap", "--annotate",
                   tmp_path / "no" / "such" / "dir.pcapng", check_rc=2)
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("dcpdissect: error: --annotate ") and "No such file" in last
    assert "Traceback" not in proc.stderr
