"""The fuzzer's DCP conversations draw every opcode and layout of the protocol tables,
a made-up opcode added to the tables included, and the same seed gives the same bytes."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

from dcpdissect.codec import decode
from dcpdissect.fuzz.gen import dcp_conversation
from dcpdissect.protocol import DCP_OPCODES

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CONVERSATIONS = 100       # seeds 0..99: about 3,000 messages


def payloads(pcap: bytes) -> list[bytes]:
    """The TCP payload of every frame of a capture written by the fuzzer (classic pcap,
    Ethernet + IPv4 + TCP without options: 54 bytes of headers)."""
    out, pos = [], 24
    while pos < len(pcap):
        caplen = struct.unpack_from("<I", pcap, pos + 8)[0]
        payload = pcap[pos + 16 + 54:pos + 16 + caplen]
        if payload:
            out.append(payload)
        pos += 16 + caplen
    return out


def messages(seeds) -> list[bytes]:
    return [p for seed in seeds for p in payloads(dcp_conversation(random.Random(seed)))]


def test_every_opcode_and_layout_of_the_tables_is_drawn():
    seen = set()
    for data in messages(range(CONVERSATIONS)):
        m = decode(data)
        seen.add((m.opcode, m.is_request, "extras", m.extlen))
        seen.add((m.opcode, m.is_request, "value", m.layout))
    wanted = set()
    for op in DCP_OPCODES:
        for request, shape in ((True, op.request), (False, op.response)):
            wanted.add((op.code, request, "extras", 0 if not shape.extras else shape.extras[0].size))
            wanted |= {(op.code, request, "extras", lay.size) for lay in shape.extras}
            wanted |= {(op.code, request, "value", lay.label) for lay in shape.values}
    assert wanted - seen == set()


# DcpProbe (0x69): a producer-sent stream item with two extras layouts, the second selecting
# one of two value layouts by its version byte, and a response of repeated entries. It joins
# the tables through synthetic_opcode's import hook, before anything imports them.
FUZZ_WITH_PROBE = f"""
import random, sys
sys.path.insert(0, {str(TESTS)!r})
from synthetic_opcode import AddOpcode


def probe():
    from dcpdissect.protocol.model import Field, Layout, Opcode, Presence, Reply, Sender, Shape
    seqno = Field("by_seqno", 0, 8, "By seqno")
    return Opcode(
        0x69, "DcpProbe", "DCP Probe", section="probe", stream=True, item=True,
        sender=Sender.PRODUCER, seqno_field="by_seqno", reply=Reply(),
        request=Shape(
            (Layout("V1", (seqno,), 8, value=Presence.FORBIDDEN),
             Layout("V2", (seqno, Field("version", 8, 1, "Version")), 9, value=Presence.REQUIRED)),
            values=(Layout("P0", (Field("low", 0, 8, "Low"),), 8, when=(("version", 0),)),
                    Layout("P1", (Field("low", 0, 8, "Low"), Field("high", 8, 8, "High")), 16,
                           when=(("version", 1),))),
            key=Presence.REQUIRED, value=Presence.OPTIONAL, validated=True),
        response=Shape(value=Presence.OPTIONAL, values=(
            Layout("probes", (Field("seqno", 0, 8, "Seqno"),), 8, repeated="probes"),)))


sys.meta_path.insert(0, AddOpcode(probe))
from dcpdissect.fuzz.gen import dcp_conversation
out = sys.argv[1]
for seed in range({CONVERSATIONS}):
    with open(f"{{out}}/conversation-{{seed}}.pcap", "wb") as f:
        f.write(dcp_conversation(random.Random(seed)))
"""


def fuzz_with_probe(out: Path, hash_seed: str) -> list[bytes]:
    out.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", FUZZ_WITH_PROBE, str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [(out / f"conversation-{seed}.pcap").read_bytes() for seed in range(CONVERSATIONS)]


def probe_shapes(data: bytes) -> str | None:
    """Which layouts a DcpProbe message carries, read from its header bytes."""
    magic, opcode = data[0], data[1]
    if opcode != 0x69:
        return None
    framing, keylen = (data[2], data[3]) if magic in (0x08, 0x18) else (0, data[2] << 8 | data[3])
    extlen, bodylen = data[4], struct.unpack_from(">I", data, 8)[0]
    value_len = bodylen - framing - extlen - keylen
    if magic in (0x81, 0x18):
        return "response probes" if extlen == 0 and value_len and value_len % 8 == 0 else None
    extras = data[24 + framing:24 + framing + extlen]
    if extlen == 8 and value_len == 0:
        return "V1"
    if extlen == 9 and (extras[8], value_len) in ((0, 8), (1, 16)):
        return f"V2 P{extras[8]}"
    return None


def test_an_opcode_added_to_the_tables_is_fuzzed_with_each_of_its_layouts(tmp_path):
    captures = fuzz_with_probe(tmp_path / "a", "1")
    found: dict[str, int] = {}
    count = 0
    for capture in captures:
        for data in payloads(capture):
            count += 1
            shape = probe_shapes(data)
            if shape:
                found.setdefault(shape, count)
    assert set(found) == {"V1", "V2 P0", "V2 P1", "response probes"}, found
    assert max(found.values()) < 2000, json.dumps(found)
    # deterministic per seed, whatever the interpreter's hash seed
    assert fuzz_with_probe(tmp_path / "b", "2") == captures
