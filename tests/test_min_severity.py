"""--min-severity keeps the findings at or above a severity, in every format of analyze and
in the pipeline; the counts are those of the full jsonl at each level."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = "samples/controls-violations.pcap"        # errors, warnings and infos
LEVELS = {"info": {"info", "warning", "error"}, "warning": {"warning", "error"},
          "error": {"error"}}


def analyze(*args) -> str:
    return subprocess.run([sys.executable, "-m", "dcpdissect", "analyze", SAMPLE, *args,
                           "--fail-on", "never"], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout


def test_every_format_keeps_the_findings_at_or_above_the_level():
    full = Counter(json.loads(x)["severity"] for x in analyze("--format", "jsonl").splitlines()
                   if "severity" in x)
    assert set(full) == {"info", "warning", "error"}
    for level, kept in LEVELS.items():
        want = sum(n for sev, n in full.items() if sev in kept)
        jsonl = [json.loads(x) for x in analyze("--format", "jsonl", "--min-severity",
                                                 level).splitlines()]
        assert len([r for r in jsonl if "severity" in r]) == want
        assert {r["severity"] for r in jsonl if "severity" in r} == kept
        table = analyze("--min-severity", level)
        assert sum(table.count(f"  {sev}  ") for sev in full) >= len(kept)
        assert all(f"  {sev}  " not in table for sev in set(full) - kept), level
        markdown = analyze("--format", "markdown", "--min-severity", level)
        assert markdown.count("\n### frame ") == want, level


@pytest.mark.spark
@pytest.mark.slow
def test_the_pipeline_keeps_the_findings_at_or_above_the_level(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "pipeline", SAMPLE, "--out",
                           str(tmp_path / "t"), "--master", "local[1]", "--min-severity", "error",
                           "--fail-on", "never"], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert " error " in proc.stdout and " warning " not in proc.stdout
    assert " info " not in proc.stdout
