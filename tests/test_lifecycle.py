"""Stream lifecycle (analysis/streams/lifecycle.py, rules/lifecycle.py): expected frames are
located from the samples' construction (the builder's record of which frames carry which
message bytes)."""

from pathlib import Path

from dcpdissect.analysis.rules import ERROR, INFO, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.samples import scenarios_lifecycle as sl
from dcpdissect.samples.builder import build
from dcpdissect.samples.dsl import marker

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SPECS = {s.name: s for s in sl.SPECS}
MINE = {r.id for r in RULES.values() if r.family == "lifecycle"}


def frame_of(name, data, direction=1):
    hits = [m for m in build(SPECS[name]).messages if m.data == data and m.direction == direction]
    assert len(hits) == 1, (len(hits), data[:4])
    return max(hits[0].frames)


def judged(name):
    return sorted((f.rule, f.frame) for f in analyze_file(str(SAMPLES / f"{name}.pcap"))[0]
                  if f.rule in MINE or RULES[f.rule].severity != INFO)


def test_rules_and_severities():
    assert {r: RULES[r].severity for r in MINE} == {
        "data-after-stream-end": WARNING, "data-after-close": WARNING,
        "data-after-close-undecided": INFO, "data-after-takeover": WARNING,
        "data-for-dropped-collection": ERROR, "history-duplicate-key": ERROR}
    for r in MINE:
        assert "engines/ep/src/" in RULES[r].rationale


def test_samples_are_current():
    for spec in sl.SPECS:
        assert (SAMPLES / spec.filename).read_bytes() == build(spec).data, \
            f"samples/{spec.filename} is stale: python -m dcpdissect.regen"


def test_legal_is_clean():
    assert judged("lifecycle-legal") == []


def test_violations_at_their_frames():
    n, k, mut = "lifecycle-violations", sl.k, sl.mut
    expected = [
        ("data-after-stream-end", frame_of(n, mut(10, 0x20A, 2, k("a2")))),
        ("data-after-stream-end", frame_of(n, marker(11, 0x20B, 2, 2, "memory"))),
        ("data-after-takeover", frame_of(n, mut(13, 0x20D, 2, k("d2")))),
        ("data-after-close", frame_of(n, mut(12, 0x20C, 3, k("c3")))),
        ("data-after-stream-end", frame_of(n, mut(13, 0x20D, 3, k("d3")))),
        ("history-duplicate-key", frame_of(n, mut(15, 0x20F, 2, k("h")))),
        ("data-for-dropped-collection", frame_of(n, mut(14, 0x20E, 3, k("x3", 8)))),
        ("data-after-stream-end", frame_of(n, sl.seqno_advanced(15, 0x20F, 3))),
        ("data-after-stream-end", frame_of(n, mut(16, 0x210, 1, k("e")))),
        ("data-after-stream-end", frame_of(n, mut(17, 0x211, 1, k("f")))),
        # without send_stream_end_on_client_close_stream not even the StreamEnd follows
        ("data-after-close", frame_of(n, sl.end(18, 0x212, 1))),
        # the consumer connection: data client→server
        ("data-after-stream-end", frame_of(n, mut(20, 0x300, 2, b"p2"), 0)),
        ("data-after-takeover", frame_of(n, marker(21, 0x301, 2, 2, "memory"), 0)),
        ("data-after-close", frame_of(n, sl.end(22, 0x302, 1), 0)),
        # with the control: the closed stream drained to StreamEnd(Closed), then a message
        ("data-after-stream-end", frame_of(n, mut(19, 0x213, 3, k("i3")))),
    ]
    assert judged(n) == sorted(expected)
    # the message in flight before the close response is not judged, nor the drain
    for data in (mut(12, 0x20C, 2, k("c2")), mut(19, 0x213, 2, k("i2")), sl.end(19, 0x213, 1)):
        assert frame_of(n, data) not in {f for _, f in judged(n)}


def test_close_messages_name_the_control():
    found = {f.frame: f for f in analyze_file(str(SAMPLES / "lifecycle-violations.pcap"))[0]}
    f = found[frame_of("lifecycle-violations", sl.end(22, 0x302, 1), 0)]
    assert f.rule == "data-after-close" and f.vbucket == 22
    assert f.message.startswith("DcpStreamEnd for vb 22 after the CloseStream response at frame")
    assert "no send_stream_end_on_client_close_stream" in f.message
    after = found[frame_of("lifecycle-violations", sl.mut(19, 0x213, 3, sl.k("i3")))]
    assert after.message.startswith("DcpMutation for vb 19 after its StreamEnd(Closed) at frame")


def test_undecided_close():
    n = "lifecycle-undecided"
    got = [x for x in judged(n) if x[0] in MINE]
    assert got == [("data-after-close-undecided", frame_of(n, sl.mut(5, 0x150, 2, sl.k("u2"))))]


def test_dropped_collection_from_a_flatbuffers_event():
    """A version-2 drop event (events.fbs DroppedCollection, built by the FlatBuffers
    library) drops the collection as a version-0 one does."""
    import flatbuffers
    from dcpdissect.codec import encode
    from dcpdissect.samples.dsl import dcp_open, failover, ok, stream_req
    from feed import feed

    b = flatbuffers.Builder(32)
    b.StartObject(4)
    b.PrependUint64Slot(0, 7, 0)            # uid
    b.PrependUint32Slot(1, 0, 0)            # scopeId
    b.PrependUint32Slot(2, 8, 0)            # collectionId
    b.Finish(b.EndObject())
    drop_v2 = encode(0x5F, {"by_seqno": 2, "event": 1, "version": 2}, key=b"",
                     value=bytes(b.Output()), vbucket=14, opaque=0x20E)
    hello = (0x12).to_bytes(2, "big")          # HELLO feature Collections
    messages = [(0, encode(0x1F, key=b"t", value=hello, opaque=1)),
                (1, ok(0x1F, 1, value=hello)),
                (0, dcp_open("t", 0x1, 2)), (1, ok(0x50, 2)),
                (0, stream_req(14, 0x20E)), (1, failover(0x20E, (0xABC, 0))),
                (1, marker(14, 0x20E, 0, 3, "memory+checkpoint")),
                (1, sl.mut(14, 0x20E, 1, sl.k("x", 8))), (1, drop_v2),
                (1, sl.mut(14, 0x20E, 3, sl.k("x3", 8)))]
    found = [r for r in feed(*messages) if r[0] == "data-for-dropped-collection"]
    assert found == [("data-for-dropped-collection", 9)]


def test_the_legal_drains_need_the_control():
    """The legal samples' closed streams drain only because the consumer enabled
    send_stream_end_on_client_close_stream: fed again without that control exchange, the
    message after the close response and the StreamEnd(Closed) are data-after-close."""
    from dcpdissect.codec import decode
    from feed import feed

    for script, vb in ((sl._legal_drain_producer(), 6), (sl._legal_drain_consumer(), 8)):
        messages = [(0 if d == "c2s" else 1, data) for d, _, data in script.messages
                    if data[1] != 0x5E]                      # without the DcpControl exchange
        found = [(rule, decode(messages[i][1])) for rule, i in feed(*messages)
                 if rule in MINE]
        assert [(rule, m.opcode, m.vbucket) for rule, m in found] == [
            ("data-after-close", 0x57, vb), ("data-after-close", 0x55, vb)]
