"""The rollback model: the seed's humpty_dumpty examples, kv_engine's vectors, the CLI."""

import json
import subprocess
import sys

import pytest

from dcpdissect.analysis.rollback import (
    PLACEHOLDER_UUID, REASON_NO_UUID, Decision, FailoverEntry, needs_rollback, sanitize,
)

SEED_TABLE = '[{"id":2222,"seq":3},{"id":1111,"seq":0}]'
SANITY_TABLE = '[{"id":3333,"seq":30},{"id":2222,"seq":20},{"id":1111,"seq":0}]'


def rollback_check(tmp_path, table, high, purge, stdin, *opts):
    path = tmp_path / "failover.json"
    path.write_text(table)
    proc = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "rollback-check", str(path),
                           str(high), str(purge), *opts], input=stdin.encode(),
                          capture_output=True)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_seed_example_correct_resume_rolls_back_to_1(tmp_path):
    code, out, _ = rollback_check(tmp_path, SEED_TABLE, 10, 0, "1111 1 4 3\n")
    assert code == 0
    assert out == (
        "Simulating behaviour of VBucket with highSeqno: 10, purgeSeqno:0, failoverTable:\n"
        "[\n"
        '    {"id":2222,"seq":3}\n'
        '    {"id":1111,"seq":0}\n'
        "]\n"
        "\n"
        "Testing UUID:1111 snapshot:{1,4} start:3\n"
        "  Rollback:true\n"
        "  Requested rollback seqno:1\n"
        "  Reason: consumer ahead of producer - producer upper at 3\n")


def test_seed_example_collapsed_resume_does_not_roll_back(tmp_path):
    code, out, _ = rollback_check(tmp_path, SEED_TABLE, 10, 0, "1111 3 3 3\n")
    assert code == 0
    assert out.endswith("Testing UUID:1111 snapshot:{3,3} start:3\n  Rollback:false\n")


@pytest.mark.parametrize("line,expected", [
    ("2222 20 30 25", Decision(False)),
    ("2222 45 45 45", Decision(True, 30, "consumer ahead of producer - producer upper at 30")),
    ("5555 10 10 10", Decision(True, 0, REASON_NO_UUID)),
])
def test_humpty_sanity_vectors(line, expected):
    table = sanitize([FailoverEntry(e["id"], e["seq"]) for e in json.loads(SANITY_TABLE)], 100)
    uuid, s0, s1, start = map(int, line.split())
    assert needs_rollback(table, start, 100, uuid, s0, s1, 0) == expected


def test_humpty_sanity_vectors_through_the_cli(tmp_path):
    code, out, _ = rollback_check(tmp_path, SANITY_TABLE, 100, 0,
                                  "2222 20 30 25\n2222 45 45 45\n5555 10 10 10\n",
                                  "--format", "jsonl")
    rows = [json.loads(x) for x in out.splitlines()]
    assert [(r["rollback"], r["rollback_seqno"]) for r in rows] == [(False, None), (True, "30"),
                                                                    (True, "0")]
    assert [r["type"] for r in rows] == ["rollback_check"] * 3
    assert rows[0]["vbucket_uuid"] == "2222" and rows[0]["start_seqno"] == "25"


LATEST = 0xAAAA


def edge_table():
    return [FailoverEntry(LATEST, 0)]


@pytest.mark.parametrize("start,snap_start,snap_end,result", [
    (200, 200, 200, None),
    (200, 200, 301, None),
    (300, 300, 301, None),
    (400, 400, 400, 300),
    (220, 210, 301, 210),
    (310, 210, 320, 210),
])
def test_failover_table_edge_vectors(start, snap_start, snap_end, result):
    d = needs_rollback(edge_table(), start, 300, LATEST, snap_start, snap_end, 0)
    assert d.rollback == (result is not None)
    if result is not None:
        assert d.seqno == result


def test_new_table_vectors():
    table = sanitize([FailoverEntry(LATEST, 0)], 0)
    assert needs_rollback(table, 0, 0, 0, 0, 0, 0) == Decision(False)
    assert needs_rollback(table, 10, 0, 0, 10, 10, 0) == Decision(True, 0, REASON_NO_UUID)


def test_diverging_branch_at_seqno_0_with_strict_uuid():
    table = [FailoverEntry(LATEST, 0)]
    assert not needs_rollback(table, 0, 10, 0, 0, 0, 0, strict_uuid=True).rollback
    assert not needs_rollback(table, 0, 10, LATEST, 0, 0, 0, strict_uuid=True).rollback
    assert needs_rollback(table, 0, 10, 0xABCD, 0, 0, 0, strict_uuid=True).rollback
    assert not needs_rollback(table, 0, 10, 0xABCD, 0, 0, 0, strict_uuid=False).rollback


def test_purge_rule_and_its_exemptions():
    table = [FailoverEntry(LATEST, 0)]
    d = needs_rollback(table, 5, 100, LATEST, 5, 5, 10)
    assert d == Decision(True, 0, "purge seqno (10) is greater than start seqno - could miss "
                                  "purged deletions")
    assert not needs_rollback(table, 5, 100, LATEST, 5, 5, 10, remote_purge=10).rollback
    assert not needs_rollback(table, 5, 100, LATEST, 5, 5, 0).rollback     # IgnorePurgedTombstones
    assert not needs_rollback(table, 5, 100, LATEST, 5, 5, 10, max_collection_high=4).rollback


def test_sanitize_drops_uuid_zero_and_out_of_order_and_caps():
    raw = [FailoverEntry(5, 50), FailoverEntry(0, 40), FailoverEntry(4, 60), FailoverEntry(3, 30)]
    assert sanitize(raw, 100) == [FailoverEntry(5, 50), FailoverEntry(3, 30)]
    assert sanitize([FailoverEntry(0, 1)], 77) == [FailoverEntry(PLACEHOLDER_UUID, 77)]
    many = [FailoverEntry(100 - i, 100 - i) for i in range(40)]
    assert len(sanitize(many, 100)) == 25


def test_cli_rejects_bad_lines_and_bad_tables(tmp_path):
    code, out, err = rollback_check(tmp_path, SEED_TABLE, 10, 0, "1 2 3\nx y z w\n1111 3 3 3\n")
    assert code == 2 and out.count("Testing UUID") == 1
    assert err.splitlines() == [
        "dcpdissect: error: stdin line 1: 3 fields; want '<uuid> <snapStart> <snapEnd> <start>'",
        "dcpdissect: error: stdin line 2: uuid: 'x' is not a number from 0 to 2^64-1 in decimal "
        "or 0x hex; want '<uuid> <snapStart> <snapEnd> <start>'"]
    code, out, err = rollback_check(tmp_path, "{}", 10, 0, "")
    assert code == 2 and "non-empty JSON array" in err and "Traceback" not in err
