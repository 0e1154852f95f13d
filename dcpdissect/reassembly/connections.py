"""Connection table: demultiplexes TCP segments into per-direction streams.

Tracked connections are those with an endpoint port in ``server_ports`` (or
every TCP connection with ``any_port=True``).  Which endpoint is the server:

* ``server_ports`` mode: the endpoint whose port is in ``server_ports``; if
  both are, the SYN's destination (SYN-ACK's source) when the handshake was
  seen, else the lower port (equal ports: the first segment's destination).
* ``any_port`` mode: the client is the SYN sender (SYN-ACK receiver) when the
  handshake was seen, else the endpoint with the higher port (equal ports:
  the first segment's source).

Connections on ``tls_ports`` (and not on ``server_ports``) are only counted.
With ``track_all=True`` every connection is tracked, oriented as in ``server_ports`` mode
when one endpoint is on a server port (else as in ``any_port`` mode), until the caller
gives it up with ``drop`` (the heuristic of :mod:`.pdus` decides from its first bytes).

A connection opens on a SYN, a SYN-ACK or a segment carrying data; pure
ACKs, FINs and RSTs of unknown 4-tuples are ignored.  It closes on an RST,
or once both directions sent a FIN and every byte before each FIN was
delivered.  If a FIN leaves a hole, the direction waits up to
``fin_linger_ns`` (capture time) for retransmissions before the hole is
declared lost.  Closed 4-tuples are remembered (bounded) so that late
retransmissions, FINs and repeated SYNs do not open spurious connections;
a SYN with a new ISN opens a new connection.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple, Optional

from .tcp import (ACK, EMPTY, FIN, MASK, RST, SYN, DirectionReassembler, StreamData,
                  StreamGap, TcpAnomaly)

__all__ = [
    "StreamData", "StreamGap", "ConnectionOpened", "ConnectionClosed", "TcpAnomaly",
    "ConnectionTable", "DEFAULT_SERVER_PORTS", "DEFAULT_TLS_PORTS",
]

DEFAULT_SERVER_PORTS = frozenset({11210, 11209})
DEFAULT_TLS_PORTS = frozenset({11207})
_CTL = FIN | SYN | RST


class ConnectionOpened(NamedTuple):
    conn: int                       # 1-based, in order of first appearance
    client: tuple[str, int]
    server: tuple[str, int]
    frame: int
    ts_ns: int
    mid_stream: bool                # True when neither SYN nor SYN-ACK opened it
    tunnel: str = ""                 # what its opening segment came through (Segment.tunnel)
    conversation: int | None = None  # its index in Options.tcp_streams.conversations


class ConnectionClosed(NamedTuple):
    conn: int
    frame: Optional[int]
    ts_ns: Optional[int]
    reason: str                     # 'fin', 'rst', 'reused', 'evicted', 'end'
    # (direction, frame, ts_ns) of the first FIN or the RST: which end closed, and when
    first_close: Optional[tuple[int, int, int]] = None


class _Conn:
    __slots__ = ("id", "client", "server", "dirs", "keys", "closing", "deadline",
                 "fin_frame", "fin_ts", "first_close")

    def __init__(self, cid, client, server):
        self.id = cid
        self.client = client
        self.server = server
        self.dirs = ()
        self.keys = ()
        self.closing = False        # a FIN was seen in some direction
        self.deadline = 0
        self.fin_frame = None
        self.fin_ts = None
        self.first_close = None     # (direction, frame, ts_ns) of the first FIN or the RST


def _canon(seg) -> tuple:
    a = (seg.src, seg.sport)
    b = (seg.dst, seg.dport)
    return (a, b) if a <= b else (b, a)


class ConnectionTable:
    """Feeds segments to per-connection reassemblers and emits stream events.

    ``feed`` returns the events caused by one segment, in order, as a list
    or an empty tuple; ``close`` flushes everything at end of capture.
    """

    def __init__(self, server_ports=DEFAULT_SERVER_PORTS, tls_ports=DEFAULT_TLS_PORTS,
                 any_port: bool = False, max_connections: int = 100_000,
                 max_ooo_segments: int = 1024, max_ooo_bytes: int = 16 << 20, *,
                 fin_linger_ns: int = 1_000_000_000, tail_window: int = 64 << 10,
                 max_closed_remembered: int = 65536, track_all: bool = False):
        self.server_ports = frozenset(server_ports)
        self.tls_ports = frozenset(tls_ports) - self.server_ports
        self.any_port = any_port
        self.track_all = track_all
        self.max_connections = max(1, max_connections)
        self.max_ooo_segments = max_ooo_segments
        self.max_ooo_bytes = max_ooo_bytes
        self.fin_linger_ns = fin_linger_ns
        self.tail_window = tail_window
        self.stats: dict = dict.fromkeys((
            "connections", "tls_connections", "segments", "retransmissions", "duplicates",
            "out_of_order", "overlaps_mismatched", "gaps", "gap_bytes", "ignored_segments",
            "ooo_cap_hits", "connections_evicted", "seq_jumps", "connections_dropped",
            "cut_segments", "uncaptured_bytes"), 0)
        self._flows: dict = {}                  # 4-tuple (src, sport, dst, dport) -> reassembler
        self._lru: OrderedDict = OrderedDict()  # conn id -> _Conn, least recently active first
        self._mru: Optional[_Conn] = None
        self._closing: dict = {}                # conn id -> _Conn waiting after a FIN
        self._closing_next = 0
        self._closed: OrderedDict = OrderedDict()   # canonical 4-tuple -> client ISN
        self._closed_max = max(1, max_closed_remembered)
        self._tls: OrderedDict = OrderedDict()      # canonical 4-tuple -> client ISN
        self._next_id = 1

    @property
    def open_connections(self) -> int:
        return len(self._lru)

    # -- input -----------------------------------------------------------
    def feed(self, frame: int, ts_ns: int, seg):
        """Process one segment; return its events (list or empty tuple)."""
        self.stats["segments"] += 1
        if self._closing and ts_ns >= self._closing_next:
            out = self._expire(ts_ns)
            out.extend(self._dispatch(frame, ts_ns, seg))
            return out
        rd = self._flows.get((seg.src, seg.sport, seg.dst, seg.dport))
        if rd is None or seg.flags & _CTL:
            return self._feed_slow(frame, ts_ns, seg, rd)
        conn = rd.owner
        if conn is not self._mru:
            self._lru.move_to_end(conn.id)
            self._mru = conn
        ev = rd.feed(frame, ts_ns, seg)
        if conn.closing:
            return self._check_fin(conn, frame, ts_ns, ev)
        return ev

    def _dispatch(self, frame: int, ts_ns: int, seg):
        rd = self._flows.get((seg.src, seg.sport, seg.dst, seg.dport))
        if rd is None or seg.flags & _CTL:
            return self._feed_slow(frame, ts_ns, seg, rd)
        conn = rd.owner
        self._touch(conn)
        ev = rd.feed(frame, ts_ns, seg)
        if conn.closing:
            return self._check_fin(conn, frame, ts_ns, ev)
        return ev

    def _touch(self, conn: _Conn) -> None:
        if conn is not self._mru:
            self._lru.move_to_end(conn.id)
            self._mru = conn

    def _feed_slow(self, frame: int, ts_ns: int, seg, rd):
        flags = seg.flags
        if rd is not None:
            conn = rd.owner
            if flags & SYN and not flags & ACK and rd.isn != seg.seq:
                out: list = []
                self._close(conn, "reused", frame, ts_ns, out, remember=False)
                self._open(frame, ts_ns, seg, out)
                return out
            self._touch(conn)
            if flags & (RST | FIN) and conn.first_close is None:
                conn.first_close = (rd.direction, frame, ts_ns)
            if flags & RST:
                out = []
                self._close(conn, "rst", frame, ts_ns, out)
                return out
            ev = rd.feed(frame, ts_ns, seg)
            if flags & FIN:
                conn.closing = True
                conn.fin_frame = frame
                conn.fin_ts = ts_ns
            if conn.closing:
                return self._check_fin(conn, frame, ts_ns, ev)
            return ev
        st = self.stats
        sport = seg.sport
        dport = seg.dport
        sp = self.server_ports
        if sport not in sp and dport not in sp:
            if sport in self.tls_ports or dport in self.tls_ports:
                self._count_tls(seg)
                st["ignored_segments"] += 1
                return EMPTY
            if not (self.any_port or self.track_all):
                st["ignored_segments"] += 1
                return EMPTY
        if flags & RST or not (flags & SYN or seg.payload):
            st["ignored_segments"] += 1
            return EMPTY
        closed = self._closed
        if closed:
            key = _canon(seg)
            if key in closed:
                if flags & SYN and not flags & ACK and closed[key] != seg.seq:
                    del closed[key]
                else:
                    st["ignored_segments"] += 1
                    return EMPTY
        out = []
        self._open(frame, ts_ns, seg, out)
        return out

    def _count_tls(self, seg) -> None:
        key = _canon(seg)
        tls = self._tls
        flags = seg.flags
        if flags & SYN and not flags & ACK:
            if key in tls and tls[key] == seg.seq:
                return
            tls[key] = seg.seq
        elif key in tls or not (seg.payload or flags & SYN):
            return
        else:
            tls[key] = None
        tls.move_to_end(key)
        self.stats["tls_connections"] += 1
        if len(tls) > self._closed_max:
            tls.popitem(last=False)

    # -- connection lifecycle -------------------------------------------------
    def _open(self, frame: int, ts_ns: int, seg, out: list) -> None:
        flags = seg.flags
        syn = flags & SYN
        sport = seg.sport
        dport = seg.dport
        client_is_src = None
        if not self.any_port:
            s_in = sport in self.server_ports
            d_in = dport in self.server_ports
            if s_in != d_in:
                client_is_src = d_in
        if client_is_src is None:
            client_is_src = (not flags & ACK) if syn else sport >= dport
        if len(self._lru) >= self.max_connections:
            self._evict(frame, ts_ns, out)
        src = (seg.src, sport)
        dst = (seg.dst, dport)
        client, server = (src, dst) if client_is_src else (dst, src)
        cid = self._next_id
        self._next_id = cid + 1
        conn = _Conn(cid, client, server)
        kw = dict(max_segments=self.max_ooo_segments, max_bytes=self.max_ooo_bytes,
                  tail_window=self.tail_window, stats=self.stats, owner=conn)
        d0 = DirectionReassembler(cid, 0, **kw)
        d1 = DirectionReassembler(cid, 1, **kw)
        d0.peer, d1.peer = d1, d0
        conn.dirs = (d0, d1)
        fwd = (client[0], client[1], server[0], server[1])
        rev = (server[0], server[1], client[0], client[1])
        conn.keys = (fwd, rev)
        self._flows[fwd] = d0
        self._flows[rev] = d1
        self._lru[cid] = conn
        self._mru = conn
        self.stats["connections"] += 1
        out.append(ConnectionOpened(cid, client, server, frame, ts_ns, not syn, seg.tunnel))
        rd, other = (d0, d1) if client_is_src else (d1, d0)
        if syn and flags & ACK:
            other.set_isn((seg.ack - 1) & MASK)
        ev = rd.feed(frame, ts_ns, seg)
        if ev:
            out.extend(ev)
        if flags & FIN:
            conn.closing = True
            conn.fin_frame = frame
            conn.fin_ts = ts_ns
            conn.first_close = (rd.direction, frame, ts_ns)
            out.extend(self._check_fin(conn, frame, ts_ns, EMPTY))

    def _evict(self, frame: int, ts_ns: int, out: list) -> None:
        _, old = self._lru.popitem(last=False)
        self.stats["connections_evicted"] += 1
        out.append(TcpAnomaly(old.id, 0, "connection_cap", frame, ts_ns,
                              f"more than {self.max_connections} open connections; "
                              f"least recently active connection {old.id} closed"))
        self._close(old, "evicted", frame, ts_ns, out, remember=False)

    def _check_fin(self, conn: _Conn, frame: int, ts_ns: int, ev):
        d0, d1 = conn.dirs
        f0 = d0.fin_off is not None
        f1 = d1.fin_off is not None
        c0 = d0.complete
        c1 = d1.complete
        if f0 and f1 and c0 and c1:
            out = list(ev)
            self._close(conn, "fin", frame, ts_ns, out)
            return out
        closing = self._closing
        if (f0 and not c0) or (f1 and not c1):
            if conn.id not in closing:
                conn.deadline = ts_ns + self.fin_linger_ns
                if not closing or conn.deadline < self._closing_next:
                    self._closing_next = conn.deadline
                closing[conn.id] = conn
        elif conn.id in closing:
            del closing[conn.id]
        return ev

    def _expire(self, ts_ns: int) -> list:
        """Give up waiting for holes before FINs whose linger time has passed."""
        out: list = []
        nxt = None
        for cid, conn in list(self._closing.items()):
            if conn.deadline > ts_ns:
                if nxt is None or conn.deadline < nxt:
                    nxt = conn.deadline
                continue
            del self._closing[cid]
            d0, d1 = conn.dirs
            for d in conn.dirs:
                if d.fin_off is not None and not d.complete:
                    out.extend(d.flush())
            if d0.fin_off is not None and d1.fin_off is not None:
                self._close(conn, "fin", conn.fin_frame, conn.fin_ts, out)
        self._closing_next = nxt or 0
        return out

    def _close(self, conn: _Conn, reason: str, frame, ts_ns, out: list,
               remember: bool = True) -> None:
        for d in conn.dirs:
            ev = d.flush()
            if ev:
                out.extend(ev)
        flows = self._flows
        for k in conn.keys:
            if flows.get(k) is not None and flows[k].owner is conn:
                del flows[k]
        self._lru.pop(conn.id, None)
        self._closing.pop(conn.id, None)
        if self._mru is conn:
            self._mru = None
        if remember:
            c, s = conn.client, conn.server
            key = (c, s) if c <= s else (s, c)
            closed = self._closed
            closed[key] = conn.dirs[0].isn
            closed.move_to_end(key)
            if len(closed) > self._closed_max:
                closed.popitem(last=False)
        out.append(ConnectionClosed(conn.id, frame, ts_ns, reason, conn.first_close))

    def drop(self, cid: int) -> None:
        """Stop tracking open connection ``cid`` (not decoded): its later segments are
        ignored like those of a closed connection, and no event is returned."""
        conn = self._lru.get(cid)
        if conn is not None:
            self._close(conn, "dropped", None, None, [])
            self.stats["connections_dropped"] += 1

    def close(self) -> list:
        """End of capture: flush and close every open connection (in id order)."""
        out: list = []
        for conn in sorted(self._lru.values(), key=lambda c: c.id):
            d0, d1 = conn.dirs
            if d0.fin_off is not None and d1.fin_off is not None:
                self._close(conn, "fin", conn.fin_frame, conn.fin_ts, out)
            else:
                self._close(conn, "end", None, None, out, remember=False)
        self._closing.clear()
        return out
