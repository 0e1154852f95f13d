"""docs/protocol.md is rendered from the protocol tables and kept fresh."""

from pathlib import Path

from dcpdissect.docgen.protocol_doc import render
from dcpdissect.protocol import DCP_OPCODES, Shape
from dcpdissect.protocol.filters import field_filters
from dcpdissect.scapy.layers import BODY_DISPATCH

ROOT = Path(__file__).resolve().parent.parent


def test_protocol_markdown_is_current():
    doc = (ROOT / "docs" / "protocol.md").read_text()
    assert doc == render(), "docs/protocol.md is stale: python -m dcpdissect.regen"


def test_every_opcode_field_filter_and_class_is_listed():
    text = render()
    for op in DCP_OPCODES:
        assert f"### 0x{op.code:02X} {op.name}" in text
        for request, shape in ((True, op.request), (False, op.response)):
            if not request and shape == Shape():
                continue
            abbrevs = field_filters(op, request)
            for lay in shape.extras + shape.values:
                for f in lay.fields:
                    assert f"| {f.offset} | {f.width} | `{f.name}` |" in text
                    assert f"`{abbrevs[f.name]}`" in text
                for c in shape.checks:
                    assert f"[`{c.rule}`]" in text
            for cls in BODY_DISPATCH[(op.code, request)]:
                assert f"`{cls.__name__}` (" in text


def test_docs_point_to_the_reference_instead_of_repeating_it():
    lua = (ROOT / "docs" / "lua.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "protocol.md" in lua and "protocol.md" in readme
    assert "`dcp.snapshot.high_prepared_seqno`" not in lua     # the field list lives there now
