"""The plugin in Wireshark's Qt GUI (Debian's wireshark-qt) on a virtual screen (Xvfb).

Wireshark opens captures with the plugin and a probe script (tests/lua/gui_probe.lua) that
counts, frame by frame, what the plugin dissected and every Lua error: the GUI must dissect
every DCP frame tshark finds, without one Lua error or error dialog; a plugin broken on
purpose must be caught. The Expert Information dialog and the DCP Streams window open.
Screenshots: ``python tests/gui.py docs/``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gui import PLUGIN, ROOT, TOOLS, Session

pytestmark = pytest.mark.slow
SAMPLES = ROOT / "samples"


@pytest.fixture(autouse=True)
def _tools():
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"missing {missing} (scripts/setup.sh installs wireshark-qt, xvfb, xdotool, "
                    "imagemagick)", pytrace=False)


def dcp_frames(capture: Path) -> int:
    """The frames tshark 4.0 shows with the plugin's protocol (the oracle for the GUI)."""
    out = subprocess.run(["tshark", "-r", str(capture), "-X", f"lua_script:{PLUGIN}", "-Y",
                          "dcp", "-T", "fields", "-e", "frame.number"], capture_output=True,
                         text=True, check=True).stdout
    return len(out.split())


@pytest.mark.parametrize("name", ["clean-replication.pcap", "violations-structure.pcap",
                                  "legal-server-behaviour.pcap", "cut-snaplen-128.pcap"])
def test_the_gui_dissects_every_dcp_frame_without_a_lua_error(name):
    capture = SAMPLES / name
    want = dcp_frames(capture)
    assert want > 5
    with Session(capture) as gui:
        counts = gui.counts(want)
        titles = " | ".join(gui.windows().values())
    assert counts == {"dcp": want, "errors": 0}, titles
    assert "Error" not in titles and "Lua" not in titles, titles


def test_a_lua_error_in_the_gui_is_caught(tmp_path):
    broken = tmp_path / "broken.lua"
    broken.write_text(PLUGIN.read_text().replace(
        "local function summary(m)\n", "local function summary(m)\n"
        "  if m.opcode == 0x53 then error(\"broken on purpose\") end\n", 1))
    with Session(SAMPLES / "resume-collapsed.pcap", plugin=broken) as gui:
        counts = gui.counts(dcp_frames(SAMPLES / "resume-collapsed.pcap"))
    assert counts["errors"] >= 2            # the two stream requests


def test_the_expert_information_dialog_and_the_dcp_streams_window_open(tmp_path):
    annotated = tmp_path / "annotated.pcapng"
    subprocess.run([sys.executable, "-m", "dcpdissect", "analyze",
                    str(SAMPLES / "resume-collapsed.pcap"), "--annotate", str(annotated),
                    "--fail-on", "never"], check=True, capture_output=True, cwd=ROOT)
    with Session(annotated, "-z", "expert") as gui:
        gui.counts(11)
        dialog = gui.window("Expert Information")
        gui.screenshot(tmp_path / "expert.png", dialog)
    assert (tmp_path / "expert.png").stat().st_size > 5000
    with Session(SAMPLES / "clean-replication.pcap", "-z", "dcp,streams") as gui:
        gui.counts(10)
        assert gui.window("DCP streams")
