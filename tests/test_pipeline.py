"""The pipeline (index, chunks, per-flow and per-file stages, Spark driver) against the
local ``analyze`` run: same findings, messages and summaries, whatever the chunking."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dcpdissect.analysis.run import analyze_file
from dcpdissect.capture.readers import CaptureError, open_capture
from dcpdissect.codec import decode, encode
from dcpdissect.pipeline import core, filepass, tables
from dcpdissect.pipeline.chunks import index_file, parse_size, read_piece
from dcpdissect.pipeline.coupling import END
from dcpdissect.pipeline.frames import index_chunk
from dcpdissect.pipeline.groups import run_group
from dcpdissect.pipeline.merge import FileMerge
from dcpdissect.reassembly.connections import ConnectionClosed
from dcpdissect.reassembly.pdus import Options, Pdu, iter_events
from dcpdissect.reports.findings import finding_record
from dcpdissect.reports.messages import message_record
from dcpdissect.samples import netsynth as ns
from dcpdissect.samples.dsl import (
    T0,
    Script,
    dcp_open,
    doc,
    failover,
    marker,
    mutation,
    ok,
    stream_req,
)
from dcpdissect.samples.scenarios_basic import add_stream, replication, stream_id_connector
from dcpdissect.samples.scenarios_streams import resume_collapsed
from dcpdissect.samples.netsynth import Endpoint, Link

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(str(p.relative_to(ROOT)) for folder in ("samples", "samples/real")
                 for p in (ROOT / folder).iterdir() if p.is_file() and p.suffix != ".md")


# -- corpus helpers ----------------------------------------------------------------------------

def linger_capture(path) -> None:
    """Two connections lose a server segment before their FIN, one the client never
    acknowledges (so no ACK shows it lost); unrelated traffic (an untracked port, then a
    later DCP connection) arrives more than a second later, so the lingering FINs expire on
    other connections' packets."""
    a = replication(client=Endpoint("10.0.0.2", 50001), start_ns=T0)
    b = replication(client=Endpoint("10.0.0.3", 50002), start_ns=T0 + 100_000)
    pa = a.conv.packets()
    pa = ns.causal_acks(ns.drop(pa, ns.data_indices(pa, "s2c")[-2]))
    pb = b.conv.packets()
    pb = ns.causal_acks(ns.drop(pb, ns.data_indices(pb, "s2c")[-1]))
    c = Script(Endpoint("10.0.0.5", 40000), Endpoint("10.0.0.6", 8091), start_ns=T0 + 50_000)
    c.c2s(b"x" * 100)
    c.conv.pause(1_500_000_000)
    c.s2c(b"y" * 100)
    c.conv.close()
    d = replication(client=Endpoint("10.0.0.4", 50003), server=Endpoint("10.0.0.1", 11210),
                    start_ns=T0 + 2_600_000_000)
    ns.write_pcap(str(path), [pa, pb, c.conv.packets(), d.conv.packets()])


def resume_across_groups(path) -> None:
    """A consumer resumes on a new connection of the same DcpOpen name (collapsing its
    snapshot) while two unrelated consumers (other names, other vbuckets or servers) open
    between its connections: the two connections of the name start in different analysis
    groups and must be analysed together, with analyze's connection numbers."""
    first, second = resume_collapsed()
    connector = stream_id_connector(client=Endpoint("10.0.2.7", 50700), start_ns=T0 + 20_000_000)
    other = replication(client=Endpoint("10.0.2.8", 50800), start_ns=T0 + 30_000_000)
    ns.write_pcap(str(path), [s.conv.packets() for s in (first, connector, other, second)])


def buckets_capture(path) -> None:
    """Three buckets on one node, two consumers each streaming interleaved vbuckets (even,
    odd) at the same time, and one of them resuming beyond what it received."""
    server = Endpoint("10.0.4.1", 11210)
    scripts = []

    def consumer(port, bucket, name, start_ns):
        s = Script(Endpoint("10.0.4.2", port), server, start_ns=start_ns)
        s.c2s(encode(0x89, key=bucket.encode(), opaque=0xB))
        s.s2c(ok(0x89, 0xB))
        s.c2s(dcp_open(name, 0x1, 1))
        s.s2c(ok(0x50, 1))
        return s

    for b, bucket in enumerate(("alpha", "beta", "gamma")):
        for parity in (0, 1):
            s = consumer(51000 + 2 * b + parity, bucket, f"{bucket}-{parity}",
                         T0 + (2 * b + parity) * 1_000)
            vbs = range(parity, 8, 2)
            for vb in vbs:
                s.c2s(stream_req(vb, 0x100 + vb))
                s.s2c(failover(0x100 + vb, (0xAB00 + vb, 0)))
            for vb in vbs:
                s.s2c(marker(vb, 0x100 + vb, 0, 3, "memory+checkpoint"),
                      *[mutation(vb, 0x100 + vb, i, f"k{vb}-{i}", doc(i)) for i in (1, 2, 3)])
            s.conv.close()
            scripts.append(s)
    again = consumer(51010, "beta", "beta-1", T0 + 50_000_000)
    again.c2s(stream_req(3, 0x200, start=5, uuid=0xAB03, snap_start=1, snap_end=3))
    again.s2c(failover(0x200, (0xAB03, 0)))
    again.conv.close()
    ns.write_pcap(str(path), [s.conv.packets() for s in scripts + [again]])


def make_corpus(directory: Path) -> list[str]:
    """A few multi-connection captures (pcap, pcapng, gzip) built from the sample scripts."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    p = directory / "many-connections.pcap"
    scripts = [replication(client=Endpoint(f"10.0.1.{i}", 51000 + i), start_ns=T0 + i * 7_000)
               for i in range(1, 5)]
    scripts.append(stream_id_connector(start_ns=T0 + 3_000))
    scripts.append(replication(client=Endpoint("10.0.3.1", 53000),     # TLS port: only counted
                               server=Endpoint("10.0.0.1", 11207), start_ns=T0 + 5_000))
    scripts.append(replication(client=Endpoint("10.0.3.2", 53001),     # decoded with --port 12000
                               server=Endpoint("10.0.0.1", 12000), start_ns=T0 + 9_000))
    ns.write_pcap(str(p), [s.conv.packets() for s in scripts])
    paths.append(p)
    p = directory / "add-stream-twice.pcapng"
    srcs = [s.conv.packets() for s in add_stream()]
    srcs.append(replication(client=Endpoint("10.0.2.9", 52000), start_ns=T0 + 150_000,
                            link=Link("ethernet")).conv.packets())
    ns.write_pcapng(str(p), srcs)
    paths.append(p)
    p = directory / "linger.pcap"
    linger_capture(p)
    paths.append(p)
    gz = directory / "linger.pcap.gz"
    gz.write_bytes(gzip.compress(p.read_bytes(), mtime=0))
    paths.append(gz)
    return [str(x) for x in paths]


def make_bad(directory: Path) -> list[str]:
    """A capture cut mid-record, one cut in its global header, a text file named .pcap
    and a gzip stream cut short."""
    directory.mkdir(parents=True, exist_ok=True)
    data = (ROOT / "samples" / "tcp-loss.pcap").read_bytes()
    cut = directory / "cut.pcap"
    cut.write_bytes(data[: len(data) * 2 // 3 + 5])
    head = directory / "head.pcap"
    head.write_bytes(data[:10])
    text = directory / "notes.pcap"
    text.write_text("this is not a capture\n")
    gzc = directory / "cut.pcap.gz"
    gzc.write_bytes(gzip.compress((ROOT / "samples" / "clean-replication.pcap").read_bytes())[:-300])
    return [str(cut), str(head), str(text), str(gzc)]


def finding_view(findings) -> list[dict]:
    return [json.loads(json.dumps(finding_record(f))) for f in findings]


def check_equal(results: dict, paths: list[str], options=None) -> None:
    """results: path -> (findings, summary, message count)."""
    for path in paths:
        findings, summary, messages = results[path]
        ref, ref_summary = analyze_file(path, options)
        assert [(f.rule, f.frame, f.frames, f.connection, f.vbucket) for f in findings] == \
            [(f.rule, f.frame, f.frames, f.connection, f.vbucket) for f in ref], path
        assert finding_view(findings) == finding_view(ref), path
        assert summary == ref_summary, path
        assert messages == ref_summary.pdus, path


def local_results(paths, **kw) -> dict:
    res = core.run_local(paths, **kw)
    return {p: (r.findings, r.summary, r.messages) for p, r in res.items()}


# -- Spark-free: index and stages ----------------------------------------------------------------

def test_parse_size():
    assert parse_size("256MB") == 256 << 20
    assert parse_size("64k") == 64 << 10
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("1000") == 1000
    with pytest.raises(ValueError):
        parse_size("0")


@pytest.mark.parametrize("name", ["samples/pcapng-multi-interface.pcapng",
                                  "samples/loopback-ns-be.pcap", "samples/violations-garbage.pcap"])
def test_pieces_cover_the_file_exactly(name):
    ref = list(open_capture(str(ROOT / name)))
    for chunk_size, block in ((1, 1), (500, 3), (1 << 30, 4096)):
        idx = index_file(str(ROOT / name), chunk_size, block)
        assert idx.splittable and idx.error is None and idx.frames == len(ref)
        assert [f for c in idx.chunks for f in read_piece(c)] == ref
        assert [f for b in idx.blocks for f in read_piece(b)] == ref
        for b in idx.blocks:
            assert b.max_ts == max(f.ts_ns for f in read_piece(b))


def test_pcapng_sections_with_both_byte_orders(tmp_path):
    """A second section (big-endian, its own interfaces) after a little-endian one."""
    be = tmp_path / "be.pcapng"
    ns.write_pcapng(str(be), [replication().conv.packets(),
                              stream_id_connector(link=Link("raw"), start_ns=T0 + 500).conv.packets()],
                    interfaces=[9, 6], big_endian=True)
    two = tmp_path / "two.pcapng"
    two.write_bytes((ROOT / "samples" / "pcapng-multi-interface.pcapng").read_bytes() + be.read_bytes())
    ref = list(open_capture(str(two)))
    for chunk_size, block in ((1, 1), (700, 3)):
        idx = index_file(str(two), chunk_size, block)
        assert {c.ctx[1] for c in idx.chunks} == {"<", ">"}
        assert [f for c in idx.chunks for f in read_piece(c)] == ref
        assert [f for b in idx.blocks for f in read_piece(b)] == ref
    check_equal(local_results([str(two)], chunk_size=700, block_frames=3), [str(two)])


def test_index_faults_match_the_reader(tmp_path):
    for src in ("samples/pcapng-multi-interface.pcapng", "samples/loopback-ns-be.pcap"):
        data = (ROOT / src).read_bytes()
        for cut in list(range(0, 80, 3)) + list(range(80, len(data), 97)):
            p = tmp_path / "x"
            p.write_bytes(data[:cut])
            frames, error = [], None
            try:
                with open_capture(str(p)) as r:
                    frames.extend(r)
            except CaptureError as exc:
                error = str(exc)
            idx = index_file(str(p), 400, 2)
            assert [f for c in idx.chunks for f in read_piece(c)] == frames, (src, cut)
            assert (str(idx.error) if idx.error else None) == error, (src, cut)


def test_expand_inputs(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/a.pcap", "d/sub/b.pcapng.gz", "d/readme.txt", "c.pcap"):
        (tmp_path / name).write_bytes(b"")
    got = core.expand_inputs([str(tmp_path / "d"), str(tmp_path / "*.pcap"),
                              str(tmp_path / "c.pcap"), str(tmp_path / "missing.pcap")])
    assert got == [str(tmp_path / "d" / "a.pcap"), str(tmp_path / "d" / "sub" / "b.pcapng.gz"),
                   str(tmp_path / "c.pcap"), str(tmp_path / "missing.pcap")]


@pytest.mark.parametrize("chunk_size,block", [(1 << 30, None), (300, 2), (1, 1)])
def test_local_stages_equal_analyze(tmp_path, chunk_size, block):
    paths = [str(ROOT / s) for s in SAMPLES] + make_corpus(tmp_path / "corpus")
    check_equal(local_results(paths, chunk_size=chunk_size, block_frames=block), paths)


@pytest.mark.parametrize("options", [Options(ports=(12000,)), Options(any_port=True)],
                         ids=["port", "any-port"])
def test_local_stages_equal_analyze_with_options(tmp_path, options):
    paths = make_corpus(tmp_path / "corpus") + [str(ROOT / "samples" / "clean-replication.pcap")]
    check_equal(local_results(paths, options=options, chunk_size=500, block_frames=3), paths,
                options)


def test_lingering_fin_expires_on_other_connections_packets(tmp_path):
    path = str(tmp_path / "linger.pcap")
    linger_capture(path)
    ref = list(iter_events(path))
    for chunk_size, block in ((1 << 30, None), (200, 2)):
        got = core.run_local([path], chunk_size=chunk_size, block_frames=block,
                             keep_events=True)[path]
        assert got.events == ref
    # each group alone: the lingering FINs of the first two connections expire on the
    # file's other packets (the clock), not at the end of the capture
    idx = index_file(path, 200, 2)
    fm = FileMerge(idx, Options(), groups=8)
    for piece in idx.chunks:
        fm.add_chunk(*index_chunk(piece, Options()))
    tasks = fm.plan()
    assert len(tasks) == 4
    for clock in (core.clock_for(idx), None):
        moments = set()
        for task in tasks:
            got: list = []
            for _cols in run_group(path, task.group, task.flows, Options(), task.numbers,
                                   clock, got, keep_events=True):
                pass
            moments |= {m[0] for m, ev in got[0].events if type(ev) is ConnectionClosed
                        and ev.reason == "fin" and ev.frame in (44, 94)}
        if clock is None:
            assert moments == {END}
        else:                   # the untracked connection's late packet, before the next open
            assert moments and max(m & 0xFFFFFFFF for m in moments) < 101   # their frames


def test_coupled_groups_run_again_and_equal_analyze(tmp_path):
    """Connections that meet in the analyzer (a DcpOpen name, a server's vbucket) are
    analysed together however the flows were first grouped; the others are not run again."""
    resume, buckets = str(tmp_path / "resume.pcap"), str(tmp_path / "buckets.pcap")
    resume_across_groups(resume)
    buckets_capture(buckets)
    ref = [f for f in analyze_file(resume)[0] if f.rule == "resume-collapsed-snapshot"]
    assert [f.connection for f in ref] == [4] and "(connection 1)" in ref[0].message
    assert "resume-beyond-received" in {f.rule for f in analyze_file(buckets)[0]}
    for chunk_size in (2000, 1 << 30):
        res = core.run_local([resume, buckets], chunk_size=chunk_size, block_frames=3, groups=8)
        check_equal({p: (r.findings, r.summary, r.messages) for p, r in res.items()},
                    [resume, buckets])
        assert res[resume].reruns == 2          # the two connections of the name, only
        assert res[buckets].reruns == 2         # other names, buckets or vbuckets stay apart
        whole: list = []
        for _cols in filepass.analyze_whole(buckets, None, whole):
            pass
        assert res[buckets].streams == whole[0].streams
        assert res[buckets].connections == whole[0].connections


def test_local_stages_on_bad_files(tmp_path):
    good = [str(ROOT / "samples" / "add-stream.pcap")]
    bad = make_bad(tmp_path)
    check_equal(local_results(good + bad, chunk_size=200, block_frames=2), good + bad)


def whole_results(paths, options=None, batch_rows=4096) -> tuple[dict, dict]:
    """filepass.analyze_whole on each file: (path -> (findings, summary, messages), path -> rows)."""
    results, rows = {}, {}
    for path in paths:
        got: list = []
        rows[path] = []
        for cols in filepass.analyze_whole(path, options, got, batch_rows):
            rows[path] += [tuple(list(v) if c == "frames" else v
                                 for c, v in zip(tables.MESSAGE_COLUMNS, r))
                           for r in zip(*(cols[c] for c in tables.MESSAGE_COLUMNS))]
        w = got[0]
        results[path] = (w.findings, w.summary, w.messages)
        assert sum(c.messages_c2s + c.messages_s2c for c in w.connections) == w.messages
    return results, rows


def test_whole_file_pass_equals_analyze(tmp_path):
    """The per-file path: analyze's findings and summary, and the messages rows of
    message_row (one decode per message), in batches of any size."""
    paths = [str(ROOT / s) for s in SAMPLES] + make_corpus(tmp_path / "corpus") + \
        make_bad(tmp_path / "bad")
    results, rows = whole_results(paths, batch_rows=5)
    check_equal(results, paths)
    for path in paths:
        ref = []
        try:
            for ev in iter_events(path):
                if type(ev) is Pdu:
                    ref.append(tables.message_row(path, ev))
        except CaptureError:
            pass
        assert rows[path] == ref, path
    opts = Options(any_port=True)
    check_equal(whole_results(paths[-8:], opts)[0], paths[-8:], opts)


def test_fields_text_is_compact_json():
    """The ``fields`` column's text, integer-only objects included, is ``json.dumps``'s."""
    objects = [{}, {"by_seqno": 1 << 64 - 1, "flags": 0}, {"a": True}, {"a": 1.5},
               {"a%d": 3, "b:0": -(1 << 70)}, {1: 2}, {"é\"x": 5}, {"a": [1, 2]},
               {"a": None}, {"by_seqno": 7, "flags": 1}, {"flags": 1, "by_seqno": 7}]
    got = tables.MessageColumns("x").columns([], [])["fields"]
    assert got == []
    texts = tables._json_objects(objects * 2)
    assert texts == [json.dumps(o, separators=(",", ":")) for o in objects * 2]


# -- Spark -----------------------------------------------------------------------------------------

def _spark_available() -> bool:
    if shutil.which("java") is None:
        return False
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return True


# the session-scoped ``spark`` fixture is in conftest.py (shared with test_fuzz_pipeline.py)


def spark_results(spark, paths, out, **kw):
    from dcpdissect.pipeline.spark import run_pipeline
    res = run_pipeline(spark, paths, str(out), progress=None, **kw)
    assert res.paths == paths
    return res, {p: (res.findings[p], res.summaries[p], res.messages[p]) for p in paths}


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
def test_spark_equals_analyze(spark, tmp_path):
    """Every sample plus a multi-connection corpus, in one job."""
    import pyarrow.parquet as pq
    paths = [str(ROOT / s) for s in SAMPLES] + make_corpus(tmp_path / "corpus")
    res, results = spark_results(spark, paths, tmp_path / "out")
    check_equal(results, paths)
    from dcpdissect.reports.markdown import markdown_report
    for path in paths:
        ref, summary = analyze_file(path)
        assert markdown_report(path, res.findings[path], res.summaries[path]) == \
            markdown_report(path, ref, summary), path
    # the messages table holds the dissect --format jsonl records
    table = pq.read_table(tmp_path / "out" / "messages").to_pylist()
    path = str(ROOT / "samples" / "clean-replication.pcap")
    rows = sorted((r for r in table if r["capture_file"] == path), key=lambda r: (r["frame"], r["ts_ns"]))
    ref = [message_record(ev, decode(ev.data)) for ev in iter_events(path) if type(ev) is Pdu]
    ref.sort(key=lambda r: (r["frame"], r["ts_ns"]))
    assert len(rows) == len(ref)
    for got, want in zip(rows, ref):
        for k in ("fields", "names", "frame_infos"):
            got[k] = json.loads(got[k])
        got["cas"] = int(got["cas"])
        want = json.loads(json.dumps(want))
        assert want.pop("type") == "message"        # the table is the type: no such column
        assert {k: got[k] for k in want} == want
    conns = pq.read_table(tmp_path / "out" / "connections").to_pylist()
    assert sum(1 for c in conns if c["capture_file"] == path) == res.summaries[path].connections
    streams = pq.read_table(tmp_path / "out" / "streams").to_pylist()
    mine = [s for s in streams if s["capture_file"] == path]
    assert {(s["connection"], s["vbucket"], s["stream_id"]) for s in mine} == \
        {(1, 0, None), (1, 1, None), (1, 2, None), (2, 5, 7)}
    vb2 = next(s for s in mine if s["vbucket"] == 2)
    assert (json.loads(vb2["items"])["DcpMutation"], vb2["min_seqno"], vb2["max_seqno"]) == \
        (6, 1, 6)
    assert pq.read_table(tmp_path / "out" / "errors").num_rows == 0



@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
def test_spark_tiny_chunks_and_bad_files(spark, tmp_path):
    """Chunks of a few hundred bytes (connections and PDUs span many chunks), with a
    truncated capture, a cut header, a text file and a cut gzip stream among them."""
    import pyarrow.parquet as pq
    good = [str(ROOT / s) for s in ("samples/tcp-reorder.pcap", "samples/tcp-loss-header.pcap",
                                    "samples/pcapng-multi-interface.pcapng",
                                    "samples/violations-garbage.pcap",
                                    "samples/stream-add-stream.pcap")]
    good += make_corpus(tmp_path / "corpus")[1:]
    bad = make_bad(tmp_path / "bad")
    paths = good[:2] + bad[:2] + good[2:] + bad[2:]
    res, results = spark_results(spark, paths, tmp_path / "out", chunk_size=300,
                                 index_on_executors=True)
    check_equal(results, paths)
    errors = pq.read_table(tmp_path / "out" / "errors").to_pylist()
    assert {e["capture_file"] for e in errors} == set(bad)
    for e in errors:
        assert e["message"] == res.summaries[e["capture_file"]].error
    by_file = {e["capture_file"]: e for e in errors}
    assert "not a pcap or pcapng file" in by_file[bad[2]]["reason"]
    assert "file cut mid-record" in by_file[bad[0]]["reason"] and by_file[bad[0]]["frame"] > 1
    assert by_file[bad[3]]["stage"] == "read"
    files = {r["capture_file"]: r for r in pq.read_table(tmp_path / "out" / "files").to_pylist()}
    assert files[bad[0]]["frames"] == res.summaries[bad[0]].frames > 0


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
def test_spark_whole_files_and_chunks(spark, tmp_path):
    """Files up to --chunk-size (and gzip files) are analysed whole, larger ones in chunks;
    a gzip copy of a chunked file gives the same rows in every table."""
    import pyarrow.parquet as pq
    corpus = make_corpus(tmp_path / "corpus")
    big = str(ROOT / "samples" / "clean-replication.pcap")
    copy = tmp_path / "copy.pcap.gz"
    copy.write_bytes(gzip.compress(Path(big).read_bytes(), mtime=0))
    paths = corpus + [big, str(copy)]
    limit = 4000
    assert os.path.getsize(big) > limit and os.path.getsize(corpus[0]) > limit
    res, results = spark_results(spark, paths, tmp_path / "out", chunk_size=limit)
    check_equal(results, paths)
    want = {p for p in paths if p.endswith(".gz") or os.path.getsize(p) <= limit}
    assert res.whole == want and big not in want and str(copy) in want
    assert "whole files" in res.timings and "index" in res.timings

    def key(r):
        return json.dumps(r, sort_keys=True, default=str)

    def table(name):
        by: dict = {}
        for r in pq.read_table(tmp_path / "out" / name).to_pylist():
            if "cas" in r:
                r["cas"] = int(r["cas"])
            by.setdefault(r.pop("capture_file"), []).append(r)
        return {p: sorted(v, key=key) for p, v in by.items()}

    for name in ("messages", "findings", "connections", "streams"):
        got = table(name)
        assert got.get(big) == got.get(str(copy)), name
    messages = table("messages")
    for path in paths:
        ref = [dict(zip(tables.MESSAGE_COLUMNS[1:], tables.message_row(path, ev)[1:]))
               for ev in iter_events(path) if type(ev) is Pdu]
        assert messages.get(path, []) == sorted(ref, key=key), path
    files = {r["capture_file"]: r for r in pq.read_table(tmp_path / "out" / "files").to_pylist()}
    assert {p: files[p]["messages"] for p in paths} == {p: results[p][2] for p in paths}


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
def test_spark_redact_keeps_the_findings_and_hides_the_keys(spark, tmp_path):
    """``redact=True``, one file in chunks and a gzip copy of it read whole, a second file in
    chunks: the findings are analyze's of the originals (rule, frame, connection, vbucket,
    count); the messages rows equal the unredacted rows of the original messages but for
    the key of a document opcode (the protocol tables' list), which is another key of the
    same length; equal keys get equal stand-ins and distinct keys distinct ones across
    files, tasks and both paths (one secret per run); a finding names the key the messages
    table has at its frame."""
    import pyarrow.parquet as pq

    from dcpdissect.protocol import DOCUMENT_OPCODES
    markers = str(ROOT / "samples" / "stream-markers.pcap")
    copy = tmp_path / "stream-markers-copy.pcap.gz"
    copy.write_bytes(gzip.compress(Path(markers).read_bytes(), mtime=0))
    paths = [markers, str(copy), str(ROOT / "samples" / "durability-violations.pcap")]
    res, _ = spark_results(spark, paths, tmp_path / "out", chunk_size=4000, redact=True)
    assert res.whole == {str(copy)}
    for path in paths:
        ref, _ = analyze_file(path)
        assert [(f.rule, f.frame, f.connection, f.vbucket) for f in res.findings[path]] == \
            [(f.rule, f.frame, f.connection, f.vbucket) for f in ref], path

    def order(r):
        return json.dumps({k: v for k, v in r.items() if k != "key"}, sort_keys=True,
                          default=str)

    rows = [r for r in pq.read_table(tmp_path / "out" / "messages").to_pylist()]
    stand_in: dict = {}
    at_frame: dict = {}
    for path in paths:
        got = sorted((r for r in rows if r["capture_file"] == path), key=order)
        want = sorted((dict(zip(tables.MESSAGE_COLUMNS, tables.message_row(path, ev)))
                       for ev in iter_events(path) if type(ev) is Pdu), key=order)
        assert len(got) == len(want) > 20
        for g, w in zip(got, want):
            g["cas"] = int(g["cas"])
            assert order(g) == order(w)
            if w["opcode"] in DOCUMENT_OPCODES and w["key"]:
                assert g["key"] != w["key"] and len(g["key"].encode()) == w["keylen"]
                assert stand_in.setdefault(w["key"], g["key"]) == g["key"]
                at_frame[(path, g["frame"])] = g["key"]
            else:
                assert g["key"] == w["key"]
    assert len(set(stand_in.values())) == len(stand_in) > 20
    # each finding's message is the original's with every quoted key as its stand-in
    table = pq.read_table(tmp_path / "out" / "findings").to_pylist()
    for path in paths:
        want = [re.sub(r"'([^']*)'", lambda m: f"'{stand_in.get(m[1], m[1])}'", f.message)
                for f in analyze_file(path)[0]]
        assert [f.message for f in res.findings[path]] == want, path
        assert [f["message"] for f in table if f["capture_file"] == path] == want, path
    named = [(f["capture_file"], f["frame"], f["message"].split("'")[1]) for f in table
             if f["rule"] == "data-duplicate-key"]
    assert len(named) == 2 and all(at_frame[(p, n)] == key for p, n, key in named)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
def test_spark_writes_the_tables_when_tasks_cannot(spark, tmp_path, monkeypatch):
    """When --out is not a local directory, Spark writes every table, the whole-file
    results coming back through an accumulator."""
    import pyarrow.parquet as pq

    from dcpdissect.pipeline import spark as sp
    monkeypatch.setattr(sp, "_local_dir", lambda _spark, _out: None)
    paths = make_corpus(tmp_path / "corpus") + [str(ROOT / "samples" / "clean-replication.pcap")]
    res, results = spark_results(spark, paths, tmp_path / "out", chunk_size=4000)
    check_equal(results, paths)
    assert res.whole and set(paths) - res.whole
    out = tmp_path / "out"
    assert pq.read_table(out / "messages").num_rows == sum(r[2] for r in results.values())
    assert pq.read_table(out / "findings").num_rows == sum(len(r[0]) for r in results.values())
    assert pq.read_table(out / "connections").num_rows == \
        sum(r[1].connections for r in results.values())
    assert pq.read_table(out / "files").num_rows == len(paths)
    assert pq.read_table(out / "streams").num_rows > 0


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
@pytest.mark.parametrize("tasks_write", [True, False], ids=["tasks-write", "spark-writes"])
def test_spark_coupled_groups(spark, tmp_path, monkeypatch, tasks_write):
    """Groups run again replace their first run everywhere: findings as analyze's, and
    every message once in the messages table (whoever writes it)."""
    import pyarrow.parquet as pq

    from dcpdissect.pipeline import spark as sp
    if not tasks_write:
        monkeypatch.setattr(sp, "_local_dir", lambda _spark, _out: None)
    resume, buckets = str(tmp_path / "resume.pcap"), str(tmp_path / "buckets.pcap")
    resume_across_groups(resume)
    buckets_capture(buckets)
    paths = [resume, buckets]
    res, results = spark_results(spark, paths, tmp_path / "out", chunk_size=2000)
    check_equal(results, paths)
    assert res.reruns == {resume: 2, buckets: 2} and "analysis again" in res.timings
    rows = pq.read_table(tmp_path / "out" / "messages").to_pylist()
    for path in paths:
        got = sorted((r["frame"], r["connection"], r["opcode"], r["opaque"]) for r in rows
                     if r["capture_file"] == path)
        ref = sorted((ev.frame, ev.conn, decode(ev.data).opcode, decode(ev.data).opaque)
                     for ev in iter_events(path) if type(ev) is Pdu)
        assert got == ref, path
    assert not (tmp_path / "out" / "_staging").exists()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
def test_cli_runs_the_pipeline(tmp_path):
    import pyarrow.parquet as pq

    from dcpdissect.reports.findings import findings_table
    files = ["samples/tcp-loss.pcap", "samples/violations-marker.pcap"]
    out = tmp_path / "tables"
    report = tmp_path / "report.md"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "pipeline", *files, "--out", str(out),
                           "--master", "local[1]", "--chunk-size", "2KB", "--report", str(report),
                           "--fail-on", "never"],
                          check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    for f in files:
        findings, _summary = analyze_file(f)
        assert findings_table(findings) in proc.stdout
    assert "Stage " not in proc.stderr and "Traceback" not in proc.stderr
    assert "pipeline: done" in proc.stderr
    for table in ("messages", "findings", "connections", "streams", "errors", "files"):
        assert (out / table).is_dir()
    assert pq.read_table(out / "findings").num_rows == sum(len(analyze_file(f)[0]) for f in files)
    assert report.read_text().count("tcp-loss.pcap") >= 1


def test_ship_package_zips_the_package():
    import zipfile

    from dcpdissect.pipeline.spark import ship_package

    added = []

    class Context:
        def addPyFile(self, path):
            added.append(path)

    class Session:
        sparkContext = Context()

    path = ship_package(Session())
    assert added == [path]
    names = zipfile.ZipFile(path).namelist()
    assert "dcpdissect/pipeline/core.py" in names and "dcpdissect/analysis/engine.py" in names
    assert not any("__pycache__" in n for n in names)
    shutil.rmtree(os.path.dirname(path))


def test_cli_usage_errors(capsys):
    from dcpdissect.cli import main
    assert main(["pipeline"]) == 2
    assert main(["pipeline", "x.pcap", "--out", "o", "--chunk-size", "lots"]) == 2
    assert main(["pipeline", "x.pcap", "--out", "o", "--conf", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["pipeline", str(ROOT / "docs" / "*.nothing"), "--out", "o"]) == 2
    assert "no capture files" in capsys.readouterr().err


def test_cli_refuses_a_port_out_of_range():
    proc = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "pipeline",
                           str(ROOT / "samples" / "add-stream.pcap"), "--out", "o",
                           "--port", "99999"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["dcpdissect: error: argument --port: port '99999' out "
                                        "of range (1-65535) (see 'dcpdissect pipeline --help')"]


def test_register_cli_adds_the_subcommand():
    import argparse

    from dcpdissect.cli.pipeline import cmd_pipeline, register
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["pipeline", "a.pcap", "dir/", "--out", "o", "--chunk-size", "64MB",
                              "--port", "12000", "--conf", "spark.driver.memory=2g"])
    assert args.func is cmd_pipeline and args.inputs == ["a.pcap", "dir/"]
    assert args.chunk_size == 64 << 20 and args.port == [12000] and args.master is None


def test_message_batch_formats_time_like_iso_time():
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from dcpdissect.pipeline import spark as sp
    from dcpdissect.reports.messages import iso_time
    schema = sp._schemas()["message"][1]
    for ts in ([1_700_000_000_018_830_000, 0, 86_399_999_999_999], [-1, 5], [2**63 - 1]):
        cols = {c: [None] * len(ts) for c in tables.MESSAGE_COLUMNS}
        cols.update(ts_ns=ts, time=None, cas=[2**64 - 1] * len(ts))
        batch = sp._message_batch(cols, schema)
        assert batch.column("time").to_pylist() == [iso_time(t) for t in ts]
        assert batch.column("cas").to_pylist() == [2**64 - 1] * len(ts)


def test_header_columns_equal_the_decoded_messages(tmp_path):
    """Header columns computed from the raw headers (the Spark task's way) equal those
    of the decoded messages, on every sample (flexible, server and unknown magics)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from dcpdissect.pipeline import spark as sp
    schema = sp._schemas()["message"][1]
    for path in [str(ROOT / s) for s in SAMPLES] + make_corpus(tmp_path / "corpus"):
        tables = []
        for header in (True, False):
            tables.append([sp._message_batch(cols, schema).to_pylist()
                           for cols in filepass.analyze_whole(path, None, [], 7, time=header,
                                                          header=header)])
        assert tables[0] == tables[1], path
