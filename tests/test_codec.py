"""Codec: the seed examples, round trips over every table layout, framing extras, bad frames."""

import random

import pytest

from dcpdissect.codec import (
    FrameInfoError, Problem, decode, encode, encode_frame_info, parse_frame_infos, peek,
)
from dcpdissect.codec.problems import (
    EXTRAS_SIZE, FRAME_INFO, HEADER_OVERRUN, TRUNCATED, UNKNOWN_MAGIC, VALUE_SIZE,
)
from dcpdissect.protocol import OPCODES, SNAPSHOT_FLAGS, STREAM_FLAGS

# The seed documents' examples, as hex.
SEED_MARKER_V1 = bytes.fromhex(
    "80560000" "14000000" "00000014" "deadbeef" "00000000" "00000000"
    "00000000" "00000000" "00000000" "00000008" "00000001")
SEED_ADD_STREAM_REQ = bytes.fromhex(
    "80510000" "04000005" "00000004" "00000001" "00000000" "00000000" "00000001")
SEED_ADD_STREAM_RSP = bytes.fromhex(
    "81510000" "04000000" "00000004" "00000001" "00000000" "00000000" "00001000")
# The V2.0 example built from its field table (its diagram's bytes disagree with the table).
SEED_MARKER_V2_0 = bytes.fromhex(
    "805600000100000000000025deadbeef0000000000000000" "00"
    "0000000000000001" "0000000000000008" "00000002" "0000000000000008" "0000000000000007")


def test_seed_v1_marker_decodes_as_its_field_table():
    m = decode(SEED_MARKER_V1)
    assert (m.magic, m.opcode, m.keylen, m.extlen, m.datatype, m.vbucket) == (0x80, 0x56, 0, 20, 0, 0)
    assert (m.bodylen, m.opaque, m.cas, m.layout) == (20, 0xDEADBEEF, 0, "V1")
    assert m.fields == {"start_seqno": 0, "end_seqno": 8, "flags": 1}
    # Seed erratum: the example labels 0x00000001 "(disk)"; the server's bit 0x01 is Memory.
    assert SNAPSHOT_FLAGS.names(m.fields["flags"]) == ["memory"]


def test_seed_v2_0_marker_per_field_table():
    m = decode(SEED_MARKER_V2_0)
    assert (m.extlen, m.bodylen, m.layout, m.value_len) == (1, 0x25, "V2.0", 36)
    assert m.fields == {"version": 0, "start_seqno": 1, "end_seqno": 8, "flags": 2,
                        "max_visible_seqno": 8, "high_completed_seqno": 7}
    built = encode(0x56, {"start_seqno": 1, "end_seqno": 8, "flags": "disk",
                          "max_visible_seqno": 8, "high_completed_seqno": 7},
                   layout="V2.0", opaque=0xDEADBEEF)
    assert built == SEED_MARKER_V2_0


# The V2.0 example's byte diagram, literally: extlen 0x14 and body length 0 in the header,
# then 37 bytes that look little-endian.
SEED_MARKER_V2_0_DIAGRAM = bytes.fromhex(
    "80560000" "14000000" "00000000" "deadbeef" "00000000" "00000000"
    "01000000" "00000000" "01000000" "00000000" "08000000" "02000000"
    "00000000" "08000000" "00000000" "07")


def test_seed_v2_0_diagram_bytes_do_not_match_the_table():
    """Seed erratum: the diagram disagrees with its own field table."""
    m = decode(SEED_MARKER_V2_0_DIAGRAM[:24])
    assert (m.extlen, m.bodylen) == (20, 0)          # the table says extlen 1, body 0x25
    assert m.problems                                 # extras cannot fit a zero body
    assert SEED_MARKER_V2_0_DIAGRAM[24] == 0x01       # the table's version byte is 0x00
    assert SEED_MARKER_V2_0_DIAGRAM != SEED_MARKER_V2_0


def test_seed_add_stream_examples():
    req, rsp = decode(SEED_ADD_STREAM_REQ), decode(SEED_ADD_STREAM_RSP)
    assert (req.vbucket, req.opaque, req.fields) == (5, 1, {"flags": 1})
    assert STREAM_FLAGS.names(req.fields["flags"]) == ["takeover"]
    assert (rsp.status, rsp.opaque, rsp.fields) == (0, 1, {"new_opaque": 0x1000})
    assert encode(0x51, {"flags": "takeover"}, vbucket=5, opaque=1) == SEED_ADD_STREAM_REQ
    assert encode(0x51, {"new_opaque": 0x1000}, request=False, opaque=1) == SEED_ADD_STREAM_RSP


def _random_fields(layout, rng):
    return {f.name: rng.getrandbits(8 * f.width) for f in layout.fields}


def _cases():
    for op in OPCODES.values():
        for request, shape in ((True, op.request), (False, op.response)):
            for ext in shape.extras:
                yield op, request, ext, None
            for val in shape.values:
                yield op, request, None, val


@pytest.mark.parametrize("op,is_request,ext,val", list(_cases()),
                         ids=lambda x: getattr(x, "name", getattr(x, "label", str(x))))
def test_every_table_layout_round_trips(op, is_request, ext, val):
    request = is_request
    rng = random.Random(f"{op.code}{request}")
    fields, status, layout = {}, 0, None
    if ext is not None:
        fields = _random_fields(ext, rng)
        layout = ext.label
    if val is not None:
        layout = val.label
        status = dict(val.when).get("status", 0)
        conditions = {k: v for k, v in val.when if k != "status"}
        if val.repeated:
            fields = {val.repeated: [_random_fields(val, rng) for _ in range(3)]}
        else:
            fields = _random_fields(val, rng)
        fields.update(conditions)
    frame = encode(op.code, fields, request=request, layout=layout, status=status,
                   vbucket=7, opaque=0x01020304, cas=0xABCDEF, key=b"k" if request else b"")
    m = decode(frame)
    assert m.problems == []
    assert m.opcode == op.code and m.is_request == request
    assert m.opaque == 0x01020304 and m.cas == 0xABCDEF
    for name, value in fields.items():
        assert m.fields[name] == value, name
    assert encode(op.code, m.fields, request=request, layout=m.layout, status=status,
                  vbucket=7, opaque=0x01020304, cas=0xABCDEF,
                  key=m.key) == frame


def test_marker_variants_are_labelled():
    v22 = encode(0x56, {"start_seqno": 1, "end_seqno": 9, "flags": 2, "purge_seqno": 3,
                        "high_prepared_seqno": 9}, layout="V2.2")
    doc = encode(0x56, {"start_seqno": 1, "end_seqno": 9, "flags": 2, "purge_seqno": 3},
                 layout="V2.2-doc44")
    assert (decode(v22).layout, decode(v22).value_len) == ("V2.2", 52)
    assert (decode(doc).layout, decode(doc).value_len) == ("V2.2-doc44", 44)
    assert decode(doc).fields["purge_seqno"] == 3 and "high_prepared_seqno" not in decode(doc).fields
    bad = encode(0x56, {"version": 0}, layout="V2", value=bytes(40))
    assert decode(bad).problems == [Problem(VALUE_SIZE, "value length 40 does not match 36")]


def test_failover_log_and_rollback_values():
    log = [{"vbucket_uuid": 0x2222, "seqno": 3}, {"vbucket_uuid": 0x1111, "seqno": 0}]
    m = decode(encode(0x53, {"failover_log": log}, request=False))
    assert m.fields == {"failover_log": log}
    m = decode(encode(0x53, {"rollback_seqno": 1}, request=False, status=0x23))
    assert m.fields == {"rollback_seqno": 1} and m.layout == "rollback"
    m = decode(encode(0x54, request=False, value=bytes(20)))
    assert m.problems == [Problem(VALUE_SIZE, "value length 20 does not match 16*n")]


@pytest.mark.parametrize("fid,length", [(0, 0), (2, 2), (1, 3), (14, 14), (15, 0), (20, 15), (3, 40)])
def test_frame_info_escapes_round_trip(fid, length):
    data = bytes(range(length))
    raw = encode_frame_info(fid, data)
    [info] = parse_frame_infos(raw, request=True)
    assert (info.id, info.data) == (fid, data)


@pytest.mark.parametrize("raw", [b"\x11", b"\xf2", b"\x2f", b"\x23\x00\x01", b"\xff\x00"])
def test_bad_frame_info_encoding_is_reported(raw):
    with pytest.raises(FrameInfoError):
        parse_frame_infos(raw, request=True)
    frame = encode(0x56, {"start_seqno": 1}, layout="V1", frame_infos=(), magic=0x08)
    body = raw + frame[24:]
    hdr = bytearray(frame[:24])
    hdr[2] = len(raw)
    hdr[8:12] = len(body).to_bytes(4, "big")
    m = decode(bytes(hdr) + body)
    assert m.problems and m.problems[0].code == FRAME_INFO
    assert m.problems[0].text.startswith("bad framing extras")


def test_flexible_header_and_stream_id():
    frame = encode(0x57, {"by_seqno": 5}, key=b"abc", value=b"xyz", stream_id=0x1234)
    magic, opcode, flen, keylen, extlen, *_ = peek(frame)
    assert (magic, opcode, flen, keylen, extlen) == (0x08, 0x57, 3, 3, 31)
    m = decode(frame)
    assert (m.stream_id, m.key, bytes(m.value), m.value_len) == (0x1234, b"abc", b"xyz", 3)
    assert m.frame_infos[0].name == "DcpStreamId"


def test_bad_frames_decode_without_raising():
    good = encode(0x56, {"start_seqno": 1, "end_seqno": 2, "flags": 1}, layout="V1")
    short_extras = bytearray(good)
    short_extras[4] = 12
    assert Problem(EXTRAS_SIZE, "extras length 12 not in (20, 1)") in decode(bytes(short_extras)).problems
    over = bytearray(good)
    over[2:4] = (100).to_bytes(2, "big")
    assert [p.code for p in decode(bytes(over)).problems] == [HEADER_OVERRUN]
    assert [p.code for p in decode(good[:30]).problems] == [TRUNCATED]
    assert decode(bytes([0x42]) + good[1:]).problems[0] == Problem(UNKNOWN_MAGIC, "unknown magic 0x42")
    with pytest.raises(ValueError):
        decode(good[:10])
    rng = random.Random(7)
    for _ in range(3000):
        data = bytearray(good + bytes(rng.getrandbits(8) for _ in range(rng.randrange(40))))
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(len(data))] = rng.getrandbits(8)
        decode(bytes(data))


def test_checks_skip_server_magics_and_never_raise():
    from dcpdissect.analysis.rules.structure import check_message
    assert check_message(decode(encode(0x53, {}, magic=0x82, extras=bytes(48)))) == []
    assert check_message(decode(encode(0x56, {}, magic=0x83, request=False, extras=bytes(1)))) == []
    rng = random.Random(11)
    for _ in range(5000):
        frame = bytearray(encode(rng.choice(list(OPCODES)), {}, extras=bytes(rng.randrange(60)),
                                 key=bytes(rng.randrange(4)), value=bytes(rng.randrange(60))))
        frame[0] = rng.choice((0x80, 0x81, 0x08, 0x18, 0x82, 0x83))
        frame[5] = rng.randrange(256)
        check_message(decode(bytes(frame)))
