"""The one human spelling of the protocol's 64-bit values (vbucket uuids, CAS, seqnos)."""

from __future__ import annotations


def u64_text(value: int | None) -> str:
    """A vbucket uuid, CAS or seqno as people read it in every table, Markdown and HTML
    report, finding message, ``dissect`` row, evidence bundle and ``rollback-check`` line:
    its decimal digits (``-`` for None).

    Decimal because that is how kv_engine spells them where a support engineer meets them:
    ``cbstats failovers`` prints ``vb_0:0:id: 4369`` (failover-table.cc
    ``FailoverTable::addStats``), the failover table's JSON (``[{"id":4369,"seq":0}]``,
    which ``rollback-check`` reads as humpty_dumpty does) holds decimal ids, and the jsonl
    records write the same digits as a string, so a value copied from a table finds its
    records with jq or grep. Wireshark's built-in Couchbase dissector shows uuids and CAS
    in hex; its display filters take either spelling (``== 4369`` and ``== 0x1111`` match
    alike), and the generated plugin shows decimal, as here."""
    return "-" if value is None else str(value)
