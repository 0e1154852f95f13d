"""``dcpdissect analyze``: findings of a capture as a table, jsonl or Markdown, and
evidence bundles."""

from __future__ import annotations

import argparse
import sys

from tabulate import tabulate

from ..capture.readers import CaptureError
from ..reassembly.pdus import Summary, iter_events
from ..reports.messages import jsonl_line
from .common import (EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, INTERRUPTED, LiveTable,
                     StopOnSigint, add_capture_options, capture_options, live_output, os_error,
                     ports_report)

FAIL_ON = ("error", "warning", "info", "never")


def register(sub) -> None:
    p = sub.add_parser("analyze", help="find spec violations in a capture")
    p.add_argument("file", help="pcap or pcapng file (gzip allowed), or - for stdin")
    p.add_argument("--format", choices=("table", "jsonl", "markdown"), default="table")
    p.add_argument("--fail-on", choices=FAIL_ON, default="error",
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    p.add_argument("--evidence", metavar="DIR",
                   help="write a bug-report bundle: trimmed pcap, Markdown report, tshark command")
    p.add_argument("--redact", action="store_true",
                   help="with --evidence: replace document keys and values by placeholders")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress line on stderr (default: when stderr is a terminal and the "
                        "capture is 20 MB or more)")
    add_capture_options(p)
    p.set_defaults(func=cmd_analyze)


def _finding_row(f) -> list:
    from ..reports.messages import iso_time
    return [f.frame if f.frame is not None else "-",
            iso_time(f.ts_ns)[11:-4] if f.ts_ns is not None else "-",
            f.connection if f.connection is not None else "-",
            f.vbucket if f.vbucket is not None else "-", f.rule, f.message]


def _check_evidence_dir(where: str) -> int:
    from ..reports.evidence import check_evidence_dir
    problem = check_evidence_dir(where)
    if problem:
        print(f"dcpdissect: error: --evidence {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def cmd_analyze(args) -> int:
    from ..analysis.engine import Analyzer
    from ..analysis.findings import Finding
    from ..analysis.rules import SEVERITY_RANK
    from ..reports.findings import finding_record, findings_table, summary_rows
    from ..reports.progress import Progress

    if args.evidence and _check_evidence_dir(args.evidence):
        return EXIT_BAD_INPUT
    live = args.file == "-"
    live_output(args.file)
    out = sys.stdout
    # Live input: each finding leaves as soon as it is known (jsonl, table); otherwise
    # (and for markdown) the findings are printed sorted by frame at the end.
    stream_jsonl = live and args.format == "jsonl"
    live_table = (LiveTable(out, ("frame", "time", "conn", "vb", "rule", "message"))
                  if live and args.format == "table" else None)

    def found(new) -> None:
        findings.extend(new)
        for f in new:
            if stream_jsonl:
                out.write(jsonl_line(finding_record(f)))
            elif live_table is not None:
                live_table.row(_finding_row(f))

    progress = Progress(f"analyzing {args.file}", enabled=args.progress)
    summary = Summary()
    analyzer = Analyzer()
    findings: list = []
    hook = progress.attach
    try:
        with StopOnSigint() as guard:
            try:
                for n, ev in enumerate(iter_events(args.file, capture_options(args), summary,
                                                   hook)):
                    guard.busy = True
                    new = analyzer.feed(ev)
                    if new:
                        found(new)
                    if not n & 1023:
                        progress.update()
                    guard.busy = False
                    if guard.hit:
                        break
            except CaptureError as exc:
                summary.error = str(exc)
    finally:
        progress.close()
    found(analyzer.finish())
    flow = analyzer.streams.flow.timelines() if args.format == "jsonl" else None
    findings.sort(key=Finding.sort_key)
    summary_line = summary.line() + f", {len(findings)} findings"
    if args.format == "jsonl":
        from ..reports.findings import flow_control_records
        if not stream_jsonl:
            for f in findings:
                out.write(jsonl_line(finding_record(f)))
        for rec in flow_control_records(flow):
            out.write(jsonl_line(rec))
    elif args.format == "markdown":
        from ..reports.markdown import markdown_report
        out.write(markdown_report(args.file, findings, summary))
    elif live_table is not None:
        out.write("\n" + (tabulate(summary_rows(findings),
                                   headers=("rule", "severity", "count", "title"),
                                   disable_numparse=True) + "\n" if findings
                          else "no findings\n"))
    else:
        out.write(findings_table(findings))
    out.flush()
    if args.evidence:
        from ..reports.evidence import write_evidence
        try:
            where = write_evidence(args.file, findings, summary, args.evidence,
                                   redact=args.redact)
        except OSError as exc:
            print(f"dcpdissect: error: --evidence {os_error(exc)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"evidence written to {where}", file=sys.stderr)
    print(summary_line, file=sys.stderr)
    if guard.hit:
        print(INTERRUPTED, file=sys.stderr)
    if summary.error:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if ports_report(summary):
        return EXIT_BAD_INPUT
    if args.fail_on != "never":
        threshold = SEVERITY_RANK[args.fail_on]
        if any(SEVERITY_RANK[f.severity] >= threshold for f in findings):
            return EXIT_FINDINGS
    return EXIT_OK

