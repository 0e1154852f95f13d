"""The rule catalogue as Markdown (docs/rules.md), from the registry of
:mod:`dcpdissect.analysis.rules`."""

from __future__ import annotations

from ..analysis.rules import FAMILIES, RULES, Rule

_FAMILY_TITLES = {
    "framing": "TCP reassembly and MCBP framing",
    "structure": "one message, as kv_engine's validator, consumer and producer judge it",
    "stream": "stream state: snapshots, items, correlation, resume",
    "durability": "sync writes: prepares, commits, aborts and the HCS",
    "lifecycle": "a stream's end, close, takeover and dropped collections; change streams",
    "flow": "liveness and flow control: noops, buffer acks, the consumer's window, datatypes",
    "rollback": "rollback decisions against kv_engine's failover table",
    "tls": "TLS connections decrypted with --tls-keylog, and those that cannot be",
    "nodes": "what only two capture points of the same traffic decide (`dcpdissect nodes`); "
             "the sample is the capture whose frame is reported, the other point is named "
             "like it with `-active` and `-replica` swapped",
}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The catalogue: one table per family, in the registry's order."""
    groups: dict[str, list[Rule]] = {family: [] for family in FAMILIES}
    for r in RULES.values():
        groups[r.family].append(r)
    groups = {cat: members for cat, members in groups.items() if members}
    out = [
        "# dcpdissect rule catalogue",
        "",
        "<!-- generated from dcpdissect/analysis/rules/ by python -m dcpdissect.regen -->",
        "",
        f"{len(RULES)} rules. Each names a sample under `samples/` that triggers it "
        "(`dcpdissect analyze samples/<sample>`, with the options shown beside it) and, in its "
        "rationale, the kv_engine code it "
        "rests on. Rules marked *single message* are judged from one message and its "
        "connection's negotiation; the Wireshark plugin raises them as expert infos too.",
        "",
        "Categories: " + ", ".join(f"[{c}](#{c})" for c in groups) + ".",
        "",
    ]
    for cat, members in groups.items():
        out += [f"## {cat}", "", _FAMILY_TITLES[cat] + ".", "",
                "| id | severity | title | rationale | sample |",
                "|---|---|---|---|---|"]
        for r in members:
            title = r.title + (" *(single message)*" if r.single_pdu else "")
            out.append(f"| `{r.id}` | {r.severity} | {_cell(title)} | {_cell(r.rationale)} "
                       f"| `{r.sample}`{''.join(f' `{o}`' for o in r.options)} |")
        out.append("")
    return "\n".join(out)

