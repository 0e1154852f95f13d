"""Decoder, analyzer and Lua plugin on MCBP/DCP frames written by Couchbase's own software,
kept unchanged in tests/real_frames (its README.md gives their provenance and licences)."""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from dcpdissect.codec import decode, encode
from dcpdissect.codec.problems import TRUNCATED, UNKNOWN_MAGIC
from dcpdissect.reassembly.pdus import Pdu, iter_events
from dcpdissect.samples import netsynth as ns
from dcpdissect.samples.dsl import control, dcp_open, failover, marker, ok, stream_req

REAL = Path(__file__).resolve().parent / "real_frames"
GO, JVM = REAL / "gomemcached", REAL / "couchbase-jvm-clients"
ROOT = Path(__file__).resolve().parents[1]


# --- 1. gomemcached's saved frames: vb 874, magic 0x08, frame info 22 00 01 = stream id 1 ----
def go_frame(op: int) -> bytes:
    return b"".join((GO / f"root_{part}.{op:#04x}.bin").read_bytes() for part in ("header", "body"))


# read with xxd: (extlen, keylen, bodylen, datatype, cas, key, extras fields)
GO_FRAMES = {
    0x56: (20, 0, 23, 0, 0, b"", dict(start_seqno=0, end_seqno=24, flags=0x06)),  # disk+chk
    0x57: (31, 27, 148, 0x01, 0x15C7C2B955AB0000, b"\x08xdcrProvCollections_C29854",
           dict(by_seqno=24, rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0, nru=2)),
    0x5F: (13, 4, 36, 0, 0, b"col1", dict(by_seqno=4, event=0, version=0)),   # CreateCollection
}


@pytest.mark.parametrize("op", sorted(GO_FRAMES), ids=hex)
def test_gomemcached_frames_decode(op):
    extlen, keylen, bodylen, datatype, cas, key, fields = GO_FRAMES[op]
    m = decode(go_frame(op))
    assert m.problems == [] and m.fields == fields and m.layout == "V1"
    assert (m.magic, m.opcode, m.vbucket, m.opaque, m.framing_len, m.stream_id) == (0x08, op, 874, 0x1036A, 3, 1)
    assert (m.extlen, m.keylen, m.bodylen, m.datatype, m.cas, m.key) == (extlen, keylen, bodylen, datatype, cas, key)
    assert m.value_len == len(m.value) == bodylen - 3 - extlen - keylen
    if op == 0x57:
        assert json.loads(bytes(m.value))["name"] == "xdcrProvCollections_C29854"
    if op == 0x5F:     # value left undecoded by the decoder: manifest uid 0, scope 8, collection 8
        assert struct.unpack(">QII", m.value) == (0, 8, 8)


def test_gomemcached_flex_snapshot_header_only():
    # a marker's header alone (gomemcached TestStreamIDSnapshotReceive): the body is missing
    m = decode((GO / "root_flexSnapOpHdr.bin").read_bytes())
    assert (m.magic, m.opcode, m.framing_len, m.extlen, m.keylen, m.vbucket, m.bodylen, m.opaque) \
        == (0x08, 0x56, 3, 20, 0, 925, 23, 0x1039D)
    assert [p.code for p in m.problems] == [TRUNCATED]


# --- 2. gomemcached's MCRequest JSON -------------------------------------------------------------
def go_json_frame(name: str) -> bytes:
    """As MCRequest.Bytes() (gomemcached mc_req.go fillRegularHeaderBytes, no framing extras):
    magic 0x80, keylen = CollIdLen + len(Key), the leb128 CollId before the Key."""
    r = json.loads((GO / f"{name}.json").read_text())
    extras, key, body, meta = (base64.b64decode(r.get(k) or "") for k in ("Extras", "Key", "Body", "ExtMeta"))
    key = bytes(r.get("CollId") or [])[:r.get("CollIdLen", 0)] + key
    payload = extras + key + body + meta
    return struct.pack(">BBHBBHIIQ", 0x80, r["Opcode"], len(key), len(extras), r["DataType"],
                       r["VBucket"], len(payload), r["Opaque"], r["Cas"]) + payload


# name: (vbucket, by_seqno, extlen, key, value length, (event, version, value) or datatype)
GO_JSON = {
    "scopeCreation": (511, 1, 13, b"S1", 12, (3, 0, (1, 8))),          # manifest uid, scope
    "collectionCreation": (511, 4, 13, b"C1", 16, (0, 0, (4, 8, 9))),  # ..., collection
    "scopeDel": (1023, 4, 13, b"", 12, (4, 0, (4, 8))),
    "collectionDel": (1023, 5, 13, b"", 16, (1, 0, (5, 8, 9))),
    "origNoCollectionMut": (406, 1, 31, b"d1", 72, 0x03),              # JSON + Snappy
    "defaultScopeDefaultColMutation": (406, 1, 31, b"\x00d1", 72, 0x03),
    "scope_and_collection_mutation": (406, 5, 31, b"\x09d1", 20, 0x01),
}


@pytest.mark.parametrize("name", sorted(GO_JSON))
def test_gomemcached_json_requests_decode(name):
    vb, seqno, extlen, key, vlen, extra = GO_JSON[name]
    m = decode(go_json_frame(name))
    assert m.problems == [] and m.opaque == 0x10000 | vb     # gomemcached's opaque
    assert (m.vbucket, m.fields["by_seqno"], m.extlen, m.key, m.value_len) == (vb, seqno, extlen, key, vlen)
    if m.opcode == 0x5F:
        assert (m.fields["event"], m.fields["version"]) == extra[:2]
        assert struct.unpack(f">Q{len(extra[2]) - 1}I", m.value) == extra[2]
    else:
        assert (m.opcode, m.datatype, m.fields["nmeta"]) == (0x57, extra, 0)


# --- helpers: capture files, the analyzer, tshark with the plugin --------------------------------
def connection(port: int, exchanges) -> ns.TcpConversation:
    """10.9.0.2:port -> 10.9.0.1:11210; ``exchanges``: (direction, frames sent coalesced)."""
    c = ns.TcpConversation(ns.Endpoint("10.9.0.2", port), ns.Endpoint("10.9.0.1", 11210))
    for direction, frames in exchanges:
        for i, f in enumerate(frames):
            c.send(direction, f, coalesce_with_next=i < len(frames) - 1)
    c.close()
    return c


def python_view(path: Path) -> tuple[dict[int, tuple], set[bytes]]:
    """Per frame, (opcodes, vbuckets, statuses, stream ids) of its PDUs; all PDUs' bytes."""
    pdus, view = [ev for ev in iter_events(str(path)) if type(ev) is Pdu], {}
    for ev in pdus:
        m, (ops, vbs, statuses, sids) = decode(ev.data), view.setdefault(ev.frame, ([], [], [], []))
        ops.append(m.opcode)
        vbs.append(m.vbucket) if m.is_request else statuses.append(m.status)
        sids.extend([] if m.stream_id is None else [m.stream_id])
    return view, {ev.data for ev in pdus}


def analyze(path: Path) -> list[tuple[str, str, int, str]]:      # (severity, rule, frame, message)
    proc = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "analyze", "--format", "jsonl",
                           "--no-progress", "--fail-on", "never", str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return [(f["severity"], f["rule"], f["frame"], f["message"]) for f in map(json.loads, proc.stdout.splitlines())]


@cache
def lua_view(path: Path) -> tuple[dict[int, tuple], list[tuple[int, str]], list[str]]:
    """tshark + plugin: as python_view; (frame, message) of Warning/Error experts; Lua errors."""
    fields = ("frame.number", "dcp.opcode", "dcp.vbucket", "dcp.status", "dcp.stream_id",
              "_ws.expert.message", "_ws.expert.severity", "_ws.lua.error")
    proc = subprocess.run(["tshark", "-r", str(path), "-X", f"lua_script:{ROOT / 'lua' / 'dcpdissect.lua'}",
                           "-o", "tcp.reassemble_out_of_order:TRUE", "-T", "fields", "-E", "occurrence=a",
                           "-E", "aggregator=|", *(a for f in fields for a in ("-e", f))],
                          capture_output=True, text=True, check=True)
    view, experts, errors = {}, [], [line for line in proc.stderr.splitlines() if "lua" in line.lower()]
    for line in proc.stdout.splitlines():
        frame, *cols = line.split("\t")
        ops, vbs, statuses, sids, messages, severities, lua_errors = [c.split("|") if c else [] for c in cols]
        if ops:
            view[int(frame)] = tuple([int(x, 0) for x in c] for c in (ops, vbs, statuses, sids))
        experts += [(int(frame), m) for m, sev in zip(messages, severities) if int(sev) >= 0x600000]
        errors += lua_errors
    return view, experts, errors


# --- 3./4. the real DCP frames as a producer's answers to stream requests ------------------------
def dcp_connection(port: int, features, streams, sid: int | None = None) -> ns.TcpConversation:
    """HELLO, DcpOpen(Producer), enable_stream_id if ``sid``; per (vb, opaque, frames) a stream
    request from 0 (stream id in its JSON value, kv_engine stream-request-value.md), failover log, frames."""
    hello = struct.pack(f">{len(features)}H", *features)
    ex = [("c2s", [encode(0x1F, key=b"real-frames", value=hello, opaque=0xF0)]), ("s2c", [ok(0x1F, 0xF0, value=hello)]),
          ("c2s", [dcp_open(f"real-frames-{port}", 0x01, 0xF1)]), ("s2c", [ok(0x50, 0xF1)])]
    if sid is not None:
        ex += [("c2s", [control("enable_stream_id", "true", 0xF2)]), ("s2c", [ok(0x5E, 0xF2)])]
    for vb, opaque, frames in streams:
        ex += [("c2s", [stream_req(vb, opaque, value=b'{"sid":%d}' % sid if sid else b"")]),
               ("s2c", [failover(opaque, (0x00C0FFEE00000000 | vb, 0))]), ("s2c", frames)]
    return connection(port, ex)


@pytest.fixture(scope="module")
def dcp_pcap(tmp_path_factory) -> tuple[Path, list[bytes]]:
    """Real frames keep every byte (their opaque 0x10000 | vb is the stream request's), one
    connection per kind of stream (flexSnapOpHdr.bin, a header alone, is left out):
    :50000 vb 874, stream id 1: in seqno order the saved frames make a disk snapshot [0,24]:
      marker, system event 4 (creates collection 8 "col1"), mutation 24 (in collection 8).
    :50001 the collection-aware JSON requests, saved without markers: each stream gets a V1
      disk marker [0, last seqno] (scaffolding). From several runs: vb 1023 drops scope 8
      (manifest 4) before its collection 9 (manifest 5).
    :50002 origNoCollectionMut (vb 406 seqno 1, no leb128 prefix): collection-unaware, no HELLO Collections."""
    go, js = [go_frame(op) for op in (0x56, 0x5F, 0x57)], {n: go_json_frame(n) for n in GO_JSON}
    features = (0x0B, 0x06, 0x0A, 0x12)     # HELLO: JSON, XATTR, Snappy, Collections

    def stream(vb, end, *names):
        return vb, 0x10000 | vb, [marker(vb, 0x10000 | vb, 0, end, "disk+checkpoint")] + [js[n] for n in names]

    convs = [dcp_connection(50000, features, [(874, 0x1036A, go)], sid=1),
             dcp_connection(50001, features, [
                 stream(511, 4, "scopeCreation", "collectionCreation"), stream(1023, 5, "scopeDel", "collectionDel"),
                 stream(406, 5, "defaultScopeDefaultColMutation", "scope_and_collection_mutation")]),
             dcp_connection(50002, features[:3], [stream(406, 1, "origNoCollectionMut")])]
    path = tmp_path_factory.mktemp("real") / "real-dcp.pcap"
    ns.write_pcap(path, [c.packets() for c in convs])
    return path, go + list(js.values())


# --- 5. couchbase-jvm-clients' Netty hexdumps of server responses --------------------------------
def jvm(label: str) -> bytes:
    """Frame n of a Netty hexdump file ("file", "file#n"): rows joined in order (one message may
    span dumps, some row offsets were edited by hand), cut by the headers' body length."""
    name, _, n = label.partition("#")
    rows = re.findall(r"^\|[0-9a-f]{8}\|((?: [0-9a-f]{2})+)", (JVM / f"{name}.txt").read_text(), re.M)
    data, frames = bytes.fromhex("".join(rows)), []
    while data:
        size = 24 + struct.unpack_from(">I", data, 8)[0]
        frames, data = frames + [data[:size]], data[size:]
    return frames if n == "*" else frames[int(n or 1) - 1]


F = b"\x02\0\0\0"        # the gets' extras: document flags 0x02000000
# label: (opcode, status, opaque, frame info ids, extras, key, value length), read from the dumps
JVM_FRAMES = {
    "error_hello_response": (0x1F, 0x01, 0, [], b"", b"", 0),
    "success_hello_response": (0x1F, 0, 0, [], b"", b"", 12),
    "error_sasl_list_mechs_response": (0x20, 0x83, 3, [0], b"", b"", 42),
    "success_sasl_list_mechs_empty_response": (0x20, 0, 1, [], b"", b"", 0),
    **{f"success_sasl_list_mechs{x}_response": (0x20, 0, 3, [0], b"", b"", 42) for x in ("", "_unknown_mech")},
    "success_empty_errormap_response": (0xFE, 0, 0, [0], b"", b"", 0),
    "success_errormap_response": (0xFE, 0, 0, [0], b"", b"", 10205),
    "success_errormapv2_response": (0xFE, 0, 3, [0], b"", b"", 7847),
    "success_errormapv2_response#2": (0xFE, 0, 4, [0], b"", b"", 7847),   # a second response
    "get_response_not_found": (0x00, 0x01, 7, [], b"", b"", 0),
    "get_response_success": (0x00, 0, 7, [], F, b"", 130),
    "response_extras_and_value": (0x00, 0, 1, [0], F, b"", 122),       # airline_10, Snappy
    "compressed_get_response": (0x00, 0, 2, [0], F, b"", 5592),
    **{f"compressed_get_and_{x}_response": (op, 0, 1, [0], F, b"", 5592) for x, op in (("lock", 0x94),
                                                                                      ("touch", 0x1D))},
    "compressed_replica_get_response": (0x83, 0, 1, [], F, b"mydoc", 5592),
}
HELLO_FEATURES = (0x03, 0x06, 0x07, 0x08, 0x0A, 0x0F)   # what success_hello_response enables


@pytest.mark.parametrize("label", sorted(JVM_FRAMES))
def test_jvm_responses_decode(label):
    op, status, opaque, fids, extras, key, vlen = JVM_FRAMES[label]
    m = decode(jvm(label))
    assert m.problems == [] and not m.is_request
    assert (m.opcode, m.status, m.opaque, [fi.id for fi in m.frame_infos]) == (op, status, opaque, fids)
    assert (m.extras, m.key, m.value_len, len(m.value)) == (extras, key, vlen, vlen)
    assert m.magic == (0x18 if m.framing_len or "mechs_empty" in label else 0x81)  # 0x18, no frame info
    assert bool(m.datatype & 0x02) == ("compressed" in label or label == "response_extras_and_value")
    if label == "success_hello_response":
        assert struct.unpack(">6H", m.value) == HELLO_FEATURES


def test_jvm_request_and_invalid_magic_decode():
    labels = {f"{p.stem}#{i + 1}" if i else p.stem for p in JVM.glob("*.txt") for i in range(len(jvm(f"{p.stem}#*")))}
    assert labels == set(JVM_FRAMES) | {"request_key_only", "error_errormap_response"}   # all covered
    m = decode(jvm("request_key_only"))
    assert (m.magic, m.opcode, m.vbucket, m.opaque, m.key, m.problems) == (0x80, 0, 41, 1, b"airline_10", [])
    m = decode(jvm("error_errormap_response"))
    assert (m.magic, m.opcode, m.status, m.bodylen) == (0x17, 0xFE, 0x01, 0)
    assert [p.code for p in m.problems] == [UNKNOWN_MAGIC]


def jvm_exchange(label: str) -> list[tuple[str, list[bytes]]]:
    # request (same opcode, opaque), response; request_key_only.txt: the SDK's Get of airline_10
    op, _, opaque, *_ = JVM_FRAMES[label]
    value = {0x1F: struct.pack(">6H", *HELLO_FEATURES), 0xFE: b"\0\2" if "v2" in label else b"\0\1"}
    req = encode(op, key={0x1F: b"real-frames", 0x20: b"", 0xFE: b""}.get(op, b"mydoc"),
                 value=value.get(op, b""), extras=b"\0\0\0\x0f" if op in (0x94, 0x1D) else b"",
                 opaque=opaque)         # GetLocked / GAT: lock time / expiry
    return [("c2s", [jvm("request_key_only") if label == "response_extras_and_value" else req]), ("s2c", [jvm(label)])]


@pytest.fixture(scope="module")
def jvm_pcap(tmp_path_factory) -> tuple[Path, list[bytes]]:
    # the failed HELLO first: the successful one after it enables Snappy for the gets
    labels = ["error_hello_response"] + sorted(set(JVM_FRAMES) - {"error_hello_response"})
    path = tmp_path_factory.mktemp("jvm") / "jvm.pcap"
    ns.write_pcap(path, connection(50000, [x for n in labels for x in jvm_exchange(n)]).packets())
    return path, [jvm(n) for n in labels]


@pytest.mark.parametrize("then_valid", [False, True], ids=["last", "then-valid"])
def test_analyzer_reports_the_invalid_magic_at_its_frame(tmp_path, then_valid):
    # a valid response, then magic 0x17 on the same connection: last, or before a valid one
    valid = jvm_exchange("success_empty_errormap_response")
    ex = valid + [("s2c", [jvm("error_errormap_response")])] + (valid[1:] if then_valid else [])
    bad_frame = ns.write_pcap(tmp_path / "m.pcap", connection(50000, ex).packets()).data_frames("s2c")[1][0]
    assert ("unknown-magic", bad_frame) in [f[1:3] for f in analyze(tmp_path / "m.pcap")]


# --- both captures: the analyzer and the plugin --------------------------------------------------
@pytest.mark.parametrize("capture", ["dcp_pcap", "jvm_pcap"])
def test_analyzer_accepts_the_real_frames(capture, request):
    path, real = request.getfixturevalue(capture)
    assert set(real) <= python_view(path)[1]
    assert [f for f in analyze(path) if f[0] in ("warning", "error")] == []


@pytest.mark.tshark
@pytest.mark.parametrize("capture", ["dcp_pcap", "jvm_pcap"])
def test_lua_plugin_agrees_on_the_real_frames(capture, request):
    path, _ = request.getfixturevalue(capture)
    lua, experts, lua_errors = lua_view(path)
    assert lua == python_view(path)[0]      # per frame: opcodes, vbuckets, statuses, stream ids
    assert [e for e in experts if e[1].startswith("[")] == [] and lua_errors == []     # "[rule] ..."
