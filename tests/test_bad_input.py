"""Input that cannot be read never looks clean: for a missing file, a directory, an empty
file, text, a capture cut inside its first record, one without MCBP, and the same on stdin,
every command writes no result (in jsonl one ``error`` record, nothing else), one line on
stderr naming the file (and the frame when there is one) and exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "resume-collapsed.pcap"
NO_MCBP = ROOT / "tests" / "ndpi" / "zabbix.pcap"
NO_MCBP_LAST_TS_NS = "1657872986793226000"   # its frame 236 (tshark: frame.time_epoch)


def _inputs(tmp: Path) -> dict[str, tuple[str, bytes | None, str]]:
    """case -> (file argument, bytes on stdin, what the error line must say)."""
    (tmp / "empty.pcap").write_bytes(b"")
    (tmp / "no-captures").mkdir()                   # a directory without capture files
    (tmp / "text.pcap").write_text("hello, I am a text file\n")
    (tmp / "cut.pcap").write_bytes(SAMPLE.read_bytes()[:24 + 7])   # inside frame 1's header
    return {
        "missing": (str(tmp / "missing.pcap"), None, "no such file"),
        "directory": (str(tmp / "no-captures"), None, "is a directory"),
        "empty": (str(tmp / "empty.pcap"), None, "empty file"),
        "text": (str(tmp / "text.pcap"), None, "not a pcap or pcapng file"),
        "cut header": (str(tmp / "cut.pcap"), None, "frame 1: file cut mid-record"),
        "no MCBP": (str(NO_MCBP), None, "no MCBP found"),
        "stdin empty": ("-", b"", "-: "),
        "stdin text": ("-", b"hello, I am text\n", "not a pcap or pcapng file"),
        "stdin no MCBP": ("-", NO_MCBP.read_bytes(), "no MCBP found"),
    }


COMMANDS = [("analyze", "table"), ("analyze", "jsonl"), ("analyze", "markdown"),
            ("dissect", "table"), ("dissect", "jsonl"), ("streams", "table"),
            ("streams", "jsonl"), ("connections", "table"), ("connections", "jsonl")]


@pytest.mark.parametrize("command, fmt", COMMANDS)
def test_bad_input_matrix(command, fmt, tmp_path):
    for case, (arg, stdin, says) in _inputs(tmp_path).items():
        proc = subprocess.run([sys.executable, "-m", "dcpdissect", command, arg, "--format", fmt],
                              input=stdin, capture_output=True, cwd=ROOT)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        where = f"{command} --format {fmt}, {case}"
        assert proc.returncode == 2, where
        assert "Traceback" not in err and err.count("\n") == 1, (where, err)
        assert err.startswith("dcpdissect: error: ") and says in err, (where, err)
        if arg != "-" and case != "no MCBP":
            assert arg in err, (where, err)
        if fmt == "jsonl":
            [record] = [json.loads(line) for line in out.splitlines()]
            # ts_ns: the last frame read; none when no frame was
            ts_ns = NO_MCBP_LAST_TS_NS if "no MCBP" in case else None
            assert record == {"type": "error", "ts_ns": ts_ns, "file": arg,
                              "error": err.strip().removeprefix("dcpdissect: error: ")}, where
        else:
            assert out == "", (where, out)
