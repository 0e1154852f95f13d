"""``dcpdissect streams``: one row per DCP stream of a capture."""

from __future__ import annotations

import argparse
import sys

from ..reassembly.pdus import Summary
from ..reports.messages import jsonl_line
from .common import (EXIT_BAD_INPUT, EXIT_OK, INTERRUPTED, add_capture_options, capture_notes,
                     error_record, not_decoded, ports_report, run_pass)

EXAMPLES = """\
examples:
  dcpdissect streams samples/rollback-correct.pcap
  dcpdissect streams samples/rollback-correct.pcap --format jsonl
"""


def register(sub) -> None:
    p = sub.add_parser(
        "streams", help="one row per DCP stream: request, answer, items, how it ended",
        description="One row per DCP stream (a stream request, or a producer's first message "
                    "for a stream whose request was not captured): its connection, vbucket "
                    "and stream id, the requested range, the answer, markers and items by "
                    "opcode, seqnos, the last snapshot, how it ended, its duration and the "
                    "findings on it by severity.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="pcap or pcapng file (gzip allowed), or - for stdin")
    p.add_argument("--format", choices=("table", "jsonl"), default="table")
    add_capture_options(p)
    p.set_defaults(func=cmd_streams)


def cmd_streams(args) -> int:
    from ..analysis.engine import Analyzer
    from ..analysis.stream_summary import StreamSummary
    from ..reports.streams import stream_records, streams_table

    summary = Summary()
    streams = StreamSummary(Analyzer())
    run = run_pass(args, [streams], summary)
    failed = not_decoded(args, summary, args.format == "jsonl")
    if failed is not None:
        return failed
    records = stream_records(streams.streams, run.findings)
    out = sys.stdout
    if args.format == "jsonl":
        for r in records:
            out.write(jsonl_line(r))
        if summary.error:
            error_record(args, summary, summary.error)
    else:
        out.write(streams_table(records))
    out.flush()
    print(summary.line() + f", {len(records)} streams", file=sys.stderr)
    capture_notes(summary)
    if run.interrupted:
        print(INTERRUPTED, file=sys.stderr)
    if summary.error:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return ports_report(summary) or EXIT_OK
