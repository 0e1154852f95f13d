"""Every bad path or argument is one ``dcpdissect: error:`` line
and exit 2, never a traceback; live input (stdin) streams its results, stops on SIGINT with
everything found so far, and ends quietly on a broken pipe."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = str(ROOT / "samples" / "resume-collapsed.pcap")
MARKERS = ROOT / "samples" / "stream-markers.pcap"      # findings from its first frames on
CMD = [sys.executable, "-m", "dcpdissect.cli"]


def run(*args, timeout=60):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def assert_one_error_line(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dcpdissect: error: "), lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize("args", [
    ["analyze", SAMPLE, "--evidence", "README.md"],             # a file, not a directory
    ["analyze", SAMPLE, "--evidence", "/proc/nope/x"],          # cannot be created
    ["lua", "generate", "-o", "/nonexistent/x.lua"],
    ["dissect", SAMPLE, "--opcode", "0x999"],
    ["dissect", SAMPLE, "--opcode", "-1"],
    ["dissect", SAMPLE, "--port", "99999"],
    ["analyze", SAMPLE, "--port", "99999"],
    ["analyze", SAMPLE, "--port", "0"],
    ["dissect", SAMPLE, "--vbucket", "-1"],
    ["dissect", SAMPLE, "--opcode", "stream-bogus"],
    ["lua"],
    [],
], ids=lambda a: " ".join(a).replace(str(ROOT) + "/", "") or "no-args")
def test_bad_path_or_argument_is_one_line_exit_2(args):
    assert_one_error_line(run(*args))


def test_evidence_checked_before_reading(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    proc = run("analyze", SAMPLE, "--evidence", str(target))
    assert_one_error_line(proc)
    assert "not a directory" in proc.stderr


def test_lua_install_unwritable_path():
    proc = run("lua", "install", "--path", "/proc/nope/x.lua")
    assert_one_error_line(proc)


def test_pipeline_missing_input_fails_before_spark(tmp_path):
    pytest.importorskip("pyspark")
    t0 = time.monotonic()
    proc = run("pipeline", str(tmp_path / "nope.pcap"), "--out", str(tmp_path / "out"))
    assert_one_error_line(proc)
    assert "nope.pcap" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - t0 < 30          # Spark's start-up alone takes longer


def test_valid_arguments_still_accepted():
    proc = run("dissect", SAMPLE, "--opcode", "0xff", "--port", "65535", "--vbucket", "0")
    assert proc.returncode == 0, proc.stderr


# -- live input ---------------------------------------------------------------------------

def _readline(stream, timeout):
    """One line of a pipe, or None after ``timeout`` seconds."""
    fd = stream.fileno()
    buf = b""
    end = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1)
        if not chunk:
            return None
        buf += chunk
    return buf.decode()


def _live(args):
    return subprocess.Popen([*CMD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)


def _feed_slowly(proc, data, chunk=512):
    for i in range(0, len(data), chunk):
        proc.stdin.write(data[i:i + chunk])
        proc.stdin.flush()
        time.sleep(0.01)


def _interrupt(proc):
    """SIGINT with stdin still open; the rest of stdout, stderr and the exit code."""
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)     # closes stdin only after it ended
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return out.decode(), err.decode(), proc.returncode


def test_live_dissect_jsonl_streams_and_stops_on_sigint():
    data = MARKERS.read_bytes()
    proc = _live(["dissect", "-", "--format", "jsonl"])
    try:
        _feed_slowly(proc, data[:len(data) // 2])
        first = _readline(proc.stdout, 20)            # stdin still open: no batching
        assert first is not None, "no row before the end of input"
        assert json.loads(first)["frames"]
        time.sleep(0.3)
        out, err, rc = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows, "rows decoded before SIGINT were lost"
    assert "interrupted" in err


def test_live_analyze_jsonl_streams_findings_and_sigint_keeps_them():
    data = MARKERS.read_bytes()
    proc = _live(["analyze", "-", "--format", "jsonl"])
    try:
        _feed_slowly(proc, data[:len(data) * 2 // 3])
        first = _readline(proc.stdout, 20)
        assert first is not None, "no finding before the end of input"
        assert json.loads(first)["rule"]
        time.sleep(0.3)
        out, err, rc = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    records = [json.loads(first)] + [json.loads(line) for line in out.splitlines()]
    rules = [r["rule"] for r in records if "rule" in r]
    assert len(rules) >= 2, records
    assert rc == 1, err                             # the usual code: error findings exist
    assert "interrupted" in err


def test_live_analyze_table_sigint_prints_findings_so_far():
    data = MARKERS.read_bytes()
    proc = _live(["analyze", "-"])
    try:
        _feed_slowly(proc, data[:len(data) * 2 // 3])
        header = _readline(proc.stdout, 20)
        assert header is not None and header.split()[:2] == ["frame", "time"], header
        time.sleep(0.3)
        out, err, rc = _interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    assert "data-before-marker" in out                   # a finding row and the summary
    assert "severity" in out                             # the summary table after SIGINT
    assert rc == 1, err


def test_live_dissect_table_rows_leave_before_end_of_input():
    data = MARKERS.read_bytes()
    proc = _live(["dissect", "-"])
    try:
        _feed_slowly(proc, data[:len(data) // 2])
        header = _readline(proc.stdout, 20)
        assert header is not None and header.startswith("frame(s)"), header
        out, err = proc.communicate(data[len(data) // 2:], timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.decode().count("frame(s)") == 0           # the header printed once
    assert "Traceback" not in err.decode()


@pytest.mark.parametrize("args", [["dissect", "-", "--format", "jsonl"], ["dissect", "-"],
                                  ["analyze", "-", "--format", "jsonl"]])
def test_broken_pipe_ends_quietly_on_stdin(args):
    cmd = " ".join([*CMD, *args]) + f" < {MARKERS} | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
    assert "error:" not in proc.stderr, proc.stderr
    # analyze exits 1 (findings) when its few lines all fit in the pipe before head exits
    assert proc.returncode in ((0, 1) if args[0] == "analyze" else (0,))


def test_broken_pipe_ends_quietly_on_a_big_file(tmp_path):
    cmd = " ".join([*CMD, "dissect", str(MARKERS), "--format", "jsonl"]) + " | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
