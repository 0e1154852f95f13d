"""A finding: one rule violation, pointing at the frames that carry the evidence."""

from __future__ import annotations

from dataclasses import dataclass, field

from .rules import RULES


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

    @property
    def severity(self) -> str:
        return RULES[self.rule].severity

    @property
    def title(self) -> str:
        return RULES[self.rule].title

    def sort_key(self):
        return (self.frame or 0, self.rule)


def finding_for(rid: str, text: str, pdu, msg, fields: dict | None = None,
                context: tuple[int, ...] = ()) -> Finding:
    """A finding about one message."""
    return Finding(rid, text, pdu.frame, pdu.frames, pdu.ts_ns, pdu.conn, msg.vbucket,
                   msg.opaque, dict(fields or {}), pdu.data, context)
