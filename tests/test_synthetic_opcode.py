"""A made-up opcode added to the protocol tables reaches every renderer and every role.

``hypothetical_tables`` adds ``DcpHypothetical`` (0x68: a producer-sent stream item that
carries a document) to a copy of the tables and patches every module that imported a table
(``protocol.opcode_tables`` derives them all), plus the two per-opcode caches built from
them: the codec's decode plans and the Scapy body classes. pytest's monkeypatch restores
everything after each test. The checks use real behaviour: codec round trip, Scapy
dissection, the rendered Lua plugin run by tshark, docs/protocol.md, evidence redaction and
the analyzer's stream rules.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dcpdissect
from dcpdissect import protocol
from dcpdissect.protocol import (
    DATATYPE_ALL, Field, Layout, Opcode, Presence, Sender, Shape,
)
from dcpdissect.samples import netsynth as ns

TSHARK = shutil.which("tshark")
CODE = 0x68
HYPOTHETICAL = Opcode(
    CODE, "DcpHypothetical", "DCP Hypothetical", section="hypothetical", stream=True, item=True,
    document=True, sender=Sender.PRODUCER, seqno_field="by_seqno",
    request=Shape((Layout("V1", (Field("by_seqno", 0, 8, "By seqno", short="seqno"),
                                 Field("rev_seqno", 8, 8, "Rev seqno", short="rev")), 16),),
                  key=Presence.REQUIRED, value=Presence.OPTIONAL, datatypes=DATATYPE_ALL,
                  validated=True))
SECRET_KEY, SECRET_VALUE = b"secret-key", b"secret-value"
VB, OPAQUE, SEQNO, REV = 3, 0x300, 5, 7


def _import_everything() -> None:
    """Import every module of the package first: a module imported for the first time
    while the tables are patched would keep the patched tables after the test."""
    for info in pkgutil.walk_packages(dcpdissect.__path__, "dcpdissect."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def _patch_tables(monkeypatch, op: Opcode) -> None:
    _import_everything()
    new = protocol.opcode_tables(protocol.DCP_OPCODES + (op,))
    old = {name: getattr(protocol, name) for name in new}
    for module in [m for name, m in sys.modules.items()
                   if m is not None and (name == "dcpdissect" or name.startswith("dcpdissect."))]:
        for name, value in old.items():
            if getattr(module, name, None) is value:
                monkeypatch.setattr(module, name, new[name])
    # per-opcode state built from the tables
    monkeypatch.setattr(importlib.import_module("dcpdissect.codec.decode"), "_PLANS", {})
    layers = importlib.import_module("dcpdissect.scapy.layers")
    classes = dict(layers.BODY_CLASSES)
    dispatch = {k: list(v) for k, v in layers.BODY_DISPATCH.items()}
    layers.generate((op,), classes, dispatch)
    monkeypatch.setattr(layers, "BODY_CLASSES", classes)
    monkeypatch.setattr(layers, "BODY_DISPATCH", dispatch)


@pytest.fixture
def hypothetical_tables(monkeypatch):
    _patch_tables(monkeypatch, HYPOTHETICAL)
    assert protocol.OPCODES[CODE] is HYPOTHETICAL
    return HYPOTHETICAL


def _item() -> bytes:
    from dcpdissect.codec import encode
    return encode(CODE, {"by_seqno": SEQNO, "rev_seqno": REV}, key=SECRET_KEY, value=SECRET_VALUE,
                  vbucket=VB, opaque=OPAQUE, cas=0x17A0000000000005)


def _capture(path: Path) -> Path:
    """A producer connection: DcpOpen, a stream request and its failover log, then one
    DcpHypothetical item on the stream before any snapshot marker."""
    from dcpdissect.samples.dsl import dcp_open, failover, ok, stream_req
    conv = ns.TcpConversation(ns.Endpoint("10.9.0.2", 50400), ns.Endpoint("10.9.0.1", 11210))
    conv.send("c2s", dcp_open("hypothetical-consumer", 0x01, 1))
    conv.send("s2c", ok(protocol.opcode_code("DcpOpen"), 1))
    conv.send("c2s", stream_req(VB, OPAQUE))
    conv.send("s2c", failover(OPAQUE, (0xAB00000000000000, 0)))
    conv.send("s2c", _item())
    conv.close()
    ns.write_pcap(str(path), [conv.packets()])
    return path


# --- (a) codec ----------------------------------------------------------------------------

def test_codec_round_trip(hypothetical_tables):
    from dcpdissect.codec import decode
    m = decode(_item())
    assert m.spec is HYPOTHETICAL and m.name == "DcpHypothetical"
    assert m.layout == "V1" and m.problems == []
    assert m.fields == {"by_seqno": SEQNO, "rev_seqno": REV}
    assert (m.key, bytes(m.value), m.vbucket, m.opaque) == (SECRET_KEY, SECRET_VALUE, VB, OPAQUE)


# --- (b) Scapy ----------------------------------------------------------------------------

def test_scapy_dissects_it_into_its_own_class(hypothetical_tables):
    from dcpdissect.scapy import layers
    pkt = layers.MCBP(_item())
    body = pkt.payload
    assert type(body).__name__ == "DcpHypothetical"
    assert body.table_fields() == {"by_seqno": SEQNO, "rev_seqno": REV}
    assert body.key_bytes == SECRET_KEY and body.value_bytes == SECRET_VALUE
    assert pkt.summary() == ("DcpHypothetical request vb:3 seqno=5 rev=7 key='secret-key' "
                             "value_len=12")
    # and crafting: the body class sets the opcode
    cls = layers.BODY_CLASSES["DcpHypothetical"]
    built = bytes(layers.MCBP(vbucket=VB, opaque=OPAQUE, cas=0x17A0000000000005)
                  / cls(by_seqno=SEQNO, rev_seqno=REV, key=SECRET_KEY, value=SECRET_VALUE))
    assert built == _item()


# --- (c) Lua ------------------------------------------------------------------------------

def test_lua_render_has_its_fields_and_shape(hypothetical_tables):
    from dcpdissect.luagen.render import render
    from dcpdissect.protocol.filters import field_filters
    assert field_filters(HYPOTHETICAL, True) == {"by_seqno": "dcp.hypothetical.by_seqno",
                                           "rev_seqno": "dcp.hypothetical.rev_seqno"}
    lua = render()
    assert '"dcp.hypothetical.by_seqno"' in lua and '"dcp.hypothetical.layout"' in lua
    assert "SHAPES[0x68] = {name = \"DcpHypothetical\"" in lua


@pytest.mark.tshark
@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_tshark_shows_its_fields(hypothetical_tables, tmp_path):
    from dcpdissect.luagen.render import render
    plugin = tmp_path / "dcpdissect.lua"
    plugin.write_text(render())
    pcap = _capture(tmp_path / "hypothetical.pcap")
    proc = subprocess.run(
        [TSHARK, "-r", str(pcap), "-X", f"lua_script:{plugin}", "-o",
         "tcp.reassemble_out_of_order:TRUE", "-Y", f"dcp.opcode == 0x{CODE:02x}", "-T", "fields",
         "-e", "dcp.hypothetical.by_seqno", "-e", "dcp.hypothetical.rev_seqno",
         "-e", "dcp.hypothetical.layout", "-e", "dcp.key", "-e", "_ws.lua.error"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Lua: Error" not in proc.stderr
    assert proc.stdout.split("\n")[0].split("\t") == [str(SEQNO), str(REV), "V1", "secret-key", ""]


# --- (d) docs -----------------------------------------------------------------------------

def test_protocol_reference_lists_it(hypothetical_tables):
    from dcpdissect.docgen.protocol_doc import render
    text = render()
    assert "### 0x68 DcpHypothetical" in text
    assert "| `0x68` | [DcpHypothetical](#0x68-dcphypothetical) | DCP Hypothetical | `hypothetical` " \
           "| producer | document, stream, item |" in text
    assert "| 0 | 8 | `by_seqno` | By seqno | `dcp.hypothetical.by_seqno` | dec | `seqno` |" in text
    assert "| 8 | 8 | `rev_seqno` | Rev seqno | `dcp.hypothetical.rev_seqno` | dec | `rev` |" in text
    assert "Scapy: `DcpHypothetical` (extras V1)." in text


# --- (e) redaction ------------------------------------------------------------------------

def _bundle_bytes(out: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(out.iterdir()))


def test_evidence_redaction_removes_its_key_and_value(hypothetical_tables, tmp_path):
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.codec import decode
    from dcpdissect.reports.evidence import document_ranges, write_evidence
    data = _item()
    m = decode(data)
    assert document_ranges(data) == [m.key_range, m.value_range]    # the decoder's offsets
    assert data[slice(*m.key_range)] == SECRET_KEY and data[slice(*m.value_range)] == SECRET_VALUE
    pcap = _capture(tmp_path / "hypothetical.pcap")
    findings, summary = analyze_file(str(pcap))
    assert any(f.pdu == data for f in findings)
    plain = write_evidence(str(pcap), findings, summary, tmp_path / "plain")
    assert SECRET_KEY in _bundle_bytes(plain) and SECRET_VALUE in _bundle_bytes(plain)
    out = write_evidence(str(pcap), findings, summary, tmp_path / "redacted", redact=True)
    blob = _bundle_bytes(out)
    for secret in (SECRET_KEY, SECRET_VALUE):
        assert secret not in blob
        assert secret.hex(" ")[:20] not in blob.decode("utf-8", "replace")    # hexdumps


# --- (f) the stream role ------------------------------------------------------------------

def test_analyzer_treats_it_as_a_stream_item(hypothetical_tables, tmp_path):
    from dcpdissect.analysis.run import analyze_file
    findings, _ = analyze_file(str(_capture(tmp_path / "hypothetical.pcap")))
    rules = {f.rule for f in findings}
    assert "data-before-marker" in rules and "unknown-opcode" not in rules
    f = next(f for f in findings if f.rule == "data-before-marker")
    assert f.vbucket == VB and f.pdu == _item() and "DcpHypothetical seqno 5" in f.message


def test_without_the_table_entry_it_is_unknown(tmp_path):
    """The control, after the tests above restored the tables: the same capture means
    nothing (so the checks above are the table entry's doing)."""
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.codec import decode
    from dcpdissect.docgen.protocol_doc import render
    from dcpdissect.reports.evidence import document_ranges
    from dcpdissect.scapy import layers
    findings, _ = analyze_file(str(_capture(tmp_path / "hypothetical.pcap")))
    assert "data-before-marker" not in {f.rule for f in findings}
    # an opcode without a layout is redacted whole by default (key and value)
    item = _item()
    start = 24 + item[4]                    # after the header and the 16-byte extras
    keylen = int.from_bytes(item[2:4], "big")
    assert document_ranges(item) == [(start, start + keylen), (start + keylen, len(item))]
    assert decode(_item()).spec is None
    assert CODE not in protocol.OPCODES and "DcpHypothetical" not in protocol.OPCODE_CODES
    assert (CODE, True) not in layers.BODY_DISPATCH and "DcpHypothetical" not in layers.BODY_CLASSES
    assert type(layers.MCBP(_item()).payload).__name__ == "MCBPGeneric"
    assert "Hypothetical" not in render()
