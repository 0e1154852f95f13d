"""`dcpdissect dissect`: output formats, filters, and bad input (exit 2, no traceback)."""

import gzip
import json
import struct
import subprocess
import sys

import pytest

from dcpdissect.cli import main


def run(*args, stdin=None):
    proc = subprocess.run([sys.executable, "-m", "dcpdissect.cli", *args],
                          capture_output=True, input=stdin)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def jsonl(samples_dir, name, *extra, capsys):
    assert main(["dissect", str(samples_dir / name), "--format", "jsonl", *extra]) == 0
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def test_jsonl_has_the_documented_keys(samples_dir, capsys):
    rows, err = jsonl(samples_dir, "clean-replication.pcap", capsys=capsys)
    assert len(rows) == 77             # as many as tshark decodes
    for row in rows:
        assert {"frame", "frames", "opcode", "magic", "vbucket", "status", "opaque",
                "fields"} <= set(row)
        assert isinstance(row["frame"], int) and row["frame"] in row["frames"] or row["frame"] > max(row["frames"])
    v22 = next(r for r in rows if r["opcode"] == 0x56 and r["layout"] == "V2.2")
    assert v22["fields"]["purge_seqno"] == "0" and v22["names"]["flags"] == "disk+checkpoint"
    sid = [r for r in rows if r["stream_id"] == 7]
    assert len(sid) == 5 and all(r["magic"] == 0x08 for r in sid)
    assert "77 messages" in err and "2 TCP connections" in err and "0 gaps" in err


def test_filters(samples_dir, capsys):
    rows, _ = jsonl(samples_dir, "clean-replication.pcap", "--opcode", "DcpSnapshotMarker",
                    "--vbucket", "2", capsys=capsys)
    assert [(r["opcode"], r["vbucket"]) for r in rows] == [(0x56, 2)]
    rows, _ = jsonl(samples_dir, "clean-replication.pcap", "--opcode", "0x53", capsys=capsys)
    assert len(rows) == 8 and {r["request"] for r in rows} == {True, False}


def test_table_shows_marker_fields_and_failover_log(samples_dir, capsys):
    assert main(["dissect", str(samples_dir / "clean-replication.pcap")]) == 0
    out = capsys.readouterr().out
    assert "V2.2 start=0 end=6 flags=disk+checkpoint mvs=6 hcs=0 purge=0 hps=0" in out
    assert "failover_log=[11651590505119481858@0]" in out    # 0xa1b2c3d4e5f60002, decimal
    assert "52,54,56" in out  # the 4000-byte document split over three segments


def test_loss_summary_reports_gap_and_resync(samples_dir, capsys):
    assert main(["dissect", str(samples_dir / "tcp-loss-header.pcap")]) == 0
    err = capsys.readouterr().err
    assert "1 gap " in err and "1 resync," in err


def test_stdin_and_gzip(samples_dir):
    data = (samples_dir / "clean-replication.pcap").read_bytes()
    code, out, err = run("dissect", "-", "--format", "jsonl", stdin=gzip.compress(data))
    assert code == 0 and len(out.splitlines()) == 66 + 11


def test_extra_port_and_tls_port(samples_dir, tmp_path):
    from dcpdissect.samples import netsynth as ns
    from dcpdissect.samples.dsl import Script, dcp_open
    moved = Script(ns.Endpoint("10.1.0.2", 40000), ns.Endpoint("10.1.0.1", 12000))
    moved.c2s(dcp_open("moved", 1, 9))
    tls = Script(ns.Endpoint("10.1.0.2", 40001), ns.Endpoint("10.1.0.1", 11207))
    tls.c2s(b"\x16\x03\x01\x00\x05hello")
    path = tmp_path / "ports.pcap"
    ns.write_pcap(str(path), [moved.conv, tls.conv])
    code, out, err = run("dissect", str(path), "--format", "jsonl")
    # one DcpOpen and no answer: nothing confirms it as MCBP (exit 2, name --port)
    assert code == 2 and "1 TLS connection not decoded" in err and "--port" in err
    assert err.count("\n") == 1 and json.loads(out) == {
        "type": "error", "ts_ns": _last_ts_ns(path.read_bytes()), "file": str(path),
        "error": err.strip().removeprefix("dcpdissect: error: ")}
    code, out, err = run("dissect", str(path), "--format", "jsonl", "--port", "12000")
    assert code == 0 and json.loads(out)["fields"]["flags"] == 1
    code, out, err = run("dissect", str(path), "--format", "jsonl", "--any-port")
    # --any-port asks the same proof: a lone DcpOpen is not enough
    assert code == 2 and json.loads(out)["type"] == "error" and "--port" in err


def _cut(samples_dir, tmp_path, n):
    data = (samples_dir / "clean-replication.pcap").read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[:n])
    return path


def _record_offsets(data):
    pos, out = 24, []
    while pos + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        out.append(pos)
        pos += 16 + caplen
    return out


def _last_ts_ns(data: bytes) -> str:
    """The time of a little-endian classic pcap's last record, from its header fields."""
    ns = struct.unpack_from("<I", data)[0] == 0xA1B23C4D
    *_, last = _record_offsets(data)
    secs, frac = struct.unpack_from("<II", data, last)
    return str(secs * 1_000_000_000 + (frac if ns else frac * 1000))


@pytest.mark.parametrize("case", ["missing", "not-a-capture", "empty", "cut-body", "cut-header",
                                  "absurd-caplen", "directory"])
def test_bad_input_exits_2_with_one_clear_message(case, samples_dir, tmp_path):
    data = (samples_dir / "clean-replication.pcap").read_bytes()
    offsets = _record_offsets(data)
    path = tmp_path / f"{case}.pcap"
    if case == "missing":
        pass
    elif case == "not-a-capture":
        path.write_text("hello, I am a text file\n")
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "cut-body":
        path.write_bytes(data[:offsets[40] + 30])      # inside record 41's data
    elif case == "cut-header":
        path.write_bytes(data[:offsets[40] + 7])       # inside record 41's header
    elif case == "absurd-caplen":
        bad = bytearray(data)
        struct.pack_into("<I", bad, offsets[40] + 8, 0x7FFFFFF0)
        path.write_bytes(bytes(bad))
    elif case == "directory":
        path = tmp_path
    code, out, err = run("dissect", str(path), "--format", "jsonl")
    assert code == 2
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("dcpdissect: error:")]
    assert len(errors) == 1 and str(path) in errors[0]
    if case in ("cut-body", "cut-header", "absurd-caplen"):
        assert "frame 41" in errors[0]
        # everything decoded before the fault is still printed
        _, full, _ = run("dissect", str(samples_dir / "clean-replication.pcap"), "--format", "jsonl")
        before = [json.loads(x) for x in full.splitlines() if json.loads(x)["frame"] <= 40]
        *records, fault = [json.loads(x) for x in out.splitlines()]
        assert records == before and len(before) > 20
        # ts_ns: frame 40's time, the last read (tshark: frame.time_epoch 1700000000.000019)
        assert fault == {"type": "error", "ts_ns": "1700000000000019000", "file": str(path),
                         "error": errors[0].removeprefix("dcpdissect: error: ")}
    else:       # nothing decoded: the error record alone
        assert [json.loads(x)["type"] for x in out.splitlines()] == ["error"]


def test_usage_errors_exit_2():
    code, out, err = run("dissect")
    assert code == 2 and err.startswith("dcpdissect: error: ") and "--help" in err
    assert err.count("\n") == 1            # one line
    code, out, err = run("dissect", "x.pcap", "--opcode", "NoSuchThing")
    assert code == 2 and "unknown opcode" in err


def test_markers_show_their_start_seqno_convention(samples_dir, capsys):
    rows, _ = jsonl(samples_dir, "clean-replication.pcap", "--opcode", "0x56", capsys=capsys)
    assert [r["convention"] for r in rows] == ["first-of-stream"] * 4 + ["first-item"]
    rows, _ = jsonl(samples_dir, "clean-replication.pcap", "--opcode", "0x56",
                    "--no-conventions", capsys=capsys)
    assert all(r["convention"] is None for r in rows)


def test_filters_that_match_nothing_say_so_with_what_is_close(samples_dir):
    sample = str(samples_dir / "resume-collapsed.pcap")
    code, out, err = run("dissect", sample, "--opcode", "DcpExpiration")
    assert code == 0 and out.strip() == ""
    [line] = [x for x in err.splitlines() if "no message matches" in x]
    assert "not in the capture: DcpExpiration (did you mean " in line
    assert "opcodes present: DcpDeletion, DcpGetFailoverLog, DcpMutation, DcpOpen," in line
    code, out, err = run("dissect", sample, "--vbucket", "7")
    assert "vbuckets of its requests: 0" in err and "connections:" not in err
    code, out, err = run("dissect", sample, "--follow", "vb:0,conn:5")
    assert err.splitlines()[-1].endswith("vbuckets of its requests: 0; connections: 1, 2")
    code, out, err = run("dissect", sample, "--opcode", "DcpMutation")
    assert "no message matches" not in err and out.strip()


def test_output_file_takes_the_rows_and_stdout_stays_empty(samples_dir, tmp_path, capsys):
    """-o FILE: the same lines as stdout gives, a table's legend included; the summary
    stays on stderr."""
    sample = str(samples_dir / "resume-collapsed.pcap")
    for fmt in ("jsonl", "table"):
        assert main(["dissect", sample, "--format", fmt, "--vbucket", "0,1"]) == 0
        want = capsys.readouterr().out
        out = tmp_path / f"rows.{fmt}"
        assert main(["dissect", sample, "--format", fmt, "--vbucket", "0,1", "-o",
                     str(out)]) == 0
        got, err = capsys.readouterr()
        assert got == "" and out.read_text() == want and "16 messages" in err
    assert "connections" in want
