"""The rule catalogue: stable ids, severity, title, rationale and a triggering sample."""

from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITY_RANK = {INFO: 0, WARNING: 1, ERROR: 2}


@dataclass(frozen=True)
class Rule:
    id: str            # stable, kebab-case, e.g. "marker-extras-length"
    severity: str      # error | warning | info
    title: str         # one line
    rationale: str     # the spec section or server behaviour it rests on (R-number if any)
    sample: str        # sample capture (file name under samples/) that triggers it
    single_pdu: bool = False   # judged from one PDU alone (also rendered as Lua expert info)


RULES: dict[str, Rule] = {}


def rule(id: str, severity: str, title: str, rationale: str, sample: str,
         single_pdu: bool = False) -> Rule:
    """Register a rule (ids are unique) and return it."""
    if id in RULES:
        raise ValueError(f"duplicate rule id {id}")
    r = RULES[id] = Rule(id, severity, title, rationale, sample, single_pdu)
    return r
