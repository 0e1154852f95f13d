"""``dcpdissect streams``: one record per DCP stream, as table, jsonl and in the Markdown
report; the pipeline's ``streams`` table holds the same records."""

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from dcpdissect.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(str(p) for p in (ROOT / "samples").iterdir() if p.is_file())
MAX = str((1 << 64) - 1)


def records(capsys, path) -> list[dict]:
    assert main(["streams", str(path), "--format", "jsonl"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_rollback_then_a_request_that_succeeds(capsys):
    """rollback-correct: the resume {1,4} start 3 is answered ROLLBACK(1); the request from
    1 succeeds and carries a marker [1,5] and mutations 2..5."""
    first, second = records(capsys, ROOT / "samples" / "rollback-correct.pcap")
    assert (first["vbucket"], first["opaque"], first["dcp_name"], first["role"]) == \
        (3, 0x10, "connector-a", "producer")
    assert (first["req_start_seqno"], first["req_end_seqno"], first["req_vbucket_uuid"],
            first["req_snap_start_seqno"], first["req_snap_end_seqno"]) == \
        ("3", MAX, str(0x1111), "1", "4")
    assert (first["answer"], first["rollback_seqno"], first["ended"], first["messages"]) == \
        ("rollback", "1", "refused", 0)
    assert (second["opaque"], second["answer"], second["req_start_seqno"]) == (0x11, "success", "1")
    assert second["items"] == {"DcpSnapshotMarker": 1, "DcpMutation": 4}
    assert (second["markers"], second["first_seqno"], second["last_seqno"]) == (1, "2", "5")
    assert (second["snapshot_start_seqno"], second["snapshot_end_seqno"]) == ("1", "5")
    assert (second["ended"], second["end_reason"]) == ("connection close", "fin")
    assert second["client"] == "10.0.0.5:41000" and second["server"].endswith(":11210")


def test_stream_end_close_stream_and_findings(capsys):
    recs = records(capsys, ROOT / "samples" / "lifecycle-legal.pcap")
    ends = {(r["vbucket"], r["ended"], r["end_reason"]) for r in recs}
    assert (0, "StreamEnd", "Slow") in ends            # the Slow end, then its re-request
    assert (2, "CloseStream", "Success") in ends
    assert [r["req_start_seqno"] for r in recs if r["vbucket"] == 0] == ["0", "2"]
    collapsed = records(capsys, ROOT / "samples" / "resume-collapsed.pcap")
    assert [(r["connection"], r["errors"]) for r in collapsed] == [(1, 0), (2, 1)]


def test_both_legs_of_the_proxy(capsys):
    """replica-node: ns_server relays each stream unchanged from the producer leg to the
    consumer leg (where the data travels client→server); the producer leg has no FIN."""
    recs = records(capsys, ROOT / "samples" / "replica-node.pcap")
    legs = {c: {r["vbucket"]: r for r in recs if r["connection"] == c} for c in (1, 2)}
    assert sorted(legs[1]) == sorted(legs[2]) == [5, 6, 7]
    assert {r["role"] for r in legs[1].values()} == {"producer"}
    assert {r["role"] for r in legs[2].values()} == {"consumer"}
    for vb in (5, 6, 7):
        assert legs[1][vb]["items"] == legs[2][vb]["items"] and legs[1][vb]["items"]
    assert (legs[1][7]["ended"], legs[1][7]["end_reason"]) == ("StreamEnd", "Ok")
    assert {legs[1][vb]["ended"] for vb in (5, 6)} == {"capture end"}


def test_a_stream_whose_request_was_not_captured(capsys):
    recs = records(capsys, ROOT / "samples" / "tcp-mid-stream.pcap")
    assert recs and all(r["request_frame"] is None and r["answer"] is None for r in recs)
    assert all(r["role"] is None for r in recs)


def test_table_shows_the_legend_and_the_rows(capsys):
    assert main(["streams", str(ROOT / "samples" / "rollback-correct.pcap")]) == 0
    out, err = capsys.readouterr()
    assert "connector-a" in out and "10.0.0.5:41000" in out
    assert "rollback to 1" in out and "Mutation 4" in out and "2..5" in out
    assert "3..max uuid 4369 snap [1,4]" in out
    assert "2 streams" in err and "rollback to" not in err      # results on stdout only


def test_jsonl_of_every_sample_matches_the_schema(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "jsonl-schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    total = 0
    for path in SAMPLES:
        main(["streams", path, "--format", "jsonl"])
        for line in capsys.readouterr().out.splitlines():
            record = json.loads(line)
            errors = list(validator.iter_errors(record))
            assert not errors, f"{path}: {errors[0].message}"
            total += 1
    assert total > 100


def test_markdown_report_has_the_streams_table(capsys):
    main(["analyze", str(ROOT / "samples" / "rollback-correct.pcap"), "--format", "markdown"])
    out = capsys.readouterr().out
    section = out[out.index("## Streams"):]
    assert "| rollback to 1 |" in section and "connector-a" in section


@pytest.mark.parametrize("content", [None, b"not a capture at all\n"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content):
    path = tmp_path / "bad.pcap"
    if content is not None:
        path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "streams", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dcpdissect: error:")]
    assert len(errors) == 1 and str(path) in errors[0]
    assert "Traceback" not in proc.stderr


def _as_record(row: dict) -> dict:
    """A Parquet ``streams`` row as the jsonl record: decimals as strings, items parsed."""
    out = {"type": "stream"}
    for k, v in row.items():
        if k == "capture_file":
            continue
        out[k] = str(v) if isinstance(v, Decimal) else json.loads(v) if k == "items" else v
    return out


@pytest.mark.spark
@pytest.mark.slow
def test_pipeline_streams_table_equals_streams_on_every_sample(spark, tmp_path, capsys):
    import pyarrow.parquet as pq

    from dcpdissect.pipeline.spark import run_pipeline
    run_pipeline(spark, SAMPLES, str(tmp_path / "out"), progress=None)
    table: dict = {}
    for row in pq.read_table(tmp_path / "out" / "streams").to_pylist():
        table.setdefault(row["capture_file"], []).append(_as_record(row))
    streams = 0
    for path in SAMPLES:
        main(["streams", path, "--format", "jsonl"])
        want = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert all(r["ts_ns"] is not None for r in want), path
        assert table.get(path, []) == want, path
        streams += len(want)
    assert streams > 100


def test_filters_keep_what_they_name(capsys):
    """lifecycle-legal: 11 streams on connections 1..3, vbuckets 0..9 (vbuckets 6 and 7 on
    connection 2); resume-collapsed: only connection 2's stream has a finding (1 error)."""
    path = ROOT / "samples" / "lifecycle-legal.pcap"
    assert {(r["connection"], r["vbucket"]) for r in records(capsys, path)} >= {(2, 6), (2, 7)}
    assert main(["streams", str(path), "--format", "jsonl", "--vbucket", "6,7",
                 "--vbucket", "0", "--conn", "2"]) == 0
    kept = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["connection"], r["vbucket"]) for r in kept) == [(2, 6), (2, 7)]
    assert main(["streams", str(ROOT / "samples" / "resume-collapsed.pcap"), "--format",
                 "jsonl", "--with-findings"]) == 0
    [kept] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (kept["connection"], kept["errors"]) == (2, 1)


def test_a_filter_that_matches_nothing_says_what_is_there(capsys):
    assert main(["streams", str(ROOT / "samples" / "lifecycle-legal.pcap"), "--vbucket", "9",
                 "--conn", "2"]) == 0
    out, err = capsys.readouterr()
    assert out == "no streams\n"
    assert err.splitlines()[-1] == ("dcpdissect: no stream matches the filters; vbuckets "
                                    "present on connection 2: 6, 7; connections: 1, 2, 3")


def test_request_frame_start_time_and_output_file(capsys, tmp_path):
    """rollback-correct (tshark: the stream requests are frames 12 and 16, at 0.000011 and
    0.000015 s after the first frame)."""
    out = tmp_path / "streams.txt"
    assert main(["streams", str(ROOT / "samples" / "rollback-correct.pcap"), "--time",
                 "relative", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    rows = out.read_text().splitlines()
    header = rows.index(next(r for r in rows if r.startswith("conn    vb")))
    assert rows[header].split()[:5] == ["conn", "vb", "sid", "req", "frame"]
    assert [r.split()[3:5] for r in rows[header + 2:]] == [["12", "0.000011"],
                                                           ["16", "0.000015"]]
