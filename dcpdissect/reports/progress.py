"""Progress on stderr: a bar for long captures (bytes read against the file size), and
Spark's own per-stage bars for the pipeline, both only on a terminal."""

from __future__ import annotations

import sys
import time

MIN_BYTES = 20 << 20        # by default no bar for smaller captures


class Progress:
    """Call :meth:`update` often; it redraws at most every ``interval`` seconds and only
    when enabled (default: stderr is a terminal and the file is at least ``min_bytes``)."""

    def __init__(self, label: str, enabled: bool | None = None, interval: float = 0.5,
                 min_bytes: int = MIN_BYTES, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval = interval
        self.min_bytes = min_bytes
        self.reader = None
        self.next_draw = 0.0
        self.drawn = False
        self.start = time.monotonic()

    @classmethod
    def from_option(cls, label: str, option: bool | None, stream=None) -> "Progress":
        """As ``--[no-]progress`` asks: ``True`` always, ``False`` never, ``None`` when the
        stream is a terminal and the capture is at least :data:`MIN_BYTES`."""
        return cls(label, enabled=option, min_bytes=0 if option else MIN_BYTES, stream=stream)

    def attach(self, reader) -> None:
        """Reader hook: remember the capture reader whose position is reported."""
        self.reader = reader
        size = getattr(reader, "size", None)
        if size is not None and size < self.min_bytes:
            self.enabled = False

    def update(self) -> None:
        if not self.enabled or self.reader is None:
            return
        now = time.monotonic()
        if now < self.next_draw:
            return
        self.next_draw = now + self.interval
        done = self.reader.bytes_read
        size = self.reader.size
        rate = done / max(now - self.start, 1e-9) / 1e6
        if size:
            width = 30
            filled = int(width * min(done / size, 1.0))
            text = (f"{self.label}: [{'#' * filled}{'.' * (width - filled)}] "
                    f"{100 * done / size:5.1f}% {done / 1e6:,.0f}/{size / 1e6:,.0f} MB {rate:.0f} MB/s")
        else:
            text = f"{self.label}: {done / 1e6:,.0f} MB {rate:.0f} MB/s"
        self.stream.write("\r" + text)
        self.stream.flush()
        self.drawn = True

    def stage(self, text: str) -> None:
        """Say what is being done once the capture is read (where the bar was drawn)."""
        if self.enabled and self.reader is not None:
            self.stream.write(f"\r\033[K{self.label}: {text}...")
            self.stream.flush()
            self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.drawn = False


def spark_stage_progress(stream=None) -> dict:
    """Spark settings for its console progress bar (one bar per running stage, on the
    driver's stderr): on when ``stream`` (default stderr) is a terminal."""
    stream = stream or sys.stderr
    return {"spark.ui.showConsoleProgress": "true"} if stream.isatty() else {}
