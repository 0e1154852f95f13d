"""Evidence bundles: a trimmed capture with the offending frames and their context, a
Markdown report whose frame numbers refer to it, and a README with the tshark command.

Kept frames are written unchanged (link type, timestamps at nanosecond resolution,
original lengths) with two exceptions. A frame that starts a kept stretch of a stream in
the middle of a message (its start was not kept) loses those leading payload bytes, with
its TCP sequence number and IP length adjusted, so that Wireshark starts on a message
boundary. With ``redact=True`` the keys and values of the requests whose opcode carries
customer data (``Opcode.document`` in the protocol tables: mutation, deletion, expiration,
prepare, commit, abort, cache transfer) are overwritten by ``x`` bytes of the same length,
and so are the bodies of messages cut by a capture gap and bytes skipped while
resynchronising (except the first 24 bytes after garbage: the header that broke framing);
MCBP headers, extras (seqnos, CAS) and lengths stay as captured. TCP checksums are not
recomputed after either change (Wireshark does not verify them by default); the IPv4
header checksum of a shortened frame is.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import os
import re
import shlex
import struct
from collections import defaultdict
from pathlib import Path

from ..analysis.findings import Finding
from ..capture.packets import decode_packet
from ..capture.readers import CaptureError, open_capture
from ..codec import Message, decode
from ..codec.header import peek
from ..protocol import DCP_PORTS, DOCUMENT_OPCODES, HEADER_SIZE, REQUEST_MAGICS, opcode_code
from ..reassembly.connections import ConnectionOpened
from ..reassembly.framing import LostPdu, Pdu, Resync
from ..reassembly.pdus import iter_events
from ..reassembly.tcp import ACK, FIN, MASK, RST, SYN
from ..samples.pcapwrite import PcapngWriter, PcapWriter
from .markdown import finding_frames, frame_filter, markdown_report

MAX_PER_RULE = 25          # findings of one rule carried into a bundle


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


# The requests that set up a stream (kept as context of a finding on a vbucket).
_OPEN = opcode_code("DcpOpen")
_MARKER = opcode_code("DcpSnapshotMarker")
_STREAM_CONTEXT = frozenset({opcode_code("DcpAddStream"), opcode_code("DcpStreamReq"), _MARKER})


def _document(data: bytes) -> Message | None:
    """The decoded message when ``data`` is a request whose key and value carry customer
    data (``Opcode.document``), else None."""
    if len(data) < HEADER_SIZE:
        return None
    h = peek(data)
    if h.magic not in REQUEST_MAGICS or h.opcode not in DOCUMENT_OPCODES:
        return None
    return decode(data)


def document_ranges(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges (within one PDU) of the document key and value of a data message, as the
    decoder sliced them."""
    m = _document(data)
    if m is None:
        return []
    return [(a, b) for a, b in (m.key_range, m.value_range) if b > a]


def redact_pdu(data: bytes | None) -> bytes | None:
    """The PDU with its document key and value replaced by ``x`` bytes."""
    if not data:
        return data
    out = bytearray(data)
    for a, b in document_ranges(data):
        out[a:b] = b"x" * (b - a)
    return bytes(out)


def _scrub(text: str, secrets) -> str:
    for s in secrets:
        text = re.sub(r"(?<!\w)" + re.escape(s) + r"(?!\w)", "x" * len(s), text)
    return text


def redact_finding(f: Finding) -> Finding:
    """The finding with its PDU redacted and its document key scrubbed from the message
    and the decoded fields."""
    m = _document(f.pdu) if f.pdu else None
    if m is None:
        return f
    key = m.key
    secrets = {key.decode("utf-8", "replace"), key.decode("utf-8", "backslashreplace"),
               key.decode("latin-1")} - {""}
    fields = {k: _scrub(v, secrets) if isinstance(v, str) else v for k, v in f.fields.items()}
    return dataclasses.replace(f, pdu=redact_pdu(f.pdu), message=_scrub(f.message, secrets),
                               fields=fields)


class _Capture:
    """What the bundle needs to know about the capture: messages, connections, frames."""

    def __init__(self, path: str, conns: set[int]):
        self.opened: dict[int, ConnectionOpened] = {}
        self.msgs: dict[tuple[int, int], list[_Msg]] = defaultdict(list)
        self.redact: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        self.resyncs: dict[tuple[int, int], list[Resync]] = defaultdict(list)
        self.handshake: dict[int, list[int]] = defaultdict(list)
        self.frame_ranges: dict[int, tuple[int, int, int, int]] = {}   # frame -> conn, dir, off, len
        self.runs: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        self._by_conn: dict[int, tuple[list[_Msg], list[int]]] = {}
        self._events(path, conns)
        self._frames(path, conns)

    def _events(self, path: str, conns: set[int]) -> None:
        try:
            for ev in iter_events(path):
                kind = type(ev)
                if kind is ConnectionOpened:
                    self.opened[ev.conn] = ev
                elif ev.__class__ in (Pdu, LostPdu, Resync) and ev.conn not in conns:
                    continue
                elif kind is Pdu:
                    d = ev.data
                    h = peek(d)
                    vb = h.specific if h.magic in REQUEST_MAGICS else None
                    self.msgs[(ev.conn, ev.direction)].append(_Msg(
                        ev.conn, ev.direction, ev.offset, ev.offset + len(d), ev.frames, ev.frame,
                        h.magic, h.opcode, vb, h.opaque))
                    for a, b in document_ranges(d):
                        self.redact[(ev.conn, ev.direction)].append((ev.offset + a, ev.offset + b))
                elif kind is LostPdu:
                    end = ev.offset + max(ev.have, ev.need)
                    if end > ev.offset + HEADER_SIZE:
                        self.redact[(ev.conn, ev.direction)].append((ev.offset + HEADER_SIZE, end))
                elif kind is Resync:
                    self.resyncs[(ev.conn, ev.frame)].append(ev)
                    # skipped bytes may be the rest of a cut message; after garbage the
                    # offending header (24 bytes) is kept as evidence
                    lo = ev.offset - ev.skipped + (HEADER_SIZE if ev.reason == "garbage" else 0)
                    if ev.offset > lo:
                        self.redact[(ev.conn, ev.direction)].append((lo, ev.offset))
        except CaptureError:
            pass
        for ranges in self.redact.values():
            ranges.sort()

    def _frames(self, path: str, conns: set[int]) -> None:
        """Stream offset of every data frame of the connections, and handshake frames."""
        by_ends: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for c in sorted(conns):
            o = self.opened.get(c)
            if o is not None:
                by_ends[(o.client, o.server)].append((o.frame, c))
        state: dict[tuple[int, int], list] = {}       # (conn, dir) -> [last_seq, last_off]
        synack_seen: set[int] = set()
        try:
            with open_capture(path) as reader:
                for fr in reader:
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
                    self._segment(fr.number, conn, direction, seg, state, synack_seen)
        except CaptureError:
            pass
        for (conn, direction), runs in self.runs.items():
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

    def context_of(self, f: Finding) -> set[int]:
        """Frames that make a finding readable: its own, the connection's handshake and
        DCP open, and for a vbucket the add-stream / stream request with its response and
        the snapshot marker before it; for a response the request it answers; for skipped
        bytes the frames carrying them and the message before them."""
        keep = set(finding_frames(f)) | set(f.context)
        conn = f.connection
        if conn is None:
            return keep
        keep |= set(self.handshake.get(conn, ()))
        msgs, frames = self._conn_msgs(conn)
        at = f.frame if f.frame is not None else 0
        first_after = bisect.bisect_left(frames, at)        # messages [0, first_after) precede
        opened = next((m for m in msgs if m.opcode == _OPEN and m.magic in REQUEST_MAGICS), None)
        if opened is not None:
            keep |= set(opened.frames) | self._reply_frames(msgs, frames, opened)
        if f.vbucket is not None:
            wanted = set(_STREAM_CONTEXT)
            for m in reversed(msgs[:first_after]):
                if not wanted:
                    break
                if m.opcode in wanted and m.magic in REQUEST_MAGICS and m.vbucket == f.vbucket:
                    wanted.discard(m.opcode)
                    keep |= set(m.frames)
                    if m.opcode != _MARKER:
                        keep |= self._reply_frames(msgs, frames, m)
            i = first_after
            while i < len(msgs) and msgs[i].frame == at:      # the offending request itself
                m = msgs[i]
                if m.magic in REQUEST_MAGICS and m.vbucket == f.vbucket and m.opaque == f.opaque:
                    keep |= self._reply_frames(msgs, frames, m)
                i += 1
        elif f.opaque is not None:
            req = next((m for m in reversed(msgs[:first_after]) if m.opaque == f.opaque
                        and m.magic in REQUEST_MAGICS), None)
            if req is not None:
                keep |= set(req.frames)
        for ev in self.resyncs.get((conn, f.frame), ()):
            lo = ev.offset - ev.skipped
            for off, end, n in self.runs.get((conn, ev.direction), ()):
                if off < ev.offset and end > lo:
                    keep.add(n)
            stream = self.msgs.get((conn, ev.direction), [])
            i = bisect.bisect_right([m.end for m in stream], lo) - 1
            if i >= 0:                      # the message the skipped bytes followed
                keep |= set(stream[i].frames)
        return keep

    @staticmethod
    def _reply_frames(msgs: list[_Msg], frames: list[int], req: _Msg) -> set[int]:
        for m in msgs[bisect.bisect_left(frames, req.frame):]:
            if (m.direction != req.direction and m.opaque == req.opaque
                    and m.opcode == req.opcode and m.magic not in REQUEST_MAGICS):
                return set(m.frames)
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


def _redacted_frame(fr, info, ranges) -> bytes:
    _conn, _direction, off, length = info
    end = off + length
    i = max(0, bisect.bisect_right(ranges, (off, off)) - 1)
    cuts = []
    while i < len(ranges) and ranges[i][0] < end:
        a, b = ranges[i]
        if b > off:
            cuts.append((max(a, off) - off, min(b, end) - off))
        i += 1
    if not cuts:
        return fr.data
    seg = decode_packet(fr.linktype, fr.data)
    pos = _payload_pos(fr.linktype, fr.data, seg.payload) if seg is not None and seg.payload else None
    if pos is None:
        return fr.data
    out = bytearray(fr.data)
    for a, b in cuts:
        a, b = min(a, len(seg.payload)), min(b, len(seg.payload))
        out[pos + a:pos + b] = b"x" * (b - a)
    return bytes(out)


def tshark_command(pcap_name: str, frames, ports=DCP_PORTS) -> str:
    decode_as = " ".join(f"-d tcp.port=={p},couchbase" for p in sorted(set(ports)))
    return (f"tshark -r {shlex.quote(pcap_name)} -o tcp.reassemble_out_of_order:TRUE "
            f"-o tcp.analyze_sequence_numbers:FALSE {decode_as} -V "
            f"-Y {shlex.quote(frame_filter(frames))}")


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


def write_evidence(path, findings: list[Finding], summary, out_dir, redact: bool = False) -> Path:
    """Write ``evidence.pcap`` (``evidence.pcapng`` when the kept frames use several link
    types), ``report.md``, ``frames.tsv`` and ``README.txt`` into ``out_dir``; return
    ``out_dir``."""
    path = str(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = select_findings(findings)
    conns = {f.connection for f in chosen if f.connection is not None}
    cap = _Capture(path, conns)
    keep: set[int] = set()
    for f in chosen:
        keep |= cap.context_of(f)
    cuts = cap.alignment_cuts(keep)

    frames = []
    try:
        with open_capture(path) as reader:
            for fr in reader:
                if fr.number in keep:
                    frames.append(fr)
    except CaptureError:
        pass
    linktypes = sorted({fr.linktype for fr in frames}) or [1]
    name = "evidence.pcap" if len(linktypes) == 1 else "evidence.pcapng"
    pcap = out / name
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
            data = fr.data
            info = cap.frame_ranges.get(fr.number)
            if redact and info is not None:
                data = _redacted_frame(fr, info, cap.redact.get(info[:2], []))
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

    offending = sorted({frame_map[n] for f in chosen for n in finding_frames(f) if n in frame_map})
    ports = {cap.opened[c].server[1] for c in conns if c in cap.opened} or {11210}
    command = tshark_command(name, offending or sorted(frame_map.values())[:1], ports | {11209})
    connections = {c: f"{o.client[0]}:{o.client[1]} → {o.server[0]}:{o.server[1]}"
                   for c, o in cap.opened.items() if c in conns}
    notes = [f"Evidence capture `{name}`: {len(frame_map)} of {summary.frames} frames of "
             f"`{Path(path).name}` (the offending frames, their connection's handshake, DCP "
             "open, stream request/response and preceding snapshot marker). Frame numbers "
             "below refer to it; the original numbers are given alongside.",
             f"Show the offending PDUs:\n\n```\n{command}\n```",
             "TCP sequence analysis is switched off in that command because the trimmed "
             "capture has holes in each stream."]
    if cuts:
        shown_cuts = ", ".join(f"{frame_map[n]} ({c} bytes)" for n, c in sorted(cuts.items())
                               if n in frame_map)
        notes.append("Frames that start in the middle of a message (whose start is not in "
                     "this capture) lost those leading payload bytes, so that Wireshark "
                     "starts on a message boundary; their TCP sequence number and IP length "
                     f"were adjusted: {shown_cuts}. All other frames are as captured.")
    if redact:
        notes.append("**Redaction applied**: document keys and values of data messages are "
                     "replaced by `x` bytes of the same length in the capture and in the "
                     "hexdumps below; headers, extras (seqnos, CAS) and lengths are unchanged; "
                     "TCP/IP checksums were not recomputed.")
    shown = chosen
    if redact:
        shown = [redact_finding(f) for f in chosen]
    omitted = len(findings) - len(chosen)
    if omitted:
        notes.append(f"{omitted} further findings (beyond {MAX_PER_RULE} per rule) are not "
                     "included; run dcpdissect on the original capture to see them.")
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
        f"{name}     {len(frame_map)} frames, SHA-256 {digest}",
        "report.md        findings, decoded fields, hexdumps, Wireshark filters",
        "frames.tsv       evidence frame number -> frame number in the original capture",
        "",
        "Show the offending PDUs with Wireshark's dissector:",
        "",
        f"  {command}",
        "",
        "Frame numbers in report.md refer to the evidence capture.",
        (f"{len(cuts)} frames start in the middle of a message whose start is not kept: those "
         "leading payload bytes were removed (TCP seq and IP length adjusted; see cut_bytes "
         "in frames.tsv)." if cuts else "Every frame is kept whole."),
        "Redaction: " + ("applied (document keys and values replaced by 'x' bytes; headers, "
                         "lengths and seqnos unchanged; TCP/IP checksums not recomputed)."
                         if redact else "none."),
        "",
    ]
    (out / "README.txt").write_text("\n".join(readme), encoding="utf-8")
    return out
