"""A rule of the catalogue: stable id, severity, title, rationale and a triggering sample."""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.model import ERROR, INFO, WARNING

SEVERITY_RANK = {INFO: 0, WARNING: 1, ERROR: 2}
__all__ = ["ERROR", "INFO", "WARNING", "SEVERITY_RANK", "Rule", "family"]


@dataclass(frozen=True)
class Rule:
    id: str            # stable, kebab-case, e.g. "marker-start-after-end"
    severity: str      # error | warning | info
    title: str         # one line
    rationale: str     # the kv_engine code it rests on (file and function)
    sample: str        # sample capture (file name under samples/) that triggers it
    single_pdu: bool = False   # judged from one message and its connection's negotiation;
    #                            the Lua plugin raises it as an expert info too
    family: str = ""           # the module of analysis/rules/ that declares it
    options: tuple[str, ...] = ()   # the command-line options its sample needs


def family(name: str):
    """The constructor of one family's rules: a module of analysis/rules/ starts with
    ``rule = family("flow")`` and names each rule it declares (``NOOP_INTERVAL_EXCEEDED =
    rule("noop-interval-exceeded", ...)``); the code that judges it imports that name, so a
    misspelt rule fails when the module is imported."""
    def rule(id: str, severity: str, title: str, rationale: str, sample: str,
             single_pdu: bool = False, options: tuple[str, ...] = ()) -> Rule:
        if severity not in SEVERITY_RANK:
            raise ValueError(f"{id}: unknown severity {severity}")
        return Rule(id, severity, title, rationale, sample, single_pdu, name, options)
    return rule
