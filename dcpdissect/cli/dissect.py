"""``dcpdissect dissect``: one row per MCBP message of a capture."""

from __future__ import annotations

import sys

from tabulate import tabulate

from ..analysis.collections import CollectionsView
from ..capture.readers import CaptureError
from ..codec import decode
from ..protocol import opcode_code
from ..reassembly.batches import BATCH, in_batches
from ..reassembly.pdus import Pdu, Summary, iter_events
from ..reports.connections import ConnectionLegend
from ..reports.messages import (TABLE_HEADERS, Clock, labelled_json, message_json, message_line,
                                message_record, table_row)
from ..reports.progress import Progress
from ..reports.redact import redact_record
from .common import (EXIT_BAD_INPUT, EXIT_OK, INTERRUPTED, LiveTable, StopOnSigint,
                     TimeWindow, add_capture_options, add_progress_option, add_time_option,
                     capture_notes, capture_options, checked_opcode, live_output,
                     parse_connection, parse_follow, parse_instant, parse_vbucket, ports_report,
                     with_examples)

TABLE_BLOCK = 1000     # rows per printed table block (bounded memory on big captures)
JSONL_BLOCK = 256      # JSON lines per write
SNAPSHOT_MARKER = opcode_code("DcpSnapshotMarker")     # carries a start-seqno convention


def register(sub) -> None:
    p = sub.add_parser("dissect", help="one row per MCBP message of a capture", **with_examples(
        "dcpdissect dissect samples/resume-collapsed.pcap",
        "dcpdissect dissect samples/rollback-correct.pcap --follow vb:3 --time relative",
        "dcpdissect dissect samples/stream-markers.pcap --opcode DcpSnapshotMarker --format jsonl"))
    p.add_argument("file", help="pcap or pcapng file (gzip allowed), or - for stdin")
    p.add_argument("--format", choices=("table", "jsonl"), default="table")
    p.add_argument("--opcode", type=checked_opcode, action="append",
                   help="only this opcode (number or name, e.g. 0x56 or DcpSnapshotMarker)")
    p.add_argument("--vbucket", type=parse_vbucket, action="append",
                   help="only the requests of this vbucket and the responses to them "
                        "(responses carry no vbucket: matched by opaque on their connection), "
                        "e.g. the failover log and rollback answers of its stream requests")
    p.add_argument("--follow", type=parse_follow, metavar="vb:N[,sid:M][,conn:K]",
                   help="every message of one stream in both directions: Add Stream, stream "
                        "request, failover log, rollback or error answers, markers and items, "
                        "their acks, buffer acks, StreamEnd, CloseStream and their responses")
    p.add_argument("--conn", type=parse_connection, action="append", metavar="K",
                   help="only connection K (the numbers of the conn column)")
    p.add_argument("--stream-id", type=parse_vbucket, action="append", metavar="M",
                   help="only the requests of stream id M and the responses to them")
    p.add_argument("--from", dest="time_from", type=parse_instant, metavar="TIME",
                   help="only frames at or after TIME: seconds after the capture's first frame "
                        "(2.5) or an ISO 8601 time (2026-11-24T10:22:13.05Z, UTC if no offset)")
    p.add_argument("--to", dest="time_to", type=parse_instant, metavar="TIME",
                   help="only frames at or before TIME (as --from)")
    p.add_argument("--no-conventions", action="store_true",
                   help="skip the start-seqno convention of snapshot markers (saves "
                        "running the analyzer; never computed for stdin)")
    p.add_argument("--redact", action="store_true",
                   help="replace document keys by placeholders of the same length")
    add_time_option(p)
    add_progress_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_dissect)


def cmd_dissect(args) -> int:
    from ..analysis.stream_summary import StreamFilter
    opcodes = set(args.opcode or ())
    follow = args.follow or {}

    def chosen(given, name) -> set:
        return set(given or ()) | ({follow[name]} if name in follow else set())
    streams = StreamFilter(chosen(args.vbucket, "vb"), chosen(args.stream_id, "sid"),
                           chosen(args.conn, "conn"), stream_only=bool(follow))
    summary = Summary()
    window = TimeWindow(args.time_from, args.time_to, summary)
    clock = Clock(args.time, summary)
    legend = ConnectionLegend()
    collections = CollectionsView()     # collection ids and names of document keys
    shown: set = set()          # connections with a row: named in the table's legend
    live_output(args.file)
    out = sys.stdout
    rows: list = []
    first_block = True
    live_table = (LiveTable(out, TABLE_HEADERS)
                  if args.file == "-" and args.format == "table" else None)

    lines: list = []            # JSON lines not written yet (a file's are written in blocks)
    line_block = 1 if args.file == "-" else JSONL_BLOCK

    def flush_rows():
        nonlocal first_block
        if lines:
            out.write("".join(lines))
            lines.clear()
        if rows:
            out.write(tabulate(rows, headers=TABLE_HEADERS, disable_numparse=True,
                               tablefmt="simple") + "\n")
            rows.clear()
            first_block = False

    jsonl, redact = args.format == "jsonl", args.redact
    # unredacted JSON lines are written straight from the message, without a record
    as_text = jsonl and not redact
    make_record = message_json if as_text else message_record

    def emit(record) -> None:
        if as_text:
            lines.append(record + "}\n")
            if len(lines) >= line_block:
                flush_rows()
            return
        if redact:
            record = redact_record(record)
        shown.add(record["connection"])
        if jsonl:
            lines.append(message_line(record))
            if len(lines) >= line_block:
                flush_rows()
        elif live_table is not None:
            live_table.row(table_row(record, clock))
        else:
            rows.append(table_row(record, clock))
            if len(rows) >= TABLE_BLOCK:
                flush_rows()

    # The analyzer, fed as we go, labels each snapshot marker with its start-seqno
    # convention; the records wait in capture order until their markers are labelled.
    analyzer = ordered = None
    if args.file != "-" and not args.no_conventions:
        from ..analysis.conventions import InCaptureOrder
        from ..analysis.engine import Analyzer
        ordered = InCaptureOrder(emit, labelled=labelled_json if as_text else None)
        analyzer = Analyzer(on_marker=ordered.label, conventions_only=True)
    status = EXIT_OK
    # The rows go to stdout: by default no bar when they scroll on the same terminal.
    progress = Progress.from_option(f"dissecting {args.file}", args.progress
                                    if args.progress is not None or not out.isatty() else False)
    with StopOnSigint() as guard:
        try:
            n = 0
            by_stream, by_time = bool(streams), bool(window)     # the filters asked for
            # a file is read a batch of events ahead; live input is shown as it comes
            for batch in in_batches(iter_events(args.file, capture_options(args), summary,
                                                progress.attach),
                                    1 if args.file == "-" else BATCH):
                guard.busy = True
                for ev in batch:
                    if not n & 1023:
                        progress.update()
                    n += 1
                    legend.feed(ev)
                    msg = decode(ev.data) if type(ev) is Pdu else None
                    if analyzer is not None:    # decoded once, for the analyzer and the record
                        if msg is None:
                            analyzer.feed(ev)
                        else:
                            analyzer.feed_message(ev, msg)
                    if msg is not None:
                        doc_key = collections.feed(ev, msg)
                        record = None
                        if ((not by_stream or streams.wants(ev, msg))
                                and (not opcodes or msg.opcode in opcodes)
                                and (not by_time or window.contains(ev.ts_ns))):
                            record = make_record(ev, msg, doc_key,
                                                 collections.stream_filter(ev.conn, msg))
                        if ordered is not None:
                            ordered.add(ev, msg, record)
                        elif record is not None:
                            if msg.opcode == SNAPSHOT_MARKER and msg.is_request:
                                if as_text:
                                    record = labelled_json(record, None)
                                else:
                                    record["convention"] = None
                            emit(record)
                    else:
                        collections.feed(ev)
                guard.busy = False
                if guard.hit:
                    break
        except CaptureError as exc:
            status = EXIT_BAD_INPUT
            summary.error = str(exc)
        finally:
            progress.close()
    if analyzer is not None:
        analyzer.finish()
        ordered.close()
    flush_rows()
    if args.format == "table" and shown:
        out.write("\n" + legend.table(shown))
    out.flush()
    print(summary.line(), file=sys.stderr)
    capture_notes(summary)
    if guard.hit:
        print(INTERRUPTED, file=sys.stderr)
    if status == EXIT_BAD_INPUT:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
    if status == EXIT_OK and (no_mcbp := ports_report(summary)):
        return no_mcbp
    return status

