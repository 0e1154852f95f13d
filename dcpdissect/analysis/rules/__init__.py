"""The rule catalogue: every rule, from an explicit list of families.

``framing`` (reassembly and MCBP framing), ``structure`` (one message, from the protocol
tables; also Lua expert infos), ``stream`` (stream state) and ``rollback`` (failover-table
decisions). A rule id is stable: users filter on it and the golden file records it. Each
rule is a module-level name of its family's module; the code that reports it imports that
name.
"""

from __future__ import annotations

from . import durability, flow, framing, lifecycle, nodes, rollback, stream, structure, tls
from .model import ERROR, INFO, SEVERITY_RANK, WARNING, Rule, family  # noqa: F401

_MODULES = (framing, structure, stream, durability, lifecycle, flow, rollback, tls, nodes)
FAMILIES = {m.__name__.rsplit(".", 1)[1]: m.RULES for m in _MODULES}


def _collect() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for module in _MODULES:
        name, rules = module.__name__.rsplit(".", 1)[1], module.RULES
        listed = set(rules)
        for const, r in vars(module).items():
            if isinstance(r, Rule) and r not in listed:
                raise ValueError(f"rule {r.id} ({module.__name__}.{const}) is missing from "
                                 "its module's RULES")
        for r in rules:
            if r.family != name:
                raise ValueError(f"rule {r.id} is in the {name} family's RULES but was made "
                                 f"by family({r.family!r})")
            if r.id in out:
                raise ValueError(f"duplicate rule id {r.id}")
            out[r.id] = r
    return out


RULES: dict[str, Rule] = _collect()
