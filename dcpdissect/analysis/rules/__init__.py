"""The rule catalogue: every rule, from an explicit list of families.

``framing`` (reassembly and MCBP framing), ``structure`` (one message, from the protocol
tables; also Lua expert infos), ``stream`` (stream state) and ``rollback`` (failover-table
decisions). A rule id is stable: users filter on it and the golden file records it.
"""

from __future__ import annotations

from dataclasses import replace

from . import durability, flow, framing, lifecycle, rollback, stream, structure, tls
from .model import ERROR, INFO, SEVERITY_RANK, WARNING, Rule, rule  # noqa: F401

FAMILIES = {"framing": framing.RULES, "structure": structure.RULES, "stream": stream.RULES,
            "durability": durability.RULES, "lifecycle": lifecycle.RULES, "flow": flow.RULES,
            "rollback": rollback.RULES, "tls": tls.RULES}


def _collect() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for family, rules in FAMILIES.items():
        for r in rules:
            if r.id in out:
                raise ValueError(f"duplicate rule id {r.id}")
            out[r.id] = replace(r, family=family)
    return out


RULES: dict[str, Rule] = _collect()
