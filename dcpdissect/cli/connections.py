"""``dcpdissect connections``: one row per MCBP connection of a capture."""

from __future__ import annotations

import csv
import sys

from ..reassembly.pdus import Summary
from ..reassembly.tcp_streams import TcpStreams
from ..reports.connections import ConnectionActivity, activity_table
from ..reports.findings import files_block
from ..reports.messages import Clock
from .common import (EXIT_BAD_INPUT, add_capture_options, add_file_argument, add_output_option,
                     add_progress_option, add_time_option, close_output, end_of_run,
                     not_decoded, open_output, run_pass, with_examples, write_jsonl)


def register(sub) -> None:
    p = sub.add_parser(
        "connections", help="one row per MCBP connection: endpoints, tcp.stream, role, "
                            "traffic per direction, how it ended",
        description="One row per MCBP connection: its number (the conn of the other "
                    "commands), Wireshark's tcp.stream, client and server (inner endpoints "
                    "and the tunnel when encapsulated), role, bucket and DCP name, frames "
                    "and bytes on the wire per direction (as tshark -z conv,tcp counts "
                    "them), MCBP messages per direction, duration and how it ended (FIN or "
                    "RST and which side sent it first, or still open at the capture's end).",
        **with_examples("dcpdissect connections samples/identity-restart-correct.pcap",
                        "dcpdissect connections samples/encap/vxlan.pcap --format csv"))
    add_file_argument(p)
    p.add_argument("--format", choices=("table", "jsonl", "csv"), default="table")
    add_output_option(p)
    add_time_option(p)
    add_progress_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_connections)


def cmd_connections(args) -> int:
    out = open_output(args.output)
    if out is None:
        return EXIT_BAD_INPUT
    summary = Summary()
    tcp_streams = TcpStreams()
    activity = ConnectionActivity(tcp_streams)
    run = run_pass(args, [activity], summary, f"reading {args.file}", args.progress,
                   tcp_streams)
    failed = not_decoded(args, summary, args.format == "jsonl", out)
    if failed is not None:
        return failed
    records = activity.activities()
    if args.format == "jsonl":
        write_jsonl(args, summary, records, out)
    elif args.format == "csv":
        _write_csv(out, records)
    else:
        out.write(activity_table(records, Clock(args.time, summary)) + files_block(summary))
    close_output(out)
    print(summary.line(), file=sys.stderr)
    return end_of_run(summary, run)


def _write_csv(out, records: list[dict]) -> None:
    """The records as CSV: one column per key (``tunnel`` when a record has one), empty
    cells for None, the duration in seconds with nanosecond digits."""
    if not records:
        return
    columns = list(records[0]) + (["tunnel"] if any("tunnel" in r for r in records)
                                  and "tunnel" not in records[0] else [])
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({**r, "duration": f"{r['duration']:.9f}"} for r in records)
