"""Evidence bundles of two capture points (``dcpdissect nodes --evidence``): one folder per
point with its trimmed capture (``evidence.pcapng``, each finding a packet comment on its
frames at that point) and ``frames.tsv``, one ``report.md`` and one ``README.txt`` with the
``dcpdissect nodes`` command that compares the two trimmed captures again, and the
Wireshark plugin.

A point's capture keeps the frames of its connections that a finding involves (the
finding's own connection at the point that saw the message sent, the paired connection at
the other) from their handshake (negotiation, DcpOpen, stream requests) up to the message
after the gap (:func:`last_needed`), so that the messages before and after the loss are seen
at both points again; when that does not reproduce every finding, the whole connections
(:data:`STEPS`). The two trimmed captures are compared again; a finding is reproduced when
the same rule comes back at the point that saw it, at its frame's number in that point's
trimmed capture. The clock offset and the lags of the trimmed captures rest on fewer
observations: both are reported.

More than two points (:func:`write_points_evidence`): one such bundle per pair of points
with findings, each in a folder named after the pair.

With ``redact=True`` both points are redacted with one :class:`~.redact.Pseudonyms`: a key or
value seen at both points gets the same stand-in at both, so that the messages still match
across the points.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shlex
import tempfile
from pathlib import Path

from ..analysis.findings import Finding
from ..analysis.nodes import C2S, S2C, NodesReport, PointsReport, compare, read_point
from ..protocol import DCP_PORTS
from ..reassembly.pdus import Options
from .capture_index import CaptureIndex
from .evidence import (PLUGIN, archive_folder, frames_tsv, is_archive, pack, tshark_command,
                       write_pcap)
from .redact import Pseudonyms, redact_finding

STEPS = ("connections up to the message after each gap", "whole connections")


@dataclasses.dataclass
class PointBundle:
    """What one point's folder holds."""
    name: str
    folder: str
    pcap: Path
    frames: int
    frame_map: dict[int, int]       # original frame -> frame in the trimmed capture
    cited: list[int]                # the findings' frames there, original numbers


@dataclasses.dataclass
class NodesBundle:
    """What :func:`write_nodes_bundle` wrote."""
    path: Path
    points: list[PointBundle]       # empty when there were no findings
    reproduced: list[Finding]
    unreproduced: list[Finding]
    rerun: NodesReport | None       # the two trimmed captures compared again
    step: str = ""                  # the selection step (:data:`STEPS`) that was needed
    redacted: bool = False


def at_points(f: Finding) -> dict[str, Finding]:
    """The finding as each point sees it: at the point that saw the message sent, its frame
    (and the marker the lost ack answers); at the other, its frames there (the messages
    around the gap, the marker asking for the ack) on the paired connection."""
    mine = {*f.frames, *([f.fields["marker_frame"]] if "marker_frame" in f.fields else [])}
    other = list(f.fields["gap_frames"])
    if "other_marker_frame" in f.fields:
        other.insert(0, f.fields["other_marker_frame"])
    there = dataclasses.replace(f, frame=other[-1], frames=tuple(sorted(set(other))),
                                connection=f.fields["other_connection"], context=())
    return {f.fields["point"]: dataclasses.replace(f, frames=tuple(sorted(mine))),
            f.fields["other_point"]: there}


def _folder_names(names: tuple[str, str]) -> tuple[str, str]:
    safe = [re.sub(r"[^A-Za-z0-9._-]", "_", n).strip(".") or "point" for n in names]
    if safe[0] == safe[1]:
        safe[1] += "-2"
    return safe[0], safe[1]


def last_needed(report: NodesReport, f: Finding) -> dict[str, int] | None:
    """The last frame of each point a trimmed capture needs for ``f`` to be judged again:
    the message after the gap, at the other point (the last of its gap frames) and as the
    sending point sent it; None when that message is not found."""
    side = (report.a.name, report.b.name).index(f.fields["point"])
    direction = C2S if f.fields["direction"] == "c2s" else S2C
    for p in report.pairings:
        sender = (p.a, p.b)[side]
        if sender.conn != f.connection or (p.b, p.a)[side].conn != f.fields["other_connection"]:
            continue
        sent = sender.messages[direction]
        seen = [pair[side] for pair in p.matched[direction]]
        matched = set(seen)
        lost = [i for i, m in enumerate(sent) if m.frame == f.frame and i not in matched]
        after = [sent[i].frame for i in seen if lost and i > lost[0]]
        if after:
            return {f.fields["point"]: after[0], f.fields["other_point"]:
                    max(f.fields["gap_frames"])}
    return None


def _trim(source, findings: list[Finding], limits: list[int | None], options: Options | None,
          pseudonyms: Pseudonyms | None) -> tuple[CaptureIndex, tuple[set[int], set[int]]]:
    """One point's index and the frames kept at each step (:data:`STEPS`): the frames of
    the connections its findings involve up to each finding's ``limits`` (None: all of
    them), then all of them."""
    cap = CaptureIndex(source, findings, options, pseudonyms is not None, pseudonyms)
    upto: set[int] = set()
    whole: set[int] = set()
    for f, limit in zip(findings, limits):
        for conn in cap.involved(f):
            frames = set(cap.conn_frames.get(conn, ())) | set(cap.handshake.get(conn, ()))
            whole |= frames
            upto |= {n for n in frames if limit is None or n <= limit}
    return cap, (upto, whole)


def write_nodes_bundle(report: NodesReport, sources: tuple, out_dir, redact: bool = False,
                       options: Options | None = None) -> NodesBundle:
    """Write the bundle of ``report`` (its points read from ``sources``, each a file or a
    FileSet) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = (report.a.name, report.b.name)
    if not report.findings:
        return _write_empty(report, out)
    pseudonyms = Pseudonyms() if redact else None       # one secret for both points
    seen = [at_points(f) for f in report.findings]
    folders = _folder_names(names)
    maps: dict[str, dict[int, int]] = {}

    def comments(name: str):
        def at(frame_map):
            maps[name] = frame_map
            notes: dict[int, list[str]] = {}
            for f, there in zip(report.findings, seen):
                g = redact_finding(f, pseudonyms) if redact else f
                where = "; ".join(f"{p} {_frames(x.frames, maps.get(p, {}))}"
                                  for p, x in there.items())
                for n in there[name].frames:
                    notes.setdefault(n, []).append(
                        f"[{g.rule}] {g.message} (original frame numbers; in the evidence "
                        f"captures: {where})")
            return notes
        return at

    limits = [last_needed(report, f) for f in report.findings]
    trimmed = [_trim(source, [x[name] for x in seen],
                     [limit and limit[name] for limit in limits], options, pseudonyms)
               for name, source in zip(names, sources)]
    for folder in folders:
        (out / folder).mkdir(parents=True, exist_ok=True)
    for step in range(len(STEPS)):
        written = [write_pcap(cap, keeps[step], out / folder / "evidence", redact,
                              comments(name))
                   for name, folder, (cap, keeps) in zip(names, folders, trimmed)]
        # the first point's comments were written before the second's numbers were known
        cap, keeps = trimmed[0]
        written[0] = write_pcap(cap, keeps[step], out / folders[0] / "evidence", redact,
                                comments(names[0]))
        points = [PointBundle(name, folder, pcap, len(frame_map), frame_map,
                              sorted({n for x in seen for n in x[name].frames}))
                  for name, folder, (pcap, frame_map, _cuts) in zip(names, folders, written)]
        rerun = compare(*(read_point(p.name, str(p.pcap), options) for p in points))
        got = {(g.rule, g.fields["point"], g.frame) for g in rerun.findings}
        reproduced = [f for f in report.findings
                      if (f.rule, f.fields["point"], maps[f.fields["point"]].get(f.frame)) in got]
        missing = [f for f in report.findings if f not in reproduced]
        if not missing or all(keeps[step] == keeps[-1] for _, keeps in trimmed):
            break
    bundle = NodesBundle(out, points, reproduced, missing, rerun, STEPS[step], redact)
    for p, pt in zip(points, (report.a, report.b)):
        (out / p.folder / "frames.tsv").write_text(frames_tsv(p.frame_map, {}, pt.summary),
                                                   encoding="utf-8")
    from ..luagen.render import render
    (out / PLUGIN).write_text(render(), encoding="utf-8")
    ports = _ports(report)
    (out / "report.md").write_text(_report_md(report, bundle, seen, pseudonyms, ports),
                                   encoding="utf-8")
    (out / "README.txt").write_text(_readme(report, bundle, ports), encoding="utf-8")
    return bundle


def write_nodes_evidence(report: NodesReport, sources: tuple, target, redact: bool = False,
                         options: Options | None = None) -> NodesBundle:
    """:func:`write_nodes_bundle` into a directory, or as one ``.zip`` / ``.tar.gz`` archive
    (its files in a folder named after it; the returned ``path`` is the archive)."""
    target = Path(target)
    if not is_archive(target):
        return write_nodes_bundle(report, sources, target, redact, options)
    with tempfile.TemporaryDirectory(prefix="dcpdissect-bundle-") as work:
        bundle = write_nodes_bundle(report, sources, Path(work) / archive_folder(target),
                                    redact, options)
        pack(bundle.path, target)
    inside = archive_folder(target)
    return dataclasses.replace(bundle, path=target, points=[
        dataclasses.replace(p, pcap=Path(inside) / p.folder / p.pcap.name)
        for p in bundle.points])


def _frames(frames, frame_map: dict[int, int]) -> str:
    return ("frame " if len(frames) == 1 else "frames ") + ", ".join(
        str(frame_map[n]) if n in frame_map else f"{n} (original)" for n in frames)


def _ports(report: NodesReport) -> list[int]:
    """The server ports of the paired connections beyond the default DCP ports."""
    return sorted({c.server[1] for p in report.pairings for c in (p.a, p.b)} - set(DCP_PORTS))


def nodes_command(points: list[PointBundle], ports) -> str:
    """The ``dcpdissect nodes`` command, run in the bundle's directory, that compares the
    trimmed captures."""
    return ("dcpdissect nodes " + " ".join(shlex.quote(f"{p.name}={p.folder}/{p.pcap.name}")
                                           for p in points)
            + "".join(f" --port {n}" for n in ports))


def _offset_line(r: NodesReport) -> str:
    o = r.offset
    if o is None:
        return "not decided"
    return (f"{o.estimate / 1e9:+.6f} s ± {o.uncertainty / 1e3:.1f} us, within "
            f"[{o.low / 1e9:+.6f} s, {o.high / 1e9:+.6f} s], {o.observations} observations")


def _lag_cells(r: NodesReport) -> dict[int, list[str]]:
    return {v.vbucket: [str(v.messages), *(f"{ns / 1e6:.3f}" for ns in
                                            (v.min_ns, v.median_ns, v.max_ns))]
            for v in r.lags}


def _report_md(report: NodesReport, bundle: NodesBundle, seen, pseudonyms, ports) -> str:
    names = (report.a.name, report.b.name)
    maps = {p.name: p.frame_map for p in bundle.points}
    lines = [f"# dcpdissect evidence: {names[0]} and {names[1]}", "",
             f"Each evidence capture keeps the point's frames of the findings' connections "
             f"(selection: {bundle.step}).", "",
             "| point | original capture | evidence capture | frames kept |",
             "| --- | --- | --- | --- |"]
    for p, pt in zip(bundle.points, (report.a, report.b)):
        lines.append(f"| {p.name} | `{Path(pt.path).name}` | `{p.folder}/{p.pcap.name}` | "
                     f"{p.frames} of {pt.summary.frames} |")
    rerun = bundle.rerun
    lines += ["", f"## Clock offset ({names[1]} - {names[0]})", "",
              f"- original captures: {_offset_line(report)}",
              f"- evidence captures: {_offset_line(rerun)} (from the frames kept "
              "only)", "",
              "## Replication lag per vbucket (ms)", "",
              "| vb | messages | min | median | max | evidence: messages | min | median | "
              "max |", "| --- " * 9 + "|"]
    orig, again = _lag_cells(report), _lag_cells(rerun)
    for vb in sorted(set(orig) | set(again)):
        cells = orig.get(vb, ["-"] * 4) + again.get(vb, ["-"] * 4)
        lines.append(f"| {vb} | " + " | ".join(cells) + " |")
    lines += ["", "## Findings", "",
              "Frame numbers are those of each point's evidence capture (the original's "
              "in brackets); each finding is also a packet comment on its frames at both "
              "points (`frame.comment`).", ""]
    for f, at in zip(report.findings, seen):
        g = redact_finding(f, pseudonyms) if pseudonyms is not None else f
        state = "reproduced" if f in bundle.reproduced else "NOT reproduced"
        lines += [f"### {f.rule} ({state} by the evidence captures)", "",
                  f"{g.message} (original frame numbers)", ""]
        for name, seen_there in at.items():
            shown = ", ".join(f"{maps[name].get(n, '-')} ({n})" for n in seen_there.frames)
            word = "frame" if len(seen_there.frames) == 1 else "frames"
            lines.append(f"- {name} (conn {seen_there.connection}): {word} {shown}")
        lines.append("")
    if bundle.unreproduced:
        lines.append(f"{len(bundle.unreproduced)} findings are not reproduced by the "
                     "evidence captures.")
    else:
        lines.append("Every finding is reproduced by the evidence captures.")
    if pseudonyms is not None:
        lines += ["", "**Redaction applied**: document keys and values are replaced by "
                      "same-length pseudonyms from one keyed hash (its key not kept) for both "
                      "points, so that equal keys and values stay equal across them; bytes "
                      "not known to be free of customer data are `x`; headers, extras and "
                      "lengths are unchanged. The findings were checked again on the "
                      "redacted captures."]
    lines += ["", "Compare the evidence captures again, in this directory:", "", "```",
              nodes_command(bundle.points, ports), "```", ""]
    return "\n".join(lines)


def _readme(report: NodesReport, bundle: NodesBundle, ports) -> str:
    names = (report.a.name, report.b.name)
    dcp_ports = sorted(set(DCP_PORTS) | set(ports))
    lines = [f"Evidence bundle for two capture points, {names[0]} and {names[1]} "
             "(written by dcpdissect nodes --evidence)", ""]
    for p in bundle.points:
        digest = hashlib.sha256(p.pcap.read_bytes()).hexdigest()
        lines += [f"{p.folder}/{p.pcap.name}  {p.frames} frames of {p.name}, SHA-256 {digest}; "
                  "each finding a packet comment on its frames",
                  f"{p.folder}/frames.tsv  evidence frame number -> frame number in "
                  f"{p.name}'s original capture"]
    lines += ["report.md        points, clock offset, lag per vbucket, findings with their "
              "frames at both points",
              f"{PLUGIN:<16} the Wireshark plugin (Lua dissector) the commands below load", "",
              "Compare the two evidence captures again, from this directory:", "",
              f"  {nodes_command(bundle.points, ports)}", ""]
    for p in bundle.points:
        shown = sorted(p.frame_map[n] for n in p.cited if n in p.frame_map)
        lines += [f"Show the findings' frames at {p.name}:", "",
                  "  " + tshark_command(f"{p.folder}/{p.pcap.name}", shown or [1], dcp_ports),
                  ""]
    lines.append("Not reproduced by the evidence captures: " + ", ".join(
        f"{f.rule} (original frame {f.frame} at {f.fields['point']})"
        for f in bundle.unreproduced) + "." if bundle.unreproduced
        else "Every finding is reproduced by the evidence captures (same rule, same point, "
             f"at the frame frames.tsv maps it to; selection: {bundle.step}).")
    lines.append("Redaction: " + ("applied (document keys and values replaced by "
                                  "same-length pseudonyms, one secret for both points)."
                                  if bundle.redacted else "none."))
    return "\n".join(lines) + "\n"


def _write_empty(report: NodesReport, out: Path) -> NodesBundle:
    """No findings: a report and a README that say so, and no capture."""
    names = (report.a.name, report.b.name)
    text = (f"No message was lost between {names[0]} and {names[1]}: no evidence capture was "
            "written.")
    (out / "report.md").write_text(
        f"# dcpdissect evidence: {names[0]} and {names[1]}\n\n"
        f"- {names[0]}: `{Path(report.a.path).name}`\n- {names[1]}: "
        f"`{Path(report.b.path).name}`\n- clock offset ({names[1]} - {names[0]}): "
        f"{_offset_line(report)}\n\n{text}\n", encoding="utf-8")
    (out / "README.txt").write_text(
        f"Evidence bundle for two capture points, {names[0]} and {names[1]} (written by "
        f"dcpdissect nodes --evidence)\n\n{text}\n", encoding="utf-8")
    return NodesBundle(out, [], [], [], None)


def write_points_evidence(report: PointsReport, sources: list, target, redact: bool = False,
                          options: Options | None = None) -> list[NodesBundle]:
    """More than two points: :func:`write_nodes_bundle` of each pair with findings into a
    folder ``A-and-B`` of ``target`` (a directory, or one ``.zip`` / ``.tar.gz`` archive),
    with a ``README.txt`` that lists them."""
    target = Path(target)
    if is_archive(target):
        with tempfile.TemporaryDirectory(prefix="dcpdissect-bundle-") as work:
            bundles = write_points_evidence(report, sources, Path(work) / archive_folder(target),
                                            redact, options)
            pack(Path(work) / archive_folder(target), target)
        inside = Path(archive_folder(target))
        return [dataclasses.replace(b, path=target / b.path.name, points=[
            dataclasses.replace(p, pcap=inside / b.path.name / p.folder / p.pcap.name)
            for p in b.points]) for b in bundles]
    target.mkdir(parents=True, exist_ok=True)
    index = {id(pt): k for k, pt in enumerate(report.points)}
    bundles, lines = [], []
    for r in report.pairs:
        folder = "-and-".join(_folder_names((r.a.name, r.b.name)))
        if not r.findings:
            lines.append(f"{r.a.name} and {r.b.name}: no message lost between them"
                         + ("" if r.pairings else " (no connection seen at both)"))
            continue
        bundles.append(write_nodes_bundle(r, (sources[index[id(r.a)]], sources[index[id(r.b)]]),
                                          target / folder, redact, options))
        lines.append(f"{folder}/  {r.a.name} and {r.b.name}: {len(r.findings)} findings "
                     "(its README.txt: the files and the commands)")
    (target / "README.txt").write_text(
        "Evidence bundle for capture points " + ", ".join(pt.name for pt in report.points)
        + " (written by dcpdissect nodes --evidence): one bundle per pair of points with "
        "findings" + (", each redacted with its own secret" if redact else "") + "\n\n"
        + "\n".join(lines) + "\n", encoding="utf-8")
    return bundles
