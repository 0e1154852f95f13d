"""Stage A of the chunked pipeline: the frame index of one chunk, per TCP flow.

A flow is a TCP 4-tuple in both directions (:func:`flow_key`). For each flow with frames
in the chunk, :func:`index_chunk` gives a :class:`FlowFrames`: where each of its frames
lies in the file (order time, frame number, timestamp, data offset, captured length, link
type; an ``array('q')`` of :data:`FIELDS` per frame, in time order: see
:mod:`dcpdissect.capture.order`), plus what the driver needs to foresee the connection
numbers (:mod:`.merge`): the flow's first segment that can open a connection and its SYNs,
at their places in time order (:func:`~dcpdissect.capture.order.position`). No payload
leaves the chunk: stage B reads the frames again by offset.

Frames are decoded through tunnels as ``analyze`` decodes them. An IP fragment cannot be
placed in its flow by itself: the chunk only counts it (:attr:`ChunkStats.fragments`), and
the driver reads a file with fragments whole.
"""

from __future__ import annotations

import heapq
from array import array
from typing import NamedTuple

from ..capture.order import TimeKeys, position
from ..capture.packets import Decoder
from ..capture.readers import CaptureError
from ..protocol import TLS_PORTS
from ..reassembly.pdus import Options
from ..reassembly.tcp import ACK, RST, SYN
from .chunks import Piece, read_piece_at

FIELDS = 5            # per frame: order time, number, ts_ns, data offset,
                      # captured length << 32 | link type
_OPEN_NEVER = 0


class ChunkStats(NamedTuple):
    path: str
    offset: int
    first_frame: int
    frames: int                 # frames read
    tcp_segments: int           # of which decode to TCP
    filtered: int               # TCP segments no connection table would track
    error: CaptureError | None
    first_ts_ns: int | None = None      # time of the chunk's first frame
    late: int = 0                       # frames later than the time-order window allows
    late_max_ns: int = 0                # how far the furthest was behind the newest frame
    fragments: int = 0                  # IP fragments seen (the file must be read whole)


class FlowFrames(NamedTuple):
    """The frames of one flow in one chunk (or, merged, in a whole file)."""
    frames: array               # FIELDS values per frame, in time order
    first_open: int             # position of the first frame (in time order) that could
                                # open a connection (SYN or data), 0: none
    syns: array                 # (order time, frame, seq) of each SYN without ACK, in time order
    nbytes: int                 # bytes captured


def flow_key(seg) -> str:
    a = (seg.src, seg.sport)
    b = (seg.dst, seg.dport)
    if b < a:
        a, b = b, a
    return f"{a[0]} {a[1]} {b[0]} {b[1]}"


def flow_ports(flow: str) -> tuple[int, int]:
    _a, pa, _b, pb = flow.split(" ")
    return int(pa), int(pb)


class _Filter:
    """Which segments a ConnectionTable built from ``options`` would look at."""

    def __init__(self, options: Options):
        # The heuristic (PduStream) looks at the first bytes of every connection.
        self.any_port = options.any_port or options.heuristic
        server = options.server_ports
        self.ports = server | (frozenset(TLS_PORTS) - server)

    def keep(self, seg) -> bool:
        return self.any_port or seg.sport in self.ports or seg.dport in self.ports


def index_chunk(piece: Piece, options: Options) -> tuple[ChunkStats, dict[str, FlowFrames]]:
    """Stage A: the chunk's counts and its :class:`FlowFrames` by flow key."""
    keep = _Filter(options).keep
    decoder = Decoder(options.vxlan_ports)
    decode = decoder.decode
    frames = tcp = filtered = late = late_max = 0
    error = first_ts = None
    flows: dict[str, list] = {}          # flow -> [frames, first_open, syns, nbytes]
    by_tuple: dict[tuple, list] = {}     # (src, sport, dst, dport) -> its flow's list
    keys = TimeKeys(piece.order)
    try:
        for frame, at in read_piece_at(piece):
            if not frames:
                first_ts = frame.ts_ns
            frames += 1
            ts = frame.ts_ns
            k = keys.key(ts, len(frame.data))
            if keys.behind:
                late += 1
                late_max = max(late_max, keys.behind)
            seg = decode(frame.linktype, frame.data)
            if seg is None:
                continue
            tcp += 1
            if not keep(seg):
                filtered += 1
                continue
            four = (seg.src, seg.sport, seg.dst, seg.dport)
            got = by_tuple.get(four)
            if got is None:
                key = flow_key(seg)
                got = flows.get(key)
                if got is None:
                    got = flows[key] = [array("q"), _OPEN_NEVER, array("q"), 0]
                by_tuple[four] = got
            size = len(frame.data)
            got[0].extend((k, frame.number, ts, at, size << 32 | frame.linktype))
            got[3] += size
            flags = seg.flags
            if not flags & RST and (flags & SYN or seg.payload):
                here = position(k, frame.number)
                if not got[1] or here < got[1]:
                    got[1] = here
            if flags & SYN and not flags & ACK:
                got[2].extend((k, frame.number, seg.seq))
    except CaptureError as exc:
        error = exc
    except Exception as exc:            # noqa: BLE001 - a chunk must never fail the job
        error = CaptureError(piece.path, piece.first_frame + frames, f"read error ({exc!r})")
    stats = ChunkStats(piece.path, piece.offset, piece.first_frame, frames, tcp, filtered,
                       error, first_ts, late, late_max, decoder.fragments)
    return stats, {k: FlowFrames(_in_order(v[0], FIELDS), v[1], _in_order(v[2], 3), v[3])
                   for k, v in flows.items()}


def _rows(values: array, width: int) -> list:
    return list(zip(*(values[i::width] for i in range(width))))


def _in_order(values: array, width: int) -> array:
    """Rows of ``width`` values led by (order time, frame number), sorted by those (the
    rows of a file in order already are)."""
    if all(values[i] <= values[i + width] for i in range(0, len(values) - width, width)):
        return values
    return array("q", (v for row in sorted(_rows(values, width)) for v in row))


def merge_flow(parts: list[FlowFrames]) -> FlowFrames:
    """One flow's :class:`FlowFrames` of consecutive chunks, in chunk order, as one."""
    if len(parts) == 1:
        return parts[0]
    first_open = nbytes = 0
    for p in parts:
        nbytes += p.nbytes
        if p.first_open and (not first_open or p.first_open < first_open):
            first_open = p.first_open
    return FlowFrames(_merged([p.frames for p in parts], FIELDS), first_open,
                      _merged([p.syns for p in parts], 3), nbytes)


def _merged(runs: list[array], width: int) -> array:
    """Runs of rows sorted by (order time, frame number), end to end, as one sorted array
    (a late frame can put a chunk's first rows before the previous chunk's last)."""
    out = array("q")
    last = None
    ordered = True
    for run in runs:
        if run:
            ordered = ordered and (last is None or last <= (run[0], run[1]))
            last = (run[-width], run[-width + 1])
            out.extend(run)
    if ordered:
        return out
    return array("q", (v for row in heapq.merge(*(_rows(r, width) for r in runs)) for v in row))
