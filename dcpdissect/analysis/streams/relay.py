"""Relay: does ns_server's proxy hand each message from one leg to the other unchanged?

Intra-cluster replication runs through ns_server (kv_engine docs/dcp/documentation/
rebalance.md, "EBucketMigrator"): on the replica's node it opens a *producer* connection to
the active node's memcached and a *consumer* connection to the local memcached, both with
the same DcpOpen name (``replication:ns_1@A->ns_1@B:bucket``), and copies every message
read on one socket to the other (ns_server ``dcp_proxy:process_data_loop`` /
``handle_packet``: the packet is appended byte for byte, nothing is rewritten, not even
the opaque). Two flows:

* *down*: what the producer memcached sends (stream request responses, markers, items,
  StreamEnd, SetVbucketState, Noop, DcpControl responses) is read on the producer leg
  (server→client) and written on the consumer leg (client→server);
* *up*: what the consumer memcached sends (its stream requests, DcpControl, buffer acks,
  marker acks, error answers, Noop responses) is read on the consumer leg (server→client)
  and written on the producer leg (client→server).

What ns_server sends or swallows itself is not relayed and not judged: its handshake on
each leg (SASL, SelectBucket, HELLO, DcpOpen; ``dcp_proxy:connect``), Add Stream and Close
Stream to the consumer and their responses (``dcp_consumer_conn:handle_packet`` blocks
them), Close Stream to the producer and its response (``dcp_producer_conn`` blocks it).

The legs are paired by DcpOpen name (and bucket, when both are known): one opened with the
Producer flag, the other without. Only once both legs of a pair are seen, and the consumer leg
carried a message of the consumer memcached, is anything judged: with one leg in the capture
there is nothing to compare, and a consumer that connects to the producer itself (no proxy:
its connection to ns_server carries only Add Stream) relays nothing. Each flow is kept per *lane* (a
vbucket and stream id for stream requests and stream messages, the stream request's vbucket
for its response, the connection for everything else); a message is compared whole, except
its opaque (ns_server keeps it, but a consistent renumbering would do no harm). Because the
proxy writes in the order it reads, a message that arrives on the other leg proves every
earlier unmatched message of the same flow lost (``relay-message-missing``). A message that
is still unmatched when a leg or the capture ends proves nothing (it may be in flight):
``relay-not-confirmed`` says so (info). Nothing is judged across a capture gap or resync on
either leg, and a lane that piles up more than ``MAX_RELAY_WINDOW`` unmatched messages is
given up (``relay-window-overflow``, info).
"""

from __future__ import annotations

import hashlib
from collections import deque

from ...protocol import SERVER_MAGICS, STREAM_OPCODES, opcode_code
from ..findings import Finding, finding_for
from ..rules.stream import (RELAY_CONSUMER_MESSAGE_MISMATCH, RELAY_MESSAGE_DIFFERS,
                            RELAY_MESSAGE_MISSING, RELAY_MESSAGE_REORDERED, RELAY_NOT_CONFIRMED,
                            RELAY_WINDOW_OVERFLOW)
from .state import Conn

STREAM_REQUEST = opcode_code("DcpStreamReq")
# What ns_server sends itself on either leg (dcp_proxy:connect, dcp_commands:add_stream /
# close_stream): neither these requests nor their responses are relayed.
OWN_OPCODES = frozenset(opcode_code(name) for name in (
    "Hello", "SaslListMechs", "SaslAuth", "SaslStep", "DcpOpen", "DcpAddStream",
    "DcpCloseStream", "SelectBucket", "GetErrorMap"))

MAX_RELAY_WINDOW = 1024    # unmatched messages held per pair, flow, side and lane
MAX_PAIRS = 4096           # proxy pairs (DcpOpen names) remembered
MAX_OPAQUES = 4096         # stream request opaques remembered per leg
MAX_REPORTED = 10          # findings per pair and rule (then one more says it stops)

DOWN, UP = "down", "up"
SRC, DST = 0, 1            # the leg that reads a flow's messages, the leg that writes them


class _Msg:
    """An unmatched message: enough to compare it and to point at it, not its bytes."""
    __slots__ = ("digest", "ident", "index", "lane", "pdu_frame", "frames", "ts_ns", "conn",
                 "vb", "opaque", "name", "summary", "overtaken_by")

    def __init__(self, digest, ident, index, lane, pdu, msg, vb, summary):
        self.digest, self.ident, self.index, self.lane = digest, ident, index, lane
        self.pdu_frame, self.frames, self.ts_ns, self.conn = (pdu.frame, pdu.frames, pdu.ts_ns,
                                                              pdu.conn)
        self.vb, self.opaque, self.name, self.summary = vb, msg.opaque, msg.name, summary
        self.overtaken_by = None     # the frame of a later message the other leg carried first


class _Leg:
    __slots__ = ("c", "conn", "role", "bucket", "index", "opaques")

    def __init__(self, c: Conn, role: int):
        self.c, self.conn, self.role, self.bucket = c, c.id, role, c.negotiation.bucket
        self.index = [0, 0]                 # messages counted per direction
        self.opaques: dict[int, int] = {}   # stream request opaque -> vbucket


class _Pair:
    __slots__ = ("name", "legs", "pending", "lanes", "given_up", "dead", "started",
                 "reported")

    def __init__(self, name):
        self.name = name
        self.legs: list[_Leg | None] = [None, None]          # [producer leg, consumer leg]
        self.dead = False                                   # a gap or resync: not judged
        self.started = False     # both legs bound and the consumer leg relayed a message
        self.reset()
        self.reported: dict[str, int] = {}

    def reset(self):
        # (flow, side) -> index -> _Msg, in index order; (flow, side, lane) -> deque of _Msg
        self.pending: dict[tuple, dict[int, _Msg]] = {(f, s): {} for f in (DOWN, UP)
                                                      for s in (SRC, DST)}
        self.lanes: dict[tuple, deque] = {}
        self.given_up: set = set()          # (flow, lane)


PRODUCER_LEG, CONSUMER_LEG = 0, 1
LEG_TEXT = {PRODUCER_LEG: "producer leg", CONSUMER_LEG: "consumer leg"}


def _side_of(role: int, flow: str) -> int:
    """The side a leg of ``role`` plays in ``flow``: the producer leg reads the down flow."""
    return SRC if (role == PRODUCER_LEG) == (flow == DOWN) else DST


def _where(role: int, direction: int) -> tuple[str, int]:
    """(flow, side) of a message on a leg of ``role`` travelling in ``direction``."""
    if role == PRODUCER_LEG:
        return (DOWN, SRC) if direction == 1 else (UP, DST)
    return (DOWN, DST) if direction == 0 else (UP, SRC)


class Relay:
    """The proxy pairs of the capture and the messages each flow still waits for."""

    def __init__(self):
        self.pairs: dict[str, _Pair] = {}
        self.legs: dict[int, tuple[_Pair, _Leg]] = {}

    # --- hooks ----------------------------------------------------------------------------

    def on_message(self, c: Conn, pdu, msg, out: list) -> None:
        """Every message of a DCP connection (server-initiated magics excepted)."""
        bound = self.legs.get(c.id)
        if bound is None:
            bound = self._bind(c)
            if bound is None:
                return
        pair, leg = bound
        if pair.dead or msg.opcode in OWN_OPCODES or msg.magic in SERVER_MAGICS:
            return
        other = pair.legs[1 - leg.role]
        if not pair.started:
            # a proxy pair relays from the moment the consumer memcached speaks on its leg
            # (DcpControl, then its stream requests): before that the producer leg has
            # nothing to relay. A consumer that dials the producer itself (no proxy) never
            # sends anything but answers to ns_server's own Add Stream on that connection.
            if other is None or leg.role != CONSUMER_LEG:
                return
            pair.started = True
        if c.cuts or pdu.missing or (other is not None and other.c.cuts):
            pair.dead = True        # a cut on a leg: what it relayed is unknown
            pair.reset()
            return
        flow, side = _where(leg.role, pdu.direction)
        lane = self._lane(leg, msg)
        if (flow, lane) in pair.given_up:
            return
        leg.index[pdu.direction] += 1
        m = _Msg(_digest(pdu.data), _ident(msg), leg.index[pdu.direction], lane, pdu, msg,
                 lane[1] if lane[0] == "vb" else None, _summary(msg))
        # after the other leg ended, a message can still be the copy of one it carried,
        # but nothing it carries now can reach the other leg
        self._arrive(pair, flow, side, m, pdu, msg, out, hold=other is not None)

    def on_end(self, c: Conn, how: str, out: list) -> None:
        """A connection ended (``how``: closed by FIN/RST, or the capture ended)."""
        bound = self.legs.pop(c.id, None)
        if bound is None:
            return
        pair, leg = bound
        if pair.legs[leg.role] is not leg:
            return
        pair.legs[leg.role] = None
        if pair.started and not pair.dead:
            for flow in (DOWN, UP):
                mine = _side_of(leg.role, flow)
                # what the other leg read can no longer be written here; what this leg read
                # may still reach the other leg while it lives
                self._unconfirmed(pair, flow, 1 - mine, f"the {LEG_TEXT[leg.role]} ended "
                                  f"({how})", out)
                if pair.legs[1 - leg.role] is None:
                    self._unconfirmed(pair, flow, mine, f"both legs ended ({how})", out)
        if pair.legs == [None, None] and self.pairs.get(pair.name) is pair:
            del self.pairs[pair.name]

    # --- pairing --------------------------------------------------------------------------

    def _bind(self, c: Conn):
        neg = c.negotiation
        if neg.name is None or neg.consumer is None:
            return None
        role = CONSUMER_LEG if neg.consumer else PRODUCER_LEG
        pair = self.pairs.get(neg.name)
        if pair is None:
            if len(self.pairs) >= MAX_PAIRS:
                return None
            pair = self.pairs[neg.name] = _Pair(neg.name)
        other = pair.legs[1 - role]
        if (other is not None and other.bucket is not None and neg.bucket is not None
                and other.bucket != neg.bucket):
            return None               # same name, another bucket: not this proxy
        old = pair.legs[role]
        if old is not None or (other is None and pair.started):
            # the same name again (kv_engine drops the old connection), or a new pair under
            # an old name: start afresh
            if old is not None:
                self.legs.pop(old.conn, None)
            pair.reset()
            pair.started = pair.dead = False
        leg = _Leg(c, role)
        pair.legs[role] = leg
        self.legs[c.id] = (pair, leg)
        return pair, leg

    def _lane(self, leg: _Leg, msg) -> tuple:
        if msg.is_request:
            if msg.opcode == STREAM_REQUEST:
                if len(leg.opaques) >= MAX_OPAQUES:
                    del leg.opaques[next(iter(leg.opaques))]
                leg.opaques[msg.opaque] = msg.vbucket
                return ("vb", msg.vbucket, msg.stream_id)
            if msg.opcode in STREAM_OPCODES:
                return ("vb", msg.vbucket, msg.stream_id)
        elif msg.opcode == STREAM_REQUEST and msg.opaque in leg.opaques:
            return ("vb", leg.opaques[msg.opaque], None)
        return ("conn",)

    # --- matching -------------------------------------------------------------------------

    def _arrive(self, pair: _Pair, flow, side, m: _Msg, pdu, msg, out, hold=True) -> None:
        other = 1 - side
        queue = pair.lanes.get((flow, other, m.lane))
        found, differs = None, False
        if queue:
            found = next((x for x in queue if x.digest == m.digest), None)
            if found is None:
                found = next((x for x in queue if x.ident == m.ident), None)
                if found is None and queue[0].ident[:2] == m.ident[:2]:
                    found = queue[0]
                differs = found is not None
        if found is None:
            if hold:
                self._hold(pair, flow, side, m, out)
            return
        # the proxy writes in the order it reads: everything the other side read before
        # the message found, and this side has not carried, is lost (or comes out of order)
        for i, x in pair.pending[(flow, other)].items():
            if i >= found.index:
                break
            if x.overtaken_by is None:
                x.overtaken_by = pdu.frame
        self._drop(pair, flow, other, found)
        if found.overtaken_by is not None:
            self._reordered(pair, flow, side, found, pdu, msg, out)
        if differs:
            self._differs(pair, flow, side, found, m, pdu, msg, out)

    def _hold(self, pair: _Pair, flow, side, m: _Msg, out) -> None:
        key = (flow, side, m.lane)
        queue = pair.lanes.setdefault(key, deque())
        if len(queue) >= MAX_RELAY_WINDOW:
            for x in queue:
                pair.pending[(flow, side)].pop(x.index, None)
            del pair.lanes[key]
            pair.lanes.pop((flow, 1 - side, m.lane), None)
            for x in [x for x in pair.pending[(flow, 1 - side)].values() if x.lane == m.lane]:
                pair.pending[(flow, 1 - side)].pop(x.index, None)
            pair.given_up.add((flow, m.lane))
            out.append(self._finding(pair, RELAY_WINDOW_OVERFLOW.id, m, f"{MAX_RELAY_WINDOW} "
                                     f"messages of {_lane_text(m.lane)} ({flow} flow) read on the "
                                     f"{self._leg_text(flow, side)} wait for their copy on the "
                                     "other leg: the relay of this lane is not judged any more",
                                     {"window": MAX_RELAY_WINDOW}))
            return
        queue.append(m)
        pair.pending[(flow, side)][m.index] = m

    def _drop(self, pair: _Pair, flow, side, x: _Msg) -> None:
        pair.pending[(flow, side)].pop(x.index, None)
        queue = pair.lanes.get((flow, side, x.lane))
        if queue:
            queue.remove(x)
            if not queue:
                del pair.lanes[(flow, side, x.lane)]

    # --- findings -------------------------------------------------------------------------

    @staticmethod
    def _leg_text(flow, side) -> str:
        producer_reads = (flow == DOWN) == (side == SRC)
        return LEG_TEXT[PRODUCER_LEG if producer_reads else CONSUMER_LEG]

    def _differs(self, pair, flow, side, found: _Msg, m: _Msg, pdu, msg, out) -> None:
        diff = {k: (found.summary.get(k), m.summary.get(k))
                for k in sorted(set(found.summary) | set(m.summary))
                if found.summary.get(k) != m.summary.get(k)}
        shown = {k: f"{a!r} → {b!r}" for k, a, b in ((k, *v) for k, v in diff.items())}
        what = ", ".join(diff) or "bytes"
        if flow == DOWN or msg.opcode == STREAM_REQUEST:
            rid = RELAY_MESSAGE_DIFFERS.id
        else:
            rid = RELAY_CONSUMER_MESSAGE_MISMATCH.id
        text = (f"{msg.name} relayed by ns_server ({pair.name}) differs between the legs: "
                f"{what} (frame {found.pdu_frame} on the {self._leg_text(flow, 1 - side)}, "
                f"frame {pdu.frame} on the {self._leg_text(flow, side)})")
        if self._count(pair, rid, text, out):
            f = finding_for(rid, text, pdu, msg, shown, (found.pdu_frame,))
            f.vbucket = found.vb
            f.message = text
            out.append(f)

    def _reordered(self, pair, flow, side, found: _Msg, pdu, msg, out) -> None:
        rid = (RELAY_MESSAGE_REORDERED.id if flow == DOWN or msg.opcode == STREAM_REQUEST
               else RELAY_CONSUMER_MESSAGE_MISMATCH.id)
        text = (f"{msg.name} read on the {self._leg_text(flow, 1 - side)} (frame "
                f"{found.pdu_frame}) reached the {self._leg_text(flow, side)} (frame {pdu.frame}) "
                f"after a message read later (frame {found.overtaken_by}); "
                f"{_lane_text(found.lane)}, {pair.name}")
        if self._count(pair, rid, text, out):
            f = finding_for(rid, text, pdu, msg, {"flow": flow},
                            (found.pdu_frame, found.overtaken_by))
            f.vbucket = found.vb
            out.append(f)

    def _missing(self, pair, flow, side, x: _Msg, later_frame: int, out) -> None:
        src = side == SRC
        if flow == DOWN or x.name == "DcpStreamReq":
            rid = RELAY_MESSAGE_MISSING.id
        else:
            rid = RELAY_CONSUMER_MESSAGE_MISMATCH.id
        other = self._leg_text(flow, 1 - side)
        if src:
            text = (f"{x.name} read on the {self._leg_text(flow, side)} (frame {x.pdu_frame}) "
                    f"never reached the {other}, though ns_server relayed a later message "
                    f"(frame {later_frame}); {_lane_text(x.lane)}, {pair.name}")
        else:
            text = (f"{x.name} written on the {self._leg_text(flow, side)} (frame "
                    f"{x.pdu_frame}) was never read on the {other}, though a later message "
                    f"was (frame {later_frame}); {_lane_text(x.lane)}, {pair.name}")
        if self._count(pair, rid, text, out):
            out.append(self._finding(pair, rid, x, text, {"flow": flow}, (later_frame,)))

    def _unconfirmed(self, pair, flow, side, why: str, out) -> None:
        pending = pair.pending[(flow, side)]
        for x in [x for x in pending.values() if x.overtaken_by is not None]:
            self._drop(pair, flow, side, x)
            self._missing(pair, flow, side, x, x.overtaken_by, out)
        if not pending:
            return
        first = next(iter(pending.values()))
        n = len(pending)
        why = why or "both legs ended"
        text = (f"{n} message(s) read on the {self._leg_text(flow, side)} ({flow} flow, first "
                f"{first.name} at frame {first.pdu_frame}) never appeared on the other leg "
                f"before {why}: perhaps in flight, no later message proves them lost "
                f"({pair.name})")
        for x in list(pending.values()):
            self._drop(pair, flow, side, x)
        out.append(self._finding(pair, RELAY_NOT_CONFIRMED.id, first, text, {"messages": n}))

    def _count(self, pair, rid, text, out) -> bool:
        n = pair.reported[rid] = pair.reported.get(rid, 0) + 1
        return n <= MAX_REPORTED

    @staticmethod
    def _finding(pair, rid, x: _Msg, text, fields, context=()) -> Finding:
        return Finding(rid, text, x.pdu_frame, x.frames, x.ts_ns, x.conn, x.vb, x.opaque,
                       dict(fields), None, tuple(context))


def _digest(data: bytes) -> bytes:
    """The message without its opaque (header bytes 12..15)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(data[:12])
    h.update(data[16:])
    return h.digest()


def _ident(msg) -> tuple:
    f = msg.fields
    seq = f.get("by_seqno", f.get("start_seqno"))
    return (msg.is_request, msg.opcode, msg.vbucket if msg.is_request else None, seq)


def _summary(msg) -> dict:
    """What a difference is described with (values by length and digest, not kept)."""
    value = bytes(msg.value)
    out = {k: v for k, v in msg.fields.items() if not isinstance(v, (list, dict))}
    for k, v in msg.fields.items():
        if isinstance(v, (list, dict)):
            out[k] = repr(v)
    out.update(opcode=f"{msg.opcode:#04x}", datatype=msg.datatype, cas=msg.cas,
               key=bytes(msg.key).hex() if len(msg.key) <= 64 else
               hashlib.blake2b(bytes(msg.key), digest_size=8).hexdigest(),
               value=f"{len(value)} bytes {hashlib.blake2b(value, digest_size=8).hexdigest()}",
               frame_infos=repr(msg.frame_infos))
    if msg.is_request:
        out["vbucket"] = msg.vbucket
    else:
        out["status"] = msg.status
    return out


def _lane_text(lane) -> str:
    if lane[0] == "vb":
        return f"vb {lane[1]}" + (f" sid {lane[2]}" if lane[2] is not None else "")
    return "connection-level messages"
