"""kv_engine's DCP validator verdicts (tests/kv_vectors.py) as an oracle.

Self-checks of the vectors (lengths, counts per suite, the capture as tshark reads it), then
the analyzer and the Lua plugin against kv_engine: a vector kv_engine accepts must draw no
warning or error at its frame, a vector it rejects at least one error.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import pytest

import kv_vectors as kv
from kv_vectors_pcap import write_vectors_pcap

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua" / "dcpdissect.lua"
PI_WARN, PI_ERROR = 0x00600000, 0x00800000  # epan/proto.h expert severities

# validate()/validate_error_context() calls per suite in tests/mcbp/mcbp_dcp_test.cc, counted
# by hand, both CollectionsOnOff params unless noted:
EXPECTED_COUNTS = {
    "DcpOpenValidatorTest": 5 * 2,
    "DcpAddStreamValidatorTest": 5 * 2,
    "DcpCloseStreamValidatorTest": 5 * 2,
    "DcpGetFailoverLogValidatorTest": 5 * 2,
    # 4 single calls + InvalidFlags' 32 flags + FlagsWithCacheTransfer's 6 + 2 + MessageValue
    "DcpStreamReqValidatorTest": (4 + 32 + 8 + 1) * 2,
    "DcpStreamEndValidatorTest": 5 * 2,
    # CorrectMessage (V1, V2.0), InvalidExtlen, InvalidKeylen, InvalidBodylen (2),
    # InvalidDatatype, InvalidV2Version
    "DcpSnapshotMarkerValidatorTest": 8 * 2,
    # 3 tests on both params; InvalidKey1/InvalidKey2 only call it with collections
    "DcpMutationValidatorTest": 3 * 2 + 2,
    # CorrectMessage, ValidDatatype (4), InvalidDatatype (2), InvalidExtlen,
    # InvalidExtlenCollections, InvalidKeylen, WithValue
    "DcpDeletionValidatorTest": 11 * 2,
    "DcpExpirationValidatorTest": 4 * 2,
    # CorrectMessage, LegalValues (4), InvalidExtlen/Keylen/Datatype/Body, IllegalValues (2)
    "DcpSetVbucketStateValidatorTest": 11 * 2,
    "DcpNoopValidatorTest": 5 * 2,
    "DcpBufferAckValidatorTest": 5 * 2,
    "DcpControlValidatorTest": 5 * 2,
    "DcpCacheTransferValidatorTest": 6 * 2,
    # SnappyOnOff: 3 opcodes x snappy on/off, one call each
    "DcpXattrValidatorTest": 3 * 2,
}
# request_test.cc: 6 Request_ParseFrameExtras TESTs (DurabilityRequirement_LegalPacket
# parses twice) and 5 Request_GetDurationSpec TESTs
EXPECTED_FRAME_EXTRAS = {"Request_ParseFrameExtras": 7, "Request_GetDurationSpec": 5}
# DcpSnapshotMarkerCodecTest: 6 TESTs x 2 test() calls x DiskSnapshotOnOff; the encoder
# throws for HCS/HPS without Disk: both calls of 5 TESTs without Disk, the first with it
EXPECTED_CODEC, EXPECTED_CODEC_THROWS = 6 * 2 * 2, 5 * 2 + 5


def header(data: bytes) -> dict:
    alt = data[0] in (0x08, 0x18)
    return dict(magic=data[0], opcode=data[1], framing=data[2] if alt else 0,
                keylen=data[3] if alt else struct.unpack_from(">H", data, 2)[0],
                extlen=data[4], datatype=data[5], bodylen=struct.unpack_from(">I", data, 8)[0])


# --- self-checks --------------------------------------------------------------------------

def test_every_frame_is_header_plus_bodylen():
    frames = [(c.name, c.frame) for c in kv.VECTOR_CASES]
    frames += [(c.name, c.frame) for c in kv.CODEC_CASES if not c.encoder_throws]
    bad = [name for name, data in frames
           if len(data) < 24 or len(data) != 24 + header(data)["bodylen"]]
    assert not bad, bad


def test_case_counts_per_suite():
    assert Counter(c.suite for c in kv.CASES) == EXPECTED_COUNTS
    assert len(kv.CASES) == sum(EXPECTED_COUNTS.values()) == 264
    assert Counter(c.kv.suite for c in kv.FRAME_EXTRAS_CASES) == EXPECTED_FRAME_EXTRAS
    assert len(kv.CODEC_CASES) == EXPECTED_CODEC
    assert sum(c.encoder_throws for c in kv.CODEC_CASES) == EXPECTED_CODEC_THROWS
    names = [c.name for c in kv.VECTOR_CASES] + [c.name for c in kv.CODEC_CASES]
    assert len(names) == len(set(names))


def test_verdicts_are_consistent():
    for c in kv.CASES:
        assert c.accept == (c.status == "NotSupported"), c.name
        assert c.opened == (c.suite not in ("DcpMutationValidatorTest", "DcpOpenValidatorTest"))
        assert c.source.startswith(kv.DCP_TEST + ":") and c.why.startswith("mcbp_validators.cc")
    for f in kv.FRAME_EXTRAS_CASES:
        h = header(f.kv.frame)
        assert (h["magic"], h["opcode"], h["framing"]) == (0x08, kv.DCP_NOOP, len(f.framing_extras))
        assert f.kv.accept == (f.kv.status == "Success")


def parse_frame_infos(fe: bytes):
    """The framing extras encoding as described in docs/BinaryProtocol.md (independent)."""
    out, i = [], 0
    while i < len(fe):
        fid, size = fe[i] >> 4, fe[i] & 0x0F
        i += 1
        if fid == 0x0F:
            if i >= len(fe):
                return None
            fid, i = fid + fe[i], i + 1
        if size == 0x0F:
            if i >= len(fe):
                return None
            size, i = size + fe[i], i + 1
        if i + size > len(fe):
            return None
        out.append((fid, size))
        i += size
    return tuple(out)


def test_frame_extras_parse_as_recorded():
    for f in kv.FRAME_EXTRAS_CASES:
        assert parse_frame_infos(f.framing_extras) == f.parsed, f.name
        assert (f.parsed is None) == (f.parser_throws is not None), f.name


def test_codec_frames_hold_the_decoded_marker():
    for c in kv.CODEC_CASES:
        if c.encoder_throws:
            assert c.frame == b"" and c.marker["flags"] & kv.DISK == 0
            continue
        h, body = header(c.frame), c.frame[24:]
        assert (h["opcode"], h["extlen"], h["keylen"]) == (kv.DCP_SNAPSHOT_MARKER, 1, 0)
        assert body[0] == {"2.0": 0, "2.2": 2}[c.version]
        start, end, flags, mvs, hcs = struct.unpack_from(">QQIQQ", body, 1)
        assert len(body) - 1 == {"2.0": 36, "2.2": 52}[c.version]
        got = dict(start=start, end=end, flags=flags, mvs=mvs, hcs=hcs if flags & kv.DISK else None,
                   hps=None, purge=None)
        if c.version == "2.2":
            purge, hps = struct.unpack_from(">QQ", body, 37)
            got.update(purge=purge, hps=hps if flags & kv.DISK else None)
        assert got == c.decoded, c.name


# --- the capture --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("kv-vectors") / "kv-vectors.pcap"
    spans: dict[str, tuple[int, int]] = {}
    frames = write_vectors_pcap(path, kv.VECTOR_CASES, spans=spans)
    return path, frames, spans


def test_capture_is_deterministic(capture, tmp_path):
    path, frames, _ = capture
    again = write_vectors_pcap(tmp_path / "again.pcap", kv.VECTOR_CASES)
    assert again == frames and (tmp_path / "again.pcap").read_bytes() == path.read_bytes()


@pytest.mark.tshark
def test_tshark_sees_every_vector(capture):
    path, frames, _ = capture
    out = subprocess.run(["tshark", "-r", str(path), "-d", "tcp.port==11210,couchbase", "-T",
                          "fields", "-e", "frame.number", "-e", "couchbase.opcode"],
                         capture_output=True, text=True, check=True).stdout
    opcodes = {}
    for line in out.splitlines():
        number, _, ops = line.partition("\t")
        opcodes[int(number)] = [int(op, 0) for op in ops.split(",") if op]
    bad = [(c.name, frames[c.name], opcodes.get(frames[c.name])) for c in kv.VECTOR_CASES
           if opcodes.get(frames[c.name]) != [c.opcode]]
    assert not bad, bad


# --- the analyzer and the plugin against kv_engine ------------------------------------------

def disagreements(capture, flags_of) -> list[str]:
    """flags_of(first, last) -> [(name, severity)] of the tool at the vector's frames."""
    _, frames, spans = capture
    out = []
    for c in kv.VECTOR_CASES:
        found = flags_of(*spans[c.name])
        warned = [f for f in found if f[1] in ("warning", "error")]
        errors = [f for f in found if f[1] == "error"]
        if (not warned) if c.accept else errors:
            continue
        verdict = "accepts" if c.accept else f"rejects ({c.status})"
        tool = ", ".join(f"{n}:{s}" for n, s in sorted(set(warned))) or "nothing"
        out.append(f"{c.name} @{frames[c.name]}: kv_engine {verdict}; tool: {tool}")
    return out


@cache
def analyzer_findings(path: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "analyze", "--format", "jsonl",
                           "--no-progress", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_analyzer_agrees_with_kv_engine(capture):
    by_frame = defaultdict(list)
    for f in analyzer_findings(capture[0]):
        for number in {f["frame"], *f.get("frames", ())}:
            by_frame[number].append((f["rule"], f["severity"]))

    def flags_of(first, last):
        return [x for n in range(first, last + 1) for x in by_frame.get(n, ())]

    bad = disagreements(capture, flags_of)
    assert not bad, f"{len(bad)} of {len(kv.VECTOR_CASES)} disagree:\n" + "\n".join(bad)


@cache
def lua_experts(path: Path) -> dict[int, list[tuple[str, str]]]:
    """frame -> [(dcp.expert.* name, 'error'/'warning'/'note')]: the plugin's own experts."""
    proc = subprocess.run(["tshark", "-r", str(path), "-X", f"lua_script:{LUA}", "-o",
                           "tcp.reassemble_out_of_order:TRUE", "-Y", "dcp", "-T", "pdml"],
                          capture_output=True, check=True)
    out: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for _, packet in ET.iterparse(io.BytesIO(proc.stdout)):
        if packet.tag != "packet":
            continue
        number = int(next(f.get("show") for f in packet.iter("field")
                          if f.get("name") == "frame.number"))
        for proto in packet.iter("proto"):
            if proto.get("name") != "dcp":
                continue
            for e in proto.iter("field"):
                if e.get("name") != "_ws.expert":
                    continue
                kids = {k.get("name"): k for k in e}
                rule = next((n for n in kids if n.startswith("dcp.expert.")), None)
                if rule is None:  # another dissector's expert (JSON, TCP, ...)
                    continue
                sev = int(kids["_ws.expert.severity"].get("show"))
                out[number].append((rule, "error" if sev >= PI_ERROR else
                                    "warning" if sev >= PI_WARN else "note"))
        packet.clear()
    return dict(out)


@pytest.mark.slow
@pytest.mark.tshark
def test_lua_agrees_with_kv_engine(capture):
    experts = lua_experts(capture[0])

    def flags_of(first, last):
        return [x for n in range(first, last + 1) for x in experts.get(n, ())]

    bad = disagreements(capture, flags_of)
    assert not bad, f"{len(bad)} of {len(kv.VECTOR_CASES)} disagree:\n" + "\n".join(bad)
