"""The progress line: drawn on stderr only when enabled, cleared at the end."""

import io

from dcpdissect.analysis.run import analyze_file
from dcpdissect.reports.progress import Progress


def test_progress_is_drawn_and_cleared(samples_dir):
    out = io.StringIO()
    progress = Progress("analyzing", enabled=True, interval=0, min_bytes=0, stream=out)
    findings, summary = analyze_file(str(samples_dir / "clean-replication.pcap"), progress=progress)
    progress.close()
    text = out.getvalue()
    assert "analyzing: [" in text and "%" in text and text.endswith("\r\033[K")
    assert summary.pdus == 77


def test_progress_stays_quiet_for_small_files_and_pipes(samples_dir):
    out = io.StringIO()
    progress = Progress("analyzing", stream=out)          # StringIO is not a terminal
    analyze_file(str(samples_dir / "clean-replication.pcap"), progress=progress)
    progress.close()
    forced_small = Progress("analyzing", enabled=True, interval=0, stream=out)
    analyze_file(str(samples_dir / "clean-replication.pcap"), progress=forced_small)
    assert out.getvalue() == ""                          # below the 20 MB threshold


def _on_a_terminal(*args) -> tuple[str, str]:
    """Run ``dcpdissect ARGS`` with stderr on a pseudo-terminal and stdout on a pipe;
    (stdout, what the terminal received)."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dcpdissect", *args], stdout=subprocess.PIPE,
                            stderr=slave, text=True)
    os.close(slave)
    out = proc.stdout.read()
    proc.wait(timeout=120)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:         # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return out, seen.decode()


def test_dissect_draws_a_bar_on_a_terminal(samples_dir):
    path = str(samples_dir / "clean-replication.pcap")
    out, tty = _on_a_terminal("dissect", path, "--progress")
    assert f"\rdissecting {path}: [" in tty and "%" in tty
    assert "\r\033[K" in tty                         # cleared before the summary line
    assert tty.rstrip().endswith("0 TLS connections skipped")
    assert "DcpSnapshotMarker" in out and "dissecting" not in out
    quiet_out, quiet_tty = _on_a_terminal("dissect", path)   # below 20 MB: no bar by default
    assert "dissecting" not in quiet_tty and quiet_out == out


def test_spark_stage_bars_only_on_a_terminal():
    import os
    import pty

    from dcpdissect.reports.progress import spark_stage_progress

    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as terminal:
        assert spark_stage_progress(terminal) == {"spark.ui.showConsoleProgress": "true"}
    os.close(master)
    assert spark_stage_progress(io.StringIO()) == {}


def test_analyze_says_what_it_does_after_reading(samples_dir, tmp_path):
    """After the bar: the report being written, then the evidence bundle, then the plots,
    each line cleared before what follows is said."""
    path = str(samples_dir / "rollback-violations.pcap")
    bundle, plots = tmp_path / "bundle", tmp_path / "plots"
    out, tty = _on_a_terminal("analyze", path, "--progress", "--format", "html", "-o",
                              str(tmp_path / "r.html"), "--evidence", str(bundle),
                              "--plot", str(plots), "--fail-on", "never")
    assert out == ""
    said = [tty.index(f"\ranalyzing {path}: ["),
            tty.index(f"\r\033[Kanalyzing {path}: writing the html report..."),
            tty.index(f"\r\033[Kanalyzing {path}: writing the evidence bundle {bundle}..."),
            tty.index(f"evidence written to {bundle}"),
            tty.index(f"\r\033[Kanalyzing {path}: plotting the timelines into {plots}..."),
            tty.index("timeline files written")]
    assert said == sorted(said)
    assert tty.index("\r\033[K", said[2] + 1) < said[3]
    assert tty.index("\r\033[K", said[4] + 1) < said[5]
