"""More than two capture points (``compare_points``, ``dcpdissect nodes A B C``), on the
real three-point capture samples/multinode/dropped-relay-* (see its README): the active
node's veth, both veths of the relay in between (its two legs) and the replica's veth. The
relay read the producer's DcpMutation vb 1 seqno 2 and did not forward it, so the loss is
between the relay and the replica, not between the active node and the relay; beside it
relayed-relay-*, the same relay dropping nothing. The three captures share one host clock:
the true offsets are the shifts ``editcap -t`` gives here."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from dcpdissect.analysis.nodes import compare_points, read_point
from dcpdissect.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "multinode"
SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "jsonl-schema.json"
TRUE_NS = {"active": 0, "relay": 2_500_000_000, "replica": -731_942_000}
VB1 = "couchbase.vbucket==1 && couchbase.opcode==0x57 && couchbase.extras.by_seqno=="


def tshark_frames(path: Path, display_filter: str) -> list[int]:
    out = subprocess.run(["tshark", "-r", str(path), "-d", "tcp.port==11209,couchbase", "-Y",
                          display_filter, "-T", "fields", "-e", "frame.number"], check=True,
                         capture_output=True, text=True).stdout
    return [int(n) for n in out.split()]


@pytest.fixture(scope="module")
def shifted(tmp_path_factory) -> dict[str, Path]:
    """Each point's capture with its clock moved by its ``TRUE_NS``."""
    out = tmp_path_factory.mktemp("points")
    paths = {}
    for point, ns in TRUE_NS.items():
        paths[point] = out / f"dropped-relay-{point}.pcapng"
        subprocess.run(["editcap", "-t", f"{ns / 1e9:.9f}",
                        str(SAMPLES / f"dropped-relay-{point}.pcapng"), str(paths[point])],
                       check=True, capture_output=True)
    return paths


@pytest.fixture(scope="module")
def three(shifted):
    return compare_points([read_point(p, str(shifted[p])) for p in TRUE_NS])


@pytest.mark.tshark
def test_the_loss_is_on_the_pair_that_lost_it(three, shifted):
    pairs = {(r.a.name, r.b.name): r for r in three.pairs}
    assert list(pairs) == [("active", "relay"), ("active", "replica"), ("relay", "replica")]
    assert pairs["active", "relay"].findings == []      # the relay read it
    [at_relay] = pairs["relay", "replica"].findings
    assert (at_relay.fields["point"], at_relay.fields["other_point"]) == ("relay", "replica")
    assert [at_relay.frame] == tshark_frames(shifted["relay"], VB1 + "2")
    around = tshark_frames(shifted["replica"], VB1 + "1") + tshark_frames(shifted["replica"],
                                                                          VB1 + "3")
    assert at_relay.fields["gap_frames"] == around
    assert tshark_frames(shifted["replica"], VB1 + "2") == []
    [end_to_end] = pairs["active", "replica"].findings      # the whole path lost it too
    assert [end_to_end.frame] == tshark_frames(shifted["active"], VB1 + "2")
    assert end_to_end.fields["gap_frames"] == around
    assert three.findings == [end_to_end, at_relay]


def test_every_pair_and_the_chained_offsets_contain_the_shifts(three):
    for r in three.pairs:
        truth = TRUE_NS[r.b.name] - TRUE_NS[r.a.name]
        assert r.offset.low <= truth <= r.offset.high
        assert r.offset.uncertainty < 50_000
    first, relay, replica = three.offsets
    assert (first.low, first.high) == (0, 0)
    assert relay.low <= TRUE_NS["relay"] <= relay.high
    assert replica.low <= TRUE_NS["replica"] <= replica.high
    # the narrowest chain: through the relay, its bound the sum of the two pairs' bounds
    by_pair = {(r.a.name, r.b.name): r.offset for r in three.pairs}
    legs = by_pair["active", "relay"], by_pair["relay", "replica"]
    assert replica.chain == ("active", "relay", "replica")
    assert (replica.low, replica.high) == (sum(o.low for o in legs), sum(o.high for o in legs))
    direct = by_pair["active", "replica"]
    assert replica.high - replica.low < direct.high - direct.low


def test_cli_jsonl_names_each_records_pair(shifted, capsys):
    args = ["nodes", *(f"{p}={shifted[p]}" for p in TRUE_NS), "--format", "jsonl"]
    assert main(args) == 1
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert [e.message for r in records for e in validator.iter_errors(r)] == []
    offsets = {r["point"]: r for r in records if "chain" in r}
    assert offsets["replica"]["chain"] == ["active", "relay", "replica"]
    assert offsets["relay"]["low_ns"] <= TRUE_NS["relay"] <= offsets["relay"]["high_ns"]
    lost = [(r["pair"], r["fields"]["point"], r["frame"]) for r in records
            if r["type"] == "finding"]
    assert lost == [(["active", "replica"], "active", 21), (["relay", "replica"], "relay", 28)]
    assert all(r["pair"] for r in records if "chain" not in r)
    assert offsets["replica"]["observations"] == sum(
        r["observations"] for r in records
        if r["type"] == "clock_offset" and r.get("pair") in (["active", "relay"],
                                                              ["relay", "replica"]))


def test_a_pair_sharing_no_connection_is_said_so(capsys):
    """A third point of other traffic (no connection, no DCP name in common): its pairs are
    reported as sharing none, no offset is chained to it, the other pair stays clean."""
    forwarded = [f"{p}={SAMPLES / f'forwarded-{p}.pcapng'}" for p in ("replica", "active")]
    other = Path(__file__).resolve().parent.parent / "samples" / "controls-legal.pcap"
    assert main(["nodes", *forwarded, f"other={other}"]) == 0
    out = capsys.readouterr().out
    assert out.count("no connection seen at both points: nothing to compare") == 2
    assert "other - replica: not decided" in out
    assert "== replica and active ==\n" in out and "no message lost between the points" in out


def test_markdown_and_html_have_every_pair(shifted, tmp_path):
    points = [f"{p}={shifted[p]}" for p in TRUE_NS]
    for fmt in ("markdown", "html"):
        assert main(["nodes", *points, "--format", fmt, "-o", str(tmp_path / fmt)]) == 1
    md = (tmp_path / "markdown").read_text()
    assert [line for line in md.splitlines() if line.startswith("## ") and " and " in line] \
        == ["## active and relay", "## active and replica", "## relay and replica"]
    assert "#### relay frame 28: DcpMutation vb 1 seqno 2" in md
    page = (tmp_path / "html").read_text()
    assert page.count("<h1") == 4 and '<h1 id="pair-3">relay and replica</h1>' in page
    ids = re.findall(r' id="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    assert set(re.findall(r' href="#([^"]+)"', page)) <= set(ids)
    assert '<a href="#pair-3-timeline-' in page       # the relay's finding links its timeline


@pytest.mark.tshark
def test_evidence_has_a_bundle_per_pair_with_findings(shifted, tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(["nodes", *(f"{p}={shifted[p]}" for p in TRUE_NS), "--evidence",
                 str(out)]) == 1
    assert "do not reproduce" not in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["README.txt", "active-and-replica",
                                                     "relay-and-replica"]
    assert "active and relay: no message lost between them" in (out / "README.txt").read_text()
    bundle = out / "relay-and-replica"
    [relay_frame] = tshark_frames(bundle / "relay" / "evidence.pcapng", VB1 + "2")
    assert tshark_frames(bundle / "replica" / "evidence.pcapng", VB1 + "2") == []
    assert f"\n{relay_frame}\t28\t" in (bundle / "relay" / "frames.tsv").read_text()


def test_a_relay_that_forwards_everything_stays_clean_at_three_points(capsys):
    """relayed-relay: the same three points, the relay dropping nothing (the captures
    unshifted: every true offset is 0)."""
    points = [read_point(p, str(SAMPLES / f"relayed-relay-{p}.pcapng")) for p in TRUE_NS]
    three = compare_points(points)
    assert three.findings == []
    assert [len(r.pairings) for r in three.pairs] == [2, 1, 2]  # the relay's two legs paired
    for r in three.pairs:
        assert r.offset.low <= 0 <= r.offset.high
        # one lag per producer stream message (the relay's two sightings count once), as
        # between two points of the same replication (test_nodes)
        assert {v.vbucket: v.messages for v in r.lags} == {0: 9, 1: 5, 2: 7}
    assert all(o.low <= 0 <= o.high for o in three.offsets)
    assert main(["nodes", *(f"{p}={SAMPLES / f'relayed-relay-{p}.pcapng'}" for p in TRUE_NS)
                 ]) == 0
    assert capsys.readouterr().out.count("no message lost between the points") == 3
