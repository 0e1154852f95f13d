"""Start-seqno convention of every snapshot marker, for display next to the marker.

The :class:`~.engine.Analyzer` reports each marker's convention through its ``on_marker``
callback, once the data after the marker decides it. :func:`classify_markers` collects them
for a whole capture; :class:`InCaptureOrder` lets ``dissect`` print every message as it
reads it, in capture order, holding back only from the oldest marker still undecided.
"""

from __future__ import annotations

import pickle
import tempfile
from collections import deque
from collections.abc import Callable, Iterable

from ..protocol import opcode_code
from ..reassembly.pdus import iter_events
from .engine import Analyzer
from .session import Pass

LABELS = {
    "first-of-stream": "first marker of the stream: start = the requested snap_start "
                       "(min(snap_start, computed start)), or the FromLatest high seqno",
    "checkpoint": "memory marker with CHK: start = checkpoint start, <= the first item",
    "first-item": "memory marker without CHK: start = the first item's seqno",
    "backfill": "disk marker: start = backfill (or checkpoint) start, <= the first item",
    "no-items": "memory marker without CHK and without items: convention not decidable",
    "inconsistent": "start fits none of the conventions (snapshot-start-inconsistent)",
    "dropped": "marker behind the last seqno, dropped by a consumer",
    "inside-oso": "marker inside an OSO snapshot",
    "invalid": "start > end",
    "unknown": "stream state unknown (request not captured, or after a gap/resync)",
}
MARKER = opcode_code("DcpSnapshotMarker")
MAX_HELD = 10_000        # records held in memory while a marker is undecided; then a file


def marker_key(pdu) -> tuple[int, int, int]:
    """(connection, frame, stream offset): which marker a label is about."""
    return (pdu.conn, pdu.frame, pdu.offset)


def classify_markers(events: Iterable) -> dict[tuple[int, int, int], str]:
    """Map :func:`marker_key` of each server-sent snapshot marker in ``events`` (as yielded
    by :func:`dcpdissect.reassembly.pdus.iter_events`) to its start-seqno convention, one
    of :data:`LABELS`. A capture fault ends the labelling where it occurs."""
    labels: dict[tuple[int, int, int], str] = {}

    def keep(pdu, label):
        if label is not None:
            labels[marker_key(pdu)] = label

    Pass([Analyzer(on_marker=keep)]).run(events)     # a fault ends the pass
    return labels


def classify_file(path: str) -> dict[tuple[int, int, int], str]:
    """:func:`classify_markers` over one capture file."""
    return classify_markers(iter_events(path))


_UNDECIDED = object()


def _with_convention(record: dict, label: str | None) -> dict:
    record["convention"] = label
    return record


class InCaptureOrder:
    """Hands message records to ``emit`` in capture order, each snapshot marker's with its
    ``"convention"`` (``labelled(record, label)`` gives the labelled record; by default
    it sets the dict's ``"convention"``).

    Feed the analyzer first, with :meth:`label` as its ``on_marker``, then :meth:`add`
    the message's record. A marker the analyzer has not labelled yet holds back its record
    and every later one until it is labelled; most markers are decided by the next message
    of their stream. Beyond :data:`MAX_HELD` records, the later ones wait in a temporary
    file, so memory stays bounded however long a marker stays undecided. :meth:`close`
    at the end (after the analyzer's ``finish()``) hands on the rest.
    """

    def __init__(self, emit: Callable[[dict], None], max_held: int = MAX_HELD,
                 labelled: Callable | None = None):
        self._emit = emit
        self._labelled = labelled or _with_convention
        self._max_held = max_held
        self._held: deque = deque()                  # (record, marker key or None)
        self._undecided: dict[tuple, object] = {}    # key -> label, of held markers
        self._early: dict[tuple, str | None] = {}    # labels of markers not added yet
        self._file = None                            # records after the held ones
        self._in_file = 0
        self._read_at = 0

    def label(self, pdu, label: str | None) -> None:
        """The analyzer's ``on_marker`` callback."""
        key = marker_key(pdu)
        if key in self._undecided:
            self._undecided[key] = label
            self._release()
        else:
            self._early[key] = label         # the marker being fed: its record comes next

    def add(self, pdu, msg, record: dict | None) -> None:
        """The record of the message ``pdu`` carried (None: not shown, but still read)."""
        key = None
        if record is not None and msg.opcode == MARKER and msg.is_request:
            k = marker_key(pdu)
            label = self._early.pop(k, _UNDECIDED)
            if label is _UNDECIDED:
                key = k
                self._undecided[k] = _UNDECIDED
            else:
                record = self._labelled(record, label)
        if self._early:
            self._early.clear()              # labels of markers that are not shown
        if record is None:
            return
        if key is None and not self._held and not self._in_file:
            self._emit(record)
        elif self._in_file or len(self._held) >= self._max_held:
            self._to_file((record, key))
        else:
            self._held.append((record, key))

    def close(self) -> None:
        """The end: a marker still undecided (its stream never showed more) is unknown."""
        for key, label in self._undecided.items():
            if label is _UNDECIDED:
                self._undecided[key] = "unknown"
        self._release()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _release(self) -> None:
        held, undecided = self._held, self._undecided
        while True:
            while held:
                record, key = held[0]
                if key is not None:
                    label = undecided[key]
                    if label is _UNDECIDED:
                        return
                    del undecided[key]
                    record = self._labelled(record, label)
                held.popleft()
                self._emit(record)
            if not self._in_file:
                return
            self._from_file()

    def _to_file(self, item) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="dcpdissect-")
        self._file.seek(0, 2)
        pickle.dump(item, self._file, pickle.HIGHEST_PROTOCOL)
        self._in_file += 1

    def _from_file(self) -> None:
        f = self._file
        f.seek(self._read_at)
        n = min(self._in_file, self._max_held)
        for _ in range(n):
            self._held.append(pickle.load(f))
        self._in_file -= n
        self._read_at = f.tell()
        if not self._in_file:
            f.seek(0)
            f.truncate()
            self._read_at = 0
