"""``dcpdissect dissect``: one row per MCBP message of a capture."""

from __future__ import annotations

import difflib
import json
import sys

from tabulate import tabulate

from ..analysis.collections import CollectionsView
from ..protocol import OPCODE_NAMES, opcode_code
from ..reassembly.pdus import Summary
from ..reports.connections import ConnectionLegend
from ..reports.messages import (TABLE_HEADERS, Clock, labelled_json, message_json, message_line,
                                message_record, table_row)
from ..reports.findings import files_block
from ..reports.redact import Pseudonyms, redact_record
from .common import (EXIT_BAD_INPUT, LiveTable, TimeWindow, add_capture_options,
                     add_file_argument, add_output_option, add_progress_option, add_time_option,
                     checked_opcode, close_output, connection_list, end_of_run,
                     error_record, live_output, not_decoded, open_output, parse_follow,
                     parse_instant, parse_vbucket, run_pass, vbucket_list, with_examples)

TABLE_BLOCK = 1000     # rows per printed table block (bounded memory on big captures)
JSONL_BLOCK = 256      # JSON lines per write
SNAPSHOT_MARKER = opcode_code("DcpSnapshotMarker")     # carries a start-seqno convention


def register(sub) -> None:
    p = sub.add_parser("dissect", help="one row per MCBP message of a capture", **with_examples(
        "dcpdissect dissect samples/resume-collapsed.pcap",
        "dcpdissect dissect samples/rollback-correct.pcap --follow vb:3 --time relative",
        "dcpdissect dissect samples/stream-markers.pcap --opcode DcpSnapshotMarker --format jsonl"))
    add_file_argument(p)
    p.add_argument("--format", choices=("table", "jsonl"), default="table")
    p.add_argument("--opcode", type=checked_opcode, action="append",
                   help="only this opcode (number or name, e.g. 0x56 or DcpSnapshotMarker)")
    p.add_argument("--vbucket", type=vbucket_list, action="extend", metavar="N[,M]",
                   help="only the requests of these vbuckets and the responses to them "
                        "(responses carry no vbucket: matched by opaque on their connection), "
                        "e.g. the failover log and rollback answers of its stream requests")
    p.add_argument("--follow", type=parse_follow, metavar="vb:N[,sid:M][,conn:K]",
                   help="every message of one stream in both directions: Add Stream, stream "
                        "request, failover log, rollback or error answers, markers and items, "
                        "their acks, buffer acks, StreamEnd, CloseStream and their responses")
    p.add_argument("--conn", type=connection_list, action="extend", metavar="K[,L]",
                   help="only these connections (the numbers of the conn column)")
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
                   help="replace document keys by same-length pseudonyms (equal keys stay "
                        "equal)")
    add_output_option(p)
    add_time_option(p)
    add_progress_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_dissect)


def cmd_dissect(args) -> int:
    out = open_output(args.output)
    if out is None:
        return EXIT_BAD_INPUT
    try:
        return _dissect(args, out)
    finally:
        if out is not sys.stdout:
            out.close()


def _dissect(args, out) -> int:
    summary = Summary()
    legend = ConnectionLegend()
    live = args.file == "-"
    live_output(args.file)
    writer = _Writer(args, out, Clock(args.time, summary), live)
    rows = _Rows(args, writer, summary)
    observers = [legend, rows]
    # The analyzer, fed as we go, labels each snapshot marker with its start-seqno
    # convention; the records wait in capture order until their markers are labelled.
    if not live and not args.no_conventions:
        from ..analysis.conventions import InCaptureOrder
        from ..analysis.engine import Analyzer
        rows.ordered = InCaptureOrder(writer.emit,
                                      labelled=labelled_json if writer.as_text else None)
        observers.insert(1, Analyzer(on_marker=rows.ordered.label, conventions_only=True))
    # By default no bar when the rows scroll on the same terminal.
    progress = args.progress if args.progress is not None or not out.isatty() else False
    run = run_pass(args, observers, summary, f"dissecting {args.file}", progress)
    failed = not_decoded(args, summary, args.format == "jsonl", out)
    if failed is not None:
        return failed
    writer.flush()
    if summary.error and args.format == "jsonl":
        error_record(args, summary, summary.error, out)
    if args.format == "table" and writer.shown:
        out.write("\n" + legend.table(writer.shown) + files_block(summary))
    close_output(out)
    print(summary.line(), file=sys.stderr)
    if note := rows.nothing_matched(args, legend.opened):
        print(note, file=sys.stderr)
    return end_of_run(summary, run)


class _Rows:
    """An observer of the pass: the record of every message the filters keep
    (``--opcode``, ``--vbucket``, ``--follow``, ``--conn``, ``--stream-id``, ``--from``,
    ``--to``), handed to the writer, through ``ordered`` (an
    :class:`~dcpdissect.analysis.conventions.InCaptureOrder`) when markers are labelled."""

    def __init__(self, args, writer, summary):
        from ..analysis.stream_summary import StreamFilter
        self.opcodes = set(args.opcode or ())
        follow = args.follow or {}

        def chosen(given, name) -> set:
            return set(given or ()) | ({follow[name]} if name in follow else set())
        self.streams = StreamFilter(chosen(args.vbucket, "vb"), chosen(args.stream_id, "sid"),
                                    chosen(args.conn, "conn"), stream_only=bool(follow))
        self.window = TimeWindow(args.time_from, args.time_to, summary)
        self.summary = summary
        self.by_stream, self.by_time = bool(self.streams), bool(self.window)
        self.collections = CollectionsView()    # collection ids and names of document keys
        self.writer = writer
        self.make_record = message_json if writer.as_text else message_record
        self.ordered = None
        self.kept = 0
        self.opcodes_seen: set[int] = set()     # what the capture has, to say what did match
        self.vbuckets_seen: set[int] = set()

    def on_message(self, pdu, msg) -> None:
        doc_key = self.collections.feed(pdu, msg)
        record = None
        self.opcodes_seen.add(msg.opcode)
        if msg.is_request:
            self.vbuckets_seen.add(msg.vbucket)
        if ((not self.by_stream or self.streams.wants(pdu, msg))
                and (not self.opcodes or msg.opcode in self.opcodes)
                and (not self.by_time or self.window.contains(pdu.ts_ns))):
            self.kept += 1
            record = self.make_record(pdu, msg, doc_key,
                                      self.collections.stream_filter(pdu.conn, msg))
            if self.summary.frame_files:
                record = self._placed(record, pdu.frame)
        if self.ordered is not None:
            self.ordered.add(pdu, msg, record)
        elif record is not None:
            if msg.opcode == SNAPSHOT_MARKER and msg.is_request:
                if self.writer.as_text:
                    record = labelled_json(record, None)
                else:
                    record["convention"] = None
            self.writer.emit(record)

    def _placed(self, record, frame: int):
        """A message record of a file set with the file and frame there (``file``,
        ``file_frame``) of its frame."""
        path, number = self.summary.locate(frame)
        if self.writer.as_text:
            return record + f',"file":{json.dumps(path)},"file_frame":{number}'
        record["file"], record["file_frame"] = path, number
        return record

    def on_event(self, ev) -> None:
        self.collections.feed(ev)

    def nothing_matched(self, args, connections=()) -> str | None:
        """When filters kept no message: one line that says so, and what the capture has
        that comes closest (the opcodes present, the vbuckets of the requests, the
        ``connections`` when a connection was asked for)."""
        if self.kept or not (self.opcodes or self.by_stream or self.by_time):
            return None
        present = sorted(OPCODE_NAMES.get(c, f"0x{c:02x}") for c in self.opcodes_seen)
        text = "dcpdissect: no message matches the filters"
        missing = sorted(OPCODE_NAMES.get(c, f"0x{c:02x}") for c in self.opcodes
                         if c not in self.opcodes_seen)
        if missing:
            close = {m: difflib.get_close_matches(m, present, n=2, cutoff=0.5) for m in missing}
            text += "; not in the capture: " + ", ".join(
                m + (f" (did you mean {' or '.join(c)}?)" if c else "") for m, c in close.items())
        text += f"; opcodes present: {', '.join(present) or 'none'}"
        if self.by_stream and self.vbuckets_seen:
            vbs = sorted(self.vbuckets_seen)
            text += f"; vbuckets of its requests: {', '.join(map(str, vbs[:20]))}" + (
                ", ..." if len(vbs) > 20 else "")
        if self.streams.conns and connections:
            conns = sorted(connections)
            text += f"; connections: {', '.join(map(str, conns[:20]))}" + (
                ", ..." if len(conns) > 20 else "")
        return text

    def on_finish(self) -> None:
        if self.ordered is not None:
            self.ordered.close()


class _Writer:
    """The rows on stdout: JSON lines or table blocks (bounded memory on big captures),
    one by one for live input; :attr:`shown` are the connections with a row."""

    def __init__(self, args, out, clock, live: bool):
        self.out, self.clock = out, clock
        self.jsonl, self.redact = args.format == "jsonl", args.redact
        self.pseudonyms = Pseudonyms() if args.redact else None
        # unredacted JSON lines are written straight from the message, without a record
        self.as_text = self.jsonl and not self.redact
        self.table = (LiveTable(out, TABLE_HEADERS)
                      if live and args.format == "table" else None)
        self.block = 1 if live else JSONL_BLOCK
        self.rows: list = []
        self.lines: list = []   # JSON lines not written yet (a file's are written in blocks)
        self.shown: set = set()

    def emit(self, record) -> None:
        if self.as_text:
            self.lines.append(record + "}\n")
            if len(self.lines) >= self.block:
                self.flush()
            return
        if self.redact:
            record = redact_record(record, self.pseudonyms)
        self.shown.add(record["connection"])
        if self.jsonl:
            self.lines.append(message_line(record))
            if len(self.lines) >= self.block:
                self.flush()
        elif self.table is not None:
            self.table.row(table_row(record, self.clock))
        else:
            self.rows.append(table_row(record, self.clock))
            if len(self.rows) >= TABLE_BLOCK:
                self.flush()

    def flush(self) -> None:
        if self.lines:
            self.out.write("".join(self.lines))
            self.lines.clear()
        if self.rows:
            self.out.write(tabulate(self.rows, headers=TABLE_HEADERS, disable_numparse=True,
                                    tablefmt="simple") + "\n")
            self.rows.clear()
