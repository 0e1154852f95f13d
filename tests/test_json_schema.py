"""Every jsonl record of every command keeps every bit of its 64-bit integers (decimal
strings), has ``type`` and ``ts_ns``, and matches docs/jsonl-schema.json (JSON Schema draft
2020-12)."""

import io
import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from dcpdissect.cli import main  # noqa: E402
from dcpdissect.reports.messages import is_u64_name, json_safe, jsonl_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "jsonl-schema.json").read_text())
SAMPLE_FILES = sorted(p.name for p in (ROOT / "samples").iterdir()
                      if p.name.endswith((".pcap", ".pcapng", ".pcap.gz")))


def js_loads(line: str):
    """``json.loads`` as JavaScript (and jq 1.6) parse: every number is a double."""
    return json.loads(line, parse_int=float, parse_float=float)


@pytest.fixture(scope="module")
def validator():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA)


def run(capsys, *argv) -> list[str]:
    main(list(argv))
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


def _no_big_numbers(value, where):
    """No JSON number anywhere that a double cannot hold exactly."""
    if isinstance(value, dict):
        for k, v in value.items():
            _no_big_numbers(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _no_big_numbers(v, f"{where}[{i}]")
    elif type(value) is int:
        assert abs(value) < 2 ** 53, where


@pytest.mark.parametrize("sample", SAMPLE_FILES)
def test_sample_output_matches_schema(sample, validator, capsys):
    path = str(ROOT / "samples" / sample)
    kinds = set()
    for argv in (("dissect", path, "--format", "jsonl"), ("analyze", path, "--format", "jsonl"),
                 ("streams", path, "--format", "jsonl"), ("connections", path, "--format", "jsonl")):
        lines = run(capsys, *argv)
        for line in lines:
            record = json.loads(line)
            assert "type" in record and "ts_ns" in record, f"{argv[0]} {sample}: {line[:200]}"
            errors = sorted(validator.iter_errors(record), key=str)
            assert not errors, f"{argv[0]} {sample}: {errors[0].message} in {line[:300]}"
            _no_big_numbers(record, f"{argv[0]} {sample}")
            kinds.add(record["type"])
    assert "message" in kinds or sample.startswith(("hostile-", "tcp-loss-header")), sample


def test_every_record_type_is_covered(validator, capsys, monkeypatch, tmp_path):
    """The samples exercise every record type of the schema: messages, findings,
    flow_control, streams, connections, an error record (a capture cut inside a frame),
    rollback_check records (with and without --capture) and the nodes records of two
    capture points."""
    seen = set()
    lines = []
    for sample in ("clean-replication.pcap", "flow-violations.pcap", "rollback-violations.pcap"):
        path = str(ROOT / "samples" / sample)
        for command in ("dissect", "analyze", "streams", "connections"):
            lines += run(capsys, command, path, "--format", "jsonl")
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((ROOT / "samples" / "clean-replication.pcap").read_bytes()[:3000])
    lines += run(capsys, "analyze", str(cut), "--format", "jsonl")
    (tmp_path / "failover.json").write_text('[{"id":"0x2222","seq":3},{"id":4369,"seq":0}]')
    for argv in ((str(tmp_path / "failover.json"), "10", "0"),
                 ("--capture", str(ROOT / "samples" / "resume-collapsed.pcap"), "--vbucket", "0")):
        monkeypatch.setattr("sys.stdin", io.StringIO("4369 1 4 3\n0x1111 3 3 3\n"))
        lines += run(capsys, "rollback-check", *argv, "--format", "jsonl")
    multinode = ROOT / "samples" / "multinode"
    lines += run(capsys, "nodes", str(multinode / "dropped-replica.pcapng"),
                 str(multinode / "dropped-active.pcapng"), "--format", "jsonl")
    for line in lines:
        record = json.loads(line)
        errors = sorted(validator.iter_errors(record), key=str)
        assert not errors, f"{errors[0].message} in {line[:300]}"
        _no_big_numbers(record, line[:100])
        seen.add(record["type"])
    assert seen == {"message", "finding", "flow_control", "stream", "connection", "error",
                    "rollback_check", "clock_offset", "connection_pair", "lag"}
    assert set(SCHEMA["$defs"]) >= seen and len(SCHEMA["oneOf"]) == len(seen)


def test_schema_rejects_a_numeric_cas(validator, capsys):
    line = run(capsys, "dissect", str(ROOT / "samples" / "clean-replication.pcap"),
               "--format", "jsonl")[0]
    record = json.loads(line)
    assert validator.is_valid(record)
    record["cas"] = int(record["cas"])
    assert not validator.is_valid(record)


def test_uuids_differing_in_the_low_bit_stay_different(capsys):
    """clean-replication's failover logs hold 0xa1b2c3d4e5f60000 and ...0001: parsed as
    JavaScript would (every number a double) they stay distinct and exact."""
    lines = run(capsys, "dissect", str(ROOT / "samples" / "clean-replication.pcap"),
                "--format", "jsonl", "--opcode", "0x53")
    uuids = set()
    for line in lines:
        r = js_loads(line)
        for entry in r["fields"].get("failover_log", []):
            assert isinstance(entry["vbucket_uuid"], str)
            uuids.add(entry["vbucket_uuid"])
    assert {str(0xa1b2c3d4e5f60000), str(0xa1b2c3d4e5f60001)} <= uuids
    # the same two values as bare JSON numbers collapse into one double
    assert float(0xa1b2c3d4e5f60000) == float(0xa1b2c3d4e5f60001)


def test_jsonl_line_keeps_low_bits_of_every_64_bit_value():
    a, b = 0xa1b2c3d4e5f60000, 0xa1b2c3d4e5f60001
    rec = {"cas": a, "ts_ns": 1_700_000_000_000_000_001, "opaque": 0xffffffff, "vbucket": 3,
           "request": True,
           "fields": {"vbucket_uuid": b, "by_seqno": (1 << 64) - 1, "flags": 7,
                      "failover_log": [{"vbucket_uuid": a, "seqno": 0},
                                       {"vbucket_uuid": b, "seqno": 9}]}}
    got = js_loads(jsonl_line(rec))
    assert got["cas"] == str(a) and got["fields"]["vbucket_uuid"] == str(b)
    assert got["cas"] != got["fields"]["vbucket_uuid"]
    assert [e["vbucket_uuid"] for e in got["fields"]["failover_log"]] == [str(a), str(b)]
    assert [e["seqno"] for e in got["fields"]["failover_log"]] == ["0", "9"]
    assert got["fields"]["by_seqno"] == "18446744073709551615"
    assert got["ts_ns"] == "1700000000000000001"
    # narrower integers stay numbers; booleans are not integers here
    assert got["opaque"] == 0xffffffff and got["vbucket"] == 3 and got["request"] is True
    assert got["fields"]["flags"] == 7
    assert json_safe({"seqno": None, "vbucket_uuid": "0xa"}) == {"seqno": None,
                                                                 "vbucket_uuid": "0xa"}
    assert is_u64_name("snap_end_seqno") and is_u64_name("cas") and not is_u64_name("opaque")


def test_jsonl_line_lists_take_the_name_of_their_list():
    rec = {"by_seqno": [1, 2], "frames": [7, 8], "ids": (3,), "empty": [], "none": {},
           "nested": [[5], {"seqno": 6}]}
    assert jsonl_line(rec) == ('{"by_seqno":["1","2"],"frames":[7,8],"ids":[3],"empty":[],'
                               '"none":{},"nested":[[5],{"seqno":"6"}]}\n')
