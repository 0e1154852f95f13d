"""Several capture points of one story: the same connections matched across two captures,
the clock offset between them, the lag of each message between the points, and the
messages one point saw sent and the other never saw arrive.

A capture point is read once (:func:`read_point`): its MCBP connections with their
endpoints, initial sequence numbers and DCP connection name, every data segment (by
direction, sequence number and length) and every whole message, each with its frame and
time. Two points' connections are paired (:func:`pair_connections`) exactly when they are
the same TCP connection (the same endpoints and initial sequence numbers, or a data segment
in common when a point did not see the handshake), else by the DCP connection name of
their DCP_OPEN (the two legs of a proxy, each captured at one point). The messages of a
pair are aligned per direction by their bytes.

The offset is B's clock minus A's: a packet, or a message, cannot arrive before it was sent.
Whichever point is nearer the client, its client-to-server observations (``t_B - t_A``)
bound the offset on one side and its server-to-client ones on the other; the nearer point
is the one for which those bounds leave a non-empty interval (:func:`pair_bound`). The
pairs' intervals are intersected (:func:`clock_offset`); the estimate is its middle, its
uncertainty half its width.

A message is lost between the points (:func:`lost_messages`) when the upstream point saw it
sent, the downstream point did not see it arrive, and messages of the same direction before
and after it were seen at both (so the downstream capture covered that time and that part
of the stream). Only relayed legs are judged: on one TCP connection the kernel retransmits
until the bytes arrive, so a message missing there is a capture's loss, not the network's;
a downstream direction with bytes the capture missed is not judged either. A consumer's
ack of a snapshot marker with the Ack flag lost so (the marker seen at both points) is
reported as such, with the marker's frames at both points.

A point given no name is named by its node's address (:func:`node_address`).

More than two points (:func:`compare_points`): every pair compared so, and each point's
offset from the first chained through the pairs' offsets (:func:`chain_offsets`). A point
that captured both legs of a relay pairs its other leg too (:func:`_relay_legs`); a message
it saw on either leg is not lost between it and the sender, and each message counts one
lag.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from statistics import median

from ..codec.decode import decode
from ..codec.header import peek
from ..protocol import (HEADER_SIZE, ITEM_OPCODES, OPCODE_NAMES, REQUEST_MAGICS, SNAPSHOT_ACK,
                        STREAM_OPCODES, opcode_code)
from ..reassembly.connections import ConnectionOpened
from ..reassembly.framing import LostPdu, Pdu
from ..reassembly.pdus import Options, Summary, iter_events
from ..reassembly.tcp import StreamGap
from ..reassembly.tcp_streams import TcpStreams
from .findings import Finding
from .negotiation import DCP_OPEN
from .rules.nodes import MESSAGE_LOST_BETWEEN_POINTS, SNAPSHOT_ACK_LOST_BETWEEN_POINTS

C2S, S2C = 0, 1
MARKER = opcode_code("DcpSnapshotMarker")


@dataclass(frozen=True)
class Message:
    """A whole MCBP message as one point saw it complete."""
    frame: int
    ts_ns: int
    digest: bytes
    opcode: int
    vbucket: int | None         # stream requests only (marker, items, stream end, ...)
    seqno: int | None           # items only
    request: bool
    opaque: int
    asks_ack: bool              # a snapshot marker with the Ack flag


@dataclass
class PointConnection:
    """One MCBP connection at one capture point."""
    conn: int                   # its number in that capture
    client: tuple[str, int]
    server: tuple[str, int]
    conversation: int | None
    isn: tuple = (None, None)   # the first sequence number of the client and of the server
    handshake: bool = False     # its SYN was captured
    name: str | None = None     # the connection name of its DCP_OPEN
    segments: tuple = field(default_factory=lambda: ({}, {}))   # (seq, len) -> (frame, ts)
    messages: tuple = field(default_factory=lambda: ([], []))   # per direction, in order
    gaps: list = field(default_factory=lambda: [0, 0])          # capture gaps per direction


@dataclass
class Point:
    """One capture point: its name, file (or file set) and MCBP connections. A name that
    is ``provisional`` (the file's) gives way to the point's node address when its
    connections decide it (:func:`node_address`)."""
    name: str
    path: str
    connections: list[PointConnection]
    summary: Summary
    provisional: bool = False


class _SegmentLog(TcpStreams):
    """Wireshark's conversations, and every data segment of each by direction."""

    def __init__(self):
        super().__init__()
        self.data: dict[int, list] = {}     # conversation index -> [(src, seq, len, frame, ts)]

    def feed(self, seg, frame: int, ts_ns: int, wirelen: int) -> None:
        super().feed(seg, frame, ts_ns, wirelen)
        if seg.payload or seg.missing:
            index = self.current((seg.src, seg.sport), (seg.dst, seg.dport))
            self.data.setdefault(index, []).append(
                ((seg.src, seg.sport), seg.seq, len(seg.payload) + seg.missing, frame, ts_ns))


def _message(pdu: Pdu) -> Message:
    head = peek(pdu.data)
    request = head.magic in REQUEST_MAGICS
    vbucket = head.specific if request and head.opcode in STREAM_OPCODES else None
    seqno = None
    if vbucket is not None and head.opcode in ITEM_OPCODES and head.extlen >= 8:
        at = HEADER_SIZE + head.framing_len        # by_seqno: the items' first extras field
        seqno = int.from_bytes(pdu.data[at:at + 8], "big")
    asks_ack = (request and head.opcode == MARKER
                and bool(decode(pdu.data).fields.get("flags", 0) & SNAPSHOT_ACK))
    return Message(pdu.frame, pdu.ts_ns, hashlib.blake2b(pdu.data, digest_size=16).digest(),
                   head.opcode, vbucket, seqno, request, head.opaque, asks_ack)


def _dcp_name(pdu: Pdu) -> str | None:
    head = peek(pdu.data)
    if head.magic not in REQUEST_MAGICS or head.opcode != DCP_OPEN:
        return None
    at = HEADER_SIZE + head.framing_len + head.extlen
    return pdu.data[at:at + head.keylen].decode("utf-8", "replace")


def read_point(name: str, path, options: Options | None = None,
               provisional: bool = False) -> Point:
    """The MCBP connections of one capture file or
    :class:`~dcpdissect.capture.fileset.FileSet` (raises ``CaptureError`` on a bad one)."""
    log = _SegmentLog()
    options = Options(**{**(vars(options) if options else {}), "tcp_streams": log})
    summary = Summary()
    conns: dict[int, PointConnection] = {}
    for ev in iter_events(path, options, summary):
        kind = type(ev)
        if kind is Pdu:
            conn = conns[ev.conn]
            if ev.missing == 0 and len(ev.data) >= HEADER_SIZE:
                conn.messages[ev.direction].append(_message(ev))
                if ev.direction == C2S and conn.name is None:
                    conn.name = _dcp_name(ev)
        elif kind is ConnectionOpened:
            conns[ev.conn] = PointConnection(ev.conn, ev.client, ev.server, ev.conversation,
                                             handshake=not ev.mid_stream)
        elif kind in (StreamGap, LostPdu) and ev.conn in conns:
            conns[ev.conn].gaps[ev.direction] += 1
    for conn in conns.values():
        if conn.conversation is None:
            continue
        conv = log.conversations[conn.conversation]
        first = conv.ends.index(conn.client)
        conn.isn = (conv.base_seq[first], conv.base_seq[1 - first])
        for src, seq, length, frame, ts in log.data.get(conn.conversation, ()):
            direction = C2S if src == conn.client else S2C
            conn.segments[direction].setdefault((seq, length), (frame, ts))
    return Point(name, str(path), sorted(conns.values(), key=lambda c: c.conn), summary,
                 provisional)


# --- pairing --------------------------------------------------------------------------------

@dataclass
class Pairing:
    """The same connection at points A and B: ``how`` is 'tcp' (one TCP connection) or
    'dcp' (two legs of a relay, one DCP connection name); ``matched[d]`` the (index at A,
    index at B) of the messages of direction d seen at both."""
    a: PointConnection
    b: PointConnection
    how: str
    matched: tuple = ((), ())

    def observations(self, direction: int) -> list[tuple[int, int]]:
        """(time at A, time at B) of the same bytes seen at both points: each common
        message (the frame that completes it), and on one TCP connection each common data
        segment too (points that segment alike, e.g. without receive offload, share many)."""
        ma, mb = self.a.messages[direction], self.b.messages[direction]
        out = [(ma[i].ts_ns, mb[j].ts_ns) for i, j in self.matched[direction]]
        if self.how == "tcp":
            at_b = self.b.segments[direction]
            out += [(ts, at_b[key][1]) for key, (_, ts) in self.a.segments[direction].items()
                    if key in at_b]
        return out


def _same_tcp(a: PointConnection, b: PointConnection) -> bool:
    if (a.client, a.server) != (b.client, b.server):
        return False
    if a.handshake and b.handshake:
        return a.isn == b.isn
    return any(key in b.segments[d] for d in (C2S, S2C) for key in a.segments[d])


def _aligned(a: list[Message], b: list[Message]) -> tuple:
    matcher = SequenceMatcher(None, [m.digest for m in a], [m.digest for m in b], autojunk=False)
    return tuple((blk.a + k, blk.b + k) for blk in matcher.get_matching_blocks()
                 for k in range(blk.size))


def pair_connections(a: Point, b: Point) -> list[Pairing]:
    """The connections of A paired with those of B: one TCP connection first, then relay
    legs by DCP connection name (in connection order)."""
    pairs, free_b = [], list(b.connections)
    unpaired_a = []
    for ca in a.connections:
        cb = next((c for c in free_b if _same_tcp(ca, c)), None)
        if cb is None:
            unpaired_a.append(ca)
            continue
        free_b.remove(cb)
        pairs.append(Pairing(ca, cb, "tcp"))
    for ca in unpaired_a:
        cb = next((c for c in free_b if ca.name is not None and c.name == ca.name), None)
        if cb is not None:
            unpaired_a = [c for c in unpaired_a if c is not ca]
            free_b.remove(cb)
            pairs.append(Pairing(ca, cb, "dcp"))
    pairs += _relay_legs(unpaired_a, pairs, "a") + _relay_legs(free_b, pairs, "b")
    for p in pairs:
        p.matched = tuple(_aligned(p.a.messages[d], p.b.messages[d]) for d in (C2S, S2C))
    return pairs


def _relay_legs(unpaired: list[PointConnection], pairs: list[Pairing],
                side: str) -> list[Pairing]:
    """A relay's other leg, when its capture holds both: a connection left unpaired at one
    point (``side``) paired with the other point's connection of its DCP connection name
    that is one TCP connection with its sibling there, the leg of the same name with
    another client and another server (a reconnection to the same server is not a leg)."""
    out = []
    for c in unpaired:
        for p in pairs:
            sibling, other = (p.a, p.b) if side == "a" else (p.b, p.a)
            if (p.how == "tcp" and c.name is not None and sibling.name == c.name
                    and other.name == c.name and sibling.client != c.client
                    and sibling.server != c.server):
                out.append(Pairing(c, other, "dcp") if side == "a" else Pairing(other, c, "dcp"))
                break
    return out


# --- the clock offset -----------------------------------------------------------------------

@dataclass(frozen=True)
class Bound:
    """What one pairing says of the offset (B's clock minus A's), in ns."""
    low: int
    high: int
    a_nearer_client: bool
    observations: int


def pair_bound(pairing: Pairing) -> Bound | None:
    """The interval the pairing's observations allow, or None when they cannot decide (a
    direction never seen at both points, or no orientation consistent with causality)."""
    c2s = [tb - ta for ta, tb in pairing.observations(C2S)]
    s2c = [tb - ta for ta, tb in pairing.observations(S2C)]
    if not c2s or not s2c:
        return None
    n = len(c2s) + len(s2c)
    if max(s2c) <= min(c2s):        # A sees client data first: t_B - t_A >= offset for it
        return Bound(max(s2c), min(c2s), True, n)
    if max(c2s) <= min(s2c):
        return Bound(max(c2s), min(s2c), False, n)
    return None


class _Interval:
    """An offset within [low, high] ns: ``estimate`` its middle, ``uncertainty`` half its
    width."""
    low: int
    high: int

    @property
    def estimate(self) -> int:
        return (self.low + self.high) // 2

    @property
    def uncertainty(self) -> int:
        return (self.high - self.low + 1) // 2


@dataclass(frozen=True)
class ClockOffset(_Interval):
    """B's clock minus A's, in ns: within [low, high]."""
    low: int
    high: int
    observations: int
    pairings: int


def clock_offset(bounds: list[Bound]) -> ClockOffset | None:
    """The intersection of the pairings' intervals (None: none, or they contradict)."""
    if not bounds:
        return None
    low, high = max(b.low for b in bounds), min(b.high for b in bounds)
    if low > high:
        return None
    return ClockOffset(low, high, sum(b.observations for b in bounds), len(bounds))


# --- lag and loss ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Transit:
    """One message seen at both points: sent at ``upstream`` (its frame and time there),
    received at the other; ``lag_ns`` the receive time in the sender's clock minus the
    send time; ``ts_ns`` the send time in A's clock."""
    pairing: Pairing
    direction: int
    upstream: str               # 'a' or 'b'
    sent: Message
    received: Message
    ts_ns: int
    lag_ns: int


def upstream(bound: Bound, direction: int) -> str:
    """The point ('a' or 'b') that sends the messages of ``direction``."""
    return "a" if bound.a_nearer_client == (direction == C2S) else "b"


def transits(pairing: Pairing, bound: Bound, offset: ClockOffset) -> list[Transit]:
    """Every message of the pairing seen at both points, with its lag."""
    out = []
    theta = offset.estimate
    for d in (C2S, S2C):
        up = upstream(bound, d)
        for i, j in pairing.matched[d]:
            ma, mb = pairing.a.messages[d][i], pairing.b.messages[d][j]
            if up == "a":
                out.append(Transit(pairing, d, up, ma, mb, ma.ts_ns, mb.ts_ns - theta - ma.ts_ns))
            else:
                out.append(Transit(pairing, d, up, mb, ma, mb.ts_ns - theta,
                                   ma.ts_ns + theta - mb.ts_ns))
    return out


@dataclass(frozen=True)
class VbucketLag:
    vbucket: int
    messages: int
    min_ns: int
    median_ns: int
    max_ns: int


def lag_per_vbucket(moved: list[Transit]) -> list[VbucketLag]:
    """The lag of the producer's stream messages (server to client), per vbucket."""
    by_vb: dict[int, list[int]] = {}
    for t in moved:
        if t.direction == S2C and t.sent.vbucket is not None:
            by_vb.setdefault(t.sent.vbucket, []).append(t.lag_ns)
    return [VbucketLag(vb, len(lags), min(lags), int(median(lags)), max(lags))
            for vb, lags in sorted(by_vb.items())]


def lost_messages(pairing: Pairing, bound: Bound, names: tuple[str, str],
                  elsewhere: tuple = (frozenset(), frozenset())) -> list[Finding]:
    """The messages of a relayed pairing sent at the upstream point and never seen at the
    other between two messages that were (``names``: A's and B's); not those whose bytes
    the receiving point saw on another connection paired with the sender's
    (``elsewhere[d]``: their digests, per direction)."""
    if pairing.how != "dcp":
        return []
    out = []
    for d in (C2S, S2C):
        up = upstream(bound, d)
        sender, receiver = (pairing.a, pairing.b) if up == "a" else (pairing.b, pairing.a)
        if receiver.gaps[d]:
            continue
        pairs = [(i, j) if up == "a" else (j, i) for i, j in pairing.matched[d]]
        sent, got = sender.messages[d], receiver.messages[d]
        for (i0, j0), (i1, j1) in zip(pairs, pairs[1:]):
            for k in range(i0 + 1, i1):
                if sent[k].digest in elsewhere[d]:
                    continue
                gap = (sent[k], got[j0], got[j1], sender, receiver, d,
                       names if up == "a" else names[::-1])
                marker = _acked_marker(pairing, sent[k], sender, receiver) if d == C2S else None
                out.append(_lost(*gap) if marker is None else _lost_ack(marker, *gap))
    return out


def _acked_marker(pairing: Pairing, m: Message, consumer: PointConnection,
                  producer: PointConnection) -> tuple[Message, Message] | None:
    """The snapshot marker with the Ack flag that the consumer's response ``m``
    acknowledges, as the consumer's point and the producer's point saw it: the last one of
    the response's opaque seen at both, before the response; None for any other message."""
    if m.request or m.opcode != MARKER:
        return None
    mine, theirs = (0, 1) if consumer is pairing.a else (1, 0)
    found = None
    for pair in pairing.matched[S2C]:
        marker = consumer.messages[S2C][pair[mine]]
        if marker.ts_ns > m.ts_ns:
            break
        if marker.asks_ack and marker.opaque == m.opaque:
            found = marker, producer.messages[S2C][pair[theirs]]
    return found


def _lost_ack(marker: tuple[Message, Message], m: Message, before: Message, after: Message,
              sender: PointConnection, receiver: PointConnection, direction: int,
              names: tuple[str, str]) -> Finding:
    """:func:`_lost`'s finding for a lost snapshot ack: the ack and its marker at the
    consumer's point, the marker and the gap at the producer's."""
    mine, theirs = marker
    return Finding(
        SNAPSHOT_ACK_LOST_BETWEEN_POINTS.id,
        f"the ack of vb {mine.vbucket}'s snapshot marker (opaque {m.opaque:#x}) sent at "
        f"{names[0]} frame {m.frame} (conn {sender.conn}, the marker at frame {mine.frame}) "
        f"never reached {names[1]}: conn {receiver.conn} has the marker asking for it at "
        f"frame {theirs.frame} and the consumer's messages before and after the ack, frames "
        f"{before.frame} and {after.frame}",
        m.frame, (m.frame,), m.ts_ns, sender.conn, mine.vbucket, m.opaque,
        fields={"point": names[0], "direction": "c2s", "opcode": m.opcode,
                "marker_frame": mine.frame, "other_point": names[1],
                "other_connection": receiver.conn, "other_marker_frame": theirs.frame,
                "gap_frames": [before.frame, after.frame]},
        context=(mine.frame,))


def _lost(m: Message, before: Message, after: Message, sender: PointConnection,
          receiver: PointConnection, direction: int, names: tuple[str, str]) -> Finding:
    what = OPCODE_NAMES.get(m.opcode, f"opcode 0x{m.opcode:02x}")
    where = f" vb {m.vbucket}" if m.vbucket is not None else ""
    seqno = f" seqno {m.seqno}" if m.seqno is not None else ""
    return Finding(
        MESSAGE_LOST_BETWEEN_POINTS.id,
        f"{what}{where}{seqno} sent at {names[0]} frame {m.frame} "
        f"(conn {sender.conn}) never reached {names[1]}: conn {receiver.conn} has the "
        f"messages before and after it, frames {before.frame} and {after.frame}",
        m.frame, (m.frame,), m.ts_ns, sender.conn, m.vbucket,
        fields={"point": names[0], "direction": "s2c" if direction else "c2s",
                "opcode": m.opcode, "seqno": m.seqno, "other_point": names[1],
                "other_connection": receiver.conn,
                "gap_frames": [before.frame, after.frame]})


# --- naming a point by its node ---------------------------------------------------------

def local_addresses(point: Point) -> set[str]:
    """The addresses found in every connection of the point (none without connections)."""
    ends = [{c.client[0], c.server[0]} for c in point.connections]
    return set.intersection(*ends) if ends else set()


def node_address(point: Point, side: str, pairings: list[Pairing],
                 bounds: dict[int, Bound]) -> str | None:
    """The address of the node the point captured on (``side``: 'a' or 'b' in the
    pairings): the one address in every connection of its capture; when there are two (a
    capture of one connection), the one at the point's end of its paired connections, the
    client's when the bounds put the point nearer the client. None when not decided."""
    candidates = local_addresses(point)
    if len(candidates) > 1:
        ends = set()
        for k, bound in bounds.items():
            conn = getattr(pairings[k], side)
            ends.add((conn.client if bound.a_nearer_client == (side == "a") else conn.server)[0])
        candidates &= ends
    return next(iter(candidates)) if len(candidates) == 1 else None


def _name_points(a: Point, b: Point, pairings: list[Pairing], bounds: dict[int, Bound]) -> None:
    """Provisional names replaced by the node addresses decided, unless that gives both
    points one name."""
    found = {side: node_address(pt, side, pairings, bounds) if pt.provisional else None
             for side, pt in (("a", a), ("b", b))}
    if (found["a"] or a.name) == (found["b"] or b.name):
        return
    for side, pt in (("a", a), ("b", b)):
        if found[side] is not None:
            pt.name, pt.provisional = found[side], False


# --- two points together --------------------------------------------------------------------

@dataclass
class NodesReport:
    """Everything two points say together."""
    a: Point
    b: Point
    pairings: list[Pairing]
    bounds: dict[int, Bound]            # index in pairings -> its bound
    offset: ClockOffset | None
    transits: list[Transit]
    lags: list[VbucketLag]
    findings: list[Finding]


def _seen_elsewhere(pairings: list[Pairing], pairing: Pairing) -> tuple:
    """Per direction, the digests of the messages of the connections paired with either
    end of ``pairing`` other than its other end (a relay point's other leg)."""
    out = (set(), set())
    for q in pairings:
        if q is pairing:
            continue
        for mine, theirs in ((q.a, q.b), (q.b, q.a)):
            if mine in (pairing.a, pairing.b) and theirs not in (pairing.a, pairing.b):
                for d in (C2S, S2C):
                    out[d].update(m.digest for m in theirs.messages[d])
    return out


def _one_transit_per_message(moved: list[Transit]) -> list[Transit]:
    """The shortest transit of each message sent and of each message received: a relay
    point holding both legs sees a message twice (arriving, then leaving), and its lag to
    or from the other point is from the last time it saw it or to the first."""
    seen, out = set(), []
    for t in sorted(moved, key=lambda t: t.lag_ns):
        keys = {id(t.sent), id(t.received)}       # each message is one object at its point
        if not keys & seen:
            out.append(t)
        seen |= keys
    return out


def compare(a: Point, b: Point) -> NodesReport:
    pairings = pair_connections(a, b)
    bounds = {k: bd for k, p in enumerate(pairings) if (bd := pair_bound(p)) is not None}
    offset = clock_offset(list(bounds.values()))
    moved, findings = [], []
    _name_points(a, b, pairings, bounds if offset is not None else {})
    if offset is not None:
        for k, bound in bounds.items():
            moved += transits(pairings[k], bound, offset)
            findings += lost_messages(pairings[k], bound, (a.name, b.name),
                                      _seen_elsewhere(pairings, pairings[k]))
    moved = sorted(_one_transit_per_message(moved), key=lambda t: t.ts_ns)
    findings.sort(key=lambda f: (f.ts_ns or 0, f.frame or 0))
    return NodesReport(a, b, pairings, bounds, offset, moved, lag_per_vbucket(moved), findings)


# --- more than two points -------------------------------------------------------------------

@dataclass(frozen=True)
class PointOffset(_Interval):
    """A point's clock minus the first point's, in ns, within [low, high]: the pairs'
    bounds summed along ``chain`` (the points from the first to this one), as are their
    observations."""
    low: int
    high: int
    chain: tuple
    observations: int = 0


@dataclass
class PointsReport:
    """Every pair of points (i < j, in the order given) compared, and each point's clock
    offset from the first where the pairs' offsets chain (None where they do not)."""
    points: list[Point]
    pairs: list[NodesReport]
    offsets: list[PointOffset | None]

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.pairs for f in r.findings]


def chain_offsets(count: int, pairs: list[tuple[int, int, ClockOffset | None]]
                  ) -> list[PointOffset | None]:
    """Each point's offset from point 0 through the pairs' offsets ((i, j, j's clock minus
    i's)): along the chain whose summed bounds are the narrowest (the first in the pairs'
    order among equals)."""
    found: list[PointOffset | None] = [PointOffset(0, 0, (0,))] + [None] * (count - 1)
    grew = True
    while grew:
        grew = False
        for i, j, o in pairs:
            if o is None:
                continue
            for src, dst, low, high in ((i, j, o.low, o.high), (j, i, -o.high, -o.low)):
                f, old = found[src], found[dst]
                if f is None:
                    continue
                new = PointOffset(f.low + low, f.high + high, (*f.chain, dst),
                                  f.observations + o.observations)
                if old is None or new.high - new.low < old.high - old.low:
                    found[dst], grew = new, True
    return found


def compare_points(points: list[Point]) -> PointsReport:
    """Two or more points: every pair compared (:func:`compare`), the offsets chained."""
    index = [(i, j) for i in range(len(points)) for j in range(i + 1, len(points))]
    pairs = [compare(points[i], points[j]) for i, j in index]
    chained = chain_offsets(len(points), [(i, j, r.offset) for (i, j), r in zip(index, pairs)])
    offsets = [o and PointOffset(o.low, o.high, tuple(points[k].name for k in o.chain),
                                 o.observations) for o in chained]
    return PointsReport(points, pairs, offsets)
