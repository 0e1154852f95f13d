"""Stream-semantics rules: markers versus data, OSO, consumer responses, Add Stream
correlation, resume fidelity, start-seqno conventions and suppression."""

import io
import struct
from pathlib import Path

import pytest

from dcpdissect.analysis.conventions import LABELS, classify_file
from dcpdissect.analysis.rules import ERROR, INFO, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.analysis.streams.snapshots import classify
from dcpdissect.capture.pcapwrite import PcapWriter
from feed import feed

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
MINE = {r.id for r in RULES.values() if r.family == "stream"}

CLEAN = ("clean-replication.pcap", "add-stream.pcap", "seed-marker-v1.pcap",
         "seed-marker-v2_0.pcap", "seed-add-stream.pcap", "tcp-reorder.pcap",
         "tcp-retransmit.pcap", "tcp-seq-wrap.pcap", "sll2.pcap", "vlan-qinq.pcap", "ipv6.pcap",
         "loopback-ns-be.pcap", "pcapng-multi-interface.pcapng", "clean-replication.pcap.gz",
         "resume-correct.pcap", "replica-node.pcap", "stream-first-marker-legal.pcap")


def mine(path) -> list[tuple[str, int]]:
    return [(f.rule, f.frame) for f in analyze_file(str(path))[0] if f.rule in MINE]


def test_rules_are_registered_with_severity_and_sample():
    assert len(MINE) >= 20
    for rid in MINE:
        r = RULES[rid]
        assert r.severity in (ERROR, WARNING, INFO) and r.rationale and r.sample
        assert not r.id.startswith("marker-")      # that prefix is the single-PDU marker family


EXPECTED = {
    "stream-markers.pcap": [
        ("data-before-marker", 16),
        ("snapshot-end-not-increasing", 24), ("snapshot-incomplete", 24),
        # vb 2's overlap is no longer reported: its request lacks ActiveVbOnly, so a replica
        # vbucket may serve it (audit #12a); the rule's sample is controls-violations.pcap
        ("snapshot-behind-last-seqno", 40),
        ("snapshot-start-below-requested", 46),
        ("data-outside-snapshot", 52),
        ("data-seqno-not-increasing", 58),
        ("snapshot-incomplete", 64),
        ("data-after-seqno-advanced", 70),
        # vb 8's SeqnoAdvanced on a stream of a connection without HELLO Collections (#11)
        ("seqno-advanced-not-enabled", 70), ("seqno-advanced-not-enabled", 70),
        ("data-duplicate-key", 76),
        ("snapshot-start-inconsistent", 86),
    ],
    "stream-oso.pcap": [("oso-contains-marker", 28), ("oso-unpaired", 34)],
    "stream-consumer.pcap": [
        ("data-before-marker", 16),
        ("consumer-error-response", 18), ("snapshot-ack-unexpected", 36),
        ("snapshot-from-client", 38),
    ],
    "stream-add-stream.pcap": [
        ("stream-opaque-mismatch", 39), ("add-stream-new-opaque-mismatch", 44),
        ("add-stream-rollback", 46), ("add-stream-status-mismatch", 50),
    ],
    "resume-collapsed.pcap": [("resume-collapsed-snapshot", 28)],
    "resume-beyond.pcap": [("resume-beyond-received", 28)],
    "resume-correct.pcap": [],
    "stream-first-marker-legal.pcap": [],
    "stream-first-marker.pcap": [("snapshot-start-inconsistent", f) for f in (32, 34, 40, 46, 74)],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_findings_exact(name):
    assert sorted(mine(SAMPLES / name), key=lambda x: (x[1], x[0])) == \
        sorted(EXPECTED[name], key=lambda x: (x[1], x[0]))


def test_history_marker_exceptions():
    """vb 11: Disk then Disk|History with the same end, overlapping start, a key twice
    under MayContainDuplicates: no finding."""
    assert not [f for f in analyze_file(str(SAMPLES / "stream-markers.pcap"))[0]
                if f.vbucket == 11 and f.rule in MINE]


def test_add_stream_correlation():
    got = {(f.rule, f.frame): f for f in analyze_file(str(SAMPLES / "stream-add-stream.pcap"))[0]
           if f.rule in MINE}
    rules = sorted(r for r, _ in got)
    assert rules == ["add-stream-new-opaque-mismatch", "add-stream-rollback",
                     "add-stream-status-mismatch", "stream-opaque-mismatch"]
    by_rule = {r: f for (r, _), f in got.items()}
    assert "0x2000" in by_rule["add-stream-new-opaque-mismatch"].message
    assert by_rule["stream-opaque-mismatch"].vbucket == 7
    assert "NotMyVbucket" in by_rule["add-stream-status-mismatch"].message
    # the responses come in order vb 5, 6, 8 on the ns_server connection
    frames = [by_rule[r].frame for r in ("add-stream-new-opaque-mismatch", "add-stream-rollback",
                                         "add-stream-status-mismatch")]
    assert frames == sorted(frames) and len(set(frames)) == 3
    assert by_rule["add-stream-new-opaque-mismatch"].connection == 1
    assert [by_rule[r].vbucket for r in ("add-stream-new-opaque-mismatch", "add-stream-rollback",
                                         "add-stream-status-mismatch")] == [5, 6, 8]


def test_consumer_error_says_what_the_producer_did():
    f = next(f for f in analyze_file(str(SAMPLES / "stream-consumer.pcap"))[0]
             if f.rule == "consumer-error-response")
    assert "Erange" in f.message and "closed (fin at frame" in f.message
    assert f.vbucket == 0


def test_clean_samples_have_no_stream_warnings_or_errors():
    for name in CLEAN:
        bad = [(f.rule, f.frame, f.message) for f in analyze_file(str(SAMPLES / name))[0]
               if f.rule in MINE and f.severity != INFO]
        assert bad == [], name


def test_resume_pair_from_the_design_discussion():
    collapsed = [f for f in analyze_file(str(SAMPLES / "resume-collapsed.pcap"))[0]
                 if f.rule in MINE]
    assert [f.rule for f in collapsed] == ["resume-collapsed-snapshot"]
    f = collapsed[0]
    assert f.fields["previous_snapshot"] == "[1,4]" and f.fields["last_received"] == 3
    assert (f.fields["snap_start_seqno"], f.fields["snap_end_seqno"]) == (3, 3)
    assert f.connection == 2 and f.context == (12,)       # the [1,4] marker on connection 1
    assert mine(SAMPLES / "resume-correct.pcap") == []


def test_suppression_after_gap_and_for_unseen_streams():
    # a segment lost inside a document: framing holds, nothing is hidden, nothing suppressed
    loss = analyze_file(str(SAMPLES / "tcp-loss.pcap"))[0]
    whole = analyze_file(str(SAMPLES / "tcp-seq-wrap.pcap"))[0]     # the same stream, whole
    assert [f.rule for f in loss if f.rule in MINE] == [f.rule for f in whole if f.rule in MINE]
    assert "semantics-suppressed" not in {f.rule for f in loss}
    # a segment lost across message boundaries hides messages: said once
    header = analyze_file(str(SAMPLES / "tcp-loss-header.pcap"))[0]
    sup = [f for f in header if f.rule == "semantics-suppressed"]
    assert len(sup) == 1 and "hid messages" in sup[0].message
    assert {f.rule for f in header if f.rule in MINE} <= {f.rule for f in whole} | {
        "semantics-suppressed"}
    mid = [f for f in analyze_file(str(SAMPLES / "tcp-mid-stream.pcap"))[0] if f.rule in MINE]
    assert mid and {f.rule for f in mid} == {"semantics-suppressed"}
    assert len({f.vbucket for f in mid}) == len(mid)     # one per stream


def test_marker_conventions():
    got = classify_file(str(SAMPLES / "stream-markers.pcap"))
    assert set(got.values()) <= set(LABELS)
    by_frame = {frame: label for (_, frame, _), label in got.items()}
    assert by_frame[22] == "first-of-stream"
    assert by_frame[32] == "checkpoint"
    assert by_frame[40] == "dropped"
    assert by_frame[86] == "inconsistent"
    assert [by_frame[f] for f in (92, 94)] == ["first-of-stream", "backfill"]   # vb 11
    assert set(classify_file(str(SAMPLES / "seed-marker-v1.pcap")).values()) == {"unknown"}
    clean = classify_file(str(SAMPLES / "clean-replication.pcap"))
    assert "inconsistent" not in clean.values() and "first-item" in clean.values()


def test_classify_conventions():
    req = {"start_seqno": 10, "snap_start_seqno": 8, "snap_end_seqno": 12, "flags": 0}
    mem, chk, disk = 0x01, 0x05, 0x06
    assert classify(8, mem, True, req, 11) == ("first-of-stream", None)
    assert classify(8, disk, True, req, None) == ("first-of-stream", None)
    # the first marker starts at min(snap_start, computed start): the requested snap_start,
    # never at start or a first item above it (audit #13a), whatever its kind
    for flags, first_item in ((disk, 13), (mem, 11), (chk, 11), (mem, 13), (disk, None)):
        label, why = classify(10, flags, True, req, first_item)
        assert label == "inconsistent" and "the requested snap_start 8" in why
    # snapshot-marker.md's memory example (marker start X+n after a request from X)
    # contradicts ActiveStream::snapshot, which applies the min to the first marker
    assert classify(13, mem, True, req, 13)[0] == "inconsistent"
    # a collection filter does not move the first marker either (MB-47009 path)
    assert classify(9, chk, True, {**req, "filtered": True}, 11)[0] == "inconsistent"
    # FromLatest: the vbucket's high seqno, below the first item
    latest = {**req, "flags": 0x40}
    assert classify(30, mem, True, latest, 31) == ("first-of-stream", None)
    assert classify(30, chk, True, latest, None) == ("first-of-stream", None)
    assert classify(31, mem, True, latest, 31)[0] == "inconsistent"
    # not the first (after OSO): the other conventions
    assert classify(13, chk, False, req, 14) == ("checkpoint", None)
    assert classify(20, chk, False, req, 23) == ("checkpoint", None)
    assert classify(20, disk, False, req, 20) == ("backfill", None)
    label, why = classify(20, mem, False, req, 23)
    assert label == "inconsistent" and "first-item" in why
    label, why = classify(25, chk, False, req, 23)
    assert label == "inconsistent" and "checkpoint" in why
    assert classify(20, mem, False, req, None) == ("no-items", None)
    assert classify(20, mem, False, {**req, "filtered": True}, 23) == ("first-item", None)
    assert classify(20, mem, False, {**req, "filtered": False}, 23)[0] == "inconsistent"


# --- a capture crafted by hand -------------------------------------------------------------

CLI, SRV = ("10.9.0.2", 40000), ("10.9.0.1", 11210)


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _ip(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


def _frame(src, dst, seq, ack, flags, payload=b"") -> bytes:
    tcp = struct.pack(">HHIIBBHHH", src[1], dst[1], seq, ack, 5 << 4, flags, 65535, 0, 0)
    pseudo = _ip(src[0]) + _ip(dst[0]) + struct.pack(">BBH", 0, 6, len(tcp) + len(payload))
    tcp = tcp[:16] + struct.pack(">H", _csum(pseudo + tcp + payload)) + tcp[18:]
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 1, 0x4000, 64, 6,
                     0, _ip(src[0]), _ip(dst[0]))
    ip = ip[:10] + struct.pack(">H", _csum(ip)) + ip[12:]
    eth = b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00"
    return eth + ip + tcp + payload


def _mcbp(magic, opcode, extras=b"", key=b"", value=b"", vb_or_status=0, opaque=0) -> bytes:
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", magic, opcode, len(key), len(extras), 0, vb_or_status,
                       len(body), opaque, 0) + body


def _marker(start, end, flags, vb=3, opaque=0x77) -> bytes:
    return _mcbp(0x80, 0x56, struct.pack(">QQI", start, end, flags), vb_or_status=vb, opaque=opaque)


def _mutation(seqno, key, vb=3, opaque=0x77) -> bytes:
    extras = struct.pack(">QQIIIHB", seqno, 1, 0, 0, 0, 0, 0)
    return _mcbp(0x80, 0x57, extras, key, b"v", vb_or_status=vb, opaque=opaque)


def test_hand_crafted_capture_points_at_the_right_frames(tmp_path):
    open_req = _mcbp(0x80, 0x50, struct.pack(">II", 0, 1), b"hand")
    open_rsp = _mcbp(0x81, 0x50)
    sreq = _mcbp(0x80, 0x53, struct.pack(">IIQQQQQ", 0, 0, 0, 2**64 - 1, 0, 0, 0),
                 vb_or_status=3, opaque=0x77)
    srsp = _mcbp(0x81, 0x53, value=struct.pack(">QQ", 0xAB, 0), opaque=0x77)
    split = _mutation(6, b"k6")
    s2c = [open_rsp, srsp, _marker(0, 2, 0x05) + _mutation(1, b"k1"), _mutation(5, b"k5"),
           _marker(1, 1, 0x05), split[:30], split[30:]]
    c2s = [open_req, sreq]
    frames = []
    cseq, sseq = 1000, 5000
    frames.append(_frame(CLI, SRV, cseq, 0, 0x02))                      # 1 SYN
    frames.append(_frame(SRV, CLI, sseq, cseq + 1, 0x12))               # 2 SYN-ACK
    cseq, sseq = cseq + 1, sseq + 1
    frames.append(_frame(CLI, SRV, cseq, sseq, 0x10))                   # 3 ACK

    def c(p):
        nonlocal cseq
        frames.append(_frame(CLI, SRV, cseq, sseq, 0x18, p))
        cseq += len(p)

    def s(p):
        nonlocal sseq
        frames.append(_frame(SRV, CLI, sseq, cseq, 0x18, p))
        sseq += len(p)

    c(c2s[0]); s(s2c[0]); c(c2s[1])                                    # 4 5 6
    for p in s2c[1:]:                                                   # 7 .. 12
        s(p)
    buf = io.BytesIO()
    w = PcapWriter(buf)
    for i, f in enumerate(frames):
        w.write(1_700_000_000_000_000_000 + i * 1000, f)
    path = tmp_path / "hand.pcap"
    path.write_bytes(buf.getvalue())
    # 7 failover, 8 marker [0,2] + item 1, 9 item 5, 10 marker [1,1], 11-12 item 6 split
    assert mine(path) == [("data-outside-snapshot", 9), ("snapshot-behind-last-seqno", 10),
                          ("data-outside-snapshot", 12)]
    split_finding = [f for f in analyze_file(str(path))[0] if f.frame == 12][0]
    assert split_finding.frames == (11, 12) and split_finding.fields["seqno"] == 6
    assert classify_file(str(path)) == {(1, 8, 64): "first-of-stream", (1, 10, 224): "dropped"}


# --- events fed directly ---------------------------------------------------------------------

def _run(*messages, rules=MINE):
    """(rule, index) of the findings of ``rules`` (the stream rules by default)."""
    return [(r, i) for r, i in feed(*messages) if r in rules]


def _setup(vb=0, opaque=0x10, value=b"", oso=False, **kw):
    from dcpdissect.codec import encode
    from dcpdissect.samples.dsl import control, dcp_open, failover, ok, stream_req
    nego = [(0, encode(0x1F, key=b"c", value=b"\x00\x12", opaque=8)),
            (1, ok(0x1F, 8, value=b"\x00\x12")),
            (0, control("enable_out_of_order_snapshots", "true", 9)), (1, ok(0x5E, 9))]
    return ([(0, dcp_open("t", 1, 1)), (1, ok(0x50, 1))] + (nego if oso else []) +
            [(0, stream_req(vb, opaque, value=value, **kw)), (1, failover(opaque, (7, 0)))])


def test_error_response_to_a_marker_is_not_an_unexpected_ack():
    from dcpdissect.samples.dsl import marker, mutation, ok
    base = _setup() + [(1, marker(0, 0x10, 0, 1, "memory+checkpoint")),
                       (1, mutation(0, 0x10, 1, "a", b"1"))]
    assert _run(*base, (0, ok(0x56, 0x10, status=0x22))) == []
    assert _run(*base, (0, ok(0x56, 0x10))) == [("snapshot-ack-unexpected", 6)]


def test_stream_request_value_needs_hello_collections():
    from dcpdissect.codec import encode
    from dcpdissect.samples.dsl import ok
    hello = [(0, encode(0x1F, key=b"c", value=b"\x00\x12", opaque=9)),
             (1, ok(0x1F, 9, value=b"\x00\x12"))]
    every = set(RULES)
    assert _run(*hello, *_setup(value=b'{"collections":["8"]}'), rules=every) == []
    hello_no = [(0, encode(0x1F, key=b"c", value=b"\x00\x06", opaque=9)),
                (1, ok(0x1F, 9, value=b"\x00\x06"))]
    assert _run(*hello_no, *_setup(value=b'{"collections":["8"]}'), rules=every) == \
        [("value-presence", 4)]
    # no HELLO seen: not judged
    assert _run(*_setup(value=b'{"collections":["8"]}'), rules=every) == []


def test_oso_snapshot_then_memory_marker():
    from dcpdissect.codec import encode
    from dcpdissect.samples.dsl import marker, mutation
    oso = lambda f: (1, encode(0x65, {"flags": f}, vbucket=0, opaque=0x10))
    # OSO negotiated (HELLO Collections, enable_out_of_order_snapshots): audit #11
    msgs = _setup(oso=True) + [oso(1), (1, mutation(0, 0x10, 4, "a", b"")),
                       (1, mutation(0, 0x10, 2, "b", b"")),
                       (1, encode(0x64, {"by_seqno": 5}, vbucket=0, opaque=0x10)), oso(2),
                       (1, marker(0, 0x10, 6, 7, "memory+checkpoint")),
                       (1, mutation(0, 0x10, 6, "a", b"")), (1, mutation(0, 0x10, 7, "b", b""))]
    assert _run(*msgs) == []
    # a key twice inside one OSO snapshot; an item at the OSO baseline after the end
    dup = _setup(oso=True) + [oso(1), (1, mutation(0, 0x10, 4, "a", b"")),
                      (1, mutation(0, 0x10, 2, "a", b"")), oso(2),
                      (1, marker(0, 0x10, 5, 6, "memory+checkpoint")),
                      (1, mutation(0, 0x10, 4, "c", b"")), (1, mutation(0, 0x10, 6, "b", b""))]
    assert _run(*dup) == [("data-duplicate-key", 10), ("data-seqno-not-increasing", 13),
                          ("data-outside-snapshot", 13)]


def test_findings_per_stream_and_rule_are_capped():
    from dcpdissect.samples.dsl import marker, mutation
    msgs = _setup() + [(1, marker(0, 0x10, 0, 2, "memory+checkpoint"))] + \
        [(1, mutation(0, 0x10, 100 + i, f"k{i}", b"")) for i in range(30)]
    got = _run(*msgs)
    assert got.count(("data-outside-snapshot", 5)) == 1
    assert len([r for r, _ in got if r == "data-outside-snapshot"]) == 10


def _resume(request_kw, first_items=(2, 3)):
    """Connection 1 (which holds seqno 1) gets marker [1,4] and ``first_items``, closes;
    connection 2 (same DcpOpen name and server) sends a stream request with ``request_kw``."""
    from dcpdissect.analysis.engine import Analyzer
    from dcpdissect.reassembly.connections import ConnectionClosed, ConnectionOpened
    from dcpdissect.reassembly.framing import Pdu
    from dcpdissect.samples.dsl import dcp_open, failover, marker, mutation, ok, stream_req
    a = Analyzer()
    out, frame = [], [0]

    def conn(cid, port, msgs, close=True):
        frame[0] += 1
        out.extend(a.feed(ConnectionOpened(cid, ("10.0.0.2", port), ("10.0.0.1", 11210),
                                           frame[0], 0, False)))
        off = [0, 0]
        for d, data in msgs:
            frame[0] += 1
            out.extend(a.feed(Pdu(cid, d, off[d], data, (frame[0],), frame[0], frame[0])))
            off[d] += len(data)
        if close:
            frame[0] += 1
            out.extend(a.feed(ConnectionClosed(cid, frame[0], 0, "fin")))

    opening = [(0, dcp_open("r", 1, 1)), (1, ok(0x50, 1))]
    conn(1, 5000, opening + [(0, stream_req(0, 0x10, start=1, uuid=0x1111)),
                             (1, failover(0x10, (0x1111, 0))),
                             (1, marker(0, 0x10, 1, 4, "memory+checkpoint"))]
         + [(1, mutation(0, 0x10, i, f"k{i}", b"")) for i in first_items])
    conn(2, 5001, opening + [(0, stream_req(0, 0x20, uuid=0x1111, **request_kw))], close=False)
    out += a.finish()
    return [f.rule for f in out if f.rule in MINE]


def test_resume_after_an_unfinished_oso_snapshot():
    from dcpdissect.analysis.engine import Analyzer
    from dcpdissect.codec import encode
    from dcpdissect.reassembly.connections import ConnectionClosed, ConnectionOpened
    from dcpdissect.reassembly.framing import Pdu
    from dcpdissect.samples.dsl import dcp_open, failover, mutation, ok, stream_req

    def run(start):
        a, out, n = Analyzer(), [], 0
        for cid, msgs in ((1, [(0, stream_req(0, 0x10)), (1, failover(0x10, (9, 0))),
                               (1, encode(0x65, {"flags": 1}, opaque=0x10)),
                               (1, mutation(0, 0x10, 7, "a", b"")),
                               (1, mutation(0, 0x10, 3, "b", b""))]),
                          (2, [(0, stream_req(0, 0x20, start=start, uuid=9))])):
            n += 1
            out += a.feed(ConnectionOpened(cid, ("10.0.0.2", 5000 + cid), ("10.0.0.1", 11210),
                                           n, 0, False))
            off = [0, 0]
            # OSO negotiated (audit #11): HELLO Collections and enable_out_of_order_snapshots
            for d, data in [(0, dcp_open("o", 1, 1)), (1, ok(0x50, 1)),
                            (0, encode(0x1F, key=b"c", value=b"\x00\x12", opaque=8)),
                            (1, ok(0x1F, 8, value=b"\x00\x12")),
                            (0, encode(0x5E, key=b"enable_out_of_order_snapshots",
                                       value=b"true", opaque=9)), (1, ok(0x5E, 9))] + msgs:
                n += 1
                out += a.feed(Pdu(cid, d, off[d], data, (n,), n, n))
                off[d] += len(data)
            n += 1
            out += a.feed(ConnectionClosed(cid, n, 0, "fin"))
        out += a.finish()
        return [f.rule for f in out if f.rule in MINE]

    assert run(0) == []
    assert run(7) == ["resume-beyond-received"]


def test_resume_fidelity_variants():
    assert _resume(dict(start=3, snap_start=1, snap_end=4)) == []
    assert _resume(dict(start=3, snap_start=3, snap_end=3)) == ["resume-collapsed-snapshot"]
    assert _resume(dict(start=3, snap_start=3, snap_end=4)) == ["resume-collapsed-snapshot"]
    assert _resume(dict(start=3, snap_start=2, snap_end=4)) == []
    assert _resume(dict(start=4, snap_start=1, snap_end=4)) == ["resume-beyond-received"]
    assert _resume(dict(start=2, snap_start=1, snap_end=4)) == []          # asks again for 3
    # the snapshot was complete: [4,4] start 4 is right
    assert _resume(dict(start=4, snap_start=4, snap_end=4), first_items=(2, 3, 4)) == []


def test_consumer_statuses_meaning_the_stream_is_gone_are_not_rejections():
    from dcpdissect.samples.dsl import marker, mutation, ok
    base = _setup() + [(1, marker(0, 0x10, 0, 1, "memory+checkpoint")),
                       (1, mutation(0, 0x10, 1, "a", b"1"))]
    for status in (0x01, 0x02, 0x07, 0x0A, 0x0B):
        assert _run(*base, (0, ok(0x57, 0x10, status=status))) == []
    assert _run(*base, (0, ok(0x57, 0x10, status=0x04))) == [("consumer-error-response", 6)]


def test_mutation_then_deletion_of_one_key_in_a_snapshot_is_a_duplicate(tmp_path):
    from dcpdissect.samples import netsynth as ns
    from dcpdissect.samples.dsl import (
        Script,
        dcp_open,
        deletion,
        failover,
        marker,
        mutation,
        ok,
        stream_req,
    )
    s = Script(ns.Endpoint("10.9.0.2", 40000), ns.Endpoint("10.9.0.1", 11210))
    s.c2s(dcp_open("dup", 1, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(stream_req(1, 9))
    s.s2c(failover(9, (0x77, 0)))
    s.s2c(marker(1, 9, 0, 2, "memory"), mutation(1, 9, 1, "k", b"{}"), deletion(1, 9, 2, "k"))
    s.conv.close()
    path = tmp_path / "dup.pcap"
    ns.write_pcap(str(path), [s.conv])
    findings, _ = analyze_file(str(path))
    assert [f.rule for f in findings if f.severity != "info"] == ["data-duplicate-key"]


def test_first_marker_findings_carry_their_marker():
    """Each snapshot-start-inconsistent of stream-first-marker.pcap is the first marker of
    its vbucket (decoded from the capture, not by the analyzer) with the start written in
    samples/scenarios_streams.first_marker_violations."""
    from dcpdissect.codec import decode
    from dcpdissect.reassembly.framing import Pdu
    from dcpdissect.reassembly.pdus import iter_events

    path = SAMPLES / "stream-first-marker.pcap"
    markers = {}
    for ev in iter_events(str(path)):
        if type(ev) is Pdu:
            m = decode(ev.data)
            if m.opcode == 0x56 and m.vbucket not in markers:
                markers[m.vbucket] = (ev.frame, m.fields["start_seqno"])
    found = {f.vbucket: f for f in analyze_file(str(path))[0]
             if f.rule == "snapshot-start-inconsistent"}
    # vb: (the requested snap_start, the marker's start)
    assert {vb: (markers[vb][1]) for vb in found} == {10: 1, 11: 5, 12: 11, 13: 3, 14: 1}
    for vb, f in found.items():
        assert f.frame == markers[vb][0] and f.severity == WARNING
    assert "the requested snap_start 3" in found[11].message
    assert "below the first item's seqno 11" in found[12].message
    assert found[14].connection == 2          # the consumer connection: data client→server
