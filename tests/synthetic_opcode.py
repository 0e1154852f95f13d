"""A made-up DCP opcode, DcpHypothetical (0x68), and an interpreter whose tables hold it.

DcpHypothetical is a producer-sent stream item that carries a document: extras of a by_seqno
and a rev_seqno, a key, a value; a write committed by itself (like a mutation) that the
consumer answers Success.

``python tests/synthetic_opcode.py DIR`` (run by tests/test_synthetic_opcode.py) installs an
import hook that appends it to ``DCP_OPCODES`` as ``dcpdissect/protocol/opcodes.py`` is
executed, before ``dcpdissect.protocol`` derives its tables and before any consumer imports
them: every table, every set a module computes at import and every hand list is then the
one a real table entry would give. It then observes what the package does with the opcode
and with the captures that :func:`write_captures` wrote to DIR, and writes what it saw to
DIR/observed.json (and the files the observations name to DIR).

The messages and captures are built here byte by byte (struct and the TCP synthesiser), not
by the codec under test: decoding them is what the checks look at.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import struct
import sys
from pathlib import Path

CODE = 0x68
NAME = "DcpHypothetical"
SECRET_KEY, SECRET_VALUE = b"secret-key", b"secret-value"
VB, OPAQUE, SEQNO, REV, CAS = 3, 0x300, 5, 7, 0x17A0000000000005
UUID = 0xAB00000000000000
WINDOW = 100                          # the flow capture's connection_buffer_size
OBSERVED = "observed.json"


def hypothetical():
    """The table entry (built once the protocol model is importable)."""
    from dcpdissect.protocol.model import (Field, Layout, Opcode, Presence, Reply, Sender,
                                           Shape, SyncWrite)
    return Opcode(
        CODE, NAME, "DCP Hypothetical", section="hypothetical", stream=True, item=True,
        document=True, sender=Sender.PRODUCER, seqno_field="by_seqno",
        sync_write=SyncWrite.MUTATION, reply=Reply(),
        request=Shape((Layout("V1", (Field("by_seqno", 0, 8, "By seqno", short="seqno"),
                                     Field("rev_seqno", 8, 8, "Rev seqno", short="rev")), 16),),
                      key=Presence.REQUIRED, value=Presence.OPTIONAL,
                      datatypes=frozenset(range(8)), validated=True))


class AddOpcode(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Appends ``make()`` (DcpHypothetical by default; any table entry built once the
    protocol model is importable) to ``DCP_OPCODES`` right after opcodes.py has run."""

    TARGET = "dcpdissect.protocol.opcodes"

    def __init__(self, make=hypothetical):
        self.make = make

    def find_spec(self, name, path, target=None):
        if name != self.TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        self.source_loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        self.source_loader.exec_module(module)
        module.DCP_OPCODES = module.DCP_OPCODES + (self.make(),)


# --- messages and captures, byte by byte ----------------------------------------------------

def mcbp(opcode: int, *, response: bool = False, extras: bytes = b"", key: bytes = b"",
         value: bytes = b"", vbucket: int = 0, status: int = 0, opaque: int = 0,
         cas: int = 0) -> bytes:
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", 0x81 if response else 0x80, opcode, len(key), len(extras),
                       0, status if response else vbucket, len(body), opaque, cas) + body


def item(seqno: int = SEQNO, key: bytes = SECRET_KEY, value: bytes = SECRET_VALUE) -> bytes:
    return mcbp(CODE, extras=struct.pack(">QQ", seqno, REV), key=key, value=value, vbucket=VB,
                opaque=OPAQUE, cas=CAS)


def _open() -> list[tuple[str, bytes]]:
    """DcpOpen (Producer) and its success: the connection's negotiation is captured."""
    return [("c2s", mcbp(0x50, extras=struct.pack(">II", 0, 0x01), key=b"hypothetical",
                         opaque=1)),
            ("s2c", mcbp(0x50, response=True, opaque=1))]


def _control(key: str, value: str, opaque: int) -> list[tuple[str, bytes]]:
    return [("c2s", mcbp(0x5E, key=key.encode(), value=value.encode(), opaque=opaque)),
            ("s2c", mcbp(0x5E, response=True, opaque=opaque))]


def _stream() -> list[tuple[str, bytes]]:
    """A stream request for vb 3 from seqno 0, answered with a one-entry failover log."""
    extras = struct.pack(">IIQQQQQ", 0, 0, 0, 2**64 - 1, 0, 0, 0)
    return [("c2s", mcbp(0x53, extras=extras, vbucket=VB, opaque=OPAQUE)),
            ("s2c", mcbp(0x53, response=True, value=struct.pack(">QQ", UUID, 0),
                         opaque=OPAQUE))]


def _marker(start: int, end: int) -> tuple[str, bytes]:
    """A V1 Memory snapshot marker (44 bytes on the wire)."""
    return ("s2c", mcbp(0x56, extras=struct.pack(">QQI", start, end, 0x01), vbucket=VB,
                        opaque=OPAQUE))


def _prepare(seqno: int, key: bytes) -> tuple[str, bytes]:
    extras = struct.pack(">QQIIIBBB", seqno, 1, 0, 0, 0, 0, 0, 1)     # durability: Majority
    return ("s2c", mcbp(0x60, extras=extras, key=key, value=b"{}", vbucket=VB, opaque=OPAQUE,
                        cas=CAS))


def _buffer_ack(n: int) -> tuple[str, bytes]:
    return ("c2s", mcbp(0x5D, extras=struct.pack(">I", n), opaque=9))


def _pcap(path: Path, messages: list[tuple[str, bytes]]) -> None:
    from dcpdissect.samples import netsynth as ns
    conv = ns.TcpConversation(ns.Endpoint("10.9.0.2", 50400), ns.Endpoint("10.9.0.1", 11210))
    for direction, data in messages:
        conv.send(direction, data)
    conv.close()
    ns.write_pcap(str(path), [conv.packets()])


FLOW_ITEMS = [item(seqno, b"key-%d" % seqno, b"value-%d" % seqno) for seqno in (1, 2, 3)]

CAPTURES = {
    # one item on the stream before any snapshot marker
    "stream.pcap": _open() + _stream() + [("s2c", item())],
    # a 100-byte window: the marker (44 bytes) and two items (52 each) leave 148 bytes
    # unacked when the third item is sent; the consumer then acks all 200 bytes (legal)
    "flow.pcap": _open() + _control("connection_buffer_size", str(WINDOW), 2) + _stream()
    + [_marker(0, 10)] + [("s2c", m) for m in FLOW_ITEMS] + [_buffer_ack(44 + 3 * 52)],
    # two items of key "dup" in one snapshot, then one of another key (legal)
    "duplicate.pcap": _open() + _stream() + [_marker(0, 10)]
    + [("s2c", item(1, b"dup")), ("s2c", item(2, b"dup")), ("s2c", item(3, b"solo"))],
    # a prepare of "doc", then an item of "doc" while it is outstanding in a Memory
    # snapshot, then an item of another key (legal)
    "durability.pcap": _open() + _control("enable_sync_writes", "true", 2) + _stream()
    + [_marker(0, 10), _prepare(1, b"doc"), ("s2c", item(2, b"doc")),
       ("s2c", item(3, b"other"))],
}


def write_captures(out: Path) -> None:
    for name, messages in CAPTURES.items():
        _pcap(out / name, messages)


# --- observations (in the interpreter whose tables hold the opcode) ---------------------------

def _findings(path: Path) -> list[dict]:
    from dcpdissect.analysis.run import analyze_file
    findings, summary = analyze_file(str(path))
    assert summary.error is None, summary.error
    return [{"rule": f.rule, "frame": f.frame, "vbucket": f.vbucket, "message": f.message,
             "fields": f.fields, "pdu": f.pdu.hex() if f.pdu else None} for f in findings]


def observe_tables(out: Path) -> dict:
    from dcpdissect import protocol
    sync = protocol.SYNC_WRITES.get(CODE)
    return {"name": protocol.OPCODE_NAMES.get(CODE),
            "roles": sorted(n for n in ("STREAM_OPCODES", "ITEM_OPCODES", "DOCUMENT_OPCODES",
                                        "DOCUMENT_ITEM_OPCODES", "NO_REPLY_OPCODES")
                            if CODE in getattr(protocol, n)),
            "sync_write": sync.value if sync else None,
            "key_namespace": protocol.KEY_NAMESPACES.get(CODE)}


def observe_codec(out: Path) -> dict:
    from dcpdissect.codec import decode
    m = decode(item())
    return {"name": m.name, "is_spec": m.spec is not None and m.spec.code == CODE,
            "layout": m.layout, "problems": [str(p) for p in m.problems], "fields": m.fields,
            "key": bytes(m.key).hex(), "value": bytes(m.value).hex(), "vbucket": m.vbucket,
            "opaque": m.opaque}


def observe_scapy(out: Path) -> dict:
    from dcpdissect.scapy import layers
    pkt = layers.MCBP(item())
    body = pkt.payload
    cls = layers.BODY_CLASSES[NAME]
    built = bytes(layers.MCBP(vbucket=VB, opaque=OPAQUE, cas=CAS)
                  / cls(by_seqno=SEQNO, rev_seqno=REV, key=SECRET_KEY, value=SECRET_VALUE))
    return {"class": type(body).__name__, "fields": body.table_fields(),
            "key": body.key_bytes.hex(), "value": body.value_bytes.hex(),
            "summary": pkt.summary(), "built": built.hex()}


def observe_lua(out: Path) -> dict:
    from dcpdissect.luagen.render import render
    from dcpdissect.protocol import OPCODES
    from dcpdissect.protocol.filters import field_filters
    (out / "dcpdissect.lua").write_text(render())
    return {"plugin": "dcpdissect.lua", "abbrevs": field_filters(OPCODES[CODE], True)}


def observe_docs(out: Path) -> dict:
    from dcpdissect.docgen.protocol_doc import render
    (out / "protocol.md").write_text(render())
    return {"reference": "protocol.md"}


def observe_redaction(out: Path) -> dict:
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.codec import decode
    from dcpdissect.reports.evidence import document_ranges, write_evidence
    m = decode(item())
    findings, summary = analyze_file(str(out / "stream.pcap"))
    write_evidence(str(out / "stream.pcap"), findings, summary, out / "plain")
    write_evidence(str(out / "stream.pcap"), findings, summary, out / "redacted", redact=True)
    return {"document_ranges": document_ranges(item()),
            "decoded_ranges": [list(m.key_range), list(m.value_range)],
            "bundles": ["plain", "redacted"]}


def observe_stream_rules(out: Path) -> dict:
    return {"findings": _findings(out / "stream.pcap")}


def observe_flow_control(out: Path) -> dict:
    return {"findings": _findings(out / "flow.pcap")}


def observe_duplicate_key(out: Path) -> dict:
    return {"findings": _findings(out / "duplicate.pcap")}


def observe_durability(out: Path) -> dict:
    return {"findings": _findings(out / "durability.pcap")}


# What test_synthetic_opcode.py reads, by name. The fuzzer joins here once fuzz/gen.py draws
# its opcodes and layouts from the tables: an observer "fuzzer" recording what the generator
# made (does it ever emit CODE, and does the decoder read it back), and a test beside the others.
OBSERVERS = {
    "tables": observe_tables,
    "codec": observe_codec,
    "scapy": observe_scapy,
    "lua": observe_lua,
    "docs": observe_docs,
    "redaction": observe_redaction,
    "stream_rules": observe_stream_rules,
    "flow_control": observe_flow_control,
    "duplicate_key": observe_duplicate_key,
    "durability": observe_durability,
}


def main(out: Path) -> None:
    sys.meta_path.insert(0, AddOpcode())
    assert not any(m == "dcpdissect.protocol" for m in sys.modules), "imported too early"
    observed = {name: observe(out) for name, observe in OBSERVERS.items()}
    (out / OBSERVED).write_text(json.dumps(observed, indent=1, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
