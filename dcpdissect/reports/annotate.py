"""A copy of a capture with the findings as pcapng packet comments.

Every frame of every finding gets one comment ``[rule] message`` per finding (Wireshark
shows them under the frame and filters them as ``frame.comment``). Frames are copied as
read: timestamps (nanosecond resolution), link types, captured bytes and original lengths;
records that carry no packet (pcapng custom blocks and the like) are left out.
"""

from __future__ import annotations

from ..analysis.findings import Finding
from ..capture.fileset import open_source
from ..capture.readers import NO_LINKTYPE
from ..capture.pcapwrite import PcapngWriter
from .markdown import finding_frames

NS_RESOLUTION = 9          # if_tsresol: 10^-9 s, so every input timestamp is kept exactly


def finding_comments(findings: list[Finding]) -> dict[int, list[str]]:
    """frame number -> its comments, one per finding in ``findings`` order."""
    comments: dict[int, list[str]] = {}
    for f in findings:
        for n in finding_frames(f):
            comments.setdefault(n, []).append(f"[{f.rule}] {f.message}")
    return comments


def write_annotated(source: str, target: str, findings: list[Finding]) -> tuple[int, int]:
    """Copy ``source`` (pcap or pcapng, gzip allowed; a file set merged) to the pcapng
    file ``target`` with the findings' comments; returns (frames written, frames
    commented). Raises CaptureError for an unreadable source and OSError for an unwritable
    target."""
    comments = finding_comments(findings)
    interfaces: dict[tuple[int, int], int] = {}     # (input interface, link type) -> output
    written = commented = 0
    with open_source(source) as reader, open(target, "wb") as fh:
        out = PcapngWriter(fh)
        for frame in reader:
            if frame.linktype == NO_LINKTYPE:
                continue
            key = (frame.interface, frame.linktype)
            iface = interfaces.get(key)
            if iface is None:
                iface = interfaces[key] = out.add_interface(frame.linktype,
                                                            tsresol=NS_RESOLUTION)
            notes = comments.get(frame.number)
            out.write(iface, frame.ts_ns, frame.data, frame.wirelen, comment=notes)
            written += 1
            commented += bool(notes)
        out.close()
    return written, commented
