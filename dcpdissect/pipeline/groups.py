"""Stage B of the chunked pipeline: the ``analyze`` run over one analysis group.

An analysis group is a set of flows of one capture file (:mod:`.frames`). Its frames are
read again by offset, in time order (:mod:`dcpdissect.capture.order`: the order
``analyze`` feeds them in, restricted to the group), and go through the same path as
``analyze``: TCP reassembly, framing, decode, the Analyzer (a
:class:`~dcpdissect.analysis.session.Pass` with :class:`~.filepass.FileRows`).
A frame's place in that order is its **position**
(:func:`~dcpdissect.capture.order.position`: order time, then frame number; the frame
number itself in a file in time order). What ties the group's results to the whole file's:

* Lingering FINs expire, as in one connection table, on the first TCP segment of the
  *file* past their deadline: a :class:`TcpClock` finds it between the group's frames.
* Every event and finding carries its **moment**, ``(position, phase, sub, n)``, the place
  where ``analyze`` meets it: phase 0 holds the expiries a frame triggers (``sub``: the
  position at which the connection started to linger, the order of the table's waiting
  list), phase 1 the frame's own segment, phase 2 (position ``END``) the end-of-capture
  closes (``sub``: the position of the frame that opened the connection, the table's id
  order), phase 4 the Analyzer's ``finish``. Sorting the moments of all groups gives
  ``analyze``'s order.
* Connection numbers: ``analyze`` numbers connections in decision order, so the number
  of a connection is the rank of the moment it was decided at among those of all groups.
  The driver hands each group the numbers it foresees (``numbers``: moment → number); the
  group reports the moments it actually numbered at (:attr:`GroupResult.numbered`), and
  the driver runs a group again when one differs (:mod:`.merge`).
* :func:`~.coupling.coupling_keys`: the ways a connection can meet another one in the
  Analyzer.
"""

from __future__ import annotations

import heapq
import mmap
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

from ..analysis.engine import Analyzer
from ..analysis.session import Pass
from ..analysis.stream_summary import StreamSummary
from ..capture.order import TimeKeys, position
from ..capture.packets import Decoder, Segment
from ..capture.readers import CaptureError
from ..reassembly.connections import ConnectionOpened
from ..reassembly.pdus import COUNTED, Options, PduStream
from .chunks import Piece, read_piece
from .coupling import COUPLING_OPCODES, END
from .filepass import FileRows
from .frames import FIELDS, FlowFrames
from .tables import stream_records_in_order

UNFORESEEN = 1 << 30             # numbers from here on: a connection the driver did not foresee
_TICK = Segment("", "", 0, 0, 0, 0, 0, b"", 0)   # an untracked segment: only a clock tick
_LOW = 0xFFFFFFFF


class TcpClock:
    """Answers "first TCP segment of the file in time order after position a and before
    position b with a timestamp of at least t" by re-reading the index blocks that may
    hold it (frames decoded with ``vxlan_ports`` as ``analyze`` decodes them)."""

    def __init__(self, blocks: list[Piece], cache: int = 8, vxlan_ports=()):
        self.decode = Decoder(vxlan_ports).decode
        self.blocks = sorted(blocks, key=lambda p: p.first_frame)
        # every frame of block j lies at or after lows[j] and at or before highs[j]
        self.lows, self.highs = [], []
        for p in self.blocks:
            keys = TimeKeys(p.order)
            top = keys.newest if p.max_ts is None else max(keys.newest, p.max_ts)
            self.lows.append(position(keys.bound(), p.first_frame))
            self.highs.append(position(top, p.first_frame + max(p.frames, 1) - 1))
        self._cache: OrderedDict = OrderedDict()
        self._size = cache

    def _segments(self, i: int):
        """(positions, frame numbers, timestamps) of block ``i``'s TCP segments, sorted by
        position."""
        got = self._cache.get(i)
        if got is None:
            p = self.blocks[i]
            keys = TimeKeys(p.order)
            rows = []
            try:
                for f in read_piece(p):
                    k = keys.key(f.ts_ns, len(f.data))
                    if self.decode(f.linktype, f.data) is not None:
                        rows.append((position(k, f.number), f.number, f.ts_ns))
            except CaptureError:
                pass
            rows.sort()
            got = self._cache[i] = ([r[0] for r in rows], [r[1] for r in rows],
                                    [r[2] for r in rows])
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(i)
        return got

    def first(self, after: int, before: int, min_ts: int) -> tuple[int, int, int] | None:
        """(position, frame number, timestamp) of that segment, or None."""
        best = None
        for j in range(bisect_right(self.highs, after), len(self.blocks)):
            low = self.lows[j]
            if low >= before or best is not None and low > best[0]:
                break
            p = self.blocks[j]
            if p.max_ts is not None and p.max_ts < min_ts:
                continue
            places, frames, stamps = self._segments(j)
            for k in range(bisect_right(places, after), len(places)):
                at = places[k]
                if at >= before or best is not None and at > best[0]:
                    break
                if stamps[k] >= min_ts:
                    best = (at, frames[k], stamps[k])
                    break
        return best


class GroupStream(PduStream):
    """A PduStream fed the frames of one analysis group; iterate :meth:`feed` and
    :meth:`finish` for events, :attr:`moment` being the moment of the last one."""

    def __init__(self, options: Options, numbers: dict, clock: TcpClock | None):
        super().__init__(options)
        self.numbers = numbers          # moment (frame, phase, sub) -> [numbers in order]
        self.clock = clock
        self.moment: tuple = (0, 1, 0)
        self.numbered: list = []        # (moment, n, number): the numbers given
        self.opened_at: dict[int, int] = {}     # table id -> frame that opened it
        self.entered: dict[int, int] = {}       # table id -> frame it began to linger at
        self.ticks = 0
        self.prev = 0
        self._ending = False

    def _new_number(self, cid: int) -> int:
        moment = self.moment
        last = self.numbered[-1] if self.numbered else None
        n = last[1] + 1 if last is not None and last[0] == moment else 0
        foreseen = self.numbers.get(moment, ())
        number = foreseen[n] if n < len(foreseen) else UNFORESEEN + len(self.numbered)
        self.numbered.append((moment, n, number))
        return number

    def feed(self, number: int, ts_ns: int, seg, at: int):
        """The events of the group's frame ``number`` (its segment ``seg``) at position
        ``at``."""
        if self.table._closing:
            return self._feed_lingering(number, ts_ns, seg, at)
        return self._feed(number, ts_ns, seg, at)

    def _feed(self, number: int, ts_ns: int, seg, at: int, lingering=()):
        """``lingering``: the connections that lingered before this frame."""
        table = self.table
        self.now = (number, ts_ns)
        self.moment = (at, 1, 0)
        self.prev = at
        events = table.feed(number, ts_ns, seg)
        for cid in table._closing:
            if cid not in lingering:
                self.entered[cid] = at
        if not events:
            return ()
        for ev in events:
            if type(ev) is ConnectionOpened:
                self.opened_at[ev.conn] = at
        return self._route(events)

    def _feed_lingering(self, number: int, ts_ns: int, seg, at: int) -> Iterator:
        yield from self._linger(number, ts_ns, at)
        yield from self._feed(number, ts_ns, seg, at, set(self.table._closing))

    def _linger(self, number: int, ts_ns: int, here: int) -> Iterator:
        """Expire lingering FINs where the file's segments since the group's previous
        frame, then this frame (``number`` at position ``here``), would."""
        closing = self.table._closing
        after = self.prev
        while closing:
            deadline = min(c.deadline for c in closing.values())
            at = self.clock.first(after, here, deadline) if self.clock else None
            if at is None:
                if here == END or ts_ns < deadline:
                    return
                at = (here, number, ts_ns)
            after = at[0]
            self.ticks += 1
            self.now = at[1:]
            for ev in self.table.feed(at[1], at[2], _TICK):
                self.moment = (at[0], 0, self.entered.get(ev.conn, 0))
                yield from self._route((ev,))

    def finish(self) -> Iterator:
        if self.table._closing:
            yield from self._linger(END, 0, END)
        self._ending = True
        yield from super().finish()

    def _route(self, events) -> Iterator:
        if not self._ending:
            return super()._route(events)
        return self._route_end(events)

    def _route_end(self, events) -> Iterator:
        for ev in events:
            self.moment = (END, 2, self.opened_at.get(ev.conn, 0))
            yield from super()._route((ev,))


# -- one group -----------------------------------------------------------------------------

class GroupResult(NamedTuple):
    path: str
    group: int
    findings: list              # uncapped, in emission order
    moments: list               # the moment of each finding
    connections: list           # [ConnRow]
    streams: list               # stream records (no finding counts), in order of appearance
    counts: dict                # Summary counters of the group
    ports: tuple                # (heuristic_ports, undecoded_ports)
    tcp: dict                   # connection table stats, clock ticks taken out
    tls_randoms: dict
    numbered: list              # (moment, n, number) of each connection number given
    coupling: frozenset
    messages: int
    events: list | None = None  # (moment, event) of each event, when kept


def frames_in_order(flows: list[FlowFrames]) -> Iterator[tuple]:
    """(order time, number, ts_ns, data offset, captured length << 32 | link type) of
    every frame of the flows, in time order."""
    rows = [zip(*(f.frames[i::FIELDS] for i in range(FIELDS))) for f in flows]
    return rows[0] if len(rows) == 1 else heapq.merge(*rows)


def run_group(path: str, group: int, flows: list[FlowFrames], options: Options, numbers: dict,
              clock: TcpClock | None, result: list, batch_rows: int = 4096, time: bool = True,
              header: bool = True, keep_events: bool = False,
              pseudonyms=None) -> Iterator[dict]:
    """Stage B: yields the group's ``messages`` rows in batches (as
    :func:`.filepass.analyze_whole`, document keys as their ``pseudonyms`` when given) and
    appends its :class:`GroupResult` to ``result`` (with every event and its moment if
    ``keep_events``)."""
    stream = GroupStream(options, numbers, clock)
    analyzer = Analyzer()
    streams = StreamSummary(analyzer)
    rows = FileRows(path, analyzer, batch_rows, time, header, watch=COUPLING_OPCODES,
                    pseudonyms=pseudonyms)
    moments = _Moments()
    kept = _Kept() if keep_events else None
    run = Pass([o for o in (streams, rows, moments, kept) if o is not None], tagged=True)
    moments.run = run
    if kept is not None:
        kept.run = run

    def events() -> Iterator[tuple]:
        """(moment, event) of every event of the group, in order."""
        decode = Decoder(options.vxlan_ports).decode
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for key, number, ts_ns, at, packed in frames_in_order(flows):
                seg = decode(packed & _LOW, mm[at:at + (packed >> 32)])
                if seg is None:      # pragma: no cover - stage A only lists TCP frames
                    continue
                for ev in stream.feed(number, ts_ns, seg, position(key, number)):
                    yield stream.moment, ev
        for ev in stream.finish():
            yield stream.moment, ev

    for _ in run.steps(events()):       # reassembly, then analysis (see in_batches)
        yield from rows.drain()
    run.finish()
    yield from rows.drain()
    s = stream.summary
    counts = {k: getattr(s, k) for k in COUNTED}
    tcp = dict(s.tcp)
    tcp["segments"] -= stream.ticks
    tcp["ignored_segments"] -= stream.ticks
    result.append(GroupResult(path, group, run.findings, moments.moments,
                              rows.connection_rows(), stream_records_in_order(streams.streams),
                              counts, (dict(s.heuristic_ports), dict(s.undecoded_ports)), tcp,
                              dict(s.tls_randoms), stream.numbered, frozenset(rows.coupling),
                              rows.count, kept.events if kept is not None else None))


class _Moments:
    """The moment of each finding of the group's pass: that of the event being analysed,
    ``(END, 4, connection)`` for the analyzer's ``finish``."""

    def __init__(self):
        self.run = None
        self.moments: list = []

    def on_findings(self, found: list) -> None:
        tag = self.run.tag
        if tag is None:
            self.moments += [(END, 4, f.connection or 0) for f in found]
        else:
            self.moments += [tag] * len(found)


class _Kept:
    """Every event of the group with its moment (``keep_events``)."""

    def __init__(self):
        self.run = None
        self.events: list = []

    def on_message(self, pdu, msg) -> None:
        self.events.append((self.run.tag, pdu))

    def on_event(self, ev) -> None:
        self.events.append((self.run.tag, ev))
