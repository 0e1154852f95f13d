"""Capture file -> TCP connections -> framed MCBP PDUs, as one stream of events.

Every stage is a plain iterator so that the CLI and the Spark job share it. Events are
``Pdu``, ``Resync``, ``LostPdu``, ``Hidden`` (framing), ``StreamGap``, ``ConnectionOpened``,
``ConnectionClosed`` and ``TcpAnomaly`` (TCP), ``TlsConnection`` (not decoded) and
``NotMcbp`` (``--any-port``: the connections judged not MCBP, once, at the end).

Frames are decoded through tunnels (``--vxlan-port`` adds VXLAN ports) and IP fragments are
reassembled (:class:`~dcpdissect.capture.packets.Decoder`). Which connections are decoded:
those on the DCP ports and ``--port`` always (MCBP by their port); any other connection
only when its bytes prove it MCBP, as Wireshark's heuristic
dissectors judge a conversation: plausible headers (a legal magic, a known opcode, sane
lengths) that chain, a header right after the previous frame, in every direction that
carries bytes, or a request and its answer. A connection whose start was captured is judged
from its first byte; one that started before the capture (or after a lost first segment)
by the first chain within its first bytes. ``--any-port`` judges alike and reports the
others in one ``NotMcbp`` event. Connections that start with a TLS record header (or sit on
the TLS port) are counted and reported; the others are dropped from reassembly. Decoded
connections are numbered in decision order. A fault in the capture file is raised as
``CaptureError`` only after everything decoded before it has been yielded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple

from ..capture.fragments import Defragmenter
from ..capture.keylog import KeyLog
from ..capture.order import WINDOW_NS, TimeOrder
from ..capture.packets import Decoder
from ..capture.fileset import open_source
from ..capture.readers import TLS_KEY_LOG, CaptureError, Frame
from ..protocol import DCP_PORTS, TLS_PORTS
from ..codec.header import frame_size
from ..protocol import HEADER_SIZE
from .connections import ConnectionClosed, ConnectionOpened, ConnectionTable, StreamData, StreamGap
from .framing import _LEGAL_MAGICS, Hidden, LostPdu, Pdu, PduFramer, Resync, plausible
from .tcp import UNCAPTURED
from .tcp_streams import TcpStreams
from .tls import NO_KEY, TlsProblem, TlsSession, hello_random

HEURISTIC_HOLD = 64 << 10     # bytes per direction held while a connection is undecided: the
                              # window in which a connection that started before the capture
                              # must show a chain of headers
_MAGIC_RE = re.compile(b"[" + b"".join(re.escape(bytes([m])) for m in sorted(_LEGAL_MAGICS)) + b"]")


class TlsConnection(NamedTuple):
    """A connection that starts with a TLS record (or is on a TLS port): not decoded."""
    conn: None                      # not numbered: the MCBP connections keep their numbers
    client: tuple[str, int]
    server: tuple[str, int]
    frame: int
    ts_ns: int
    by_port: bool                   # True: judged by its port, no TLS record header was seen


class NotMcbp(NamedTuple):
    """``--any-port``: the connections whose bytes are not MCBP (not decoded), by server port;
    one event at the end of the capture."""
    conn: None
    ports: dict                     # server port -> connections
    frame: int                      # the frame that opened the first of them
    ts_ns: int


@dataclass
class Options:
    ports: tuple[int, ...] = ()          # extra server ports to decode
    any_port: bool = False               # judge every TCP connection by its bytes (even
                                         # without ``heuristic``) and report the others
                                         # (``NotMcbp``)
    heuristic: bool = True               # other ports: decode the connections whose bytes
                                         # prove MCBP (see ``_Candidate``)
    max_connections: int = 100_000
    tls_keylog: str = ""                 # key log text (NSS format): TLS connections found
                                         # by the heuristic are decrypted with its secrets
    tls_secrets: tuple = ()              # (frames before, key log text) of each of the
                                         # capture's TLS secrets blocks, when known ahead
    vxlan_ports: tuple[int, ...] = ()    # UDP ports carrying VXLAN besides 4789
    tcp_streams: TcpStreams | None = None   # fed every TCP segment: Wireshark's TCP
                                         # conversations (``ConnectionOpened.conversation``)

    @property
    def server_ports(self) -> frozenset[int]:
        return frozenset(DCP_PORTS) | frozenset(self.ports)


def counted(n: int, noun: str) -> str:
    """``1 frame``, ``2 frames``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass
class Summary:
    """Per-capture counters printed on stderr and kept in reports."""
    path: str = ""
    frames: int = 0
    first_ts_ns: int | None = None      # time of the capture's first frame
    # time of the last frame read (the jsonl error record's): where a reading stopped, not
    # a count; the pipeline, which reads a file in chunks apart, leaves it None
    last_ts_ns: int | None = field(default=None, compare=False)
    tcp_segments: int = 0
    connections: int = 0                # decoded as MCBP
    pdus: int = 0
    gaps: int = 0
    gap_bytes: int = 0
    resyncs: int = 0
    lost_pdus: int = 0
    uncaptured_bytes: int = 0           # bytes the snapshot length cut (on the wire, not kept)
    partial_pdus: int = 0               # messages decoded from a captured prefix
    hidden: int = 0                     # cuts that hid message boundaries
    tls_connections: int = 0
    tls_decrypted: int = 0              # TLS connections opened with the key log
    tls_randoms: dict = field(default_factory=dict, compare=False)   # their client randoms
    #                                     (hex) by connection number, for evidence bundles
    heuristic_ports: dict = field(default_factory=dict)   # server port -> connections decoded
    undecoded_ports: dict = field(default_factory=dict)   # server port -> connections judged
    #                                     not MCBP by their bytes (not decoded)
    tcp: dict = field(default_factory=dict)
    ip_fragments: int = 0               # IP fragments seen
    ip_unreassembled: int = 0           # fragmented packets given up (incomplete, timed out,
    #                                     over the memory cap) and invalid fragments
    vxlan_like: dict = field(default_factory=dict, compare=False)   # UDP port -> datagrams
    #                                     that look like VXLAN on a port not read as VXLAN
    error: str | None = None
    file_keylog: str = field(default="", compare=False)  # the capture's own TLS key log
    #                                     lines (decryption secrets blocks)
    secrets_ignored: dict = field(default_factory=dict)  # secrets type -> blocks not used
    late_frames: int = 0                # frames later than the time-order window allows
    late_max_ns: int = 0                # how far the furthest was behind the newest frame
    # a file set's: where each merged frame comes from (FrameFiles; None: one file)
    frame_files: object = field(default=None, compare=False)

    def locate(self, frame: int | None) -> tuple[str, int] | None:
        """(file, frame number in that file) of a frame of a file set (None: one file)."""
        return self.frame_files.locate(frame) if self.frame_files and frame else None

    @property
    def not_mcbp(self) -> int:
        """Connections judged not MCBP by their bytes."""
        return sum(self.undecoded_ports.values())

    def line(self) -> str:
        connections = counted(self.connections, "TCP connection")
        if self.not_mcbp:
            seen = self.connections + self.not_mcbp + self.tls_connections
            connections = (f"{counted(seen, 'TCP connection')} ({self.connections} decoded as "
                           f"MCBP, {self.not_mcbp} not MCBP)")
        text = (f"{self.path}: {counted(self.frames, 'frame')}, {connections}, "
                f"{counted(self.pdus, 'message')}, {counted(self.gaps, 'gap')} "
                f"({self.gap_bytes} bytes), {counted(self.resyncs, 'resync')}, "
                f"{counted(self.tls_connections, 'TLS connection')} skipped")
        if self.uncaptured_bytes:
            text += (f", {self.uncaptured_bytes} bytes not captured (snapshot length): "
                     f"{self.partial_pdus} PDUs decoded from their captured start, "
                     f"{self.hidden} cuts hid message boundaries")
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

    def notes(self) -> list[str]:
        """Lines for stderr: what was read but not used as it stands, once per capture."""
        out = []
        if self.late_frames:
            out.append(f"dcpdissect: info: {self.path or 'the capture'}: {self.late_frames} "
                       f"frame{'s' * (self.late_frames != 1)} came later than the time-order "
                       f"window ({WINDOW_NS / 1e9:g} s) allows, up to "
                       f"{self.late_max_ns / 1e9:.6f} s out of order; each was processed "
                       "as soon as it was read")
        if self.secrets_ignored:
            kinds = ", ".join(f"0x{t:08x} ({n} block{'s' * (n != 1)})"
                              for t, n in sorted(self.secrets_ignored.items()))
            out.append(f"dcpdissect: note: {self.path or 'the capture'}: decryption secrets "
                       f"of type {kinds} ignored: only TLS key logs (0x{TLS_KEY_LOG:08x}) are "
                       "used")
        return out

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
                f"traffic is MCBP on another port, decode it with --port N")


COUNTED = ("connections", "pdus", "gaps", "gap_bytes", "resyncs", "lost_pdus", "uncaptured_bytes",
           "partial_pdus", "hidden", "tls_connections", "tls_decrypted")   # Summary's per-event sums


class PduStream:
    """Feeds frames through TCP reassembly and MCBP framing; iterate for events."""

    def __init__(self, options: Options | None = None, summary: Summary | None = None):
        self.options = options or Options()
        self.summary = summary or Summary()
        opts = self.options
        self.server_ports = opts.server_ports
        self.tls_ports = frozenset(TLS_PORTS) - self.server_ports
        self.heuristic = opts.heuristic or opts.any_port
        self.keylog = KeyLog(opts.tls_keylog) if opts.tls_keylog or opts.tls_secrets else None
        for after, text in opts.tls_secrets:
            self.keylog.add(text, after)
        self.decoder = Decoder(opts.vxlan_ports, Defragmenter())
        self.table = ConnectionTable(server_ports=self.server_ports,
                                     tls_ports=(frozenset() if self.heuristic or self.keylog
                                                else self.tls_ports),
                                     track_all=self.heuristic,
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
        self.not_mcbp_at: tuple[int, int] | None = None  # (frame, ts) that opened the first
        #                                                  connection judged not MCBP

    def feed_frames(self, frames: Iterable[Frame]) -> Iterator:
        summary = self.summary
        decode = self.decoder.decode_frame
        streams = self.options.tcp_streams
        for frame in frames:
            summary.frames += 1
            if summary.first_ts_ns is None:
                summary.first_ts_ns = frame.ts_ns
            summary.last_ts_ns = frame.ts_ns
            seg = decode(frame.linktype, frame.data, frame.number, frame.ts_ns)
            if seg is None:
                continue
            summary.tcp_segments += 1
            self.now = (frame.number, frame.ts_ns)
            if streams is not None:
                streams.feed(seg, frame.number, frame.ts_ns, frame.wirelen)
            events = self.table.feed(frame.number, frame.ts_ns, seg)
            if events:
                yield from self._route(events)

    def feed_capture(self, reader) -> Iterator:
        """:meth:`feed_frames` of a capture as it is read: its frames in time order, each
        with its number (:mod:`~dcpdissect.capture.order`), and the TLS key log lines of
        its decryption secrets blocks used from where they stand."""
        summary = self.summary
        reader.on_secrets = self.add_secrets
        reader.idle_marks = True
        order = TimeOrder(reader, on_first=self._first_frame)
        try:
            yield from self.feed_frames(order)
        finally:
            summary.late_frames += order.late
            summary.late_max_ns = max(summary.late_max_ns, order.late_max_ns)

    def _first_frame(self, ts_ns: int) -> None:
        if self.summary.first_ts_ns is None:
            self.summary.first_ts_ns = ts_ns

    def add_secrets(self, after: int, stype: int, data: bytes) -> None:
        """A decryption secrets block read after frame ``after``: a TLS key log's lines
        open the connections decided from the next frame on; other types are counted."""
        if stype != TLS_KEY_LOG:
            ignored = self.summary.secrets_ignored
            ignored[stype] = ignored.get(stype, 0) + 1
            return
        text = data.decode("ascii", "replace")
        if text.strip():
            self.summary.file_keylog += text if text.endswith("\n") else text + "\n"
        if self.keylog is None:
            self.keylog = KeyLog()
            self.table.tls_ports = frozenset()
        self.keylog.add(text, after)

    def _keys_known(self) -> bool:
        """Whether key log lines were read before the frame being processed."""
        log = self.keylog
        return log is not None and log.has_any(self.now[0] if self.now else None)

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
        if self.options.tcp_streams is not None:
            self.options.tcp_streams.finish()
        if self.options.any_port and self.not_mcbp_at is not None:
            yield NotMcbp(None, dict(sorted(self.summary.undecoded_ports.items())),
                          *self.not_mcbp_at)

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
                    yield from self._opened(self._numbered(ev))
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
                if ev.cause == UNCAPTURED:
                    self.summary.uncaptured_bytes += ev.length
                else:
                    self.summary.gaps += 1
                    self.summary.gap_bytes += ev.length
                yield ev
                out = self._framer(ev.conn, ev.direction).gap(ev.offset, ev.length, ev.frame,
                                                              ev.ts_ns, ev.cause)
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

    def _numbered(self, ev: ConnectionOpened) -> ConnectionOpened:
        """``ev`` with its ``conversation`` (when ``Options.tcp_streams`` counts them)."""
        streams = self.options.tcp_streams
        index = streams.current(ev.client, ev.server) if streams is not None else None
        return ev if index is None else ev._replace(conversation=index)

    # -- which connections are decoded ------------------------------------------------
    def _opened(self, ev: ConnectionOpened) -> Iterator:
        ports = self.server_ports
        on_port = ev.server[1] in ports or ev.client[1] in ports
        at_once = on_port or not self.heuristic
        if at_once and not self._keys_known():
            yield from self._accept(ev.conn, [(ev, self.now)], heuristic=False)
        else:       # with a key log, a connection decoded at once may start TLS
            cand = self.pending[ev.conn] = _Candidate(ev, by_port=at_once,
                                                      search=ev.mid_stream)
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
        keys = verdict == "tls" and self._keys_known()
        if keys:
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
        if keys and self.keylog.has(random, self.now[0] if self.now else None):
            yield from self._accept_tls(cand, random)
            return
        if verdict == "tls" or port in self.tls_ports:
            self.summary.tls_connections += 1
            at = ev if kind is StreamData else opened      # the record header's frame
            mcbp_port = cand.by_port or port in self.tls_ports
            if keys and mcbp_port:
                yield TlsProblem(None, opened.client, opened.server, at.frame, at.ts_ns, NO_KEY,
                                 "the key log has no line for client random "
                                 f"{random.hex()[:16]}…" if random else
                                 "no ClientHello seen: no client random to look up",
                                 random.hex())
            else:       # elsewhere TLS without its key is not known to carry MCBP: info
                yield TlsConnection(None, opened.client, opened.server, at.frame, at.ts_ns,
                                    verdict != "tls")
        else:
            self.summary.undecoded_ports[port] = self.summary.undecoded_ports.get(port, 0) + 1
            if self.not_mcbp_at is None or opened.frame < self.not_mcbp_at[0]:
                self.not_mcbp_at = (opened.frame, opened.ts_ns)
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
        keylog = self.keylog.as_of(random, self.now[0] if self.now else None)
        self.tls[conn] = TlsSession(conn, opened.client, opened.server, keylog, random,
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
                if ev.missing:
                    summary.partial_pdus += 1
            elif kind is Hidden:
                summary.hidden += 1
            elif kind is Resync:
                summary.resyncs += 1
            elif kind is LostPdu:
                summary.lost_pdus += 1


def iter_events(path, options: Options | None = None, summary: Summary | None = None,
                reader_hook=None) -> Iterator:
    """All events of one capture file or :class:`~dcpdissect.capture.fileset.FileSet`. On
    a capture fault, flush and yield what was decoded, record the fault in
    ``summary.error`` and raise the ``CaptureError``."""
    stream = PduStream(options, summary)
    stream.summary.path = str(path)
    try:
        with open_source(path) as reader:
            stream.summary.frame_files = getattr(reader, "frame_files", None)
            if reader_hook is not None:
                reader_hook(reader)
            yield from stream.feed_capture(reader)
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
    is then 'one'). Bytes that may start inside a frame are judged by :func:`chain_search`."""
    n = len(buf)
    if not n:
        return None
    if buf[0] == 0x16:
        if n < 3:
            return "no" if final else None
        return "tls" if _tls_record(buf) else "no"
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


def _tls_record(buf) -> bool:
    return len(buf) >= 3 and buf[0] == 0x16 and buf[1] == 0x03 and buf[2] <= 0x04


def chain_search(buf, pos: int, final: bool) -> tuple[str | None, int]:
    """The first chain of headers in ``buf`` at or after ``pos`` (the bytes before ``pos``
    hold none), as the framer resynchronises: ('mcbp', at) for a plausible header followed
    by another right after its frame, ('one', at) for a plausible frame that ends where the
    bytes end (or before an unfinished header), (None, at) while the header at ``at`` waits
    for more bytes, ('no', at) when ``final`` bytes hold no chain. Search again from the
    position returned when more bytes came."""
    n = len(buf)
    while pos + HEADER_SIZE <= n:
        if buf[pos] in _LEGAL_MAGICS and plausible(buf, pos):
            nxt = pos + frame_size(buf, pos)
            if nxt + HEADER_SIZE <= n:
                if plausible(buf, nxt):
                    return "mcbp", pos
            elif nxt <= n:
                if nxt == n or buf[nxt] in _LEGAL_MAGICS:
                    return "one", pos
            elif not final:
                return None, pos
        found = _MAGIC_RE.search(buf, pos + 1)
        pos = found.start() if found else n
    return ("no" if final else None), pos


class _Candidate:
    """A connection on a port that is not decoded by default, waiting for its bytes to
    prove it MCBP (the way Wireshark's heuristic dissectors judge a conversation). A
    direction whose start was not captured (no handshake, or a gap before its first byte)
    is searched for a chain within its first ``HEURISTIC_HOLD`` bytes."""
    __slots__ = ("opened", "events", "bufs", "frozen", "by_port", "number", "search", "scan")

    def __init__(self, opened: ConnectionOpened, by_port: bool = False, search: bool = False):
        self.opened = opened
        self.by_port = by_port           # on a DCP port: MCBP unless it starts TLS
        self.number: int | None = None   # its connection number, reserved when by_port
        self.events: list = [(opened, None)]     # (event, (frame, ts) being processed)
        self.bufs = (bytearray(), bytearray())
        self.frozen = [False, False]     # a gap: the bytes after it are not the start
        self.search = [search, search]   # the start is not captured: search for a chain
        self.scan = [0, 0]               # where the search goes on (no chain before)

    def data(self, direction: int, data: bytes) -> None:
        if not self.frozen[direction]:
            buf = self.bufs[direction]
            buf += data[:HEURISTIC_HOLD - len(buf)]
            if len(buf) >= HEURISTIC_HOLD:
                self.frozen[direction] = True

    def gap(self, direction: int) -> None:
        if self.bufs[direction]:
            self.frozen[direction] = True
        else:                            # its first bytes were lost: the next start anywhere
            self.search[direction] = True

    def _direction(self, d: int, final: bool) -> str | None:
        buf = self.bufs[d]
        if not self.search[d] or not buf:
            return direction_verdict(buf, final)
        if _tls_record(buf):
            return "tls"
        verdict, self.scan[d] = chain_search(buf, self.scan[d], final)
        return verdict

    def verdict(self, final: bool) -> str | None:
        """'mcbp', 'tls', 'other' or None (undecided)."""
        v = [self._direction(d, final or self.frozen[d]) for d in (0, 1)]
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


__all__ = ["Options", "Summary", "PduStream", "iter_events", "Pdu", "Resync", "LostPdu", "Hidden",
           "StreamGap", "ConnectionOpened", "ConnectionClosed", "CaptureError",
           "TlsConnection", "TlsProblem", "NotMcbp", "direction_verdict", "chain_search"]
