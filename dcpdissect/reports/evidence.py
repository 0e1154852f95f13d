"""Evidence bundles: a trimmed capture that reproduces its findings, a Markdown report and
a README whose frame numbers refer to it, and the Wireshark plugin with the tshark command
that loads it.

Frames are chosen in widening steps (:data:`STEPS`) until ``dcpdissect analyze`` on the
trimmed capture reports every bundled finding again (same rule, at the mapped frame): first
each finding's frames and context (:meth:`CaptureIndex.context_of`: the handshake, the
negotiation, the vbucket's stream request with its response and failover log, the
preceding marker, on every connection the finding cites, such as the previous connection
of a resume), then every frame of those connections up to the finding, then the whole
connections, then (for a small capture) the whole capture. Findings still not reproduced
are named in the README.

Kept frames are written unchanged (link type, timestamps at nanosecond resolution,
original lengths) with two exceptions. A frame that starts a kept stretch of a stream in
the middle of a message loses those leading payload bytes, with its TCP sequence number
and IP length adjusted, so that Wireshark starts on a message boundary. With
``redact=True`` every payload byte not known to be free of customer data is replaced
(:meth:`CaptureIndex.redacted`). TCP checksums are not recomputed after either change
(Wireshark does not verify them by default); the IPv4 header checksum of a shortened frame
is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import struct
import tempfile
from collections import defaultdict
from pathlib import Path

from ..analysis.findings import Finding
from ..capture.packets import decode_packet
from ..capture.fileset import open_source
from ..capture.readers import NO_LINKTYPE, CaptureError
from ..protocol import DCP_PORTS
from ..reassembly.pdus import Options
from ..reassembly.tcp import MASK
from ..capture.pcapwrite import PcapngWriter, PcapWriter
from .annotate import finding_comments
from .capture_index import CaptureIndex, payload_pos
from .markdown import finding_frames, frame_filter, markdown_report
from .redact import Pseudonyms, document_ranges, redact_finding  # noqa: F401  (document_ranges: API)
from .tls_evidence import KEYLOG, tls_bundle

MAX_PER_RULE = 25          # findings of one rule carried into a bundle
PLUGIN = "dcpdissect.lua"
BUNDLE_FILES = ("evidence.pcap", "evidence.pcapng", "report.md", "frames.tsv", "README.txt",
                PLUGIN, KEYLOG)
STEPS = ("context", "connections up to the finding", "whole connections", "whole capture")


@dataclasses.dataclass
class Bundle:
    """What :func:`write_bundle` wrote."""
    path: Path
    pcap: Path | None               # None when there were no findings
    frames: int
    step: str                       # the widest selection step that was needed
    unreproduced: list[Finding]     # bundled findings the trimmed capture does not give back


def _cut_payload(linktype: int, data: bytes, cut: int, decode=decode_packet) -> bytes | None:
    """The frame without the first ``cut`` bytes of its TCP payload: the TCP sequence
    number advances by ``cut`` and the IP length shrinks (IPv4 header checksum
    recomputed). None when the headers cannot be located with certainty, or belong to a
    tunnel's inner packet (the outer lengths would disagree)."""
    seg = decode(linktype, data)
    if seg is None or seg.tunnel or cut >= len(seg.payload):
        return None
    pos = payload_pos(linktype, data, seg.payload, decode)
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
    check = decode(linktype, bytes(out))
    if check is None or check.payload != seg.payload[cut:] or check.seq != (seg.seq + cut) & MASK:
        return None
    return bytes(out)


def _ip_checksum(header: bytes) -> int:
    s = sum(struct.unpack(f">{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tshark_command(pcap_name: str, frames, ports=DCP_PORTS, vxlan_ports=()) -> str:
    """The tshark command, run in the bundle's directory, that shows ``frames`` with the
    bundled Lua plugin (which owns ``ports``), reading ``vxlan_ports`` as VXLAN."""
    return (f"tshark -r {shlex.quote(pcap_name)} -X lua_script:{PLUGIN} "
            f"-o dcp.tcp_ports:{','.join(map(str, sorted(set(ports))))} "
            + "".join(f"-d udp.port=={p},vxlan " for p in sorted(set(vxlan_ports)))
            +             "-o tcp.reassemble_out_of_order:TRUE -o tcp.analyze_sequence_numbers:FALSE -V "
            f"-Y {shlex.quote(frame_filter(frames))}")


def analyze_command(pcap_name: str, ports, vxlan_ports=()) -> str:
    """The ``dcpdissect analyze`` command that gives the findings back from the bundle."""
    extra = "".join(f" --port {p}" for p in sorted(set(ports) - set(DCP_PORTS)))
    extra += "".join(f" --vxlan-port {p}" for p in sorted(set(vxlan_ports)))
    return f"dcpdissect analyze {shlex.quote(pcap_name)}{extra}"


def select_findings(findings: list[Finding], per_rule: int = MAX_PER_RULE) -> list[Finding]:
    counts: dict[str, int] = defaultdict(int)
    out = []
    for f in sorted(findings, key=Finding.sort_key):
        counts[f.rule] += 1
        if counts[f.rule] <= per_rule:
            out.append(f)
    return out


ARCHIVES = (".zip", ".tar.gz", ".tgz")


def is_archive(target) -> bool:
    """Whether ``--evidence`` names one archive file rather than a directory."""
    return str(target).endswith(ARCHIVES)


def check_evidence_dir(out_dir) -> str | None:
    """Why ``out_dir`` cannot take an evidence bundle (``"PATH: reason"``), or None; the
    directory (an archive's: the one it goes in) is created when missing. Called before the
    capture is read."""
    out = Path(out_dir)
    if is_archive(out):
        if out.is_dir():
            return f"{out}: is a directory"
        out = out.parent
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


def write_pcap(cap: CaptureIndex, keep: set[int], dest: Path, redact: bool, comments=None):
    """Write the kept frames to ``dest`` (pcapng when they use several link types or
    ``comments`` is given; the suffix follows); the fragments of a kept reassembled packet are
    kept too. ``comments(frame_map)`` gives the packet comments by original frame number.
    Returns (path, original -> new frame numbers, alignment cuts)."""
    keep = cap.with_fragments(keep)
    cuts = cap.alignment_cuts(keep)
    frames = []
    try:
        with open_source(cap.path) as reader:
            frames = [fr for fr in reader if fr.number in keep and fr.linktype != NO_LINKTYPE]
    except CaptureError:
        pass
    linktypes = sorted({fr.linktype for fr in frames}) or [1]
    frame_map = {fr.number: new for new, fr in enumerate(frames, 1)}
    notes = comments(frame_map) if comments else {}
    pcap = dest.with_suffix(".pcap" if len(linktypes) == 1 and comments is None else ".pcapng")
    snaplen = max([262144] + [len(fr.data) for fr in frames])
    with open(pcap, "wb") as fh:
        if pcap.suffix == ".pcap":
            writer = PcapWriter(fh, linktype=linktypes[0], nanosecond=True, snaplen=snaplen)
            write = lambda fr, data, wl: writer.write(fr.ts_ns, data, wirelen=max(wl, len(data)))
        else:
            writer = PcapngWriter(fh)
            iface = {lt: writer.add_interface(lt, tsresol=9, snaplen=snaplen) for lt in linktypes}
            write = lambda fr, data, wl: writer.write(iface[fr.linktype], fr.ts_ns, data,
                                                      wirelen=max(wl, len(data)),
                                                      comment=notes.get(fr.number))
        for fr in frames:
            data = cap.redacted(fr) if redact else fr.data
            wirelen = fr.wirelen
            if fr.number in cuts:
                shorter = _cut_payload(fr.linktype, data, cuts[fr.number], cap.decoder.decode)
                if shorter is None:
                    del cuts[fr.number]
                else:
                    wirelen -= len(data) - len(shorter)
                    data = shorter
            write(fr, data, wirelen)
        writer.close()
    return pcap, frame_map, cuts


def reproduces(f: Finding, found: set[tuple[str, int | None]], frame_map) -> bool:
    """Whether a trimmed capture's findings (``(rule, frame)`` pairs) give ``f`` back at
    its mapped frame."""
    if f.frame is None:
        return any(rule == f.rule for rule, _ in found)
    return (f.rule, frame_map.get(f.frame)) in found


def _unreproduced(cap: CaptureIndex, pcap: Path, findings: list[Finding], frame_map,
                  keylog: str) -> list:
    """The ``findings`` that ``analyze`` of the trimmed capture ``pcap`` with the key log
    text ``keylog`` (what the bundle ships) does not give back."""
    from ..analysis.run import analyze_file
    options = dataclasses.replace(cap.options or Options(), tls_keylog=keylog)
    found, _ = analyze_file(str(pcap), options)
    got = {(g.rule, g.frame) for g in found}
    return [f for f in findings if not reproduces(f, got, frame_map)]


def _select(cap: CaptureIndex, chosen: list[Finding], work: Path, widen: bool, keylog: str):
    """Widen the selection step by step (:data:`STEPS`) until the trimmed capture, analysed
    with the key log text ``keylog``, reproduces every chosen finding. Returns (frames kept,
    widest step, not reproduced)."""
    keep: set[int] = set()
    for f in chosen:
        keep |= cap.context_of(f)
    missing, step = list(chosen), 0
    while True:
        pcap, frame_map, _ = write_pcap(cap, keep, work / "trial", redact=False)
        missing = _unreproduced(cap, pcap, missing, frame_map, keylog)
        pcap.unlink()
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


def _anonymous(info):
    """A tar member without the writer's user and group."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_archive(path, findings: list[Finding], summary, archive, redact: bool = False,
                  options: Options | None = None) -> Bundle:
    """:func:`write_bundle` as one file to attach, ``.zip`` or ``.tar.gz`` (``.tgz``), its
    files in a folder named after it. The returned bundle's ``path`` is the archive."""
    archive = Path(archive)
    name = archive_folder(archive)
    with tempfile.TemporaryDirectory(prefix="dcpdissect-bundle-") as work:
        bundle = write_bundle(path, findings, summary, Path(work) / name, redact, options)
        pack(bundle.path, archive)
    return dataclasses.replace(bundle, path=archive,
                               pcap=Path(name) / bundle.pcap.name if bundle.pcap else None)


def archive_folder(archive: Path) -> str:
    """The name of the folder an archive's files are in: the archive's, without suffix."""
    suffix = next(a for a in ARCHIVES if archive.name.endswith(a))
    return archive.name[:-len(suffix)] or "evidence"


def pack(folder: Path, archive: Path) -> None:
    """Write the directory ``folder`` (its files and subdirectories) as the archive
    ``archive`` (``.zip`` or ``.tar.gz``), its files under :func:`archive_folder`."""
    import shutil
    import tarfile
    import zipfile
    name = archive_folder(archive)
    part = archive.with_name(archive.name + ".part")
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
                for f in sorted(folder.rglob("*")):
                    if f.is_file():
                        z.write(f, f"{name}/{f.relative_to(folder).as_posix()}")
        else:
            with tarfile.open(part, "w:gz") as t:
                t.add(folder, name, filter=_anonymous)
        shutil.move(part, archive)
    finally:
        part.unlink(missing_ok=True)


def write_evidence(path, findings: list[Finding], summary, out_dir, redact: bool = False,
                   options: Options | None = None, widen: bool = True) -> Path:
    """:func:`write_bundle`; returns ``out_dir``."""
    return write_bundle(path, findings, summary, out_dir, redact, options, widen).path


def write_bundle(path, findings: list[Finding], summary, out_dir, redact: bool = False,
                 options: Options | None = None, widen: bool = True) -> Bundle:
    """Write ``evidence.pcapng`` (the kept frames, each finding as a packet comment
    ``[rule] message`` on its frames), ``report.md``, ``frames.tsv``, ``README.txt`` and the
    Lua plugin into ``out_dir``. Without findings only ``report.md`` and ``README.txt`` are written.
    ``widen=False`` keeps the context step whatever the trimmed capture reproduces."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in BUNDLE_FILES:
        (out / stale).unlink(missing_ok=True)
    chosen = select_findings(findings)
    if not chosen:
        return _write_empty(path, summary, out)
    pseudonyms = Pseudonyms() if redact else None      # one key per bundle, never written
    cap = CaptureIndex(path, chosen, options, redact, pseudonyms)
    conns = set().union(*(cap.involved(f) for f in chosen))
    keylog = (options.tls_keylog if options else "") + cap.file_keylog
    tls = tls_bundle(cap.tls_randoms, conns, cap.opened, keylog, redact)
    shipped = "".join(line + "\n" for line in tls.lines)     # selected without redaction
    with tempfile.TemporaryDirectory(prefix="dcpdissect-evidence-") as work:
        keep, step, missing = _select(cap, chosen, Path(work), widen, shipped)
    if redact and step == len(STEPS) - 1:
        cap.read_every_connection(keep)     # what of the others' bytes is clear, too

    def comments(frame_map):        # the findings as packet comments, as the report words them
        shown = [dataclasses.replace(f, message=renumber(f.message, frame_map)) for f in chosen]
        return finding_comments([redact_finding(f, pseudonyms) for f in shown] if redact
                                else shown)

    pcap, frame_map, cuts = write_pcap(cap, keep, out / "evidence", redact, comments)
    if redact:              # "reproduced" says what the redacted capture itself gives back
        missing = _unreproduced(cap, pcap, chosen, frame_map, "")     # no key log shipped
    name = pcap.name
    from ..luagen.render import render
    (out / PLUGIN).write_text(render(), encoding="utf-8")

    ports = ({cap.opened[c].server[1] for c in conns if c in cap.opened} - tls.ports
             | set(DCP_PORTS))
    offending = sorted({frame_map[n] for f in chosen for n in finding_frames(f) if n in frame_map})
    command = (tshark_command(name, offending or sorted(frame_map.values())[:1], ports,
                              cap.vxlan_ports) + tls.tshark_args)
    reanalyze = analyze_command(name, ports, cap.vxlan_ports) + tls.analyze_args
    connections = {c: f"{o.client[0]}:{o.client[1]} → {o.server[0]}:{o.server[1]}"
                   for c, o in cap.opened.items() if c in conns}
    notes = [f"Evidence capture `{name}`: {len(frame_map)} of {summary.frames} frames of "
             f"`{Path(str(path)).name}` (selection: {STEPS[step]}). Frame numbers below, in the "
             "messages too, refer to it; the original numbers are given alongside.",
             f"Show the offending PDUs with the bundled Wireshark plugin (`{PLUGIN}`), in "
             f"this directory:\n\n```\n{command}\n```",
             "Each finding is also a packet comment `[rule] message` on its frames of "
             f"`{name}` (`frame.comment`); with the plugin loaded it is an expert info of the "
             "rule's severity (Analyze → Expert Information).",
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
        notes.append("**Redaction applied**: document keys and values are replaced by "
                     "pseudonyms of the same length (from a keyed hash whose key was not "
                     "kept: equal keys or values stay equal, distinct ones distinct, "
                     "collection prefixes, xattr lengths and JSON kept), every byte not "
                     "known to be free of customer data by `x` bytes, in "
                     "the capture, the messages and the hexdumps below; headers, extras "
                     "(seqnos, CAS) and lengths are unchanged; TCP/IP checksums were not "
                     "recomputed. The findings were checked again on the redacted capture.")
    notes += tls.notes(connections)
    omitted = len(findings) - len(chosen)
    if omitted:
        notes.append(f"{omitted} further findings (beyond {MAX_PER_RULE} per rule) are not "
                     "included; run dcpdissect on the original capture to see them.")
    shown = [dataclasses.replace(f, message=renumber(f.message, frame_map)) for f in chosen]
    if redact:
        shown = [redact_finding(f, pseudonyms) for f in shown]
    report = markdown_report(path, shown, summary, frame_map,
                             title=f"dcpdissect evidence: {Path(str(path)).name}",
                             notes=notes, connections=connections)
    (out / "report.md").write_text(report, encoding="utf-8")
    (out / "frames.tsv").write_text(frames_tsv(frame_map, cuts, summary), encoding="utf-8")
    digest = hashlib.sha256(pcap.read_bytes()).hexdigest()
    readme = [
        f"Evidence bundle for {Path(str(path)).name} (written by dcpdissect analyze --evidence)",
        "",
        f"{name:<16} {len(frame_map)} frames, SHA-256 {digest}; each finding a packet "
        "comment on its frames",
        "report.md        findings, decoded fields, hexdumps, Wireshark filters",
        "frames.tsv       evidence frame number -> frame number in the original capture",
        f"{PLUGIN:<16} the Wireshark plugin (Lua dissector) the command below loads",
        *tls.readme(),
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
        *([f"The original capture is {len(summary.frame_files.files)} files read as one: "
           "its frame numbers are those of their frames merged in time order (mergecap's "
           "order); frames.tsv gives each one's file and frame number there."]
          if summary.frame_files else []),
        ("Not reproduced by the trimmed capture: "
         + ", ".join(f"{f.rule} (original frame {f.frame})" for f in missing) + "."
         if missing else f"Every bundled finding is reproduced (selection: {STEPS[step]})."),
        (f"{len(cuts)} frames start in the middle of a message whose start is not kept: those "
         "leading payload bytes were removed (TCP seq and IP length adjusted; see cut_bytes "
         "in frames.tsv)." if cuts else "Every frame is kept whole."),
        "Redaction: " + ("applied (document keys and values replaced by same-length "
                         "pseudonyms, equal ones staying equal; other bytes not known to be "
                         "clear by 'x' bytes; headers, lengths and seqnos "
                         "unchanged; TCP/IP checksums not recomputed; the findings checked "
                         "again on the redacted capture)." if redact else "none."),
        "",
    ]
    (out / "README.txt").write_text("\n".join(readme), encoding="utf-8")
    tls.write(out)
    return Bundle(out, pcap, len(frame_map), STEPS[step], missing)


def frames_tsv(frame_map: dict[int, int], cuts: dict[int, int], summary) -> str:
    """frames.tsv: each evidence frame's number in the original capture, and for a file
    set the file and frame number there."""
    where = summary.frame_files
    head = "evidence_frame\toriginal_frame\tcut_bytes" + ("\tfile\tfile_frame" if where else "")
    rows = [head]
    for old, new in sorted(frame_map.items()):
        row = f"{new}\t{old}\t{cuts.get(old, 0)}"
        if where:
            row += "\t{}\t{}".format(*(where.locate(old) or ("", "")))
        rows.append(row)
    return "\n".join(rows) + "\n"


def _write_empty(path, summary, out: Path) -> Bundle:
    """No findings: a report and a README that say so, and no capture."""
    (out / "report.md").write_text(
        markdown_report(path, [], summary, title=f"dcpdissect evidence: {Path(str(path)).name}",
                        notes=["No findings: no evidence capture was written."]),
        encoding="utf-8")
    (out / "README.txt").write_text(
        f"Evidence bundle for {Path(str(path)).name} (written by dcpdissect analyze --evidence)\n\n"
        "No findings: no evidence capture was written.\n", encoding="utf-8")
    return Bundle(out, None, 0, STEPS[0], [])


