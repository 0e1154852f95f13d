"""Collections: the leb128 collection id and logical key of document keys on connections that
negotiated Collections, and the names system events give them -- equal in `dissect --format
jsonl`, Scapy's read() and the Lua plugin (tshark) on every collection-aware sample."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import flatbuffers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.packet import raw

from dcpdissect.analysis.collections import CollectionsView, DocKey, StreamFilter
from dcpdissect.codec import decode, encode
from dcpdissect.codec.keys import leb128, split_collection_key, system_event
from dcpdissect.reassembly.pdus import Pdu, iter_events
from dcpdissect.samples.scenarios_collections import flatbuffer_collection
from dcpdissect.scapy import MCBP, DcpDeletionV2, DcpMutation, read

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
LUA = ROOT / "lua" / "dcpdissect.lua"
FEATURE_COLLECTIONS = b"\x00\x12"


# --- the codec -----------------------------------------------------------------------------

@pytest.mark.parametrize("cid, wire", [(0, "00"), (8, "08"), (0x7F, "7f"), (0x88, "8801"),
                                       (0x3FFF, "ff7f"), (0x4000, "808001"),
                                       (0xFFFFFFFF, "ffffffff0f")])
def test_leb128_prefix(cid, wire):
    assert leb128(cid).hex() == wire
    key = bytes.fromhex(wire) + b"doc"
    assert split_collection_key(key) == (cid, len(wire) // 2, None)


def fb_collection(uid: int, scope: int, cid: int, name: str, max_ttl: int | None = None) -> bytes:
    """events.fbs ``Collection`` built by the FlatBuffers library itself."""
    b = flatbuffers.Builder(64)
    text = b.CreateString(name)
    b.StartObject(6)
    b.PrependUint64Slot(0, uid, 0)
    b.PrependUint32Slot(1, scope, 0)
    b.PrependUint32Slot(2, cid, 0)
    if max_ttl is not None:
        b.PrependBoolSlot(3, True, False)
        b.PrependUint32Slot(4, max_ttl, 0)
    b.PrependUOffsetTRelativeSlot(5, text, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def fb_scope(uid: int, scope: int, name: str) -> bytes:
    b = flatbuffers.Builder(64)
    text = b.CreateString(name)
    b.StartObject(3)
    b.PrependUint64Slot(0, uid, 0)
    b.PrependUint32Slot(1, scope, 0)
    b.PrependUOffsetTRelativeSlot(2, text, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def fb_dropped_collection(uid: int, scope: int, cid: int) -> bytes:
    b = flatbuffers.Builder(32)
    b.StartObject(4)
    b.PrependUint64Slot(0, uid, 0)
    b.PrependUint32Slot(1, scope, 0)
    b.PrependUint32Slot(2, cid, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_system_event_values():
    # versions 0 and 1: system_event_types.h, big-endian manifest uid, scope id, collection id
    assert system_event(0, 0, b"airline", struct.pack(">QII", 5, 8, 9)) == (0, 8, 9, "airline")
    assert system_event(0, 1, b"hotel", struct.pack(">QIII", 5, 8, 0x88, 60)) == (0, 8, 0x88, "hotel")
    assert system_event(1, 0, b"", struct.pack(">QII", 6, 8, 9)) == (1, 8, 9, None)
    assert system_event(3, 0, b"inventory", struct.pack(">QI", 5, 8)) == (3, 8, None, "inventory")
    assert system_event(4, 0, b"", struct.pack(">QI", 7, 8)) == (4, 8, None, None)
    # version 2: FlatBuffers tables of events.fbs, written by the FlatBuffers library
    assert system_event(0, 2, b"route", fb_collection(5, 8, 10, "route", 3600)) == (0, 8, 10, "route")
    assert system_event(5, 2, b"route", fb_collection(6, 8, 10, "route")) == (5, 8, 10, "route")
    assert system_event(0, 2, b"c", fb_collection(5, 0, 0x1234, "c")) == (0, 0, 0x1234, "c")
    assert system_event(3, 2, b"inventory", fb_scope(5, 8, "inventory")) == (3, 8, None, "inventory")
    assert system_event(1, 2, b"", fb_dropped_collection(6, 8, 10)) == (1, 8, 10, None)
    # the sample's hand-made table reads the same
    assert system_event(0, 2, b"route", flatbuffer_collection(8, 10)) == (0, 8, 10, "route")
    # not such an event, or values that do not hold the ids
    assert system_event(2, 0, b"x", bytes(16)) is None
    assert system_event(0, 0, b"x", bytes(15)) is None
    assert system_event(0, 3, b"x", bytes(16)) is None
    assert system_event(0, 2, b"x", b"\xff\xff\x00\x00" + bytes(8)) is None


# --- the three views of every collection-aware sample -------------------------------------------

def collection_aware_samples() -> list[str]:
    """Samples with a successful HELLO response that lists the Collections feature."""
    names = []
    for path in sorted(SAMPLES.iterdir()):
        try:
            for ev in iter_events(str(path)):
                if type(ev) is Pdu and ev.data[0] == 0x81 and ev.data[1] == 0x1F:
                    m = decode(ev.data)
                    value = bytes(m.value)
                    if m.status == 0 and FEATURE_COLLECTIONS in [value[i:i + 2] for i in
                                                                 range(0, len(value), 2)]:
                        names.append(path.name)
                        break
        except Exception:
            continue
    return names


AWARE = collection_aware_samples()


def test_collection_aware_samples_are_found():
    assert {"collections.pcap", "lifecycle-legal.pcap", "violations-validator.pcap",
            "replica-node.pcap", "controls-legal.pcap"} <= set(AWARE)


def dissect_view(path: Path, whole: list | None = None) -> list[tuple]:
    """``whole``: given, gets one bool: the capture lost or cut no bytes (no gap, no resync)."""
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "dissect", str(path),
                           "--format", "jsonl"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode in (0, 2), proc.stderr
    if whole is not None:
        whole.append(" 0 gaps" in proc.stderr and " 0 resyncs" in proc.stderr)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    return [(r["frame"], r["collection_id"], r["key"], r["collection_name"])
            for r in rows if "collection_id" in r]


def scapy_view(path: Path) -> list[tuple]:
    out = []
    for pkt in read(str(path)):
        body = pkt[MCBP].body
        if body is not None and body.fields.get("collection_id") is not None:
            out.append((pkt.frame, body.collection_id,
                        body.key.decode("utf-8", "backslashreplace"), pkt[MCBP].collection_name))
    return out


def lua_view(path: Path) -> list[tuple]:
    proc = subprocess.run(["tshark", "-r", str(path), "-X", f"lua_script:{LUA}",
                           "-o", "tcp.reassemble_out_of_order:TRUE", "-T", "pdml"],
                          capture_output=True, text=True, check=True)
    out = []
    for packet in ET.fromstring(proc.stdout).iter("packet"):
        frame = None
        for proto in packet.findall("proto"):
            if proto.get("name") == "frame":
                frame = int(next(f.get("show") for f in proto.iter("field")
                                 if f.get("name") == "frame.number"))
            elif proto.get("name") == "dcp":
                fields = {f.get("name"): f for f in proto.iter("field")}
                if "dcp.collection_id" in fields:
                    name = fields.get("dcp.collection_name")
                    key = fields.get("dcp.key")
                    out.append((frame, int(fields["dcp.collection_id"].get("show"), 0),
                                bytes.fromhex(key.get("value")).decode("utf-8", "backslashreplace")
                                if key is not None else "",
                                name.get("show") if name is not None else None))
    return out


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.parametrize("name", AWARE)
def test_collection_ids_and_keys_equal_in_dissect_scapy_and_lua(name):
    path = SAMPLES / name
    whole: list = []
    dissected = dissect_view(path, whole)
    assert dissected, "a collection-aware sample without document keys"
    assert scapy_view(path) == dissected
    lua = lua_view(path)
    if whole[0]:
        assert lua == dissected
    else:       # Wireshark does not resynchronise after lost or uncaptured bytes
        it = iter(dissected)
        assert lua and all(row in it for row in lua)


def test_collections_sample_shows_ids_names_and_logical_keys():
    rows = dissect_view(SAMPLES / "collections.pcap")
    assert [(cid, key, name) for _, cid, key, name in rows] == [
        (0, "doc-1", None),
        (8, "airline_10", "inventory.airline"),
        (9, "hotel_21", "inventory.hotel"),
        (0x88, "landmark_3", "inventory.landmark"),
        (0xA, "route_5", "inventory.route"),          # named by a FlatBuffers (version 2) event
        (9, "hotel_20", "inventory.hotel"),
        (8, "airline_11", "inventory.airline"),       # the filtered stream of connection 2
        (0x88, "landmark_4", "inventory.landmark"),
        (8, "airline_12", "inventory.airline"),
    ]
    table = subprocess.run([sys.executable, "-m", "dcpdissect", "dissect",
                            str(SAMPLES / "collections.pcap"), "--opcode", "DcpMutation"],
                           capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "cid=0x88(inventory.landmark) key='landmark_3'" in table
    assert "cid=0x0 key='doc-1'" in table
    assert "key='plain-key'" in table and "cid=0x0 key='plain-key'" not in table


@pytest.mark.tshark
def test_lua_key_filters_see_the_logical_key():
    def frames(flt: str) -> list[str]:
        return subprocess.run(["tshark", "-r", str(SAMPLES / "collections.pcap"), "-X",
                               f"lua_script:{LUA}", "-Y", flt, "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, check=True).stdout.split()

    assert frames('dcp.key contains "airline"') == ["20", "40"]
    assert frames('dcp.key == "landmark_4"') == ["40"]
    assert frames("dcp.collection_id == 0x88") == ["20", "40"]
    assert frames('dcp.collection_name == "inventory.route"') == ["20"]
    assert frames('dcp.key == "plain-key" && !dcp.collection_id') == ["60"]


def test_scapy_collection_id_field_crafts_and_reads_the_prefix():
    pkt = MCBP(opaque=3) / DcpMutation(by_seqno=4, collection_id=0x88, key=b"k", value=b"v")
    data = raw(pkt)
    assert data == encode(0x57, {"by_seqno": 4, "rev_seqno": 0, "flags": 0, "expiration": 0},
                          key=b"\x88\x01k", value=b"v", opaque=3)
    back = MCBP(data, collections=True)
    assert (back[DcpMutation].collection_id, back[DcpMutation].key) == (0x88, b"k")
    assert "cid=0x88 key='k'" in back.summary()
    assert MCBP(data)[DcpMutation].key == b"\x88\x01k"          # HELLO not known: the whole key
    bad = raw(MCBP() / DcpDeletionV2(by_seqno=1, key=b"\x80\x00k"))   # non-canonical prefix
    kept = MCBP(bad, collections=True)
    assert kept[DcpDeletionV2].collection_id is None and kept[DcpDeletionV2].key == b"\x80\x00k"
    assert raw(kept) == bad


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from([0x57, 0x58, 0x59, 0x60]), st.integers(0, 2**32 - 1),
       st.binary(min_size=0, max_size=20), st.binary(min_size=0, max_size=8))
def test_scapy_reads_any_collection_key_and_builds_it_back(opcode, cid, logical, noise):
    key = leb128(cid) + logical
    data = encode(opcode, {}, key=key, value=b"{}")
    pkt = MCBP(data, collections=True)
    body = pkt.body
    assert (body.collection_id, body.key) == (cid, logical)
    assert raw(pkt) == data
    odd = encode(opcode, {}, key=noise, value=b"")          # any bytes: never raises, same bytes
    assert raw(MCBP(odd, collections=True)) == odd


# --- the view: negotiation, buckets, stream filters ----------------------------------------------

def pdu(conn: int, direction: int, data: bytes, frame: int) -> Pdu:
    return Pdu(conn, direction, 0, data, (frame,), frame, frame)


def hello(conn: int, frame: int, *features: int) -> list[Pdu]:
    value = b"".join(f.to_bytes(2, "big") for f in features)
    return [pdu(conn, 0, encode(0x1F, key=b"t", value=value, opaque=1), frame),
            pdu(conn, 1, encode(0x1F, request=False, value=value, opaque=1), frame + 1)]


def select_bucket(conn: int, frame: int, bucket: str) -> list[Pdu]:
    return [pdu(conn, 0, encode(0x89, key=bucket.encode(), opaque=2), frame),
            pdu(conn, 1, encode(0x89, request=False, opaque=2), frame + 1)]


def create_scope(conn: int, frame: int, sid: int, name: str) -> Pdu:
    return pdu(conn, 1, encode(0x5F, {"by_seqno": frame, "event": 3, "version": 0},
                               key=name.encode(), value=struct.pack(">QI", 1, sid)), frame)


def create_collection(conn: int, frame: int, sid: int, cid: int, name: str) -> Pdu:
    return pdu(conn, 1, encode(0x5F, {"by_seqno": frame, "event": 0, "version": 0},
                               key=name.encode(), value=struct.pack(">QII", 1, sid, cid)), frame)


def stream_request(conn: int, frame: int, value: bytes) -> Pdu:
    return pdu(conn, 0, encode(0x53, dict(flags=0, start_seqno=0, end_seqno=9, vbucket_uuid=0,
                                          snap_start_seqno=0, snap_end_seqno=0), value=value), frame)


def mutation(conn: int, frame: int, key: bytes) -> Pdu:
    return pdu(conn, 1, encode(0x57, {"by_seqno": frame}, key=key, value=b"{}"), frame)


def run(view: CollectionsView, events: list[Pdu]) -> list:
    return [(view.feed(ev, decode(ev.data)), view.stream_filter(ev.conn, decode(ev.data)))
            for ev in events]


def test_names_are_per_bucket_and_keys_split_only_after_hello():
    view = CollectionsView()
    out = run(view, [mutation(1, 1, b"\x08a"), *hello(1, 2, 0x12), *select_bucket(1, 4, "travel"),
                     create_scope(1, 6, 8, "inventory"), create_collection(1, 7, 8, 9, "hotel"),
                     mutation(1, 8, b"\x09h1"),
                     *hello(2, 9, 0x12), *select_bucket(2, 11, "beer"), mutation(2, 13, b"\x09h2"),
                     *hello(3, 14, 0x06), mutation(3, 16, b"\x09h3")])
    keys = [k for k, _ in out if k is not None]
    assert keys == [DocKey(9, b"h1", "inventory.hotel"), DocKey(9, b"h2", None)]
    assert out[0] == (None, None)           # before the HELLO: the whole key, no id
    assert out[-1] == (None, None)          # HELLO without Collections


def test_stream_filters_name_their_ids():
    view = CollectionsView()
    events = [*hello(1, 1, 0x12), create_scope(1, 3, 8, "inventory"),
              create_collection(1, 4, 8, 0x88, "landmark"),
              stream_request(1, 5, b'{"scope":"8"}'),
              stream_request(1, 6, b'{"collections":["88","a"],"sid":3}'),
              stream_request(1, 7, b'{"sid":3}'),
              stream_request(1, 8, b'not json'),
              stream_request(1, 9, b'{"collections":"88"}'),
              stream_request(1, 10, b'{"collections":[136]}'),
              stream_request(1, 11, b'{"collections":["1ffffffff"]}'),
              stream_request(1, 12, b'[' * 100_000 + b']' * 100_000),
              stream_request(1, 13, b'{"scope":"8\xff"}')]
    filters = [f for _, f in run(view, events)][4:]
    assert filters[0] == StreamFilter({"id": 8, "name": "inventory"}, [])
    assert filters[1] == StreamFilter(None, [{"id": 0x88, "name": "inventory.landmark"},
                                             {"id": 0xA, "name": None}])
    assert filters[2:] == [None] * 7


def test_dissect_shows_the_stream_filter():
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "dissect",
                           str(SAMPLES / "collections.pcap"), "--opcode", "DcpStreamReq"],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    assert "filter=collections:0x8(inventory.airline),0x88(inventory.landmark)" in proc.stdout
    rows = [json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "dcpdissect", "dissect", str(SAMPLES / "collections.pcap"),
         "--opcode", "DcpStreamReq", "--format", "jsonl"],
        capture_output=True, text=True, cwd=ROOT, check=True).stdout.splitlines()]
    filters = [(r["frame"], r["collection_filter"]) for r in rows if "collection_filter" in r]
    assert filters == [(36, {"scope": None, "collections": [
        {"id": 8, "name": "inventory.airline"}, {"id": 0x88, "name": "inventory.landmark"}]})]
