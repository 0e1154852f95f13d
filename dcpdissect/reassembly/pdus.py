"""Capture file -> TCP connections -> framed MCBP PDUs, as one stream of events.

Every stage is a plain iterator so that the CLI and the Spark job share it. Events are
``Pdu``, ``Resync``, ``LostPdu`` (framing), ``StreamGap``, ``ConnectionOpened``,
``ConnectionClosed`` and ``TcpAnomaly`` (TCP), and ``TlsConnection`` (not decoded).

Frames are decoded through tunnels (``--vxlan-port`` adds VXLAN ports) and IP fragments are
reassembled (:class:`~dcpdissect.capture.packets.Decoder`). Which connections are decoded:
those on the DCP ports and ``--port`` always, every one with
``--any-port``; any other connection only when the first bytes of its directions are MCBP
(a legal magic, a known opcode, sane lengths, confirmed by a second header or by the other
direction's answer), as Wireshark's heuristic dissectors judge a conversation. Connections
that start with a TLS record header (or sit on the TLS port) are counted and reported; the
others are dropped from reassembly. Decoded connections are numbered in decision order.
A fault in the capture file is raised as
``CaptureError`` only after everything decoded before it has been yielded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple

from ..capture.fragments import Defragmenter
from ..capture.keylog import KeyLog
from ..capture.packets import Decoder
from ..capture.readers import CaptureError, Frame, open_capture
from ..protocol import DCP_PORTS, TLS_PORTS
from ..codec.header import frame_size
from ..protocol import HEADER_SIZE
from .connections import ConnectionClosed, ConnectionOpened, ConnectionTable, StreamData, StreamGap
from .framing import _LEGAL_MAGICS, LostPdu, Pdu, PduFramer, Resync, plausible
from .tls import NO_KEY, TlsProblem, TlsSession, hello_random

HEURISTIC_HOLD = 64 << 10     # bytes per direction held while a connection is undecided


class TlsConnection(NamedTuple):
    """A connection that starts with a TLS record (or is on a TLS port): not decoded."""
    conn: None                      # not numbered: the MCBP connections keep their numbers
    client: tuple[str, int]
    server: tuple[str, int]
    frame: int
    ts_ns: int
    by_port: bool                   # True: judged by its port, no TLS record header was seen


@dataclass
class Options:
    ports: tuple[int, ...] = ()          # extra server ports to decode
    any_port: bool = False               # decode every TCP connection, whatever its bytes
    heuristic: bool = True               # other ports: decode the connections whose first
                                         # bytes are MCBP (see ``direction_verdict``)
    max_connections: int = 100_000
    tls_keylog: str = ""                 # key log text (NSS format): TLS connections found
                                         # by the heuristic are decrypted with its secrets
    vxlan_ports: tuple[int, ...] = ()    # UDP ports carrying VXLAN besides 4789

    @property
    def server_ports(self) -> frozenset[int]:
        return frozenset(DCP_PORTS) | frozenset(self.ports)


@dataclass
class Summary:
    """Per-capture counters printed on stderr and kept in reports."""
    path: str = ""
    frames: int = 0
    first_ts_ns: int | None = None      # time of the capture's first frame
    tcp_segments: int = 0
    connections: int = 0
    pdus: int = 0
    gaps: int = 0
    gap_bytes: int = 0
    resyncs: int = 0
    lost_pdus: int = 0
    tls_connections: int = 0
    tls_decrypted: int = 0              # TLS connections opened with the key log
    tls_randoms: dict = field(default_factory=dict, compare=False)   # their client randoms
    #                                     (hex) by connection number, for evidence bundles
    heuristic_ports: dict = field(default_factory=dict)   # server port -> connections decoded
    undecoded_ports: dict = field(default_factory=dict)   # server port -> connections not MCBP
    tcp: dict = field(default_factory=dict)
    ip_fragments: int = 0               # IP fragments seen
    ip_unreassembled: int = 0           # fragmented packets given up (incomplete, timed out,
    #                                     over the memory cap) and invalid fragments
    vxlan_like: dict = field(default_factory=dict, compare=False)   # UDP port -> datagrams
    #                                     that look like VXLAN on a port not read as VXLAN
    error: str | None = None

    def line(self) -> str:
        text = (f"{self.path}: {self.frames} frames, {self.connections} TCP connections, "
                f"{self.pdus} PDUs, {self.gaps} gaps ({self.gap_bytes} bytes), "
                f"{self.resyncs} resyncs, {self.tls_connections} TLS connections skipped")
        if self.tls_decrypted:
            text += f", {self.tls_decrypted} TLS connections opened with the key log"
        mismatched = self.tcp.get("overlaps_mismatched", 0)
        if mismatched:
            text += f", {mismatched} overlapping retransmissions with different bytes"
        if self.ip_unreassembled:
            text += (f", {self.ip_unreassembled} fragmented IP packets not reassembled "
                     "(fragments missing)")
        return text + (f"; stopped: {self.error}" if self.error else "")

    def port_note(self) -> str | None:
        """One line naming the ports whose MCBP was found by the heuristic (None: none)."""
        if not self.heuristic_ports:
            return None
        ports = sorted(self.heuristic_ports)
        listed = ", ".join(f"{p} ({n} connection{'s' * (n != 1)})"
                           for p, n in sorted(self.heuristic_ports.items()))
        return (f"dcpdissect: MCBP found by its first bytes on port{'s' * (len(ports) != 1)} "
                f"{listed}; --port {ports[0]} decodes it without the heuristic")

    @property
    def no_mcbp(self) -> bool:
        """Nothing was decoded as MCBP (and the capture could be read)."""
        return self.pdus == 0 and self.connections == 0 and not self.error

    def no_mcbp_hint(self) -> str:
        """One line: why the capture gave nothing, and which option to try."""
        seen = sorted(self.undecoded_ports, key=lambda p: (-self.undecoded_ports[p], p))
        what = (f"TCP ports seen: {', '.join(map(str, seen[:5]))}"
                f"{', ...' if len(seen) > 5 else ''}") if seen else "no TCP connections"
        if self.tls_connections:
            what += (f"; {self.tls_connections} TLS connection{'s' * (self.tls_connections != 1)} "
                     "not decoded: give their key log with --tls-keylog")
        if self.vxlan_like:
            port = max(self.vxlan_like, key=self.vxlan_like.get)
            what += f"; UDP port {port} carries what looks like VXLAN: try --vxlan-port {port}"
        return (f"dcpdissect: no MCBP found in {self.path or 'the capture'} ({what}); if the "
                f"traffic is MCBP on another port, try --port N (or --any-port)")


class PduStream:
    """Feeds frames through TCP reassembly and MCBP framing; iterate for events."""

    def __init__(self, options: Options | None = None, summary: Summary | None = None):
        self.options = options or Options()
        self.summary = summary or Summary()
        opts = self.options
        self.server_ports = opts.server_ports
        self.tls_ports = frozenset(TLS_PORTS) - self.server_ports
        self.heuristic = opts.heuristic and not opts.any_port
        self.keylog = KeyLog(opts.tls_keylog) if opts.tls_keylog else None
        self.decoder = Decoder(opts.vxlan_ports, Defragmenter())
        self.table = ConnectionTable(server_ports=self.server_ports,
                                     tls_ports=(frozenset() if self.heuristic or self.keylog
                                                else self.tls_ports),
                                     any_port=opts.any_port, track_all=self.heuristic,
                                     max_connections=opts.max_connections)
        self.framers: dict[tuple[int, int], PduFramer] = {}
        self.connections: dict[int, ConnectionOpened] = {}
        self.now: tuple[int, int] | None = None     # (frame, ts) being processed
        # The table numbers every TCP connection; decoded ones are renumbered 1, 2, ... in
        # the order they are decided, so that other traffic does not shift the numbers.
        self.public: dict[int, int] = {}            # table id -> connection number
        self.pending: dict[int, _Candidate] = {}    # undecided (heuristic) connections
        self.next_public = 1
        self.tls: dict[int, TlsSession] = {}        # decrypted connections by number

    def feed_frames(self, frames: Iterable[Frame]) -> Iterator:
        summary = self.summary
        decode = self.decoder.decode_frame
        for frame in frames:
            summary.frames += 1
            if summary.first_ts_ns is None:
                summary.first_ts_ns = frame.ts_ns
            seg = decode(frame.linktype, frame.data, frame.number, frame.ts_ns)
            if seg is None:
                continue
            summary.tcp_segments += 1
            self.now = (frame.number, frame.ts_ns)
            events = self.table.feed(frame.number, frame.ts_ns, seg)
            if events:
                yield from self._route(events)

    def finish(self) -> Iterator:
        self.now = None
        yield from self._route(self.table.close())
        for framer in list(self.framers.values()):
            out = framer.close()
            self._tally(out)
            yield from out
        self.framers.clear()
        self.summary.tls_connections += self.table.stats.get("tls_connections", 0)
        self.summary.tcp = dict(self.table.stats)
        defrag = self.decoder.defragmenter
        defrag.finish()
        self.summary.ip_fragments = defrag.stats["fragments"]
        self.summary.ip_unreassembled = defrag.unreassembled
        self.summary.vxlan_like = dict(self.decoder.vxlan_like)

    def _framer(self, conn: int, direction: int) -> PduFramer:
        key = (conn, direction)
        framer = self.framers.get(key)
        if framer is None:
            opened = self.connections.get(conn)
            in_sync = opened is not None and not opened.mid_stream
            session = self.tls.get(conn)
            framer = self.framers[key] = (session.direction(direction) if session else
                                          PduFramer(conn, direction, in_sync=in_sync))
        return framer

    def _route(self, events) -> Iterator:
        public = self.public
        for ev in events:
            cid = ev.conn
            pub = public.get(cid)
            kind = type(ev)
            if pub is None:
                if kind is ConnectionOpened:
                    yield from self._opened(ev)
                elif cid in self.pending:
                    yield from self._hold(ev)
                continue            # a connection not decoded (not MCBP, TLS)
            if pub != cid:
                ev = ev._replace(conn=pub)
            if kind is StreamData:
                out = self._framer(ev.conn, ev.direction).data(
                    ev.offset, ev.data, ev.frame, ev.ts_ns, self.now)
                if out:
                    self._tally(out)
                    yield from out
            elif kind is StreamGap:
                self.summary.gaps += 1
                self.summary.gap_bytes += ev.length
                yield ev
                out = self._framer(ev.conn, ev.direction).gap(ev.offset, ev.length, ev.frame, ev.ts_ns)
                self._tally(out)
                yield from out
            elif kind is ConnectionOpened:
                self.summary.connections += 1
                self.connections[ev.conn] = ev
                yield ev
            elif kind is ConnectionClosed:
                for direction in (0, 1):
                    framer = self.framers.pop((ev.conn, direction), None)
                    if framer is not None:
                        out = framer.close()
                        self._tally(out)
                        yield from out
                yield ev
                self.connections.pop(ev.conn, None)     # state per open connection only
                self.tls.pop(ev.conn, None)
            else:
                yield ev

    # -- which connections are decoded ------------------------------------------------
    def _opened(self, ev: ConnectionOpened) -> Iterator:
        ports = self.server_ports
        on_port = ev.server[1] in ports or ev.client[1] in ports
        at_once = on_port or not self.heuristic
        if at_once and self.keylog is None:
            yield from self._accept(ev.conn, [(ev, self.now)], heuristic=False)
        else:       # with a key log, a connection decoded at once may start TLS
            cand = self.pending[ev.conn] = _Candidate(ev, by_port=at_once)
            if at_once:             # numbered as if decoded at once
                cand.number = self._new_number(ev.conn)

    def _hold(self, ev) -> Iterator:
        cand = self.pending[ev.conn]
        kind = type(ev)
        cand.events.append((ev, self.now))
        if kind is StreamData:
            cand.data(ev.direction, ev.data)
        elif kind is StreamGap:
            cand.gap(ev.direction)
        verdict = cand.verdict(final=kind is ConnectionClosed)
        if verdict is None:
            return
        if verdict == "tls" and self.keylog is not None:
            random = self._client_random(cand, final=kind is ConnectionClosed)
            if random is None:
                return                      # the ClientHello is not complete yet
        del self.pending[ev.conn]
        if verdict == "mcbp":
            yield from self._accept(ev.conn, cand.events, heuristic=not cand.by_port,
                                    number=cand.number)
            return
        opened = cand.opened
        port = opened.server[1]
        if verdict == "tls" and self.keylog is not None and self.keylog.has(random):
            yield from self._accept_tls(cand, random)
            return
        if verdict == "tls" or port in self.tls_ports:
            self.summary.tls_connections += 1
            at = ev if kind is StreamData else opened      # the record header's frame
            if verdict == "tls" and self.keylog is not None:
                yield TlsProblem(None, opened.client, opened.server, at.frame, at.ts_ns, NO_KEY,
                                 "the key log has no line for client random "
                                 f"{random.hex()[:16]}…" if random else
                                 "no ClientHello seen: no client random to look up",
                                 random.hex())
            else:
                yield TlsConnection(None, opened.client, opened.server, at.frame, at.ts_ns,
                                    verdict != "tls")
        else:
            self.summary.undecoded_ports[port] = self.summary.undecoded_ports.get(port, 0) + 1
        if kind is not ConnectionClosed:
            self.table.drop(ev.conn)        # stop reassembling it; its events are dropped

    @staticmethod
    def _client_random(cand: "_Candidate", final: bool) -> bytes | None:
        """The ClientHello's random of a held TLS connection (b"": none; None: wait)."""
        randoms = [hello_random(b) for b in cand.bufs]
        found = [r for r in randoms if r]
        if found:
            return found[0]
        if final or all(cand.frozen) or b"" in randoms and None not in randoms:
            return b""
        return None

    def _accept_tls(self, cand: "_Candidate", random: bytes) -> Iterator:
        """Decode a TLS connection with the key log's secrets."""
        opened = cand.opened
        if cand.number is None:
            cand.number = self._new_number(opened.conn)
        conn = cand.number
        hello_dir = 0 if hello_random(cand.bufs[0]) else 1
        self.tls[conn] = TlsSession(conn, opened.client, opened.server, self.keylog, random,
                                    hello_dir)
        self.summary.tls_decrypted += 1
        self.summary.tls_randoms[conn] = random.hex()
        yield from self._accept(opened.conn, cand.events, heuristic=False, number=cand.number)

    def _accept(self, cid: int, events: list, heuristic: bool, number: int | None = None) -> Iterator:
        """Decode connection ``cid`` (as connection ``number`` when it was reserved): replay
        its held (event, now) pairs."""
        if number is None:
            number = self._new_number(cid)
        self.public[cid] = number
        if heuristic:
            port = events[0][0].server[1]
            self.summary.heuristic_ports[port] = self.summary.heuristic_ports.get(port, 0) + 1
        now = self.now
        for ev, then in events:
            self.now = then if then is not None else now
            yield from self._route((ev,))
        self.now = now

    def _new_number(self, cid: int) -> int:
        """The number of decoded connection ``cid`` (the table's id): the next one."""
        number = self.next_public
        self.next_public += 1
        return number

    def _tally(self, events: list) -> None:
        summary = self.summary
        for ev in events:
            kind = type(ev)
            if kind is Pdu:
                summary.pdus += 1
            elif kind is Resync:
                summary.resyncs += 1
            elif kind is LostPdu:
                summary.lost_pdus += 1


def iter_events(path: str, options: Options | None = None, summary: Summary | None = None,
                reader_hook=None) -> Iterator:
    """All events of one capture file. On a capture fault, flush and yield what was
    decoded, record the fault in ``summary.error`` and raise the ``CaptureError``."""
    stream = PduStream(options, summary)
    stream.summary.path = path
    try:
        with open_capture(path) as reader:
            if reader_hook is not None:
                reader_hook(reader)
            yield from stream.feed_frames(reader)
    except CaptureError as exc:
        stream.summary.error = str(exc)
        yield from stream.finish()
        raise
    yield from stream.finish()


def direction_verdict(buf, final: bool = False) -> str | None:
    """What the first bytes of one direction are: 'tls' (a TLS record header 0x16 0x03
    0x0X), 'mcbp' (a plausible header confirmed by a second one right after its frame),
    'one' (one plausible, complete frame and nothing after it yet), 'no', or None (not
    enough bytes yet). ``final``: no more bytes will come (an unfinished plausible frame
    is then 'one')."""
    n = len(buf)
    if not n:
        return None
    if buf[0] == 0x16:
        if n < 3:
            return "no" if final else None
        return "tls" if buf[1] == 0x03 and buf[2] <= 0x04 else "no"
    if buf[0] not in _LEGAL_MAGICS:
        return "no"
    if n < HEADER_SIZE:
        return "no" if final else None
    if not plausible(buf, 0):
        return "no"
    nxt = frame_size(buf, 0)
    if n < nxt + HEADER_SIZE:
        if nxt < n and buf[nxt] not in _LEGAL_MAGICS:
            return "no"
        return "one" if final or n >= nxt else None
    return "mcbp" if plausible(buf, nxt) else "no"


class _Candidate:
    """A connection on a port that is not decoded by default, waiting for its first bytes
    (the way Wireshark's heuristic dissectors look at the start of a conversation)."""
    __slots__ = ("opened", "events", "bufs", "frozen", "by_port", "number")

    def __init__(self, opened: ConnectionOpened, by_port: bool = False):
        self.opened = opened
        self.by_port = by_port           # on a DCP port: MCBP unless it starts TLS
        self.number: int | None = None   # its connection number, reserved when by_port
        self.events: list = [(opened, None)]     # (event, (frame, ts) being processed)
        self.bufs = (bytearray(), bytearray())
        self.frozen = [False, False]     # a gap: the bytes after it are not the start

    def data(self, direction: int, data: bytes) -> None:
        if not self.frozen[direction]:
            buf = self.bufs[direction]
            buf += data[:HEURISTIC_HOLD - len(buf)]
            if len(buf) >= HEURISTIC_HOLD:
                self.frozen[direction] = True

    def gap(self, direction: int) -> None:
        self.frozen[direction] = True

    def verdict(self, final: bool) -> str | None:
        """'mcbp', 'tls', 'other' or None (undecided)."""
        v = [direction_verdict(b, final or f) for b, f in zip(self.bufs, self.frozen)]
        if "tls" in v:
            return "tls"
        if self.by_port:
            return "mcbp" if final or any(len(b) >= 3 for b in self.bufs) else None
        if "no" in v:
            return "other"
        if "mcbp" in v or v == ["one", "one"]:   # a request and its answer confirm each other
            return "mcbp"
        if final or all(self.frozen):
            return "other"
        return None


__all__ = ["Options", "Summary", "PduStream", "iter_events", "Pdu", "Resync", "LostPdu",
           "StreamGap", "ConnectionOpened", "ConnectionClosed", "CaptureError",
           "TlsConnection", "TlsProblem", "direction_verdict"]
