"""Frames in time order, within a bounded window, each keeping its frame number.

dumpcap capturing several interfaces writes each interface's packets as its buffer drains,
so the blocks of a file are not in timestamp order (Wireshark's ``reordercap`` sorts them).
Reassembly wants the frames in the order they crossed the wire: :class:`TimeOrder` sorts
them by timestamp, stably (frames equal in time keep file order), over a window of
``WINDOW_NS`` of capture time and of one to two blocks of frames, whichever is shorter: a
block holds ``BLOCK_BYTES`` of captured bytes, each frame counting ``FRAME_BYTES`` more
(8 MiB: at most 32 768 frames), so memory stays bounded.

The order is a key per frame, ``(max(ts, floor), number)``, where ``floor`` is the later
of the newest time read so far (this frame included) less ``WINDOW_NS`` and the newest
time of the frames before the previous block (:class:`TimeKeys`). Every later frame's key
is at least the current floor, so a frame leaves the window as soon as its key is no more
than that; and any subset of the frames (the pipeline's analysis groups) comes out in the
same relative order as in the whole file. A frame older than its floor came later than
the window allows: it is processed at its floor (as soon as it is read, before the newer
frames still in the window), counted as late with how far it was behind the newest time.
Frames without a time (``ts_ns`` 0: simple packet blocks, records without a packet) take
the newest time read so far.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from .readers import IDLE, CaptureError, Frame

__all__ = ["BLOCK_BYTES", "FRAME_BYTES", "WINDOW_NS", "TimeKeys", "TimeOrder", "position"]

WINDOW_NS = 2_000_000_000
BLOCK_BYTES = 8 << 20
FRAME_BYTES = 256               # what a frame counts in a block besides its captured bytes
NONE = -(1 << 62)               # no time read yet: before every real timestamp


def position(key_ts: int, number: int) -> int:
    """A frame's place in time order as one integer (keys and numbers compare as pairs)."""
    return (key_ts << 32) | number


class TimeKeys:
    """The order times of a file's frames, given every frame in file order from the state
    before the first of them (None: the start of a file; or :meth:`state` saved where a
    piece of it starts)."""

    __slots__ = ("newest", "back1", "back2", "used", "window", "block", "behind")

    def __init__(self, state: tuple | None = None, window_ns: int = WINDOW_NS,
                 block_bytes: int = BLOCK_BYTES):
        self.newest, self.back1, self.back2, self.used = state or (NONE, NONE, NONE, 0)
        self.window = window_ns
        self.block = block_bytes
        self.behind = 0             # how far the last frame keyed was late (0: it was not)

    def state(self) -> tuple:
        """What :class:`TimeKeys` needs to go on from here (before the next frame)."""
        return self.newest, self.back1, self.back2, self.used

    def key(self, ts: int, size: int) -> int:
        """The order time of the next frame (``ts``: its time, 0 for none; ``size``: its
        captured bytes): its time, or its floor when it is older than that."""
        self.used += size + FRAME_BYTES
        if self.used > self.block:              # it starts a new block
            self.back2, self.back1 = self.back1, self.newest
            self.used = size + FRAME_BYTES
        self.behind = 0
        if not ts:
            return self.newest
        if ts > self.newest:
            self.newest = ts
        floor = self.bound()
        if ts >= floor:
            return ts
        self.behind = self.newest - ts
        return floor

    def bound(self) -> int:
        """No frame after those keyed so far gets a lower order time than this."""
        floor = self.newest - self.window
        return self.back2 if self.back2 > floor else floor


class TimeOrder:
    """Iterate for ``frames`` (in file order) in time order. :attr:`late` counts the
    frames that came later than the window allows and :attr:`late_max_ns` is how far the
    furthest was behind the newest frame read before it; ``on_first(ts)`` is told the
    first frame's time before any frame leaves. A fault (``CaptureError``) or an
    interruption while reading lets every frame read before it out first, and so does
    ``IDLE`` among the frames (live input waiting for more: what was read leaves now)."""

    def __init__(self, frames: Iterable[Frame], window_ns: int = WINDOW_NS,
                 block_bytes: int = BLOCK_BYTES, on_first=None):
        self.frames = frames
        self.window = window_ns
        self.block = block_bytes
        self.on_first = on_first
        self.late = 0
        self.late_max_ns = 0

    def __iter__(self) -> Iterator[Frame]:
        # TimeKeys.key and .bound, inlined: this runs once per frame of every capture.
        window, block = self.window, self.block
        newest = back1 = back2 = upto = last = NONE     # upto: TimeKeys.bound()
        used = 0
        run: deque = deque()        # frames whose order time is their own time, in order
        held: list = []             # heap of (order time, number, frame): the others
        push, pop, append, popleft = heapq.heappush, heapq.heappop, run.append, run.popleft
        first = self.on_first
        try:
            for frame in self.frames:
                if frame is IDLE:
                    yield from _drain(run, held)
                    last = NONE
                    continue
                ts = frame[1]
                if first is not None:
                    first(ts)
                    first = None
                used += len(frame[3]) + FRAME_BYTES
                if used > block:                # the frame starts a new block
                    back2, back1 = back1, newest
                    used = len(frame[3]) + FRAME_BYTES
                    if back2 > upto:
                        upto = back2
                if ts > newest:                 # the newest so far: its own time, in order
                    newest = last = ts
                    append(frame)
                    if ts - window > upto:
                        upto = ts - window
                elif not ts:                    # no time: the newest so far
                    push(held, (newest, frame[0], frame))
                elif ts < upto:                 # later than the window allows
                    self.late += 1
                    if newest - ts > self.late_max_ns:
                        self.late_max_ns = newest - ts
                    push(held, (upto, frame[0], frame))
                elif ts >= last:
                    last = ts
                    append(frame)
                else:
                    push(held, (ts, frame[0], frame))
                while run and run[0][1] <= upto:
                    if held and _before(held[0], run[0]):
                        yield pop(held)[2]
                    else:
                        yield popleft()
                while held and held[0][0] <= upto:
                    yield pop(held)[2]
        except (CaptureError, KeyboardInterrupt):
            yield from _drain(run, held)
            raise
        yield from _drain(run, held)


def _drain(run: deque, held: list) -> Iterator[Frame]:
    while run or held:
        if held and (not run or _before(held[0], run[0])):
            yield heapq.heappop(held)[2]
        else:
            yield run.popleft()


def _before(entry: tuple, frame: Frame) -> bool:
    """Whether a held (order time, number, frame) comes before ``frame`` of the run."""
    return entry[0] < frame[1] or entry[0] == frame[1] and entry[1] < frame[0]
