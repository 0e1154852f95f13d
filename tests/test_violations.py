"""Rule catalogue, violation samples and golden findings.

Rewrite the golden file (and docs/rules.md) after an intended change of findings with
``python -m dcpdissect.regen``: it prints how many golden rows changed, and in which samples.
"""

import argparse
import json
from functools import cache
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import ERROR, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.cli.common import add_capture_options, capture_options
from dcpdissect.docgen.rules_doc import render
from dcpdissect.regen import golden_rows
from dcpdissect.samples.builder import all_specs

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
GOLDEN = Path(__file__).resolve().parent / "golden" / "findings.jsonl"

CLEAN = ("clean-replication", "add-stream", "seed-marker-v1", "seed-marker-v2_0",
         "seed-add-stream", "tcp-reorder", "tcp-retransmit", "tcp-seq-wrap", "sll2", "vlan-qinq",
         "ipv6", "loopback-ns-be", "pcapng-multi-interface", "clean-replication-gz",
         "legal-server-behaviour", "rollback-legal", "replica-node", "controls-legal",
         "controls-undecided", "resume-correct", "rollback-correct", "identity-restart-correct",
         "identity-half-close-correct", "identity-kicked-correct", "identity-two-buckets",
         "identity-two-buckets-b-complete", "identity-mid-stream-clean", "durability-legal",
         "lifecycle-legal", "collections",
         "flow-legal", "flow-undecided", "cut-snaplen-128", "cut-snaplen-256",
         "cut-request-hidden", "move-node-correct", "restart-rollback-legal",
         "stream-first-marker-legal")

# the golden file covers the per-message and framing rules
GOLDEN_RULES = {r.id for r in RULES.values() if r.family in ("structure", "framing")}


@cache
def findings_of(filename: str, cli_options: tuple[str, ...] = ()):
    """``cli_options``: the command-line options a rule's sample needs (``Rule.options``)."""
    keylog = (SAMPLES / filename).with_suffix(".keylog")     # the TLS samples' key logs
    parser = argparse.ArgumentParser()
    add_capture_options(parser)
    args = parser.parse_args(list(cli_options))
    if keylog.is_file():
        args.tls_keylog = keylog.read_text()
    return analyze_file(str(SAMPLES / filename), capture_options(args))[0]


def _spec_files() -> dict[str, str]:
    return {s.name: s.filename for s in all_specs()}


def test_structural_and_framing_rules_are_all_known():
    assert GOLDEN_RULES <= set(RULES)
    assert len(GOLDEN_RULES) >= 40


# the nodes rules need two capture points: tests/test_nodes.py runs their samples
@pytest.mark.parametrize("rid", sorted(r.id for r in RULES.values() if r.family != "nodes"))
def test_every_rule_is_triggered_by_its_sample(rid):
    sample = RULES[rid].sample
    assert (SAMPLES / sample).is_file(), f"{rid}: sample {sample} missing"
    found = {f.rule for f in findings_of(sample, RULES[rid].options)}
    assert rid in found, f"{rid} not triggered by {sample} {' '.join(RULES[rid].options)}"


@pytest.mark.parametrize("rid", sorted(GOLDEN_RULES))
def test_structural_rules_point_at_violation_samples(rid):
    if RULES[rid].severity in (ERROR, WARNING) and rid != "tcp-overlap-mismatch":
        assert RULES[rid].sample.startswith(("violations-", "hostile-"))


@pytest.mark.parametrize("name", CLEAN)
def test_clean_samples_have_no_warning_or_error(name):
    filename = _spec_files()[name]
    # tcp-retransmit documents tcp-overlap-mismatch: only a rule's own sample may show it
    bad = [(f.frame, f.rule, f.message) for f in findings_of(filename)
           if f.severity in (ERROR, WARNING) and RULES[f.rule].sample != filename]
    assert bad == []


def test_violation_markers_break_one_rule_each():
    by_vb: dict[int, set[str]] = {}
    for f in findings_of("violations-marker.pcap"):
        if f.rule.startswith("marker-"):
            by_vb.setdefault(f.vbucket, set()).add(f.rule)
    assert all(len(rules) == 1 for rules in by_vb.values()), by_vb
    assert len(by_vb) == len({r for r in RULES if r.startswith("marker-")})


def test_findings_carry_the_pdu_and_frames():
    for f in findings_of("violations-structure.pcap"):
        if RULES[f.rule].single_pdu:
            assert f.pdu and f.frame in f.frames and f.connection == 1


def test_rules_markdown_is_current():
    doc = (ROOT / "docs" / "rules.md").read_text()
    assert doc == render(), "docs/rules.md is stale: python -m dcpdissect.regen"


def test_rules_markdown_lists_every_rule_by_category():
    text = render()
    for rid, r in RULES.items():
        assert f"| `{rid}` | {r.severity} |" in text
        assert f"## {r.family}" in text
    assert RULES["extras-length"].family == "structure"
    assert RULES["marker-start-after-end"].family == "structure"
    assert RULES["resume-collapsed-snapshot"].family == "stream"


def test_golden_findings():
    want = [json.loads(line) for line in GOLDEN.read_text().splitlines() if line.strip()]
    assert golden_rows(SAMPLES) == want, \
        "findings changed; if intended, rewrite the golden file: python -m dcpdissect.regen"
