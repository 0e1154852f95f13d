"""Which frames of a capture carry what, for evidence bundles: every message of the
connections involved with its stream offset and frames, each frame's place in its stream,
the context a finding needs, and each frame with customer data replaced.

Frames are placed in their stream by their own TCP sequence numbers (the reassembly's
offsets are per message); a frame's payload byte stays in a redacted frame only when it is a
byte of a decoded message that carries no customer data (:mod:`.redact`) and equals what the
reassembly saw at that stream offset, the header of a message cut by a gap, or the header
that broke framing; a byte of a document key or of a whole message's document value becomes
the byte of its pseudonym. Everything else (values of messages cut short, partial messages,
skipped bytes, segments the reassembly did not place) becomes ``x``, except the TLS record
header (5 bytes: content type, version, length; no customer data) that starts the frame on
which a connection was recognised as TLS by its first bytes, so that the redacted capture is
recognised the same way. Frames are decoded through tunnels as the reassembly decodes them.
A packet reassembled from IP fragments is placed at its last fragment and a bundle keeps all
of its fragments (:meth:`CaptureIndex.with_fragments`); each fragment is redacted as its
part of the packet's payload would be, headers kept (a fragment of a fragment: every byte it
carries becomes ``x``).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict

from ..analysis.findings import Finding
from ..capture.fragments import Defragmenter
from ..capture.order import TimeOrder
from ..capture.packets import Decoder, decode_packet
from ..capture.fileset import open_source
from ..capture.readers import CaptureError
from ..codec.header import peek
from ..protocol import (HEADER_SIZE, NEGOTIATION_OPCODES, REQUEST_MAGICS, STREAM_OPENING_OPCODES,
                        opcode_code)
from ..reassembly.connections import ConnectionOpened
from ..reassembly.framing import LostPdu, Pdu, Resync
from ..reassembly.pdus import (Options, Summary, TlsConnection, direction_verdict,
                               iter_events)
from ..reassembly.tcp import ACK, FIN, MASK, RST, SYN
from .markdown import finding_frames
from .redact import PLACEHOLDER, Pseudonyms, document_ranges, key_range, value_stand_in

WHOLE_CAPTURE_LIMIT = 20_000   # frames: a larger capture is never copied whole into a bundle
TLS_HEADER_SIZE = 5            # a TLS record header: content type, version, length


@dataclasses.dataclass
class _Msg:
    conn: int
    direction: int
    offset: int
    end: int
    frames: tuple[int, ...]
    frame: int
    magic: int
    opcode: int
    vbucket: int | None
    opaque: int


_MARKER = opcode_code("DcpSnapshotMarker")


class CaptureIndex:
    """What the bundle needs to know about the capture: messages, connections, frames;
    with ``redact`` the stream bytes that are clear of customer data too, and the document
    keys with the pseudonyms that stand for them (``pseudonyms``)."""

    def __init__(self, path: str, findings: list[Finding], options: Options | None,
                 redact: bool = False, pseudonyms: Pseudonyms | None = None):
        self.path, self.options, self.redact = path, options, redact
        self.pseudonyms = pseudonyms if redact else None
        self.vxlan_ports = options.vxlan_ports if options else ()
        self.decoder = Decoder(self.vxlan_ports)      # one frame at a time: no reassembly
        needed = {n for f in findings for n in finding_frames(f) + list(f.context)}
        conns = {f.connection for f in findings if f.connection is not None}
        self._read(conns, needed)
        cited = set(self.conn_of.values()) - conns
        if cited:                       # findings cite other connections: read them too
            self._read(conns | cited, needed)

    def read_every_connection(self, needed: set[int]) -> None:
        """Index every connection of the capture (a selection of the whole capture keeps
        frames of connections no finding names)."""
        self._read(set(self.opened), needed)

    def _read(self, conns: set[int], needed: set[int]) -> None:
        self.conns = conns
        self.opened: dict[int, ConnectionOpened] = {}
        self.msgs: dict[tuple[int, int], list[_Msg]] = defaultdict(list)
        # stream bytes that may stay when redacting: (start, end, the bytes or None), and for
        # a document key (start, end, its bytes, its pseudonym)
        self.clear: dict[tuple[int, int], list[tuple]] = defaultdict(list)
        self.resyncs: dict[tuple[int, int], list[Resync]] = defaultdict(list)
        self.handshake: dict[int, list[int]] = defaultdict(list)
        self.frame_ranges: dict[int, tuple[int, int, int, int]] = {}   # frame -> conn, dir, off, len
        self.runs: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        self.conn_frames: dict[int, list[int]] = defaultdict(list)      # every frame of a conn
        self.conn_of: dict[int, int] = {}                               # needed frame -> conn
        self.fragments: dict[int, tuple] = {}       # last fragment's frame -> every fragment's
        # redact: fragment frame -> (last fragment's frame, offset, its bytes), and the last
        # fragment's frame -> (the reassembled bytes from the fragments, payload position)
        self.fragment_of: dict[int, tuple] = {}
        self.reassembled: dict[int, tuple[bytes, int]] = {}
        self.tls_starts: dict[int, set] = {}   # frame of a TLS record header -> endpoints
        self.total_frames = 0
        self._by_conn: dict[int, tuple[list[_Msg], list[int]]] = {}
        self._events()
        self._frames(needed)

    def _events(self) -> None:
        conns = self.conns
        summary = Summary()
        try:
            for ev in iter_events(self.path, self.options, summary):
                kind = type(ev)
                if kind is ConnectionOpened:
                    self.opened[ev.conn] = ev
                elif kind is TlsConnection and not ev.by_port:
                    self.tls_starts[ev.frame] = {(ev.client, ev.server), (ev.server, ev.client)}
                elif kind not in (Pdu, LostPdu, Resync) or ev.conn not in conns:
                    continue
                elif kind is Pdu:
                    self._pdu(ev)
                elif kind is LostPdu:
                    if self.redact:             # its header stays; its body is unknown
                        self.clear[(ev.conn, ev.direction)].append(
                            (ev.offset, ev.offset + HEADER_SIZE, None))
                else:
                    self.resyncs[(ev.conn, ev.frame)].append(ev)
                    if ev.reason == "garbage" and self.redact:   # the header that broke framing
                        # right after the last message (the skipped bytes may span gaps)
                        lo = ev.offset - ev.skipped
                        stream = self.msgs.get((ev.conn, ev.direction))
                        if stream and stream[-1].end < lo:
                            lo = stream[-1].end
                        self.clear[(ev.conn, ev.direction)].append(
                            (lo, min(lo + HEADER_SIZE, ev.offset), None))
        except CaptureError:
            pass
        self.tls_randoms = summary.tls_randoms          # decrypted connections
        self.file_keylog = summary.file_keylog          # the capture's own key log lines
        for key in [k for k in self.clear if k[0] in self.tls_randoms]:
            del self.clear[key]         # their payload is ciphertext: none of it stays clear
        for spans in self.clear.values():
            spans.sort(key=lambda s: s[0])

    def _pdu(self, ev: Pdu) -> None:
        d = ev.data
        h = peek(d)
        key = (ev.conn, ev.direction)
        vb = h.specific if h.magic in REQUEST_MAGICS else None
        self.msgs[key].append(_Msg(ev.conn, ev.direction, ev.offset, ev.offset + len(d),
                                   ev.frames, ev.frame, h.magic, h.opcode, vb, h.opaque))
        if not self.redact:
            return
        pos = 0
        kr = key_range(d) if self.pseudonyms is not None else None
        stand_in = value_stand_in(d, self.pseudonyms)
        for a, b in document_ranges(d) + [(len(d), len(d))]:
            if a > pos:
                self.clear[key].append((ev.offset + pos, ev.offset + a, d[pos:a]))
            if kr is not None and a == kr[0]:       # the key: its pseudonym
                k_end = min(kr[1], b)
                self.clear[key].append((ev.offset + a, ev.offset + k_end, d[a:k_end],
                                        self.pseudonyms(d[kr[0]:kr[1]])[:k_end - a]))
            if stand_in is not None and a == stand_in[0]:   # the value: its pseudonym
                self.clear[key].append((ev.offset + a, ev.offset + stand_in[1], d[a:b],
                                        stand_in[2]))
            pos = b

    def _frames(self, needed: set[int]) -> None:
        """Stream offset of every data frame of the connections, their handshake and every
        frame of theirs; the connection of each needed frame."""
        opens = {o.frame: ((o.client, o.server), c) for c, o in sorted(self.opened.items())}
        current: dict[tuple, int] = {}      # endpoints -> the connection open on them
        state: dict[tuple[int, int], list] = {}       # (conn, dir) -> [last_seq, last_off]
        synack_seen: set[int] = set()
        decoder = Decoder(self.vxlan_ports, Defragmenter())
        decode = decoder.decode_frame
        log: dict[int, tuple] = {}          # fragment frame -> (offset, bytes)
        if self.redact:
            decoder.log = []
        try:
            with open_source(self.path) as reader:
                for fr in TimeOrder(reader):            # the order the analysis saw them in
                    self.total_frames = max(self.total_frames, fr.number)
                    if fr.number in opens:
                        ends, c = opens[fr.number]
                        current[ends] = c
                    seg = decode(fr.linktype, fr.data, fr.number, fr.ts_ns)
                    if decoder.log:
                        log.update((n, (off, chunk)) for n, off, chunk in decoder.log)
                        decoder.log.clear()
                    if seg is None:
                        continue
                    if seg.frames:
                        self.fragments[fr.number] = seg.frames
                        if self.redact:
                            self._fragments_of(fr.number, seg, log)
                    a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
                    if (a, b) in current:
                        conn, direction = current[(a, b)], 0
                    elif (b, a) in current:
                        conn, direction = current[(b, a)], 1
                    else:
                        continue
                    if fr.number in needed:
                        self.conn_of[fr.number] = conn
                    if conn in self.conns:
                        self.conn_frames[conn].extend(seg.frames or (fr.number,))
                        self._segment(fr.number, conn, direction, seg, state, synack_seen)
        except CaptureError:
            pass
        for runs in self.runs.values():
            runs.sort()

    def _fragments_of(self, last: int, seg, log: dict) -> None:
        """Remember how the fragments of the packet completed at frame ``last`` make it up
        (only those read from frames of their own)."""
        parts = [(n,) + log.pop(n) for n in seg.frames if n in log]
        if not parts:
            return
        packet = bytearray(max(off + len(chunk) for _n, off, chunk in parts))
        for n, off, chunk in reversed(parts):   # the first fragments' bytes win
            packet[off:off + len(chunk)] = chunk
        pos = packet.rfind(seg.payload) if seg.payload else -1
        if pos < 0:
            return
        self.reassembled[last] = (bytes(packet), pos)
        for n, off, chunk in parts:
            self.fragment_of[n] = (last, off, chunk)

    def _segment(self, number, conn, direction, seg, state, synack_seen) -> None:
        flags, seq = seg.flags, seg.seq
        if flags & SYN:
            self.handshake[conn].append(number)
            if flags & ACK:
                synack_seen.add(conn)
                state.setdefault((conn, 0), [seg.ack & MASK, 0])
            state.setdefault((conn, direction), [(seq + 1) & MASK, 0])
            seq = (seq + 1) & MASK
        elif (direction == 0 and conn in synack_seen and not seg.payload
              and not flags & (FIN | RST) and len(self.handshake[conn]) < 3):
            self.handshake[conn].append(number)        # the handshake's final ACK
        if not seg.payload:
            return
        st = state.setdefault((conn, direction), [seq, 0])
        d = (seq - st[0]) & MASK
        if d & 0x80000000:
            d -= 1 << 32
        off = st[1] + d
        st[0], st[1] = seq, off
        self.frame_ranges[number] = (conn, direction, off, len(seg.payload))
        self.runs[(conn, direction)].append((off, off + len(seg.payload), number))

    # -- context -------------------------------------------------------------------------
    def _conn_msgs(self, conn: int) -> tuple[list[_Msg], list[int]]:
        """The connection's messages in completion order, and their completion frames."""
        cached = self._by_conn.get(conn)
        if cached is None:
            msgs = sorted(self.msgs.get((conn, 0), []) + self.msgs.get((conn, 1), []),
                          key=lambda m: (m.frame, m.direction, m.offset))
            cached = self._by_conn[conn] = (msgs, [m.frame for m in msgs])
        return cached

    def involved(self, f: Finding) -> set[int]:
        """The finding's connection and every connection whose frames it cites."""
        conns = {self.conn_of[n] for n in finding_frames(f) + list(f.context)
                 if n in self.conn_of}
        if f.connection is not None:
            conns.add(f.connection)
        return conns

    def context_of(self, f: Finding) -> set[int]:
        """Frames that make a finding readable and reproducible: its own and the frames it
        cites, and on each connection involved the connection's context at the cited
        point; for skipped bytes the frames carrying them and the message before them."""
        keep = set(finding_frames(f)) | set(f.context)
        for conn in self.involved(f):
            if conn == f.connection:
                at, opaque = f.frame, f.opaque
            else:
                at = max(n for n in keep if self.conn_of.get(n) == conn)
                opaque = None
            keep |= self._conn_context(conn, at if at is not None else 0, f.vbucket, opaque)
        for ev in self.resyncs.get((f.connection, f.frame), ()):
            lo = ev.offset - ev.skipped
            for off, end, n in self.runs.get((f.connection, ev.direction), ()):
                if off < ev.offset and end > lo:
                    keep.add(n)
            stream = self.msgs.get((f.connection, ev.direction), [])
            i = bisect.bisect_right([m.end for m in stream], lo) - 1
            if i >= 0:                      # the message the skipped bytes followed
                keep |= set(stream[i].frames)
        return keep

    def _conn_context(self, conn: int, at: int, vbucket: int | None,
                      opaque: int | None) -> set[int]:
        """On one connection, before frame ``at``: the handshake, the negotiation (HELLO,
        SelectBucket, DcpOpen, DcpControl) with replies; for a vbucket its add-stream and
        stream request with replies and the last snapshot marker, and the reply to the
        offending request; without a vbucket the request a response at ``at`` answers."""
        keep = set(self.handshake.get(conn, ()))
        msgs, frames = self._conn_msgs(conn)
        first_after = bisect.bisect_right(frames, at)
        for m in msgs[:first_after]:
            if m.opcode in NEGOTIATION_OPCODES and m.magic in REQUEST_MAGICS:
                keep |= set(m.frames) | self._reply_frames(msgs, frames, m)
        if vbucket is not None:
            wanted = {*STREAM_OPENING_OPCODES, _MARKER}    # requests that set up the stream
            for m in reversed(msgs[:first_after]):
                if not wanted:
                    break
                if m.opcode in wanted and m.magic in REQUEST_MAGICS and m.vbucket == vbucket:
                    wanted.discard(m.opcode)
                    keep |= set(m.frames)
                    if m.opcode != _MARKER:
                        keep |= self._reply_frames(msgs, frames, m)
            for m in msgs[bisect.bisect_left(frames, at):first_after]:   # the offending request
                if m.magic in REQUEST_MAGICS and m.vbucket == vbucket and m.opaque == opaque:
                    keep |= self._reply_frames(msgs, frames, m)
        elif opaque is not None:
            req = next((m for m in reversed(msgs[:first_after]) if m.opaque == opaque
                        and m.magic in REQUEST_MAGICS), None)
            if req is not None:
                keep |= set(req.frames)
        return keep

    @staticmethod
    def _reply_frames(msgs: list[_Msg], frames: list[int], req: _Msg) -> set[int]:
        for m in msgs[bisect.bisect_left(frames, req.frame):]:
            if (m.direction != req.direction and m.opaque == req.opaque
                    and m.opcode == req.opcode and m.magic not in REQUEST_MAGICS):
                return set(m.frames)
        return set()

    def widened(self, f: Finding, step: int) -> set[int]:
        """Frames of a selection step beyond the context (see :data:`STEPS`)."""
        if step == 1 or step == 2:
            last = max(finding_frames(f), default=None)
            limit = last if step == 1 and last is not None else self.total_frames
            return {n for c in self.involved(f) for n in self.conn_frames.get(c, ())
                    if n <= limit}
        if self.total_frames <= WHOLE_CAPTURE_LIMIT:
            return set(range(1, self.total_frames + 1))
        return set()

    def with_fragments(self, keep: set[int]) -> set[int]:
        """``keep`` with every fragment of the reassembled packets it holds."""
        return keep.union(*(self.fragments[n] for n in keep if n in self.fragments))

    def alignment_cuts(self, keep: set[int]) -> dict[int, int]:
        """Frames that start a kept stretch of a stream in the middle of a message, with the
        number of leading payload bytes (that message's tail) to drop so that a dissector
        reading the trimmed capture starts on a message boundary."""
        cuts: dict[int, int] = {}
        per_stream: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        for n in keep:
            info = self.frame_ranges.get(n)
            if info is not None:
                per_stream[info[:2]].append((info[2], info[2] + info[3], n))
        for key, ranges in per_stream.items():
            msgs = self.msgs.get(key, [])
            starts = [m.offset for m in msgs]
            covered = None
            for off, end, n in sorted(ranges):
                if covered is None or covered < off:
                    i = bisect.bisect_right(starts, off) - 1
                    if i >= 0 and msgs[i].offset < off < msgs[i].end < end:
                        cuts[n] = msgs[i].end - off
                covered = end if covered is None else max(covered, end)
        return cuts

    def redacted(self, fr) -> bytes:
        """The frame with every TCP payload byte that is not known to be clear of customer
        data replaced by ``x`` (see the module docstring)."""
        decoder = self.decoder
        fragments = decoder.fragments
        seg = decoder.decode(fr.linktype, fr.data)
        if seg is None and decoder.fragments != fragments:      # an IP fragment
            return self._redacted_fragment(fr, decoder.last_fragment)
        if seg is None or not seg.payload:
            return fr.data
        payload = seg.payload
        pos = payload_pos(fr.linktype, fr.data, payload, decoder.decode)
        if pos is None:                 # the payload cannot be located: drop the frame's bytes
            return fr.data[:len(fr.data) - len(payload)] + PLACEHOLDER * len(payload)
        out = self._clear_bytes(fr.number, payload)
        if ((seg.src, seg.sport), (seg.dst, seg.dport)) in self.tls_starts.get(fr.number, ()) \
                and direction_verdict(payload) == "tls":
            out = payload[:TLS_HEADER_SIZE] + out[TLS_HEADER_SIZE:]
        return bytes(fr.data[:pos]) + out + bytes(fr.data[pos + len(payload):])

    def _clear_bytes(self, number: int, payload: bytes) -> bytes:
        """The TCP payload of frame ``number`` with the bytes not known to be clear as ``x``."""
        out = bytearray(PLACEHOLDER * len(payload))
        info = self.frame_ranges.get(number)
        if info is not None:
            conn, direction, off, length = info
            spans = self.clear.get((conn, direction), [])
            # spans do not overlap: only the last one starting before the frame can reach it
            i = max(0, bisect.bisect_right(spans, off, key=lambda s: s[0]) - 1)
            while i < len(spans) and spans[i][0] < off + length:
                a, b, expected, *stand_in = spans[i]
                lo, hi = max(a, off), min(b, off + length)
                if hi > lo:
                    got = payload[lo - off:hi - off]
                    if expected is None or expected[lo - a:hi - a] == got:
                        out[lo - off:hi - off] = stand_in[0][lo - a:hi - a] if stand_in else got
                i += 1
        return bytes(out)

    def _redacted_fragment(self, fr, chunk: bytes) -> bytes:
        """A fragment frame: its share of the reassembled packet, redacted as the packet's
        payload is; all of its bytes as ``x`` when it is not known how it makes it up."""
        at = fr.data.rfind(chunk) if chunk else -1
        if at < 0:
            return fr.data
        known = self.fragment_of.get(fr.number)
        if known is None or known[2] != chunk:
            return fr.data[:at] + PLACEHOLDER * len(chunk) + fr.data[at + len(chunk):]
        last, off, _ = known
        packet, pos = self.reassembled[last]
        size = self.frame_ranges[last][3] if last in self.frame_ranges else len(packet) - pos
        payload = packet[pos:pos + size]
        clear = packet[:pos] + self._clear_bytes(last, payload) + packet[pos + size:]
        return fr.data[:at] + clear[off:off + len(chunk)] + fr.data[at + len(chunk):]


def payload_pos(linktype: int, data: bytes, payload: bytes, decode=decode_packet) -> int | None:
    """Where the TCP payload starts in the frame (verified by decoding a modified copy with
    ``decode``)."""
    pos = len(data)
    while True:
        pos = data.rfind(payload, 0, pos + len(payload) - 1)
        if pos < 0:
            return None
        probe = bytearray(data)
        probe[pos] ^= 0xFF
        seg = decode(linktype, bytes(probe))
        if seg is not None and seg.payload[:1] == bytes([payload[0] ^ 0xFF]) \
                and seg.payload[1:] == payload[1:]:
            return pos
        if pos == 0:
            return None
