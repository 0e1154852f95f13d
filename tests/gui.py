"""Wireshark's Qt GUI with the plugin, on a virtual screen (Xvfb), for tests and screenshots.

    python tests/gui.py docs/          # rewrite the screenshots docs/gui-*.png

A session starts Xvfb and ``wireshark -X lua_script:lua/dcpdissect.lua`` with a probe script
(tests/lua/gui_probe.lua) that counts the frames the plugin dissected and those with a Lua
error; it can resize Wireshark's windows, press keys (xdotool) and take screenshots
(ImageMagick's import).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "lua" / "dcpdissect.lua"
PROBE = ROOT / "tests" / "lua" / "gui_probe.lua"
TOOLS = ("wireshark", "Xvfb", "xdotool", "import")


class Session:
    """Wireshark on its own X display, with a fresh profile; a context manager."""

    def __init__(self, capture: Path, *args: str, display: int = 91, plugin: Path = PLUGIN):
        self.capture, self.args, self.display = capture, args, f":{display}"
        self.plugin = plugin
        self.work = Path(tempfile.mkdtemp(prefix="dcp-gui-"))
        self.probe = self.work / "probe.txt"
        self.env = dict(os.environ, DISPLAY=self.display, HOME=str(self.work),
                        XDG_RUNTIME_DIR=str(self.work), DCP_GUI_PROBE=str(self.probe))

    def __enter__(self) -> "Session":
        self.xvfb = subprocess.Popen(["Xvfb", self.display, "-screen", "0", "1600x1000x24"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        self.wireshark = subprocess.Popen(
            ["wireshark", "-X", f"lua_script:{self.plugin}", "-X", f"lua_script:{PROBE}",
             "-r", str(self.capture), *self.args], env=self.env, cwd=self.work,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc):
        for proc in (self.wireshark, self.xvfb):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def counts(self, frames: int, timeout: float = 60) -> dict[str, int]:
        """The probe's counts once it has seen ``frames`` frames (or at the timeout)."""
        deadline, got = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            if self.probe.exists():
                got = {k: int(v) for k, v in (line.split() for line in
                                              self.probe.read_text().splitlines() if line)}
                if sum(got.values()) >= frames:
                    break
            time.sleep(0.5)
        return got

    def xdotool(self, *args: str) -> str:
        return subprocess.run(["xdotool", *args], env=self.env, capture_output=True,
                              text=True).stdout

    def windows(self) -> dict[str, str]:
        """Window id -> title, for every named window."""
        out = {}
        for wid in self.xdotool("search", "--name", ".").split():
            name = self.xdotool("getwindowname", wid).strip()
            if name:
                out[wid] = name
        return out

    def window(self, title_part: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for wid, name in self.windows().items():
                if title_part in name:
                    return wid
            time.sleep(0.5)
        raise TimeoutError(f"no window named *{title_part}*: {self.windows()}")

    def place(self, wid: str, width: int, height: int, x: int = 0, y: int = 0) -> None:
        self.xdotool("windowmove", wid, str(x), str(y))
        self.xdotool("windowsize", wid, str(width), str(height))
        time.sleep(1)

    def screenshot(self, dest: Path, wid: str | None = None) -> None:
        subprocess.run(["import", "-window", wid or "root", str(dest)], env=self.env, check=True)


def screenshots(out: Path) -> None:
    """The finding's packet details, Expert Information and DCP Streams windows."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        annotated = Path(tmp) / "resume-collapsed-annotated.pcapng"
        subprocess.run([sys.executable, "-m", "dcpdissect", "analyze",
                        str(ROOT / "samples" / "resume-collapsed.pcap"), "--annotate",
                        str(annotated), "--fail-on", "never"], cwd=ROOT, check=True,
                       capture_output=True)
        with Session(annotated, "-g", "28") as s:
            s.counts(11)
            main = s.window("resume-collapsed-annotated")
            s.place(main, 1280, 1000)
            s.xdotool("windowactivate", "--sync", main)
            s.xdotool("mousemove", "200", "600", "click", "1")     # the packet details pane
            # collapse all, then expand the findings (the last tree)
            for key in ("ctrl+Left", "End", "shift+Right"):
                s.xdotool("key", key)
                time.sleep(0.3)
            time.sleep(1)
            s.screenshot(out / "gui-finding.png", main)
        with Session(annotated, "-z", "expert") as s:
            s.counts(11)
            dialog = s.window("Expert Information")
            s.place(dialog, 1100, 500)
            s.screenshot(out / "gui-expert-info.png", dialog)
        with Session(ROOT / "samples" / "clean-replication.pcap", "-z", "dcp,streams") as s:
            s.counts(10)
            window = s.window("DCP streams")
            s.place(window, 1500, 360)
            s.screenshot(out / "gui-dcp-streams.png", window)


if __name__ == "__main__":
    screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs"))
