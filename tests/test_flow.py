"""Flow control, noop liveness, unrequested responses and the producer's datatypes
(analysis/streams/flow.py): samples built by dcpdissect/samples/scenarios_flow.py, frames
written from their construction."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import INFO, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.analysis.streams.flow import MAX_POINTS, ConnFlow, Flow
from dcpdissect.codec import decode, encode
from dcpdissect.reassembly.pdus import iter_events
from dcpdissect.reassembly.framing import Pdu
from dcpdissect.samples.builder import build
from dcpdissect.samples.dsl import control, dcp_open, failover, marker, ok, stream_req
from dcpdissect.samples.scenarios_flow import SPECS, ack, mut, noop
from feed import GAP, feed

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
FLOW = {r.id for r in RULES.values() if r.family == "flow"}


def flow_findings(name):
    return sorted((f.rule, f.frame) for f in analyze_file(str(SAMPLES / name))[0]
                  if f.rule in FLOW)


def pdu_at(name, frame):
    """The messages that complete in ``frame``."""
    return [decode(ev.data) for ev in iter_events(str(SAMPLES / name))
            if type(ev) is Pdu and ev.frame == frame]


def test_samples_are_built_from_their_specs():
    for spec in SPECS:
        assert (SAMPLES / spec.filename).read_bytes() == build(spec).data, \
            f"samples/{spec.filename} is stale: python -m dcpdissect.regen"


def test_rules_are_registered_with_kv_engine_references():
    assert FLOW == {"buffer-ack-exceeds-sent", "flow-control-window-exceeded",
                    "noop-interval-exceeded", "response-without-request",
                    "producer-datatype-not-negotiated", "flow-control-undecided",
                    "consumer-idle-timeout"}
    for rid in FLOW:
        assert ".cc" in RULES[rid].rationale and "::" in RULES[rid].rationale
        assert (SAMPLES / RULES[rid].sample).is_file()
    assert RULES["flow-control-undecided"].severity == INFO
    assert RULES["flow-control-window-exceeded"].severity == WARNING
    assert RULES["noop-interval-exceeded"].severity == WARNING
    assert RULES["buffer-ack-exceeds-sent"].severity == WARNING
    assert RULES["consumer-idle-timeout"].severity == WARNING


def test_legal_sample_is_clean():
    assert flow_findings("flow-legal.pcap") == []
    bad = [f for f in analyze_file(str(SAMPLES / "flow-legal.pcap"))[0] if f.severity != INFO]
    assert bad == []


# (rule, frame, opcode, request?) from scenarios_flow._violations_*
VIOLATIONS = [
    ("flow-control-window-exceeded", 34, 0x57, True),     # mutation 3: 358 >= 300
    ("buffer-ack-exceeds-sent", 38, 0x5D, True),          # ack 1000, 157 unacked
    ("producer-datatype-not-negotiated", 40, 0x57, True),  # snappy, no HELLO Snappy
    ("producer-datatype-not-negotiated", 42, 0x57, True),  # xattr, no include_xattrs
    ("flow-control-window-exceeded", 67, 0x57, True),     # consumer leg: 201 >= 200
    ("noop-interval-exceeded", 74, 0x5C, True),           # 20 s > 2 * 4 s + 5 s
    ("response-without-request", 78, 0x57, False),        # consumer answers opaque 0x999
    ("response-without-request", 80, 0x5E, False),        # server answers opaque 77
    # 100 s later: noops left unanswered past dcp_idle_timeout (360 s)
    ("consumer-idle-timeout", 176, 0x5C, True),           # consumer leg: ns_server closes
    ("consumer-idle-timeout", 178, 0x5C, True),           # the producer keeps the connection
    ("consumer-idle-timeout", 180, 0x5C, True),           # the producer closes
]


def test_violations_are_flagged_at_their_frames():
    assert flow_findings("flow-violations.pcap") == sorted((r, f) for r, f, _, _ in VIOLATIONS)


@pytest.mark.parametrize("rid,frame,opcode,is_request", VIOLATIONS)
def test_violation_frames_carry_the_offending_message(rid, frame, opcode, is_request):
    msgs = pdu_at("flow-violations.pcap", frame)
    assert [(m.opcode, m.is_request) for m in msgs] == [(opcode, is_request)]


def test_undecided_says_so_once():
    assert flow_findings("flow-undecided.pcap") == [("flow-control-undecided", 5)]


def test_producer_datatype_fields():
    fs = {f.frame: f for f in analyze_file(str(SAMPLES / "flow-violations.pcap"))[0]
          if f.rule == "producer-datatype-not-negotiated"}
    assert fs[40].fields == {"datatype": 0x03} and "snappy" in fs[40].message
    assert fs[42].fields == {"datatype": 0x05} and "xattr" in fs[42].message


# --- one connection, message by message ---------------------------------------------------

def _producer(window="300", *extra):
    msgs = [(0, dcp_open("p", 0x01, 1)), (1, ok(0x50, 1)),
            (0, control("connection_buffer_size", window, 2)), (1, ok(0x5E, 2))]
    for i, (k, v) in enumerate(extra):
        msgs += [(0, control(k, v, 10 + i)), (1, ok(0x5E, 10 + i))]
    return msgs + [(0, stream_req(0, 0x100)), (1, failover(0x100, (1, 0))),
                   (1, marker(0, 0x100, 0, 9, "memory+checkpoint"))]


def test_the_message_that_crosses_the_window_is_legal_and_a_stream_end_is_not_judged():
    msgs = _producer() + [(1, mut(0, 0x100, 1)), (1, mut(0, 0x100, 2)),
                          (1, encode(0x55, {"reason": 0}, vbucket=0, opaque=0x100))]
    assert [r for r, _ in feed(*msgs) if r in FLOW] == []


def test_acks_reopen_the_window():
    msgs = _producer() + [(1, mut(0, 0x100, 1)), (1, mut(0, 0x100, 2)), (0, ack(44 + 157, 5)),
                          (1, mut(0, 0x100, 3)), (1, mut(0, 0x100, 4))]
    got = [(r, i) for r, i in feed(*msgs) if r in FLOW]
    assert got == [("flow-control-window-exceeded", len(msgs) - 1)]


def test_without_a_window_acks_and_sends_are_not_judged():
    msgs = _producer("0") + [(1, mut(0, 0x100, s)) for s in range(1, 6)] + [(0, ack(9999, 5))]
    assert [r for r, _ in feed(*msgs) if r in FLOW] == []


def test_a_gap_stops_the_judgements():
    msgs = _producer() + [(1, GAP), (1, mut(0, 0x100, 1)), (1, mut(0, 0x100, 2)),
                          (1, mut(0, 0x100, 3)), (0, ack(5000, 5)), (0, ok(0x57, 0x777))]
    assert [r for r, _ in feed(*msgs) if r in FLOW] == []


def test_the_consumers_noop_answers_are_left_to_the_controls_rules():
    msgs = _producer("0", ("enable_noop", "true")) + [(1, noop(10000001)),
                                                       (0, ok(0x5C, 42))]
    got = [r for r, _ in feed(*msgs)]
    assert "response-without-request" not in got
    assert "consumer-noop-opaque-mismatch" in got


def test_noops_on_time_pass_and_a_late_answer_is_not_the_producers_fault():
    def at(ts, d, data):
        return ts, d, data
    msgs = [(0, 0, dcp_open("p", 0x01, 1)), (0, 1, ok(0x50, 1)),
            (0, 0, control("enable_noop", "true", 2)), (0, 1, ok(0x5E, 2)),
            (0, 0, control("set_noop_interval", "10", 3)), (0, 1, ok(0x5E, 3)),
            (12, 1, noop(10000001)),
            (60, 0, ok(0x5C, 10000001)),     # the consumer answered late
            (80, 1, noop(10000002)),          # 20 s after the answer: fine
            (81, 0, ok(0x5C, 10000002)),
            (112, 1, noop(10000003))]         # 31 s: beyond 2 * 10 + 5
    from dcpdissect.analysis.engine import Analyzer
    from dcpdissect.reassembly.connections import ConnectionOpened
    a = Analyzer()
    out = a.feed(ConnectionOpened(1, ("10.0.0.2", 5000), ("10.0.0.1", 11210), 1, 0, False))
    off = [0, 0]
    for i, (t, d, data) in enumerate(msgs, start=2):
        out += a.feed(Pdu(1, d, off[d], data, (i,), i, t * 1_000_000_000))
        off[d] += len(data)
    out += a.finish()
    assert [(f.rule, f.frame - 2) for f in out if f.rule in FLOW] == [
        ("noop-interval-exceeded", len(msgs) - 1)]


# --- the timeline -------------------------------------------------------------------------

def test_timeline_is_downsampled():
    class C:
        id, mid_stream = 1, False
    rec = ConnFlow(C())
    f = Flow()
    for i in range(10 * MAX_POINTS):
        rec.sent += 10
        f._point(rec, i)
    assert len(rec.points) <= MAX_POINTS
    assert rec.points[0] == [0, 10] and rec.points[-1][0] > 9 * MAX_POINTS


def test_analyze_jsonl_prints_flow_control_records_after_the_findings():
    out = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "analyze",
                          str(SAMPLES / "flow-legal.pcap"), "--format", "jsonl"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    recs = [json.loads(line) for line in out.splitlines()]
    flow = [r for r in recs if r.get("type") == "flow_control"]
    assert recs[len(recs) - len(flow):] == flow       # after every finding
    assert [r["connection"] for r in flow] == [1, 2, 4]
    unacked = [u for _, u in flow[0]["points"]]
    assert unacked == [0, 44, 201, 358, 515, 0, 78, 176, 333, 0]
    assert [u for _, u in flow[1]["points"]] == [0, 44, 201, 358, 0, 157, 0]
    assert all(isinstance(t, str) and t.endswith("Z") for t, _ in flow[0]["points"])


# --- the consumer's silence and the producer's idle disconnect -------------------------------

@pytest.mark.tshark
def test_idle_timeout_findings_name_what_closed_the_connection():
    """Each consumer-idle-timeout of flow-violations.pcap: tshark (not the analyzer) shows
    more than 360 s between the consumer's last message and the first FIN or the next
    message, and that FIN is sent by the side the finding names."""
    found = {f.frame: f for f in analyze_file(str(SAMPLES / "flow-violations.pcap"))[0]
             if f.rule == "consumer-idle-timeout"}
    assert sorted(found) == [176, 178, 180]
    rows = subprocess.run(["tshark", "-r", str(SAMPLES / "flow-violations.pcap"), "-T", "fields",
                           "-e", "frame.number", "-e", "frame.time_epoch", "-e", "tcp.srcport",
                           "-e", "tcp.flags.fin"], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    frames = {int(n): (float(t), int(port), fin in ("1", "True"))
              for n, t, port, fin in (r.split("\t") for r in rows)}
    for frame, closed_by in ((180, "producer"), (176, "producer"), (178, None)):
        f = found[frame]
        heard, end = f.context
        assert frames[end][0] - frames[heard][0] > 360 and f.fields["closed_by"] == closed_by
        assert f.severity == WARNING and f.fields["noop_opaque"] in (10000001, 10000002)
    # the producer connection: the server's FIN; the consumer leg: ns_server's (the client)
    assert frames[found[180].context[1]][1:] == (11210, True)
    assert frames[found[176].context[1]][1] != 11209 and frames[found[176].context[1]][2]
    assert "its idle disconnect (DcpProducer::maybeDisconnect)" in found[180].message
    assert "its idle disconnect" in found[176].message
    assert "still open" in found[178].message and "above the default" in found[178].message


def _timed(msgs, *, mid=False, close=None):
    """(seconds, direction, message) on one connection, then optionally its close:
    ``close`` = (seconds, direction of the first FIN)."""
    from dcpdissect.analysis.engine import Analyzer
    from dcpdissect.reassembly.connections import ConnectionClosed, ConnectionOpened
    a = Analyzer()
    out = a.feed(ConnectionOpened(1, ("10.0.0.2", 5000), ("10.0.0.1", 11210), 1, 0, mid))
    off = [0, 0]
    n = 1
    for t, d, data in msgs:
        n += 1
        out += a.feed(Pdu(1, d, off[d], data, (n,), n, int(t * 1e9)))
        off[d] += len(data)
    if close is not None:
        t, d = close
        n += 1
        out += a.feed(ConnectionClosed(1, n, int(t * 1e9), "fin", (d, n, int(t * 1e9))))
    out += a.finish()
    return [(f.rule, f.frame - 2) for f in out if f.rule in FLOW]


def _noop_connection(*controls):
    msgs = [(0, 0, dcp_open("p", 0x01, 1)), (0, 1, ok(0x50, 1))]
    for i, (k, v) in enumerate(controls):
        msgs += [(0, 0, control(k, v, 2 + i)), (0, 1, ok(0x5E, 2 + i))]
    return msgs + [(0, 0, stream_req(0, 0x100)), (0, 1, failover(0x100, (1, 0))),
                   (2, 1, marker(0, 0x100, 0, 9, "memory+checkpoint")), (2, 1, mut(0, 0x100, 1)),
                   (20, 1, noop(10000001))]


NOOPS = (("enable_noop", "true"), ("set_noop_interval", "20"))


def test_idle_timeout_counts_from_the_consumers_last_counted_message():
    base = _noop_connection(*NOOPS)          # the consumer's last message: the control at 0 s
    noop_at = len(base) - 1
    # the server closes 360.1 s after it: the idle disconnect
    assert _timed(base, close=(360.1, 1)) == [("consumer-idle-timeout", noop_at)]
    # before the timeout, or closed by the consumer: no idle disconnect to explain (the
    # consumer's own FIN after the timeout is still its silence)
    assert _timed(base, close=(359.9, 1)) == []
    assert _timed(base, close=(361, 0)) == [("consumer-idle-timeout", noop_at)]
    # a late answer before the timeout, then silence until a close long after it
    late = base + [(300, 0, ok(0x5C, 10000001)), (330, 1, mut(0, 0x100, 2))]
    assert _timed(late, close=(600, 1)) == []
    # buffer acks reset the producer's idle timer; seqno acknowledgements do not
    acked = base + [(200, 0, ack(100, 9)), (500, 1, mut(0, 0x100, 2))]
    assert _timed(acked) == []
    seqno_ack = encode(0x61, {"prepared_seqno": 1}, vbucket=0, opaque=0x100)
    unheard = base + [(200, 0, seqno_ack), (400, 1, mut(0, 0x100, 2))]
    assert _timed(unheard) == [("consumer-idle-timeout", noop_at)]
    # the connection used past the timeout and a margin: the producer's timeout is higher
    assert _timed(base + [(366, 1, mut(0, 0x100, 2))]) == [("consumer-idle-timeout", noop_at)]
    assert _timed(base + [(364, 1, mut(0, 0x100, 2))]) == []     # within the margin


def test_idle_timeout_is_not_judged_without_noops_or_their_negotiation():
    quiet = _noop_connection(("set_noop_interval", "20"))       # noops never enabled
    assert _timed(quiet, close=(400, 1)) == []
    mid = [(2, 1, marker(0, 0x100, 0, 9, "memory+checkpoint")), (2, 1, mut(0, 0x100, 1)),
           (20, 1, noop(10000001)), (400, 1, mut(0, 0x100, 2))]
    assert _timed(mid, mid=True, close=(401, 1)) == [("flow-control-undecided", 2)]
