"""ns_server's proxy: the producer and consumer legs of one replication carry the same
messages (analysis/streams/relay.py). Expected frames are located from the samples'
construction (the builder's record of which frames carry which message bytes)."""

import io
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import ERROR, INFO, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.analysis.streams import relay
from dcpdissect.codec import encode
from dcpdissect.reassembly.pdus import ConnectionClosed, ConnectionOpened, iter_events
from dcpdissect.samples import netsynth as ns
from dcpdissect.samples import scenarios_replica as sr
from dcpdissect.samples.builder import build
from dcpdissect.samples.dsl import doc

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SPECS = {s.name: s for s in sr.SPECS}
ACTIVE = ("10.0.5.1", 11209)
LOCAL = ("127.0.0.1", 11209)
FLOOD_ACTIVE = ("10.0.5.3", 11209)
MINE = {r.id for r in RULES.values() if r.id.startswith("relay-")}


def frame_of(name, data, server, direction):
    """The frame completing the message ``data`` sent in ``direction`` to/from ``server``."""
    hits = [m for m in build(SPECS[name]).messages
            if m.data == data and m.server == server and m.direction == direction]
    assert len(hits) == 1, (len(hits), data[:4])
    return max(hits[0].frames)


def judged(name):
    return sorted((f.rule, f.frame) for f in analyze_file(str(SAMPLES / f"{name}.pcap"))[0]
                  if f.rule in MINE or RULES[f.rule].severity != INFO)


def test_relay_rules_registered():
    assert MINE == {"relay-message-differs", "relay-message-missing", "relay-message-reordered",
                    "relay-consumer-message-mismatch", "relay-not-confirmed",
                    "relay-window-overflow"}
    for rid in MINE:
        assert RULES[rid].family == "stream" and "ns_server" in RULES[rid].title + \
            RULES[rid].rationale or rid in ("relay-not-confirmed", "relay-window-overflow")
    assert RULES["relay-message-differs"].severity == ERROR
    assert RULES["relay-message-missing"].severity == ERROR
    assert RULES["relay-consumer-message-mismatch"].severity == WARNING
    assert RULES["relay-not-confirmed"].severity == INFO


def test_committed_samples_are_fresh():
    for spec in sr.SPECS:
        assert (SAMPLES / spec.filename).read_bytes() == build(spec).data, \
            f"samples/{spec.filename} is stale: python -m dcpdissect.regen"


def test_replica_node_is_legal_and_the_last_noop_is_only_in_flight():
    noop = encode(0x5C, opaque=0x22)           # read on the producer leg, then the consumer
    assert judged("replica-node") == [         # leg is closed with FIN: not proven lost
        ("relay-not-confirmed", frame_of("replica-node", noop, ACTIVE, 1))]


def test_replica_node_violations():
    n = "replica-node-violations"
    b3 = sr.mutation(6, 0xA6, 3, "b3", doc(3))                  # (c) never relayed
    b2 = sr.mutation(6, 0xA6, 2, "b2", doc(2).replace(b'"seq":2', b'"seq":9'))   # (b)
    a4 = sr.mutation(5, 0xA5, 4, "a4", doc(4))                  # (a) relayed after a5
    noop = encode(0x5C, opaque=0x22)
    ack = encode(0x5D, {"bytes_to_ack": 1024}, opaque=0x30)    # (d) relayed as 1024, not 4096
    first_over = encode(0x5C, opaque=0x1000 + relay.MAX_RELAY_WINDOW)
    assert judged(n) == sorted([
        ("relay-message-missing", frame_of(n, b3, ACTIVE, 1)),
        ("relay-message-differs", frame_of(n, b2, LOCAL, 0)),
        ("data-seqno-not-increasing", frame_of(n, a4, LOCAL, 0)),
        ("relay-message-reordered", frame_of(n, a4, LOCAL, 0)),
        ("relay-not-confirmed", frame_of(n, noop, ACTIVE, 1)),
        ("relay-window-overflow", frame_of(n, first_over, FLOOD_ACTIVE, 1)),
        ("relay-consumer-message-mismatch", frame_of(n, ack, ACTIVE, 0)),    # (d)
    ])


def test_differs_names_the_field_and_points_at_the_source():
    n = "replica-node-violations"
    f = next(f for f in analyze_file(str(SAMPLES / f"{n}.pcap"))[0]
             if f.rule == "relay-message-differs")
    src = frame_of(n, sr.mutation(6, 0xA6, 2, "b2", doc(2)), ACTIVE, 1)
    assert f.context == (src,) and f.vbucket == 6 and "value" in f.message


def test_shapes_fin_open_and_split_segments():
    events = list(iter_events(str(SAMPLES / "replica-node.pcap")))
    ends = {e.conn: e.server for e in events if type(e) is ConnectionOpened}
    closed = {ends[e.conn]: e.reason for e in events if type(e) is ConnectionClosed}
    assert closed.get(LOCAL) == "fin"
    assert closed.get(ACTIVE, "end") == "end"          # never closed: the capture ends
    big = sr.mutation(5, 0xA5, 3, "a3", doc(3, 3000))
    sample = build(SPECS["replica-node"])
    where = {(m.server, m.direction): m.frames for m in sample.messages if m.data == big}
    assert len(where[(ACTIVE, 1)]) == 3 and len(where[(LOCAL, 0)]) == 2


def _write(tmp_path, scripts, name="x.pcap"):
    buf = io.BytesIO()
    ns.write_pcap(buf, [s.conv.packets() for s in scripts])
    path = tmp_path / name
    path.write_bytes(buf.getvalue())
    return str(path)


@pytest.mark.parametrize("leg", [0, 1])
def test_one_leg_only_is_not_judged(tmp_path, leg):
    scripts = sr._replica(True)[:2]
    got = [f.rule for f in analyze_file(_write(tmp_path, [scripts[leg]]))[0]]
    assert not MINE & set(got)


def test_window_bound_is_read_at_run_time(tmp_path, monkeypatch):
    monkeypatch.setattr(relay, "MAX_RELAY_WINDOW", 3)
    path = _write(tmp_path, sr._replica(True))
    over = [f for f in analyze_file(path)[0] if f.rule == "relay-window-overflow"]
    assert over and all("3 messages" in f.message for f in over)


def test_a_gap_on_a_leg_stops_the_judgement(tmp_path):
    scripts = sr._replica(False)
    pkts = scripts[1].conv.packets()
    d = ns.data_indices(pkts, "c2s")
    pkts = ns.drop(pkts, d[12])            # a consumer-leg segment the capture lost
    buf = io.BytesIO()
    ns.write_pcap(buf, [scripts[0].conv.packets(), pkts])
    path = tmp_path / "gap.pcap"
    path.write_bytes(buf.getvalue())
    got = {f.rule for f in analyze_file(str(path))[0]}
    assert "capture-gap" in got and not MINE & got
