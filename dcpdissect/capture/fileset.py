"""Several capture files of one capture point read as one capture: ring buffers and splits.

``tcpdump -C/-G/-W``, dumpcap's ring buffer and ``editcap -c/-i`` cut one capture into
files; :class:`FileSet` puts them back together. Its reader (:class:`FileSetReader`)
merges the frames of every file by timestamp, as ``mergecap`` does: the earliest head
first, frames equal in time in file order; so files that overlap or come out of order are
merged, not concatenated. A frame's number is its place in the merged capture (``mergecap``
numbers it the same), which for the consecutive files of a split is its number in the
whole file; :meth:`FrameFiles.locate` gives back its file and its number there.

Files are ordered by their first frame's time, then by the number in a ring-buffer name
(:func:`ring_number`), then by name. The files of one ring buffer (:func:`group_rings`) are
read in turn, in the order of their numbers, each once the one before it has ended: the
tool that wrote them cut one capture in that order, so a clock that steps back between two
of them does not reorder their frames (within a file, and across, the time-order window of
the reassembly still sorts what arrives out of order, as in a single file). A file that cannot be read does not stop the others:
its fault is raised after every frame of the others (the first fault, when several).
"""

from __future__ import annotations

import glob
import heapq
import os
import re
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator

from .readers import CaptureError, CaptureReader, Frame, open_capture

__all__ = ["FileSet", "FileSetReader", "FrameFiles", "capture_files", "group_rings",
           "open_source", "ring_family", "ring_number"]

CAPTURE_NAME = re.compile(r"\.(pcap|pcapng|cap)\d*(\.gz)?$", re.IGNORECASE)
# dumpcap's and editcap's prefix_NNNNN_YYYYMMDDhhmmss.ext
_NUMBERED = re.compile(r"^(?P<stem>.*)_(?P<n>\d{5,})_(?P<time>\d{14})(?P<ext>\.[^_]*)?$")
# tcpdump -C/-W: the name, then name1, name2, ... (name0, name1, ... with -W)
_TRAILING = re.compile(r"^(?P<stem>.*\.(?:pcap|pcapng|cap))(?P<n>\d+)(?P<gz>\.gz)?$",
                       re.IGNORECASE)

_NEW_FRAME = tuple.__new__


def ring_number(path: str) -> int | None:
    """The number of a ring-buffer file name (``x_00003_20261127153000.pcapng``: 3,
    ``x.pcap3``: 3), None for a name without one."""
    name = os.path.basename(path)
    m = _NUMBERED.match(name) or _TRAILING.match(name)
    return int(m["n"]) if m else None


def ring_family(path: str) -> tuple | None:
    """What the files of one ring buffer share in their names (directory, stem,
    extension); None for a name that is not a ring-buffer file's. A tcpdump ``-C`` set's
    first file has no number: its family is that of ``name1`` (see :func:`group_rings`)."""
    name = os.path.basename(path)
    where = os.path.dirname(path)
    m = _NUMBERED.match(name)
    if m:
        return where, m["stem"], m["ext"] or ""
    m = _TRAILING.match(name)
    if m:
        return where, m["stem"] + (m["gz"] or ""), ""
    return None


def group_rings(paths: list[str]) -> list[list[str]]:
    """``paths`` grouped by ring buffer (each family in one group, at the place of its
    first file; a tcpdump ``-C`` set's unnumbered first file with its numbered ones); other
    files alone."""
    families = {ring_family(p) for p in paths} - {None}
    groups: dict = {}
    for p in paths:
        key = ring_family(p)
        if key is None and (os.path.dirname(p), os.path.basename(p), "") in families:
            key = (os.path.dirname(p), os.path.basename(p), "")
        groups.setdefault(key if key is not None else ("", p, None), []).append(p)
    return list(groups.values())


def capture_files(inputs: Iterable[str]) -> list[str]:
    """Files, directories (searched recursively for capture files: ``.pcap``, ``.pcapng``,
    ``.cap``, a ring-buffer number and ``.gz`` allowed after them) and globs → paths, in a
    stable order, each once. Names that match nothing are kept (they become errors)."""
    out: list[str] = []
    seen = set()

    def add(p: str) -> None:
        if p not in seen:
            seen.add(p)
            out.append(p)

    for item in inputs:
        if os.path.isdir(item):
            for root, dirs, files in os.walk(item):
                dirs.sort()
                for name in sorted(files):
                    if CAPTURE_NAME.search(name):
                        add(os.path.join(root, name))
        elif not os.path.exists(item) and glob.has_magic(item):
            for p in sorted(glob.glob(item, recursive=True)):
                if not os.path.isdir(p):
                    add(p)
        else:
            add(item)
    return out


class FileSet:
    """The files of one capture point, read as one capture (:meth:`open`)."""

    def __init__(self, paths: Iterable[str]):
        self.paths = tuple(paths)

    def __str__(self) -> str:
        more = len(self.paths) - 1
        return f"{self.paths[0]} and {more} more file{'s' * (more != 1)}"

    def __eq__(self, other) -> bool:
        return isinstance(other, FileSet) and other.paths == self.paths

    def __hash__(self) -> int:
        return hash(self.paths)

    def open(self) -> "FileSetReader":
        return FileSetReader(self.paths)


def open_source(source) -> "FileSetReader | CaptureReader":
    """A reader of ``source``: a path (or ``-``) as :func:`open_capture` opens it, or a
    :class:`FileSet`."""
    return source.open() if isinstance(source, FileSet) else open_capture(source)


class FrameFiles:
    """Where the frames of a merged capture come from: runs of consecutive merged frames
    from one file (the merged number of the run's first frame, the file, the run's first
    frame number in that file)."""

    def __init__(self, files: list[str]):
        self.files = files
        self.frames = 0             # merged frames so far
        self._starts, self._files, self._firsts = array("q"), array("l"), array("q")

    def add(self, file: int, number: int) -> None:
        """The next merged frame is frame ``number`` of file ``file``."""
        self.frames += 1
        if not self._files or self._files[-1] != file:
            self._starts.append(self.frames)
            self._files.append(file)
            self._firsts.append(number)

    def runs(self) -> Iterator[tuple[int, int, str, int]]:
        """(first merged frame, last merged frame, file, its first frame there) per run."""
        ends = list(self._starts[1:]) + [self.frames + 1]
        for start, end, file, first in zip(self._starts, ends, self._files, self._firsts):
            yield start, end - 1, self.files[file], first

    def locate(self, number: int) -> tuple[str, int] | None:
        """(file, frame number in that file) of merged frame ``number``."""
        i = bisect_right(self._starts, number) - 1
        if i < 0 or number > self.frames:
            return None
        return self.files[self._files[i]], self._firsts[i] + number - self._starts[i]


class _Member:
    """One file of a set: where it goes in the order (its first frame's time, probed at
    the start), and its reader once the merge has reached that time."""

    __slots__ = ("path", "index", "ring", "first_ts", "size", "reader", "frames", "error",
                 "next")

    def __init__(self, path: str):
        self.path = path
        self.ring = ring_number(path)
        self.first_ts = self.size = self.reader = self.frames = self.error = None
        self.next = None            # the next file of its ring buffer
        head = self.start()
        if self.reader is not None:
            self.size = self.reader.size
        self.close()
        if head is not None:
            self.first_ts = head.ts_ns

    def start(self, secrets=None) -> Frame | None:
        """Open the file, its decryption secrets going to ``secrets``; its first frame
        (None: it has none, or cannot be read)."""
        try:
            self.reader = open_capture(self.path)
            self.reader.on_secrets = secrets
            self.frames = iter(self.reader)
            return next(self.frames, None)
        except CaptureError as exc:
            self.close()
            self.error = exc
            return None

    def order(self) -> tuple:
        """Files with frames by first time, then the others."""
        ts = self.first_ts
        return (ts is None, ts or 0, self.ring if self.ring is not None else -1, self.path)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None


class FileSetReader:
    """Iterable, context-managed reader of a :class:`FileSet`: the frames of every file
    merged by timestamp, numbered in merged order (see the module; :attr:`frame_files`
    says where each comes from). A file is opened when the merge reaches its first frame
    and closed at its end. ``size`` and ``bytes_read`` sum the files' (for progress);
    ``on_secrets`` gets each file's decryption secrets as its walk meets them, after the
    frames merged so far."""

    format = "set"
    compressed = False
    idle_marks = False          # files: never live

    def __init__(self, paths: Iterable[str]):
        self.paths = tuple(paths)
        self.path = str(FileSet(self.paths))
        self.on_secrets = None
        members = {p: _Member(p) for p in self.paths}
        for ring in group_rings(list(self.paths)):          # a ring buffer's files in turn
            chain = sorted((members[p] for p in ring),
                           key=lambda m: (m.ring is not None, m.ring or 0, m.path))
            for a, b in zip(chain, chain[1:]):
                a.next = b
        self.members = sorted(members.values(), key=_Member.order)
        for i, m in enumerate(self.members):
            m.index = i
        sizes = [m.size for m in self.members]
        self.size = sum(sizes) if None not in sizes else None
        self._done = 0              # bytes of the files read to their end
        self.frame_files = FrameFiles([m.path for m in self.members])
        self._iter: Iterator[Frame] | None = None

    @property
    def bytes_read(self) -> int:
        return self._done + sum(m.reader.bytes_read for m in self.members
                                if m.reader is not None)

    def _secrets(self, _after: int, stype: int, data: bytes) -> None:
        if self.on_secrets is not None:
            self.on_secrets(self.frame_files.frames, stype, data)

    def __iter__(self) -> Iterator[Frame]:
        if self._iter is None:
            self._iter = self._merge()
        return self._iter

    def _merge(self) -> Iterator[Frame]:
        heap: list = []             # (merge time, file index, frame) of each open file
        later = {m.next.index for m in self.members if m.next is not None}
        waiting = [m for m in self.members if m.index not in later]
        waiting = self._queued(waiting, [])
        push, pop = heapq.heappush, heapq.heappop
        where = self.frame_files
        new, frame_type = _NEW_FRAME, Frame
        while heap or waiting:
            while waiting and (not heap or waiting[-1].first_ts <= heap[0][0]):
                m = waiting.pop()
                head = m.start(self._secrets)
                if head is not None:
                    push(heap, (head.ts_ns, m.index, head))
            if not heap:
                break
            ts, i, frame = pop(heap)
            m = self.members[i]
            # this file's frames go on without the heap while they come first
            top = heap[0][:2] if heap else None
            opens = waiting[-1].first_ts if waiting else None
            while True:
                where.add(i, frame[0])
                yield new(frame_type, (where.frames, frame[1], frame[2], frame[3], frame[4],
                                       frame[5]))
                try:
                    frame = next(m.frames, None)
                except CaptureError as exc:
                    m.error, frame = exc, None
                if frame is None:
                    self._done += m.reader.bytes_read
                    m.close()
                    if m.next is not None:     # the next file of its ring buffer may start
                        waiting = self._queued([m.next], waiting)
                    break
                ts = frame[1] or ts             # no time: the file's newest
                if top is not None and (ts, i) > top or opens is not None and ts >= opens:
                    push(heap, (ts, i, frame))
                    break
        faults = [m.error for m in self.members if m.error is not None]
        if faults:
            raise faults[0]

    @staticmethod
    def _queued(new: list, waiting: list) -> list:
        """``waiting`` with the files ``new`` (an empty one: the next of its ring buffer in
        its place), latest first time first (the next to open is last)."""
        for m in new:
            while m is not None and m.first_ts is None:
                m = m.next
            if m is not None:
                waiting.append(m)
        return sorted(waiting, key=lambda m: (m.first_ts, m.index), reverse=True)

    def __enter__(self) -> "FileSetReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for m in self.members:
            m.close()

