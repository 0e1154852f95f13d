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
    assert summary.pdus == 49


def test_progress_stays_quiet_for_small_files_and_pipes(samples_dir):
    out = io.StringIO()
    progress = Progress("analyzing", stream=out)          # StringIO is not a terminal
    analyze_file(str(samples_dir / "clean-replication.pcap"), progress=progress)
    progress.close()
    forced_small = Progress("analyzing", enabled=True, interval=0, stream=out)
    analyze_file(str(samples_dir / "clean-replication.pcap"), progress=forced_small)
    assert out.getvalue() == ""                          # below the 20 MB threshold
