"""Markdown reports, evidence bundles (checked with real tshark) and redaction."""

import dataclasses
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dcpdissect.analysis.findings import Finding
from dcpdissect.analysis.rules import RULES
from dcpdissect.analysis.run import analyze_file
from dcpdissect.capture.readers import open_capture
from dcpdissect.codec import decode
from dcpdissect.reassembly.pdus import Pdu, Summary, iter_events
from dcpdissect.protocol import DOCUMENT_OPCODES
from dcpdissect.reports.evidence import write_evidence
from dcpdissect.reports.redact import Pseudonyms, redact_pdu
from dcpdissect.reports.markdown import frame_filter, hexdump, markdown_report
from test_redaction import leaks, tshark_documents

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def analyzed(name):
    return analyze_file(str(SAMPLES / name))


def tshark_fields(pcap: Path, frames, *fields, ports=(11209, 11210)) -> list[list[str]]:
    cmd = ["tshark", "-r", str(pcap), "-o", "tcp.reassemble_out_of_order:TRUE",
           "-o", "tcp.analyze_sequence_numbers:FALSE"]
    for p in ports:
        cmd += ["-d", f"tcp.port=={p},couchbase"]
    cmd += ["-Y", frame_filter(frames), "-T", "fields", "-e", "frame.number"]
    for f in fields:
        cmd += ["-e", f]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [line.split("\t") for line in res.stdout.splitlines()]


def tshark_secrets(name: str, tmp_path: Path) -> set[bytes]:
    """The keys, values and xattrs of a sample's documents as tshark's built-in dissector
    decodes them (test_redaction's oracle; a .gz sample decompressed first)."""
    path = SAMPLES / name
    if name.endswith(".gz"):
        path = tmp_path / name[:-3]
        path.write_bytes(gzip.decompress((SAMPLES / name).read_bytes()))
    secrets = tshark_documents(path)
    assert secrets, f"tshark lists no document of 4 bytes or more in {name}"
    assert leaks(secrets, path.name, path.read_bytes()), "the unredacted capture shows them"
    return secrets


def frame_bytes(pcap: Path) -> list[bytes]:
    with open_capture(str(pcap)) as reader:
        return [fr.data for fr in reader]


# --- markdown ------------------------------------------------------------------------------

def test_hexdump_and_filter():
    dump = hexdump(bytes(range(100)))
    assert dump.splitlines()[0].startswith("0000  00 01 02 03")
    assert len(dump.splitlines()) == 5 and "36 more bytes (100 in total)" in dump
    assert frame_filter([5, 3, 5]) == "frame.number in {3, 5}"


def test_markdown_report_sections():
    findings, summary = analyzed("violations-marker.pcap")
    md = markdown_report(str(SAMPLES / "violations-marker.pcap"), findings, summary)
    for heading in ("## Capture", "## Summary by rule", "## key-presence", "## marker-version"):
        assert heading in md
    assert re.search(r"\| SHA-256 \| `[0-9a-f]{64}` \|", md)
    assert f"| frames | {summary.frames} |" in md and f"| messages | {summary.pdus} |" in md
    for f in findings:
        assert f"frame.number in {{{', '.join(map(str, sorted(set(f.frames) | {f.frame})))}}}" in md
        assert RULES[f.rule].rationale in md
        assert hexdump(f.pdu).splitlines()[0] in md
    assert "| `version` | 1 |" in md                    # decoded fields


def test_markdown_report_frame_map_and_no_findings():
    findings, summary = analyzed("violations-structure.pcap")
    f = next(x for x in findings if x.rule == "header-invariant")
    md = markdown_report("x.pcap", [f], summary, frame_map={f.frame: 7})
    assert f"7 (original frame {f.frame})" in md and "frame.number in {7}" in md
    _, clean = analyzed("seed-marker-v1.pcap")
    assert "No findings." in markdown_report(str(SAMPLES / "seed-marker-v1.pcap"), [], clean)


# --- evidence ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def marker_bundle(tmp_path_factory):
    findings, summary = analyzed("violations-marker.pcap")
    out = write_evidence(str(SAMPLES / "violations-marker.pcap"), findings, summary,
                         tmp_path_factory.mktemp("ev"))
    return findings, out


def _frame_map(out: Path) -> dict[int, int]:
    """Original frame -> evidence frame, from the bundle's frames.tsv."""
    rows = (out / "frames.tsv").read_text().splitlines()
    assert rows[0] == "evidence_frame\toriginal_frame\tcut_bytes"
    return {int(o): int(n) for n, o, _ in (r.split("\t") for r in rows[1:])}


def _cuts(out: Path) -> dict[int, int]:
    rows = (out / "frames.tsv").read_text().splitlines()[1:]
    return {int(o): int(c) for _, o, c in (r.split("\t") for r in rows) if c != "0"}


def test_evidence_bundle_files_and_frame_map(marker_bundle):
    findings, out = marker_bundle
    assert {p.name for p in out.iterdir()} == {"evidence.pcapng", "report.md", "README.txt",
                                               "frames.tsv", "dcpdissect.lua"}
    original = frame_bytes(SAMPLES / "violations-marker.pcap")
    kept = frame_bytes(out / "evidence.pcapng")
    fmap = _frame_map(out)
    assert sorted(fmap.values()) == list(range(1, len(kept) + 1))
    assert sorted(fmap) == sorted(fmap, key=fmap.get)      # original order kept
    for old, new in fmap.items():
        assert kept[new - 1] == original[old - 1]          # unchanged without redaction
    assert len(kept) < len(original)
    md = (out / "report.md").read_text()
    for f in findings:
        assert f"{fmap[f.frame]} (original frame {f.frame})" in md
        assert f"frame.number in {{{fmap[f.frame]}}}" in md
    readme = (out / "README.txt").read_text()
    assert "tshark -r evidence.pcapng -X lua_script:dcpdissect.lua -o dcp.tcp_ports:" in readme
    assert "frame.number in {" in readme and "Redaction: none" in readme and "kept whole" in readme


def test_evidence_keeps_the_context(marker_bundle):
    findings, out = marker_bundle
    fmap = _frame_map(out)
    assert {1, 2, 3} <= set(fmap)                          # the SYN handshake
    msgs = [(ev.data[0], ev.data[1], decode(ev.data)) for ev in iter_events(str(out / "evidence.pcapng"))
            if type(ev) is Pdu]
    assert {(m, op) for m, op, _ in msgs} >= {(0x80, 0x50), (0x81, 0x50)}
    for f in findings:
        assert any(op == 0x53 and m == 0x80 and d.vbucket == f.vbucket for m, op, d in msgs)
        assert any(op == 0x53 and m == 0x81 and d.opaque == f.opaque for m, op, d in msgs)


def test_garbage_bundle_keeps_the_skipped_bytes(tmp_path):
    from dcpdissect.samples.scenarios_violations import GARBAGE, HUGE
    findings, summary = analyzed("violations-garbage.pcap")
    out = write_evidence(str(SAMPLES / "violations-garbage.pcap"), findings, summary, tmp_path)
    blob = (out / "evidence.pcapng").read_bytes()
    assert GARBAGE in blob and HUGE in blob
    fmap = _frame_map(out)
    for f in findings:
        if f.rule in ("unknown-magic", "frame-too-large", "resync-after-garbage"):
            assert f.frame in fmap


def test_evidence_timestamps_and_linktype_kept(marker_bundle):
    _, out = marker_bundle
    with open_capture(str(SAMPLES / "violations-marker.pcap")) as r:
        orig = {fr.data: fr for fr in r}
    with open_capture(str(out / "evidence.pcapng")) as r:
        for fr in r:
            assert fr.ts_ns == orig[fr.data].ts_ns and fr.linktype == orig[fr.data].linktype
            assert fr.wirelen == orig[fr.data].wirelen


@pytest.mark.tshark
def test_evidence_decodes_in_tshark(marker_bundle):
    findings, out = marker_bundle
    fmap = _frame_map(out)
    frames = sorted(fmap[f.frame] for f in findings)
    rows = tshark_fields(out / "evidence.pcapng", frames, "couchbase.opcode", "couchbase.vbucket")
    assert [int(r[0]) for r in rows] == frames
    for row, f in zip(rows, sorted(findings, key=lambda f: f.frame)):
        assert "0x56" in row[1].split(",")                 # the offending marker is decoded
        assert str(f.vbucket) in row[2].split(",")
    handshake = tshark_fields(out / "evidence.pcapng", [1, 2, 3], "tcp.flags.syn")
    assert [r[1] for r in handshake[:2]] == ["1", "1"]


@pytest.mark.tshark
@pytest.mark.parametrize("name,opcode", [("violations-add-stream.pcap", "0x51"),
                                         ("violations-stream-request.pcap", "0x53"),
                                         ("violations-structure.pcap", "0x57")])
def test_other_bundles_decode_in_tshark(tmp_path, name, opcode):
    findings, summary = analyzed(name)
    out = write_evidence(str(SAMPLES / name), findings, summary, tmp_path)
    fmap = _frame_map(out)
    frames = sorted({fmap[f.frame] for f in findings})
    rows = tshark_fields(out / "evidence.pcapng", frames, "couchbase.opcode")
    assert any(opcode in r[1].split(",") for r in rows)
    assert len(rows) == len(frames)


def _findings_on_data_pdus(name):
    """One finding per data message of a clean sample (to bundle every document)."""
    out = []
    for ev in iter_events(str(SAMPLES / name)):
        if type(ev) is Pdu and ev.data[1] in DOCUMENT_OPCODES:
            out.append(Finding("lost-pdu", "test", ev.frame, ev.frames, ev.ts_ns, ev.conn,
                               pdu=ev.data))
    return out


@pytest.mark.tshark
@pytest.mark.parametrize("name", ["clean-replication.pcap", "tcp-seq-wrap.pcap", "ipv6.pcap",
                                  "pcapng-multi-interface.pcapng", "vlan-qinq.pcap"])
def test_redaction_is_byte_exact(tmp_path, name):
    """Every document message bundled: no document byte tshark decodes is left, and the
    rest of each message is kept byte for byte."""
    path = str(SAMPLES / name)
    findings = _findings_on_data_pdus(name)
    summary = Summary(frames=sum(1 for _ in open_capture(path)))
    out = write_evidence(path, findings, summary, tmp_path / "bundle", redact=True)
    pcap = next(p for p in out.iterdir() if p.name.startswith("evidence."))
    blob = pcap.read_bytes()
    originals = [f.pdu for f in findings]
    assert any(len(p) > 1448 for p in originals)           # a document split across segments
    secrets = tshark_secrets(name, tmp_path)
    assert leaks(secrets, pcap.name, blob) == []
    assert b'"seq"' not in blob
    # headers, lengths, extras and seqnos unchanged: decode the redacted capture; the key and
    # the value of each message are same-length stand-ins (equal ones equal, distinct ones
    # distinct)
    got = [ev.data for ev in iter_events(str(pcap))
           if type(ev) is Pdu and ev.data[1] in DOCUMENT_OPCODES]
    want = {}               # a message's bytes before its key -> the originals' (key, value)
    for raw in originals:
        m = decode(raw)
        want.setdefault(raw[:m.key_range[0]], set()).add((m.key, bytes(m.value)))
    keys, values = {}, {}
    for data in got:
        m = decode(data)
        was = want[data[:m.key_range[0]]]       # the bytes before the key are kept
        assert m.problems == [] and len(data) == len(data[:m.key_range[0]]) + len(m.key) \
            + len(m.value)
        assert all(len(k) == len(m.key) and len(v) == len(m.value) for k, v in was)
        assert m.key not in {k for k, _ in was}
        assert not m.value or bytes(m.value) not in {v for _, v in was}
        if len(was) == 1:
            [(key, value)] = was
            assert keys.setdefault(key, m.key) == m.key
            assert values.setdefault(value, bytes(m.value)) == bytes(m.value)
    assert {d[:decode(d).key_range[0]] for d in got} == set(want)
    assert len(set(keys.values())) == len(keys) > 1
    assert len(set(values.values())) == len(values) > 1
    by_seq = {decode(p).fields["by_seqno"] for p in originals}
    assert {decode(d).fields["by_seqno"] for d in got} == by_seq
    report = (out / "report.md").read_text()
    assert "Redaction applied" in report and "applied" in (out / "README.txt").read_text()
    assert leaks(secrets, "report.md", report.encode()) == []


def test_redact_pdu_keeps_header_and_extras():
    for ev in iter_events(str(SAMPLES / "clean-replication.pcap")):
        if type(ev) is Pdu and ev.data[1] == 0x57:
            r = redact_pdu(ev.data)
            m, o = decode(r), decode(ev.data)
            assert r[:24 + o.extlen + o.framing_len] == ev.data[:24 + o.extlen + o.framing_len]
            assert m.fields == o.fields and len(r) == len(ev.data)
            assert m.key == b"x" * len(o.key) and bytes(m.value) == b"x" * len(o.value)
        elif type(ev) is Pdu and ev.data[1] not in DOCUMENT_OPCODES:
            assert redact_pdu(ev.data) == ev.data


@pytest.mark.tshark
def test_multi_linktype_bundle_is_pcapng(tmp_path):
    name = "pcapng-multi-interface.pcapng"
    findings = _findings_on_data_pdus(name)
    out = write_evidence(str(SAMPLES / name), findings, Summary(), tmp_path)
    assert (out / "evidence.pcapng").is_file()
    with open_capture(str(out / "evidence.pcapng")) as r:
        assert len({fr.linktype for fr in r}) > 1
    res = subprocess.run(["tshark", "-r", str(out / "evidence.pcapng"), "-d",
                          "tcp.port==11209,couchbase", "-T", "fields", "-e", "couchbase.opcode"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "0x57" in res.stdout


# --- CLI -----------------------------------------------------------------------------------

def cli(*args):
    return subprocess.run([sys.executable, "-m", "dcpdissect.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_cli_markdown_and_jsonl():
    res = cli("analyze", "samples/violations-marker.pcap", "--format", "markdown")
    assert res.returncode == 1 and "## Summary by rule" in res.stdout
    res = cli("analyze", "samples/violations-marker.pcap", "--format", "jsonl", "--fail-on", "never")
    assert res.returncode == 0
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert "marker-version" in {r["rule"] for r in records}
    assert all(r["frame"] in r["frames"] for r in records)


@pytest.mark.tshark
def test_cli_evidence_redact(tmp_path):
    out = tmp_path / "bundle"
    res = cli("analyze", "samples/violations-marker.pcap", "--evidence", str(out), "--redact",
              "--fail-on", "never")
    assert res.returncode == 0, res.stderr
    assert "Redaction applied" in (out / "report.md").read_text()
    blob = (out / "evidence.pcapng").read_bytes()
    assert b"key-0" not in blob and b'"seq"' not in blob
    findings, _ = analyzed("violations-marker.pcap")
    fmap = _frame_map(out)
    rows = tshark_fields(out / "evidence.pcapng", [fmap[f.frame] for f in findings],
                         "couchbase.opcode")
    assert rows and all("0x57" in r[1] for r in rows)


def test_redaction_scrubs_keys_from_finding_text(tmp_path):
    findings, summary = analyzed("stream-markers.pcap")
    dup = [f for f in findings if f.rule == "data-duplicate-key"]
    assert dup, "stream-markers.pcap lost its data-duplicate-key finding"
    key = decode(dup[0].pdu).key.decode()
    out = write_evidence(str(SAMPLES / "stream-markers.pcap"), findings, summary, tmp_path,
                         redact=True)
    report = (out / "report.md").read_text()
    assert f"'{key}'" not in report
    named = set(re.findall(r"second change of key '([^']*)'", report))
    assert named and all(len(k) == len(key) and k != key for k in named)
    # (a two-byte key occurs by chance among other keys' and values' stand-ins: the message
    # that carried it carries another)
    frame = _frame_map(out)[dup[0].frame]
    kept = [decode(ev.data).key for ev in iter_events(str(out / "evidence.pcapng"))
            if type(ev) is Pdu and ev.frame == frame and ev.data[1] in DOCUMENT_OPCODES]
    assert kept and key.encode() not in kept


@pytest.mark.parametrize("name", ["tcp-mid-stream.pcap", "tcp-loss-header.pcap", "tcp-loss.pcap"])
def test_redaction_covers_bytes_outside_decoded_messages(tmp_path, name):
    from dcpdissect.capture.packets import decode_packet
    from dcpdissect.reassembly.pdus import Resync
    findings, summary = analyzed(name)
    out = write_evidence(str(SAMPLES / name), findings, summary, tmp_path, redact=True)
    assert b'"seq"' not in (out / "evidence.pcapng").read_bytes()
    fmap = _frame_map(out)
    kept = frame_bytes(out / "evidence.pcapng")
    with open_capture(str(SAMPLES / name)) as r:
        linktype = next(iter(r)).linktype
    for ev in iter_events(str(SAMPLES / name)):
        if type(ev) is Resync and ev.reason == "mid_stream" and ev.frame in fmap:
            payload = decode_packet(linktype, kept[fmap[ev.frame] - 1]).payload
            assert payload[:min(ev.skipped, len(payload))] == b"x" * min(ev.skipped, len(payload))


@pytest.mark.tshark
def test_readme_command_runs_verbatim(marker_bundle):
    import shlex
    findings, out = marker_bundle
    line = next(l for l in (out / "README.txt").read_text().splitlines()
                if l.strip().startswith("tshark -r"))
    assert line.strip() in (out / "report.md").read_text()
    res = subprocess.run(shlex.split(line), cwd=out, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Couchbase DCP, DcpSnapshotMarker" in res.stdout           # the bundled plugin
    assert "Opcode: DcpSnapshotMarker (0x56)" in res.stdout
    assert "Malformed" not in res.stdout and "Lua Error" not in res.stdout


@pytest.mark.tshark
def test_kept_stretch_starting_mid_message_is_aligned(tmp_path):
    from dcpdissect.capture.packets import decode_packet
    name = "clean-replication.pcap"
    pdus = [ev for ev in iter_events(str(SAMPLES / name)) if type(ev) is Pdu]
    target = next(p for p in pdus if p.data[1] == 0x57 and any(
        q.offset < p.offset and q.conn == p.conn and q.direction == p.direction
        and p.frames[0] in q.frames and q.frames[0] != p.frames[0] for q in pdus))
    f = Finding("lost-pdu", "test", target.frame, target.frames, target.ts_ns, target.conn,
                pdu=target.data)
    out = write_evidence(str(SAMPLES / name), [f], Summary(), tmp_path, widen=False)
    fmap, cuts = _frame_map(out), _cuts(out)
    first = target.frames[0]
    assert first in cuts and 0 < cuts[first]
    original = frame_bytes(SAMPLES / name)[first - 1]
    kept = frame_bytes(out / "evidence.pcapng")[fmap[first] - 1]
    a, b = decode_packet(1, original), decode_packet(1, kept)
    assert b.payload == a.payload[cuts[first]:] and b.seq == a.seq + cuts[first]
    assert "leading payload bytes" in (out / "README.txt").read_text()
    got = [ev.data for ev in iter_events(str(out / "evidence.pcapng")) if type(ev) is Pdu]
    assert target.data in got
    # tshark 4.0 shows a collection key (leb128 prefix 0x00) as an empty string: its length
    key = decode(target.data).key
    rows = tshark_fields(out / "evidence.pcapng", [fmap[target.frame]], "couchbase.key.length")
    assert str(len(key)) in rows[0][1].split(",")


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.parametrize("name", ["tcp-retransmit.pcap", "tcp-reorder.pcap", "tcp-loss.pcap",
                                  "tcp-mid-stream.pcap", "loopback-ns-be.pcap", "sll2.pcap",
                                  "clean-replication.pcap.gz"])
def test_redaction_of_every_frame_leaks_no_document(tmp_path, name):
    """Every frame kept (retransmissions, reordered and cut segments included)."""
    path = str(SAMPLES / name)
    with open_capture(path) as r:
        every = tuple(fr.number for fr in r)
    findings = [dataclasses.replace(f, context=every) for f in _findings_on_data_pdus(name)]
    out = write_evidence(path, findings, Summary(), tmp_path / "bundle", redact=True)
    pcap = next(p for p in out.iterdir() if p.name.startswith("evidence."))
    assert len(_frame_map(out)) == len(every)
    assert leaks(tshark_secrets(name, tmp_path), pcap.name, pcap.read_bytes()) == []
    assert b'"seq"' not in pcap.read_bytes()


def test_cli_markdown_redact_without_evidence():
    """--redact applies to the report itself: the duplicate-key finding's key and the
    hexdumps of its PDU are scrubbed, and the report says so."""
    plain = cli("analyze", "samples/stream-markers.pcap", "--format", "markdown")
    redacted = cli("analyze", "samples/stream-markers.pcap", "--format", "markdown", "--redact")
    assert "second change of key 'k1'" in plain.stdout and "6b 31 7b 22" in plain.stdout
    assert "Redaction applied" in redacted.stdout and "Redaction applied" not in plain.stdout
    assert "'k1'" not in redacted.stdout
    [stand_in] = set(re.findall(r"second change of key '([A-Za-z0-9_.:-]{2})'", redacted.stdout))
    assert stand_in != "k1"         # a same-length pseudonym
    assert "6b 31 7b 22" not in redacted.stdout and '{"seq"' not in redacted.stdout


def test_key_pseudonyms_are_a_keyed_permutation_that_moves_every_key():
    """Every key of one and two bytes of each character set (and with a collection prefix):
    same length, same set, never itself, never another's (a key that is nothing but a
    collection id is kept); the same secret gives the same pseudonyms in another instance
    (another process), another secret others."""
    import itertools
    safe = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:"

    def kind(logical: bytes) -> int:
        if all(c in safe for c in logical):
            return 0
        if all(0x20 <= c < 0x7F for c in logical):
            return 1
        return 2 if all(c >= 0x80 for c in logical) else 3

    keys = [bytes([c]) for c in range(0x20, 0x100)]
    keys += [bytes(p) for p in itertools.product(b"ab-:@ \x7f\x01\x80\xff", repeat=2)
             if p[0] >= 0x20]
    keys += [b"\x00" + k for k in keys] + [b"\x88\x01" + k for k in keys]
    one, again, other = Pseudonyms(b"s" * 32), Pseudonyms(b"s" * 32), Pseudonyms(b"t" * 32)
    names = [one(k) for k in keys]
    assert len(set(names)) == len(keys)
    for key, name in zip(keys, names):
        # a leb128 collection id (first byte below 0x20 or from 0x80, up to its stop byte,
        # which is a control byte)
        stop = next((i for i, c in enumerate(key) if c < 0x80), None)
        cut = (0 if 0x20 <= key[0] < 0x80 or stop is None or key[stop] >= 0x20
               else stop + 1)
        assert len(name) == len(key) and name[:cut] == key[:cut], key
        if cut == len(key) or key == b"\x7f":
            assert name == key      # a collection id alone names no document; a lone DEL
        else:                       # is the one key of one byte with neither prefix nor text
            assert name != key and kind(name[cut:]) == kind(key[cut:]), key
    assert [again(k) for k in keys] == names and [other(k) for k in keys] != names


def test_value_pseudonyms_keep_what_the_server_validates():
    """JSON values stay JSON, an accepted xattr blob stays accepted with its lengths, a snappy
    value keeps its length varint; equal values equal, distinct distinct, none itself."""
    from dcpdissect.codec.xattr import xattr_problem
    p = Pseudonyms()
    docs = [b'{"a":1}', b'{"a":2}', b"[1,2,3]", b'"s"', b"7", b"8", b"1234567890" * 30]
    stand_ins = [p.value(d, 0x01) for d in docs]
    assert [p.value(d, 0x01) for d in docs] == stand_ins
    assert len(set(stand_ins)) == len(docs)
    for doc, got in zip(docs, stand_ins):
        assert len(got) == len(doc) and got != doc
        json.loads(got)
    blob = (b"\x00\x00\x00\x1f" + b"\x00\x00\x00\x0e_sync\x00{\"r\":1}\x00"
            + b"\x00\x00\x00\x09meta\x00[1]\x00")
    assert xattr_problem(blob) is None
    for datatype in (0x04, 0x05):
        got = p.value(blob + b'{"body":true}', datatype)
        assert xattr_problem(got) is None and got[:8] == blob[:8]      # lengths kept
        assert got[8:9] == b"_" and got[8:13] != b"_sync" and len(got) == len(blob) + 13
        if datatype & 0x01:                 # a JSON body after the blob stays JSON
            json.loads(got[len(blob):])
    snappy = b"\x96\x01" + b"compressed bytes"
    got = p.value(snappy, 0x02)
    assert got[:2] == b"\x96\x01" and got[2:] != snappy[2:] and len(got) == len(snappy)
    assert p.value(b"abc", 0x00) != p.value(b"abd", 0x00)
