"""Consumer identity across connections (DcpOpen name, server, bucket) and stream rules on
captures that start inside a connection (samples from scenarios_identity)."""

from pathlib import Path

import pytest

from dcpdissect.analysis.conventions import classify_file
from dcpdissect.analysis.engine import Analyzer
from dcpdissect.analysis.rules import ERROR, INFO, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.analysis.streams.snapshots import classify
from dcpdissect.codec import encode
from dcpdissect.reassembly.connections import ConnectionClosed, ConnectionOpened
from dcpdissect.reassembly.framing import Pdu
from dcpdissect.samples import scenarios_identity
from dcpdissect.samples.builder import build
from dcpdissect.samples.dsl import dcp_open, failover, marker, mutation, ok, stream_req

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
STREAM = {r.id for r in RULES.values() if r.family == "stream"}

# (rule, frame) of every stream finding, from the construction of each sample: the first
# connection's marker [1,4] is frame 12; the second connection's stream request is frame 25
# (26 after the half-close, whose consumer FIN is one more frame).
EXPECTED = {
    "identity-restart-collapsed.pcap": [("resume-collapsed-snapshot", 25)],
    "identity-restart-correct.pcap": [],
    "identity-half-close-collapsed.pcap": [("resume-collapsed-snapshot", 26)],
    "identity-half-close-correct.pcap": [],
    "identity-kicked-collapsed.pcap": [("resume-collapsed-snapshot", 25)],
    "identity-kicked-correct.pcap": [],
    "identity-beyond-after-silence.pcap": [("resume-beyond-received", 25)],
    "identity-two-buckets.pcap": [],
    "identity-two-buckets-b-complete.pcap": [],
    # the capture starts with item 3 and the marker [4,6] (frame 1); item 9 is frame 7
    "identity-mid-stream-outside.pcap": [("semantics-suppressed", 1),
                                         ("data-outside-snapshot", 7)],
    "identity-mid-stream-clean.pcap": [("semantics-suppressed", 1)],
}


def findings(name):
    return analyze_file(str(SAMPLES / name))[0]


def test_every_identity_spec_is_expected_and_committed_as_built():
    assert {s.filename for s in scenarios_identity.SPECS} == set(EXPECTED)
    for spec in scenarios_identity.SPECS:
        assert (SAMPLES / spec.filename).read_bytes() == build(spec).data, \
            f"samples/{spec.filename} is stale: python -m dcpdissect.regen"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stream_findings_exact(name):
    got = sorted(((f.rule, f.frame) for f in findings(name) if f.rule in STREAM),
                 key=lambda x: (x[1], x[0]))
    assert got == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_nothing_else_warns(name):
    """Legal forms give no warning or error; violating ones only the expected finding."""
    flagged = {r for r, _ in EXPECTED[name]}
    bad = [(f.rule, f.frame) for f in findings(name)
           if f.severity in (WARNING, ERROR) and f.rule not in flagged]
    assert bad == []


@pytest.mark.parametrize("name", ["identity-restart-collapsed.pcap",
                                  "identity-half-close-collapsed.pcap",
                                  "identity-kicked-collapsed.pcap"])
def test_collapsed_resume_is_judged_against_the_first_connection(name):
    f = next(f for f in findings(name) if f.rule == "resume-collapsed-snapshot")
    assert f.severity == ERROR and f.connection == 2 and f.context == (12,)
    assert f.fields["previous_snapshot"] == "[1,4]" and f.fields["last_received"] == 3
    assert f.fields["previous_connection"] == 1
    assert (f.fields["snap_start_seqno"], f.fields["snap_end_seqno"]) == (3, 3)


def test_beyond_after_silence_fields():
    f = next(f for f in findings("identity-beyond-after-silence.pcap")
             if f.rule == "resume-beyond-received")
    assert f.fields["start_seqno"] == 4 and f.fields["last_received"] == 3
    assert f.context == (12,)


def test_mid_stream_first_captured_marker_is_not_classified():
    labels = {frame: label for (_, frame, _), label
              in classify_file(str(SAMPLES / "identity-mid-stream-clean.pcap")).items()}
    assert labels == {1: "unknown"}
    sup = next(f for f in findings("identity-mid-stream-outside.pcap")
               if f.rule == "semantics-suppressed")
    assert sup.severity == INFO and "until a snapshot marker" in sup.message
    out = next(f for f in findings("identity-mid-stream-outside.pcap")
               if f.rule == "data-outside-snapshot")
    assert out.fields["seqno"] == 9 and out.context == (1,)      # the marker [4,6]


def test_classify_without_a_request():
    assert classify(5, 0x01, True, None, 7) == ("unknown", None)
    assert classify(5, 0x05, False, None, 7) == ("checkpoint", None)
    assert classify(5, 0x01, False, None, 7) == ("first-item", None)   # a filter is possible
    assert classify(9, 0x06, False, None, 7)[0] == "inconsistent"


# --- the same rules fed event by event ----------------------------------------------------

class Feed:
    def __init__(self):
        self.a, self.out, self.frame, self.off = Analyzer(), [], 0, {}

    def open(self, cid, port, server=("10.0.0.1", 11210), mid=False):
        self.frame += 1
        self.off[cid] = [0, 0]
        self.out += self.a.feed(ConnectionOpened(cid, ("10.0.0.2", port), server, self.frame,
                                                 0, mid))

    def send(self, cid, *msgs):
        for d, data in msgs:
            self.frame += 1
            off = self.off[cid]
            self.out += self.a.feed(Pdu(cid, d, off[d], data, (self.frame,), self.frame,
                                        self.frame))
            off[d] += len(data)
        return self.frame

    def close(self, cid, how="fin"):
        self.frame += 1
        self.out += self.a.feed(ConnectionClosed(cid, self.frame, 0, how))

    def stream(self):
        self.out += self.a.finish()
        return [(f.rule, f.frame) for f in self.out if f.rule in STREAM]

    def resume(self):
        return [(r, n) for r, n in self.stream() if r.startswith("resume-")]


def opening(name="r", bucket=None, status=0):
    sel = [] if bucket is None else [(0, encode(0x89, key=bucket.encode(), opaque=9)),
                                     (1, ok(0x89, 9))]
    return sel + [(0, dcp_open(name, 1, 1)), (1, ok(0x50, 1, status=status))]


def first(feed, cid=1, port=5000, bucket=None, value=b"", sid=None, name="r", server=None):
    feed.open(cid, port, **({} if server is None else {"server": server}))
    # the consumer holds seqno 1: the first marker starts at the requested snap_start 1
    feed.send(cid, *opening(name, bucket),
              (0, stream_req(0, 0x10, start=1, uuid=0x1111, value=value)),
              (1, failover(0x10, (0x1111, 0))),
              (1, marker(0, 0x10, 1, 4, "memory+checkpoint", sid=sid)),
              (1, mutation(0, 0x10, 2, "b", b"", sid=sid)),
              (1, mutation(0, 0x10, 3, "c", b"", sid=sid)))


COLLAPSED = dict(start=3, uuid=0x1111, snap_start=3, snap_end=3)


def test_same_name_resume_while_the_first_connection_stays_open():
    f = Feed()
    first(f)
    f.open(2, 5001)
    req = f.send(2, *opening(), (0, stream_req(0, 0x20, **COLLAPSED)))
    assert f.stream() == [("resume-collapsed-snapshot", req)]


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_closed_first_connection_still_works(how):
    f = Feed()
    first(f)
    f.close(1, how)
    f.open(2, 5001)
    req = f.send(2, *opening(), (0, stream_req(0, 0x20, **COLLAPSED)))
    assert f.stream() == [("resume-collapsed-snapshot", req)]


def test_a_refused_dcp_open_takes_no_name():
    f = Feed()
    first(f)
    f.open(2, 5001)
    f.send(2, *opening(status=0x24), (0, stream_req(0, 0x20, **COLLAPSED)))
    assert f.stream() == []


@pytest.mark.parametrize("kw", [dict(name="other"), dict(bucket="b2"),
                                dict(name="other", server=("10.0.0.9", 11210))])
def test_another_name_or_bucket_is_another_consumer(kw):
    f = Feed()
    first(f, bucket="b1")
    f.open(2, 5001, **({"server": kw["server"]} if "server" in kw else {}))
    f.send(2, *opening(kw.get("name", "r"), kw.get("bucket", "b1")),
           (0, stream_req(0, 0x20, **COLLAPSED)))
    assert f.stream() == []


@pytest.mark.parametrize("server", [("10.0.0.9", 11210), ("10.0.0.1", 11207)])
def test_the_same_name_and_bucket_on_another_node_or_port_is_the_same_consumer(server):
    """A rebalance or failover moves the vbucket to another node; 11207 is TLS to the same
    memcached: the consumer resumes there and is judged against its stream before."""
    f = Feed()
    first(f, bucket="b1")
    f.open(2, 5001, server=server)
    req = f.send(2, *opening(bucket="b1"), (0, stream_req(0, 0x20, **COLLAPSED)))
    assert f.stream() == [("resume-collapsed-snapshot", req)]


def test_same_bucket_is_the_same_consumer():
    f = Feed()
    first(f, bucket="b1")
    f.open(2, 5001)
    req = f.send(2, *opening(bucket="b1"), (0, stream_req(0, 0x20, **COLLAPSED)))
    assert f.stream() == [("resume-collapsed-snapshot", req)]


def test_resume_points_are_per_stream_id():
    f = Feed()
    first(f, value=b'{"sid":7}', sid=7)
    f.open(2, 5001)
    f.send(2, *opening(), (0, stream_req(0, 0x20, value=b'{"sid":8}', **COLLAPSED)))
    assert f.resume() == []
    f = Feed()
    first(f, value=b'{"sid":7}', sid=7)
    f.open(2, 5001)
    req = f.send(2, *opening(), (0, stream_req(0, 0x20, value=b'{"sid":7}', **COLLAPSED)))
    assert f.resume() == [("resume-collapsed-snapshot", req)]


def test_data_on_a_kicked_connection_is_not_judged():
    f = Feed()
    first(f)
    f.open(2, 5001)
    f.send(2, *opening())
    f.send(1, (1, mutation(0, 0x10, 99, "z", b"")), (1, mutation(0, 0x10, 1, "y", b"")))
    assert f.stream() == []


def test_implicit_stream_applies_marker_rules_only():
    f = Feed()
    f.open(1, 5000, mid=True)
    f.send(1, (1, mutation(0, 0x10, 7, "a", b"")))              # before any marker: told once
    f.send(1, (1, marker(0, 0x10, 8, 10, "memory")))            # opens the implicit stream
    f.send(1, (1, mutation(0, 0x10, 9, "b", b"")))
    late = f.send(1, (1, mutation(0, 0x10, 9, "c", b"")))       # not increasing
    f.send(1, (1, mutation(0, 0x77, 10, "d", b"")))             # other opaque: not judged
    again = f.send(1, (1, marker(0, 0x10, 10, 10, "memory")))   # end not above 10
    assert f.stream() == [("semantics-suppressed", 2), ("data-seqno-not-increasing", late),
                          ("snapshot-incomplete", again), ("snapshot-end-not-increasing", again)]


# --- consumers that move, nodes that restart (scenarios_moves, samples/tls) ----------------

def not_info(name, **kw):
    return sorted((f.rule, f.frame, f.connection) for f in analyze_file(str(SAMPLES / name),
                                                                         **kw)[0]
                  if RULES[f.rule].severity != INFO)


def test_a_resume_on_another_node_is_judged_against_the_stream_before_it():
    # connection 1 on node A (10.0.6.1) ends without a FIN; the stream request on node C
    # (10.0.6.3) is frame 21
    got = analyze_file(str(SAMPLES / "move-node-collapsed.pcap"))[0]
    bad = [f for f in got if RULES[f.rule].severity != INFO]
    assert [(f.rule, f.frame, f.connection) for f in bad] == [
        ("resume-collapsed-snapshot", 21, 2)]
    assert bad[0].fields["previous_connection"] == 1 and bad[0].context == (12,)
    assert not_info("move-node-correct.pcap") == []


def test_a_rollback_before_the_new_log_is_judged_with_it():
    """The node restarted between the connections (a branch at 10 in its log): the
    ROLLBACK(10) of frame 23 is judged with the log its next success (frame 27) carries, not
    with the log the first connection saw."""
    assert not_info("restart-rollback-legal.pcap") == []
    got = [f for f in analyze_file(str(SAMPLES / "restart-rollback-unexpected.pcap"))[0]
           if RULES[f.rule].severity != INFO]
    assert [(f.rule, f.frame, f.vbucket) for f in got] == [("rollback-unexpected", 23, 0)]
    assert "model: no rollback" in got[0].message


@pytest.mark.parametrize("name, expected", [
    ("resume-collapsed-11207-after-11210", [("resume-collapsed-snapshot", 2)]),
    ("resume-correct-11207-after-11210", [])])
def test_a_resume_on_11207_after_11210_is_judged(name, expected):
    """The first connection in plaintext on 11210, the resume over TLS on 11207 (decrypted
    with its key log): one memcached, one consumer."""
    from dcpdissect.reassembly.pdus import Options
    keylog = (SAMPLES / "tls" / f"{name}.keylog").read_text()
    got = analyze_file(str(SAMPLES / "tls" / f"{name}.pcap"), Options(tls_keylog=keylog))[0]
    assert [(f.rule, f.connection) for f in got if RULES[f.rule].severity != INFO] == expected
    ends = {f.fields.get("server") for f in got if f.rule == "tls-connection"}
    assert not ends                       # the TLS connection was decrypted, not skipped


@pytest.mark.parametrize("name, expected", [
    ("move-node-collapsed-lo.pcapng", ["resume-collapsed-snapshot"]),
    ("move-node-correct-lo.pcapng", []), ("restart-rollback-legal-lo.pcapng", [])])
def test_real_captures_of_moves_and_restarts(name, expected):
    """The same scenarios replayed over real loopback TCP (samples/real)."""
    got = analyze_file(str(SAMPLES / "real" / name))[0]
    assert [f.rule for f in got if RULES[f.rule].severity != INFO] == expected
