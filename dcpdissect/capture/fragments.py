"""Reassembly of IP packets from their fragments, within bounds.

Fragments are gathered per key (IPv4: source, destination, protocol and identification;
IPv6: source, destination and identification, RFC 8200) until the fragment without "more
fragments" is known and the fragments cover every byte up to it. Overlapping fragments keep
the bytes seen first. A packet is given up when its first fragment is older than
``timeout_ns`` (capture time) or when the buffered bytes or packets exceed their caps (the
oldest goes first); a fragment that would end beyond 65535 bytes is invalid. Nothing raises:
what cannot be completed is only counted (:attr:`Defragmenter.stats`).

A snaplen that cut fragments still completes the packet when the fragments' lengths on the
wire cover it: the packet is then its captured bytes up to the first one missing, and
``missing`` says how many bytes of it the capture did not keep.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple, Optional

__all__ = ["Defragmenter", "Reassembled", "MAX_PACKET"]

MAX_PACKET = 65535          # no fragment may end beyond this offset


class Reassembled(NamedTuple):
    proto: int              # what the first fragment says follows (protocol, next header)
    data: bytes             # the captured bytes from offset 0 up to the first one missing
    missing: int            # bytes of the packet on the wire the capture did not keep
    frames: tuple           # the frame numbers of its fragments, in order


class _Packet:
    """The fragments of one packet so far."""
    __slots__ = ("started", "pieces", "spans", "total", "proto", "frames", "size")

    def __init__(self, started: int):
        self.started = started      # capture time of its first fragment
        self.pieces: list = []      # (offset, bytes): captured bytes, sorted, disjoint
        self.spans: list = []       # [start, end): wire extent covered, sorted, merged
        self.total: Optional[int] = None    # the packet's length, from its last fragment
        self.proto: Optional[int] = None
        self.frames: list = []
        self.size = 0               # captured bytes held

    def add(self, offset: int, chunk: bytes, wire: int, more: bool, proto: int,
            frames: tuple) -> int:
        """Take one fragment; return the number of captured bytes it added."""
        end = offset + wire
        if not more and self.total is None:
            self.total = end
        if offset == 0 and self.proto is None:
            self.proto = proto
        for f in frames:
            if f not in self.frames:
                self.frames.append(f)
        self._cover(offset, end)
        pieces = self.pieces
        if not pieces or offset >= pieces[-1][0] + len(pieces[-1][1]):    # past the rest
            pieces.append((offset, chunk))
            self.size += len(chunk)
            return len(chunk)
        return self._keep(offset, chunk)

    def _cover(self, start: int, end: int) -> None:
        spans = self.spans
        if not spans or start > spans[-1][1]:           # past the rest
            spans.append((start, end))
            return
        last = spans[-1]
        if start >= last[0]:                            # meets the last span only
            spans[-1] = (last[0], max(last[1], end))
            return
        spans = [s for s in spans if s[1] < start or s[0] > end]
        for s in self.spans:
            if not (s[1] < start or s[0] > end):
                start, end = min(start, s[0]), max(end, s[1])
        spans.append((start, end))
        spans.sort()
        self.spans = spans

    def _keep(self, offset: int, chunk: bytes) -> int:
        """Store the bytes of ``chunk`` no earlier fragment gave (the first ones win)."""
        new, cur, end = [], offset, offset + len(chunk)
        for start, data in self.pieces:
            stop = start + len(data)
            if stop <= cur:
                continue
            if start >= end:
                break
            if start > cur:
                new.append((cur, chunk[cur - offset:start - offset]))
            cur = max(cur, stop)
        if cur < end:
            new.append((cur, chunk[cur - offset:]))
        if new:
            self.pieces = sorted(self.pieces + new, key=lambda piece: piece[0])
        added = sum(len(data) for _start, data in new)
        self.size += added
        return added

    @property
    def complete(self) -> bool:
        spans = self.spans      # a span from 0 holds the first fragment, hence proto
        return self.total is not None and spans[0][0] == 0 and spans[0][1] >= self.total

    def result(self) -> Reassembled:
        parts, at, total = [], 0, self.total
        for start, data in self.pieces:
            if start != at or at >= total:
                break
            data = data[:total - at]
            parts.append(data)
            at += len(data)
        return Reassembled(self.proto, b"".join(parts), total - at, tuple(sorted(self.frames)))


class Defragmenter:
    """Feed every fragment to :meth:`add`; it returns the packet its last one completes."""

    def __init__(self, timeout_ns: int = 30_000_000_000, max_bytes: int = 4 << 20,
                 max_packets: int = 4096):
        self.timeout_ns = timeout_ns
        self.max_bytes = max_bytes
        self.max_packets = max_packets
        self.pending: OrderedDict = OrderedDict()     # key -> _Packet, oldest first
        self.held = 0                                 # captured bytes held
        self.stats = dict.fromkeys(("fragments", "reassembled", "timed_out", "evicted",
                                    "invalid", "incomplete"), 0)

    def add(self, key: tuple, offset: int, more: bool, chunk: bytes, wire: int, proto: int,
            frames: tuple, ts_ns: int) -> Optional[Reassembled]:
        """One fragment: ``chunk`` (its captured bytes) at ``offset`` of the packet, ``wire``
        bytes long on the wire, ``more`` fragments after it, carried by ``frames`` (one, or
        those of a packet reassembled around it); ``proto`` is what follows when it is the
        first. Returns the reassembled packet when this fragment completes it."""
        stats = self.stats
        stats["fragments"] += 1
        if self.pending:
            self._expire(ts_ns)
        if offset + wire > MAX_PACKET or wire <= 0:
            stats["invalid"] += 1
            return None
        pkt = self.pending.get(key)
        if pkt is None:
            pkt = self.pending[key] = _Packet(ts_ns)
        self.held += pkt.add(offset, chunk, wire, more, proto, frames)
        if pkt.complete:
            del self.pending[key]
            self.held -= pkt.size
            stats["reassembled"] += 1
            return pkt.result()
        while self.held > self.max_bytes or len(self.pending) > self.max_packets:
            self._drop("evicted")
        return None

    def _expire(self, ts_ns: int) -> None:
        limit = ts_ns - self.timeout_ns
        pending = self.pending
        while pending and next(iter(pending.values())).started < limit:
            self._drop("timed_out")

    def _drop(self, why: str) -> None:
        _key, pkt = self.pending.popitem(last=False)
        self.held -= pkt.size
        self.stats[why] += 1

    def finish(self) -> None:
        """End of capture: the packets still waiting count as incomplete."""
        self.stats["incomplete"] += len(self.pending)
        self.pending.clear()
        self.held = 0

    @property
    def unreassembled(self) -> int:
        """Packets (or invalid fragments) given up so far."""
        s = self.stats
        return s["timed_out"] + s["evicted"] + s["invalid"] + s["incomplete"]
