"""``dcpdissect analyze``: findings of a capture as a table, jsonl, Markdown or an HTML
page, evidence bundles, timeline plots and a capture annotated with its findings."""

from __future__ import annotations

import sys

from tabulate import tabulate

from ..capture.readers import CaptureError
from ..reassembly.batches import BATCH, in_batches
from ..reassembly.pdus import Summary, iter_events
from ..reports.messages import Clock, jsonl_line
from .common import (EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, INTERRUPTED, LiveTable,
                     StopOnSigint, add_capture_options, add_progress_option,
                     add_time_option, capture_options,
                     capture_notes, live_output, os_error, ports_report, with_examples)

FAIL_ON = ("error", "warning", "info", "never")


def register(sub) -> None:
    p = sub.add_parser("analyze", help="find spec violations in a capture", **with_examples(
        "dcpdissect analyze samples/resume-collapsed.pcap",
        "dcpdissect analyze samples/resume-collapsed.pcap --format html -o report.html",
        "dcpdissect analyze samples/rollback-violations.pcap --plot plots --annotate "
        "annotated.pcapng --fail-on never",
        "dcpdissect analyze samples/resume-collapsed.pcap --format markdown --evidence bundle"))
    p.add_argument("file", help="pcap or pcapng file (gzip allowed), or - for stdin")
    p.add_argument("--format", choices=("table", "jsonl", "markdown", "html"), default="table",
                   help="html: one self-contained page (summary, connections, findings, a "
                        "timeline per vbucket)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the report to FILE instead of stdout")
    p.add_argument("--plot", metavar="DIR",
                   help="write the timeline of every vbucket to DIR as SVG and PNG")
    p.add_argument("--annotate", metavar="OUT.pcapng",
                   help="write a copy of the capture with a packet comment '[rule] message' "
                        "on every frame of every finding")
    p.add_argument("--fail-on", choices=FAIL_ON, default="error",
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    p.add_argument("--evidence", metavar="DIR",
                   help="write a bug-report bundle: trimmed pcap, Markdown report, tshark command")
    p.add_argument("--redact", action="store_true",
                   help="replace document keys and values by placeholders of the same length "
                        "in every output (table, jsonl, markdown, html, --evidence bundle)")
    add_progress_option(p)
    p.add_argument("--rule", action="append", metavar="ID",
                   help="report only this rule (repeatable; ids in docs/rules.md)")
    p.add_argument("--exclude-rule", action="append", metavar="ID",
                   help="do not report this rule (repeatable)")
    add_time_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_analyze)


def _check_evidence_dir(where: str) -> int:
    from ..reports.evidence import check_evidence_dir
    problem = check_evidence_dir(where)
    if problem:
        print(f"dcpdissect: error: --evidence {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def cmd_analyze(args) -> int:
    if args.file == "-" and args.evidence:      # the bundle reads the capture again
        from ..reports.spool import SpooledStdin
        with SpooledStdin() as spool:
            return _analyze(args, spool.path)
    return _analyze(args, args.file)


def _analyze(args, capture_copy: str) -> int:
    """``analyze``; ``capture_copy`` is the capture as the evidence bundle reads it."""
    from ..analysis.engine import Analyzer
    from ..analysis.findings import Finding
    from ..analysis.rules import SEVERITY_RANK
    from ..reports.connections import ConnectionLegend
    from ..reports.findings import (FINDING_HEADERS, finding_record, finding_row,
                                    findings_table, summary_rows)
    from ..reports.progress import Progress

    if (problem := _unknown_rule(args.rule or ()) or _unknown_rule(args.exclude_rule or ())):
        print(f"dcpdissect: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.evidence and _check_evidence_dir(args.evidence):
        return EXIT_BAD_INPUT
    if problem := _output_problem(args):
        print(f"dcpdissect: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    live = args.file == "-"
    live_output(args.file)
    out = _output(args.output)
    if out is None:
        return EXIT_BAD_INPUT
    timeline = None
    if args.format == "html" or args.plot:
        from ..reports.timeline import TimelineCollector
        timeline = TimelineCollector()
    # Live input: each finding leaves as soon as it is known (jsonl, table); otherwise
    # (and for markdown) the findings are printed sorted by frame at the end.
    stream_jsonl = live and args.format == "jsonl"
    live_table = (LiveTable(out, FINDING_HEADERS)
                  if live and args.format == "table" else None)
    summary = Summary()
    clock = Clock(args.time, summary)
    legend = ConnectionLegend()

    def found(new) -> None:
        if args.rule or args.exclude_rule:
            new = [f for f in new if (not args.rule or f.rule in args.rule)
                   and f.rule not in (args.exclude_rule or ())]
        new = _shown(new, args.redact)
        findings.extend(new)
        for f in new:
            if stream_jsonl:
                out.write(jsonl_line(finding_record(f, legend.record(f.connection))))
            elif live_table is not None:
                live_table.row(finding_row(f, clock))

    progress = Progress.from_option(f"analyzing {args.file}", args.progress)
    analyzer = Analyzer()
    streams = None              # per-stream accounting, for the report's streams table
    if args.format in ("markdown", "html"):
        from ..analysis.stream_summary import StreamSummary
        streams = StreamSummary(analyzer)
    feed, finish = (streams.feed, streams.finish) if streams else (analyzer.feed, analyzer.finish)
    findings: list = []
    hook = progress.attach
    try:
        with StopOnSigint() as guard:
            try:
                n = 0
                # a file is read a batch of events ahead; live input is analysed as it comes
                for batch in in_batches(iter_events(args.file, capture_options(args), summary,
                                                    hook), 1 if live else BATCH):
                    guard.busy = True
                    for ev in batch:
                        legend.feed(ev)
                        if timeline is not None:
                            timeline.feed(ev)
                        new = feed(ev)
                        if new:
                            found(new)
                        if not n & 1023:
                            progress.update()
                        n += 1
                    guard.busy = False
                    if guard.hit:
                        break
            except CaptureError as exc:
                summary.error = str(exc)
    finally:
        progress.close()
    found(finish())
    flow = analyzer.streams.flow.timelines() if args.format == "jsonl" else None
    findings.sort(key=Finding.sort_key)
    summary_line = summary.line() + f", {len(findings)} findings"
    cited = {c for f in findings
             for c in (f.connection, f.fields.get("previous_connection")) if type(c) is int}
    if args.format == "jsonl":
        from ..reports.findings import flow_control_records
        if not stream_jsonl:
            for f in findings:
                out.write(jsonl_line(finding_record(f, legend.record(f.connection))))
        for rec in flow_control_records(flow):
            out.write(jsonl_line(rec))
    elif args.format == "html":
        from ..reports.html import html_report
        from ..reports.streams import TABLE_HEADERS, stream_records, table_rows
        out.write(html_report(args.file, findings, summary, legend,
                              timeline, redacted=args.redact,
                              streams=(TABLE_HEADERS, table_rows(stream_records(
                                  streams.streams, findings)))))
    elif args.format == "markdown":
        from ..reports.markdown import REDACTED_NOTE, markdown_report
        from ..reports.streams import stream_records
        out.write(markdown_report(args.file, findings, summary,
                                  connections={c: legend.label(c) for c in cited
                                               if c is not None},
                                  streams=stream_records(streams.streams, findings),
                                  notes=[REDACTED_NOTE] if args.redact else ()))
    elif live_table is not None:
        out.write("\n" + (tabulate(summary_rows(findings),
                                   headers=("rule", "severity", "count", "title"),
                                   disable_numparse=True) + "\n" if findings
                          else "no findings\n"))
    else:
        out.write(findings_table(findings, clock))
    if args.format == "table" and findings:
        out.write("\n" + legend.table(cited))
    out.flush()
    if args.evidence:
        from ..reports.evidence import write_bundle
        try:
            bundle = write_bundle(capture_copy, findings, summary, args.evidence,
                                    redact=args.redact, options=capture_options(args))
        except OSError as exc:
            print(f"dcpdissect: error: --evidence {os_error(exc)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        _bundle_note(bundle)
    if out is not sys.stdout:
        out.close()
    if _extra_files(args, findings, legend, timeline):
        return EXIT_BAD_INPUT
    print(summary_line, file=sys.stderr)
    capture_notes(summary)
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


def _bundle_note(bundle) -> None:
    """Say on stderr what the evidence bundle holds."""
    if bundle.pcap is None:
        print(f"no findings: no evidence capture written (README.txt and report.md in "
              f"{bundle.path} say so)", file=sys.stderr)
        return
    print(f"evidence written to {bundle.path}: {bundle.pcap.name} with {bundle.frames} "
          f"frames (selection: {bundle.step})", file=sys.stderr)
    if bundle.unreproduced:
        print(f"dcpdissect: warning: the evidence capture does not reproduce "
              f"{len(bundle.unreproduced)} findings: "
              + ", ".join(f"{f.rule} (frame {f.frame})" for f in bundle.unreproduced),
              file=sys.stderr)


def _unknown_rule(ids) -> str | None:
    """``unknown rule 'x' (did you mean ...?)`` for the first id not in the catalogue."""
    import difflib

    from ..analysis.rules import RULES
    for rid in ids:
        if rid not in RULES:
            close = difflib.get_close_matches(rid, RULES, n=3, cutoff=0.6)
            hint = (f"did you mean {', '.join(close)}?" if close
                    else "the rule ids are listed in docs/rules.md")
            return f"unknown rule {rid!r} ({hint})"
    return None


def _output(path: str | None):
    """Where the report goes: stdout, or the file of ``-o`` (None: it cannot be opened)."""
    if not path or path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        print(f"dcpdissect: error: --output {os_error(exc)}", file=sys.stderr)
        return None


def _output_problem(args) -> str | None:
    """Why --plot or --annotate cannot be done (known before reading the capture)."""
    import os
    if args.plot and os.path.exists(args.plot) and not os.path.isdir(args.plot):
        return f"--plot {args.plot}: not a directory"
    if args.annotate and args.file == "-":
        return "--annotate needs a capture file to copy, not stdin"
    if args.annotate and args.redact:
        return ("--annotate copies every frame as captured, documents included; it cannot "
                "honour --redact (--evidence DIR --redact writes a redacted capture)")
    return None


def _shown(findings: list, redact: bool) -> list:
    if not redact:
        return findings
    from ..reports.redact import redact_finding
    return [redact_finding(f) for f in findings]


def _extra_files(args, findings, legend, timeline) -> int:
    """--plot and --annotate; each file written is named on stderr. Exit code."""
    try:
        if args.plot:
            from ..reports.timeline import write_plots
            written = write_plots(args.plot, timeline, findings, legend)
            print(f"{len(written)} timeline files written to {args.plot}", file=sys.stderr)
        if args.annotate:
            from ..reports.annotate import write_annotated
            frames, commented = write_annotated(args.file, args.annotate, findings)
            print(f"annotated capture written to {args.annotate}: {frames} frames, "
                  f"{commented} with finding comments", file=sys.stderr)
    except OSError as exc:
        option = "--plot" if args.plot and not args.annotate else "--annotate"
        print(f"dcpdissect: error: {option} {os_error(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except CaptureError as exc:
        print(f"dcpdissect: error: --annotate {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK
