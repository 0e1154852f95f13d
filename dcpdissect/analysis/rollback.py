"""A model of the server's rollback decision for a stream request.

It follows kv_engine's ``FailoverTable::needsRollback`` (reference §5.8): the seqno-0 base
case, the purge rule, the failover-table lookup from the oldest entry to the newest with the
branch point ("upper"), the snapshot adjustments and the rollback seqno with its reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable

MAX_FAILOVER_ENTRIES = 25
REASON_PURGE = "purge seqno ({purge}) is greater than start seqno - could miss purged deletions"
REASON_NO_UUID = ("vBucket UUID not found in failover table, consumer and producer have no "
                  "common history")
REASON_AHEAD = "consumer ahead of producer - producer upper at {upper}"
PLACEHOLDER_UUID = 0xFFFFFFFFFFFFFFFF   # stands in for the random uuid of a recreated table


@dataclass(frozen=True)
class FailoverEntry:
    uuid: int
    seqno: int


@dataclass(frozen=True)
class Decision:
    rollback: bool
    seqno: int = 0
    reason: str = ""


def sanitize(entries: Iterable[FailoverEntry], high_seqno: int,
             max_entries: int | None = MAX_FAILOVER_ENTRIES) -> list[FailoverEntry]:
    """Clean a table (newest first) as the server does: drop uuid-0 entries and entries
    whose seqno exceeds that of the newer entry before them; keep at most ``max_entries``
    (None: all, for a log observed on the wire, since ``max_failover_entries`` is
    configurable); an emptied table becomes one entry at ``high_seqno``."""
    out: list[FailoverEntry] = []
    for entry in entries:
        if entry.uuid == 0:
            continue
        if out and entry.seqno > out[-1].seqno:
            continue
        out.append(entry)
    if not out:
        out = [FailoverEntry(PLACEHOLDER_UUID, high_seqno)]
    return out if max_entries is None else out[:max_entries]


def needs_rollback(table: list[FailoverEntry], start: int, local_high: int, uuid: int,
                   snap_start: int, snap_end: int, local_purge: int, remote_purge: int = 0,
                   strict_uuid: bool = False, max_collection_high: int | None = None) -> Decision:
    """The server's decision for a stream request (``table`` newest first, sanitised).

    ``local_purge`` is the vbucket's purge seqno, or 0 when the request set
    IgnorePurgedTombstones; ``remote_purge`` is the request value's ``purge_seqno``.
    """
    upper = local_high
    if start == 0 and (not strict_uuid or uuid == 0):
        return Decision(False)
    exempt = False
    if max_collection_high is not None:
        exempt = (start < local_purge and start >= max_collection_high
                  and max_collection_high <= local_purge)
    if start < local_purge and start != 0 and not exempt and remote_purge != local_purge:
        return Decision(True, 0, REASON_PURGE.format(purge=local_purge))
    for pos in range(len(table) - 1, -1, -1):        # oldest to newest
        if table[pos].uuid == uuid:
            if pos > 0:
                upper = table[pos - 1].seqno          # where the history branched away
            break
    else:
        return Decision(True, 0, REASON_NO_UUID)
    if start == snap_start:
        snap_end = start
    if snap_end <= upper:
        return Decision(False)
    if start == snap_end:
        snap_start = start
    return Decision(True, upper if upper < snap_start else snap_start,
                    REASON_AHEAD.format(upper=upper))


U64_MAX = (1 << 64) - 1
_U64_TEXT = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]+)\Z")


def parse_u64(value, what: str) -> int:
    """A uuid or seqno in any spelling dcpdissect's outputs and tshark use: an integer (a
    JSON number), or text in decimal (tables, jsonl's strings, cbstats) or ``0x`` hex
    (Wireshark). ValueError, one line naming ``what``, for anything else."""
    number = None
    if type(value) is int:
        number = value
    elif isinstance(value, str) and _U64_TEXT.match(value.strip()):
        number = int(value.strip(), 0 if value.strip()[:2].lower() == "0x" else 10)
    if number is None or not 0 <= number <= U64_MAX:
        raise ValueError(f"{what}: {value!r} is not a number from 0 to 2^64-1 in decimal "
                         "or 0x hex")
    return number


def load_failover_json(text: str) -> list[FailoverEntry]:
    """``[{"id": uuid, "seq": seqno}, ...]``, newest first; other keys are ignored. ids
    and seqnos may be numbers or strings (:func:`parse_u64`)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, list) or not data:
        raise ValueError("the failover table must be a non-empty JSON array")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "id" not in item or "seq" not in item:
            raise ValueError(f"entry {i} must be an object with \"id\" and \"seq\"")
        out.append(FailoverEntry(parse_u64(item["id"], f"entry {i} id"),
                                 parse_u64(item["seq"], f"entry {i} seq")))
    return out


def table_text(table: list[FailoverEntry]) -> str:
    lines = ["["] + [f'    {{"id":{e.uuid},"seq":{e.seqno}}}' for e in table] + ["]"]
    return "\n".join(lines)
