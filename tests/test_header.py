"""The MCBP header as data (protocol.header), unpacked in one place (codec.header); typed
decoder problems (codec.problems) and typed resync causes (reassembly.framing)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from dcpdissect.analysis.engine import Analyzer
from dcpdissect.codec import Header, Problem, decode, encode, frame_size, peek
from dcpdissect.codec.header import HEADER, body_length, numpy_dtype, pack, struct_format, unpack
from dcpdissect.codec.problems import (
    CODES, EXTRAS_SIZE, FRAME_INFO, HEADER_OVERRUN, TRUNCATED, UNKNOWN_MAGIC, VALUE_SIZE,
)
from dcpdissect.protocol import (
    CLASSIC_HEADER, FLEXIBLE_HEADER, HEADER_FIELDS, HEADER_LAYOUTS, HEADER_SIZE, MAGICS,
    OPCODE_NAMES, header_layout, is_known_opcode,
)
from dcpdissect.reassembly.framing import (
    ILLEGAL_MAGIC, NO_HEADER, TOO_LARGE, Pdu, PduFramer, Resync,
)
from dcpdissect.reports.messages import message_record

PACKAGE = Path(__file__).resolve().parent.parent / "dcpdissect"

# Written out by hand, byte by byte.
CLASSIC = bytes.fromhex(
    "80"                    # magic: ClientRequest
    "57"                    # opcode: DcpMutation
    "0005"                  # keylen 5
    "1f"                    # extlen 31
    "01"                    # datatype json
    "0203"                  # vbucket 0x203
    "00000030"              # bodylen 48
    "deadbeef"              # opaque
    "0102030405060708")     # cas
FLEXIBLE = bytes.fromhex(
    "18"                    # magic: AltClientResponse
    "53"                    # opcode: DcpStreamReq
    "03"                    # framing extras length 3
    "fe"                    # keylen 254
    "00"                    # extlen 0
    "00"                    # datatype
    "0023"                  # status Rollback
    "00000109"              # bodylen 265
    "00000011"              # opaque
    "ffffffffffffffff")     # cas


# --- the table ------------------------------------------------------------------------------

def test_layouts_cover_the_24_bytes_and_name_the_header_fields():
    for layout in (CLASSIC_HEADER, FLEXIBLE_HEADER):
        at = 0
        for f in layout:
            assert f.offset == at
            at += f.width
        assert at == HEADER_SIZE
    assert struct_format(CLASSIC_HEADER) == ">BBHBBHIIQ"
    assert struct_format(FLEXIBLE_HEADER) == ">BBBBBBHIIQ"
    assert HEADER.format == ">BBHBBHIIQ" and HEADER.size == HEADER_SIZE
    assert Header._fields == HEADER_FIELDS == tuple(f.name for f in FLEXIBLE_HEADER)


def test_every_magic_has_exactly_one_layout():
    magics = [m for ms, _ in HEADER_LAYOUTS for m in ms]
    assert sorted(magics) == sorted(MAGICS.values)
    assert header_layout(0x08) is header_layout(0x18) is FLEXIBLE_HEADER
    for m in (0x80, 0x81, 0x82, 0x83, 0x42):
        assert header_layout(m) is CLASSIC_HEADER


def test_numpy_dtype_is_derived_from_the_table():
    np = pytest.importorskip("numpy")
    dt = np.dtype(numpy_dtype(CLASSIC_HEADER))
    assert dt.itemsize == HEADER_SIZE and dt.names == tuple(f.name for f in CLASSIC_HEADER)
    rows = np.frombuffer(CLASSIC + CLASSIC, dt)
    assert [int(rows[1][n]) for n in dt.names] == [v for k, v in peek(CLASSIC)._asdict().items()
                                                   if k != "framing_len"]
    flex = np.frombuffer(FLEXIBLE, numpy_dtype(FLEXIBLE_HEADER))
    assert (int(flex["framing_len"][0]), int(flex["keylen"][0])) == (3, 254)


# --- peek / frame_size / pack ---------------------------------------------------------------

def test_peek_classic():
    h = peek(CLASSIC)
    assert h == Header(0x80, 0x57, 0, 5, 31, 1, 0x203, 48, 0xDEADBEEF, 0x0102030405060708)
    assert type(h) is Header and h.specific == 0x203
    assert unpack(CLASSIC) == tuple(h) and type(unpack(CLASSIC)) is tuple


def test_peek_flexible_splits_bytes_2_and_3():
    h = peek(FLEXIBLE)
    assert h == Header(0x18, 0x53, 3, 254, 0, 0, 0x23, 265, 0x11, 0xFFFFFFFFFFFFFFFF)
    assert unpack(FLEXIBLE) == tuple(h) and unpack(b"--" + FLEXIBLE, 2) == tuple(h)
    req = bytes([0x08]) + FLEXIBLE[1:]
    assert (peek(req).framing_len, peek(req).keylen) == (3, 254)
    # the same bytes 2-3 under a classic magic are one 16-bit key length
    assert peek(bytes([0x81]) + FLEXIBLE[1:]).keylen == 0x03FE
    assert peek(bytes([0x81]) + FLEXIBLE[1:]).framing_len == 0


def test_peek_at_an_offset_and_on_any_buffer():
    buf = b"\xee" * 7 + CLASSIC + FLEXIBLE
    assert peek(buf, 7) == peek(CLASSIC)
    assert peek(buf, 7 + HEADER_SIZE) == peek(FLEXIBLE)
    assert peek(bytearray(buf), 7) == peek(memoryview(buf), 7) == peek(CLASSIC)
    with pytest.raises(struct.error):
        peek(CLASSIC[:23])
    with pytest.raises(struct.error):
        peek(buf, len(buf) - 10)


def test_frame_size_and_body_length():
    assert frame_size(CLASSIC) == HEADER_SIZE + 48 and body_length(CLASSIC) == 48
    assert frame_size(FLEXIBLE) == HEADER_SIZE + 265
    buf = b"xyz" + FLEXIBLE
    assert frame_size(buf, 3) == HEADER_SIZE + 265 and body_length(buf, 3) == 265
    huge = CLASSIC[:8] + b"\xff\xff\xff\xff" + CLASSIC[12:]
    assert frame_size(huge) == HEADER_SIZE + 0xFFFFFFFF


def test_pack_is_the_inverse_of_peek():
    for raw in (CLASSIC, FLEXIBLE, bytes([0x08]) + FLEXIBLE[1:]):
        assert pack(*peek(raw)) == raw
    with pytest.raises(ValueError):
        pack(0x80, 0x57, 2, 0, 0, 0, 0, 0, 0, 0)       # framing extras need a flexible magic
    frame = encode(0x57, {"by_seqno": 5}, key=b"abc", value=b"xyz", stream_id=0x1234)
    assert peek(frame)[:5] == (0x08, 0x57, 3, 3, 31)
    assert frame_size(frame) == len(frame)


# --- typed problems -------------------------------------------------------------------------

MARKER = encode(0x56, {"start_seqno": 1, "end_seqno": 2, "flags": 1}, layout="V1")


def _codes(frame: bytes) -> list[str]:
    return [p.code for p in decode(frame).problems]


def _patched(frame: bytes, **fields) -> bytes:
    return pack(*peek(frame)._replace(**fields)) + frame[HEADER_SIZE:]


def test_each_problem_has_its_code():
    assert _codes(MARKER) == []
    assert _codes(_patched(encode(0x5C), magic=0x42)) == [UNKNOWN_MAGIC]
    assert _codes(MARKER[:30]) == [TRUNCATED]
    assert _codes(_patched(MARKER, keylen=100)) == [HEADER_OVERRUN]
    assert _codes(_patched(MARKER, extlen=12, bodylen=12)[:HEADER_SIZE + 12]) == [EXTRAS_SIZE]
    bad_value = encode(0x54, request=False, value=bytes(20))
    assert _codes(bad_value) == [VALUE_SIZE]
    noop = encode(0x5C, magic=0x08)
    bad_info = _patched(noop, framing_len=1, bodylen=1) + b"\x2f"     # length escape, no byte
    assert _codes(bad_info) == [FRAME_INFO]
    assert set(CODES) == {UNKNOWN_MAGIC, TRUNCATED, HEADER_OVERRUN, FRAME_INFO, EXTRAS_SIZE,
                          VALUE_SIZE}


def test_problems_are_code_and_text_and_records_keep_the_text():
    m = decode(_patched(MARKER, keylen=100))
    [p] = m.problems
    assert isinstance(p, Problem) and p == (HEADER_OVERRUN, p.text) and str(p) == p.text
    assert "exceed body length" in p.text

    class PduLike:
        conn, direction, offset, frame, frames, ts_ns = 1, 0, 0, 1, (1,), 0
    assert message_record(PduLike(), m)["problems"] == [p.text]


# --- typed resync causes ----------------------------------------------------------------------

NOOP = encode(0x5C, opaque=1)
GARBAGE = b"\x42<garbage: not a header>\x00\x01\x02"


def _frame(*chunks: bytes, in_sync: bool = True) -> list:
    framer = PduFramer(1, 0, in_sync=in_sync)
    out, off = [], 0
    for k, data in enumerate(chunks, 1):
        out += framer.data(off, data, k, k * 1000)
        off += len(data)
    return out + framer.close()


def _resyncs(events) -> list[tuple[str, str | None]]:
    return [(e.reason, e.cause) for e in events if type(e) is Resync]


def test_resync_causes():
    assert _resyncs(_frame(NOOP + GARBAGE + NOOP + NOOP)) == [("garbage", ILLEGAL_MAGIC)]
    huge = _patched(NOOP, bodylen=48 << 20)
    assert _resyncs(_frame(NOOP + huge + NOOP + NOOP)) == [("garbage", TOO_LARGE)]
    assert _resyncs(_frame(b"\x00\x01" + NOOP + NOOP, in_sync=False)) == [("mid_stream", None)]
    [ev] = [e for e in _frame(NOOP + GARBAGE + NOOP + NOOP) if type(e) is Resync]
    assert "illegal magic 0x42" in ev.detail


def _rules(*events) -> list[str]:
    a = Analyzer()
    return sorted(f.rule for ev in events for f in a.feed(ev)) + sorted(f.rule for f in a.finish())


def test_the_analyzer_matches_causes_not_texts():
    base = Resync(1, 0, 100, 20, "garbage", None, "", 1, 1000)
    assert _rules(base._replace(cause=ILLEGAL_MAGIC, detail="x")) == ["resync-after-garbage",
                                                                     "unknown-magic"]
    assert _rules(base._replace(cause=TOO_LARGE, detail="x")) == ["frame-too-large",
                                                                 "resync-after-garbage"]
    # a detail that reads like a cause is only text
    assert _rules(base._replace(detail="illegal magic 0x42 / frame limit")) == ["resync-after-garbage"]
    assert _rules(base._replace(cause=NO_HEADER)) == ["resync-after-garbage"]


# --- every kv_engine opcode is a resync point -------------------------------------------------

def test_getex_and_range_scan_are_known_opcodes():
    for code, name in ((0x49, "GetEx"), (0x4A, "GetExReplica"), (0xDA, "RangeScanCreate"),
                       (0xDB, "RangeScanContinue"), (0xDC, "RangeScanCancel")):
        assert OPCODE_NAMES[code] == name and is_known_opcode(0x80, code)
        assert is_known_opcode(0x81, code) and is_known_opcode(0x08, code)
    assert not is_known_opcode(0x80, 0xFF)          # ClientOpcode::Invalid


def test_resync_lands_on_getex_and_range_scan():
    """Garbage before a GetEx (0x49) and before a RangeScanCreate (0xDA): framing resumes on
    each of them (not on a later, DCP, header), and the analyzer does not call them unknown."""
    getex = encode(0x49, key=b"doc-1", vbucket=3, opaque=2)
    getex_rsp = encode(0x49, request=False, key=b"", value=b"{}", extras=bytes(4), opaque=2)
    scan = encode(0xDA, value=b'{"range":{"start":"YQ==","end":"eg=="}}', vbucket=3, opaque=3)
    cont = encode(0xDB, extras=bytes(16) + bytes(4), vbucket=3, opaque=4)
    stream = NOOP + GARBAGE + getex + getex_rsp + GARBAGE + scan + cont + NOOP
    events = _frame(stream[:50], stream[50:200], stream[200:])
    resyncs = [e for e in events if type(e) is Resync]
    at_getex = len(NOOP) + len(GARBAGE)
    at_scan = at_getex + len(getex) + len(getex_rsp) + len(GARBAGE)
    assert [(e.offset, e.skipped, e.cause) for e in resyncs] == [
        (at_getex, len(GARBAGE), ILLEGAL_MAGIC), (at_scan, len(GARBAGE), ILLEGAL_MAGIC)]
    pdus = [e for e in events if type(e) is Pdu]
    assert [peek(p.data).opcode for p in pdus] == [0x5C, 0x49, 0x49, 0xDA, 0xDB, 0x5C]
    assert [decode(p.data).name for p in pdus][1:5] == ["GetEx", "GetEx", "RangeScanCreate",
                                                        "RangeScanContinue"]
    rules = _rules(*events)
    assert "unknown-opcode" not in rules
    assert rules.count("unknown-magic") == 2 and rules.count("resync-after-garbage") == 2


# --- one place --------------------------------------------------------------------------------

# What reading (or writing) the 24-byte header by hand looks like.
_BY_HAND = {
    "a header struct format": re.compile(r"""["'][<>!=@]?BB(H|BB)B?B?H?I"""),
    "bodylen at offset 8": re.compile(
        r"""(un)?pack(_from|_into)?\(\s*["'][>!]I["']\s*,\s*[^,]+,\s*([^,()]*\+\s*)?8\s*[,)]"""
        r"""|\[\s*(\w+\s*\+\s*)?8\s*:\s*(\w+\s*\+\s*)?12\s*\]"""),
    "keylen/vbucket/status at offset 2/6": re.compile(
        r"""(un)?pack(_from|_into)?\(\s*["'][>!]H["']\s*,\s*[^,]+,\s*([^,()]*\+\s*)?[26]\s*[,)]"""),
    "opaque/cas at offset 12/16": re.compile(
        r"""(un)?pack(_from|_into)?\(\s*["'][>!][IQ]["']\s*,\s*[^,]+,\s*([^,()]*\+\s*)?1[26]\s*[,)]"""),
    "a numpy header dtype": re.compile(
        r"""\(\s*["'](magic|opcode|keylen|bodylen|opaque)["']\s*,\s*["'][<>]?u[1248]["']\s*\)"""),
}
# Lines that match but read other formats (file, the line stripped).
_NOT_MCBP = {
    ("capture/readers.py", "bom = buf[off + 8:off + 12]"),              # pcapng byte-order magic
    ("codec/keys.py", 'scope = int.from_bytes(value[8:12], "big")'),  # system event scope id
    ("reports/evidence.py", 'total = struct.unpack_from(">H", out, ip + 2)[0]'),   # IPv4 length
    ("reports/evidence.py", 'struct.pack_into(">H", out, ip + 2, total - cut)'),   # IPv4 length
}


def test_the_header_is_unpacked_only_in_codec_header():
    """Only codec/header.py reads the 24-byte header (luagen renders its own Lua)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "codec/header.py" or rel.startswith("luagen/"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for what, rx in _BY_HAND.items():
                if rx.search(line) and (rel, line.strip()) not in _NOT_MCBP:
                    found.append(f"dcpdissect/{rel}:{n}: {what}: {line.strip()}")
    assert not found, "use dcpdissect.codec.header (peek / frame_size / pack):\n" + "\n".join(found)


def test_the_scan_would_see_the_old_hand_unpacking():
    old = [
        'HEADER = struct.Struct(">BBHBBHIIQ")',
        '_HDR = struct.Struct(">BBHBBHI")',
        'bodylen = struct.unpack_from(">I", data, pos + 8)[0]',
        'keylen = struct.unpack_from(">H", data, 2)[0]',
        'vb = struct.unpack_from(">H", d, 6)[0] if request else None',
        'opaque = struct.unpack_from(">I", d, 12)[0]',
        'len(d) != 24 + int.from_bytes(d[8:12], "big")',
        'struct.pack_into(">I", b, 8, framing + own)',
        '_HEADER = [("magic", "u1"), ("opcode", "u1"), ("keylen", ">u2")]',
        'struct.pack(">BBBBBBHIIQ", 0x08, opcode, len(framing), 0, 0, 0, 0, n, 1, 0)',
    ]
    for line in old:
        assert any(rx.search(line) for rx in _BY_HAND.values()), line
