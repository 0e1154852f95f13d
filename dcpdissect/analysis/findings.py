"""A finding: one rule violation, pointing at the frames that carry the evidence."""

from __future__ import annotations

from dataclasses import dataclass, field

from .rules import RULES
from .rules.framing import FINDINGS_CAPPED


@dataclass
class Finding:
    rule: str
    message: str
    frame: int | None                 # the frame that completes the offending PDU
    frames: tuple[int, ...] = ()      # every frame carrying the offending PDU(s)
    ts_ns: int | None = None
    connection: int | None = None
    vbucket: int | None = None
    opaque: int | None = None
    fields: dict = field(default_factory=dict)   # the decoded fields that matter
    pdu: bytes | None = None          # the offending PDU's bytes (hexdump / evidence)
    context: tuple[int, ...] = ()     # frames worth keeping as context in evidence bundles
    # the stream it falls in (set by StreamSummary): its request's uuid and frame
    vbucket_uuid: int | None = None
    request_frame: int | None = None

    @property
    def severity(self) -> str:
        return RULES[self.rule].severity

    @property
    def title(self) -> str:
        return RULES[self.rule].title

    def sort_key(self):
        return (self.frame or 0, self.rule)


MAX_FINDINGS_PER_RULE = 1000


class FindingCap:
    """Bounded resources: the first ``max_per_rule`` findings of each rule are kept
    (:meth:`keep`); the others are counted, and :meth:`dropped` turns the counts into one
    ``findings-capped`` finding per rule."""

    def __init__(self, max_per_rule: int = MAX_FINDINGS_PER_RULE):
        self.max_per_rule = max_per_rule
        self._counts: dict[str, int] = {}
        self._dropped: dict[str, list] = {}     # rule -> [count, first Finding, last frame]

    def keep(self, found: list[Finding]) -> list[Finding]:
        counts, cap = self._counts, self.max_per_rule
        keep = []
        for f in found:
            n = counts[f.rule] = counts.get(f.rule, 0) + 1
            if n <= cap:
                keep.append(f)
                continue
            d = self._dropped.get(f.rule)
            if d is None:
                self._dropped[f.rule] = [1, f, f.frame]
            else:
                d[0] += 1
                d[2] = f.frame
        return keep

    def dropped(self) -> list[Finding]:
        return [Finding(FINDINGS_CAPPED.id, f"{n} more {rid} findings (frames {first.frame}"
                        f"–{last}) not kept: at most {self.max_per_rule} per rule",
                        first.frame, (first.frame,) if first.frame else (), first.ts_ns,
                        first.connection, fields={"rule": rid, "dropped": n})
                for rid, (n, first, last) in self._dropped.items()]


def finding_for(rid: str, text: str, pdu, msg, fields: dict | None = None,
                context: tuple[int, ...] = ()) -> Finding:
    """A finding about one message."""
    return Finding(rid, text, pdu.frame, pdu.frames, pdu.ts_ns, pdu.conn, msg.vbucket,
                   msg.opaque, dict(fields or {}), pdu.data, context)
