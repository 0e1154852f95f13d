"""Wireshark's TCP conversations: its ``tcp.stream`` number of every TCP segment, and the
frames, bytes and times of each conversation as ``tshark -z conv,tcp`` counts them.

Wireshark numbers every TCP conversation of a capture, MCBP or not, from 0 in order of
first appearance in the file (frame order, not time order: :attr:`Conversation.number` is
known once the capture is read); a conversation is a pair of endpoints, whatever its
segments came through (a segment captured twice, plain and inside a tunnel, is counted
twice in one conversation).
A SYN without ACK whose sequence number differs from the first one its sender used in the
conversation starts a new conversation on the same endpoints (port reuse).
"""

from __future__ import annotations

from .tcp import ACK, SYN


class Conversation:
    """One ``tcp.stream``: ``index`` its place in :attr:`TcpStreams.conversations`, ``ends``
    its two endpoints, lower first (Wireshark's A and B); frames and bytes (on the wire)
    sent by each; its first frame number, first and last frame times; ``number``
    Wireshark's, once :meth:`TcpStreams.finish` gave it."""

    __slots__ = ("index", "number", "ends", "base_seq", "frames", "bytes", "first_frame",
                 "first_ts_ns", "last_ts_ns")

    def __init__(self, index: int, ends: tuple, frame: int, ts_ns: int):
        self.index = index                      # in TcpStreams.conversations
        self.number: int | None = None
        self.ends, self.first_frame = ends, frame
        self.base_seq: list = [None, None]      # the first sequence number each end sent
        self.frames, self.bytes = [0, 0], [0, 0]
        self.first_ts_ns = self.last_ts_ns = ts_ns

    def sent(self, end: tuple) -> tuple[int, int]:
        """(frames, bytes) sent by ``end`` (one of :attr:`ends`)."""
        i = self.ends.index(end)
        return self.frames[i], self.bytes[i]


class TcpStreams:
    """Fed every TCP segment of a capture as it is read (:meth:`feed`); :meth:`current`
    names the conversation a pair of endpoints is in now; :meth:`finish` numbers them."""

    def __init__(self):
        self.conversations: list[Conversation] = []
        self._by_ends: dict[tuple, Conversation] = {}

    def feed(self, seg, frame: int, ts_ns: int, wirelen: int) -> None:
        """Count segment ``seg`` of frame ``frame`` (``wirelen`` bytes on the wire) in its
        conversation, which it opens when new or when a SYN starts one again."""
        src, dst = (seg.src, seg.sport), (seg.dst, seg.dport)
        ends = (src, dst) if src <= dst else (dst, src)
        i = 0 if src == ends[0] else 1
        conv = self._by_ends.get(ends)
        if conv is None or (seg.flags & (SYN | ACK) == SYN and conv.base_seq[i] is not None
                            and conv.base_seq[i] != seg.seq):
            conv = self._by_ends[ends] = Conversation(len(self.conversations), ends, frame,
                                                          ts_ns)
            self.conversations.append(conv)
        if conv.base_seq[i] is None:
            conv.base_seq[i] = seg.seq
        conv.frames[i] += 1
        conv.bytes[i] += wirelen
        conv.first_frame = min(conv.first_frame, frame)
        conv.first_ts_ns = min(conv.first_ts_ns, ts_ns)
        conv.last_ts_ns = max(conv.last_ts_ns, ts_ns)

    def finish(self) -> None:
        """Number the conversations as Wireshark does: by first frame in the file."""
        for number, conv in enumerate(sorted(self.conversations, key=lambda c: c.first_frame)):
            conv.number = number

    def current(self, a: tuple, b: tuple) -> int | None:
        """The index in :attr:`conversations` of the conversation of endpoints ``a`` and
        ``b`` as of the last segment fed."""
        conv = self._by_ends.get((a, b) if a <= b else (b, a))
        return None if conv is None else conv.index
