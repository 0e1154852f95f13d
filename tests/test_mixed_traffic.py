"""Mixed traffic: a connection off the DCP ports and --port is MCBP only when its bytes prove
it, with --any-port as without.

tests/ndpi holds captures of nDPI's test suite (no MCBP; see its README): they give no
warning or error in either mode. A DCP sample merged into one of them with mergecap keeps
exactly its findings at the frames the merge moved them to (computed from the two files'
records, not by dcpdissect). Real MCBP on port 12000 is still found, from its first byte or,
when the capture starts inside the connection, from the first chain of headers; and a
connection proven MCBP that turns to garbage is still an error.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import RULES
from dcpdissect.analysis.run import analyze_file
from dcpdissect.pipeline import core
from dcpdissect.reassembly.pdus import Options, chain_search
from dcpdissect.samples.dsl import dcp_open, ok

ROOT = Path(__file__).resolve().parent.parent
NDPI = ROOT / "tests" / "ndpi"
SAMPLES = ROOT / "samples"
MERGED = NDPI / "fuzz-2006-06-26-2594+resume-collapsed.pcap"
MERGE_SHIFT = 1120469635 - 1700000000        # seconds added to the sample's times
CAPTURES = sorted(p.name for p in NDPI.iterdir()
                  if p.suffix in (".pcap", ".pcapng", ".cap") and p != MERGED)
KEYLOG = "CLIENT_RANDOM " + "ab" * 32 + " " + "cd" * 48 + "\n"    # secrets of no connection
MODES = {"default": Options(), "any-port": Options(any_port=True),
         "keylog": Options(tls_keylog=KEYLOG),
         "any-port+keylog": Options(any_port=True, tls_keylog=KEYLOG)}
NOT_MCBP = "connections-not-mcbp"


def loud(findings) -> list:
    return [(f.rule, f.frame, f.message) for f in findings if f.severity != "info"]


def view(findings, frame_map=None) -> list:
    """What must not move: rule, frames (mapped), connection, vbucket, opaque."""
    m = frame_map or {}
    return sorted((f.rule, m.get(f.frame, f.frame), tuple(m.get(x, x) for x in f.frames),
                   f.connection, f.vbucket, f.opaque) for f in findings)


# -- the nDPI captures ---------------------------------------------------------------------

def test_the_corpus_is_the_one_described():
    readme = (NDPI / "README.md").read_text()
    assert len(CAPTURES) >= 30 and (NDPI / "COPYING").read_text().startswith(
        "\t\t   GNU LESSER GENERAL PUBLIC LICENSE")
    assert sum((NDPI / c).stat().st_size for c in CAPTURES) < 4 << 20
    for name in CAPTURES + [MERGED.name]:
        assert f"| `{name}` |" in readme, name


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CAPTURES)
def test_no_warning_or_error_on_traffic_that_is_not_mcbp(name, mode):
    findings, summary = analyze_file(str(NDPI / name), MODES[mode])
    assert loud(findings) == []
    assert summary.connections == 0 and summary.pdus == 0 and summary.heuristic_ports == {}
    assert {f.rule for f in findings} <= {"tls-connection", NOT_MCBP}
    reported = [f for f in findings if f.rule == NOT_MCBP]
    if not MODES[mode].any_port or not summary.undecoded_ports:
        assert reported == []
    else:               # once per capture, every port and connection counted
        [f] = reported
        assert f.connection is None and f.fields == {
            "connections": sum(summary.undecoded_ports.values()),
            "ports": {str(p): n for p, n in sorted(summary.undecoded_ports.items(),
                                                   key=lambda pn: (-pn[1], pn[0]))}}
        assert f"{f.fields['connections']} TCP connection" in f.message


def test_a_connection_that_starts_like_mcbp_is_not_mcbp():
    """Both directions of this connection on 443 start with a plausible header (magic 0x80,
    opcode 0x02, sane lengths) that no second header follows."""
    _, summary = analyze_file(str(NDPI / "1kxun-443-53406.pcap"), MODES["any-port"])
    assert summary.undecoded_ports == {443: 1} and summary.tls_connections == 0
    data = (NDPI / "1kxun-443-53406.pcap").read_bytes()
    assert b"\x80\x02\x00\x01\x00\x00\x00\x13\x00\x00\x00\x21" in data


def test_the_finding_as_a_json_line_matches_the_schema(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    from dcpdissect.cli import main
    schema = json.loads((ROOT / "docs" / "jsonl-schema.json").read_text())
    assert main(["analyze", str(NDPI / "zabbix.pcap"), "--any-port", "--format", "jsonl"]) == 2
    out, err = capsys.readouterr()
    [record] = [json.loads(line) for line in out.splitlines()]    # nothing decoded: the error
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(record)) == []
    assert record["type"] == "error" and "no MCBP found" in record["error"]
    assert "no MCBP found" in err and "--port N" in err


def test_the_summary_line_counts_connections_seen_and_decoded():
    _, summary = analyze_file(str(NDPI / "bittorrent.pcap"), MODES["any-port"])
    seen = summary.not_mcbp
    assert seen == 24 and f"{seen} TCP connections (0 decoded as MCBP, {seen} not MCBP)" \
        in summary.line()


# -- a DCP sample inside mixed traffic --------------------------------------------------------

def records(path: Path) -> list[tuple[int, bytes]]:
    """(time in µs, bytes) of each record of a classic µs pcap file."""
    data = path.read_bytes()
    order = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">"}[data[:4]]
    out, pos = [], 24
    while pos < len(data):
        sec, usec, incl, _orig = struct.unpack_from(order + "IIII", data, pos)
        out.append((sec * 1_000_000 + usec, data[pos + 16:pos + 16 + incl]))
        pos += 16 + incl
    return out


def merge_map() -> dict[int, int]:
    """Frame of the sample -> frame of the merged capture holding the same record."""
    merged = {rec: n for n, rec in enumerate(records(MERGED), 1)}
    sample = records(SAMPLES / "resume-collapsed.pcap")
    return {n: merged[(t + MERGE_SHIFT * 1_000_000, data)]
            for n, (t, data) in enumerate(sample, 1)}


@pytest.mark.parametrize("mode", MODES)
def test_a_merged_dcp_sample_keeps_exactly_its_findings(mode):
    fmap = merge_map()
    assert len(set(fmap.values())) == len(fmap) == 34
    assert len(records(MERGED)) == 34 + len(records(NDPI / "fuzz-2006-06-26-2594.pcap"))
    assert sorted(fmap.values()) != list(range(min(fmap.values()), max(fmap.values()) + 1)), \
        "the merge interleaves the sample with the capture's frames"
    alone, _ = analyze_file(str(SAMPLES / "resume-collapsed.pcap"), MODES[mode])
    merged, summary = analyze_file(str(MERGED), MODES[mode])
    extra = [f for f in merged if f.rule == NOT_MCBP]
    assert view([f for f in merged if f.rule != NOT_MCBP]) == view(alone, fmap)
    assert ("resume-collapsed-snapshot", fmap[28]) in [(f.rule, f.frame) for f in merged]
    assert summary.connections == 2 and summary.heuristic_ports == {}
    if MODES[mode].any_port:
        assert [f.severity for f in extra] == ["info"] and extra[0].fields["connections"] == 20
    else:
        assert extra == []


@pytest.mark.tshark
def test_the_merged_capture_is_mergecaps_output(tmp_path):
    if not (shutil.which("editcap") and shutil.which("mergecap")):
        pytest.fail("editcap and mergecap (Wireshark) are needed")
    shifted = tmp_path / "shifted.pcap"
    subprocess.run(["editcap", "-t", str(MERGE_SHIFT), str(SAMPLES / "resume-collapsed.pcap"),
                    str(shifted)], check=True)
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(tmp_path / "m.pcap"),
                    str(NDPI / "fuzz-2006-06-26-2594.pcap"), str(shifted)], check=True)
    assert (tmp_path / "m.pcap").read_bytes() == MERGED.read_bytes()


def test_the_pipeline_finds_what_analyze_finds(tmp_path):
    """Chunked, over several analysis groups: the groups' connections-not-mcbp findings
    are merged into the one analyze reports."""
    paths = [str(MERGED), str(NDPI / "zabbix.pcap")]
    opts = MODES["any-port"]
    got = core.run_local(paths, options=opts, chunk_size=4000, block_frames=8, groups=4)
    for path in paths:
        ref, ref_summary = analyze_file(path, opts)
        res = got[path]
        assert [(f.rule, f.frame, f.frames, f.connection, f.message, f.fields)
                for f in res.findings] == \
            [(f.rule, f.frame, f.frames, f.connection, f.message, f.fields) for f in ref]
        assert res.summary == ref_summary
        assert sum(f.rule == NOT_MCBP for f in res.findings) == 1


# -- real MCBP on an unusual port -----------------------------------------------------------

def moved(sample: str, old: int, new: int, tmp_path: Path) -> str:
    """The sample with TCP port ``old`` changed to ``new`` (checksums recomputed by Scapy)."""
    from scapy.all import IP, TCP, rdpcap, wrpcap
    packets = rdpcap(str(SAMPLES / sample))
    for p in packets:
        t = p[TCP]
        t.sport = new if t.sport == old else t.sport
        t.dport = new if t.dport == old else t.dport
        del t.chksum, p[IP].chksum
    path = tmp_path / sample.replace(".pcap", f"-{new}.pcap")
    wrpcap(str(path), packets)
    return str(path)


@pytest.mark.parametrize("mode", MODES)
def test_mcbp_on_port_12000_is_found(mode):
    """DCP on 12000 beside HTTP on 8080 and TLS on 11207 and 8443. With a key log that
    lacks their secrets, TLS on the TLS port is a warning; on 8443 it is not known to be
    MCBP: the same info as without a key log."""
    findings, summary = analyze_file(str(SAMPLES / "ports-heuristic.pcap"), MODES[mode])
    assert summary.heuristic_ports == {12000: 1} and summary.pdus == 11
    assert summary.undecoded_ports == {8080: 1} and summary.tls_connections == 2
    on_12000 = [(f.rule, f.frame) for f in findings if f.connection == 1]
    assert on_12000 == [("snapshot-version-not-negotiated", 46)]     # as the golden file has it
    tls = sorted((f.fields["server"], f.rule) for f in findings if f.rule.startswith("tls-"))
    assert tls == [("10.0.0.1:11207", "tls-no-key" if MODES[mode].tls_keylog else
                    "tls-connection"), ("10.0.0.1:8443", "tls-connection")]
    assert [f.fields for f in findings if f.rule == NOT_MCBP] == \
        ([{"connections": 1, "ports": {"8080": 1}}] if MODES[mode].any_port else [])


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sample,port,connections", [
    ("tcp-mid-stream.pcap", 11209, 1),          # the capture starts inside the connection
    ("violations-garbage.pcap", 11210, 2),      # garbage after MCBP; a lost first segment
    ("identity-mid-stream-clean.pcap", 11210, 1),
])
def test_moved_off_the_dcp_ports_the_findings_stay(tmp_path, sample, port, connections, mode):
    """On port 12000, found by its bytes: the same messages and findings as on the DCP port,
    errors after garbage included."""
    on_port, ref_summary = analyze_file(str(SAMPLES / sample))
    found, summary = analyze_file(moved(sample, port, 12000, tmp_path), MODES[mode])
    assert summary.heuristic_ports == {12000: connections}
    assert summary.pdus == ref_summary.pdus and summary.resyncs == ref_summary.resyncs
    assert view(f for f in found if f.rule != NOT_MCBP) == view(on_port)
    if sample == "violations-garbage.pcap":
        assert {"unknown-magic", "frame-too-large", "resync-after-garbage"} <= \
            {f.rule for f in found if RULES[f.rule].severity != "info"}


def test_garbage_never_proven_mcbp_is_not_an_error_off_the_dcp_ports(tmp_path):
    """hostile-garbage-tcp: on 11210 its connection of random bytes is MCBP by its port
    (errors); on 12000 only the MCBP connection with garbage in it keeps its errors."""
    on_port, _ = analyze_file(str(SAMPLES / "hostile-garbage-tcp.pcap"))
    for mode, opts in MODES.items():
        found, summary = analyze_file(moved("hostile-garbage-tcp.pcap", 11210, 12000,
                                            tmp_path), opts)
        assert summary.heuristic_ports == {12000: 1} and summary.undecoded_ports == {12000: 1}
        assert view(f for f in found if f.rule != NOT_MCBP) == \
            view(f for f in on_port if f.connection == 1), mode
        assert {f.connection for f in on_port if f.severity == "error"} == {1, 2}


# -- the search for a chain ---------------------------------------------------------------

def test_chain_search():
    a, b = dcp_open("n", 1, 2), ok(0x50, 1)
    tail = b"\x00\x11\x22" * 9                  # the end of a frame the capture began in
    assert chain_search(tail + a + b, 0, False) == ("mcbp", len(tail))
    assert chain_search(tail + a, 0, False) == ("one", len(tail))
    assert chain_search(tail + a[:24], 0, False) == (None, len(tail))    # waits for its end
    assert chain_search(tail + a[:24], 0, True)[0] == "no"
    assert chain_search(tail, 0, False)[0] is None and chain_search(tail, 0, True)[0] == "no"
    assert chain_search(tail + a + b"GET / HTTP/1.1\r\n" * 2, 0, True)[0] == "no"
    # a plausible header in the tail, its frame longer than the bytes: the search waits for
    # it, and once no more bytes come (the window is full) goes on past it
    false = b"\x81\x07" + bytes(6) + (1000).to_bytes(4, "big") + bytes(12)
    assert chain_search(false + a + b, 0, False) == (None, 0)
    assert chain_search(false + a + b, 0, True) == ("mcbp", len(false))
    # resumed where it stopped, it finds what a search from the start finds
    verdict, at = chain_search(tail + a[:24], 0, False)
    assert chain_search(tail + a + b, at, False) == ("mcbp", len(tail))
