"""Evidence bundles: a trimmed capture that reproduces its findings, a Markdown report and
a README whose frame numbers refer to it, and the Wireshark plugin with the tshark command
that loads it.

Frames are chosen in widening steps until ``dcpdissect analyze`` on the trimmed capture
reports every bundled finding again (same rule, at the mapped frame): first each finding's
frames and context (the handshake, HELLO, SelectBucket, DcpOpen and DcpControl with their
replies, the vbucket's add-stream and stream request with the response and failover log,
the preceding snapshot marker; the same on every other connection the finding cites, such
as the previous connection of a resume), then every frame of the connections involved up
to the finding, then those whole connections, then (for captures of at most
``WHOLE_CAPTURE_LIMIT`` frames) the whole capture. Findings still not reproduced are
listed in the README.

Kept frames are written unchanged (link type, timestamps at nanosecond resolution,
original lengths) with two exceptions. A frame that starts a kept stretch of a stream in
the middle of a message loses those leading payload bytes, with its TCP sequence number
and IP length adjusted, so that Wireshark starts on a message boundary. With
``redact=True`` every payload byte is replaced by ``x`` unless it is a byte of a decoded
message that carries no customer data (:mod:`.redact`) and equals what the reassembly saw
at that stream offset, the header of a message cut by a gap or the header that broke
framing: document keys and values, partial messages, skipped bytes and segments the
reassembly did not place are all covered. TCP checksums are not recomputed after either
change (Wireshark does not verify them by default); the IPv4 header checksum of a
shortened frame is.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import struct
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from ..analysis.findings import Finding
from ..capture.packets import decode_packet
from ..capture.readers import CaptureError, open_capture
from ..codec.header import peek
from ..protocol import DCP_PORTS, HEADER_SIZE, REQUEST_MAGICS, opcode_code
from ..reassembly.connections import ConnectionOpened
from ..reassembly.framing import LostPdu, Pdu, Resync
from ..reassembly.pdus import Options, iter_events
from ..reassembly.tcp import ACK, FIN, MASK, RST, SYN
from ..samples.pcapwrite import PcapngWriter, PcapWriter
from .markdown import finding_frames, frame_filter, markdown_report
from .redact import PLACEHOLDER, document_ranges, redact_finding, redact_pdu  # noqa: F401

MAX_PER_RULE = 25          # findings of one rule carried into a bundle
WHOLE_CAPTURE_LIMIT = 20_000   # frames: a larger capture is never copied whole into a bundle
PLUGIN = "dcpdissect.lua"
BUNDLE_FILES = ("evidence.pcap", "evidence.pcapng", "report.md", "frames.tsv", "README.txt",
                PLUGIN)
STEPS = ("context", "connections up to the finding", "whole connections", "whole capture")


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


_OPEN = opcode_code("DcpOpen")
_MARKER = opcode_code("DcpSnapshotMarker")
# Requests that set up a stream (kept, with their replies, as context of a vbucket's finding).
_STREAM_CONTEXT = frozenset({opcode_code("DcpAddStream"), opcode_code("DcpStreamReq"), _MARKER})
# Requests that negotiate what the connection may carry (kept, with their replies, always).
_NEGOTIATION = frozenset({opcode_code("Hello"), opcode_code("SelectBucket"), _OPEN,
                          opcode_code("DcpControl")})


@dataclasses.dataclass
class Bundle:
    """What :func:`write_evidence` wrote."""
    path: Path
    pcap: Path | None               # None when there were no findings
    frames: int
    step: str                       # the widest selection step that was needed
    unreproduced: list[Finding]     # bundled findings the trimmed capture does not give back


class _Capture:
    """What the bundle needs to know about the capture: messages, connections, frames."""

    def __init__(self, path: str, findings: list[Finding], options: Options | None):
        self.path, self.options = path, options
        needed = {n for f in findings for n in finding_frames(f) + list(f.context)}
        conns = {f.connection for f in findings if f.connection is not None}
        self._read(conns, needed)
        cited = set(self.conn_of.values()) - conns
        if cited:                       # findings cite other connections: read them too
            self._read(conns | cited, needed)

    def _read(self, conns: set[int], needed: set[int]) -> None:
        self.conns = conns
        self.opened: dict[int, ConnectionOpened] = {}
        self.msgs: dict[tuple[int, int], list[_Msg]] = defaultdict(list)
        # stream bytes that may stay when redacting: (start, end, the bytes or None)
        self.clear: dict[tuple[int, int], list[tuple[int, int, bytes | None]]] = defaultdict(list)
        self.resyncs: dict[tuple[int, int], list[Resync]] = defaultdict(list)
        self.handshake: dict[int, list[int]] = defaultdict(list)
        self.frame_ranges: dict[int, tuple[int, int, int, int]] = {}   # frame -> conn, dir, off, len
        self.runs: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        self.conn_frames: dict[int, list[int]] = defaultdict(list)      # every frame of a conn
        self.conn_of: dict[int, int] = {}                               # needed frame -> conn
        self.total_frames = 0
        self._by_conn: dict[int, tuple[list[_Msg], list[int]]] = {}
        self._events()
        self._frames(needed)

    def _events(self) -> None:
        conns = self.conns
        try:
            for ev in iter_events(self.path, self.options):
                kind = type(ev)
                if kind is ConnectionOpened:
                    self.opened[ev.conn] = ev
                elif kind not in (Pdu, LostPdu, Resync) or ev.conn not in conns:
                    continue
                elif kind is Pdu:
                    self._pdu(ev)
                elif kind is LostPdu:        # its header stays; its body is unknown
                    self.clear[(ev.conn, ev.direction)].append(
                        (ev.offset, ev.offset + HEADER_SIZE, None))
                else:
                    self.resyncs[(ev.conn, ev.frame)].append(ev)
                    if ev.reason == "garbage":      # the header that broke framing stays
                        lo = ev.offset - ev.skipped
                        self.clear[(ev.conn, ev.direction)].append(
                            (lo, min(lo + HEADER_SIZE, ev.offset), None))
        except CaptureError:
            pass
        for spans in self.clear.values():
            spans.sort(key=lambda s: s[0])

    def _pdu(self, ev: Pdu) -> None:
        d = ev.data
        h = peek(d)
        key = (ev.conn, ev.direction)
        vb = h.specific if h.magic in REQUEST_MAGICS else None
        self.msgs[key].append(_Msg(ev.conn, ev.direction, ev.offset, ev.offset + len(d),
                                   ev.frames, ev.frame, h.magic, h.opcode, vb, h.opaque))
        pos = 0
        for a, b in document_ranges(d) + [(len(d), len(d))]:
            if a > pos:
                self.clear[key].append((ev.offset + pos, ev.offset + a, d[pos:a]))
            pos = b

    def _frames(self, needed: set[int]) -> None:
        """Stream offset of every data frame of the connections, their handshake and every
        frame of theirs; the connection of each needed frame."""
        by_ends: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for c, o in sorted(self.opened.items()):
            by_ends[(o.client, o.server)].append((o.frame, c))
        state: dict[tuple[int, int], list] = {}       # (conn, dir) -> [last_seq, last_off]
        synack_seen: set[int] = set()
        try:
            with open_capture(self.path) as reader:
                for fr in reader:
                    self.total_frames = fr.number
                    seg = decode_packet(fr.linktype, fr.data)
                    if seg is None:
                        continue
                    a, b = (seg.src, seg.sport), (seg.dst, seg.dport)
                    if (a, b) in by_ends:
                        cands, direction = by_ends[(a, b)], 0
                    elif (b, a) in by_ends:
                        cands, direction = by_ends[(b, a)], 1
                    else:
                        continue
                    conn = None
                    for start, c in cands:
                        if start <= fr.number:
                            conn = c
                    if conn is None:
                        continue
                    if fr.number in needed:
                        self.conn_of[fr.number] = conn
                    if conn in self.conns:
                        self.conn_frames[conn].append(fr.number)
                        self._segment(fr.number, conn, direction, seg, state, synack_seen)
        except CaptureError:
            pass
        for runs in self.runs.values():
            runs.sort()

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
            if m.opcode in _NEGOTIATION and m.magic in REQUEST_MAGICS:
                keep |= set(m.frames) | self._reply_frames(msgs, frames, m)
        if vbucket is not None:
            wanted = set(_STREAM_CONTEXT)
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
        seg = decode_packet(fr.linktype, fr.data)
        if seg is None or not seg.payload:
            return fr.data
        payload = seg.payload
        pos = _payload_pos(fr.linktype, fr.data, payload)
        if pos is None:                 # the payload cannot be located: drop the frame's bytes
            return fr.data[:len(fr.data) - len(payload)] + PLACEHOLDER * len(payload)
        out = bytearray(PLACEHOLDER * len(payload))
        info = self.frame_ranges.get(fr.number)
        if info is not None:
            conn, direction, off, length = info
            spans = self.clear.get((conn, direction), [])
            # spans do not overlap: only the last one starting before the frame can reach it
            i = max(0, bisect.bisect_right(spans, off, key=lambda s: s[0]) - 1)
            while i < len(spans) and spans[i][0] < off + length:
                a, b, expected = spans[i]
                lo, hi = max(a, off), min(b, off + length)
                if hi > lo:
                    got = payload[lo - off:hi - off]
                    if expected is None or expected[lo - a:hi - a] == got:
                        out[lo - off:hi - off] = got
                i += 1
        return bytes(fr.data[:pos]) + bytes(out) + bytes(fr.data[pos + len(payload):])


def _payload_pos(linktype: int, data: bytes, payload: bytes) -> int | None:
    """Where the TCP payload starts in the frame (verified by decoding a modified copy)."""
    pos = len(data)
    while True:
        pos = data.rfind(payload, 0, pos + len(payload) - 1)
        if pos < 0:
            return None
        probe = bytearray(data)
        probe[pos] ^= 0xFF
        seg = decode_packet(linktype, bytes(probe))
        if seg is not None and seg.payload[:1] == bytes([payload[0] ^ 0xFF]) \
                and seg.payload[1:] == payload[1:]:
            return pos
        if pos == 0:
            return None


def _cut_payload(linktype: int, data: bytes, cut: int) -> bytes | None:
    """The frame without the first ``cut`` bytes of its TCP payload: the TCP sequence
    number advances by ``cut`` and the IP length shrinks (IPv4 header checksum
    recomputed). None when the headers cannot be located with certainty."""
    seg = decode_packet(linktype, data)
    if seg is None or cut >= len(seg.payload):
        return None
    pos = _payload_pos(linktype, data, seg.payload)
    if pos is None:
        return None
    tcp = data.rfind(struct.pack(">HHI", seg.sport, seg.dport, seg.seq), 0, pos)
    if tcp < 0 or (data[tcp + 12] >> 4) * 4 != pos - tcp:
        return None
    out = bytearray(data[:pos] + data[pos + cut:])
    struct.pack_into(">I", out, tcp + 4, (seg.seq + cut) & MASK)
    for ihl in range(20, 64, 4):
        ip = tcp - ihl
        if ip >= 0 and out[ip] == 0x40 | ihl // 4 and out[ip + 9] == 6:
            total = struct.unpack_from(">H", out, ip + 2)[0]
            if total:
                struct.pack_into(">H", out, ip + 2, total - cut)
            struct.pack_into(">H", out, ip + 10, 0)
            struct.pack_into(">H", out, ip + 10, _ip_checksum(bytes(out[ip:ip + ihl])))
            break
    else:
        ip = tcp - 40
        if not (ip >= 0 and out[ip] >> 4 == 6 and out[ip + 6] == 6):
            return None
        plen = struct.unpack_from(">H", out, ip + 4)[0]
        if plen:
            struct.pack_into(">H", out, ip + 4, plen - cut)
    check = decode_packet(linktype, bytes(out))
    if check is None or check.payload != seg.payload[cut:] or check.seq != (seg.seq + cut) & MASK:
        return None
    return bytes(out)


def _ip_checksum(header: bytes) -> int:
    s = sum(struct.unpack(f">{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tshark_command(pcap_name: str, frames, ports=DCP_PORTS) -> str:
    """The tshark command, run in the bundle's directory, that shows ``frames`` with the
    bundled Lua plugin (which owns ``ports``)."""
    return (f"tshark -r {shlex.quote(pcap_name)} -X lua_script:{PLUGIN} "
            f"-o dcp.tcp_ports:{','.join(map(str, sorted(set(ports))))} "
            "-o tcp.reassemble_out_of_order:TRUE -o tcp.analyze_sequence_numbers:FALSE -V "
            f"-Y {shlex.quote(frame_filter(frames))}")


def analyze_command(pcap_name: str, ports) -> str:
    extra = "".join(f" --port {p}" for p in sorted(set(ports) - set(DCP_PORTS)))
    return f"dcpdissect analyze {shlex.quote(pcap_name)}{extra}"


def select_findings(findings: list[Finding], per_rule: int = MAX_PER_RULE) -> list[Finding]:
    counts: dict[str, int] = defaultdict(int)
    out = []
    for f in sorted(findings, key=Finding.sort_key):
        counts[f.rule] += 1
        if counts[f.rule] <= per_rule:
            out.append(f)
    return out


def check_evidence_dir(out_dir) -> str | None:
    """Why ``out_dir`` cannot take an evidence bundle (``"PATH: reason"``), or None; the
    directory is created when missing. Called before the capture is read."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        return f"{out}: exists and is not a directory"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{out}: cannot create the directory ({exc.strerror or exc})"
    if not os.access(out, os.W_OK | os.X_OK):
        return f"{out}: directory is not writable"
    return None


_FRAME_REF = re.compile(r"\b(frames? )(\d+)((?:–|-)(\d+))?")


def renumber(text: str, frame_map: dict[int, int]) -> str:
    """``text`` with every ``frame N`` (and ``frames N–M``) in the trimmed capture's
    numbers; a frame that is not in it becomes ``original frame N``."""
    def one(n: str) -> str:
        return str(frame_map[int(n)]) if int(n) in frame_map else f"{n} (original)"

    def sub(m: re.Match) -> str:
        word, first, rng, last = m.groups()
        if int(first) not in frame_map and not rng:
            return f"original {word}{first}"
        return word + one(first) + (rng[0] + one(last) if rng else "")
    return _FRAME_REF.sub(sub, text)


def _write_pcap(cap: _Capture, keep: set[int], dest: Path, redact: bool):
    """Write the kept frames to ``dest`` (pcapng when they use several link types; the
    suffix follows). Returns (path, original -> new frame numbers, alignment cuts)."""
    cuts = cap.alignment_cuts(keep)
    frames = []
    try:
        with open_capture(cap.path) as reader:
            frames = [fr for fr in reader if fr.number in keep]
    except CaptureError:
        pass
    linktypes = sorted({fr.linktype for fr in frames}) or [1]
    pcap = dest.with_suffix(".pcap" if len(linktypes) == 1 else ".pcapng")
    frame_map: dict[int, int] = {}
    snaplen = max([262144] + [len(fr.data) for fr in frames])
    with open(pcap, "wb") as fh:
        if len(linktypes) == 1:
            writer = PcapWriter(fh, linktype=linktypes[0], nanosecond=True, snaplen=snaplen)
            write = lambda fr, data, wl: writer.write(fr.ts_ns, data, wirelen=max(wl, len(data)))
        else:
            writer = PcapngWriter(fh)
            iface = {lt: writer.add_interface(lt, tsresol=9, snaplen=snaplen) for lt in linktypes}
            write = lambda fr, data, wl: writer.write(iface[fr.linktype], fr.ts_ns, data,
                                                      wirelen=max(wl, len(data)))
        for new, fr in enumerate(frames, 1):
            data = cap.redacted(fr) if redact else fr.data
            wirelen = fr.wirelen
            if fr.number in cuts:
                shorter = _cut_payload(fr.linktype, data, cuts[fr.number])
                if shorter is None:
                    del cuts[fr.number]
                else:
                    wirelen -= len(data) - len(shorter)
                    data = shorter
            write(fr, data, wirelen)
            frame_map[fr.number] = new
        writer.close()
    return pcap, frame_map, cuts


def reproduces(f: Finding, found: set[tuple[str, int | None]], frame_map) -> bool:
    """Whether a trimmed capture's findings (``(rule, frame)`` pairs) give ``f`` back at
    its mapped frame."""
    if f.frame is None:
        return any(rule == f.rule for rule, _ in found)
    return (f.rule, frame_map.get(f.frame)) in found


def _select(cap: _Capture, chosen: list[Finding], work: Path, widen: bool = True):
    """Widen the selection step by step (:data:`STEPS`) until the trimmed capture
    reproduces every chosen finding. Returns (frames kept, widest step, not reproduced)."""
    from ..analysis.run import analyze_file
    keep: set[int] = set()
    for f in chosen:
        keep |= cap.context_of(f)
    missing, step = list(chosen), 0
    while True:
        pcap, frame_map, _ = _write_pcap(cap, keep, work / "trial", redact=False)
        found, _ = analyze_file(str(pcap), cap.options)
        pcap.unlink()
        got = {(g.rule, g.frame) for g in found}
        missing = [f for f in missing if not reproduces(f, got, frame_map)]
        if not missing or not widen or step == len(STEPS) - 1:
            return keep, step, missing
        step += 1
        wider = keep.union(*(cap.widened(f, step) for f in missing))
        while wider == keep and step < len(STEPS) - 1:
            step += 1
            wider = keep.union(*(cap.widened(f, step) for f in missing))
        if wider == keep:
            return keep, step, missing
        keep = wider


def write_evidence(path, findings: list[Finding], summary, out_dir, redact: bool = False,
                   options: Options | None = None, widen: bool = True) -> Path:
    """:func:`write_bundle`; returns ``out_dir``."""
    return write_bundle(path, findings, summary, out_dir, redact, options, widen).path


def write_bundle(path, findings: list[Finding], summary, out_dir, redact: bool = False,
                 options: Options | None = None, widen: bool = True) -> Bundle:
    """Write ``evidence.pcap`` (``evidence.pcapng`` when the kept frames use several link
    types), ``report.md``, ``frames.tsv``, ``README.txt`` and the Lua plugin into
    ``out_dir``. Without findings only ``report.md`` and ``README.txt`` are written.
    ``widen=False`` keeps the context step whatever the trimmed capture reproduces."""
    path = str(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in BUNDLE_FILES:
        (out / stale).unlink(missing_ok=True)
    chosen = select_findings(findings)
    if not chosen:
        return _write_empty(path, summary, out)
    cap = _Capture(path, chosen, options)
    with tempfile.TemporaryDirectory(prefix="dcpdissect-evidence-") as work:
        keep, step, missing = _select(cap, chosen, Path(work), widen)
    pcap, frame_map, cuts = _write_pcap(cap, keep, out / "evidence", redact)
    name = pcap.name
    from ..luagen.render import render
    (out / PLUGIN).write_text(render(), encoding="utf-8")

    conns = set().union(*(cap.involved(f) for f in chosen))
    ports = {cap.opened[c].server[1] for c in conns if c in cap.opened} | set(DCP_PORTS)
    offending = sorted({frame_map[n] for f in chosen for n in finding_frames(f) if n in frame_map})
    command = tshark_command(name, offending or sorted(frame_map.values())[:1], ports)
    reanalyze = analyze_command(name, ports)
    connections = {c: f"{o.client[0]}:{o.client[1]} → {o.server[0]}:{o.server[1]}"
                   for c, o in cap.opened.items() if c in conns}
    notes = [f"Evidence capture `{name}`: {len(frame_map)} of {summary.frames} frames of "
             f"`{Path(path).name}` (selection: {STEPS[step]}). Frame numbers below, in the "
             "messages too, refer to it; the original numbers are given alongside.",
             f"Show the offending PDUs with the bundled Wireshark plugin (`{PLUGIN}`), in "
             f"this directory:\n\n```\n{command}\n```",
             f"Analyse the trimmed capture again:\n\n```\n{reanalyze}\n```",
             "TCP sequence analysis is switched off in that command because the trimmed "
             "capture has holes in each stream."]
    if missing:
        notes.append(f"{len(missing)} findings are not reproduced by `{name}`: "
                     + ", ".join(f"{f.rule} (original frame {f.frame})" for f in missing))
    if cuts:
        shown_cuts = ", ".join(f"{frame_map[n]} ({c} bytes)" for n, c in sorted(cuts.items())
                               if n in frame_map)
        notes.append("Frames that start in the middle of a message (whose start is not in "
                     "this capture) lost those leading payload bytes, so that Wireshark "
                     "starts on a message boundary; their TCP sequence number and IP length "
                     f"were adjusted: {shown_cuts}. All other frames are as captured.")
    if redact:
        notes.append("**Redaction applied**: document keys and values (and every byte not "
                     "known to be free of them) are replaced by `x` bytes of the same length "
                     "in the capture, the messages and the hexdumps below; headers, extras "
                     "(seqnos, CAS) and lengths are unchanged; TCP/IP checksums were not "
                     "recomputed.")
    omitted = len(findings) - len(chosen)
    if omitted:
        notes.append(f"{omitted} further findings (beyond {MAX_PER_RULE} per rule) are not "
                     "included; run dcpdissect on the original capture to see them.")
    shown = [dataclasses.replace(f, message=renumber(f.message, frame_map)) for f in chosen]
    if redact:
        shown = [redact_finding(f) for f in shown]
    report = markdown_report(path, shown, summary, frame_map,
                             title=f"dcpdissect evidence: {Path(path).name}",
                             notes=notes, connections=connections)
    (out / "report.md").write_text(report, encoding="utf-8")
    (out / "frames.tsv").write_text(
        "evidence_frame\toriginal_frame\tcut_bytes\n"
        + "".join(f"{new}\t{old}\t{cuts.get(old, 0)}\n" for old, new in sorted(frame_map.items())),
        encoding="utf-8")
    digest = hashlib.sha256(pcap.read_bytes()).hexdigest()
    readme = [
        f"Evidence bundle for {Path(path).name} (written by dcpdissect analyze --evidence)",
        "",
        f"{name:<16} {len(frame_map)} frames, SHA-256 {digest}",
        "report.md        findings, decoded fields, hexdumps, Wireshark filters",
        "frames.tsv       evidence frame number -> frame number in the original capture",
        f"{PLUGIN:<16} the Wireshark plugin (Lua dissector) the command below loads",
        "",
        "Show the offending PDUs, from this directory:",
        "",
        f"  {command}",
        "",
        "Analyse the trimmed capture again (it gives the same findings at these frames):",
        "",
        f"  {reanalyze}",
        "",
        "Frame numbers in report.md refer to the evidence capture.",
        (f"Not reproduced by the trimmed capture: "
         + ", ".join(f"{f.rule} (original frame {f.frame})" for f in missing) + "."
         if missing else f"Every bundled finding is reproduced (selection: {STEPS[step]})."),
        (f"{len(cuts)} frames start in the middle of a message whose start is not kept: those "
         "leading payload bytes were removed (TCP seq and IP length adjusted; see cut_bytes "
         "in frames.tsv)." if cuts else "Every frame is kept whole."),
        "Redaction: " + ("applied (document keys and values replaced by 'x' bytes; headers, "
                         "lengths and seqnos unchanged; TCP/IP checksums not recomputed)."
                         if redact else "none."),
        "",
    ]
    (out / "README.txt").write_text("\n".join(readme), encoding="utf-8")
    return Bundle(out, pcap, len(frame_map), STEPS[step], missing)


def _write_empty(path: str, summary, out: Path) -> Bundle:
    """No findings: a report and a README that say so, and no capture."""
    (out / "report.md").write_text(
        markdown_report(path, [], summary, title=f"dcpdissect evidence: {Path(path).name}",
                        notes=["No findings: no evidence capture was written."]),
        encoding="utf-8")
    (out / "README.txt").write_text(
        f"Evidence bundle for {Path(path).name} (written by dcpdissect analyze --evidence)\n\n"
        "No findings: no evidence capture was written.\n", encoding="utf-8")
    return Bundle(out, None, 0, STEPS[0], [])


class spool_stdin:
    """Context manager for reading a capture from stdin while keeping a copy: inside it,
    ``sys.stdin`` reads through to a temporary file (``path``), removed on exit, so that
    an evidence bundle can read the capture again."""

    def __enter__(self):
        self._file = tempfile.NamedTemporaryFile(prefix="dcpdissect-stdin-", delete=False,
                                                 buffering=0)
        self.path = self._file.name
        self._stdin = sys.stdin
        sys.stdin = _Tee(getattr(sys.stdin, "buffer", sys.stdin), self._file)
        return self

    def __exit__(self, *exc):
        sys.stdin = self._stdin
        self._file.close()
        os.unlink(self.path)
        return False

class _Tee:
    """A binary stream that copies everything read from ``source`` into ``copy``."""

    def __init__(self, source, copy):
        self.source, self.copy = source, copy
        self.buffer = self

    def read(self, n: int = -1) -> bytes:
        data = self.source.read(n)
        self.copy.write(data)
        return data

    def read1(self, n: int = -1) -> bytes:
        data = (getattr(self.source, "read1", None) or self.source.read)(n)
        self.copy.write(data)
        return data

    def fileno(self) -> int:
        return self.source.fileno()
