"""``dcpdissect rollback-check``: the server's rollback decision for stream requests read
on stdin (humpty_dumpty compatible)."""

from __future__ import annotations

import json
import sys

from .common import EXIT_BAD_INPUT, EXIT_OK, with_examples


def register(sub) -> None:
    p = sub.add_parser("rollback-check",
                       help="simulate the server's rollback decision (humpty_dumpty compatible)",
                       description="Reads '<uuid> <snapStart> <snapEnd> <start>' lines on stdin.",
                       **with_examples(
                           """echo '[{"id":2222,"seq":3},{"id":1111,"seq":0}]' > failover.json""",
                           'echo "1111 1 4 3" | dcpdissect rollback-check failover.json 10 0',
                           'echo "1111 1 4 3" | dcpdissect rollback-check failover.json 10 0 '
                           '--format jsonl'))
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


def cmd_rollback_check(args) -> int:
    from ..analysis.rollback import load_failover_json, needs_rollback, sanitize, table_text

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

