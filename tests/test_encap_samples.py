"""samples/encap: DCP through overlays, mirrors and fragments, around real kernel TCP.

Every sample is checked against tshark's own decoding (the inner TCP and the Couchbase
PDUs, at the frame that completes each one) and against its inner capture (the same
findings at the same frames, through the encapsulator's frame map); every front end sees
through the tunnels: dissect, analyze and its legend, streams, the pipeline's chunked
stages, Scapy's read() and evidence bundles.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from dcpdissect.analysis.run import analyze_file
from dcpdissect.cli import main
from dcpdissect.capture.readers import open_capture
from dcpdissect.pipeline import core
from dcpdissect.reassembly.pdus import Options
from dcpdissect.samples.encapsulate import SAMPLES, readme, wrap_file, write_wrapped

ROOT = Path(__file__).resolve().parent.parent
ENCAP = ROOT / "samples" / "encap"
BY_NAME = {s.name: s for s in SAMPLES}

# What analyze finds in the inner captures (and so in every sample around them): the clean
# replication, negotiated as kv_engine's consumer does, nothing at all.
INNER_FINDINGS = {
    "loopback-replication.pcap": [],
    "loopback-replication-ipv6.pcap": [],
    "loopback-resume-collapsed.pcap": [("resume-collapsed-snapshot", "error")],
}
# The messages tshark decodes (every scripted one: 66 in scenarios_basic.replication(), 16 in
# scenarios_streams.resume_collapsed()).
MESSAGES = {"loopback-replication.pcap": 66, "loopback-replication-ipv6.pcap": 66,
            "loopback-resume-collapsed.pcap": 16}
# The legend's tunnel column, written from the layers each sample was built with.
TUNNELS = {
    "vxlan": "VXLAN vni 42 10.9.0.1→10.9.0.2",
    "vxlan-ipv6": "VXLAN vni 42 2001:db8:9::1→2001:db8:9::2",
    "vxlan-8472": "VXLAN vni 1 10.9.0.1→10.9.0.2",
    "geneve": "Geneve vni 7 10.9.0.1→10.9.0.2",
    "gre": "GRE key 7 10.9.0.1→10.9.0.2",
    "gre-ethernet": f"GRE key {0x1234500} 10.9.0.1→10.9.0.2",
    "erspan-ii": "ERSPAN II session 3 10.9.0.1→10.9.0.2",
    "erspan-iii": "ERSPAN III session 4 10.9.0.1→10.9.0.2",
    "erspan-iii-subheader": "ERSPAN III session 5 10.9.0.1→10.9.0.2",
    "ipip": "IPv4-in-IPv4 10.9.0.1→10.9.0.2",
    "sit": "IPv6-in-IPv4 10.9.0.1→10.9.0.2",
    "ip4in6": "IPv4-in-IPv6 2001:db8:9::1→2001:db8:9::2",
    "ip6in6": "IPv6-in-IPv6 2001:db8:9::1→2001:db8:9::2",
    "mpls": "MPLS 16/17",
    "mpls-gre": "GRE 10.9.0.1→10.9.0.2 / MPLS 18",
    "vlan-mpls-gre-ipv6": "MPLS 16 / GRE key 9 10.9.0.1→10.9.0.2",
    "vxlan-outer-fragments": "VXLAN vni 42 10.9.0.1→10.9.0.2",
    "vxlan-inner-fragments": "VXLAN vni 42 10.9.0.1→10.9.0.2",
    "gre-ipv6-outer-fragments": "GRE key 11 2001:db8:9::1→2001:db8:9::2",
    "ipv4-fragments": None,
    "ipv6-fragments": None,
    "resume-collapsed-erspan-ii": "ERSPAN II session 9 10.9.0.1→10.9.0.2",
    "resume-collapsed-vxlan-fragments": "VXLAN vni 42 2001:db8:9::1→2001:db8:9::2",
    "vxlan-kernel": "VXLAN vni 42 192.0.2.1→192.0.2.2",                 # realnet.UNDERLAY
    "vxlan-kernel-fragments": "VXLAN vni 42 192.0.2.1→192.0.2.2",
}
IDS = [s.name for s in SAMPLES]


def path_of(sample) -> str:
    return str(ENCAP / f"{sample.name}.pcap")


def jsonl(capsys, *argv) -> list[dict]:
    main([str(a) for a in argv])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def tshark_pdus(path: str, extra=()) -> list[tuple[int, int, int]]:
    """(frame, opcode, magic) of every Couchbase PDU tshark decodes."""
    out = subprocess.run(["tshark", "-r", path, "-d", "tcp.port==11209,couchbase",
                          "-d", "tcp.port==11210,couchbase", *extra, "-Y", "couchbase",
                          "-T", "fields", "-e", "frame.number", "-e", "couchbase.opcode",
                          "-e", "couchbase.magic"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        frame, opcodes, magics = line.split("\t")
        rows += [(int(frame), int(o, 16), int(m, 16))
                 for o, m in zip(opcodes.split(","), magics.split(","))]
    return sorted(rows)


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_messages_equal_tshark(sample, capsys):
    """dissect --format jsonl decodes the messages tshark decodes inside the tunnel: the
    same count, opcodes and magics, each at the frame that completes it."""
    ours = sorted((r["frame"], r["opcode"], r["magic"])
                  for r in jsonl(capsys, "dissect", path_of(sample), "--format", "jsonl",
                                 *sample.options))
    theirs = tshark_pdus(path_of(sample), sample.tshark)
    assert len(theirs) == MESSAGES[sample.source]
    assert ours == theirs


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_findings_equal_the_inner_capture(sample):
    """analyze finds in each sample what it finds in the inner capture; a wrapped sample's
    findings are at the frames that carry the inner capture's (the last fragment when
    fragmented)."""
    options = Options(vxlan_ports=tuple(int(p) for p in sample.options[1::2]))
    found, summary = analyze_file(path_of(sample), options)
    inner, _ = analyze_file(str(ENCAP / sample.source))
    assert sorted((f.rule, f.severity) for f in inner) == INNER_FINDINGS[sample.source]
    assert sorted((f.rule, f.severity) for f in found) == INNER_FINDINGS[sample.source]
    assert summary.pdus == MESSAGES[sample.source] and summary.ip_unreassembled == 0
    if sample.layers:
        origin = wrap_file(str(ENCAP / sample.source), sample.layers, sample.fragmenting).origin
        assert [(f.rule, origin[f.frame - 1], f.connection) for f in found] == \
            [(f.rule, f.frame, f.connection) for f in inner]


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.layers], ids=lambda s: s.name)
def test_samples_rebuild_byte_for_byte(sample, tmp_path):
    out = tmp_path / "x.pcap"
    write_wrapped(out, wrap_file(str(ENCAP / sample.source), sample.layers, sample.fragmenting))
    assert out.read_bytes() == Path(path_of(sample)).read_bytes(), \
        f"samples/encap/{sample.name}.pcap is stale: python -m dcpdissect.regen"


def test_readme_is_the_table_of_samples():
    assert (ENCAP / "README.md").read_text(encoding="utf-8") == readme(), \
        "samples/encap/README.md is stale: python -m dcpdissect.regen"
    assert set(TUNNELS) == set(IDS)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_legend_shows_inner_endpoints_and_the_tunnel(sample, capsys):
    """dissect's legend, and each finding's connection_info (the clean replication has
    none), name the inner server and the tunnel."""
    servers = ("10.0.0.1:11209", "[fd00::1]:11209", "10.0.2.1:11210")
    records = jsonl(capsys, "analyze", path_of(sample), "--format", "jsonl", *sample.options)
    infos = [r["connection_info"] for r in records if "connection_info" in r]
    assert len(infos) == len(INNER_FINDINGS[sample.source])
    for info in infos:
        assert info["server"] in servers
        assert info.get("tunnel") == TUNNELS[sample.name]
    main(["dissect", path_of(sample), *sample.options])
    legend = capsys.readouterr().out.split("\nconnections\n")[1].splitlines()
    assert legend[0].split()[-1] == ("tunnel" if TUNNELS[sample.name] else "frame")
    assert legend[2].split()[2] in servers
    if TUNNELS[sample.name]:
        assert legend[2].endswith(TUNNELS[sample.name])


@pytest.mark.tshark
def test_kernel_vxlan_tunnel_is_the_one_tshark_reads():
    """The kernel's VXLAN: the VNI and VTEP addresses of the connection's first segment, as
    tshark decodes them, are those the legend names."""
    out = subprocess.run(["tshark", "-r", path_of(BY_NAME["vxlan-kernel"]), "-Y",
                          "tcp.flags.syn == 1 && tcp.flags.ack == 0", "-T", "fields",
                          "-e", "vxlan.vni", "-e", "ip.src", "-e", "ip.dst"],
                         capture_output=True, text=True, check=True).stdout.split()
    vni, (outer_src, _inner_src), (outer_dst, _inner_dst) = out[0], out[1].split(","), \
        out[2].split(",")
    assert TUNNELS["vxlan-kernel"] == f"VXLAN vni {vni} {outer_src}→{outer_dst}"


def test_vxlan_port_option(capsys):
    path = path_of(BY_NAME["vxlan-8472"])
    assert main(["dissect", path]) == 2
    err = capsys.readouterr().err
    assert "no MCBP found" in err and "UDP port 8472 carries what looks like VXLAN: try " \
        "--vxlan-port 8472" in err
    for command in ("dissect", "analyze", "streams"):
        main([command, path, "--vxlan-port", "8472"])
        assert "1 TCP connection," in capsys.readouterr().err
    from dcpdissect.cli import build_parser
    args = build_parser().parse_args(["pipeline", path, "--out", "o", "--vxlan-port", "8472",
                                      "--vxlan-port", "4790"])
    assert args.vxlan_port == [8472, 4790]
    assert main(["analyze", path, "--vxlan-port", "70000"]) == 2
    assert "port '70000' out of range" in capsys.readouterr().err


def test_streams_through_a_mirror(capsys):
    """ERSPAN keeps frames one for one: the streams records equal the inner capture's."""
    main(["streams", path_of(BY_NAME["erspan-ii"]), "--format", "jsonl"])
    mirrored = capsys.readouterr().out
    main(["streams", str(ENCAP / "loopback-replication.pcap"), "--format", "jsonl"])
    assert mirrored == capsys.readouterr().out and mirrored.count('"type":"stream"') == 3


def test_scapy_read_through_tunnels():
    from dcpdissect.scapy import read
    inner = read(str(ENCAP / "loopback-replication.pcap"))
    for name, opts in (("vxlan-inner-fragments", {}), ("vxlan-8472", {"vxlan_ports": (8472,)})):
        got = read(path_of(BY_NAME[name]), **opts)
        assert [bytes(p["MCBP"]) for p in got] == [bytes(p["MCBP"]) for p in inner]
    assert len(read(path_of(BY_NAME["vxlan-8472"]))) == 0


@pytest.mark.parametrize("name", ["gre", "vxlan-8472", "vxlan-outer-fragments",
                                  "resume-collapsed-vxlan-fragments"])
def test_pipeline_chunked_equals_analyze(name):
    """Tunnels are indexed per inner flow in stage A; a file with fragments, which no flow
    holds, is read whole (no merged events) and still equals analyze."""
    sample = BY_NAME[name]
    options = Options(vxlan_ports=tuple(int(p) for p in sample.options[1::2]))
    path = path_of(sample)
    got = core.run_local([path], options, chunk_size=2000, block_frames=3,
                         keep_events=True)[path]
    ref, ref_summary = analyze_file(path, options)
    assert [(f.rule, f.frame, f.connection) for f in got.findings] == \
        [(f.rule, f.frame, f.connection) for f in ref]
    assert got.summary == ref_summary and got.messages == ref_summary.pdus
    assert (got.events is None) == bool(sample.fragmenting)
    assert {c.tunnel for c in got.connections} == {TUNNELS[name]}


def test_lost_fragment_is_counted_not_raised(tmp_path, capsys):
    """One fragment missing: its packet is not reassembled, the summary says so, TCP sees a
    gap, and nothing raises."""
    with open_capture(path_of(BY_NAME["ipv4-fragments"])) as reader:
        frames = list(reader)
    first = next(f for f in frames if f.data[20] & 0x20)         # "more fragments" set
    from dcpdissect.samples.encapsulate import Wrapped
    cut = tmp_path / "lost.pcap"
    write_wrapped(cut, Wrapped([(f.ts_ns, f.data) for f in frames if f is not first], []))
    assert main(["analyze", str(cut)]) in (0, 1)
    err = capsys.readouterr().err
    assert "1 fragmented IP packets not reassembled (fragments missing)" in err
    assert "1 gap (" in err and "Traceback" not in err


def test_evidence_bundle_keeps_every_fragment(tmp_path, capsys):
    """The bundle of a finding whose messages came in fragments holds all of them and gives
    the finding back; redacted, no document byte of the capture is left in it."""
    path = path_of(BY_NAME["resume-collapsed-vxlan-fragments"])
    for redact in (False, True):
        out = tmp_path / f"bundle-{redact}"
        main(["analyze", path, "--evidence", str(out)] + (["--redact"] if redact else []))
        capsys.readouterr()
        assert "Every bundled finding is reproduced" in (out / "README.txt").read_text()
        found, _ = analyze_file(str(out / "evidence.pcapng"))
        assert Counter(f.rule for f in found)["resume-collapsed-snapshot"] == 1
    data = (tmp_path / "bundle-True" / "evidence.pcapng").read_bytes()
    assert b'"seq":' not in data and b'"seq":' in Path(path).read_bytes()


def _spark_available() -> bool:
    import importlib.util
    return shutil.which("java") is not None and all(
        importlib.util.find_spec(m) is not None for m in ("pyspark", "pyarrow"))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
@pytest.mark.parametrize("tasks_write", [True, False], ids=["tasks-write", "spark-writes"])
def test_spark_chunks_tunnels_and_reads_fragments_whole(spark, tmp_path, monkeypatch,
                                                        tasks_write):
    """Chunks smaller than the files: the tunnelled ones go through the chunked stages, the
    fragmented one is read whole after stage A, after a file read whole from the start;
    every file equals analyze (the VXLAN port option travelling to the executors), whoever
    writes the messages table."""
    import pyarrow.parquet as pq
    from dcpdissect.pipeline import spark as sp
    if not tasks_write:
        monkeypatch.setattr(sp, "_local_dir", lambda _spark, _out: None)
    small = tmp_path / "small.pcap"             # one chunk: read whole from the start
    shutil.copy(ENCAP / "loopback-resume-collapsed.pcap", small)
    names = ["vxlan-outer-fragments", "gre", "vxlan-8472"]
    paths = [path_of(BY_NAME[n]) for n in names] + [str(small)]
    options = Options(vxlan_ports=(8472,))
    res = sp.run_pipeline(spark, paths, str(tmp_path / "out"), options, chunk_size=4000,
                          progress=None)
    assert res.whole == {paths[0], str(small)}
    rows = Counter(r["capture_file"] for r in pq.read_table(tmp_path / "out" / "messages")
                   .select(["capture_file"]).to_pylist())
    for path in paths:
        ref, summary = analyze_file(path, options)
        assert [(f.rule, f.frame, f.connection) for f in res.findings[path]] == \
            [(f.rule, f.frame, f.connection) for f in ref]
        assert res.summaries[path] == summary and rows[path] == summary.pdus > 0
    tunnels = {(r["capture_file"], r["tunnel"]) for r in
               pq.read_table(tmp_path / "out" / "connections").to_pylist()}
    assert tunnels == {(paths[0], TUNNELS[names[0]]), (paths[1], TUNNELS[names[1]]),
                       (paths[2], TUNNELS[names[2]]), (str(small), "")}


@pytest.mark.parametrize("name, overhead", [("vxlan", 14 + 20 + 8 + 8),
                                            ("erspan-iii-subheader", 14 + 20 + 8 + 12 + 8),
                                            ("vlan-mpls-gre-ipv6", 4 + 4 + 20 + 8)])
def test_snaplen_cut_through_the_tunnel(name, overhead):
    """Frames cut by a snaplen: each decodes to the inner frame cut ``overhead`` bytes
    earlier (the same payload, the same bytes said missing); the outer lengths, which the
    cut makes lie, are not what counts."""
    from dcpdissect.capture.packets import decode_packet
    sample = BY_NAME[name]
    with open_capture(path_of(sample)) as a, open_capture(str(ENCAP / sample.source)) as b:
        pairs = list(zip(a, b))
    assert len(pairs) == 28
    for snaplen in (overhead + 60, overhead + 100, overhead + 1000):
        cut = 0
        for outer, inner in pairs:
            got = decode_packet(1, outer.data[:snaplen])
            want = decode_packet(1, inner.data[:snaplen - overhead])
            assert (got and got._replace(tunnel="")) == want
            if got is not None:             # the outer endpoints follow the direction
                assert got.tunnel in (TUNNELS[name], re.sub(r"(\S+)→(\S+)", r"\2→\1",
                                                            TUNNELS[name]))
                cut += got.missing > 0
        assert cut > 0 or snaplen == overhead + 60


def test_markdown_and_html_name_the_tunnel(capsys):
    path = path_of(BY_NAME["resume-collapsed-erspan-ii"])
    main(["analyze", path, "--format", "markdown"])
    tunnel = TUNNELS["resume-collapsed-erspan-ii"]
    assert f'10.0.2.2:50431 → 10.0.2.1:11210 (producer, "resume-demo") via {tunnel}' in \
        capsys.readouterr().out
    main(["analyze", path, "--format", "html"])
    html = capsys.readouterr().out
    assert "<th>tunnel</th>" in html and tunnel in html
    main(["analyze", str(ENCAP / "loopback-resume-collapsed.pcap"), "--format", "html"])
    assert "<th>tunnel</th>" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.skipif(shutil.which("dumpcap") is None or shutil.which("ip") is None
                    or os.geteuid() != 0, reason="needs root, iproute2 and dumpcap")
def test_kernel_capture_replays_the_conversation(tmp_path):
    """A new real capture of resume-collapsed (network namespaces, the kernel's TCP,
    dumpcap) decodes to the committed capture's messages and finding."""
    from dcpdissect.samples.encapsulate import capture_inner
    out = tmp_path / "again.pcap"
    capture_inner(out, "resume-collapsed")
    found, summary = analyze_file(str(out))
    committed, _ = analyze_file(str(ENCAP / "loopback-resume-collapsed.pcap"))
    assert [(f.rule, f.connection) for f in found] == [(f.rule, f.connection) for f in committed]
    assert (summary.connections, summary.pdus) == (2, 16)


@pytest.mark.slow
@pytest.mark.tshark
@pytest.mark.skipif(shutil.which("dumpcap") is None or shutil.which("ip") is None
                    or os.geteuid() != 0, reason="needs root, iproute2 and dumpcap")
def test_kernel_vxlan_capture_over_a_smaller_veth(tmp_path):
    """The kernel's VXLAN over a 1400-byte veth without segmentation offload: no frame
    longer than the veth allows, outer IPv4 fragments (the VXLAN device's MTU is 1500), and
    every scripted message decoded by tshark through them; analyze finds nothing."""
    from dcpdissect.samples.encapsulate import capture_inner
    out = tmp_path / "vxlan.pcap"
    capture_inner(out, "replication", "vxlan", 1400)
    rows = subprocess.run(["tshark", "-r", str(out), "-T", "fields", "-e", "frame.len",
                           "-e", "ip.flags.mf"], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    assert max(int(row.split("\t")[0]) for row in rows) <= 1400 + 14
    assert any(row.split("\t")[1].startswith(("1", "True")) for row in rows)
    assert len(tshark_pdus(str(out))) == MESSAGES["loopback-replication.pcap"]
    found, summary = analyze_file(str(out))
    assert found == [] and summary.pdus == MESSAGES["loopback-replication.pcap"]
