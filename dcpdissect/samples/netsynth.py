"""Synthesise TCP conversations as link-layer frames for capture files.

A :class:`TcpConversation` records application byte exchanges (``send``)
and plans the packets a real stack would put on the wire: the three-way
handshake, data segments, receiver ACKs and the closing exchange.  Plans are
lists of immutable :class:`Packet` objects; the pathology helpers
(:func:`reorder`, :func:`retransmit`, :func:`drop`, ...) are pure functions
from a list to a new list.  :func:`write_pcap` / :func:`write_pcapng` merge
one or more packet lists by timestamp and write them to a capture file.

Timestamp convention: a packet list is always in *capture order* and its
timestamps are non-decreasing.  Transforms keep that invariant: they never
re-sort, they move packets and re-assign timestamps so that time follows the
new capture order.

Everything is deterministic: timestamps come from ``start_ns``/``step_ns``
and from explicit arguments, never from the clock.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import ipaddress
import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Sequence

from ..capture.pcapwrite import PcapngWriter, PcapWriter

__all__ = [
    "Endpoint",
    "Link",
    "Packet",
    "TcpConversation",
    "WrittenPackets",
    "FIN",
    "SYN",
    "RST",
    "PSH",
    "ACK",
    "reorder",
    "retransmit",
    "drop",
    "start_at",
    "overlap",
    "truncate_capture",
    "retime",
    "data_indices",
    "merge_packets",
    "inet_checksum",
    "write_pcap",
    "write_pcapng",
]

SEQ_MOD = 1 << 32

FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10

_FLAG_LETTERS = ((FIN, "F"), (SYN, "S"), (RST, "R"), (PSH, "P"), (ACK, "A"))

_TTL = 64
_WINDOW = 65535
_DIRECTIONS = ("c2s", "s2c")


def _other(direction: str) -> str:
    return "s2c" if direction == "c2s" else "c2s"


def _check_direction(direction: str) -> str:
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be 'c2s' or 's2c', got {direction!r}")
    return direction


# ---------------------------------------------------------------------------
# checksums and headers
# ---------------------------------------------------------------------------

def inet_checksum(data: bytes) -> int:
    """RFC 1071 Internet checksum of ``data``."""
    if len(data) % 2:
        data += b"\0"
    if not data:
        return 0xFFFF
    total = int.from_bytes(data, "big") % 0xFFFF
    if total == 0 and any(data):
        total = 0xFFFF
    return ~total & 0xFFFF


@dataclass(frozen=True)
class Endpoint:
    """One side of a TCP connection: IPv4 or IPv6 address text and port."""

    ip: str
    port: int

    def __post_init__(self) -> None:
        ipaddress.ip_address(self.ip)  # validates
        if not 0 <= self.port <= 0xFFFF:
            raise ValueError(f"port out of range: {self.port}")

    @functools.cached_property
    def version(self) -> int:
        return ipaddress.ip_address(self.ip).version

    @functools.cached_property
    def packed(self) -> bytes:
        return ipaddress.ip_address(self.ip).packed


def _mac(text: str) -> bytes:
    raw = bytes.fromhex(text.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"bad MAC address {text!r}")
    return raw


_LINKTYPES = {"ethernet": 1, "sll": 113, "sll2": 276, "null": 0, "raw": 101}
_ETHERTYPE = {4: 0x0800, 6: 0x86DD}
_PACKET_HOST = 0
_PACKET_OUTGOING = 4


@dataclass(frozen=True)
class Link:
    """Link-layer framing of IP packets.

    ``kind`` is one of ``ethernet`` (optional ``vlan`` tags: one tag uses
    0x8100, several use 0x88A8 for the outermost and 0x8100 for the rest),
    ``sll`` (Linux cooked v1), ``sll2`` (Linux cooked v2), ``null`` (BSD
    loopback; 4-byte address family in ``null_byteorder``) or ``raw`` (bare
    IP, linktype 101).  For cooked captures the capture is taken on
    ``capture_host`` ('client' or 'server'): its own frames are marked
    outgoing, the peer's as addressed to the host.
    """

    kind: str = "ethernet"
    vlan: tuple[int, ...] = ()
    client_mac: str = "02:00:00:00:00:01"
    server_mac: str = "02:00:00:00:00:02"
    capture_host: str = "client"
    ifindex: int = 1
    null_byteorder: str = "little"
    null_af_inet6: int = 24

    def __post_init__(self) -> None:
        if self.kind not in _LINKTYPES:
            raise ValueError(f"unknown link kind {self.kind!r}; expected one of {sorted(_LINKTYPES)}")
        vlan = (self.vlan,) if isinstance(self.vlan, int) else tuple(int(v) for v in self.vlan)
        object.__setattr__(self, "vlan", vlan)
        if vlan and self.kind != "ethernet":
            raise ValueError("VLAN tags are only supported on ethernet links")
        for vid in vlan:
            if not 0 <= vid <= 0xFFF:
                raise ValueError(f"VLAN id out of range: {vid}")
        _mac(self.client_mac)
        _mac(self.server_mac)
        if self.capture_host not in ("client", "server"):
            raise ValueError("capture_host must be 'client' or 'server'")
        if self.null_byteorder not in ("little", "big"):
            raise ValueError("null_byteorder must be 'little' or 'big'")

    @property
    def linktype(self) -> int:
        return _LINKTYPES[self.kind]

    def frame(self, ip_packet: bytes, direction: str = "c2s") -> bytes:
        """Wrap ``ip_packet`` (sent in ``direction``) in this link's header."""
        _check_direction(direction)
        version = ip_packet[0] >> 4 if ip_packet else 0
        if version not in _ETHERTYPE:
            raise ValueError("not an IPv4/IPv6 packet")
        ethertype = _ETHERTYPE[version]
        cmac, smac = _mac(self.client_mac), _mac(self.server_mac)
        src, dst = (cmac, smac) if direction == "c2s" else (smac, cmac)
        if self.kind == "ethernet":
            hdr = dst + src
            for n, vid in enumerate(self.vlan):
                tpid = 0x88A8 if n == 0 and len(self.vlan) > 1 else 0x8100
                hdr += struct.pack("!HH", tpid, vid)
            return hdr + struct.pack("!H", ethertype) + ip_packet
        if self.kind == "raw":
            return bytes(ip_packet)
        if self.kind == "null":
            af = 2 if version == 4 else self.null_af_inet6
            return af.to_bytes(4, self.null_byteorder) + ip_packet
        from_host = (direction == "c2s") == (self.capture_host == "client")
        pkttype = _PACKET_OUTGOING if from_host else _PACKET_HOST
        addr = src + b"\0\0"
        if self.kind == "sll":
            return struct.pack("!HHH8sH", pkttype, 1, 6, addr, ethertype) + ip_packet
        # sll2
        return struct.pack("!HHIHBB8s", ethertype, 0, self.ifindex, 1, pkttype, 6, addr) + ip_packet


# ---------------------------------------------------------------------------
# packets
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Packet:
    """One planned TCP segment.

    ``stream_offset`` is the offset of the payload in the sender's
    application byte stream (0 = first byte sent in that direction) and is
    ``None`` for segments without payload.  ``snaplen`` limits the bytes of
    the frame that are captured (``None`` = whole frame).  ``note`` labels
    packets made by pathology helpers ('retransmission', 'overlap').
    """

    direction: str
    seq: int
    ack: int
    flags: int
    payload: bytes
    ts_ns: int
    src: Endpoint
    dst: Endpoint
    link: Link = Link()
    ip_id: int = 0
    window: int = _WINDOW
    mss: int | None = None
    snaplen: int | None = None
    stream_offset: int | None = None
    note: str = ""
    conversation: "TcpConversation | None" = field(default=None, compare=False, repr=False)

    @property
    def is_data(self) -> bool:
        return bool(self.payload)

    @property
    def seq_end(self) -> int:
        """Sequence number following this segment (SYN/FIN count as one)."""
        n = len(self.payload) + (1 if self.flags & SYN else 0) + (1 if self.flags & FIN else 0)
        return (self.seq + n) % SEQ_MOD

    @property
    def flag_str(self) -> str:
        return "".join(ch for bit, ch in _FLAG_LETTERS if self.flags & bit)

    def tcp_bytes(self) -> bytes:
        """TCP header and payload with a valid checksum."""
        opts = struct.pack("!BBH", 2, 4, self.mss) if self.mss is not None else b""
        offset = (20 + len(opts)) // 4
        hdr = struct.pack(
            "!HHIIBBHHH",
            self.src.port,
            self.dst.port,
            self.seq % SEQ_MOD,
            self.ack % SEQ_MOD,
            offset << 4,
            self.flags & 0xFF,
            self.window,
            0,
            0,
        ) + opts
        seg = hdr + self.payload
        if self.src.version == 4:
            pseudo = self.src.packed + self.dst.packed + struct.pack("!BBH", 0, 6, len(seg))
        else:
            pseudo = self.src.packed + self.dst.packed + struct.pack("!I3xB", len(seg), 6)
        csum = inet_checksum(pseudo + seg)
        return seg[:16] + struct.pack("!H", csum) + seg[18:]

    def ip_bytes(self) -> bytes:
        """Complete IPv4 or IPv6 packet."""
        tcp = self.tcp_bytes()
        if self.src.version == 4:
            hdr = struct.pack(
                "!BBHHHBBH4s4s",
                0x45,
                0,
                20 + len(tcp),
                self.ip_id & 0xFFFF,
                0x4000,  # DF
                _TTL,
                6,
                0,
                self.src.packed,
                self.dst.packed,
            )
            hdr = hdr[:10] + struct.pack("!H", inet_checksum(hdr)) + hdr[12:]
            return hdr + tcp
        hdr = struct.pack("!IHBB16s16s", 6 << 28, len(tcp), 6, _TTL, self.src.packed, self.dst.packed)
        return hdr + tcp

    def frame_bytes(self) -> bytes:
        """The whole frame as it was on the wire."""
        return self.link.frame(self.ip_bytes(), self.direction)

    @property
    def wirelen(self) -> int:
        return len(self.frame_bytes())

    def captured_bytes(self) -> bytes:
        """The frame bytes as captured (cut to ``snaplen``)."""
        frame = self.frame_bytes()
        return frame if self.snaplen is None else frame[: self.snaplen]


# ---------------------------------------------------------------------------
# conversation planner
# ---------------------------------------------------------------------------

@dataclass
class _Send:
    direction: str
    data: bytes
    sizes: tuple[int, ...] | None
    coalesce: bool


@dataclass
class _Pause:
    ns: int


@dataclass
class _Close:
    how: str
    initiator: str


def _segment_group(calls: list[_Send], mss: int) -> list[tuple[int, int]]:
    """Cut the concatenated bytes of a coalesced group of sends into segments.

    Explicit ``segment_sizes`` give hard cut points (relative to their call);
    the final cut of a coalescing call is dropped so its last piece joins
    the next call's bytes.  Pieces made only of explicitly sized bytes are
    kept whole (they may exceed the MSS); other pieces are cut at ``mss``.
    """
    cuts: set[int] = set()
    explicit: list[tuple[int, int]] = []
    pos = 0
    for n, call in enumerate(calls):
        start, end = pos, pos + len(call.data)
        if call.sizes:
            acc = start
            for size in call.sizes:
                acc += size
                cuts.add(acc)
            explicit.append((start, acc))
            if acc == end and call.coalesce and n + 1 < len(calls):
                cuts.discard(acc)
        pos = end
    total = pos
    cuts.discard(0)
    cuts.discard(total)
    bounds = [0] + sorted(cuts) + [total]

    def fully_explicit(a: int, b: int) -> bool:
        covered = a  # explicit ranges are sorted and disjoint
        for s, e in explicit:
            if s <= covered < e:
                covered = e
        return covered >= b

    segments: list[tuple[int, int]] = []
    for a, b in zip(bounds, bounds[1:]):
        if a == b:
            continue
        if fully_explicit(a, b):
            segments.append((a, b))
            continue
        while a < b:
            e = min(a + mss, b)
            segments.append((a, e))
            a = e
    return segments


class TcpConversation:
    """Plan of one TCP connection between ``client`` and ``server``.

    Sequence numbers are modulo 2**32; the first payload byte in each
    direction has sequence number ``isn + 1`` whether or not the handshake
    is emitted.  Every planned packet is ``step_ns`` after the previous one
    (``pause`` inserts idle time).  After each data segment the receiver
    sends a pure ACK; with ``ack_every=2`` only every second segment is
    acknowledged at once, and leftovers are acknowledged at the end of the
    send (or carried by the receiver's own data if it sends next).
    """

    def __init__(
        self,
        client: Endpoint,
        server: Endpoint,
        *,
        isn_client: int = 1000,
        isn_server: int = 5000,
        mss: int = 1448,
        start_ns: int = 1_700_000_000_000_000_000,
        step_ns: int = 1000,
        handshake: bool = True,
        link: Link = Link("ethernet"),
        ack_every: int = 1,
        ip_id_client: int = 1,
        ip_id_server: int = 1,
    ) -> None:
        if client.version != server.version:
            raise ValueError("client and server must use the same IP version")
        if mss <= 0:
            raise ValueError("mss must be positive")
        if ack_every not in (1, 2):
            raise ValueError("ack_every must be 1 or 2")
        if step_ns < 0 or start_ns < 0:
            raise ValueError("timestamps must not be negative")
        self.client = client
        self.server = server
        self.isn_client = isn_client % SEQ_MOD
        self.isn_server = isn_server % SEQ_MOD
        self.mss = mss
        self.start_ns = start_ns
        self.step_ns = step_ns
        self.handshake = handshake
        self.link = link
        self.ack_every = ack_every
        self.ip_id_client = ip_id_client & 0xFFFF
        self.ip_id_server = ip_id_server & 0xFFFF
        self._ops: list[_Send | _Pause | _Close] = []
        self._closed = False

    # -- recording ------------------------------------------------------
    def send(
        self,
        direction: str,
        data: bytes,
        *,
        segment_sizes: Sequence[int] | None = None,
        coalesce_with_next: bool = False,
    ) -> None:
        """Append application bytes sent in ``direction`` ('c2s'/'s2c').

        ``segment_sizes`` cuts this call's bytes explicitly (any remainder is
        cut at the MSS).  With ``coalesce_with_next`` the bytes are joined
        with the next send in the same direction, so that several messages
        share segments; a send in the other direction, a pause or a close
        ends the group.
        """
        _check_direction(direction)
        if self._closed:
            raise RuntimeError("conversation already closed")
        data = bytes(data)
        sizes = None
        if segment_sizes is not None:
            sizes = tuple(int(s) for s in segment_sizes)
            if any(s <= 0 for s in sizes):
                raise ValueError("segment sizes must be positive")
            if sum(sizes) > len(data):
                raise ValueError("segment sizes exceed the data length")
        self._ops.append(_Send(direction, data, sizes, bool(coalesce_with_next)))

    def pause(self, ns: int) -> None:
        """Let ``ns`` nanoseconds pass before the next packet."""
        if ns < 0:
            raise ValueError("pause must not be negative")
        self._ops.append(_Pause(int(ns)))

    def close(self, how: str = "fin", *, initiator: str = "c2s") -> None:
        """End the connection: FIN exchange (FIN/ACK, FIN/ACK, ACK) or 'rst'."""
        if how not in ("fin", "rst"):
            raise ValueError("how must be 'fin' or 'rst'")
        _check_direction(initiator)
        if self._closed:
            raise RuntimeError("conversation already closed")
        self._closed = True
        self._ops.append(_Close(how, initiator))

    def operations(self) -> list[tuple]:
        """What was recorded, in order: ``('send', direction, data, coalesce_with_next)``,
        ``('pause', ns)`` and ``('close', how, initiator)``."""
        out: list[tuple] = []
        for op in self._ops:
            if isinstance(op, _Send):
                out.append(("send", op.direction, op.data, op.coalesce))
            elif isinstance(op, _Pause):
                out.append(("pause", op.ns))
            else:
                out.append(("close", op.how, op.initiator))
        return out

    def sent(self, direction: str) -> bytes:
        """All application bytes sent in ``direction``, in order."""
        _check_direction(direction)
        return b"".join(op.data for op in self._ops if isinstance(op, _Send) and op.direction == direction)

    @property
    def data_base(self) -> dict[str, int]:
        """Sequence number of the first payload byte per direction."""
        return {"c2s": (self.isn_client + 1) % SEQ_MOD, "s2c": (self.isn_server + 1) % SEQ_MOD}

    # -- planning -------------------------------------------------------
    def packets(self) -> list[Packet]:
        """Plan all packets in capture order."""
        out: list[Packet] = []
        ends = {"c2s": self.client, "s2c": self.server}
        ip_id = {"c2s": self.ip_id_client, "s2c": self.ip_id_server}
        base = self.data_base
        nxt = dict(base)
        sent_bytes = {"c2s": 0, "s2c": 0}
        unacked = {"c2s": 0, "s2c": 0}  # segments received but not acked, keyed by receiver
        t = self.start_ns

        def emit(direction: str, flags: int, payload: bytes = b"", *, seq: int | None = None, mss=None, offset=None):
            nonlocal t
            other = _other(direction)
            pkt = Packet(
                direction=direction,
                seq=nxt[direction] if seq is None else seq,
                ack=nxt[other] if flags & ACK else 0,
                flags=flags,
                payload=payload,
                ts_ns=t,
                src=ends[direction],
                dst=ends[other],
                link=self.link,
                ip_id=ip_id[direction],
                mss=mss,
                stream_offset=offset,
                conversation=self,
            )
            ip_id[direction] = (ip_id[direction] + 1) & 0xFFFF
            t += self.step_ns
            out.append(pkt)
            return pkt

        def ack_from(receiver: str) -> None:
            emit(receiver, ACK)
            unacked[receiver] = 0

        if self.handshake:
            nxt["c2s"] = self.isn_client
            nxt["s2c"] = self.isn_server
            emit("c2s", SYN, mss=self.mss)
            nxt["c2s"] = base["c2s"]
            emit("s2c", SYN | ACK, mss=self.mss)
            nxt["s2c"] = base["s2c"]
            emit("c2s", ACK)

        ops = self._ops
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, _Pause):
                t += op.ns
                i += 1
                continue
            if isinstance(op, _Close):
                self._plan_close(op, emit, nxt, unacked)
                i += 1
                continue
            group = [op]
            while group[-1].coalesce and i + len(group) < len(ops):
                nxt_op = ops[i + len(group)]
                if not (isinstance(nxt_op, _Send) and nxt_op.direction == op.direction):
                    break
                group.append(nxt_op)
            i += len(group)
            direction, receiver = op.direction, _other(op.direction)
            blob = b"".join(c.data for c in group)
            for a, b in _segment_group(group, self.mss):
                emit(direction, PSH | ACK, blob[a:b], offset=sent_bytes[direction] + a)
                nxt[direction] = (nxt[direction] + (b - a)) % SEQ_MOD
                unacked[receiver] += 1
                if unacked[receiver] >= self.ack_every:
                    ack_from(receiver)
            sent_bytes[direction] += len(blob)
            if unacked[receiver]:
                follow = ops[i] if i < len(ops) else None
                if isinstance(follow, _Send) and follow.direction == receiver and follow.data:
                    unacked[receiver] = 0  # piggybacked on the receiver's data
                else:
                    ack_from(receiver)
        return out

    def _plan_close(self, op: _Close, emit, nxt, unacked) -> None:
        first, second = op.initiator, _other(op.initiator)
        unacked["c2s"] = unacked["s2c"] = 0
        if op.how == "rst":
            emit(first, RST | ACK)
            return
        emit(first, FIN | ACK)
        nxt[first] = (nxt[first] + 1) % SEQ_MOD
        emit(second, FIN | ACK)
        nxt[second] = (nxt[second] + 1) % SEQ_MOD
        emit(first, ACK)


# ---------------------------------------------------------------------------
# pathologies (pure functions on packet lists)
# ---------------------------------------------------------------------------

def _index(pkts: Sequence[Packet], i: int) -> int:
    n = len(pkts)
    if not -n <= i < n:
        raise IndexError(f"packet index {i} out of range for {n} packets")
    return i % n


def data_indices(pkts: Sequence[Packet], direction: str | None = None) -> list[int]:
    """Positions of packets carrying payload (optionally in one direction)."""
    return [n for n, p in enumerate(pkts) if p.payload and (direction is None or p.direction == direction)]


def reorder(pkts: Sequence[Packet], i: int, j: int) -> list[Packet]:
    """Swap the capture positions of packets ``i`` and ``j``.

    Timestamps stay with the positions: the packet moved to position ``i``
    receives the old timestamp of position ``i`` and vice versa, so time
    remains monotonic in the new capture order.
    """
    i, j = _index(pkts, i), _index(pkts, j)
    out = list(pkts)
    out[i] = dataclasses.replace(pkts[j], ts_ns=pkts[i].ts_ns)
    out[j] = dataclasses.replace(pkts[i], ts_ns=pkts[j].ts_ns)
    return causal_acks(out, min(i, j), max(i, j))


def causal_acks(pkts: list[Packet], lo: int = 0, hi: int | None = None) -> list[Packet]:
    """Clamp the ACK of every packet at positions lo..hi to the bytes of the other
    direction captured in order before it: a segment moved earlier cannot acknowledge
    what its peer had not yet sent, and a receiver acknowledges up to a hole (duplicate
    ACKs) until the late segment fills it (or for good, after :func:`drop` of a segment
    the receiver never got)."""
    pkts = list(pkts)
    hi = len(pkts) - 1 if hi is None else hi
    nxt: dict[str, int] = {}
    pending: dict[str, dict[int, int]] = {"c2s": {}, "s2c": {}}
    for k, p in enumerate(pkts[:hi + 1]):
        other = "s2c" if p.direction == "c2s" else "c2s"
        if lo <= k and p.flags & 0x10 and other in nxt and 0 < (p.ack - nxt[other]) & 0xFFFFFFFF < 0x80000000:
            pkts[k] = p = dataclasses.replace(p, ack=nxt[other])
        if p.flags & 0x02:
            nxt[p.direction] = (p.seq + 1) & 0xFFFFFFFF
        elif p.payload and p.direction in nxt:
            ahead = pending[p.direction]
            ahead[p.seq] = max(ahead.get(p.seq, 0), len(p.payload))
            while nxt[p.direction] in ahead:
                nxt[p.direction] = (nxt[p.direction] + ahead.pop(nxt[p.direction])) & 0xFFFFFFFF
    return pkts


def _insert_copy(pkts: Sequence[Packet], i: int, delay: int, note: str, payload: bytes | None) -> list[Packet]:
    i = _index(pkts, i)
    if delay < 1:
        raise ValueError("delay must be at least 1")
    orig = pkts[i]
    pos = min(i + delay, len(pkts))
    prev_ts = pkts[pos - 1].ts_ns
    ts = (prev_ts + pkts[pos].ts_ns) // 2 if pos < len(pkts) else prev_ts + 1000
    same = [p.ip_id for p in pkts[:pos] if p.src == orig.src and p.dst == orig.dst]
    new_id = ((same[-1] if same else orig.ip_id) + 1) & 0xFFFF
    changes = dict(ts_ns=ts, ip_id=new_id, note=note)
    if payload is not None:
        changes["payload"] = bytes(payload)
    out = list(pkts)
    out.insert(pos, dataclasses.replace(orig, **changes))
    return out


def retransmit(pkts: Sequence[Packet], i: int, delay: int = 1) -> list[Packet]:
    """Insert a copy of packet ``i`` (same seq/payload) ``delay`` positions later.

    ``delay=1`` places it right after the original.  The copy gets a fresh
    IP id, ``note='retransmission'`` and a timestamp between its neighbours.
    """
    return _insert_copy(pkts, i, delay, "retransmission", None)


def overlap(pkts: Sequence[Packet], i: int, new_payload: bytes, delay: int = 1) -> list[Packet]:
    """Like :func:`retransmit` but the copy carries ``new_payload`` (same seq).

    The copy's bytes disagree with the original's over the overlapping
    range (``note='overlap'``).
    """
    if not pkts[_index(pkts, i)].payload:
        raise ValueError("overlap needs a data packet")
    return _insert_copy(pkts, i, delay, "overlap", new_payload)


def drop(pkts: Sequence[Packet], i: int) -> list[Packet]:
    """Remove packet ``i`` (lost / not captured); other packets are unchanged."""
    i = _index(pkts, i)
    return list(pkts[:i]) + list(pkts[i + 1 :])


def start_at(pkts: Sequence[Packet], i: int) -> list[Packet]:
    """Drop everything before packet ``i`` (capture starts mid-stream)."""
    return list(pkts[_index(pkts, i) :])


def truncate_capture(pkts: Sequence[Packet], i: int, snap: int) -> list[Packet]:
    """Capture only the first ``snap`` frame bytes of packet ``i``.

    The original frame length is still recorded as the wire length.
    """
    if snap < 0:
        raise ValueError("snap must not be negative")
    i = _index(pkts, i)
    out = list(pkts)
    out[i] = dataclasses.replace(pkts[i], snaplen=snap)
    return out


def retime(pkts: Sequence[Packet], start_ns: int, step_ns: int = 1000) -> list[Packet]:
    """Re-assign timestamps ``start_ns + k * step_ns`` in list order."""
    return [dataclasses.replace(p, ts_ns=start_ns + k * step_ns) for k, p in enumerate(pkts)]


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _sources(obj) -> list[list[Packet]]:
    if isinstance(obj, TcpConversation):
        return [obj.packets()]
    if isinstance(obj, Packet):
        return [[obj]]
    items = list(obj)
    if all(isinstance(x, Packet) for x in items):
        return [items] if items else []
    out: list[list[Packet]] = []
    for x in items:
        if isinstance(x, TcpConversation):
            out.append(x.packets())
        elif isinstance(x, Packet):
            raise TypeError("mix of packets and conversations; wrap loose packets in a list")
        else:
            lst = list(x)
            if not all(isinstance(p, Packet) for p in lst):
                raise TypeError("expected conversations or lists of packets")
            out.append(lst)
    return out


def _merge_indexed(sources: list[list[Packet]]) -> list[tuple[int, Packet]]:
    heap = [(src[0].ts_ns, k, 0) for k, src in enumerate(sources) if src]
    heapq.heapify(heap)
    merged: list[tuple[int, Packet]] = []
    while heap:
        _, k, pos = heapq.heappop(heap)
        merged.append((k, sources[k][pos]))
        if pos + 1 < len(sources[k]):
            heapq.heappush(heap, (sources[k][pos + 1].ts_ns, k, pos + 1))
    return merged


def merge_packets(conversations_or_packets) -> list[Packet]:
    """Merge sources by timestamp; ties keep source order, each source keeps its order."""
    return [p for _, p in _merge_indexed(_sources(conversations_or_packets))]


class WrittenPackets(list):
    """Packets in file order (frame number = index + 1).

    ``interface_ids`` gives each frame's pcapng interface (all 0 for pcap).
    """

    def __init__(self, pkts: Iterable[Packet] = (), interface_ids: Iterable[int] = ()) -> None:
        super().__init__(pkts)
        self.interface_ids: list[int] = list(interface_ids)

    def frame_number(self, pkt: Packet) -> int:
        """1-based frame number of ``pkt`` (matched by identity, then equality)."""
        for n, p in enumerate(self):
            if p is pkt:
                return n + 1
        return self.index(pkt) + 1

    def data_frames(self, direction: str | None = None) -> list[tuple[int, Packet]]:
        """(frame number, packet) for every frame carrying payload."""
        return [
            (n + 1, p)
            for n, p in enumerate(self)
            if p.payload and (direction is None or p.direction == direction)
        ]


def _captured(p: Packet, frame: bytes) -> bytes:
    return frame if p.snaplen is None else frame[: p.snaplen]


class _Output:
    def __init__(self, dest) -> None:
        self._own = isinstance(dest, (str, bytes, os.PathLike))
        self.f: BinaryIO = open(dest, "wb") if self._own else dest

    def __enter__(self) -> BinaryIO:
        return self.f

    def __exit__(self, *exc) -> None:
        if self._own:
            self.f.close()
        else:
            self.f.flush()


def write_pcap(
    path_or_fileobj,
    conversations_or_packets,
    *,
    nanosecond: bool = False,
    big_endian: bool = False,
    snaplen: int = 262144,
) -> WrittenPackets:
    """Write sources merged by timestamp to a classic pcap file.

    All packets must share one link type.  Returns the packets in file order.
    """
    merged = _merge_indexed(_sources(conversations_or_packets))
    linktypes = {p.link.linktype for _, p in merged}
    if len(linktypes) > 1:
        raise ValueError(f"classic pcap needs a single link type, got {sorted(linktypes)}")
    linktype = linktypes.pop() if linktypes else 1
    with _Output(path_or_fileobj) as f:
        w = PcapWriter(f, linktype=linktype, nanosecond=nanosecond, big_endian=big_endian, snaplen=snaplen)
        for _, p in merged:
            frame = p.frame_bytes()
            w.write(p.ts_ns, _captured(p, frame), wirelen=len(frame))
    pkts = [p for _, p in merged]
    return WrittenPackets(pkts, [0] * len(pkts))


def write_pcapng(
    path_or_fileobj,
    conversations_or_packets,
    *,
    interfaces: int | Sequence[int] | None = None,
    big_endian: bool = False,
    snaplen: int = 262144,
    comments: bool = False,
) -> WrittenPackets:
    """Write sources merged by timestamp to a pcapng file.

    ``interfaces`` gives the raw ``if_tsresol`` byte (6 = µs, 9 = ns,
    0x8A = 2^-10 s, ...) for all sources or one per source.  One IDB is
    written per distinct (link type, tsresol), in order of first source.
    With ``comments`` each packet's ``note`` is stored as an EPB comment.
    Returns the packets in file order with their interface ids.
    """
    sources = _sources(conversations_or_packets)
    if interfaces is None:
        resols = [6] * len(sources)
    elif isinstance(interfaces, int):
        resols = [interfaces] * len(sources)
    else:
        resols = [int(r) for r in interfaces]
        if len(resols) != len(sources):
            raise ValueError(f"{len(resols)} tsresol values for {len(sources)} sources")
    merged = _merge_indexed(sources)
    with _Output(path_or_fileobj) as f:
        w = PcapngWriter(f, big_endian=big_endian)
        iface_of_key: dict[tuple[int, int], int] = {}
        for src, resol in zip(sources, resols):
            for p in src:
                key = (p.link.linktype, resol)
                if key not in iface_of_key:
                    iface_of_key[key] = w.add_interface(
                        p.link.linktype, tsresol=resol, snaplen=snaplen, name=f"synth{len(iface_of_key)}-{p.link.kind}"
                    )
        ids: list[int] = []
        for k, p in merged:
            iface = iface_of_key[(p.link.linktype, resols[k])]
            frame = p.frame_bytes()
            w.write(iface, p.ts_ns, _captured(p, frame), wirelen=len(frame), comment=p.note if comments else None)
            ids.append(iface)
    return WrittenPackets([p for _, p in merged], ids)
