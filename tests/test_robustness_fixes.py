"""Regression tests for faults found by fuzzing (dcpdissect.fuzz)."""

from __future__ import annotations

from typing import NamedTuple

from dcpdissect.analysis.rules.structure import check_message
from dcpdissect.codec import decode, encode
from dcpdissect.codec.problems import TRUNCATED
from dcpdissect.reassembly.tcp import TAIL_SEGMENTS, DirectionReassembler, TcpAnomaly


class Seg(NamedTuple):
    seq: int
    ack: int
    flags: int
    payload: bytes
    missing: int = 0


def test_single_pdu_rules_skip_a_truncated_body():
    """A stream request cut inside its extras decodes without fields; the rules must not
    index them (it raised KeyError 'start_seqno')."""
    full = encode(0x53, dict(flags=0, start_seqno=0, end_seqno=5, vbucket_uuid=1,
                             snap_start_seqno=0, snap_end_seqno=0), vbucket=4, opaque=0x204)
    for cut in range(24, len(full)):
        msg = decode(full[:cut])
        assert any(p.code == TRUNCATED for p in msg.problems)
        check_message(msg)
    cut = encode(0x56, dict(start_seqno=0, end_seqno=4, flags=1), layout="V1")[:30]
    check_message(decode(cut))


def test_retransmission_tail_is_bounded_in_segments():
    """Tiny in-order segments: the tail kept for comparing retransmissions is bounded by a
    segment count as well as bytes (a retransmission of old bytes scanned every kept
    segment, which made storms of them quadratic)."""
    rd = DirectionReassembler(1, 1)
    rd.set_isn(999)
    for k in range(20000):
        rd.feed(k + 1, 0, Seg(1000 + k, 0, 0x18, bytes([k & 0xFF])))
    assert len(rd._tail) <= TAIL_SEGMENTS + (TAIL_SEGMENTS >> 2)
    # old bytes: counted as a retransmission, nothing kept to compare with
    assert rd.feed(30000, 0, Seg(1000, 0, 0x18, b"\xff\xff")) == ()
    assert rd.stats["retransmissions"] == 1
    # recent bytes are still compared
    ev = rd.feed(30001, 0, Seg(1000 + 19990, 0, 0x18, b"\x00\x00"))
    assert [e.kind for e in ev if type(e) is TcpAnomaly] == ["overlap_mismatch"]


def test_framer_gives_up_a_pdu_carried_by_too_many_segments():
    """A 100 KB PDU trickling in one byte per segment: the framer keeps at most
    MAX_PDU_SEGMENTS chunks, reports the PDU lost ('cap'), skips the rest of its bytes and
    frames the next PDU."""
    from dcpdissect.reassembly.framing import MAX_PDU_SEGMENTS, LostPdu, Pdu, PduFramer
    big = encode(0x57, dict(by_seqno=1, rev_seqno=1, flags=0, expiration=0), key=b"k",
                 value=b"v" * 100_000, vbucket=0, opaque=1)
    nxt = encode(0x5C, opaque=2)
    framer = PduFramer(1, 1)
    out = []
    for i in range(len(big)):
        out += framer.data(i, big[i:i + 1], i + 1, 0)
        assert len(framer.chunks) <= MAX_PDU_SEGMENTS + 1
    out += framer.data(len(big), nxt, len(big) + 1, 0)
    lost = [e for e in out if type(e) is LostPdu]
    assert [(e.reason, e.need) for e in lost] == [("cap", len(big))]
    assert [e.data for e in out if type(e) is Pdu] == [nxt]


def _jump_capture(path, jump):
    from dcpdissect.fuzz.gen import Flow, pcap_bytes
    msgs = [encode(0x5C, opaque=i) for i in range(10)]
    f = Flow(isn_s=5000)
    frames = f.syn()
    frames += [f.seg(1, m) for m in msgs[:5]]
    f.nxt[1] = (f.nxt[1] + jump) & 0xFFFFFFFF
    frames += [f.seg(1, m) for m in msgs[5:]]
    frames += f.fin()
    path.write_bytes(pcap_bytes(frames))
    return msgs


def test_sequence_jump_beyond_any_window_is_reported_and_decoding_continues(tmp_path):
    """A jump by about 2^31 made every later segment look like an old retransmission:
    the rest of the stream was dropped without a finding."""
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.reassembly.pdus import Pdu, iter_events
    for jump in (1 << 31, (1 << 31) - 1, (1 << 31) + 1, 1 << 30, -(1 << 30)):
        path = tmp_path / "jump.pcap"
        msgs = _jump_capture(path, jump)
        assert [e.data for e in iter_events(str(path)) if type(e) is Pdu] == msgs, hex(jump)
        findings, summary = analyze_file(str(path))
        assert [f.rule for f in findings if f.rule.startswith("tcp-")] == ["tcp-seq-jump"]
        assert summary.tcp["seq_jumps"] == 1 and summary.tcp["retransmissions"] == 0


def test_timestamps_beyond_year_9999_are_formatted():
    """A corrupt pcapng timestamp (year 20291) made iso_time raise ValueError."""
    import datetime as dt

    from dcpdissect.reports.messages import _civil, iso_time
    for secs in (0, 1_700_000_000, -86400 * 366, 951_782_400, 253_402_300_799):
        assert _civil(secs) == dt.datetime.fromtimestamp(secs, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert iso_time(578_200_000_000 * 10**9).startswith("20292-")
    assert iso_time(-10**27).endswith("Z")


def test_closed_connections_leave_no_state(tmp_path):
    """PduStream kept every ConnectionOpened for the whole capture (growing with the
    number of connections in the file, not the open ones)."""
    from dcpdissect.capture.readers import open_capture
    from dcpdissect.fuzz.gen import Flow, pcap_bytes
    from dcpdissect.reassembly.pdus import PduStream
    frames = []
    for k in range(3000):
        f = Flow(sport=1024 + k)
        frames += f.syn() + [f.seg(0, encode(0x5C, opaque=k))] + f.fin()
    path = tmp_path / "sequential.pcap"
    path.write_bytes(pcap_bytes(frames))
    stream = PduStream()
    peak = 0
    with open_capture(str(path)) as reader:
        for _ev in stream.feed_frames(reader):
            peak = max(peak, len(stream.connections))
    list(stream.finish())
    assert stream.summary.connections == 3000 and peak <= 2 and not stream.connections


def test_unanswered_stream_requests_are_bounded():
    from dcpdissect.analysis import rollback_checks
    from dcpdissect.reassembly.connections import ConnectionOpened
    from dcpdissect.reassembly.framing import Pdu
    tracker = rollback_checks.RollbackTracker()
    opened = ConnectionOpened(1, ("10.0.0.2", 50000), ("10.0.0.1", 11210), 1, 0, False)
    for n in range(rollback_checks.MAX_PENDING + 10):
        data = encode(0x54, vbucket=0, opaque=n)
        tracker.on_message(Pdu(1, 0, 0, data, (1,), 1, 0), decode(data), opened)
    assert len(tracker.pending) == rollback_checks.MAX_PENDING


def test_resync_skips_a_fake_header_waiting_for_a_huge_body():
    """After garbage, a plausible header claiming a 20 MB body, then 70 000 one-segment
    messages: the framer does not hold them all waiting for the body; it gives up the
    candidate and frames every message."""
    import struct

    from dcpdissect.reassembly.framing import MAX_PDU_SEGMENTS, Pdu, PduFramer
    fake = struct.pack(">BBHBBHIIQ", 0x80, 0x57, 0, 0, 0, 0, 20_000_000, 0, 0)
    noop = encode(0x5C, opaque=1)
    framer = PduFramer(1, 1, in_sync=False)
    out = framer.data(0, b"\x00" * 10 + fake, 1, 0)
    off = 10 + len(fake)
    for k in range(70_000):
        out += framer.data(off, noop, k + 2, 0)
        off += len(noop)
        assert len(framer.chunks) <= MAX_PDU_SEGMENTS + 1
    out += framer.close()
    assert sum(type(e) is Pdu for e in out) == 70_000


def test_stream_request_with_a_non_integer_sid(tmp_path):
    """A stream request value {"sid": [7]} made the stream key unhashable (TypeError); a
    deeply nested value or purge_seqno 1e999 raised RecursionError / OverflowError."""
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.fuzz.gen import Flow, pcap_bytes
    from dcpdissect.samples.dsl import dcp_open, failover, ok, stream_req
    for value in (b'{"sid":[7]}', b'{"sid":{"a":1}}', b'{"sid":"7"}', b'{"sid":70000}', b'[1]',
                  b'{"purge_seqno":1e999}', b'{"purge_seqno":[1]}',
                  b'{"sid":' * 5000):
        f = Flow()
        frames = f.syn() + [f.seg(0, dcp_open("x", 1, 1)), f.seg(1, ok(0x50, 1)),
                            f.seg(0, stream_req(0, 0x10, value=value)),
                            f.seg(1, failover(0x10, (1, 0)))]
        path = tmp_path / "sid.pcap"
        path.write_bytes(pcap_bytes(frames))
        findings, summary = analyze_file(str(path))
        assert summary.error is None


def test_streams_per_connection_are_bounded():
    from dcpdissect.analysis import streams
    from dcpdissect.analysis.streams import bounds
    from dcpdissect.reassembly.connections import ConnectionOpened
    from dcpdissect.reassembly.framing import Pdu
    from dcpdissect.samples.dsl import stream_req
    tracker = streams.StreamTracker()
    opened = ConnectionOpened(1, ("10.0.0.2", 50000), ("10.0.0.1", 11210), 1, 0, False)
    tracker.on_open(opened)
    limit = bounds.MAX_STREAMS
    bounds.MAX_STREAMS = 50
    try:
        for vb in range(120):
            data = stream_req(vb, 0x1000 + vb)
            tracker.on_message(Pdu(1, 0, 0, data, (1,), 1, 0), decode(data), opened)
        assert len(tracker.conns[1].streams) == 50
    finally:
        bounds.MAX_STREAMS = limit
