"""A made-up opcode added to the protocol tables reaches every renderer and every role.

``synthetic_opcode.py`` defines DcpHypothetical (0x68) and, in a fresh interpreter, adds it to
``DCP_OPCODES`` before ``dcpdissect.protocol`` is imported: the tables derived from them,
every set a consumer module builds at import and every hand list are then what a real table
entry gives. That interpreter observes the package (codec, Scapy, the rendered Lua plugin,
docs/protocol.md, evidence redaction, and the analyzer on captures built here byte by byte:
the stream rules, flow control, the duplicate-key check, durability) and the tests below
judge what it saw against values written here. The last test is the control: in this
interpreter, without the table entry, the same bytes mean nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dcpdissect
import synthetic_opcode as syn
from synthetic_opcode import CODE, NAME, REV, SECRET_KEY, SECRET_VALUE, SEQNO, VB, WINDOW

PROBE = Path(syn.__file__)


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> dict:
    """What the package does with DcpHypothetical in its tables (``out``: the files)."""
    out = tmp_path_factory.mktemp("synthetic")
    syn.write_captures(out)
    root = str(Path(dcpdissect.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    proc = subprocess.run([sys.executable, str(PROBE), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {**json.loads((out / syn.OBSERVED).read_text()), "out": out}


def _rules(findings: list[dict]) -> list[str]:
    return [f["rule"] for f in findings]


def test_the_tables_hold_it(observed):
    assert observed["tables"] == {
        "name": NAME, "sync_write": "mutation", "key_namespace": "committed",
        "roles": ["DOCUMENT_ITEM_OPCODES", "DOCUMENT_OPCODES", "ITEM_OPCODES", "STREAM_OPCODES"]}


# --- (a) codec ----------------------------------------------------------------------------

def test_codec_decodes_it(observed):
    m = observed["codec"]
    assert m["is_spec"] and m["name"] == NAME and m["layout"] == "V1" and m["problems"] == []
    assert m["fields"] == {"by_seqno": SEQNO, "rev_seqno": REV}
    assert (m["key"], m["value"]) == (SECRET_KEY.hex(), SECRET_VALUE.hex())
    assert (m["vbucket"], m["opaque"]) == (VB, syn.OPAQUE)


# --- (b) Scapy ----------------------------------------------------------------------------

def test_scapy_dissects_it_into_its_own_class(observed):
    s = observed["scapy"]
    assert s["class"] == NAME and s["fields"] == {"by_seqno": SEQNO, "rev_seqno": REV}
    assert (s["key"], s["value"]) == (SECRET_KEY.hex(), SECRET_VALUE.hex())
    assert s["summary"] == ("DcpHypothetical request vb:3 seqno=5 rev=7 key='secret-key' "
                            "value_len=12")
    assert bytes.fromhex(s["built"]) == syn.item()       # crafting: the class sets the opcode


# --- (c) Lua ------------------------------------------------------------------------------

def test_lua_render_has_its_fields_and_shape(observed):
    assert observed["lua"]["abbrevs"] == {"by_seqno": "dcp.hypothetical.by_seqno",
                                          "rev_seqno": "dcp.hypothetical.rev_seqno"}
    lua = (observed["out"] / observed["lua"]["plugin"]).read_text()
    assert '"dcp.hypothetical.by_seqno"' in lua and '"dcp.hypothetical.layout"' in lua
    assert 'SHAPES[0x68] = {name = "DcpHypothetical"' in lua


@pytest.mark.tshark
def test_tshark_shows_its_fields(observed):
    out = observed["out"]
    proc = subprocess.run(
        ["tshark", "-r", str(out / "stream.pcap"), "-X",
         f"lua_script:{out / observed['lua']['plugin']}", "-o",
         "tcp.reassemble_out_of_order:TRUE", "-Y", f"dcp.opcode == 0x{CODE:02x}", "-T", "fields",
         "-e", "dcp.hypothetical.by_seqno", "-e", "dcp.hypothetical.rev_seqno",
         "-e", "dcp.hypothetical.layout", "-e", "dcp.key", "-e", "_ws.lua.error"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Lua: Error" not in proc.stderr
    assert proc.stdout.split("\n")[0].split("\t") == [str(SEQNO), str(REV), "V1", "secret-key", ""]


# --- (d) docs -----------------------------------------------------------------------------

def test_protocol_reference_lists_it(observed):
    text = (observed["out"] / observed["docs"]["reference"]).read_text()
    assert "### 0x68 DcpHypothetical" in text
    assert "| `0x68` | [DcpHypothetical](#0x68-dcphypothetical) | DCP Hypothetical | `hypothetical` " \
           "| producer | document, stream, item |" in text
    assert "| 0 | 8 | `by_seqno` | By seqno | `dcp.hypothetical.by_seqno` | dec | `seqno` |" in text
    assert "| 8 | 8 | `rev_seqno` | Rev seqno | `dcp.hypothetical.rev_seqno` | dec | `rev` |" in text
    assert "Scapy: `DcpHypothetical` (extras V1)." in text


# --- (e) redaction ------------------------------------------------------------------------

def _bundle_bytes(out: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(out.iterdir()))


def test_evidence_redaction_removes_its_key_and_value(observed):
    r = observed["redaction"]
    data = syn.item()
    start = 24 + 16                                     # after the header and the extras
    key_range, value_range = [start, start + len(SECRET_KEY)], [start + len(SECRET_KEY), len(data)]
    assert r["document_ranges"] == r["decoded_ranges"] == [key_range, value_range]
    plain, redacted = (observed["out"] / name for name in r["bundles"])
    assert SECRET_KEY in _bundle_bytes(plain) and SECRET_VALUE in _bundle_bytes(plain)
    blob = _bundle_bytes(redacted)
    for secret in (SECRET_KEY, SECRET_VALUE):
        assert secret not in blob
        assert secret.hex(" ")[:20] not in blob.decode("utf-8", "replace")    # hexdumps


# --- (f) the stream role ------------------------------------------------------------------

def test_analyzer_treats_it_as_a_stream_item(observed):
    findings = observed["stream_rules"]["findings"]
    assert _rules(findings) == ["data-before-marker"]
    f = next(f for f in findings if f["rule"] == "data-before-marker")
    assert f["vbucket"] == VB and bytes.fromhex(f["pdu"]) == syn.item()
    assert "DcpHypothetical seqno 5" in f["message"]


# --- (g) flow control: BufferLog counts its bytes -----------------------------------------

def test_flow_control_counts_its_bytes(observed):
    findings = observed["flow_control"]["findings"]
    window = [f for f in findings if f["rule"] == "flow-control-window-exceeded"]
    # the marker (44 bytes) and the first two items (52 each) are unacked at the third
    assert [(f["fields"], bytes.fromhex(f["pdu"])) for f in window] == [
        ({"unacked": 44 + 2 * 52, "window": WINDOW}, syn.FLOW_ITEMS[2])]
    assert window[0]["message"].startswith("DcpHypothetical sent with 148 bytes unacknowledged")
    # the ack of all 200 bytes sent is legal: no more than the producer counted
    assert _rules(findings) == ["flow-control-window-exceeded"]


# --- (h) the duplicate-key check, durability ----------------------------------------------

def test_a_duplicate_key_in_one_snapshot_is_found(observed):
    dup = observed["duplicate_key"]["findings"]
    assert [(f["rule"], f["fields"], bytes.fromhex(f["pdu"])) for f in dup] == [
        ("data-duplicate-key", {"key": "'dup'"}, syn.item(2, b"dup"))]   # not "solo"
    assert "second change of key 'dup' in the snapshot [0,10]" in dup[0]["message"]


def test_durability_treats_it_as_a_committed_write(observed):
    judged = observed["durability"]["findings"]
    assert [(f["rule"], bytes.fromhex(f["pdu"])) for f in judged] == [
        ("sync-mutation-while-pending", syn.item(2, b"doc"))]    # not the "other" key
    assert judged[0]["message"].startswith("DcpHypothetical of 'doc' (seqno 2)")
    assert judged[0]["fields"] == {"prepared_seqno": 1}


# --- (i) the fuzzer: an observer of synthetic_opcode.OBSERVERS, when fuzz/gen.py reads the tables


# --- the control ----------------------------------------------------------------------------

def test_without_the_table_entry_it_is_unknown(tmp_path):
    """In this interpreter (no table entry) the same captures mean nothing, so the checks
    above are the table entry's doing."""
    from dcpdissect import protocol
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.codec import decode
    from dcpdissect.docgen.protocol_doc import render
    from dcpdissect.reports.evidence import document_ranges
    from dcpdissect.scapy import layers
    assert CODE not in protocol.OPCODES and NAME not in protocol.OPCODE_CODES
    syn.write_captures(tmp_path)
    rules = {name: {f.rule for f in analyze_file(str(tmp_path / name))[0]}
             for name in syn.CAPTURES}
    assert "data-before-marker" not in rules["stream.pcap"]
    # not counted: no window exceeded, and the ack of 200 bytes is more than was counted
    assert "flow-control-window-exceeded" not in rules["flow.pcap"]
    assert "buffer-ack-exceeds-sent" in rules["flow.pcap"]
    assert "data-duplicate-key" not in rules["duplicate.pcap"]
    assert "sync-mutation-while-pending" not in rules["durability.pcap"]
    # an opcode without a layout is redacted whole by default (key and value)
    data = syn.item()
    start = 24 + data[4]                    # after the header and the 16-byte extras
    keylen = int.from_bytes(data[2:4], "big")
    assert document_ranges(data) == [(start, start + keylen), (start + keylen, len(data))]
    assert decode(data).spec is None
    assert (CODE, True) not in layers.BODY_DISPATCH and NAME not in layers.BODY_CLASSES
    assert type(layers.MCBP(data).payload).__name__ == "MCBPGeneric"
    assert "Hypothetical" not in render()
