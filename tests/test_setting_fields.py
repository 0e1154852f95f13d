"""dissect shows what sets a connection up: HELLO's features by name and DcpControl's key
and value, as tshark's couchbase dissector decodes the same frames."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from dcpdissect.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
PDU = re.compile(r"^Couchbase Protocol, (Hello|DCP Control) (Request|Response)")


def tshark_settings(path) -> list[tuple]:
    """(frame, opcode, request, [(feature id, name)], key, value) of every Hello and
    DcpControl message, from ``tshark -O couchbase``."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", "tcp.port==11210,couchbase", "-d",
         "tcp.port==11209,couchbase", "-Y", "couchbase.opcode==0x1f || couchbase.opcode==0x5e",
         "-O", "couchbase"], capture_output=True, text=True, check=True).stdout
    got, frame, pdu = [], None, None
    for line in out.splitlines():
        if m := re.match(r"^Frame (\d+):", line):
            frame = int(m[1])
        elif line.startswith("Couchbase Protocol"):
            pdu = None
            if m := PDU.match(line):
                pdu = [frame, m[1], m[2] == "Request", [], None, None]
                got.append(pdu)
        elif pdu is not None and (m := re.match(r"^ +Feature: (.+) \((0x[0-9a-f]{4})\)$", line)):
            pdu[3].append((int(m[2], 16), m[1]))
        elif pdu is not None and (m := re.match(r"^    (Key|Value): (.*)$", line)):
            pdu[4 if m[1] == "Key" else 5] = m[2]
    return [tuple(p) for p in got]


def ours(capsys, path) -> list[dict]:
    assert main(["dissect", str(path), "--format", "jsonl", "--opcode", "Hello",
                 "--opcode", "DcpControl"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.tshark
@pytest.mark.parametrize("sample", ["controls-legal.pcap", "flow-legal.pcap",
                                    "real/replication-lo.pcapng"])
def test_hello_features_and_controls_are_tsharks(capsys, sample):
    theirs = tshark_settings(SAMPLES / sample)
    records = ours(capsys, SAMPLES / sample)
    assert len(records) == len(theirs) and any(t[3] for t in theirs) \
        and any(t[1] == "DCP Control" and t[2] for t in theirs)
    for r, (frame, op, request, features, key, value) in zip(records, theirs):
        assert (r["frame"], r["opcode_name"], r["request"]) == \
            (frame, {"Hello": "Hello", "DCP Control": "DcpControl"}[op], request)
        fields = r["fields"]
        if op == "Hello":
            assert fields["features"] == [f for f, _ in features], (sample, frame)
            names = r["names"]["features"].split(",") if features else []
            assert [n.lower() for n in names] == [n.lower() for _, n in features]
        elif request:
            assert (fields["control_key"], fields["control_value"]) == (key, value)
        else:
            assert fields == {}


def test_the_table_shows_them(capsys):
    assert main(["dissect", str(SAMPLES / "controls-legal.pcap"), "--opcode", "Hello",
                 "--opcode", "DcpControl", "--conn", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[2].endswith("features=XATTR,JSON,Collections key='dcpdissect'")
    assert rows[3].endswith("features=XATTR,JSON,Collections")
    assert rows[4].endswith("enable_noop=true")
    assert rows[5].endswith("DcpControl  Success      0x00000003")    # its response: nothing
