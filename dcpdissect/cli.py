"""Command line: ``dcpdissect dissect FILE`` (more subcommands register themselves here)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from tabulate import tabulate

from . import __version__
from .capture.readers import CaptureError
from .codec import decode
from .protocol import OPCODE_NAMES, opcode_code
from .reassembly.pdus import Options, Pdu, Summary, iter_events
from .reports.messages import TABLE_HEADERS, jsonl_line, message_record, table_row

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
TABLE_BLOCK = 1000     # rows per printed table block (bounded memory on big captures)
SNAPSHOT_MARKER = opcode_code("DcpSnapshotMarker")     # carries a start-seqno convention
_INTERRUPTED = ("dcpdissect: interrupted: stopped reading; the results cover the input "
                "read so far")


def parse_opcode(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        pass
    wanted = text.replace("-", "").replace("_", "").lower()
    for code, name in OPCODE_NAMES.items():
        if name.lower() == wanted or name.lower() == "dcp" + wanted:
            return code
    raise argparse.ArgumentTypeError(f"unknown opcode {text!r}")


def checked_opcode(text: str) -> int:
    code = parse_opcode(text)
    if not 0 <= code <= 0xFF:
        raise argparse.ArgumentTypeError(f"opcode {text!r} out of range (0x00-0xff)")
    return code


def _int_in(lo: int, hi: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not a number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{what} {text!r} out of range ({lo}-{hi})")
        return value
    parse.__name__ = what
    return parse


parse_port = _int_in(1, 65535, "port")
parse_vbucket = _int_in(0, 65535, "vbucket")


def _live_output(path: str) -> None:
    """Live input (stdin): every line of output leaves at once (issue 15, item 4)."""
    if path == "-":
        try:
            sys.stdout.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass


class StopOnSigint:
    """SIGINT stops reading: while the reader runs (or waits for input) it raises
    KeyboardInterrupt there; while an event is being processed it is noted and the loop
    stops after that event (``hit``), so the analyzer is never left half-fed. The
    previous handler is back on exit, so a second Ctrl-C during output interrupts."""

    def __init__(self):
        self.busy = False
        self.hit = False
        self._old = None

    def _handler(self, signum, frame):
        self.hit = True
        if not self.busy:
            raise KeyboardInterrupt

    def __enter__(self):
        try:
            self._old = signal.signal(signal.SIGINT, self._handler)
        except ValueError:          # not the main thread: leave SIGINT alone
            self._old = None
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        if exc[0] is KeyboardInterrupt:
            self.hit = True
            return True             # stop reading; the caller prints what it has
        return False


class LiveTable:
    """A table written row by row (live input): the header once, columns as wide as the
    header and first row, widened when a later cell is longer."""

    def __init__(self, out, headers):
        self.out, self.headers, self.widths = out, [str(h) for h in headers], None

    def _line(self, cells) -> None:
        last = len(cells) - 1
        self.out.write("  ".join(c if i == last else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, self.widths))).rstrip()
                       + "\n")

    def row(self, cells) -> None:
        cells = [str(c) for c in cells]
        if self.widths is None:
            self.widths = [max(len(h), len(c)) for h, c in zip(self.headers, cells)]
            self._line(self.headers)
            self._line(["-" * w for w in self.widths])
        else:
            self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells)]
        self._line(cells)


def add_capture_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=parse_port, action="append", default=[], metavar="N",
                   help="also decode TCP port N as MCBP (11210 and 11209 always are)")
    p.add_argument("--any-port", action="store_true",
                   help="heuristic: try every TCP connection, whatever its ports")


def capture_options(args) -> Options:
    return Options(ports=tuple(args.port), any_port=args.any_port)


def cmd_dissect(args) -> int:
    opcodes = set(args.opcode or ())
    vbuckets = set(args.vbucket or ())
    summary = Summary()
    _live_output(args.file)
    out = sys.stdout
    rows: list = []
    first_block = True
    live_table = (LiveTable(out, TABLE_HEADERS)
                  if args.file == "-" and args.format == "table" else None)

    def flush_rows():
        nonlocal first_block
        if rows:
            out.write(tabulate(rows, headers=TABLE_HEADERS, disable_numparse=True,
                               tablefmt="simple") + "\n")
            rows.clear()
            first_block = False

    def emit(record: dict) -> None:
        if args.format == "jsonl":
            out.write(jsonl_line(record))
        elif live_table is not None:
            live_table.row(table_row(record))
        else:
            rows.append(table_row(record))
            if len(rows) >= TABLE_BLOCK:
                flush_rows()

    # The analyzer, fed as we go, labels each snapshot marker with its start-seqno
    # convention; the records wait in capture order until their markers are labelled.
    analyzer = ordered = None
    if args.file != "-" and not args.no_conventions:
        from .analysis.conventions import InCaptureOrder
        from .analysis.engine import Analyzer
        ordered = InCaptureOrder(emit)
        analyzer = Analyzer(on_marker=ordered.label)
    status = EXIT_OK
    with StopOnSigint() as guard:
        try:
            for ev in iter_events(args.file, capture_options(args), summary):
                guard.busy = True
                if analyzer is not None:
                    analyzer.feed(ev)
                if type(ev) is Pdu:
                    msg = decode(ev.data)
                    record = None
                    if (not opcodes or msg.opcode in opcodes) and (not vbuckets
                                                                   or msg.vbucket in vbuckets):
                        record = message_record(ev, msg)
                    if ordered is not None:
                        ordered.add(ev, msg, record)
                    elif record is not None:
                        if msg.opcode == SNAPSHOT_MARKER and msg.is_request:
                            record["convention"] = None
                        emit(record)
                guard.busy = False
                if guard.hit:
                    break
        except CaptureError as exc:
            status = EXIT_BAD_INPUT
            summary.error = str(exc)
    if analyzer is not None:
        analyzer.finish()
        ordered.close()
    flush_rows()
    out.flush()
    print(summary.line(), file=sys.stderr)
    if guard.hit:
        print(_INTERRUPTED, file=sys.stderr)
    if status == EXIT_BAD_INPUT:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
    if status == EXIT_OK and (no_mcbp := _ports_report(summary)):
        return no_mcbp
    return status


def _ports_report(summary) -> int:
    """Issue 15: name the ports found by the heuristic; exit 2 when no MCBP was found."""
    if summary.port_note():
        print(summary.port_note(), file=sys.stderr)
    if summary.no_mcbp:
        print(summary.no_mcbp_hint(), file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


FAIL_ON = ("error", "warning", "info", "never")


def _finding_row(f) -> list:
    from .reports.messages import iso_time
    return [f.frame if f.frame is not None else "-",
            iso_time(f.ts_ns)[11:-4] if f.ts_ns is not None else "-",
            f.connection if f.connection is not None else "-",
            f.vbucket if f.vbucket is not None else "-", f.rule, f.message]


def _check_evidence_dir(where: str) -> int:
    from .reports.evidence import check_evidence_dir
    problem = check_evidence_dir(where)
    if problem:
        print(f"dcpdissect: error: --evidence {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def cmd_analyze(args) -> int:
    from .analysis.engine import Analyzer
    from .analysis.findings import Finding
    from .analysis.rules import SEVERITY_RANK
    from .reports.findings import finding_record, findings_table, summary_rows
    from .reports.progress import Progress

    if args.evidence and _check_evidence_dir(args.evidence):
        return EXIT_BAD_INPUT
    live = args.file == "-"
    _live_output(args.file)
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
        from .reports.findings import flow_control_records
        if not stream_jsonl:
            for f in findings:
                out.write(jsonl_line(finding_record(f)))
        for rec in flow_control_records(flow):
            out.write(jsonl_line(rec))
    elif args.format == "markdown":
        from .reports.markdown import markdown_report
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
        from .reports.evidence import write_evidence
        try:
            where = write_evidence(args.file, findings, summary, args.evidence,
                                   redact=args.redact)
        except OSError as exc:
            print(f"dcpdissect: error: --evidence {_os_error(exc)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"evidence written to {where}", file=sys.stderr)
    print(summary_line, file=sys.stderr)
    if guard.hit:
        print(_INTERRUPTED, file=sys.stderr)
    if summary.error:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if _ports_report(summary):
        return EXIT_BAD_INPUT
    if args.fail_on != "never":
        threshold = SEVERITY_RANK[args.fail_on]
        if any(SEVERITY_RANK[f.severity] >= threshold for f in findings):
            return EXIT_FINDINGS
    return EXIT_OK


def _os_error(exc: OSError) -> str:
    """``path: reason`` of an OSError, without Python's errno decoration."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


def cmd_rollback_check(args) -> int:
    from .analysis.rollback import load_failover_json, needs_rollback, sanitize, table_text

    try:
        with open(args.failover, encoding="utf-8") as fh:
            table = sanitize(load_failover_json(fh.read()), args.high_seqno)
    except (OSError, ValueError) as exc:
        print(f"dcpdissect: error: {args.failover}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    local_purge = 0 if args.ignore_purged_tombstones else args.purge_seqno
    out = sys.stdout
    if args.format == "text":
        out.write(f"Simulating behaviour of VBucket with highSeqno: {args.high_seqno}, "
                  f"purgeSeqno:{args.purge_seqno}, failoverTable:\n{table_text(table)}\n\n")
    for lineno, line in enumerate(sys.stdin, 1):
        parts = line.split()
        if not parts:
            continue
        try:
            if len(parts) != 4:
                raise ValueError(f"expected 4 fields, got {len(parts)}")
            uuid, snap_start, snap_end, start = (int(p, 0) for p in parts)
        except ValueError as exc:
            print(f"dcpdissect: warning: stdin line {lineno}: {exc}; "
                  "want '<uuid> <snapStart> <snapEnd> <start>'", file=sys.stderr)
            continue
        d = needs_rollback(table, start, args.high_seqno, uuid, snap_start, snap_end,
                           local_purge, args.client_purge_seqno, args.strict_uuid)
        if args.format == "jsonl":
            out.write(json.dumps({"uuid": uuid, "snap_start": snap_start, "snap_end": snap_end,
                                  "start": start, "rollback": d.rollback,
                                  "rollback_seqno": d.seqno if d.rollback else None,
                                  "reason": d.reason or None}) + "\n")
            continue
        out.write(f"Testing UUID:{uuid} snapshot:{{{snap_start},{snap_end}}} start:{start}\n")
        out.write(f"  Rollback:{'true' if d.rollback else 'false'}\n")
        if d.rollback:
            out.write(f"  Requested rollback seqno:{d.seqno}\n  Reason: {d.reason}\n")
    return EXIT_OK


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one ``dcpdissect: error:`` line and exit 2 (issue 15, item 7);
    subcommand parsers are of the same class."""

    def error(self, message):
        self.exit(EXIT_BAD_INPUT,
                  f"dcpdissect: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="dcpdissect",
                                     description="Dissect and analyse Couchbase DCP captures.")
    parser.add_argument("--version", action="version", version=f"dcpdissect {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("dissect", help="one row per MCBP message of a capture")
    p.add_argument("file", help="pcap or pcapng file (gzip allowed), or - for stdin")
    p.add_argument("--format", choices=("table", "jsonl"), default="table")
    p.add_argument("--opcode", type=checked_opcode, action="append",
                   help="only this opcode (number or name, e.g. 0x56 or DcpSnapshotMarker)")
    p.add_argument("--vbucket", type=parse_vbucket, action="append", help="only this vbucket")
    p.add_argument("--no-conventions", action="store_true",
                   help="skip the start-seqno convention of snapshot markers (saves "
                        "running the analyzer; never computed for stdin)")
    add_capture_options(p)
    p.set_defaults(func=cmd_dissect)

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

    p = sub.add_parser("rollback-check",
                       help="simulate the server's rollback decision (humpty_dumpty compatible)",
                       description="Reads '<uuid> <snapStart> <snapEnd> <start>' lines on stdin.")
    p.add_argument("failover", metavar="FAILOVER.json",
                   help='failover table, newest first: [{"id": uuid, "seq": seqno}, ...]')
    p.add_argument("high_seqno", type=int, metavar="HIGH_SEQNO")
    p.add_argument("purge_seqno", type=int, metavar="PURGE_SEQNO")
    p.add_argument("--client-purge-seqno", type=int, default=0, metavar="N",
                   help="the purge_seqno the client sends in its stream request value")
    p.add_argument("--strict-uuid", action="store_true",
                   help="StrictVbUuid flag: check the uuid even at start 0")
    p.add_argument("--ignore-purged-tombstones", action="store_true",
                   help="IgnorePurgedTombstones flag: skip the purge rule")
    p.add_argument("--format", choices=("text", "jsonl"), default="text")
    p.set_defaults(func=cmd_rollback_check)

    from .luagen import register_cli as register_lua
    from .pipeline import register_cli as register_pipeline
    register_lua(sub)
    register_pipeline(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code else EXIT_OK
    try:
        return args.func(args)
    except BrokenPipeError:
        # The reader went away (``| head``): end quietly. Point stdout at /dev/null so the
        # interpreter's final flush does not complain either.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        print("dcpdissect: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:          # any other I/O error: one line, exit 2
        print(f"dcpdissect: error: {_os_error(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
