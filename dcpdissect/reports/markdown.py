"""A bug-report-ready Markdown report of the findings of one capture."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

from ..analysis.findings import Finding
from ..analysis.rules import INFO, RULES, SEVERITY_RANK
from .findings import INFO_ROWS, finding_record
from .messages import iso_time, jsonl_line

HEXDUMP_BYTES = 64
REDACTED_NOTE = ("**Redaction applied**: document keys and values are replaced by pseudonyms "
                 "of the same length (equal keys or values stay equal, distinct ones "
                 "distinct) in the messages, fields and hexdumps below.")


def file_rows(path, summary) -> list[tuple[str, str]]:
    """The capture table's rows naming the input: its file and digest, or for a file set
    each file with its digest and where its frames are in the merged numbering."""
    if not summary.frame_files:
        return [("file", Path(str(path)).name),
                ("SHA-256", sha256_of(path) or "unavailable")]
    runs: dict[str, list[str]] = {}
    for a, b, p, _first in summary.frame_files.runs():
        runs.setdefault(p, []).append(f"{a}–{b}" if b > a else str(a))
    rows = [("files", f"{len(summary.frame_files.files)}, read as one capture: frames "
                      "merged in time order and numbered in that order (as mergecap does)")]
    for p in summary.frame_files.files:
        frames = ", ".join(runs.get(p, ())[:8]) + (", ..." if len(runs.get(p, ())) > 8 else "")
        rows.append((Path(p).name, f"frames {frames or 'none'}; SHA-256 "
                                   f"{sha256_of(p) or 'unavailable'}"))
    return rows


def sha256_of(path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def hexdump(data: bytes, limit: int = HEXDUMP_BYTES) -> str:
    """Offset, 16 hex bytes and printable ASCII per line; the first ``limit`` bytes."""
    lines = []
    shown = data[:limit]
    for pos in range(0, len(shown), 16):
        row = shown[pos:pos + 16]
        hexes = " ".join(f"{b:02x}" for b in row)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{pos:04x}  {hexes:<47}  |{text}|")
    if len(data) > limit:
        lines.append(f"... {len(data) - limit} more bytes ({len(data)} in total)")
    else:
        lines.append(f"({len(data)} bytes)")
    return "\n".join(lines)


def frame_filter(frames) -> str:
    """A Wireshark display filter selecting ``frames`` (set members comma-separated)."""
    return "frame.number in {" + ", ".join(str(n) for n in sorted(set(frames))) + "}"


def finding_frames(f: Finding) -> list[int]:
    """Every frame of a finding: the frames of its PDU and the completing frame."""
    frames = set(f.frames)
    if f.frame is not None:
        frames.add(f.frame)
    return sorted(frames)


def _mapped(frames, frame_map):
    if frame_map is None:
        return list(frames)
    return [frame_map[n] for n in frames if n in frame_map]


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _frame_text(n, frame_map) -> str:
    if n is None:
        return "-"
    if frame_map is None:
        return str(n)
    if n in frame_map:
        return f"{frame_map[n]} (original frame {n})"
    return f"original frame {n} (not in this capture)"


def markdown_report(path, findings: list[Finding], summary, frame_map: dict[int, int] | None = None,
                    *, title: str | None = None, notes: list[str] = (),
                    connections: dict[int, str] | None = None, max_per_rule: int = 25,
                    streams: list[dict] | None = None, whole=()) -> str:
    """Capture summary, per-rule table, then every finding grouped by rule with its decoded
    fields, a hexdump of its PDU, a Wireshark filter and the rule's rationale. With
    ``streams`` (:func:`~.streams.stream_records`), a streams table after the findings.

    With ``frame_map`` (original frame number -> frame number in a trimmed capture) frame
    numbers and filters refer to the trimmed capture. At most ``max_per_rule`` findings
    of one rule (:data:`~.findings.INFO_ROWS` of an info rule not in ``whole``, the rules
    asked for by name) are detailed; the others are listed by frame.
    """
    name = Path(str(path)).name
    out = [f"# {title or 'dcpdissect findings: ' + name}", ""]
    out += [n for note in notes for n in (note, "")]
    out += ["## Capture", "",
            "| | |", "|---|---|",
            *(f"| {k} | {v} |" if summary.frame_files else f"| {k} | `{v}` |"
              for k, v in file_rows(path, summary)),
            f"| frames | {summary.frames} |",
            f"| TCP connections | {summary.connections} |",
            f"| messages | {summary.pdus} |",
            f"| gaps | {summary.gaps} ({summary.gap_bytes} bytes) |",
            f"| resyncs | {summary.resyncs} |",
            f"| findings | {len(findings)} |"]
    if summary.not_mcbp:
        out.append(f"| TCP connections not MCBP | {summary.not_mcbp} (not decoded) |")
    if summary.tls_decrypted:
        out.append(f"| TLS connections decrypted | {summary.tls_decrypted} (with the key log) |")
    if summary.error:
        out.append(f"| stopped | {_cell(summary.error)} |")
    if frame_map is not None:
        out.append(f"| frames kept | {len(frame_map)} (numbers below refer to this capture) |")
    out.append("")

    groups: dict[str, list[Finding]] = OrderedDict()
    for f in sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.rule, f.sort_key())):
        groups.setdefault(f.rule, []).append(f)

    out += ["## Summary by rule", ""]
    if not groups:
        out += ["No findings.", ""]
    else:
        out += ["| rule | severity | count | title |", "|---|---|---|---|"]
        for rid, items in groups.items():
            out.append(f"| [`{rid}`](#{rid}) | {RULES[rid].severity} | {len(items)} | "
                       f"{_cell(RULES[rid].title)} |")
        out.append("")

    for rid, items in groups.items():
        r = RULES[rid]
        mapped_all = sorted({m for f in items for m in _mapped(finding_frames(f), frame_map)})
        out += [f"## {rid}", "",
                f"**{r.severity}**: {r.title}", "",
                f"Rationale: {r.rationale}", ""]
        if mapped_all:
            out += [f"All frames of this rule: `{frame_filter(mapped_all)}`", ""]
        limit = INFO_ROWS if r.severity == INFO and rid not in whole else max_per_rule
        for i, f in enumerate(items):
            if i == limit and len(items) > limit + 1:
                rest = [_frame_text(g.frame, frame_map) for g in items[i:]]
                out += [f"{len(rest)} more at frames: " + ", ".join(rest), ""]
                break
            out += _finding_section(f, frame_map, connections)
    if streams is not None:
        from .streams import streams_markdown
        out += streams_markdown(streams)
    return "\n".join(out).rstrip("\n") + "\n"


def _finding_section(f: Finding, frame_map, connections) -> list[str]:
    out = [f"### frame {_frame_text(f.frame, frame_map)}: {f.message}", ""]
    rows = []
    if f.ts_ns is not None:
        rows.append(("time", iso_time(f.ts_ns)))
    if f.connection is not None:
        ends = (connections or {}).get(f.connection)
        rows.append(("connection", f"{f.connection}" + (f" ({ends})" if ends else "")))
    if f.vbucket is not None:
        rows.append(("vbucket", f.vbucket))
    if f.opaque is not None:
        rows.append(("opaque", f"{f.opaque:#x}"))
    frames = _mapped(finding_frames(f), frame_map)
    if frames:
        rows.append(("frames", ", ".join(map(str, frames))))
    for k, v in f.fields.items():
        rows.append((f"`{k}`", v))
    out += ["| | |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in rows] + [""]
    if frames:
        out += [f"Wireshark filter: `{frame_filter(frames)}`", ""]
    if f.pdu:
        out += [f"PDU (first {min(HEXDUMP_BYTES, len(f.pdu))} of {len(f.pdu)} bytes):", "",
                "```", hexdump(f.pdu), "```", ""]
    record = finding_record(f)
    if frame_map is not None:
        record["frame"] = frame_map.get(f.frame, f.frame) if f.frame is not None else None
        record["frames"] = frames
        record["original_frame"] = f.frame
    out += ["<details><summary>JSON</summary>", "", "```json",
            jsonl_line(record).rstrip("\n"), "```", "", "</details>", ""]
    return out
