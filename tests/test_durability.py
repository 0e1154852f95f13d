"""Sync writes (streams/durability.py): samples built by dcpdissect/samples/scenarios_durability.py,
frames written from their construction, and message-by-message cases of what kv_engine's
replica accepts (passive_stream.cc, vbucket.cc, passive_durability_monitor.cc)."""

from pathlib import Path

import pytest

from dcpdissect.analysis.rules import ERROR, INFO, RULES, WARNING
from dcpdissect.analysis.run import analyze_file
from dcpdissect.samples.builder import build
from dcpdissect.samples.dsl import control, dcp_open, failover, mutation, ok, stream_req
from dcpdissect.samples.scenarios_durability import SPECS, abort, commit, disk, mem, prepare
from feed import feed

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
DURABILITY = {r.id for r in RULES.values() if r.family == "durability"}


def durability_findings(name):
    return sorted((f.rule, f.frame) for f in analyze_file(str(SAMPLES / name))[0]
                  if f.rule in DURABILITY)


def test_samples_are_built_from_their_specs():
    for spec in SPECS:
        assert (SAMPLES / spec.filename).read_bytes() == build(spec).data, \
            f"samples/{spec.filename} is stale: python -m dcpdissect.regen"


def test_rules_are_registered_with_kv_engine_references():
    assert len(DURABILITY) == 12
    for rid in DURABILITY:
        assert ".cc" in RULES[rid].rationale, rid
        assert RULES[rid].sample == "durability-violations.pcap"
    sev = {rid: RULES[rid].severity for rid in DURABILITY}
    assert sev["sync-write-not-negotiated"] == WARNING
    assert sev["sync-abort-after-commit-disk"] == WARNING
    assert sev["sync-prepare-unseen"] == INFO
    assert sev["sync-replica-error-reply"] == INFO
    assert sev["sync-hcs-backwards"] == ERROR


def test_legal_sample_has_no_finding_at_all():
    assert [(f.rule, f.frame) for f in analyze_file(str(SAMPLES / "durability-legal.pcap"))[0]] \
        == []


# Connection 1 sends every message in its own segment, each acknowledged: the n-th message
# (1-based) is frame 2n + 2 after the 3 handshake frames. Messages 1-28: DcpOpen, 3 controls,
# 10 stream requests, each with its answer; then per vbucket as in _violations_sync.
def _f(n):
    return 2 * n + 2


# Connection 2 starts 3 ms later, after connection 1's 71 messages, the last one's ACK and
# its close (FIN, FIN, ACK): its n-th message is frame CONN2 + _f(n).
CONN2 = _f(71) + 4


VIOLATIONS = sorted([
    ("sync-commit-without-prepare", _f(30)),        # vb 0: marker 29, commit 30
    ("sync-replica-error-reply", _f(31)),           # its KeyEnoent (then mutation 32)
    ("sync-abort-without-prepare", _f(34)),         # vb 1: marker 33, abort 34
    ("sync-replica-error-reply", _f(35)),           # its Einval (then mutation 36)
    ("sync-abort-after-commit", _f(40)),            # vb 2: marker 37, prepare, commit, abort 40
    ("sync-completion-out-of-order", _f(44)),       # vb 3: marker 41, prepares 42-43, commit 44
    ("sync-completion-seqno-mismatch", _f(49)),     # vb 4: 46 marker, 47 prepare, 48 mutation
    ("sync-prepare-while-pending", _f(53)),         # vb 5: 50 marker, 51 prepare, 52 marker
    ("sync-replica-error-reply", _f(54)),           # its SyncWriteInProgress (then 55)
    ("sync-mutation-while-pending", _f(58)),        # vb 6: 56 marker, 57 prepare
    ("sync-hcs-backwards", _f(63)),                 # vb 7: 59 Disk marker, 60-62, marker 63
    ("sync-abort-after-commit-disk", _f(68)),       # vb 8: 65 Disk marker, 66-67, abort 68
    ("sync-prepare-unseen", _f(70)),                # vb 9: 69 marker, commit 70
    # connection 2 (without enable_sync_writes): DcpOpen, one control and the stream request,
    # each answered (messages 1-6), its marker 7, prepare 8 and commit 9
    ("sync-write-not-negotiated", CONN2 + _f(8)), ("sync-write-not-negotiated", CONN2 + _f(9)),
])


def test_violations_exact():
    assert durability_findings("durability-violations.pcap") == VIOLATIONS


def test_violations_point_at_their_vbucket_and_cause():
    got = {(f.rule, f.frame): f for f in analyze_file(str(SAMPLES / "durability-violations.pcap"))[0]}
    assert got[("sync-replica-error-reply", _f(31))].context == (_f(30),)
    assert got[("sync-replica-error-reply", _f(54))].vbucket == 5
    assert got[("sync-completion-out-of-order", _f(44))].context == (_f(42), _f(43))
    assert got[("sync-hcs-backwards", _f(63))].context == (_f(59),)
    assert got[("sync-write-not-negotiated", CONN2 + _f(8))].connection == 2
    # the consumer's replies are still the producer's reason to disconnect
    assert ("consumer-error-response", _f(31)) in got


# --- fed message by message -----------------------------------------------------------------

SYNC = (("enable_sync_writes", "true"), ("consumer_name", "r"))


def _run(*messages, controls=SYNC, mid=False, start=0):
    head = [] if mid else [(0, dcp_open("t", 1, 1)), (1, ok(0x50, 1))]
    if not mid:
        for i, (k, v) in enumerate(controls):
            head += [(0, control(k, v, 2 + i)), (1, ok(0x5E, 2 + i))]
        head += [(0, stream_req(0, 0x10, start=start, uuid=7 if start else 0)),
                 (1, failover(0x10, (7, 0)))]
    n = len(head)
    return [(r, i - n) for r, i in feed(*head, *[(1, m) for m in messages], mid_stream=mid)
            if r in DURABILITY]


def test_disk_snapshot_relaxations():
    # a re-sent prepare inside the duplicate-prepare window, completed out of order on disk,
    # an abort whose prepare was deduplicated, a mutation completing an outstanding prepare
    assert _run(mem(0, 0x10, 1, 2), prepare(0, 0x10, 1, "a"), prepare(0, 0x10, 2, "b"),
                disk(0, 0x10, 3, 7, 0), prepare(0, 0x10, 3, "a"), commit(0, 0x10, 2, 4, "b"),
                abort(0, 0x10, 4, 5, "c"), mutation(0, 0x10, 6, "a", b"{}"),
                mutation(0, 0x10, 7, "d", b"{}")) == []


def test_window_covers_only_prepares_before_the_disk_marker():
    assert _run(disk(0, 0x10, 1, 3, 0), prepare(0, 0x10, 1, "a"), prepare(0, 0x10, 2, "a")) \
        == [("sync-prepare-while-pending", 2)]


def test_commit_on_disk_still_needs_its_prepare():
    assert _run(disk(0, 0x10, 1, 2, 0), commit(0, 0x10, 1, 2, "a")) \
        == [("sync-commit-without-prepare", 1)]


def test_double_commit_and_in_order_completions():
    assert _run(mem(0, 0x10, 1, 5), prepare(0, 0x10, 1, "a"), prepare(0, 0x10, 2, "b"),
                commit(0, 0x10, 1, 3, "a"), abort(0, 0x10, 2, 4, "b"),
                commit(0, 0x10, 1, 5, "a")) == [("sync-commit-without-prepare", 5)]


def test_hcs_below_a_completed_prepare():
    assert _run(mem(0, 0x10, 1, 2), prepare(0, 0x10, 1, "a"), commit(0, 0x10, 1, 2, "a"),
                disk(0, 0x10, 3, 3, 0), mutation(0, 0x10, 3, "b", b"{}")) \
        == [("sync-hcs-backwards", 3)]


def test_prepares_before_the_start_are_unsure():
    assert _run(mem(0, 0x10, 6, 7), commit(0, 0x10, 4, 6, "a"), abort(0, 0x10, 5, 7, "b"),
                start=5) == [("sync-prepare-unseen", 1), ("sync-prepare-unseen", 2)]


def test_negotiation_judged_only_when_captured():
    msgs = (mem(0, 0x10, 1, 2), prepare(0, 0x10, 1, "a"), commit(0, 0x10, 1, 2, "a"))
    assert _run(*msgs, controls=()) == [("sync-write-not-negotiated", 1),
                                        ("sync-write-not-negotiated", 2)]
    assert _run(*msgs) == []


@pytest.mark.parametrize("mid", [True])
def test_implicit_stream_starts_knowing_nothing_before_its_first_marker(mid):
    assert _run(mem(0, 0x10, 5, 6), commit(0, 0x10, 3, 5, "a"), commit(0, 0x10, 5, 6, "b"),
                mid=mid) == [("sync-prepare-unseen", 1), ("sync-commit-without-prepare", 2)]
