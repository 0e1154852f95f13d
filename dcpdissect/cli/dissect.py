"""``dcpdissect dissect``: one row per MCBP message of a capture."""

from __future__ import annotations

import sys

from tabulate import tabulate

from ..capture.readers import CaptureError
from ..codec import decode
from ..protocol import opcode_code
from ..reassembly.pdus import Pdu, Summary, iter_events
from ..reports.messages import TABLE_HEADERS, jsonl_line, message_record, table_row
from .common import (EXIT_BAD_INPUT, EXIT_OK, INTERRUPTED, LiveTable, StopOnSigint,
                     add_capture_options, capture_options, checked_opcode, live_output,
                     parse_vbucket, ports_report)

TABLE_BLOCK = 1000     # rows per printed table block (bounded memory on big captures)
SNAPSHOT_MARKER = opcode_code("DcpSnapshotMarker")     # carries a start-seqno convention


def register(sub) -> None:
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


def cmd_dissect(args) -> int:
    opcodes = set(args.opcode or ())
    vbuckets = set(args.vbucket or ())
    summary = Summary()
    live_output(args.file)
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
        from ..analysis.conventions import InCaptureOrder
        from ..analysis.engine import Analyzer
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
        print(INTERRUPTED, file=sys.stderr)
    if status == EXIT_BAD_INPUT:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
    if status == EXIT_OK and (no_mcbp := ports_report(summary)):
        return no_mcbp
    return status

