"""``dcpdissect streams``: one row per DCP stream of a capture."""

from __future__ import annotations

import sys

from ..reassembly.pdus import Summary, counted
from ..reports.findings import files_block
from ..reports.messages import Clock
from .common import (EXIT_BAD_INPUT, add_capture_options, add_file_argument, add_output_option,
                     add_time_option, close_output, connection_list, end_of_run, not_decoded,
                     open_output, run_pass, vbucket_list, with_examples, write_jsonl)


def register(sub) -> None:
    p = sub.add_parser(
        "streams", help="one row per DCP stream: request, answer, items, how it ended",
        description="One row per DCP stream (a stream request, or a producer's first message "
                    "for a stream whose request was not captured): its connection, vbucket "
                    "and stream id, the request's frame, when it started, the requested range, "
                    "the answer, markers and items by opcode, seqnos, the last snapshot, how it "
                    "ended, its duration and the findings on it by severity.",
        **with_examples("dcpdissect streams samples/rollback-correct.pcap",
                        "dcpdissect streams samples/resume-collapsed.pcap --with-findings",
                        "dcpdissect streams samples/lifecycle-legal.pcap --vbucket 0,2 "
                        "--format jsonl"))
    add_file_argument(p)
    p.add_argument("--format", choices=("table", "jsonl"), default="table")
    p.add_argument("--vbucket", type=vbucket_list, action="extend", metavar="N[,M]",
                   help="only the streams of these vbuckets (repeatable)")
    p.add_argument("--conn", type=connection_list, action="extend", metavar="K[,L]",
                   help="only the streams of these connections (the numbers of the conn "
                        "column; repeatable)")
    p.add_argument("--with-findings", action="store_true",
                   help="only the streams with a finding on them")
    add_output_option(p)
    add_time_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_streams)


def cmd_streams(args) -> int:
    from ..analysis.engine import Analyzer
    from ..analysis.stream_summary import StreamSummary
    from ..reports.streams import stream_records, streams_table

    out = open_output(args.output)
    if out is None:
        return EXIT_BAD_INPUT
    summary = Summary()
    streams = StreamSummary(Analyzer())
    run = run_pass(args, [streams], summary)
    failed = not_decoded(args, summary, args.format == "jsonl", out)
    if failed is not None:
        return failed
    every = stream_records(streams.streams, run.findings)
    records = [r for r in every if _wanted(args, r)]
    if args.format == "jsonl":
        write_jsonl(args, summary, records, out)
    else:
        out.write(streams_table(records, Clock(args.time, summary)) + files_block(summary))
    close_output(out)
    print(f"{summary.line()}, {counted(len(every), 'stream')}", file=sys.stderr)
    if every and not records:
        print(_nothing_matched(args, every), file=sys.stderr)
    return end_of_run(summary, run)


def _wanted(args, r: dict) -> bool:
    """Whether ``--vbucket``, ``--conn`` and ``--with-findings`` keep stream record ``r``."""
    return ((not args.vbucket or r["vbucket"] in args.vbucket)
            and (not args.conn or r["connection"] in args.conn)
            and (not args.with_findings or r["errors"] + r["warnings"] + r["infos"] > 0))


def _nothing_matched(args, records: list[dict]) -> str:
    """One line: no stream matches the filters, and what the capture has: the vbuckets
    (of the ``--conn`` connections when given), the connections, the streams with
    findings (with ``--with-findings``)."""
    def listed(values) -> str:
        values = sorted(set(values))
        return ", ".join(map(str, values[:20])) + (", ..." if len(values) > 20 else "") \
            or "none"
    on_conns = [r for r in records if not args.conn or r["connection"] in args.conn]
    text = "dcpdissect: no stream matches the filters; vbuckets present" + (
        f" on connection {listed(args.conn)}" if args.conn else "") + \
        f": {listed(r['vbucket'] for r in on_conns)}; connections: " \
        f"{listed(r['connection'] for r in records)}"
    if args.with_findings:
        text += "; streams with findings: " + listed(
            f"conn {r['connection']} vb {r['vbucket']}" for r in records
            if r["errors"] + r["warnings"] + r["infos"])
    return text
