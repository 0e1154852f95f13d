"""``dcpdissect rollback-check``: the server's rollback decision for stream requests read
on stdin (humpty_dumpty compatible), from a failover table given or taken from a capture."""

from __future__ import annotations

import sys

from .common import (EXIT_BAD_INPUT, EXIT_OK, add_capture_options, capture_notes, not_decoded,
                     run_pass, with_examples)

LINE = "<uuid> <snapStart> <snapEnd> <start>"


def register(sub) -> None:
    p = sub.add_parser("rollback-check",
                       help="simulate the server's rollback decision (humpty_dumpty compatible)",
                       description=f"Reads '{LINE}' lines on stdin. Numbers are decimal (as "
                                   "every dcpdissect output and cbstats print them) or 0x hex "
                                   "(as Wireshark shows uuids), in the lines and the failover "
                                   "JSON alike.",
                       **with_examples(
                           """echo '[{"id":8738,"seq":3},{"id":4369,"seq":0}]' > failover.json""",
                           'echo "4369 1 4 3" | dcpdissect rollback-check failover.json 10 0',
                           'echo "4369 1 4 3" | dcpdissect rollback-check --capture '
                           'samples/resume-collapsed.pcap --vbucket 0',
                           'echo "0x1111 3 3 3" | dcpdissect rollback-check failover.json 10 0 '
                           '--format jsonl'))
    p.add_argument("failover", metavar="FAILOVER.json", nargs="?",
                   help='failover table, newest first: [{"id": uuid, "seq": seqno}, ...] '
                        "(not with --capture)")
    p.add_argument("high_seqno", metavar="HIGH_SEQNO", nargs="?")
    p.add_argument("purge_seqno", metavar="PURGE_SEQNO", nargs="?")
    p.add_argument("--capture", metavar="FILE",
                   help="take the failover table, high seqno and purge seqno of --vbucket "
                        "from this capture (its last failover log for the vbucket; the "
                        "seqnos as the lower bounds it shows), said on stderr")
    p.add_argument("--vbucket", type=int, metavar="N", help="the vbucket of --capture")
    p.add_argument("--client-purge-seqno", default="0", metavar="N",
                   help="the purge_seqno the client sends in its stream request value")
    p.add_argument("--strict-uuid", action="store_true",
                   help="StrictVbUuid flag: check the uuid even at start 0")
    p.add_argument("--ignore-purged-tombstones", action="store_true",
                   help="IgnorePurgedTombstones flag: skip the purge rule")
    p.add_argument("--format", choices=("text", "jsonl"), default="text")
    add_capture_options(p)
    p.set_defaults(func=cmd_rollback_check)


def cmd_rollback_check(args) -> int:
    from ..analysis.rollback import parse_u64, sanitize

    try:
        if args.capture is not None:
            inputs = _from_capture(args)
            if type(inputs) is int:
                return inputs
        else:
            inputs = _from_arguments(args)
        table, high, purge, frames = inputs
        client_purge = parse_u64(args.client_purge_seqno, "--client-purge-seqno")
    except ValueError as exc:
        print(f"dcpdissect: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    table = sanitize(table, high)
    return _check(args, table, high, purge, client_purge, frames)


def _from_arguments(args) -> tuple:
    """(table, high seqno, purge seqno, None) from FAILOVER.json HIGH_SEQNO PURGE_SEQNO."""
    from ..analysis.rollback import load_failover_json, parse_u64

    if args.vbucket is not None:
        raise ValueError("--vbucket goes with --capture")
    if args.purge_seqno is None:
        raise ValueError("give FAILOVER.json HIGH_SEQNO PURGE_SEQNO, or --capture FILE "
                         "--vbucket N")
    try:
        with open(args.failover, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{args.failover}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        table = load_failover_json(text)
    except ValueError as exc:
        raise ValueError(f"{args.failover}: {exc}") from None
    return (table, parse_u64(args.high_seqno, "HIGH_SEQNO"),
            parse_u64(args.purge_seqno, "PURGE_SEQNO"), None)


def _from_capture(args):
    """(table, high seqno, purge seqno, the frames they came from) of --vbucket in
    --capture, what was taken said on stderr; an exit code when the capture has none."""
    from ..analysis.engine import Analyzer
    from ..analysis.vbucket_history import VbucketHistory
    from ..reassembly.pdus import Summary

    if args.failover is not None:
        raise ValueError("--capture takes the failover table, high and purge seqnos from "
                         "the capture: give no FAILOVER.json HIGH_SEQNO PURGE_SEQNO")
    if args.vbucket is None or not 0 <= args.vbucket <= 0xFFFF:
        raise ValueError("--capture needs --vbucket N (0 to 65535)")
    if args.capture == "-":
        raise ValueError("--capture needs a file: stdin holds the request lines")
    args.file = args.capture
    analyzer = Analyzer()
    history = VbucketHistory(args.vbucket, analyzer)
    summary = Summary()
    run_pass(args, [analyzer, history], summary)
    failed = not_decoded(args, summary, False)
    if failed is not None:
        return failed
    node = history.last()
    if summary.error:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if node is None:
        raise ValueError(f"{args.capture}: no failover log of vb {args.vbucket} (no "
                         "successful DcpGetFailoverLog or DcpStreamReq response for it)")
    _say_taken(args, history, node)
    capture_notes(summary)
    high = node.high_bound()
    frames = {"failover_log_frame": node.table_frame, "high_seqno_frame": high.frame,
              "purge_seqno_frame": node.purge.frame if node.purge else None}
    return node.table, high.value, node.purge.value if node.purge else 0, frames


def _say_taken(args, history, node) -> None:
    """Which frames the inputs came from, and what the capture cannot know, on stderr."""
    from ..protocol import u64_text

    where = f"{node.server[0]}:{node.server[1]}" + (f" bucket {node.bucket}" if node.bucket
                                                    else "")
    lines = [f"{args.capture}: vb {args.vbucket} on {where}: failover log of frame "
             f"{node.table_frame} ({node.table_opcode} response, {len(node.table)} entries)"]
    high = node.high_bound()
    if high is node.high:
        lines.append(f"  high seqno {u64_text(high.value)}: at least, the highest seqno "
                     f"its producers sent (frame {high.frame})")
    else:
        lines.append(f"  high seqno {u64_text(high.value)}: at least, the failover log's "
                     f"highest entry (frame {high.frame}); no higher seqno was sent")
    if node.purge:
        lines.append(f"  purge seqno {u64_text(node.purge.value)}: at least, the highest of a "
                     f"disk snapshot marker (frame {node.purge.frame})")
    else:
        lines.append("  purge seqno 0: no disk snapshot marker with a purge seqno was sent")
    lines.append("  the capture shows the server's high and purge seqnos only as lower "
                 "bounds: a larger high seqno or purge seqno can change the decision")
    others = [k for k in history.nodes if k != history.last_key and history.nodes[k].table]
    if others:
        lines.append(f"  {len(others)} other nodes showed a failover log of vb "
                     f"{args.vbucket}; the last one shown is used")
    print("\n".join(lines), file=sys.stderr)


def _check(args, table, high: int, purge: int, client_purge: int, frames) -> int:
    """Each stdin line's decision, as text or jsonl; a line that is not a request is an
    error naming it (exit 2 once every line is read)."""
    from ..analysis.rollback import needs_rollback, parse_u64, table_text
    from ..protocol import u64_text
    from ..reports.messages import jsonl_line

    local_purge = 0 if args.ignore_purged_tombstones else purge
    out = sys.stdout
    if args.format == "text":
        out.write(f"Simulating behaviour of VBucket with highSeqno: {u64_text(high)}, "
                  f"purgeSeqno:{u64_text(purge)}, failoverTable:\n{table_text(table)}\n\n")
    status = EXIT_OK
    for lineno, line in enumerate(sys.stdin, 1):
        parts = line.split()
        if not parts:
            continue
        try:
            if len(parts) != 4:
                raise ValueError(f"{len(parts)} fields")
            uuid, snap_start, snap_end, start = (
                parse_u64(p, name) for p, name in zip(parts, ("uuid", "snapStart", "snapEnd",
                                                              "start")))
        except ValueError as exc:
            print(f"dcpdissect: error: stdin line {lineno}: {exc}; want '{LINE}'",
                  file=sys.stderr)
            status = EXIT_BAD_INPUT
            continue
        d = needs_rollback(table, start, high, uuid, snap_start, snap_end,
                           local_purge, client_purge, args.strict_uuid)
        if args.format == "jsonl":
            record = {"type": "rollback_check", "ts_ns": None, "vbucket_uuid": uuid,
                      "snap_start_seqno": snap_start, "snap_end_seqno": snap_end,
                      "start_seqno": start, "high_seqno": high, "purge_seqno": purge,
                      "rollback": d.rollback,
                      "rollback_seqno": d.seqno if d.rollback else None,
                      "reason": d.reason or None}
            if frames is not None:
                record.update(frames)
            out.write(jsonl_line(record))
            continue
        out.write(f"Testing UUID:{u64_text(uuid)} snapshot:{{{u64_text(snap_start)},"
                  f"{u64_text(snap_end)}}} start:{u64_text(start)}\n")
        out.write(f"  Rollback:{'true' if d.rollback else 'false'}\n")
        if d.rollback:
            out.write(f"  Requested rollback seqno:{u64_text(d.seqno)}\n  Reason: {d.reason}\n")
    return status
