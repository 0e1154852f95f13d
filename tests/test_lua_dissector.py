"""The generated Wireshark Lua dissector (lua/dcpdissect.lua) against the Python decoder.

tshark runs the plugin over every sample; every PDU it shows must carry the same header,
stream id, extras/value fields, layout label, key and value length as the decoder's
Message, and the same single-PDU findings (as expert infos) as the analyzer.
"""

from __future__ import annotations

import io
import random
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import RULES
from dcpdissect.analysis.engine import Analyzer
from dcpdissect.codec import decode
from dcpdissect.codec.keys import leb128
from dcpdissect.codec.problems import EXTRAS_SIZE, FRAME_INFO
from dcpdissect.luagen import install, render
from dcpdissect.protocol import DATATYPE, DCP_OPCODES, SERVER_MAGICS, Opcode
from dcpdissect.protocol.filters import field_filters
from dcpdissect.reassembly.pdus import Pdu, iter_events
from dcpdissect.samples import netsynth as ns
from dcpdissect.samples.builder import all_specs

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua" / "dcpdissect.lua"
SAMPLES = ROOT / "samples"
BASE_OPTS = ["-X", f"lua_script:{LUA}", "-o", "tcp.reassemble_out_of_order:TRUE"]
# Samples where TCP loses bytes or starts mid-stream: tshark does not resynchronise inside
# a segment, and it waits forever for a lost segment, so it shows a subset of the
# decoder's PDUs (always the last ones of a frame). violations-garbage's first connection
# loses a segment before 1000 one-byte segments (the decoder gives up waiting; tshark not).
# The hostile samples with a storm, a sequence jump or garbage between messages likewise.
PARTIAL = {"tcp-loss", "tcp-loss-header", "tcp-mid-stream", "violations-garbage",
           "hostile-ooo-storm", "hostile-seq-jump", "hostile-garbage-tcp", "cut-snaplen-128",
           "cut-snaplen-256", "cut-resume-collapsed-snap256", "cut-lost-headers",
           "cut-request-hidden"}
SPECS = [s for s in all_specs() if (SAMPLES / s.filename).exists()]
NOT_RULES = {"dcp.expert.truncated", "dcp.expert.internal"}
SECTIONS = {op.code: op.section for op in DCP_OPCODES if op.section}


def lua_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "Lua" in line or "lua" in line]


def run_tshark(path: Path, *extra: str) -> tuple[str, str]:
    proc = subprocess.run(["tshark", "-r", str(path), *BASE_OPTS, *extra], capture_output=True,
                          text=True, check=True)
    return proc.stdout, proc.stderr


class LuaPdu:
    """One <proto name="dcp"> element: field name -> [(show, value)], experts."""

    def __init__(self, proto):
        self.fields: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.experts: list[tuple[str, str]] = []
        for f in proto.iter("field"):
            name = f.get("name")
            if name == "_ws.expert":
                rule = next((c.get("name") for c in f if c.get("name", "").startswith("dcp.")), None)
                msg = next((c.get("show") for c in f if c.get("name") == "_ws.expert.message"), "")
                self.experts.append((rule, msg))
            else:
                self.fields[name].append((f.get("show"), f.get("value")))

    def num(self, name: str) -> int | None:
        values = self.fields.get(name)
        if not values:
            return None
        assert len(values) == 1, f"{name} appears {len(values)} times"
        return _int(values[0][0])

    def nums(self, name: str) -> list[int]:
        return [_int(show) for show, _ in self.fields.get(name, [])]


def _int(show: str) -> int:
    """A field's shown value as a number (a boolean shows as 1/0 up to Wireshark 4.0, as
    True/False from 4.2 on)."""
    return {"True": 1, "False": 0}.get(show) if show in ("True", "False") else int(show, 0)


# Samples whose MCBP is on a port the plugin does not own (the Python heuristic finds it).
PORT_PREFS = {"ports-heuristic.pcap": ("-o", "dcp.tcp_ports:11210,11209,12000")}


@cache
def lua_pdus(path: Path) -> tuple[dict[int, list[LuaPdu]], dict[int, list[LuaPdu]], int, str]:
    """(frame -> PDUs, frame -> not-MCBP chunks, count of _ws.lua.error, stderr)."""
    out, stderr = run_tshark(path, "-T", "pdml", *PORT_PREFS.get(Path(path).name, ()))
    root = ET.fromstring(out)
    pdus, garbage, lua_err = defaultdict(list), defaultdict(list), 0
    for packet in root.iter("packet"):
        number = None
        for proto in packet.findall("proto"):
            name = proto.get("name")
            if name == "frame":
                number = int(next(f.get("show") for f in proto.iter("field")
                                  if f.get("name") == "frame.number"))
            elif name == "dcp":
                p = LuaPdu(proto)
                (pdus if "dcp.magic" in p.fields else garbage)[number].append(p)
        lua_err += sum(1 for f in packet.iter("field") if f.get("name") == "_ws.lua.error")
    return dict(pdus), dict(garbage), lua_err, stderr


@cache
def py_pdus(path: Path) -> dict[int, list]:
    by_frame = defaultdict(list)
    for ev in iter_events(str(path)):
        if type(ev) is Pdu:
            by_frame[ev.frame].append(decode(ev.data))
    return dict(by_frame)


@pytest.fixture(scope="module")
def lua_over_samples():
    """tshark with the plugin over every sample, in parallel, once before the sweep that
    reads them all (``lua_pdus`` keeps the results)."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda s: lua_pdus(SAMPLES / s.filename), SPECS))


def expected_fields(m) -> dict[str, object]:
    """Display-filter name -> expected value(s) for one decoded Message."""
    exp: dict[str, object] = {"dcp.magic": m.magic, "dcp.extlen": m.extlen,
                              "dcp.keylen": m.keylen, "dcp.datatype": m.datatype,
                              "dcp.bodylen": m.bodylen, "dcp.opaque": m.opaque, "dcp.cas": m.cas,
                              "dcp.stream_id": m.stream_id}
    exp["dcp.server_opcode" if m.magic in SERVER_MAGICS else "dcp.opcode"] = m.opcode
    exp["dcp.vbucket" if m.is_request else "dcp.status"] = m.vbucket if m.is_request else m.status
    exp["dcp.framing_len"] = m.framing_len if m.magic in (0x08, 0x18) else None
    # one boolean item per bit, set (1) or not (0)
    for mask, name in DATATYPE.bits.items():
        exp[f"dcp.datatype.{name}"] = 1 if m.datatype & mask else 0
    exp["dcp.value_len"] = m.value_len
    names = field_filters(m.spec, m.is_request) if m.spec is not None else {}
    spec: Opcode | None = m.spec
    for name, value in m.fields.items():
        if name == "failover_log":
            exp["dcp.failover_log.vbucket_uuid"] = [e["vbucket_uuid"] for e in value]
            exp["dcp.failover_log.seqno"] = [e["seqno"] for e in value]
            continue
        abbrev = names[name]
        exp[abbrev] = value
        shape = spec.request if m.is_request else spec.response
        for lay in shape.extras + shape.values:
            fd = next((f for f in lay.fields if f.name == name), None)
            if fd is not None and fd.flags is not None:
                for mask, bit in fd.flags.bits.items():
                    exp[f"{abbrev}.{bit}"] = 1 if value & mask else 0
                break
    # the opcode's seqno, once more under one name for every opcode
    exp["dcp.by_seqno"] = m.fields.get(spec.seqno_field) if spec and spec.seqno_field else None
    if spec is not None and m.layout is not None and m.opcode in SECTIONS:
        exp[f"dcp.{SECTIONS[m.opcode]}.layout"] = m.layout
    return exp


def compare(m, p: LuaPdu) -> list[str]:
    diffs = []
    for name, want in expected_fields(m).items():
        if isinstance(want, list):
            got = p.nums(name)
        elif isinstance(want, str):
            vals = p.fields.get(name)
            got = vals[0][0] if vals else None
        else:
            got = p.num(name)
        if got != want:
            diffs.append(f"{name}: python={want!r} lua={got!r}")
    # no layout field that the decoder did not decode
    decoded = {a for a, v in expected_fields(m).items() if v is not None}
    for name in p.fields:
        if (name.count(".") >= 2 and name.split(".")[1] in set(SECTIONS.values()) | {"failover_log"}
                and name not in decoded and not name.endswith((".layout", ".count"))):
            diffs.append(f"{name}: shown by lua, not decoded by python")
    if "dcp.rollback_seqno" in p.fields and "dcp.rollback_seqno" not in decoded:
        diffs.append("dcp.rollback_seqno: shown by lua only")
    if m.framing_len and not any(p.code == FRAME_INFO for p in m.problems):
        if [fi.id for fi in m.frame_infos] != p.nums("dcp.frame_info.id"):
            diffs.append(f"frame info ids: python={m.frame_infos} lua={p.nums('dcp.frame_info.id')}")
        if [fi.data.hex() for fi in m.frame_infos if fi.data] != [
                v for _, v in p.fields.get("dcp.frame_info.data", [])]:
            diffs.append(f"frame info data: python={m.frame_infos}")
    key = p.fields.get("dcp.key")
    # a collection-aware document key: dcp.collection_id (the leb128 prefix), then the logical key
    prefix = leb128(p.num("dcp.collection_id")) if "dcp.collection_id" in p.fields else b""
    if m.keylen and m.fields is not None and m.extlen + m.framing_len + m.keylen <= m.bodylen:
        if len(m.key) > len(prefix) and (not key or prefix.hex() + key[0][1] != m.key.hex()):
            diffs.append(f"dcp.key: python={m.key.hex()} lua={key}")
    elif key:
        diffs.append("dcp.key shown by lua only")
    return diffs


RULE_EXPERTS = {f"dcp.expert.{rid.replace('-', '_')}" for rid in RULES}


def lua_findings(p: LuaPdu) -> list[tuple[str, str]]:
    return sorted(e for e in p.experts if e[0] in RULE_EXPERTS)


@cache
def py_findings(path: Path) -> dict[int, list[tuple[str, str]]]:
    """The analyzer's single-message findings by frame, as (expert name, expert text)."""
    by_frame = defaultdict(list)
    analyzer = Analyzer()       # every finding (the cap is the pass's)
    found = [f for ev in iter_events(str(path)) for f in analyzer.feed(ev)] + analyzer.finish()
    for f in found:
        if RULES[f.rule].single_pdu:
            by_frame[f.frame].append((f"dcp.expert.{f.rule.replace('-', '_')}", f"[{f.rule}] {f.message}"))
    return {k: sorted(v) for k, v in by_frame.items()}


def compare_findings(path: Path, lua: dict, partial: bool = False) -> list[str]:
    """Frames where the plugin's rule experts differ from the analyzer's findings."""
    want = py_findings(path)
    problems = []
    for frame in sorted(set(want) | set(lua)):
        got = sorted(e for p in lua.get(frame, []) for e in lua_findings(p))
        expected = want.get(frame, [])
        if (not set(got) <= set(expected)) if partial else got != expected:
            problems.append(f"frame {frame}: experts lua={got} python={expected}")
    return problems


# --- tests ---------------------------------------------------------------------------------

def test_lua_file_is_fresh_render():
    assert LUA.read_text() == render(), "lua/dcpdissect.lua is stale: python -m dcpdissect.regen"


def test_every_single_pdu_rule_has_a_lua_implementation():
    """Each single-message rule is raised by the runtime's generic checks or by the rendered
    table data the runtime interprets (a shape's check or a layout's rule)."""
    single = {r.id for r in RULES.values() if r.single_pdu}
    assert len(single) >= 40, "single-message rules missing"
    text = render()
    for rid in single:
        assert f'add("{rid}"' in text or f'rule = "{rid}"' in text, rid
        assert f'"dcp.expert.{rid.replace("-", "_")}"' in text, rid


def test_install_writes_a_fresh_render(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = install()
    assert path == tmp_path / ".local/lib/wireshark/plugins/dcpdissect.lua"
    assert path.read_text() == render()


@pytest.mark.tshark
def test_tshark_loads_the_plugin_and_registers_the_fields():
    proc = subprocess.run(["tshark", "-G", "fields", "-X", f"lua_script:{LUA}"],
                          capture_output=True, text=True, check=True)
    assert not lua_errors(proc.stderr), proc.stderr
    names = {line.split("\t")[2] for line in proc.stdout.splitlines() if line.startswith(("F\t", "P\t"))}
    wanted = {"dcp", "dcp.magic", "dcp.opcode", "dcp.keylen", "dcp.framing_len", "dcp.extlen",
              "dcp.datatype", "dcp.vbucket", "dcp.status", "dcp.bodylen", "dcp.opaque", "dcp.cas",
              "dcp.frame_info.id", "dcp.frame_info.len", "dcp.stream_id",
              "dcp.snapshot.start_seqno", "dcp.snapshot.flags", "dcp.snapshot.version",
              "dcp.snapshot.max_visible_seqno", "dcp.snapshot.high_completed_seqno",
              "dcp.snapshot.purge_seqno", "dcp.snapshot.high_prepared_seqno",
              "dcp.snapshot.layout", "dcp.add_stream.flags", "dcp.add_stream.new_opaque",
              "dcp.stream_req.flags", "dcp.stream_req.start_seqno", "dcp.stream_req.end_seqno",
              "dcp.stream_req.vbucket_uuid", "dcp.stream_req.snap_start_seqno",
              "dcp.stream_req.snap_end_seqno", "dcp.failover_log.vbucket_uuid",
              "dcp.failover_log.seqno", "dcp.rollback_seqno", "dcp.mutation.by_seqno",
              "dcp.key", "dcp.value_len"}
    assert wanted <= names, sorted(wanted - names)
    snapshot_bits = {n for n in names if n.startswith("dcp.snapshot.flags.")}
    assert len(snapshot_bits) == 6
    assert len({n for n in names if n.startswith("dcp.add_stream.flags.")}) == 9
    assert len({n for n in names if n.startswith("dcp.stream_req.flags.")}) == 9
    for r in RULES.values():
        if r.single_pdu:
            assert f"dcp.expert.{r.id.replace('-', '_')}" in names, r.id


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.usefixtures("lua_over_samples")
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_every_pdu_matches_the_python_decoder(spec):
    path = SAMPLES / spec.filename
    lua, _garbage, lua_err, stderr = lua_pdus(path)
    assert lua_err == 0 and not lua_errors(stderr), stderr
    ours = py_pdus(path)
    problems, compared = [], 0
    for frame, msgs in sorted(ours.items()):
        got = lua.get(frame, [])
        if spec.name in PARTIAL:
            assert len(got) <= len(msgs), f"frame {frame}: lua {len(got)} PDUs, python {len(msgs)}"
            msgs = msgs[len(msgs) - len(got):]
        else:
            assert len(got) == len(msgs), f"frame {frame}: lua {len(got)} PDUs, python {len(msgs)}"
        for i, (m, p) in enumerate(zip(msgs, got)):
            problems += [f"frame {frame} pdu {i} {m.name}: {d}" for d in compare(m, p)]
            cut = len(m.value) < m.value_len or len(m.key) < m.keylen or len(m.extras) < m.extlen
            # a message the capture cut is shown as cut (Wireshark: not captured, not malformed)
            assert not [e for e in p.experts if e[0] in NOT_RULES
                        and not (cut and e[0] == "dcp.expert.truncated")], p.experts
            compared += 1
    extra = set(lua) - set(ours)
    assert not extra, f"lua decoded PDUs in frames python did not: {sorted(extra)}"
    problems += compare_findings(path, lua, partial=spec.name in PARTIAL)
    assert not problems, "\n".join(problems)
    assert compared > 0
    if spec.name not in PARTIAL:
        assert compared == sum(len(v) for v in ours.values())


@pytest.mark.slow
@pytest.mark.tshark
def test_partial_samples_still_decode_after_the_damage():
    for name in sorted(PARTIAL):
        spec = next(s for s in SPECS if s.name == name)
        lua = lua_pdus(SAMPLES / spec.filename)[0]
        assert sum(len(v) for v in lua.values()) > 0, name


@pytest.mark.tshark
def test_v22_marker_decodes_fully():
    path = SAMPLES / "clean-replication.pcap"
    lua = lua_pdus(path)[0]
    found = 0
    for frame, msgs in py_pdus(path).items():
        for m, p in zip(msgs, lua.get(frame, [])):
            if m.opcode == 0x56 and m.layout == "V2.2":
                found += 1
                assert p.fields["dcp.snapshot.layout"][0][0] == "V2.2"
                assert p.num("dcp.snapshot.purge_seqno") == m.fields["purge_seqno"]
                assert p.num("dcp.snapshot.high_prepared_seqno") == m.fields["high_prepared_seqno"]
                assert "_ws.malformed" not in p.fields
    assert found


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.usefixtures("lua_over_samples")
def test_extras_fields_sit_in_the_message_subtree():
    """Decoded extras have no dcp.extras item around them; extras no layout fits keep it."""
    decoded = undecoded = 0
    for spec in SPECS:
        path = SAMPLES / spec.filename
        lua = lua_pdus(path)[0]
        for frame, msgs in py_pdus(path).items():
            got = lua.get(frame, [])
            for m, p in zip(msgs[len(msgs) - len(got):], got):
                if not m.extlen or m.spec is None or m.fields is None:
                    continue
                if any(p.code == EXTRAS_SIZE for p in m.problems):
                    undecoded += 1
                    assert "dcp.extras" in p.fields, (spec.name, frame, m)
                elif m.extlen + m.framing_len + m.keylen <= m.bodylen:
                    decoded += 1
                    assert "dcp.extras" not in p.fields, (spec.name, frame, m)
    assert decoded > 100 and undecoded > 0


@pytest.mark.tshark
def test_multi_pdu_segment_info_column_lists_every_pdu():
    out, _ = run_tshark(SAMPLES / "clean-replication.pcap", "-T", "fields", "-e", "frame.number",
                        "-e", "_ws.col.Info")
    info = dict(line.split("\t", 1) for line in out.splitlines())
    lua = lua_pdus(SAMPLES / "clean-replication.pcap")[0]
    multi = [f for f, v in lua.items() if len(v) > 1]
    assert multi
    for frame in multi:
        assert info[str(frame)].count("; ") == len(lua[frame]) - 1, info[str(frame)]
    assert any(t.startswith("DcpSnapshotMarker vb:2 [0..6] V2.2; DcpMutation vb:2 seqno=1")
               for t in info.values())


@pytest.mark.tshark
def test_port_preference_moves_the_dissector():
    path = SAMPLES / "seed-marker-v1.pcap"          # server port 11210
    out, _ = run_tshark(path, "-T", "fields", "-e", "dcp.opcode")
    assert "0x56" in out
    out, _ = run_tshark(path, "-o", "dcp.tcp_ports:11209", "-T", "fields", "-e", "dcp.opcode",
                        "-e", "couchbase.opcode")
    assert "\t0x56" in out.splitlines(), out      # the built-in dissector has it again
    out, _ = run_tshark(path, "-o", "dcp.tcp_ports:11209,11210", "-Y", "dcp.opcode == 0x56",
                        "-T", "fields", "-e", "dcp.snapshot.end_seqno")
    assert out.strip() == "8"


@pytest.mark.tshark
def test_other_ports_by_preference_or_decode_as(tmp_path):
    conv = ns.TcpConversation(ns.Endpoint("10.9.0.2", 40000), ns.Endpoint("10.9.0.1", 11999))
    conv.send("s2c", b"".join(d for d in _sample_pdus()[:4]))
    conv.close()
    path = tmp_path / "port-11999.pcap"
    ns.write_pcap(str(path), [conv.packets()])
    for extra in (("-o", "dcp.tcp_ports:11210,11209,11999"), ("-d", "tcp.port==11999,dcp")):
        out, _ = run_tshark(path, *extra, "-Y", "dcp", "-T", "fields", "-e", "dcp.opcode")
        assert out.split(), extra
    out, _ = run_tshark(path, "-Y", "dcp")
    assert out.strip() == ""


# --- robustness: mutated and truncated captures ------------------------------------------

def _sample_pdus() -> list[bytes]:
    out = []
    for name in ("clean-replication.pcap", "violations-marker.pcap", "violations-structure.pcap",
                 "violations-stream-request.pcap", "add-stream.pcap", "rollback-violations.pcap"):
        out += [ev.data for ev in iter_events(str(SAMPLES / name)) if type(ev) is Pdu]
    return out


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.6:         # header byte (magic, lengths, datatype, framing)
            b[rng.randrange(min(len(b), 24))] = rng.choice((0, 1, 2, 0x0F, 0x10, 0x30, 0xFF,
                                                           0x08, 0x18, 0x80, 0x81, 0x82,
                                                           rng.randrange(256)))
        elif kind < 0.9 and len(b) > 24:
            b[rng.randrange(24, len(b))] = rng.randrange(256)
        else:
            b = b[:rng.randrange(1, len(b) + 1)]
    if rng.random() < 0.2:     # flexible framing with random framing extras
        b[0] = rng.choice((0x08, 0x18))
        if len(b) > 3:
            b[2] = rng.randrange(0, 8)
    return bytes(b)


def _fuzz_capture(rng: random.Random, pdus: list[bytes], first_port: int, count: int) -> bytes:
    convs = []
    for k in range(count):
        conv = ns.TcpConversation(ns.Endpoint("10.1.0.2", first_port + k),
                                  ns.Endpoint("10.1.0.1", rng.choice((11210, 11209))),
                                  start_ns=1_700_000_000_000_000_000 + k * 7)
        for _ in range(rng.randint(1, 6)):
            data = rng.choice(pdus)
            if rng.random() < 0.8:
                data = _mutate(rng, data)
            sizes = None
            if len(data) > 2 and rng.random() < 0.3:
                sizes = (rng.randrange(1, len(data)),)
            conv.send(rng.choice(("c2s", "s2c")), data, segment_sizes=sizes,
                      coalesce_with_next=rng.random() < 0.5)
        conv.close()
        pkts = conv.packets()
        if rng.random() < 0.2:
            data_at = ns.data_indices(pkts)
            if data_at:
                i = rng.choice(data_at)
                pkts = ns.truncate_capture(pkts, i, rng.randrange(54, len(pkts[i].frame_bytes())))
        convs.append(pkts)
    buf = io.BytesIO()
    ns.write_pcap(buf, convs)
    return buf.getvalue()


@pytest.mark.slow
@pytest.mark.tshark
def test_mutated_captures_raise_no_lua_errors(tmp_path):
    rng = random.Random(20240611)
    pdus = _sample_pdus()
    paths = []
    for n in range(6):               # 6 files x 50 mutated connections
        path = tmp_path / f"fuzz-{n}.pcap"
        path.write_bytes(_fuzz_capture(rng, pdus, 20000 + n * 100, 50))
        paths.append(path)

    def run(path):
        return run_tshark(path, "-Y", "_ws.lua.error || dcp.expert.internal",
                          "-T", "fields", "-e", "frame.number", "-e", "_ws.lua.error",
                          "-e", "dcp.expert.internal")

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(run, paths))
    for path, (out, stderr) in zip(paths, results):
        assert not lua_errors(stderr), stderr
        assert out.strip() == "", f"{path.name}: {out[:2000]}"
    # the fuzz really exercised the dissector
    out, _ = run_tshark(paths[0], "-Y", "dcp", "-T", "fields", "-e", "frame.number")
    assert len(out.splitlines()) > 50


@pytest.mark.tshark
def test_installed_plugin_is_loaded_from_home(tmp_path):
    path = install(tmp_path / ".local/lib/wireshark/plugins/dcpdissect.lua")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["tshark", "-G", "plugins"], capture_output=True, text=True, env=env, check=True)
    assert str(path) in proc.stdout
    proc = subprocess.run(["tshark", "-r", str(SAMPLES / "seed-marker-v1.pcap"), "-T", "fields",
                           "-e", "dcp.snapshot.end_seqno"], capture_output=True, text=True, env=env, check=True)
    assert "8" in proc.stdout.split() and not lua_errors(proc.stderr)


@pytest.mark.tshark
@pytest.mark.parametrize("flt, sample, count", [
    ("dcp.snapshot.start_seqno > 100", "clean-replication.pcap", 0),
    ("dcp.snapshot.start_seqno > 5", "clean-replication.pcap", 1),
    ("dcp.expert.marker_mvs_beyond_end", "violations-marker.pcap", 1),
    ("dcp.stream_id == 7", "clean-replication.pcap", 1),
    ("dcp.opcode == 0x56 && dcp.snapshot.flags.disk == 1", "clean-replication.pcap", 2),
    ("dcp.snapshot.flags.disk == 0", "clean-replication.pcap", 3),   # every bit has an item
    ("dcp.snapshot.flags.disk", "clean-replication.pcap", 5),        # (present in every marker)
    ("dcp.by_seqno == 3", "clean-replication.pcap", 4),         # items of four streams
    ('dcp.snapshot.layout == "V2.2"', "clean-replication.pcap", 1),
])
def test_documented_display_filters(flt, sample, count):
    proc = subprocess.run(["tshark", "-r", str(SAMPLES / sample), *BASE_OPTS, "-Y", flt, "-T", "fields",
                           "-e", "frame.number"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split()) == count


def _mutate_keep_framing(rng: random.Random, data: bytes) -> bytes:
    """Change anything but the body length; the magic stays legal (same PDU boundaries)."""
    b = bytearray(data)
    b[0] = rng.choice((0x80, 0x81, 0x08, 0x18, 0x82, 0x83, b[0], b[0], b[0]))
    for _ in range(rng.randint(1, 3)):
        pos = rng.choice((1, 2, 3, 4, 4, 5, 6, 7, 12, 16) + tuple(range(24, len(b))))
        b[pos] = rng.choice((0, 1, 2, 3, 0x10, 0x14, 0x23, 0x30, 0xFF, rng.randrange(256)))
    return bytes(b)


@pytest.mark.slow
@pytest.mark.tshark
def test_mutated_messages_agree_with_python(tmp_path):
    """Differential test: messages mutated everywhere but in their length decode to the same
    fields and the same findings in Lua and in Python."""
    rng = random.Random(7)
    pdus = _sample_pdus()
    convs = []
    for k in range(400):
        conv = ns.TcpConversation(ns.Endpoint("10.2.0.2", 30000 + k), ns.Endpoint("10.2.0.1", 11210),
                                  start_ns=1_700_000_000_000_000_000 + k * 7)
        frames = [_mutate_keep_framing(rng, rng.choice(pdus)) for _ in range(rng.randint(1, 5))]
        conv.send("s2c", b"".join(frames))
        conv.close()
        convs.append(conv.packets())
    path = tmp_path / "mutated.pcap"
    ns.write_pcap(str(path), convs)
    lua, garbage, lua_err, stderr = lua_pdus(path)
    assert lua_err == 0 and not lua_errors(stderr) and not garbage, stderr
    problems, compared = [], 0
    for frame, msgs in sorted(py_pdus(path).items()):
        got = lua.get(frame, [])
        assert len(got) == len(msgs), f"frame {frame}: lua {len(got)} PDUs, python {len(msgs)}"
        for m, p in zip(msgs, got):
            problems += [f"frame {frame} {m!r}: {d}" for d in compare(m, p)]
            compared += 1
    problems += compare_findings(path, lua)
    assert not problems, "\n".join(problems[:20])
    assert compared > 900


@pytest.mark.tshark
def test_garbage_is_shown_and_marked():
    _, garbage, _, _ = lua_pdus(SAMPLES / "violations-garbage.pcap")
    names = {name for chunks in garbage.values() for p in chunks for name, _ in p.experts}
    assert {"dcp.expert.unknown_magic", "dcp.expert.frame_too_large"} <= names
    assert all("dcp.garbage" in p.fields for chunks in garbage.values() for p in chunks)


def test_cli_generate_and_install(tmp_path, monkeypatch, capsys):
    import argparse

    from dcpdissect.luagen import register_cli
    parser = argparse.ArgumentParser(prog="dcpdissect")
    register_cli(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "x.lua"
    args = parser.parse_args(["lua", "generate", "-o", str(out)])
    assert args.func(args) == 0 and out.read_text() == render()
    args = parser.parse_args(["lua", "generate"])
    assert args.func(args) == 0 and capsys.readouterr().out == render()
    monkeypatch.setenv("HOME", str(tmp_path))
    args = parser.parse_args(["lua", "install"])
    assert args.func(args) == 0
    assert str(tmp_path / ".local/lib/wireshark/plugins/dcpdissect.lua") in capsys.readouterr().out
