"""`--redact` leaks no document, checked against an oracle that owes nothing to the
redaction code: Wireshark's built-in Couchbase dissector (tshark, PDML) lists the keys,
values and xattrs of every message of the ORIGINAL capture whose opcode the protocol tables
mark as a document; then no one of those byte strings appears in any output of `--redact`:
the evidence capture, report.md, frames.tsv, README.txt and the stdout of every format of
`dissect` and `analyze`. Over every sample that carries documents and over fuzzed captures
(segmented, reordered, duplicated, overlapped and truncated streams of the samples' PDUs;
bit-flipped, truncated and spliced samples).

Rules of the comparison:
- a secret is a key, logical key (after the collection prefix), value, xattr key or xattr
  value of length >= 4 (shorter strings match by chance), not made of one repeated byte
  (the placeholder ``x``, or the zero padding of any binary header);
- an occurrence inside a longer word does not count (identifier characters right before
  and right after it: the xattr ``_sync`` in the control ``enable_sync_writes``);
- every message is a document except those of the opcodes listed in ``CLEAR`` below (the
  DCP control plane and the connection set-up, written here from opcode.h, not taken from
  the tables): Get, Set, GetEx, SaslAuth, ... are documents too; a string that tshark also
  lists in a clear message (a collection name in a system event) is not counted;
- text outputs are searched for the secret's bytes and its text in every JSON string
  (escapes decoded); hexdumps (which show a PDU's first bytes) for any 4 printable bytes in
  a row of a secret (4 binary bytes match headers and extras by chance).
"""

import gzip
import io
import json
import random
import re
import subprocess
import xml.etree.ElementTree as ET
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from dcpdissect.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
pytestmark = pytest.mark.tshark
PORTS = (11210, 11209, 12000)
# Seeds of the fuzzer's stream generator whose capture carries documents of 4 bytes or more
# that tshark decodes (most seeds carry fewer: short keys, empty values).
FUZZ_CAPTURES = 7
# Opcodes whose key and value are not customer data (include/mcbp/protocol/opcode.h):
# Quit, Noop, Version, Hello, SaslListMechs, SelectBucket, GetClusterConfig, GetErrorMap,
# and the DCP messages other than the document ones (DcpOpen ... DcpOsoSnapshot,
# DcpCacheTransferEnd, GetFailoverLog).
CLEAR = frozenset({0x07, 0x0A, 0x0B, 0x1F, 0x20, 0x89, 0xB5, 0xFE, 0x50, 0x51, 0x52, 0x53,
                   0x54, 0x55, 0x56, 0x5A, 0x5B, 0x5C, 0x5D, 0x5E, 0x5F, 0x61, 0x64, 0x65,
                   0x67, 0x96})
SECRET_FIELDS = ("couchbase.key", "couchbase.key.logical_key", "couchbase.value",
                 "couchbase.xattrs.pair.key", "couchbase.xattrs.pair.value")


def tshark_documents(capture: Path) -> set[bytes]:
    """Keys, values and xattrs of document messages, as tshark's built-in dissector
    decodes the capture (PDML carries each field's raw bytes in hex)."""
    cmd = ["tshark", "-r", str(capture), "-o", "tcp.reassemble_out_of_order:TRUE", "-T", "pdml"]
    for p in PORTS:
        cmd += ["-d", f"tcp.port=={p},couchbase"]
    res = subprocess.run(cmd, capture_output=True, timeout=300)
    assert res.returncode in (0, 2), res.stderr      # 2: a truncated capture, read up to there
    secret, shared = set(), set()
    for proto in ET.fromstring(res.stdout or b"<pdml/>").iter("proto"):
        if proto.get("name") != "couchbase":
            continue
        fields = {}
        for f in proto.iter("field"):
            fields.setdefault(f.get("name"), []).append(f)
        magic = int(fields["couchbase.magic"][0].get("show"), 0) if "couchbase.magic" in fields \
            else None
        opcode = fields.get("couchbase.opcode")
        document = (opcode is not None and magic in (0x80, 0x81, 0x08, 0x18)
                    and int(opcode[0].get("show"), 0) not in CLEAR)
        for name in SECRET_FIELDS:
            for f in fields.get(name, ()):
                raw = bytes.fromhex(f.get("value") or "")
                (secret if document else shared).add(raw)
    return {s for s in secret - shared if len(s) >= 4 and len(set(s)) > 1}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def standalone(secret: bytes, data: bytes) -> bool:
    """Whether ``secret`` occurs in ``data`` other than inside a longer word."""
    at = data.find(secret)
    while at >= 0:
        before = data[at - 1] if at else None
        after = data[at + len(secret)] if at + len(secret) < len(data) else None
        if not (before in _WORD and after in _WORD):
            return True
        at = data.find(secret, at + 1)
    return False


def leaks(secrets: set[bytes], name: str, data: bytes) -> list[str]:
    """Where secrets appear in one output."""
    found = [f"{name}: {s!r}" for s in secrets if standalone(s, data)]
    if name.endswith(".pcap") or name.endswith(".pcapng"):
        return found
    text = data.decode("utf-8", "replace")
    strings = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                strings += list(_strings(json.loads(line)))
            except ValueError:
                pass
    dumps = hexdumps(text)
    for s in secrets:
        t = s.decode("utf-8", "replace")
        if any(standalone(t.encode(), x.encode()) for x in strings):
            found.append(f"{name} (JSON string): {s!r}")
        # (a window with an x could be made of the redaction's x placeholders after a
        # clear byte: not evidence)
        windows = {w for w in (s[i:i + 4] for i in range(len(s) - 3))
                   if b"x" not in w and all(0x20 <= c < 0x7F for c in w)}
        if any(w in dump for w in windows for dump in dumps):
            found.append(f"{name} (hexdump): {s!r}")
    return found


_DUMP_LINE = re.compile(r"^([0-9a-f]{4})  ((?:[0-9a-f]{2} )*[0-9a-f]{2})", re.M)


def hexdumps(text: str) -> list[bytes]:
    """The bytes each hexdump of a report shows (a dump shows the first bytes of a PDU only,
    so a secret may show in part: every 4 bytes in a row of it are searched)."""
    dumps: list[bytearray] = []
    for m in _DUMP_LINE.finditer(text):
        if m[1] == "0000":
            dumps.append(bytearray())
        if dumps:
            dumps[-1] += bytes.fromhex(m[2])
    return [bytes(d) for d in dumps]


def run(*argv) -> tuple[int, bytes]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main([str(a) for a in argv])
    return code, out.getvalue().encode()


def redacted_outputs(capture: Path, work: Path) -> dict[str, bytes]:
    """Every output of --redact for one capture, by name."""
    outputs = {}
    ports = [a for p in (12000,) for a in ("--port", p)]
    for fmt in ("table", "jsonl"):
        code, outputs[f"dissect --format {fmt}"] = run("dissect", capture, "--format", fmt,
                                                       "--redact", *ports)
        assert code in (0, 2)
    for fmt in ("table", "jsonl", "markdown", "html"):
        code, outputs[f"analyze --format {fmt}"] = run("analyze", capture, "--format", fmt,
                                                       "--redact", "--fail-on", "never", *ports)
        assert code in (0, 2)
    bundle = work / "bundle"
    code, outputs["analyze --evidence"] = run("analyze", capture, "--evidence", bundle,
                                              "--redact", "--format", "markdown",
                                              "--fail-on", "never", *ports)
    assert code in (0, 2)
    for p in bundle.iterdir():
        if p.name != "dcpdissect.lua":
            outputs[p.name] = p.read_bytes()
    return outputs


def _samples_with_documents() -> list[str]:
    """Samples with at least one message of a non-clear opcode carrying 4 bytes or more
    beyond its extras (by the header of each PDU dcpdissect frames; which bytes are secret
    is tshark's to say)."""
    from dcpdissect.reassembly.pdus import CaptureError, Pdu, iter_events
    names = []
    for p in sorted(SAMPLES.iterdir()):
        if p.is_file() and p.suffix in (".pcap", ".pcapng", ".gz"):
            try:
                if any(type(ev) is Pdu and ev.data[1] not in CLEAR
                       and int.from_bytes(ev.data[8:12], "big") - ev.data[4] >= 4
                       for ev in iter_events(str(p))):
                    names.append(p.name)
            except CaptureError:
                names.append(p.name)
    return names


@pytest.mark.slow
@pytest.mark.parametrize("name", _samples_with_documents())
def test_no_document_byte_in_any_redacted_output_of_a_sample(tmp_path, name):
    capture = SAMPLES / name
    if name.endswith(".gz"):                   # tshark reads it too, but keep the oracle plain
        capture = tmp_path / name[:-3]
        capture.write_bytes(gzip.decompress((SAMPLES / name).read_bytes()))
    secrets = tshark_documents(capture)
    assert secrets, f"tshark lists no document of 4 bytes or more in {name}"
    outputs = redacted_outputs(capture, tmp_path)
    found = [hit for k, v in outputs.items() for hit in leaks(secrets, k, v)]
    assert not found, found[:10]


def test_the_oracle_sees_documents_and_the_unredacted_outputs_show_them(tmp_path):
    """The control: without --redact the same checks find the documents (so the test
    above can fail)."""
    capture = SAMPLES / "resume-collapsed.pcap"
    secrets = tshark_documents(capture)
    assert {b'{"seq":2,"pad":"xxxxxxxxxxxxxxxx"}'} <= secrets or any(b'"seq"' in s for s in secrets)
    run("analyze", capture, "--evidence", tmp_path / "plain", "--fail-on", "never")
    blob = (tmp_path / "plain" / "evidence.pcapng").read_bytes()
    assert leaks(secrets, "evidence.pcapng", blob)
    _, md = run("analyze", SAMPLES / "stream-markers.pcap", "--format", "markdown")
    assert leaks(tshark_documents(SAMPLES / "stream-markers.pcap"), "markdown", md)
    _, rows = run("dissect", SAMPLES / "legal-server-behaviour.pcap", "--format", "jsonl")
    assert leaks(tshark_documents(SAMPLES / "legal-server-behaviour.pcap"), "jsonl", rows)


@pytest.mark.slow
def test_no_document_byte_in_redacted_outputs_of_fuzzed_captures(tmp_path):
    """The fuzzer's first FUZZ_CAPTURES captures (seeds from 1) in which tshark decodes
    documents (the draws follow the seed PDUs, which follow the samples)."""
    from dcpdissect.fuzz.gen import stream_capture
    tested = 0
    for seed in range(1, 60):
        capture = tmp_path / f"fuzz-{seed}.pcap"
        capture.write_bytes(stream_capture(random.Random(seed)))
        secrets = tshark_documents(capture)
        if not secrets:
            continue
        outputs = redacted_outputs(capture, tmp_path / str(seed))
        found = [hit for k, v in outputs.items() for hit in leaks(secrets, k, v)]
        assert not found, (seed, found[:10])
        tested += 1
        if tested == FUZZ_CAPTURES:
            break
    assert tested == FUZZ_CAPTURES


@pytest.mark.slow
@pytest.mark.parametrize("name", ["clean-replication.pcap", "stream-markers.pcap",
                                  "resume-collapsed.pcap"])
@pytest.mark.parametrize("seed", (1, 2, 3))
def test_no_document_byte_in_redacted_outputs_of_mutated_samples(tmp_path, name, seed):
    """Bit flips, truncations, duplicated or removed blocks, splices of the samples."""
    from dcpdissect.fuzz.gen import mutate_file
    capture = tmp_path / f"mutated-{seed}-{name}"
    capture.write_bytes(mutate_file(random.Random(seed), (SAMPLES / name).read_bytes()))
    secrets = tshark_documents(capture)
    assert secrets, f"{name} seed {seed}: tshark decodes no document"
    outputs = redacted_outputs(capture, tmp_path)
    found = [hit for k, v in outputs.items() for hit in leaks(secrets, k, v)]
    assert not found, found[:10]


# --- the must-show: reproduced exactly, nothing leaked (tests/redaction_sweep.py) ----------
# The full sweep (every sample and 2 x N fuzzed captures) is `python tests/redaction_sweep.py
# --fuzz N`; the suite checks the samples whose evidence is hardest to keep (short keys and
# sync writes, relayed values, TLS recognised by its bytes) and three fuzzed captures.

@pytest.mark.slow
@pytest.mark.parametrize("name", ["durability-violations.pcap", "replica-node-violations.pcap",
                                  "ports-heuristic.pcap"])
def test_redacted_bundle_reproduces_its_findings_and_leaks_nothing(tmp_path, name):
    """redaction_sweep.check: the --redact bundle (one .zip) gives exactly the unredacted
    bundle's findings and says so; no key or value tshark decodes in the original is in any
    output (4 bytes or more: anywhere; shorter: kept at its message, in tshark's decoding of
    the bundle's capture and in dissect's jsonl keys)."""
    from redaction_sweep import check
    got = check(SAMPLES / name, tmp_path)
    assert got.findings and got.reproduced and not got.named
    assert not got.leaks, got.leaks[:10]
    assert got.short > 0 and got.skipped_frames == 0


@pytest.mark.slow
def test_redacted_bundles_of_fuzzed_captures_reproduce_and_leak_nothing(tmp_path):
    """The same check on the fuzzer's first three stream captures with findings."""
    from dcpdissect.fuzz.gen import stream_capture
    from redaction_sweep import check
    tested = 0
    for seed in range(1, 40):
        capture = tmp_path / f"fuzz-{seed}.pcap"
        capture.write_bytes(stream_capture(random.Random(seed)))
        got = check(capture, tmp_path / str(seed))
        assert got.reproduced and not got.leaks, (seed, got)
        tested += got.findings > 0
        if tested == 3:
            break
    assert tested == 3


def test_the_short_check_finds_what_an_unredacted_bundle_keeps(tmp_path):
    """The control of the short check: without --redact the bundle keeps them."""
    from redaction_sweep import _frame_map, short_kept, tshark_messages
    capture = SAMPLES / "durability-violations.pcap"
    run("analyze", capture, "--evidence", tmp_path, "--fail-on", "never")
    checked, kept, skipped = short_kept(tshark_messages(capture),
                                        tshark_messages(tmp_path / "evidence.pcapng"),
                                        _frame_map((tmp_path / "frames.tsv").read_text()))
    assert checked > 20 and len(kept) == checked and skipped == 0


def test_a_pseudonym_found_in_the_document_by_chance_is_kept_in_the_message():
    """durability-violations, frame 108: a prepare of key 'h' whose value holds most
    letters. Whatever one-letter pseudonym 'h' gets, the finding's message names it (as the
    messages table does), never the x's that quoted bytes of the document get; with this
    secret the pseudonym's letter occurs in the value."""
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.reports.redact import Pseudonyms, redact_finding

    findings, _ = analyze_file(str(Path(__file__).parent.parent / "samples"
                                   / "durability-violations.pcap"))
    [f] = [f for f in findings if f.frame == 108 and f.rule == "sync-prepare-while-pending"]
    assert f.message.startswith("prepare of 'h' ")
    for secret in (b"k" * 32, b"\x01" * 32, b"secret-of-this-test-0123456789ab"):
        pseudonyms = Pseudonyms(secret)
        stand_in = pseudonyms(b"h").decode()
        assert stand_in != "h"
        assert redact_finding(f, pseudonyms).message.startswith(f"prepare of '{stand_in}' ")
    assert Pseudonyms(b"k" * 32)(b"h") in f.pdu[f.pdu.index(b"{"):]     # the case is met


def test_a_relay_difference_names_stand_ins_not_the_keys_hex_or_an_unkeyed_hash():
    """relay-message-differs describes a key by its hex and a value by its length and an
    unkeyed hash; redacted, a key's hex is its pseudonym's hex and the hash is keyed, so
    the difference stays a difference and equal sides stay equal."""
    from dcpdissect.analysis.findings import Finding
    from dcpdissect.reports.redact import Pseudonyms, redact_finding

    pseudonyms = Pseudonyms(b"relay-test-secret")
    f = Finding("relay-message-differs", "DcpMutation relayed by ns_server differs", 9,
                fields={"key": "'6b6579' → '6b6578'",
                        "value": "'34 bytes 86f6c84bb9685de3' → '34 bytes 86f6c84bb9685de3'"})
    got = redact_finding(f, pseudonyms).fields
    a, b = re.fullmatch(r"'([0-9a-f]{6})' → '([0-9a-f]{6})'", got["key"]).groups()
    assert {a, b}.isdisjoint({"6b6579", "6b6578"}) and a != b
    assert bytes.fromhex(a) == pseudonyms(b"key") and bytes.fromhex(b) == pseudonyms(b"kex")
    c, d = re.fullmatch(r"'34 bytes ([0-9a-f]{16})' → '34 bytes ([0-9a-f]{16})'",
                        got["value"]).groups()
    assert c == d != "86f6c84bb9685de3"
    assert "86f6c84bb9685de3" not in str(redact_finding(f).fields)      # x's without a key


def test_text_that_reads_as_a_leb128_number_is_not_kept_as_a_collection_id():
    """"éclair" starts 0xc3 0xa9 'c': a leb128 number too, but its stop byte is text. Only a
    prefix ending in a control byte (collection ids below 32, below 4096 in two bytes, ...)
    is kept; the rest of such a key gets a pseudonym whole."""
    from dcpdissect.reports.redact import Pseudonyms

    pseudonyms = Pseudonyms(b"collection-prefix-test")
    for key in ("éclair".encode(), "été".encode(), b"\xff\xfe\x41rest"):
        got = pseudonyms(key)
        assert len(got) == len(key) and got[:2] != key[:2], (key, got)
    for prefix in (b"\x08", b"\x88\x01", b"\xff\x1f"):         # ids 8, 136, 4095
        got = pseudonyms(prefix + b"doc-1")
        assert got.startswith(prefix) and got[len(prefix):] != b"doc-1"
    assert pseudonyms(b"\x88\x01") == b"\x88\x01"       # a collection id alone names no document
