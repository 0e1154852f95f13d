"""Reassembly of one direction of one TCP connection.

Sequence numbers are compared with RFC 1982 serial arithmetic modulo 2**32
and mapped to an unbounded *stream offset* (bytes since the stream start),
so consumers never see wrapped values.  Out-of-order data is buffered as
non-overlapping pieces (first-seen bytes win) within configurable bounds.

Bytes the capture did not keep (a frame cut by the snapshot length: its IP
length says how long the segment was on the wire) are not lost: they take
their place in the stream as an *uncaptured* :class:`StreamGap`, in order,
so that whoever frames the stream knows exactly where captured bytes resume.

The event types are defined here and re-exported by
:mod:`dcpdissect.reassembly.connections`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import NamedTuple, Optional

__all__ = [
    "StreamData", "StreamGap", "TcpAnomaly", "DirectionReassembler",
    "FIN", "SYN", "RST", "PSH", "ACK", "EMPTY", "LOST", "UNCAPTURED", "seq_lt", "seq_diff",
]

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
_CTL = FIN | SYN | RST
MASK = 0xFFFFFFFF
_HALF = 0x80000000
_WRAP = 0x100000000

EMPTY: tuple = ()
_new = tuple.__new__     # an event without the Python-level __new__ of a NamedTuple
JUMP = 1 << 30              # farther than any TCP window (65535 << 14): not the same byte stream
TAIL_SEGMENTS = 1024        # delivered segments kept for retransmission comparison
_TAIL_HI = TAIL_SEGMENTS + (TAIL_SEGMENTS >> 2)


def seq_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` between two 32-bit sequence numbers."""
    d = (a - b) & MASK
    return d - _WRAP if d & _HALF else d


def seq_lt(a: int, b: int) -> bool:
    """RFC 1982 ``a < b`` for 32-bit sequence numbers."""
    return a != b and ((b - a) & MASK) < _HALF


class StreamData(NamedTuple):
    """In-order bytes of one direction."""

    conn: int
    direction: int      # 0 = client->server, 1 = server->client
    offset: int         # stream offset of data[0]
    data: bytes
    frame: int          # frame number the bytes arrived in
    ts_ns: int


LOST = "lost"                   # the bytes never reached the capture (or a bound gave them up)
UNCAPTURED = "uncaptured"       # the bytes were on the wire, the snapshot length cut them


class StreamGap(NamedTuple):
    """``length`` bytes missing immediately before stream offset ``offset`` (0 after a
    sequence jump: an unknown number of bytes). ``cause`` says why: :data:`LOST` or
    :data:`UNCAPTURED` (then ``frame`` is the frame that carried them, cut short)."""

    conn: int
    direction: int
    offset: int         # stream offset at which data resumes
    length: int
    frame: int          # frame whose data follows the hole (the FIN for a tail hole)
    ts_ns: int
    cause: str = LOST


class _Blank:
    """A run of uncaptured bytes in the out-of-order buffer: only its length is known.
    It slices like bytes and equals anything (its content cannot disagree)."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, s: slice) -> "_Blank":
        return _Blank(len(range(*s.indices(self.n))))

    def __eq__(self, other) -> bool:
        return True

    def __ne__(self, other) -> bool:
        return False

    __hash__ = None


class TcpAnomaly(NamedTuple):
    """Something noteworthy: 'overlap_mismatch', 'ooo_cap', 'connection_cap' or 'seq_jump'."""

    conn: int
    direction: int
    kind: str
    frame: int
    ts_ns: int
    detail: str


def _new_stats() -> dict:
    return dict.fromkeys(("retransmissions", "duplicates", "out_of_order",
                          "overlaps_mismatched", "gaps", "gap_bytes", "ooo_cap_hits",
                          "seq_jumps", "cut_segments", "uncaptured_bytes"), 0)


class DirectionReassembler:
    """Turns the segments of one direction into an in-order byte stream.

    ``feed`` returns the events (:class:`StreamData`, :class:`StreamGap`,
    :class:`TcpAnomaly`) produced by one segment, as a list or the shared
    empty tuple.  ``flush`` declares every pending hole lost and delivers
    what is buffered.  Counters go to ``stats`` (a dict shared with the
    owner if given).

    Definitions: a *duplicate* is a data segment identical to the previous
    data segment of this direction (capture duplication); a
    *retransmission* is any other segment repeating already-seen bytes.
    """

    __slots__ = (
        "conn", "direction", "owner", "peer", "stats", "isn", "mid_stream", "next_off",
        "fin_off", "fin_frame", "fin_ts", "max_segments", "max_bytes",
        "_nseq", "_starts", "_pieces", "_buf_bytes", "_tail", "_tail_bytes",
        "_tail_window", "_tail_hi", "_prev", "_acked",
    )

    def __init__(self, conn: int = 0, direction: int = 0, *, max_segments: int = 1024,
                 max_bytes: int = 16 << 20, tail_window: int = 64 << 10,
                 stats: Optional[dict] = None, owner=None):
        self.conn = conn
        self.direction = direction
        self.owner = owner
        self.peer: Optional[DirectionReassembler] = None   # the other direction, whose
                                                # acknowledgements show what it received
        self.stats = _new_stats() if stats is None else stats
        self.isn: Optional[int] = None          # ISN from a SYN (or inferred from a SYN-ACK)
        self.mid_stream = False                 # started without a SYN
        self.next_off = 0                       # next stream offset to deliver
        self.fin_off: Optional[int] = None      # stream offset of the FIN
        self.fin_frame: Optional[int] = None
        self.fin_ts: Optional[int] = None
        self.max_segments = max_segments
        self.max_bytes = max_bytes
        self._nseq: Optional[int] = None        # sequence number of next_off
        self._starts: list[int] = []            # buffered piece offsets (sorted)
        self._pieces: list[tuple] = []          # (offset, data, frame, ts_ns), parallel
        self._buf_bytes = 0
        self._tail: list = []                   # recently delivered StreamData (a list is
                                                # far smaller than a deque; trimmed in batches)
        self._tail_bytes = 0
        self._tail_window = tail_window
        self._tail_hi = tail_window + (tail_window >> 2)   # trim in batches
        self._prev = None                       # previous data segment
        self._acked = None      # (offset, frame, ts) the other end acknowledged up to, highest

    # -- state -----------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._nseq is not None

    @property
    def buffered(self) -> int:
        """Number of buffered out-of-order pieces."""
        return len(self._starts)

    @property
    def buffered_bytes(self) -> int:
        return self._buf_bytes

    @property
    def complete(self) -> bool:
        """A FIN was seen and every byte before it was delivered (or declared lost)."""
        return self.fin_off is not None and not self._starts and self.next_off >= self.fin_off

    def set_isn(self, isn: int) -> None:
        """Start the stream at ``isn + 1`` (e.g. learned from a SYN-ACK's ack)."""
        if self._nseq is None:
            self.isn = isn & MASK
            self._nseq = (isn + 1) & MASK

    def offset_of(self, seq: int) -> int:
        """Stream offset of sequence number ``seq`` (nearest to the current position)."""
        d = (seq - self._nseq) & MASK
        if d & _HALF:
            d -= _WRAP
        return self.next_off + d

    # -- input -----------------------------------------------------------
    def feed(self, frame: int, ts_ns: int, seg):
        """Process one segment of this direction; return its events (the other direction's
        first, when this segment acknowledges bytes of it the capture does not hold)."""
        peer = self.peer
        if peer is not None and seg.ack != peer._nseq and seg.flags & ACK and peer._nseq is not None:
            out = peer.acked(seg.ack, frame, ts_ns)
            if out:
                out.extend(self._feed(frame, ts_ns, seg))
                return out
        return self._feed(frame, ts_ns, seg)

    def _feed(self, frame: int, ts_ns: int, seg):
        if seg.flags & _CTL or seg.missing:
            return self._feed_slow(frame, ts_ns, seg)
        payload = seg.payload
        if not payload:
            return EMPTY
        if seg.seq != self._nseq or self._starts:
            return self._feed_slow(frame, ts_ns, seg)
        n = len(payload)
        off = self.next_off
        self.next_off = off + n
        self._nseq = (seg.seq + n) & MASK
        self._prev = seg
        ev = _new(StreamData, (self.conn, self.direction, off, payload, frame, ts_ns))
        tail = self._tail
        tail.append(ev)
        tb = self._tail_bytes + n
        if tb > self._tail_hi or len(tail) > _TAIL_HI:
            tb = self._trim_tail(tb)
        self._tail_bytes = tb
        return [ev]

    def _feed_slow(self, frame: int, ts_ns: int, seg):
        flags = seg.flags
        seq = seg.seq
        payload = seg.payload
        n = len(payload)
        if flags & SYN:
            if self._nseq is None:
                self.isn = seq
                self._nseq = (seq + 1) & MASK
            seq = (seq + 1) & MASK
        if self._nseq is None:
            if not (n or flags & FIN):
                return EMPTY
            self._nseq = seq
            self.mid_stream = True
        off = self.offset_of(seq)
        out: list = []
        missing = seg.missing
        wire = n + missing
        if wire and not -JUMP < off - self.next_off < JUMP:
            off = self._jump(seq, off, frame, ts_ns, out)
        if wire:
            prev = self._prev
            if (prev is not None and prev.seq == seg.seq and prev.ack == seg.ack
                    and prev.flags == flags and prev.payload == payload
                    and prev.missing == missing):
                self.stats["duplicates"] += 1
            else:
                self._prev = seg
                if n:
                    self._accept(off, payload, frame, ts_ns, out)
                if missing:
                    self.stats["cut_segments"] += 1
                    self._accept(off + n, _Blank(missing), frame, ts_ns, out)
        if flags & FIN:
            fo = off + wire
            if self.fin_off is None or fo > self.fin_off:
                self.fin_off = fo
                self.fin_frame = frame
                self.fin_ts = ts_ns
        return out or EMPTY

    def _accept(self, off: int, data, frame: int, ts_ns: int, out: list) -> None:
        """Take the bytes (or :class:`_Blank` run) at stream offset ``off``."""
        nxt = self.next_off
        n = len(data)
        blank = type(data) is _Blank
        if off + n <= nxt:
            if n == 1 and off == nxt - 1:
                return                              # keep-alive / window probe repeat
            self.stats["retransmissions"] += 1
            if not blank:
                self._compare_delivered(off, data, frame, ts_ns, out)
            return
        retx = off < nxt
        if retx:
            if not blank:
                self._compare_delivered(off, data[:nxt - off], frame, ts_ns, out)
            data = data[nxt - off:]
            off = nxt
        if off == nxt and not self._starts:
            self._deliver(off, data, frame, ts_ns, out)
        elif self._insert(off, data, frame, ts_ns, out):
            retx = True
        if retx:
            self.stats["retransmissions"] += 1

    # -- delivery --------------------------------------------------------
    def _deliver(self, off: int, data, frame: int, ts_ns: int, out: list) -> None:
        # off == self.next_off
        n = len(data)
        self.next_off = off + n
        self._nseq = (self._nseq + n) & MASK
        if type(data) is _Blank:
            self.stats["uncaptured_bytes"] += n
            out.append(StreamGap(self.conn, self.direction, off + n, n, frame, ts_ns, UNCAPTURED))
            return
        ev = _new(StreamData, (self.conn, self.direction, off, data, frame, ts_ns))
        out.append(ev)
        tail = self._tail
        tail.append(ev)
        tb = self._tail_bytes + n
        if tb > self._tail_hi or len(tail) > _TAIL_HI:
            tb = self._trim_tail(tb)
        self._tail_bytes = tb

    def _gap(self, upto: int, frame: int, ts_ns: int, out: list) -> None:
        length = upto - self.next_off
        self.next_off = upto
        self._nseq = (self._nseq + length) & MASK
        st = self.stats
        st["gaps"] += 1
        st["gap_bytes"] += length
        out.append(StreamGap(self.conn, self.direction, upto, length, frame, ts_ns))

    def _trim_tail(self, tb: int) -> int:
        tail = self._tail
        keep = self._tail_window
        k, last, size = 0, len(tail) - 1, len(tail)
        while k < last:
            n = len(tail[k].data)
            if tb - n < keep and size - k <= TAIL_SEGMENTS:
                break
            tb -= n
            k += 1
        if k:
            del tail[:k]
        return tb

    def _compare_delivered(self, off: int, data: bytes, frame: int, ts_ns: int,
                           out: list) -> None:
        """Compare ``data`` at ``off`` with recently delivered bytes."""
        end = off + len(data)
        tail = self._tail
        if not tail or end <= tail[0].offset:
            return                                  # older than the bytes kept
        for ev in reversed(tail):
            s = ev.offset
            d = ev.data
            e = s + len(d)
            if e <= off:
                break
            if s >= end:
                continue
            a = off if off > s else s
            b = end if end < e else e
            if d[a - s:b - s] != data[a - off:b - off]:
                self._mismatch(a, b, frame, ts_ns, out)
                return

    def _mismatch(self, a: int, b: int, frame: int, ts_ns: int, out: list) -> None:
        self.stats["overlaps_mismatched"] += 1
        out.append(TcpAnomaly(self.conn, self.direction, "overlap_mismatch", frame, ts_ns,
                              f"retransmitted bytes differ from first-seen data "
                              f"in offsets [{a}, {b}); first-seen bytes kept"))

    # -- out-of-order buffer ---------------------------------------------
    def _insert(self, off: int, data: bytes, frame: int, ts_ns: int, out: list) -> bool:
        """Buffer the bytes not already buffered; True if some were."""
        starts = self._starts
        pieces = self._pieces
        end = off + len(data)
        i = bisect_right(starts, off) - 1
        if i < 0:
            i = 0
        cur = off
        new: list = []
        overlapped = mismatched = False
        nb = len(starts)
        while i < nb:
            bs = starts[i]
            if bs >= end:
                break
            bd = pieces[i][1]
            be = bs + len(bd)
            i += 1
            if be <= cur:
                continue
            if bs > cur:
                new.append((cur, bs))
                a = bs
            else:
                a = cur
            b = be if be < end else end
            overlapped = True
            if not mismatched and bd[a - bs:b - bs] != data[a - off:b - off]:
                mismatched = True
                self._mismatch(a, b, frame, ts_ns, out)
            cur = b
        if cur < end:
            new.append((cur, end))
        if not new:
            return overlapped
        if off > self.next_off:
            self.stats["out_of_order"] += 1
        for a, b in new:
            k = bisect_left(starts, a)
            starts.insert(k, a)
            pieces.insert(k, (a, data if (a == off and b == end) else data[a - off:b - off],
                              frame, ts_ns))
            self._buf_bytes += b - a
        self._drain(out)
        if len(starts) > self.max_segments or self._buf_bytes > self.max_bytes:
            self._overflow(frame, ts_ns, out)
        return overlapped

    def _drain(self, out: list) -> None:
        """Deliver buffered pieces that are now contiguous."""
        starts = self._starts
        pieces = self._pieces
        while starts:
            if starts[0] > self.next_off:
                return
            del starts[0]
            off, data, frame, ts_ns = pieces.pop(0)
            self._buf_bytes -= len(data)
            nxt = self.next_off
            if off < nxt:
                data = data[nxt - off:]
                off = nxt
                if not data:
                    continue
            self._deliver(off, data, frame, ts_ns, out)

    def _overflow(self, frame: int, ts_ns: int, out: list) -> None:
        self.stats["ooo_cap_hits"] += 1
        out.append(TcpAnomaly(
            self.conn, self.direction, "ooo_cap", frame, ts_ns,
            f"out-of-order buffer exceeded ({len(self._starts)} segments, "
            f"{self._buf_bytes} bytes); hole at offset {self.next_off} declared lost"))
        while self._starts and (len(self._starts) > self.max_segments
                                or self._buf_bytes > self.max_bytes):
            p = self._pieces[0]
            self._gap(p[0], p[2], p[3], out)
            self._drain(out)

    def _jump(self, seq: int, off: int, frame: int, ts_ns: int, out: list) -> int:
        """The sequence number moved farther than any window allows: deliver what is
        buffered, then continue the stream at ``seq`` (the framer resynchronises if the
        jump fell inside a PDU). Returns the stream offset of ``seq``."""
        pieces = self._pieces
        while pieces:
            p = pieces[0]
            if p[0] > self.next_off:
                self._gap(p[0], p[2], p[3], out)
            self._drain(out)
        self.stats["seq_jumps"] += 1
        out.append(TcpAnomaly(
            self.conn, self.direction, "seq_jump", frame, ts_ns,
            f"sequence number jumped by {seq_diff(seq, self._nseq):+d} (expected {self._nseq}, "
            f"got {seq}); the stream continues at stream offset {self.next_off}"))
        out.append(StreamGap(self.conn, self.direction, self.next_off, 0, frame, ts_ns))
        self._nseq = seq
        self._prev = None
        return self.next_off

    def acked(self, ack: int, frame: int, ts_ns: int) -> list:
        """The other end acknowledged this direction up to sequence number ``ack``: a hole
        before it, with later bytes already here, was received, so no retransmission will
        fill it: it is lost now (at ``frame``), not when the connection ends. Bytes beyond
        everything captured are only noted (the segment may come after its acknowledgement
        in the file): lost if the stream ends without them. Returns the events (gaps, then
        the buffered data they release)."""
        d = (ack - self._nseq) & MASK
        if not d or d & _HALF or d >= JUMP:
            return EMPTY                            # not ahead, or not the same stream
        upto = self.next_off + d
        if self.fin_off is not None and upto > self.fin_off:
            upto = self.fin_off                     # the FIN takes a sequence number
        if self._acked is None or upto > self._acked[0]:
            self._acked = (upto, frame, ts_ns)
        out: list = []
        starts = self._starts
        while starts and starts[0] < upto:
            p = self._pieces[0]
            if p[0] > self.next_off:
                self._gap(p[0], p[2], p[3], out)
            self._drain(out)
        return out

    def flush(self) -> list:
        """Declare all holes lost; deliver buffered data (and a tail gap before a FIN)."""
        out: list = []
        pieces = self._pieces
        while pieces:
            p = pieces[0]
            if p[0] > self.next_off:
                self._gap(p[0], p[2], p[3], out)
            self._drain(out)
        if self.fin_off is not None and self.fin_off > self.next_off and self._nseq is not None:
            self._gap(self.fin_off, self.fin_frame, self.fin_ts, out)
        elif self._acked is not None and self._acked[0] > self.next_off:
            upto, frame, ts_ns = self._acked    # acknowledged, never captured
            self._gap(upto, frame, ts_ns, out)
        return out
