"""``dcpdissect nodes``: two or more capture points of one replication, matched."""

from __future__ import annotations

import sys
from pathlib import Path

from ..capture.readers import CaptureError
from ..reports.messages import jsonl_line
from .common import (EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, add_capture_options,
                     add_output_option, capture_options, open_output, os_error, with_examples)


def register(sub) -> None:
    p = sub.add_parser(
        "nodes", help="two or more capture points: matched connections, clock offset, lag, "
                      "losses",
        description="Captures of the same traffic taken at two or more points (nodes, or "
                    "both sides of a proxy), compared pair by pair: the connections seen "
                    "at both (one TCP connection by its endpoints and sequence numbers, "
                    "or a relay's two legs by their DCP connection name), the offset of the second capture's clock "
                    "from the first's with the bound that sending-before-receiving allows, "
                    "the lag of each producer message between the points per vbucket, and "
                    "the messages sent at one point that never reached the other (a "
                    "snapshot's ack among them). With more than two points, every pair of "
                    "points (in the order given) and each point's offset from the first, "
                    "chained through the pairs. A point may be several ring-buffer files. "
                    "Exit code 1 when a message was lost.",
        **with_examples(
            "dcpdissect nodes replica=samples/multinode/delayed-replica.pcapng "
            "active=samples/multinode/delayed-active.pcapng",
            "dcpdissect nodes samples/multinode/dropped-replica.pcapng "
            "samples/multinode/dropped-active.pcapng --format jsonl",
            "dcpdissect nodes samples/multinode/ack-dropped-replica.pcapng "
            "--point active='samples/multinode/ack-dropped-active*'",
            "dcpdissect nodes active=samples/multinode/dropped-relay-active.pcapng "
            "relay=samples/multinode/dropped-relay-relay.pcapng "
            "replica=samples/multinode/dropped-relay-replica.pcapng"))
    p.add_argument("points", nargs="*", metavar="[NAME=]PATH",
                   help="a capture point: its pcap or pcapng file (gzip allowed), or a "
                        "directory or quoted glob of its ring-buffer files (read as one "
                        "capture), named NAME (default: its node's address, the one in "
                        "every connection it saw, else the file's name)")
    p.add_argument("--point", action="append", default=[], metavar="NAME=PATH",
                   help="a capture point as above; given again with the same NAME, one more "
                        "file, directory or glob of that point")
    p.add_argument("--format", choices=("table", "jsonl", "markdown", "html"), default="table",
                   help="html: one self-contained page, findings first, then one timeline "
                        "per DCP stream with a lane per point (more than two points: per "
                        "pair of points)")
    p.add_argument("--evidence", metavar="DIR|FILE.zip|FILE.tar.gz",
                   help="write a bug-report bundle: per point a trimmed capture of the "
                        "findings' connections with its frames.tsv, one Markdown report and "
                        "the commands that compare them again (more than two points: one "
                        "such bundle per pair with findings); into a directory, or as one "
                        "archive to attach")
    p.add_argument("--redact", action="store_true",
                   help="in the --evidence bundle, replace document keys and values by "
                        "same-length pseudonyms, equal ones equal at both points")
    add_output_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_nodes)


def _point(text: str) -> tuple[str | None, str]:
    name, eq, path = text.partition("=")
    if eq and name and not Path(text).exists():
        return name, path
    return None, text


def capture_points(positional: list[str], options: list[str]) -> list[tuple]:
    """The capture points given, in order: (name, source, provisional), the source one
    file or a :class:`~dcpdissect.capture.fileset.FileSet`; the paths of ``--point`` options
    with one NAME make one point. A point without a NAME is named provisionally by its
    first file (``-2`` added when the other point's name is the same)."""
    from ..capture.fileset import FileSet, capture_files
    paths: dict = {}
    for k, text in enumerate([*positional, *options]):
        name, path = _point(text)
        paths.setdefault(name if name is not None else (k, path), []).append(path)
    out, taken = [], {key for key in paths if isinstance(key, str)}
    for key, given in paths.items():
        files = capture_files(given) or given
        source = files[0] if len(files) == 1 else FileSet(files)
        name = key if isinstance(key, str) else Path(files[0]).name.split(".")[0]
        if not isinstance(key, str):
            name = name if name not in taken else f"{name}-{len(out) + 1}"
            taken.add(name)
        out.append((name, source, not isinstance(key, str)))
    return out


def cmd_nodes(args) -> int:
    from ..analysis.nodes import compare, compare_points, read_point

    points = capture_points(args.points, args.point)
    if len(points) < 2:
        print(f"dcpdissect nodes: error: at least two capture points are compared, "
              f"{len(points)} given", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.redact and not args.evidence:
        print("dcpdissect nodes: error: --redact redacts the --evidence bundle (the report "
              "itself shows no document)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.evidence:
        from ..reports.evidence import check_evidence_dir
        if problem := check_evidence_dir(args.evidence):
            print(f"dcpdissect: error: --evidence {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
    read = []
    for name, source, provisional in points:
        try:
            read.append(read_point(name, source, capture_options(args), provisional))
        except CaptureError as exc:
            print(f"dcpdissect: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    out = open_output(args.output)
    if out is None:
        return EXIT_BAD_INPUT
    report = compare(*read) if len(read) == 2 else compare_points(read)
    out.write(_render(args.format, report))
    out.flush()
    if out is not sys.stdout:
        out.close()
    for point in read:
        print(f"{point.name}: {point.summary.line()}", file=sys.stderr)
    if args.evidence and _write_evidence(args, report, [source for _, source, _ in points]):
        return EXIT_BAD_INPUT
    return EXIT_FINDINGS if report.findings else EXIT_OK


def _render(fmt: str, report) -> str:
    """The report of two points (a ``NodesReport``) or more (a ``PointsReport``)."""
    from ..analysis.nodes import NodesReport
    from ..reports import nodes, nodes_html
    two = isinstance(report, NodesReport)
    if fmt == "jsonl":
        records = nodes.nodes_records(report) if two else nodes.points_records(report)
        return "".join(jsonl_line(record) for record in records)
    render = {"markdown": (nodes.nodes_markdown, nodes.points_markdown),
              "html": (nodes_html.nodes_html, nodes_html.points_html),
              "table": (nodes.nodes_text, nodes.points_text)}[fmt]
    return render[0 if two else 1](report)


def _write_evidence(args, report, sources) -> bool:
    """``--evidence``: the bundle (more than two points: one per pair with findings), said
    on stderr. Whether it could not be written."""
    from ..analysis.nodes import NodesReport
    from ..reports.nodes_evidence import write_nodes_evidence, write_points_evidence
    write = write_nodes_evidence if isinstance(report, NodesReport) else write_points_evidence
    try:
        bundles = write(report, sources, args.evidence, args.redact, capture_options(args))
    except OSError as exc:
        print(f"dcpdissect: error: --evidence {os_error(exc)}", file=sys.stderr)
        return True
    if not isinstance(report, NodesReport):
        if not bundles:
            print(f"no findings: no evidence capture written (README.txt in {args.evidence} "
                  "says so)", file=sys.stderr)
        for bundle in bundles:
            _said(bundle)
        return False
    _said(bundles)
    return False


def _said(bundle) -> None:
    """One bundle of two points, on stderr."""
    if not bundle.points:
        print(f"no findings: no evidence capture written (README.txt and report.md in "
              f"{bundle.path} say so)", file=sys.stderr)
        return
    print(f"evidence written to {bundle.path}: "
          + ", ".join(f"{p.pcap} with {p.frames} frames" for p in bundle.points),
          file=sys.stderr)
    if bundle.unreproduced:
        print("dcpdissect: warning: the evidence captures do not reproduce "
              f"{len(bundle.unreproduced)} findings: "
              + ", ".join(f"{f.rule} ({f.fields['point']} frame {f.frame})"
                          for f in bundle.unreproduced), file=sys.stderr)
