"""``dcpdissect analyze``: findings of a capture as a table, jsonl, Markdown or an HTML
page, evidence bundles, timeline plots and a capture annotated with its findings."""

from __future__ import annotations

import sys

from tabulate import tabulate

from ..capture.readers import CaptureError
from ..reassembly.pdus import Summary, counted
from ..reports.findings import (FINDING_HEADERS, INFO_ROWS, finding_record, finding_row,
                                findings_table, files_block, fold, summary_rows)
from ..reports.messages import Clock, jsonl_line
from .common import (EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, INTERRUPTED, LiveTable,
                     add_capture_options, add_fail_on_option, add_file_argument,
                     add_min_severity_option, add_output_option, add_progress_option, at_least,
                     add_time_option, capture_options, capture_notes, fails, live_output,
                     error_record, not_decoded, open_output, os_error, ports_report,
                     run_pass, with_examples)

def register(sub) -> None:
    p = sub.add_parser("analyze", help="find spec violations in a capture", **with_examples(
        "dcpdissect analyze samples/resume-collapsed.pcap",
        "dcpdissect analyze samples/resume-collapsed.pcap --format html -o report.html",
        "dcpdissect analyze samples/rollback-violations.pcap --plot plots --annotate "
        "annotated.pcapng --fail-on never",
        "dcpdissect analyze samples/resume-collapsed.pcap --format markdown --evidence bundle"))
    add_file_argument(p)
    p.add_argument("--format", choices=("table", "jsonl", "markdown", "html"), default="table",
                   help="html: one self-contained page (findings first, each with the "
                        "timeline of its moment; then the capture, connections and streams)")
    add_output_option(p, "the report")
    p.add_argument("--plot", metavar="DIR",
                   help="write the timeline of every vbucket to DIR as SVG and PNG, and "
                        "the timeline of each finding's moment as SVG")
    p.add_argument("--annotate", metavar="OUT.pcapng",
                   help="write a copy of the capture with a packet comment '[rule] message' "
                        "on every frame of every finding")
    add_fail_on_option(p)
    add_min_severity_option(p)
    p.add_argument("--evidence", metavar="DIR|FILE.zip|FILE.tar.gz",
                   help="write a bug-report bundle: trimmed capture, Markdown report, tshark "
                        "command; into a directory, or as one archive to attach")
    p.add_argument("--redact", action="store_true",
                   help="replace document keys and values by same-length pseudonyms "
                        "(equal ones stay equal) in every output (table, jsonl, markdown, "
                        "html, --evidence bundle)")
    add_progress_option(p)
    p.add_argument("--rule", action="append", metavar="ID",
                   help="report only this rule (repeatable; ids in docs/rules.md)")
    p.add_argument("--exclude-rule", action="append", metavar="ID",
                   help="do not report this rule (repeatable)")
    add_time_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_analyze)


def _argument_problem(args) -> bool:
    """Say on stderr what is wrong with the arguments before the capture is read."""
    problem = _unknown_rule(args.rule or ()) or _unknown_rule(args.exclude_rule or ())
    if not problem and args.evidence:
        from ..reports.evidence import check_evidence_dir
        if evidence := check_evidence_dir(args.evidence):
            problem = f"--evidence {evidence}"
    problem = problem or _output_problem(args)
    if problem:
        print(f"dcpdissect: error: {problem}", file=sys.stderr)
    return bool(problem)


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
    from ..analysis.stream_summary import StreamSummary
    from ..reports.connections import ConnectionLegend

    if _argument_problem(args):
        return EXIT_BAD_INPUT
    live_output(args.file)
    out = open_output(args.output)
    if out is None:
        return EXIT_BAD_INPUT
    summary = Summary()
    clock = Clock(args.time, summary)
    legend = ConnectionLegend()
    timeline = moments = None
    if args.plot:
        from ..reports.timeline import TimelineCollector
        timeline = TimelineCollector()
    if args.format == "html" or args.plot:
        from ..reports.moments import MomentCollector
        moments = MomentCollector(legend.where)
    analyzer = Analyzer()
    streams = None      # per-stream accounting: the reports' streams table and each
    if args.format != "table" or args.evidence:     # finding record's stream (~10% time)
        streams = StreamSummary(analyzer)
    shown = _Shown(args, out, legend, clock, summary, moments)
    observers = [o for o in (legend, timeline, moments, streams or analyzer, shown)
                 if o is not None]
    run = run_pass(args, observers, summary, f"analyzing {args.file}", args.progress)
    failed = not_decoded(args, summary, args.format == "jsonl", out)
    if failed is not None:
        return failed
    shown.write_waiting()
    findings = sorted(shown.findings, key=Finding.sort_key)
    if args.format in ("markdown", "html"):
        run.progress.stage(f"writing the {args.format} report")
    _write_report(args, out, findings, summary, legend, moments, streams, analyzer, shown)
    run.progress.close()
    out.flush()
    if args.evidence and _write_evidence(args, capture_copy,
                                         sorted(shown.kept, key=Finding.sort_key), summary,
                                         run.progress):
        return EXIT_BAD_INPUT
    if out is not sys.stdout:
        out.close()
    if _extra_files(args, findings, legend, timeline, moments, run.progress):
        return EXIT_BAD_INPUT
    print(f"{summary.line()}, {counted(len(findings), 'finding')}", file=sys.stderr)
    capture_notes(summary)
    if run.interrupted:
        print(INTERRUPTED, file=sys.stderr)
    return _exit_status(args, summary, findings)


class _Shown:
    """The findings ``analyze`` reports, as a pass finds them: those ``--rule`` and
    ``--exclude-rule`` keep, redacted with ``--redact``. In jsonl, and in the table of
    live input, they leave as they are found once a message has been decoded (before that,
    the capture may hold no MCBP and have no result); otherwise they are written sorted by
    frame at the end."""

    def __init__(self, args, out, legend, clock, summary, moments=None):
        self.moments = moments      # told the findings kept, for their timelines
        self.rules, self.excluded = args.rule, args.exclude_rule or ()
        self.min_severity = args.min_severity
        self.redact = args.redact
        if args.redact:         # keys as same-length stand-ins, equal keys equal
            from ..reports.redact import Pseudonyms
            self.pseudonyms = Pseudonyms()
        self.out, self.legend, self.clock, self.summary = out, legend, clock, summary
        live = args.file == "-"
        self.jsonl = args.format == "jsonl"
        self.table = (LiveTable(out, FINDING_HEADERS)
                      if live and args.format == "table" else None)
        self.live_counts: dict[str, int] = {}
        self.held: dict[str, list] = {}  # live table: rule -> findings waiting to be folded
        self.waiting: list = []         # found, not yet written (jsonl, live table)
        self.findings: list = []        # as reported (redacted with --redact)
        self.kept: list = []            # as found (the evidence bundle redacts its own way)

    def on_findings(self, new: list) -> None:
        if self.rules or self.excluded:
            new = [f for f in new if (not self.rules or f.rule in self.rules)
                   and f.rule not in self.excluded]
        if self.min_severity != "info":
            new = at_least(new, self.min_severity)
        self.kept.extend(new)
        if self.moments is not None:
            self.moments.note_findings(new)
        if self.redact:
            from ..reports.redact import redact_finding
            new = [redact_finding(f, self.pseudonyms) for f in new]
        self.findings.extend(new)
        self.waiting.extend(new)
        if self.summary.pdus:       # not before a message is decoded: it may never be
            self.write_waiting()

    def write_waiting(self) -> None:
        """Write the findings that wait (jsonl, live table), in frame order."""
        from ..analysis.findings import Finding
        waiting, self.waiting = sorted(self.waiting, key=Finding.sort_key), []
        if self.jsonl:
            for f in waiting:
                self.out.write(jsonl_line(finding_record(f, self.legend.record(f.connection),
                                                         self.summary.locate(f.frame))))
            self.out.flush()
        elif self.table is not None:
            for f in waiting:
                if not self._held_back(f):
                    self.table.row(finding_row(f, self.clock))

    def _held_back(self, f) -> bool:
        """Live table: an info rule's findings beyond its first rows wait for one folded row
        at the end (:func:`~dcpdissect.reports.findings.folded`)."""
        if f.severity != "info" or f.rule in (self.rules or ()):
            return False
        self.live_counts[f.rule] = n = self.live_counts.get(f.rule, 0) + 1
        if n <= INFO_ROWS:
            return False
        self.held.setdefault(f.rule, []).append(f)
        return True

    def write_held(self) -> None:
        """The folded rows of the findings :meth:`_held_back` kept."""
        for rid, rest in self.held.items():
            for f in rest if len(rest) == 1 else [fold(rid, rest)]:
                self.table.row(finding_row(f, self.clock))


def _write_report(args, out, findings, summary, legend, moments, streams, analyzer,
                  shown) -> None:
    """The report in ``--format``, then (tables) the legend of the connections cited."""
    cited = {c for f in findings
             for c in (f.connection, f.fields.get("previous_connection")) if type(c) is int}
    if args.format == "jsonl":
        from ..reports.findings import flow_control_records
        for rec in flow_control_records(analyzer.streams.flow.timelines()):
            out.write(jsonl_line(rec))
        if summary.error:
            error_record(args, summary, summary.error, out)
    elif args.format == "html":
        from ..reports.html import html_report
        from ..reports.streams import TABLE_HEADERS, stream_records, table_rows
        out.write(html_report(args.file, findings, summary, legend,
                              moments, redacted=args.redact, whole=args.rule or (),
                              streams=(TABLE_HEADERS, table_rows(stream_records(
                                  streams.streams, findings)))))
    elif args.format == "markdown":
        from ..reports.markdown import REDACTED_NOTE, markdown_report
        from ..reports.streams import stream_records
        out.write(markdown_report(args.file, findings, summary,
                                  connections={c: legend.label(c) for c in cited},
                                  streams=stream_records(streams.streams, findings),
                                  notes=[REDACTED_NOTE] if args.redact else (),
                                  whole=args.rule or ()))
    elif shown.table is not None:
        shown.write_held()
        out.write("\n" + (tabulate(summary_rows(findings),
                                   headers=("rule", "severity", "count", "title"),
                                   disable_numparse=True) + "\n" if findings
                          else "no findings\n"))
    else:
        out.write(findings_table(findings, shown.clock, whole=args.rule or ()))
    if args.format == "table" and findings:
        out.write("\n" + legend.table(cited))
        out.write(files_block(summary))


def _write_evidence(args, capture_copy: str, findings, summary, progress) -> int:
    """``--evidence DIR``: the bundle, said on stderr. Exit code."""
    from ..reports.evidence import is_archive, write_archive, write_bundle
    write = write_archive if is_archive(args.evidence) else write_bundle
    progress.stage(f"writing the evidence bundle {args.evidence}")
    try:
        bundle = write(capture_copy, findings, summary, args.evidence,
                       redact=args.redact, options=capture_options(args))
    except OSError as exc:
        progress.close()
        print(f"dcpdissect: error: --evidence {os_error(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    progress.close()
    _bundle_note(bundle)
    return EXIT_OK


def _exit_status(args, summary, findings) -> int:
    """2 for a capture fault or no MCBP, 1 for a finding at or above ``--fail-on``."""
    if summary.error:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if ports_report(summary):
        return EXIT_BAD_INPUT
    return EXIT_FINDINGS if fails(findings, args.fail_on) else EXIT_OK


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


def _extra_files(args, findings, legend, timeline, moments, progress) -> int:
    """--plot and --annotate; each file written is named on stderr. Exit code."""
    try:
        if args.plot:
            from ..reports.moment_plot import write_moments
            from ..reports.timeline import write_plots
            progress.stage(f"plotting the timelines into {args.plot}")
            written = write_plots(args.plot, timeline, findings, legend)
            written += write_moments(args.plot, moments, findings)
            progress.close()
            print(f"{len(written)} timeline files written to {args.plot}", file=sys.stderr)
        if args.annotate:
            from ..reports.annotate import write_annotated
            progress.stage(f"writing the annotated capture {args.annotate}")
            frames, commented = write_annotated(args.file, args.annotate, findings)
            progress.close()
            print(f"annotated capture written to {args.annotate}: {frames} frames, "
                  f"{commented} with finding comments", file=sys.stderr)
    except OSError as exc:
        progress.close()
        option = "--plot" if args.plot and not args.annotate else "--annotate"
        print(f"dcpdissect: error: {option} {os_error(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except CaptureError as exc:
        progress.close()
        print(f"dcpdissect: error: --annotate {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK
