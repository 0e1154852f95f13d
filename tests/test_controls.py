"""Negotiation and the producer's tolerance of consumer answers (controls.py), the overlap
and start-seqno conventions as strict as kv_engine (snapshots.py): samples built by
dcpdissect/samples/scenarios_controls.py, frames written from their construction."""

from pathlib import Path

import pytest

from dcpdissect.analysis.rules import ERROR, INFO, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.samples.builder import build
from dcpdissect.samples.scenarios_controls import SPECS
from feed import feed

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
STREAM = {r.id for r in RULES.values() if r.family == "stream"}
NEW = ("consumer-error-response-undecided", "consumer-noop-opaque-mismatch",
       "consumer-response-unexpected", "snapshot-version-not-negotiated",
       "snapshot-v1-disk-sync-replication", "snapshot-history-not-negotiated",
       "oso-not-negotiated", "seqno-advanced-not-enabled", "expiration-not-negotiated",
       "stream-id-request-mismatch", "stream-id-message-mismatch")


def stream_findings(name):
    return sorted((f.rule, f.frame) for f in analyze_file(str(SAMPLES / name))[0]
                  if f.rule in STREAM)


def test_samples_are_built_from_their_specs():
    for spec in SPECS:
        assert (SAMPLES / spec.filename).read_bytes() == build(spec).data, \
            f"samples/{spec.filename} is stale: python -m dcpdissect.regen"


def test_rules_are_registered():
    for rid in NEW:
        assert RULES[rid].family == "stream"
        assert ".cc" in RULES[rid].rationale
    sev = {rid: RULES[rid].severity for rid in NEW}
    assert sev["consumer-error-response-undecided"] == INFO
    assert sev["snapshot-v1-disk-sync-replication"] == ERROR
    # every message the negotiation forbids: one severity (the producer is not kv_engine's)
    assert {sev[r] for r in ("snapshot-version-not-negotiated", "snapshot-history-not-negotiated",
                             "oso-not-negotiated", "seqno-advanced-not-enabled",
                             "expiration-not-negotiated", "stream-id-message-mismatch")} \
        == {WARNING}
    assert RULES["producer-datatype-not-negotiated"].severity == WARNING
    assert RULES["sync-write-not-negotiated"].severity == WARNING


def test_clean_replication_negotiates_what_it_sends():
    """The clean replication stream sends V2.0/V2.2 markers and a DcpExpiration because its
    consumer negotiated them as kv_engine's does: fed again without its DcpControl exchange,
    each is flagged; with it, nothing is."""
    from dcpdissect.codec import decode
    from dcpdissect.samples.scenarios_basic import replication

    messages = [(0 if d == "c2s" else 1, m) for d, _, m in replication().messages]
    assert [r for r, _ in _run(*messages, rules=NEGOTIATION)] == []
    bare = [(d, m) for d, m in messages if m[1] != 0x5E]
    found = [(r, decode(bare[i][1]).opcode, decode(bare[i][1]).vbucket)
             for r, i in _run(*bare, rules=NEGOTIATION)]
    assert found == [("snapshot-version-not-negotiated", 0x56, 0),       # V2.0 memory
                     ("snapshot-version-not-negotiated", 0x56, 1),       # V2.0 disk
                     ("snapshot-version-not-negotiated", 0x56, 2),       # V2.2 disk
                     ("snapshot-version-not-negotiated", 0x56, 0),       # V2.0 memory
                     ("expiration-not-negotiated", 0x59, 0)]


def test_legal_sample_has_no_finding_at_all():
    assert [(f.rule, f.frame) for f in analyze_file(str(SAMPLES / "controls-legal.pcap"))[0]] \
        == []


VIOLATIONS = sorted([
    # connection 1: no sync writes, change streams, OSO, expiry opcode, collections; v7 codes
    ("snapshot-version-not-negotiated", 48),      # vb 0 V2.0
    ("snapshot-version-not-negotiated", 50),      # vb 1 V2.2
    ("snapshot-history-not-negotiated", 52),      # vb 2
    ("expiration-not-negotiated", 56),            # vb 3
    ("snapshot-start-overlap", 60),               # vb 4, ActiveVbOnly
    ("seqno-advanced-not-enabled", 64),           # vb 5, no collections
    ("oso-not-negotiated", 66),                   # vb 6
    ("semantics-suppressed", 72), ("stream-id-message-mismatch", 72),   # vb 7, sid 9
    ("consumer-error-response", 76),              # KeyEexists with v7 codes
    ("consumer-error-response", 80),              # StreamEnd answered Einval
    ("consumer-response-unexpected", 82),         # answer to SeqnoAdvanced
    ("consumer-noop-opaque-mismatch", 86),        # 0x42, the noop was 10000001
    # connection 2: sync replication + flatbuffers, no v7 codes
    ("stream-id-request-mismatch", 126),          # vb 10 with a sid
    ("snapshot-v1-disk-sync-replication", 130),   # vb 8
    ("seqno-advanced-not-enabled", 136),          # vb 9
    ("consumer-error-response", 140),             # KeyEnoent to DcpCommit (KeyEexists tolerated)
    # connection 3: enable_stream_id
    ("stream-id-request-mismatch", 164),          # vb 11 without a sid
    ("semantics-suppressed", 174), ("stream-id-message-mismatch", 174),  # vb 12, no sid
    # connection 4: consumer leg, data client→server, sync replication
    ("snapshot-v1-disk-sync-replication", 214),   # vb 13
    ("snapshot-version-not-negotiated", 218),     # vb 15 V2.2
    ("consumer-error-response", 224),             # KeyEnoent to DcpAbort
])


def test_violations_exact():
    assert stream_findings("controls-violations.pcap") == VIOLATIONS


def test_violations_point_at_their_vbucket_and_connection():
    got = {(f.rule, f.frame): f for f in analyze_file(str(SAMPLES / "controls-violations.pcap"))[0]}
    assert got[("snapshot-start-overlap", 60)].vbucket == 4
    assert got[("consumer-error-response", 76)].vbucket == 0
    assert "v7_dcp_status_codes" in got[("consumer-error-response", 76)].message
    assert "closed" in got[("consumer-error-response", 80)].message
    assert got[("consumer-error-response", 224)].connection == 4
    assert got[("snapshot-v1-disk-sync-replication", 214)].connection == 4


def test_undecided_when_the_controls_were_not_captured():
    assert stream_findings("controls-undecided.pcap") == [
        ("consumer-error-response-undecided", 3), ("semantics-suppressed", 1)]


# --- fed message by message -----------------------------------------------------------------

NEGOTIATION = {r for r in STREAM if r.endswith(("-not-negotiated", "-not-enabled"))}


def _run(*messages, mid=False, rules=STREAM):
    return [(r, i) for r, i in feed(*messages, mid_stream=mid) if r in rules]


def _open(*controls, flags=1):
    from dcpdissect.samples.dsl import control, dcp_open, ok
    out = [(0, dcp_open("t", flags, 1)), (1, ok(0x50, 1))]
    for i, (k, v) in enumerate(controls):
        out += [(0, control(k, v, 2 + i)), (1, ok(0x5E, 2 + i))]
    return out


def _stream(vb=0, opaque=0x10, **kw):
    from dcpdissect.samples.dsl import failover, stream_req
    return [(0, stream_req(vb, opaque, **kw)), (1, failover(opaque, (7, 0)))]


@pytest.mark.parametrize("status,v7,opcode,expected", [
    (0x02, False, 0x57, []), (0x02, True, 0x57, ["consumer-error-response"]),
    (0x01, False, 0x57, []), (0x01, True, 0x57, ["consumer-error-response"]),
    (0x01, False, 0x62, ["consumer-error-response"]), (0x01, False, 0x63, ["consumer-error-response"]),
    (0x07, True, 0x57, []), (0x0A, True, 0x62, []), (0x0B, True, 0x57, []),
    (0x04, False, 0x57, ["consumer-error-response"]), (0x22, False, 0x60, ["consumer-error-response"]),
])
def test_handle_response_statuses(status, v7, opcode, expected):
    from dcpdissect.samples.dsl import marker, mutation, ok
    msgs = _open(*([("v7_dcp_status_codes", "true")] if v7 else [])) + _stream() + [
        (1, marker(0, 0x10, 0, 1, "memory+checkpoint")), (1, mutation(0, 0x10, 1, "a", b"1")),
        (0, ok(opcode, 0x10, status=status))]
    assert [r for r, _ in _run(*msgs)] == expected


def test_stream_end_and_noop_responses():
    from dcpdissect.codec import encode
    from dcpdissect.samples.dsl import ok
    end = _open() + _stream() + [(1, encode(0x55, {"reason": 0}, opaque=0x10))]
    assert _run(*end, (0, ok(0x55, 0x10, status=0x01))) == []
    assert _run(*end, (0, ok(0x55, 0x10, status=0x07))) == []         # tolerated anyway
    assert _run(*end, (0, ok(0x55, 0x10, status=0x02))) == []         # pre-v7 tolerated
    assert _run(*end, (0, ok(0x55, 0x10, status=0x20))) == [("consumer-error-response", 5)]
    noop = _open() + [(1, encode(0x5C, opaque=10000001))]
    assert _run(*noop, (0, ok(0x5C, 10000001))) == []
    assert _run(*noop, (0, ok(0x5C, 10000001, status=0x04))) == []    # right opaque: any status
    assert _run(*noop, (0, ok(0x5C, 7))) == [("consumer-noop-opaque-mismatch", 3)]
    assert _run(*noop, (0, ok(0x5C, 7, status=0x07))) == []           # tolerated status
    # before any noop the producer's opaque is 10000000; mid-stream it is unknown
    assert _run(*_open(), (0, ok(0x5C, 10000000))) == []
    assert _run((0, ok(0x5C, 5)), mid=True) == []


def test_first_marker_after_oso_may_overlap_and_is_not_first():
    from dcpdissect.codec import encode
    from dcpdissect.samples.dsl import marker, mutation, ok
    oso = lambda f: (1, encode(0x65, {"flags": f}, vbucket=0, opaque=0x10))
    hello = [(0, encode(0x1F, key=b"c", value=b"\x00\x12", opaque=9)),
             (1, ok(0x1F, 9, value=b"\x00\x12"))]
    base = hello + _open(("enable_out_of_order_snapshots", "true")) + \
        _stream(flags=0x10, value=b'{"collections":["8"]}')
    body = [oso(1), (1, mutation(0, 0x10, 5, "\x08a", b"")), (1, mutation(0, 0x10, 3, "\x08b", b"")),
            oso(2), (1, marker(0, 0x10, 4, 7, "memory+checkpoint")),
            (1, mutation(0, 0x10, 6, "\x08c", b"")), (1, mutation(0, 0x10, 7, "\x08d", b""))]
    assert _run(*base, *body) == []
    # a second marker overlapping the first one's end is an error again (ActiveVbOnly)
    assert _run(*base, *body, (1, marker(0, 0x10, 7, 9, "memory+checkpoint"))) == [
        ("snapshot-start-overlap", len(base) + len(body))]
    # the same overlap without ActiveVbOnly: a replica may serve the stream
    plain = hello + _open() + _stream() + [
        (1, marker(0, 0x10, 0, 2, "memory+checkpoint")), (1, mutation(0, 0x10, 1, "a", b"")),
        (1, mutation(0, 0x10, 2, "b", b"")), (1, marker(0, 0x10, 2, 3, "memory+checkpoint"))]
    assert _run(*plain) == []


def test_filtered_means_a_collection_or_scope_filter():
    from dcpdissect.codec import encode
    from dcpdissect.samples.dsl import marker, mutation, ok
    hello = [(0, encode(0x1F, key=b"c", value=b"\x00\x12", opaque=9)),
             (1, ok(0x1F, 9, value=b"\x00\x12"))]

    def run(value):
        return _run(*hello, *_open(), *_stream(value=value),
                    (1, marker(0, 0x10, 0, 2, "memory+checkpoint")),
                    (1, mutation(0, 0x10, 1, "\x00a", b"")), (1, mutation(0, 0x10, 2, "\x00b", b"")),
                    (1, marker(0, 0x10, 3, 6, "memory")), (1, mutation(0, 0x10, 5, "\x00c", b"")),
                    (1, mutation(0, 0x10, 6, "\x00d", b"")))
    assert run(b'{"collections":["8"]}') == []
    assert run(b'{"scope":"9"}') == []
    # kv_engine's replication consumer sends {"uid":...}: no filter, start must be 5
    assert run(b'{"uid":"0"}') == [("snapshot-start-inconsistent", 9)]     # the marker [3,6]


def test_nothing_judged_without_the_negotiation():
    from dcpdissect.samples.dsl import marker, mutation
    msgs = _stream() + [(1, marker(0, 0x10, 0, 1, "disk+checkpoint", layout="V2.0",
                                   max_visible_seqno=1, high_completed_seqno=0)),
                        (1, mutation(0, 0x10, 1, "a", b""))]
    assert _run(*msgs, mid=True) == []
