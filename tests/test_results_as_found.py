"""Results as they are found: ``analyze --format jsonl FILE`` writes a finding before the
capture ends (the progress stages after reading: tests/test_progress.py)."""

import os
import select
import subprocess
import sys
import threading
from pathlib import Path

FINDING = "resume-collapsed-snapshot"
ROOT = Path(__file__).resolve().parent.parent


def test_jsonl_from_a_file_writes_a_finding_before_the_capture_ends(samples_dir, tmp_path):
    """A named pipe given as FILE: the real kernel capture of a collapsed resume, then a
    generated replication capture of about 1500 messages, later in time (a second pcapng
    section), and the pipe held open. The finding's line must arrive while the writer still holds it open."""
    padding = tmp_path / "padding.pcap"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_capture.py"), str(padding),
                    "--size", "1MB"], check=True, capture_output=True)
    subprocess.run(["editcap", "-F", "pcapng", "-t", "100000000",        # after the sample
                    str(padding), str(padding) + "ng"], check=True)
    fifo = tmp_path / "capture.pcapng"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "dcpdissect", "analyze", "--format", "jsonl",
                             str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen, closed = threading.Event(), threading.Event()

    def write():
        with open(fifo, "wb") as pipe:
            pipe.write((samples_dir / "real" / "resume-collapsed-lo.pcapng").read_bytes())
            pipe.write(Path(str(padding) + "ng").read_bytes())
            pipe.flush()
            seen.wait(120)
        closed.set()

    writer = threading.Thread(target=write)
    writer.start()
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline().decode() if ready else ""
    open_when_read = not closed.is_set()
    seen.set()
    writer.join()
    _, err = proc.communicate(timeout=120)
    assert f'"rule":"{FINDING}"' in line, (line, err)
    assert open_when_read, "the finding came out only after the capture had ended"
    assert proc.returncode == 1, err          # an error finding: exit 1
