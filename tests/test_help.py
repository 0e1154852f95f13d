"""The habits of the ecosystem: ``--version``, ``python -m dcpdissect``, and every
subcommand's ``--help`` ending with examples that run as written (from a directory holding
the samples, as the repository's root does)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SUBCOMMANDS = ["dissect", "analyze", "rollback-check", "lua", "streams", "nodes"]


def run(cmd, cwd, env=None, shell=False, timeout=300):
    return subprocess.run(cmd, cwd=cwd, env=env, shell=shell, capture_output=True, text=True,
                          timeout=timeout, executable="/bin/bash" if shell else None)


def examples(sub: str) -> list[str]:
    proc = run([sys.executable, "-m", "dcpdissect", sub, "--help"], ROOT)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "\nexamples:\n" in text, f"{sub} --help has no examples"
    lines = text.split("\nexamples:\n", 1)[1].splitlines()
    commands = [line[2:] for line in lines if line.startswith("  ") and line.strip()]
    assert any(re.match(rf"(.*\| )?dcpdissect {sub}\b", c) for c in commands), commands
    return commands


def run_examples(sub: str, tmp_path: Path) -> None:
    """Every example, in order, in a scratch directory with the samples beside it; each
    exits 0 or 1 (findings) and leaves output on stdout or in the files it names."""
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "HOME": str(tmp_path / "home")}
    for command in examples(sub):
        before = set(tmp_path.rglob("*"))
        proc = run(command, tmp_path, env=env, shell=True)
        assert proc.returncode in (0, 1), f"{command}: exit {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.stdout.strip() or set(tmp_path.rglob("*")) - before, \
            f"{command}: no output and no file written"


@pytest.mark.parametrize("sub", [pytest.param(s, marks=pytest.mark.tshark) if s == "lua" else s
                                 for s in SUBCOMMANDS])
def test_help_examples_run(sub, tmp_path):
    run_examples(sub, tmp_path)


@pytest.mark.slow
@pytest.mark.spark
def test_pipeline_help_example_runs(tmp_path):
    run_examples("pipeline", tmp_path)
    assert (tmp_path / "report.md").read_text().count("# dcpdissect findings: ") == 2


def test_examples_show_what_they_promise(tmp_path):
    """Spot checks of what some examples print, from facts of the samples."""
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    out = run('echo "4369 1 4 3" | dcpdissect rollback-check failover.json 10 0', tmp_path,
              env=env, shell=True)
    assert out.returncode == 2 and "failover.json" in out.stderr      # needs the first line
    (tmp_path / "failover.json").write_text('[{"id":8738,"seq":3},{"id":4369,"seq":0}]')
    out = run('echo "4369 1 4 3" | dcpdissect rollback-check failover.json 10 0', tmp_path,
              env=env, shell=True)
    assert "Rollback:true" in out.stdout and "Requested rollback seqno:1" in out.stdout
    follow = run("dcpdissect dissect samples/rollback-correct.pcap --follow vb:3", tmp_path,
                 env=env, shell=True)
    assert "DcpStreamReq" in follow.stdout and "DcpSnapshotMarker" in follow.stdout


def test_version_and_python_m():
    expected = f"dcpdissect {version('dcpdissect')}\n"
    for cmd in ([str(BIN / "dcpdissect"), "--version"],
                [sys.executable, "-m", "dcpdissect", "--version"]):
        proc = run(cmd, ROOT)
        assert proc.returncode == 0 and proc.stdout == expected, (cmd, proc)
    proc = run([sys.executable, "-m", "dcpdissect"], ROOT)
    assert proc.returncode == 2
    assert proc.stderr.startswith("dcpdissect: error: ") and len(proc.stderr.splitlines()) == 1
