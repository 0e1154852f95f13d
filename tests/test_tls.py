"""DCP inside TLS, decrypted with a key log: real OpenSSL sessions (Python's ssl, memory BIOs)
carrying the resume-collapsed sample's conversation, for TLS 1.2 and 1.3 and each AEAD suite;
the analyzer, the Lua plugin under tshark's own decryption and the Spark pipeline must all
see the plaintext sample's messages and findings."""

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from scapy.layers.inet import TCP
from scapy.utils import rdpcap

from dcpdissect.cli import main
from dcpdissect.codec import decode
from dcpdissect.reassembly.pdus import Options, Pdu, TlsProblem, iter_events
from dcpdissect.samples.tls_capture import (TLS12_SUITES, TLS13_SUITES, build, build_with_suite)

ROOT = Path(__file__).resolve().parent.parent
PLAIN = ROOT / "samples" / "resume-collapsed.pcap"
TLS_DIR = ROOT / "samples" / "tls"
SAMPLE, SAMPLE_KEYS = TLS_DIR / "tls13-resume-collapsed.pcap", TLS_DIR / "tls13-resume-collapsed.keylog"
PROBLEMS, PROBLEM_KEYS = TLS_DIR / "tls-problems.pcap", TLS_DIR / "tls-problems.keylog"
LUA = ROOT / "lua" / "dcpdissect.lua"

CASES = [("1.2", s) for s in TLS12_SUITES] + [("1.3", s) for s in TLS13_SUITES]
# what tshark calls the suites (its tls.handshake.ciphersuite values)
SUITE_CODES = {"ECDHE-ECDSA-AES128-GCM-SHA256": 0xC02B, "ECDHE-ECDSA-AES256-GCM-SHA384": 0xC02C,
               "ECDHE-ECDSA-CHACHA20-POLY1305": 0xCCA9, "ECDHE-RSA-AES128-GCM-SHA256": 0xC02F,
               "ECDHE-RSA-AES256-GCM-SHA384": 0xC030, "ECDHE-RSA-CHACHA20-POLY1305": 0xCCA8,
               "TLS_AES_128_GCM_SHA256": 0x1301, "TLS_AES_256_GCM_SHA384": 0x1302,
               "TLS_CHACHA20_POLY1305_SHA256": 0x1303}


def events(path, keylog=None) -> list:
    opts = Options(tls_keylog=Path(keylog).read_text()) if keylog else None
    return list(iter_events(str(path), opts))


def messages(path, keylog=None) -> list[tuple]:
    return [(e.conn, e.direction, e.data) for e in events(path, keylog) if type(e) is Pdu]


def analyze(path, capsys, *extra) -> tuple[int, Counter, str]:
    rc = main(["analyze", str(path), "--format", "jsonl", *extra])
    out, err = capsys.readouterr()
    rules = Counter(r["rule"] for r in map(json.loads, out.splitlines()) if "rule" in r)
    return rc, rules, err


def tshark_opcodes(pcap, keylog) -> list[tuple[int, str]]:
    """(frame, opcode) of every DCP message tshark decodes with its own TLS decryption."""
    out = subprocess.run(["tshark", "-o", f"tls.keylog_file:{keylog}", "-X",
                          f"lua_script:{LUA}", "-r", str(pcap), "-Y", "dcp", "-T", "fields",
                          "-e", "frame.number", "-e", "dcp.opcode"],
                         capture_output=True, text=True, check=True).stdout
    return [(int(f), op) for line in out.splitlines() for f, ops in [line.split("\t")]
            for op in ops.split(",")]


def tshark_suites(pcap) -> set[int]:
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "tls.handshake.type == 2", "-T",
                          "fields", "-e", "tls.handshake.ciphersuite"],
                         capture_output=True, text=True, check=True).stdout
    return {int(x, 16) for x in out.split()}


@pytest.fixture(scope="module")
def plain_rules():
    from dcpdissect.analysis.run import analyze_file
    findings, _ = analyze_file(str(PLAIN))
    return Counter(f.rule for f in findings)


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.parametrize("version,suite", CASES)
def test_openssl_session_decodes_like_the_plaintext(tmp_path, capsys, plain_rules, version, suite):
    pcap, keylog = tmp_path / "tls.pcap", tmp_path / "tls.keylog"
    build_with_suite(str(PLAIN), str(pcap), str(keylog), version, suite)
    assert tshark_suites(pcap) == {SUITE_CODES[suite]}
    assert b"resume-demo" not in pcap.read_bytes()          # the DcpOpen name is encrypted
    want = messages(PLAIN)
    assert len(want) == 16
    assert messages(pcap, keylog) == want
    rc, rules, err = analyze(pcap, capsys, "--tls-keylog", str(keylog))
    assert (rc, rules) == (1, plain_rules) == (1, Counter({"resume-collapsed-snapshot": 1}))
    assert "2 TLS connections opened with the key log" in err
    # Wireshark's own decryption hands the same messages to the Lua plugin
    ours = [(e.frame, f"0x{decode(e.data).opcode:02x}") for e in events(pcap, keylog)
            if type(e) is Pdu]
    assert tshark_opcodes(pcap, keylog) == ours


def test_every_pdu_keeps_the_frames_of_its_records():
    """A message's frames are data segments of its own direction, the last one completing it."""
    pkts = rdpcap(str(SAMPLE))
    data_dir = {i: int(p[TCP].sport == 11207) for i, p in enumerate(pkts, start=1)
                if len(p[TCP].payload)}
    pdus = [e for e in events(SAMPLE, SAMPLE_KEYS) if type(e) is Pdu]
    assert len(pdus) == 16
    for p in pdus:
        assert p.frames and all(data_dir.get(f) == p.direction for f in p.frames), p
        assert p.frame == max(p.frames)


def test_record_spanning_segments_gives_every_frame(tmp_path):
    """Records cut into 40-byte TCP segments: each message carries every frame of the
    records its bytes came from."""
    build(str(PLAIN), str(tmp_path / "t.pcap"), str(tmp_path / "t.keylog"), mss=40)
    pdus = [e for e in events(tmp_path / "t.pcap", tmp_path / "t.keylog") if type(e) is Pdu]
    assert [p.data for p in pdus] == [d for _, _, d in messages(PLAIN)]
    sizes = {i: len(p[TCP].payload) for i, p in enumerate(rdpcap(str(tmp_path / "t.pcap")),
                                                            start=1)}
    for p in pdus:
        # at least its own bytes + the inner content type + the 16-byte tag, 40 per segment
        assert len(p.frames) >= (len(p.data) + 17 + 39) // 40, p
        assert all(sizes[f] for f in p.frames) and p.frame == max(p.frames)


def test_committed_sample_and_key_log():
    got = messages(SAMPLE, SAMPLE_KEYS)
    assert [d for _, _, d in got] == [d for _, _, d in messages(PLAIN)]
    assert "CLIENT_TRAFFIC_SECRET_0" in SAMPLE_KEYS.read_text()


def test_without_key_log_the_connections_are_reported_not_decoded(capsys):
    rc, rules, err = analyze(SAMPLE, capsys)
    # nothing decoded: no result but the error, which names the TLS connections
    assert rules == Counter() and rc == 2
    assert "no MCBP found" in err and "2 TLS connections not decoded" in err
    assert "--tls-keylog" in err


def test_missing_key_gives_tls_no_key_and_no_message(tmp_path, capsys):
    other = tmp_path / "other.keylog"
    other.write_text("CLIENT_RANDOM " + "ab" * 32 + " " + "cd" * 48 + "\n")
    assert messages(SAMPLE, other) == []
    rc, rules, err = analyze(SAMPLE, capsys, "--tls-keylog", str(other))
    assert rules == Counter() and rc == 2           # nothing decoded at all: the error alone
    assert "no MCBP found" in err and "2 TLS connections not decoded" in err


def test_wrong_key_gives_tls_auth_failed_and_no_garbage(tmp_path, capsys):
    wrong = tmp_path / "wrong.keylog"
    lines = [line.rsplit(" ", 1) for line in SAMPLE_KEYS.read_text().splitlines()
             if not line.startswith("#")]
    wrong.write_text("".join(f"{head} {'00' * (len(secret) // 2)}\n" for head, secret in lines))
    assert messages(SAMPLE, wrong) == []
    rc, rules, _ = analyze(SAMPLE, capsys, "--tls-keylog", str(wrong))
    assert rules == Counter({"tls-auth-failed": 4}) and rc == 0      # warnings
    rc, _, _ = analyze(SAMPLE, capsys, "--tls-keylog", str(wrong), "--fail-on", "warning")
    assert rc == 1


def test_altered_record_stops_only_its_direction(tmp_path):
    """One byte of the first connection's last server record flipped: that direction stops
    there, everything before it and the other connection decode as before."""
    pkts = rdpcap(str(SAMPLE))
    last = max(i for i, p in enumerate(pkts) if p[TCP].dport == 50430 and len(p[TCP].payload))
    raw = bytes(pkts[last])
    data = SAMPLE.read_bytes()
    at = data.index(raw) + len(raw) - 1
    bad = tmp_path / "altered.pcap"
    bad.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])
    evs = events(bad, SAMPLE_KEYS)
    problems = [e for e in evs if type(e) is TlsProblem]
    assert [(p.conn, p.rule, p.frame) for p in problems] == [(1, "tls-auth-failed", last + 1)]
    got = [(e.conn, e.direction, e.data) for e in evs if type(e) is Pdu]
    want = messages(PLAIN)
    lost = [m for m in want if m[0] == 1 and m[1] == 1][-3:]      # marker + 2 mutations
    assert got == [m for m in want if m not in lost]


def test_problem_sample(capsys):
    rc, rules, err = analyze(PROBLEMS, capsys, "--tls-keylog", str(PROBLEM_KEYS))
    assert rules == Counter({"tls-no-key": 1, "tls-auth-failed": 2, "tls-unsupported": 1,
                             "tls-gap": 1, "capture-gap": 1, "semantics-suppressed": 1})
    assert rc == 0
    by_port = Counter()
    for e in events(PROBLEMS, PROBLEM_KEYS):
        if type(e) is Pdu:
            by_port[e.conn] += 1
    # 60001: all 7 messages; 60005: all but the server's last segment (marker + 2 items)
    assert sorted(by_port.values()) == [4, 7]


def test_key_log_errors_are_one_line(tmp_path, capsys):
    assert main(["analyze", str(SAMPLE), "--tls-keylog", str(tmp_path / "none.keylog")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("dcpdissect: error: argument --tls-keylog: ") and "none.keylog" in err
    empty = tmp_path / "empty.keylog"
    empty.write_text("# nothing\n")
    assert main(["dissect", str(SAMPLE), "--tls-keylog", str(empty)]) == 2
    assert "no key log line" in capsys.readouterr().err


def test_dissect_with_key_log(capsys):
    assert main(["dissect", str(SAMPLE), "--tls-keylog", str(SAMPLE_KEYS), "--format",
                 "jsonl"]) == 0
    rows = [r for r in map(json.loads, capsys.readouterr().out.splitlines()) if "opcode" in r]
    assert len(rows) == 16


def test_local_pipeline_stages_equal_analyze():
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.pipeline import core
    opts = Options(tls_keylog=SAMPLE_KEYS.read_text())
    res = core.run_local([str(SAMPLE)], opts)[str(SAMPLE)]
    ref, summary = analyze_file(str(SAMPLE), opts)
    assert [(f.rule, f.frame, f.frames) for f in res.findings] == \
        [(f.rule, f.frame, f.frames) for f in ref]
    assert res.messages == summary.pdus == 16
    assert res.summary == summary and summary.tls_decrypted == 2


@pytest.mark.spark
@pytest.mark.slow
def test_spark_pipeline_decrypts_with_the_key_log(spark, tmp_path):
    from dcpdissect.pipeline.spark import run_pipeline
    from dcpdissect.analysis.run import analyze_file
    opts = Options(tls_keylog=SAMPLE_KEYS.read_text() + PROBLEM_KEYS.read_text())
    paths = [str(SAMPLE), str(PROBLEMS)]
    res = run_pipeline(spark, paths, str(tmp_path / "out"), opts, progress=None)
    assert res.messages[str(SAMPLE)] == 16 and res.messages[str(PROBLEMS)] == 11
    assert Counter(f.rule for f in res.findings[str(SAMPLE)]) == \
        Counter({"resume-collapsed-snapshot": 1})
    for path in paths:
        ref, summary = analyze_file(path, opts)
        assert [(f.rule, f.frame, f.frames, f.connection) for f in res.findings[path]] == \
            [(f.rule, f.frame, f.frames, f.connection) for f in ref]
        assert res.summaries[path] == summary
    # without its key log, the problem capture's five connections lack their keys
    res = run_pipeline(spark, [str(PROBLEMS)], str(tmp_path / "out2"),
                       Options(tls_keylog=SAMPLE_KEYS.read_text()), progress=None)
    assert Counter(f.rule for f in res.findings[str(PROBLEMS)]) == Counter({"tls-no-key": 5})


def _request_key_update(ssl_object) -> None:
    """OpenSSL's SSL_key_update(SSL_KEY_UPDATE_REQUESTED) on an ``SSLObject`` (Python's ssl
    has no call for it): its SSL* follows the object header and the socket weakref."""
    import ctypes
    libssl = ctypes.CDLL("libssl.so.3")
    libssl.SSL_key_update.argtypes = [ctypes.c_void_p, ctypes.c_int]
    libssl.SSL_version.argtypes = [ctypes.c_void_p]
    ptr = ctypes.c_void_p.from_address(id(ssl_object._sslobj) + 3 * ctypes.sizeof(ctypes.c_void_p)).value
    assert libssl.SSL_version(ptr) == 0x0304          # it is the SSL* of this TLS 1.3 session
    assert libssl.SSL_key_update(ptr, 1) == 1


@pytest.mark.tshark
def test_key_updates_move_both_directions_to_the_next_secret(tmp_path):
    """The client asks for a key update after every message it sends (the server answers
    with its own): both directions change keys several times, every message decodes."""
    from dcpdissect.samples.netsynth import Endpoint, TcpConversation, write_pcap
    from dcpdissect.samples.tls_capture import TlsPair, conversations, self_signed, tls_contexts
    pcap, keylog = tmp_path / "ku.pcap", tmp_path / "ku.keylog"
    convs = []
    contexts = tls_contexts("1.3", None, self_signed(str(tmp_path)), str(keylog))
    for c in conversations(str(PLAIN)):
        conv = TcpConversation(Endpoint(*c["client"]), Endpoint(c["server"][0], 11207),
                               start_ns=c["ts_ns"])
        pair = TlsPair(conv, contexts)
        pair.handshake()
        for direction, data in c["chunks"]:
            pair.send(direction, data)
            if direction == 0:
                _request_key_update(pair.ends[0])
        conv.close()
        convs.append(conv)
    write_pcap(str(pcap), convs)
    out = subprocess.run(["tshark", "-o", f"tls.keylog_file:{keylog}", "-r", str(pcap), "-Y",
                          "tls.handshake.type == 24", "-T", "fields", "-e", "tcp.srcport"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out.count("11207") >= 4 and len(out) - out.count("11207") >= 4   # both directions
    assert messages(pcap, keylog) == messages(PLAIN)


@pytest.mark.parametrize("name", ["replica-node.pcap", "replica-node-violations.pcap",
                                  "clean-replication.pcap", "tcp-mid-stream.pcap",
                                  "ipv6.pcap"])
def test_key_log_changes_nothing_for_plaintext(name):
    """With a key log, DCP ports wait for a connection's first bytes (it could start TLS):
    plaintext captures keep their connection numbers, messages and findings."""
    from dcpdissect.analysis.run import analyze_file
    path = str(ROOT / "samples" / name)
    opts = Options(tls_keylog="CLIENT_RANDOM " + "ab" * 32 + " " + "cd" * 48 + "\n")
    plain, plain_summary = analyze_file(path)
    keyed, keyed_summary = analyze_file(path, opts)
    assert [(f.rule, f.frame, f.frames, f.connection, f.message) for f in keyed] == \
        [(f.rule, f.frame, f.frames, f.connection, f.message) for f in plain]
    assert keyed_summary.pdus == plain_summary.pdus > 0
    assert [(e.conn, e.frames, e.data) for e in iter_events(path, opts) if type(e) is Pdu] == \
        [(e.conn, e.frames, e.data) for e in iter_events(path) if type(e) is Pdu]


@pytest.mark.parametrize("port,extra", [(11210, {}), (18091, {}), (18091, {"any_port": True}),
                                        (11207, {"ports": (11207,)})])
def test_tls_found_by_its_handshake_on_any_port(tmp_path, port, extra):
    """On a DCP port or a --port (decoded at once without a key log), on an unknown port
    and under --any-port alike."""
    build(str(PLAIN), str(tmp_path / "p.pcap"), str(tmp_path / "p.keylog"), port=port)
    opts = Options(tls_keylog=(tmp_path / "p.keylog").read_text(), **extra)
    got = [(e.conn, e.direction, e.data) for e in iter_events(str(tmp_path / "p.pcap"), opts)
           if type(e) is Pdu]
    assert got == messages(PLAIN)


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_resumed_sessions(tmp_path, version):
    """The reconnecting DCP client resumes its TLS session (TLS 1.2 abbreviated handshake,
    TLS 1.3 PSK): the key log's lines of the new client random decrypt it."""
    pcap, keylog = tmp_path / "r.pcap", tmp_path / "r.keylog"
    pairs = build(str(PLAIN), str(pcap), str(keylog), version, resume=True)
    assert [p.ends[0].session_reused for p in pairs] == [False, True]
    assert messages(pcap, keylog) == messages(PLAIN)


def _groups(context, names: str) -> None:
    """SSL_CTX_set1_groups_list on an ``SSLContext`` (Python's ssl has no call for it): its
    SSL_CTX* follows the object header."""
    import ctypes
    libssl = ctypes.CDLL("libssl.so.3")
    libssl.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
    libssl.SSL_CTX_ctrl.restype = ctypes.c_long
    ptr = ctypes.c_void_p.from_address(id(context) + 2 * ctypes.sizeof(ctypes.c_void_p)).value
    assert libssl.SSL_CTX_ctrl(ptr, 92, 0, names.encode()) == 1     # SSL_CTRL_SET_GROUPS_LIST


@pytest.mark.tshark
def test_hello_retry_request(tmp_path, monkeypatch):
    """The client's key share (X25519) is not the server's group (P-256): the server asks
    again (HelloRetryRequest), the client sends a second ClientHello; every message decodes."""
    from dcpdissect.samples import tls_capture
    plain_contexts = tls_capture.tls_contexts

    def contexts(*args):
        client, server = plain_contexts(*args)
        _groups(client, "X25519:P-256")
        _groups(server, "P-256")
        return client, server
    monkeypatch.setattr(tls_capture, "tls_contexts", contexts)
    pcap, keylog = tmp_path / "hrr.pcap", tmp_path / "hrr.keylog"
    build(str(PLAIN), str(pcap), str(keylog))
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "tls.handshake.type == 2", "-T",
                          "fields", "-e", "tls.handshake.random"],
                         capture_output=True, text=True, check=True).stdout.split()
    hrr = "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c"   # RFC 8446 §4.1.3
    assert out.count(hrr) == 2 and len(out) == 4
    assert messages(pcap, keylog) == messages(PLAIN)


def test_streams_with_key_log(capsys):
    assert main(["streams", str(SAMPLE), "--tls-keylog", str(SAMPLE_KEYS), "--format",
                 "jsonl"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    streams = [r for r in rows if r.get("vbucket") == 0]
    assert [r["connection"] for r in streams] == [1, 2]


@pytest.mark.parametrize("version,suite", [("1.3", None), ("1.2", "ECDHE-ECDSA-AES128-GCM-SHA256"),
                                           ("1.2", "ECDHE-ECDSA-CHACHA20-POLY1305")])
def test_mutated_tls_streams_never_raise_nor_invent_messages(tmp_path, version, suite):
    """Bytes of a real session flipped or cut (handshake included): no exception, and every
    message that still comes out is one the client or server really sent."""
    import random
    from dcpdissect.capture.keylog import KeyLog
    from dcpdissect.capture.packets import decode_packet
    from dcpdissect.capture.readers import open_capture
    from dcpdissect.reassembly.connections import ConnectionTable, StreamData
    from dcpdissect.reassembly.tls import TlsSession
    pcap, keys = tmp_path / "s.pcap", tmp_path / "s.keylog"
    build(str(PLAIN), str(pcap), str(keys), version, suite)
    table, streams = ConnectionTable(server_ports={11207}), (bytearray(), bytearray())
    with open_capture(str(pcap)) as reader:
        for fr in reader:
            for ev in table.feed(fr.number, fr.ts_ns, decode_packet(fr.linktype, fr.data)):
                if type(ev) is StreamData and ev.conn == 1:
                    streams[ev.direction].extend(ev.data)
    keylog, random_ = KeyLog(keys.read_text()), bytes(streams[0][11:43])
    real = {d for _, _, d in messages(PLAIN)}
    rng = random.Random(7)
    for _ in range(1500):
        s = [bytearray(streams[0]), bytearray(streams[1])]
        d = rng.randrange(2)
        for _ in range(rng.choice([1, 2, 4])):
            s[d][rng.randrange(min(rng.choice([10, 100, 300, len(s[d])]), len(s[d])))] ^= \
                rng.randrange(1, 256)
        if rng.random() < 0.3:
            s[d] = s[d][:rng.randrange(len(s[d]))]
        session = TlsSession(1, ("10.0.0.2", 5000), ("10.0.0.1", 11207), keylog, random_)
        out = []
        for direction in rng.sample((0, 1), 2):
            data, pos = bytes(s[direction]), 0
            while pos < len(data):
                n = rng.choice([1, 7, 100, 5000])
                out += session.direction(direction).data(pos, data[pos:pos + n], 5, 5)
                pos += n
        out += session.direction(0).close() + session.direction(1).close()
        assert {e.data for e in out if type(e) is Pdu} <= real


def test_markdown_report_says_the_capture_was_decrypted(capsys):
    assert main(["analyze", str(SAMPLE), "--tls-keylog", str(SAMPLE_KEYS), "--format",
                 "markdown"]) == 1
    assert "| TLS connections decrypted | 2 (with the key log) |" in capsys.readouterr().out


def test_scapy_read_with_key_log():
    from dcpdissect.scapy import read
    pkts = read(str(SAMPLE), tls_keylog=SAMPLE_KEYS.read_text())
    assert [bytes(p["MCBP"]) for p in pkts] == [d for _, _, d in messages(PLAIN)]


@pytest.mark.tshark
def test_evidence_bundle_ships_the_key_log_lines_of_its_connections(tmp_path, capsys):
    """The problem capture's findings sit on connections 60003-60005 (and 60002, whose key
    is missing): the bundle's keylog.txt holds exactly the lines of the decrypted ones it
    carries, the report names them, and both commands of the README decrypt the bundle."""
    out = tmp_path / "ev"
    assert main(["analyze", str(PROBLEMS), "--tls-keylog", str(PROBLEM_KEYS), "--evidence",
                 str(out)]) == 0
    capsys.readouterr()
    randoms = {e.client[1]: e.client_random for e in events(PROBLEMS, PROBLEM_KEYS)
               if type(e) is TlsProblem}
    shipped = (out / "keylog.txt").read_text().splitlines()
    want = [line for line in PROBLEM_KEYS.read_text().splitlines()
            if line.split()[1] in (randoms[60003], randoms[60004], randoms[60005])]
    assert sorted(shipped) == sorted(want) and len(want) == 5 + 1 + 5   # 1.3, 1.2, 1.3
    report = (out / "report.md").read_text()
    assert "**Encrypted capture**" in report and f"`{randoms[60005][:16]}…`" in report
    readme = (out / "README.txt").read_text()
    assert "keylog.txt" in readme and "--tls-keylog keylog.txt" in readme
    rc, rules, _ = analyze(out / "evidence.pcapng", capsys, "--tls-keylog", str(out / "keylog.txt"))
    assert rules == Counter({"tls-no-key": 1, "tls-auth-failed": 2, "tls-unsupported": 1,
                             "tls-gap": 1, "capture-gap": 1, "semantics-suppressed": 1})
    command = next(line.strip() for line in readme.splitlines() if line.strip().startswith("tshark"))
    shown = subprocess.run(command, shell=True, cwd=out, capture_output=True, text=True)
    assert shown.returncode == 0


@pytest.mark.tshark
def test_evidence_bundle_decodes_in_tshark_with_its_key_log(tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(["analyze", str(SAMPLE), "--tls-keylog", str(SAMPLE_KEYS), "--evidence",
                 str(out)]) == 1
    capsys.readouterr()
    readme = (out / "README.txt").read_text()
    command = next(line.strip() for line in readme.splitlines() if line.strip().startswith("tshark"))
    assert "-o tls.keylog_file:keylog.txt" in command and "dcp.tcp_ports:11207" not in command
    shown = subprocess.run(command + " -T fields -e dcp.opcode", shell=True, cwd=out,
                           capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["0x53"]          # the resume's stream request, decrypted by tshark


def test_redacted_evidence_of_a_decrypted_capture_ships_no_key(tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(["analyze", str(SAMPLE), "--tls-keylog", str(SAMPLE_KEYS), "--evidence",
                 str(out), "--redact"]) == 1
    capsys.readouterr()
    assert not (out / "keylog.txt").exists()
    payloads = [bytes(p[TCP].payload) for p in rdpcap(str(out / "evidence.pcapng"))]
    payloads = [p for p in payloads if p]
    assert payloads and all(p == b"x" * len(p) for p in payloads)
    assert "no key log is shipped" in (out / "report.md").read_text()
    assert "no key log is shipped" in (out / "README.txt").read_text()
