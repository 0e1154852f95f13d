"""Deterministic builder of the bundled sample captures.

Each sample is a small scripted DCP exchange (a :class:`~.dsl.Spec` of one of the
``scenarios_*`` modules) turned into TCP packets (see ``netsynth``) and written as pcap or
pcapng. The builder also returns what a correct decoder must find in each file: every
message with the frames that carry it, and the gaps and resyncs that the TCP pathologies
cause. ``python -m dcpdissect.samples.builder DIR`` writes them all.
"""

from __future__ import annotations

import gzip
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from . import (
    netsynth as ns, scenarios_basic, scenarios_collections, scenarios_controls, scenarios_cuts,
    scenarios_durability, scenarios_flow, scenarios_hostile, scenarios_identity,
    scenarios_lifecycle, scenarios_moves, scenarios_ports, scenarios_replica, scenarios_rollback,
    scenarios_streams, scenarios_validator, scenarios_violations,
)
from .dsl import Script, Spec

# Every scenario module, in the order of all_specs().
SCENARIOS = (scenarios_basic, scenarios_violations, scenarios_validator, scenarios_streams,
             scenarios_rollback, scenarios_hostile, scenarios_identity, scenarios_replica,
             scenarios_controls, scenarios_lifecycle, scenarios_flow, scenarios_durability,
             scenarios_ports, scenarios_collections, scenarios_cuts, scenarios_moves)


@dataclass
class Expected:
    """One message the decoder must produce."""
    client: tuple[str, int]
    server: tuple[str, int]
    direction: int            # 0 c2s, 1 s2c
    offset: int               # stream offset in that direction
    data: bytes               # the message, or its captured prefix when ``missing``
    frames: tuple[int, ...] = ()
    missing: int = 0          # bytes of the message after ``data`` the capture lacks


@dataclass
class BuiltSample:
    name: str
    filename: str
    description: str
    data: bytes                                   # the capture file's bytes
    messages: list[Expected]                      # in stream order per direction
    gaps: int = 0
    resyncs: int = 0
    lost: int = 0                                 # messages cut by a gap or the capture start
    partial: int = 0                              # messages decoded from a captured prefix


# --- expectations -----------------------------------------------------------------------

def _expectations(scripts: list[Script], written: ns.WrittenPackets) -> tuple[list[Expected], int, int]:
    """The messages a correct decoder finds in the written capture, with the frames that
    carry them; the number of messages it cannot decode at all; and of those it decodes
    from a captured prefix.

    A byte is delivered by the first frame (in file order) carrying it. Framing holds from
    the stream's first byte (or not, when the capture starts inside the stream) and across
    missing bytes inside a message whose 24-byte header was captured: that message is
    decoded from its prefix up to the first missing byte, cited at the prefix's frames (one
    whose header was cut after its length is not decoded, but framing goes on). Missing
    bytes that cover a message boundary (or a header before its length) lose framing until
    the first captured header proven by the next message's captured header right after it
    (or, when its frame runs into missing bytes, by its layout; or, last, by ending the
    stream).
    """
    out, lost, partial = [], 0, 0
    for script in scripts:
        conv = script.conv
        for dname, dnum in (("c2s", 0), ("s2c", 1)):
            first_frame: dict[int, int] = {}
            for fno, pkt in written.data_frames(dname):
                if pkt.conversation is not conv:
                    continue
                captured = len(pkt.payload)
                if pkt.snaplen is not None:
                    captured = max(0, min(captured, pkt.snaplen - (len(pkt.frame_bytes()) - len(pkt.payload))))
                for b in range(pkt.stream_offset, pkt.stream_offset + captured):
                    first_frame.setdefault(b, fno)
            msgs = [(off, data) for d, off, data in script.messages if d == dname]
            if not msgs:
                continue
            have = first_frame.__contains__

            def captured(i: int, n: int) -> bool:
                return all(have(b) for b in range(msgs[i][0], msgs[i][0] + n))

            in_sync = have(msgs[0][0])
            for i, (off, data) in enumerate(msgs):
                end = off + len(data)
                if not in_sync:
                    nxt_header = i + 1 < len(msgs) and captured(i + 1, 24)
                    runs_into_cut = not all(have(b) for b in range(off, end + 24 if i + 1 < len(msgs) else end))
                    last = i + 1 == len(msgs) and all(have(b) for b in range(off, end))
                    in_sync = captured(i, 24) and (nxt_header or runs_into_cut or last)
                if not in_sync or not captured(i, 24):
                    lost += 1
                    # with its length (header bytes 8-11) captured, framing goes on
                    in_sync = in_sync and captured(i, 12) and (end == script.offsets[dname]
                                                               or have(end))
                    continue
                cut = next((b for b in range(off, end) if not have(b)), end)
                if cut < end:
                    partial += 1
                frames = {first_frame[b] for b in range(off, cut)}
                out.append(Expected((conv.client.ip, conv.client.port),
                                    (conv.server.ip, conv.server.port), dnum, off, data[:cut - off],
                                    tuple(sorted(frames)), end - cut))
                in_sync = end == script.offsets[dname] or have(end)
    return out, lost, partial


def all_specs() -> tuple[Spec, ...]:
    return tuple(spec for module in SCENARIOS for spec in module.SPECS)


def build(spec: Spec) -> BuiltSample:
    scripts = spec.scripts()
    sources = [s.conv.packets() for s in scripts]
    if spec.transform is not None:
        sources[0] = spec.transform(sources[0])
    if spec.snaplen is not None:
        sources = [[ns.truncate_capture([p], 0, spec.snaplen)[0] if p.payload else p
                    for p in src] for src in sources]
    buf = io.BytesIO()
    if spec.fmt == "pcapng":
        written = ns.write_pcapng(buf, sources, **spec.write_kw)
    else:
        written = ns.write_pcap(buf, sources, **spec.write_kw)
    data = buf.getvalue()
    if spec.fmt == "pcap.gz":
        out = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
            gz.write(data)
        data = out.getvalue()
    messages, lost, partial = _expectations(scripts, written)
    return BuiltSample(spec.name, spec.filename, spec.description, data, messages,
                       gaps=spec.gaps, resyncs=spec.resyncs, lost=lost, partial=partial)


def build_all() -> dict[str, BuiltSample]:
    return {spec.name: build(spec) for spec in all_specs()}


def write_all(directory: str | Path) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for sample in build_all().values():
        path = directory / sample.filename
        path.write_bytes(sample.data)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all(sys.argv[1] if len(sys.argv) > 1 else "samples"):
        print(p)
