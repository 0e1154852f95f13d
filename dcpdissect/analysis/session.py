"""One pass over a capture: every event read once, every message decoded once.

A :class:`Pass` takes the events of :mod:`dcpdissect.reassembly.pdus` and hands each PDU,
with its decoded message, to an ordered list of observers (the analyzer with its stream
accounting, the connection legend, the timeline, a writer, the pipeline's columns, ...);
every other event goes to them as it is. An observer implements any of

``on_message(pdu, msg)`` and ``on_event(ev)``
    may return findings (a list); the analyzer does, the others return None;
``on_findings(found)``
    the findings the pass keeps, as they are found (after the cap);
``on_finish()``
    at the end; may return findings.

The pass owns what every driver needs around that loop: batching (a file is read a batch
of events ahead, live input event by event), the capture fault (everything before it is
analysed; the fault is kept in :attr:`Pass.error`), SIGINT (reading stops, the event being
processed is completed, :attr:`Pass.interrupted`), progress and the per-rule finding cap.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Iterator

from ..codec import decode
from ..reassembly.batches import BATCH, in_batches
from ..reassembly.framing import Pdu
from ..reassembly.pdus import CaptureError
from .findings import Finding, FindingCap

PROGRESS_EVERY = 1024           # events between progress updates


class StopOnSigint:
    """SIGINT stops reading: while the reader runs (or waits for input) it raises
    KeyboardInterrupt there; while an event is being processed it is noted and the loop
    stops after that event (``hit``), so no observer is left half-fed. The previous
    handler is back on exit, so a second Ctrl-C during output interrupts."""

    def __init__(self):
        self.busy = False
        self.hit = False
        self._old = None

    def _handler(self, signum, frame):
        self.hit = True
        if not self.busy:
            raise KeyboardInterrupt

    def __enter__(self):
        try:
            self._old = signal.signal(signal.SIGINT, self._handler)
        except ValueError:          # not the main thread: leave SIGINT alone
            self._old = None
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        if exc[0] is KeyboardInterrupt:
            self.hit = True
            return True             # stop reading; the caller reports what it has
        return False


class _NoSigint:
    """SIGINT left alone (a worker process, a library caller)."""
    busy = hit = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Pass:
    """``observers`` in the order they see each event. ``max_per_rule``: findings kept per
    rule (None: all; the rest are counted in one ``findings-capped`` finding per rule at
    the end). ``batch``: events read ahead (1 for live input). ``progress``: an object
    with ``update()``. ``interruptible``: SIGINT stops reading (in the main thread).
    ``tagged``: the events come as (tag, event) pairs and :attr:`tag` is the tag of the
    event being handed out (the pipeline's moments)."""

    def __init__(self, observers: Iterable, max_per_rule: int | None = None,
                 batch: int = BATCH, progress=None, interruptible: bool = False,
                 tagged: bool = False):
        self.observers = list(observers)
        self.cap = FindingCap(max_per_rule) if max_per_rule is not None else None
        self.batch, self.progress = batch, progress
        self.interruptible, self.tagged = interruptible, tagged
        self.findings: list[Finding] = []
        self.error: CaptureError | None = None
        self.interrupted = False
        self.tag = None
        self.events = 0
        self._on_message = _hooks(self.observers, "on_message")
        self._on_event = _hooks(self.observers, "on_event")
        self._on_findings = _hooks(self.observers, "on_findings")

    def run(self, events: Iterable) -> Pass:
        """Every event of ``events``, then :meth:`finish`."""
        for _ in self.steps(events):
            pass
        self.finish()
        return self

    def steps(self, events: Iterable) -> Iterator[int]:
        """Hand out ``events`` a batch at a time, yielding the number of events handed out
        so far after each batch (a driver drains its observers' output there). A capture
        fault or SIGINT ends the steps; :meth:`finish` is the caller's."""
        guard = StopOnSigint() if self.interruptible else _NoSigint()
        on_message, on_event = self._on_message, self._on_event
        progress, tagged = self.progress, self.tagged
        n = self.events
        with guard:
            try:
                for chunk in in_batches(events, self.batch):
                    guard.busy = True
                    for ev in chunk:
                        if tagged:
                            self.tag, ev = ev
                        if type(ev) is Pdu:
                            msg = decode(ev.data)
                            for hook in on_message:
                                found = hook(ev, msg)
                                if found:
                                    self._found(found)
                        else:
                            for hook in on_event:
                                found = hook(ev)
                                if found:
                                    self._found(found)
                        if progress is not None and not n & (PROGRESS_EVERY - 1):
                            progress.update()
                        n += 1
                    self.events = n
                    guard.busy = False
                    if guard.hit:
                        break
                    yield n
            except CaptureError as exc:
                self.events = n
                self.error = exc
        self.interrupted = guard.hit

    def finish(self) -> list[Finding]:
        """The observers' end-of-capture findings and the capped counts; :attr:`findings`
        holds every finding kept, in the order found. :attr:`tag` is None from here on."""
        self.tag = None
        for o in self.observers:
            end = getattr(o, "on_finish", None)
            found = end() if end is not None else None
            if found:
                self._found(found)
        if self.cap is not None:
            dropped = self.cap.dropped()
            if dropped:
                self._found(dropped, capped=False)
        return self.findings

    def _found(self, found: list, capped: bool = True) -> None:
        if capped and self.cap is not None:
            found = self.cap.keep(found)
            if not found:
                return
        self.findings += found
        for hook in self._on_findings:
            hook(found)


def _hooks(observers: list, name: str) -> list:
    return [hook for o in observers if (hook := getattr(o, name, None)) is not None]
