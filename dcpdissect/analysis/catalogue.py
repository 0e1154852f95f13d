"""The rule catalogue as Markdown (docs/rules.md).

Regenerate with ``python -m dcpdissect.analysis.catalogue > docs/rules.md``.
"""

from __future__ import annotations

import sys

from . import run as _run  # noqa: F401  (importing the analyzer registers every rule)
from .rules import RULES, Rule

# multi-word categories; any other rule is filed under the first word of its id
_COMPOUND = ("add-stream", "stream-request", "stream-flags", "failover-log")


def category(rule_id: str) -> str:
    for prefix in _COMPOUND:
        if rule_id == prefix or rule_id.startswith(prefix + "-"):
            return prefix
    return rule_id.split("-", 1)[0]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_rules_markdown(rules: dict[str, Rule] | None = None) -> str:
    """The catalogue: one table per category, in order of first registration."""
    rules = RULES if rules is None else rules
    groups: dict[str, list[Rule]] = {}
    for r in rules.values():
        groups.setdefault(category(r.id), []).append(r)
    out = [
        "# dcpdissect rule catalogue",
        "",
        "<!-- generated: python -m dcpdissect.analysis.catalogue > docs/rules.md -->",
        "",
        f"{len(rules)} rules. Each names a sample under `samples/` that triggers it "
        "(`python -m dcpdissect.cli analyze samples/<sample>`). Rules marked *single PDU* "
        "are judged from one message alone.",
        "",
        "Categories: " + ", ".join(f"[{c}](#{c})" for c in groups) + ".",
        "",
    ]
    for cat, members in groups.items():
        out += [f"## {cat}", "",
                "| id | severity | title | rationale | sample |",
                "|---|---|---|---|---|"]
        for r in members:
            title = r.title + (" *(single PDU)*" if r.single_pdu else "")
            out.append(f"| `{r.id}` | {r.severity} | {_cell(title)} | {_cell(r.rationale)} "
                       f"| `{r.sample}` |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render_rules_markdown())
