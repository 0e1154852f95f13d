"""Scapy layers: parity with the fast codec, crafting, chaining, readers, bad input, docs."""

from __future__ import annotations

import contextlib
import io
import random
import re
import struct
from pathlib import Path

import pytest
from scapy.fields import ConditionalField
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Padding, Raw, raw
from scapy.sendrecv import sniff
from scapy.sessions import TCPSession

from dcpdissect.codec import decode, encode
from dcpdissect.protocol import DCP_OPCODES, OPCODES, Presence
from dcpdissect.reassembly.pdus import Pdu, iter_events
from dcpdissect.scapy import (
    BODY_CLASSES,
    BODY_DISPATCH,
    MCBP,
    DcpAddStream,
    DcpAddStreamResponse,
    DcpFailoverLog,
    DcpFailoverLogEntry,
    DcpMutation,
    DcpNoop,
    DcpRollback,
    DcpSnapshotMarkerV1,
    DcpSnapshotMarkerV2_0,
    DcpSnapshotMarkerV2_2,
    DcpSnapshotMarkerV2_2Doc44,
    FrameInfo,
    McbpBody,
    MCBPGeneric,
    read,
    split_pdus,
)
from dcpdissect.scapy.layers import layout_fields

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def sample_paths():
    return sorted(p for p in SAMPLES.iterdir() if p.is_file())


@pytest.fixture(scope="module")
def sample_pdus():
    """Every PDU of every committed sample, as (file name, Pdu)."""
    return [(path.name, ev) for path in sample_paths() for ev in iter_events(str(path))
            if type(ev) is Pdu]


# --- helpers --------------------------------------------------------------------------

def header_of(p: MCBP) -> dict:
    req = p.is_request
    return dict(magic=p.magic, opcode=p.opcode, keylen=p.keylen, extlen=p.extlen,
                framing_len=p.framing_len or 0, datatype=int(p.datatype),
                vbucket=p.vbucket if req else None, status=None if req else p.status,
                bodylen=p.bodylen, opaque=p.opaque, cas=p.cas, stream_id=p.stream_id)


def codec_header(m) -> dict:
    return {k: getattr(m, k) for k in ("magic", "opcode", "keylen", "extlen", "framing_len",
                                        "datatype", "vbucket", "status", "bodylen", "opaque",
                                        "cas", "stream_id")}


def body_fields(p: MCBP) -> dict:
    """Every table field of the body layer, read through the Scapy fields themselves."""
    body = p.body
    if body is None:
        return {}
    out = {}
    for layout in (body._extras_layout, body._value_layout):
        if layout is None:
            continue
        if layout.repeated:
            out[layout.repeated] = [{f.name: int(getattr(e, f.name)) for f in layout.fields}
                                    for e in getattr(body, layout.repeated)]
        else:
            out.update((f.name, int(getattr(body, f.name))) for f in layout.fields)
    return out


def rebuilt(p):
    """Bytes built from the field values (the dissection cache dropped)."""
    q = p.copy()
    q.clear_cache()
    return raw(q)


def all_classes():
    """(body class, opcode, request) for every generated body class."""
    seen = {}
    for (code, request), classes in BODY_DISPATCH.items():
        for cls in classes:
            seen.setdefault((cls, code), request)
    return [(cls, code, req) for (cls, code), req in seen.items()]


# --- generated from the tables -----------------------------------------------------------

def test_every_table_layout_has_a_class_with_its_field_names():
    required = {"DcpOpen", "DcpAddStream", "DcpAddStreamResponse", "DcpSnapshotMarkerV1",
                "DcpSnapshotMarkerV2_0", "DcpSnapshotMarkerV2_2", "DcpSnapshotMarkerV2_2Doc44",
                "DcpStreamRequest", "DcpFailoverLog", "DcpFailoverLogEntry", "DcpRollback",
                "DcpStreamEnd", "DcpMutation", "DcpDeletion", "DcpDeletionV2", "DcpExpiration",
                "DcpSeqnoAdvanced", "DcpOsoSnapshot", "DcpSystemEvent", "DcpPrepare", "DcpCommit",
                "DcpAbort", "DcpSetVbucketState", "DcpBufferAcknowledgement",
                "DcpSeqnoAcknowledged"}
    assert required <= set(BODY_CLASSES)
    covered = set()
    for cls, code, request in all_classes():
        names = [f.name for f in cls.fields_desc]
        for layout in (cls._extras_layout, cls._value_layout):
            if layout is not None:
                covered.add(id(layout))
                if layout.repeated:
                    assert layout.repeated in names
                else:
                    assert [f.name for f in layout.fields] == [n for n in names
                                                               if n in {f.name for f in layout.fields}]
        shape = OPCODES[code].request if request else OPCODES[code].response
        key = next(f for f in cls.fields_desc if f.name == "key")
        # a key the table forbids is still shown when one is on the wire
        assert isinstance(key, ConditionalField) == (shape.key is Presence.FORBIDDEN)
    for op in DCP_OPCODES:
        for shape in (op.request, op.response):
            for layout in shape.extras + shape.values:
                assert id(layout) in covered, (op.name, layout.label)
    assert DcpSnapshotMarkerV2_2._value_layout.size == 52
    assert DcpSnapshotMarkerV2_2Doc44._value_layout.size == 44


def test_field_kinds_follow_the_tables():
    m = DcpSnapshotMarkerV1(flags=0x05)
    assert str(m.flags) == "memory+checkpoint"
    assert DcpAddStream(flags="takeover+active_vb_only").flags == 0x11
    fields = {f.name: f for f in layout_fields(DcpSnapshotMarkerV1._extras_layout)}
    assert type(fields["start_seqno"]).__name__ == "LongField"
    assert type(fields["flags"]).__name__ == "FlagsField"
    entry = {f.name: type(f).__name__ for f in DcpFailoverLogEntry.fields_desc}
    assert entry == {"vbucket_uuid": "LongField", "seqno": "LongField"}
    assert "reason    = Slow" in BODY_CLASSES["DcpStreamEnd"](reason=4).show(dump=True)


# --- parity with the codec over every sample ------------------------------------------------

def test_sample_parity_with_codec(sample_pdus):
    files = set()
    for name, pdu in sample_pdus:
        m = decode(pdu.data)
        p = MCBP(pdu.data)
        where = (name, pdu.frames, pdu.data[:24].hex())
        assert header_of(p) == codec_header(m), where
        if m.framing_len and not m.problems:
            assert [(fi.frame_id, fi.frame_data) for fi in p.frame_infos] == \
                [(fi.id, fi.data) for fi in m.frame_infos], where
        assert body_fields(p) == m.fields, where
        body = p.body
        assert (body.key_bytes if body else b"") == m.key, where
        assert (body.value_bytes if body else b"") == bytes(m.value), where
        assert raw(p) == pdu.data, where
        assert rebuilt(p) == pdu.data, where
        assert Padding not in p.layers() and Raw not in p.layers(), where
        files.add(name)
    assert files == {p.name for p in sample_paths()}
    assert len(sample_pdus) >= 600


# --- crafting --------------------------------------------------------------------------------

def _craft_cases(seed=7, trials=6):
    rng = random.Random(seed)
    for cls, code, request in all_classes():
        spec = OPCODES[code]
        shape = spec.request if request else spec.response
        ext, val = cls._extras_layout, cls._value_layout
        when = dict(val.when) if val is not None else {}
        for trial in range(trials):
            fields = {}
            for layout in (ext, val):
                if layout is None or layout.repeated:
                    continue
                for f in layout.fields:
                    if f.name in when:
                        continue
                    taken = {v for lay in shape.values for k, v in lay.when if k == f.name}
                    if taken and val is None:       # keep extras-only variants unambiguous
                        fields[f.name] = min(set(range(256)) - taken)
                    else:
                        fields[f.name] = rng.getrandbits(8 * f.width)
            if val is not None and val.repeated:
                fields[val.repeated] = [{f.name: rng.getrandbits(8 * f.width) for f in val.fields}
                                        for _ in range(rng.randrange(4))]
            extra = {}
            if cls._has_key or trial == trials - 1:
                extra["key"] = rng.randbytes(rng.randrange(1, 20))
            if val is None and (cls._has_value or trial == trials - 1):
                extra["value"] = rng.randbytes(rng.randrange(40))
            head = dict(opaque=rng.getrandbits(32), cas=rng.getrandbits(64),
                        datatype=rng.randrange(8))
            if request:
                head["vbucket"] = rng.getrandbits(16)
            else:
                head["status"] = when.get("status", 0)
            sid = rng.getrandbits(16) if trial % 2 else None
            yield cls, code, request, fields, extra, head, sid


def test_crafting_matches_codec_encode():
    n = 0
    for cls, code, request, fields, extra, head, sid in _craft_cases():
        want = encode(code, fields, request=request, layout=cls.layout,
                      key=extra.get("key", b""), value=extra.get("value"), stream_id=sid,
                      **head)
        kw = dict(fields)
        if cls._value_layout is not None and cls._value_layout.repeated:
            entry = BODY_CLASSES[cls.__name__ + "Entry"]
            kw[cls._value_layout.repeated] = [entry(**e) for e in fields[cls._value_layout.repeated]]
        pkt = MCBP(opcode=code, stream_id=sid, **head) / cls(**kw, **extra)
        assert raw(pkt) == want, (cls.__name__, fields, extra)
        back = MCBP(want)
        assert type(back.body) is cls, (cls.__name__, type(back.body).__name__)
        assert body_fields(back) == decode(want).fields
        n += 1
    assert n >= 150


def test_opcode_and_magic_follow_the_body():
    assert raw(MCBP() / DcpNoop())[:2] == b"\x80\x5c"
    assert raw(MCBP() / DcpAddStreamResponse())[:2] == b"\x81\x51"
    assert raw(MCBP() / DcpRollback(rollback_seqno=1))[:8] == bytes.fromhex("8153000000000023")
    assert raw(MCBP(stream_id=1) / DcpMutation())[:2] == b"\x08\x57"
    assert raw(MCBP(stream_id=1) / DcpFailoverLog())[:2] == b"\x18\x53"
    assert raw(MCBP(opcode=0x54) / DcpFailoverLog())[:2] == b"\x81\x54"
    assert MCBP().magic == 0x80 and MCBP(status=1).magic == 0x81


def test_frame_infos_escape_and_stream_id():
    from dcpdissect.codec import encode_frame_info
    for fid, data in [(0, b""), (2, b"\x00\x07"), (2, b"\x00\x07\x08"), (7, b"x" * 15),
                      (7, b"x" * 40), (15, b"ab"), (40, b"y" * 20)]:
        fi = FrameInfo(id=min(fid, 15), id_ext=max(fid - 15, 0), data=data)
        assert raw(fi) == encode_frame_info(fid, data)
        back = FrameInfo(raw(fi))
        assert (back.frame_id, back.frame_data) == (fid, data)
    infos = ((1, b"\x03"), (40, b"z" * 17))
    want = encode(0x57, {"by_seqno": 5}, key=b"k", frame_infos=infos, stream_id=9)
    pkt = MCBP(frame_infos=[FrameInfo(id=1, data=b"\x03"), FrameInfo(id=15, id_ext=25, data=b"z" * 17)],
               stream_id=9) / DcpMutation(by_seqno=5, key=b"k")
    assert raw(pkt) == want
    back = MCBP(want)
    assert back.stream_id == 9 and back.framing_len == 25 and back.keylen == 1
    assert back.frame_infos[2].stream_id == 9


# --- seed examples -----------------------------------------------------------------------

SEEDS = [
    (lambda: MCBP(opaque=0xDEADBEEF) / DcpSnapshotMarkerV2_0(
        start_seqno=1, end_seqno=8, flags=2, max_visible_seqno=8, high_completed_seqno=7),
     ("805600000100000000000025deadbeef000000000000000000000000000000000100000000000000080000000200"
      "000000000000080000000000000007")),
    (lambda: MCBP(opaque=0xDEADBEEF) / DcpSnapshotMarkerV1(start_seqno=0, end_seqno=8, flags=1),
     "805600001400000000000014deadbeef00000000000000000000000000000000000000000000000800000001"),
    (lambda: MCBP(vbucket=5, opaque=1) / DcpAddStream(flags="takeover"),
     "80510000040000050000000400000001000000000000000000000001"),
    (lambda: MCBP(magic=0x81, opaque=1) / DcpAddStreamResponse(new_opaque=0x1000),
     "81510000040000000000000400000001000000000000000000001000"),
]


@pytest.mark.parametrize("make,hexstr", SEEDS)
def test_seed_examples(make, hexstr):
    pkt = make()
    assert raw(pkt).hex() == hexstr
    back = MCBP(bytes.fromhex(hexstr))
    assert type(back.body) is type(pkt.body)
    assert raw(back) == raw(pkt) and rebuilt(back) == raw(pkt)


def test_seed_samples_hold_the_seed_bytes():
    for name, hexstrs in (("seed-marker-v2_0.pcap", [SEEDS[0][1]]),
                          ("seed-marker-v1.pcap", [SEEDS[1][1]]),
                          ("seed-add-stream.pcap", [SEEDS[2][1], SEEDS[3][1]])):
        packets = read(str(SAMPLES / name))       # seed-add-stream: a DcpOpen first
        assert [raw(p[MCBP]).hex() for p in packets[-len(hexstrs):]] == hexstrs


def test_full_stack_gets_port_11210_and_dissects_back():
    frame = bytes(Ether() / IP() / TCP() / MCBP() /
                  DcpSnapshotMarkerV2_0(start_seqno=1, end_seqno=8, flags="disk"))
    back = Ether(frame)
    assert back[TCP].dport == 11210
    marker = back[DcpSnapshotMarkerV2_0]
    assert (marker.start_seqno, marker.end_seqno, str(marker.flags)) == (1, 8, "disk")
    assert back.summary().endswith("DcpSnapshotMarker request vb:0 start=1 end=8 flags=disk")
    for port_kw in ({"sport": 11209, "dport": 40000}, {"sport": 40000, "dport": 11209},
                    {"sport": 11210, "dport": 40000}):
        pkt = Ether(bytes(Ether() / IP() / TCP(**port_kw) / raw(MCBP() / DcpNoop())))
        assert MCBP in pkt


def test_summary_lines():
    rollback = MCBP(raw(MCBP(status=0x23) / DcpRollback(rollback_seqno=1)))
    assert rollback.summary() == "DcpStreamReq response Rollback rollback_seqno=1"
    marker = MCBP(raw(MCBP(vbucket=5) / DcpSnapshotMarkerV1(start_seqno=1, end_seqno=8, flags="disk")))
    assert marker.summary() == "DcpSnapshotMarker request vb:5 start=1 end=8 flags=disk"
    shown = marker.show(dump=True)
    assert "flags     = disk" in shown and "vbucket   = 5" in shown


# --- several PDUs per payload; TCPSession; read() -----------------------------------------

def test_several_pdus_in_one_payload():
    pdus = [raw(MCBP(opaque=i) / DcpMutation(by_seqno=i, key=b"k%d" % i, value=b"v" * i))
            for i in range(1, 5)]
    data = b"".join(pdus)
    first = MCBP(data)
    assert first.opaque == 1 and first[Padding].load == data[len(pdus[0]):]
    assert raw(first) == data
    nxt = MCBP(first[Padding].load)
    assert nxt.opaque == 2 and nxt[DcpMutation].key == b"k2"
    assert [raw(p) for p in split_pdus(data)] == pdus
    assert raw(split_pdus(data[:-3])[-1]) == pdus[-1][:-3]
    frame = Ether(bytes(Ether() / IP() / TCP(sport=11210, dport=5555) / data))
    assert frame[MCBP].opaque == 1 and MCBP(frame[Padding].load).opaque == 2


def test_tcp_session_on_clean_replication():
    want = [ev.data for ev in iter_events(str(SAMPLES / "clean-replication.pcap"))
            if type(ev) is Pdu]
    got, chained = [], 0
    for pkt in sniff(offline=str(SAMPLES / "clean-replication.pcap"), session=TCPSession,
                     quiet=True):
        layers = [pkt.getlayer(MCBP, i) for i in range(1, pkt.layers().count(MCBP) + 1)]
        chained += len(layers) > 1
        got += [raw(m)[:24 + m.bodylen] for m in layers]
    assert sorted(got) == sorted(want)
    assert chained > 0


def test_tcp_reassemble_protocol():
    a = raw(MCBP() / DcpNoop())
    b = raw(MCBP() / DcpMutation(key=b"x", value=b"y" * 100))
    md = {}
    assert MCBP.tcp_reassemble(a[:10], md, {}) is None and md["tcp_min_len"] == 24
    md = {}
    assert MCBP.tcp_reassemble(b[:30], md, {}) is None and md["tcp_min_len"] == len(b)
    md = {}
    pkt = MCBP.tcp_reassemble(a + b + a[:5], md, {})
    assert "tcp_min_len" not in md and pkt.layers().count(MCBP) == 2
    assert pkt[Padding].load == a[:5]
    assert isinstance(MCBP.tcp_reassemble(b"\x00" * 30, {}, {}), Raw)


def test_read_matches_iter_events_on_reordered_capture():
    path = str(SAMPLES / "tcp-reorder.pcap")
    events = [ev for ev in iter_events(path) if type(ev) is Pdu]
    pkts = read(path)
    assert len(pkts) == len(events) > 0
    for pkt, ev in zip(pkts, events):
        assert raw(pkt[MCBP]) == ev.data and pkt[TCP].payload is pkt[MCBP]
        assert (pkt.frames, pkt.frame, pkt.conn, pkt.direction, pkt.offset) == \
            (ev.frames, ev.frame, ev.conn, ev.direction, ev.offset)
        assert int(pkt.time * 1_000_000_000) == ev.ts_ns
    assert any(pkt.frame != pkt.frames[-1] for pkt in pkts)     # completed by a later frame


# --- bad input ---------------------------------------------------------------------------------

BAD = [
    b"\x80",                                                          # 1-byte header
    bytes.fromhex("8056000014"),                                      # truncated header
    encode(0x56, extras=b"\x00" * 5),                                 # short extras
    encode(0x56, extras=b"\x02", value=b"\x00" * 40),                 # marker V2 bad value size
    encode(0x51, {"flags": 1})[:6] + b"\x00\x10" + encode(0x51, {"flags": 1})[8:],  # keylen > body
    encode(0x57, {"by_seqno": 1}, key=b"k")[:-4],                     # truncated body
    encode(0x5c)[:8] + struct.pack(">I", 1000) + encode(0x5c)[12:],  # bodylen > data
    bytes.fromhex("18531b000000000000000010000000110000000000000000") + b"\xa1" * 16,
    bytes.fromhex("085c0100000000000000000100000000000000000000000000") + b"\xf1",  # escape cut
    bytes(range(24, 100)),                                            # garbage
    b"\x00" * 24,
]


@pytest.mark.parametrize("data", BAD)
def test_bad_pdus_dissect_without_exceptions(data):
    pkt = MCBP(data)
    assert raw(pkt) == data
    pkt.summary()
    pkt.show(dump=True)


def _mutate(rng, data):
    d = bytearray(data)
    kind = rng.randrange(9)
    if kind == 0:
        d = d[:rng.randrange(1, len(d))]
    elif kind == 1:
        for _ in range(rng.randrange(1, 4)):
            d[rng.randrange(min(len(d), 24))] = rng.getrandbits(8)
    elif kind == 2:
        d[4] = rng.getrandbits(8)
    elif kind == 3:
        struct.pack_into(">H", d, 2, rng.getrandbits(16))
    elif kind == 4:
        struct.pack_into(">I", d, 8, rng.getrandbits(rng.choice((8, 16, 32))))
    elif kind == 5:
        d += rng.randbytes(rng.randrange(1, 60))
    elif kind == 6:
        d = bytearray(rng.randbytes(rng.randrange(1, 80)))
    elif kind == 7:
        d[0] = rng.choice((0x08, 0x18, 0x80, 0x81, 0x82, 0x83))
        d[2] = rng.getrandbits(8)
    else:
        pos = rng.randrange(24, len(d)) if len(d) > 24 else 0
        d[pos] = rng.getrandbits(8)
    return bytes(d)


def test_fuzzed_sample_pdus(sample_pdus):
    rng = random.Random(20240607)
    specialised = 0
    for _ in range(3000):
        data = _mutate(rng, rng.choice(sample_pdus)[1].data)
        pkt = MCBP(data)
        assert raw(pkt) == data, data.hex()
        pkt.summary()
        body = pkt.body
        if body is not None and type(body) is not MCBPGeneric:
            specialised += 1
            assert body_fields(pkt) == decode(data).fields, data.hex()
    assert specialised > 200


def test_raw_layer_keeps_the_remainder_of_a_truncated_header():
    pkt = MCBP(b"\x80\x57\x00\x01")
    assert pkt.magic == 0x80 and pkt.opcode == 0x57 and pkt[Raw].load == b"\x00\x01"
    bad = MCBP(encode(0x56, extras=b"\x00" * 5))
    assert isinstance(bad.body, MCBPGeneric) and bad.body.extras == b"\x00" * 5
    assert isinstance(bad.body, McbpBody)


# --- docs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("doc,minimum", [("docs/scapy.md", 3), ("README.md", 1)])
def test_docs_session_runs_and_prints_what_it_shows(monkeypatch, doc, minimum):
    monkeypatch.chdir(ROOT)
    text = (ROOT / doc).read_text()
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.DOTALL)
    assert sum(lang == "python" for lang, _ in blocks) >= minimum
    namespace: dict = {}
    printed = None
    for lang, body in blocks:
        if lang == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(body, doc, "exec"), namespace)
            printed = out.getvalue()
        elif lang == "text" and printed is not None:
            assert printed == body
            printed = None
