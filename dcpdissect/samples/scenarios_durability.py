"""Sync-write samples: prepares and their resolution as the replica's passive durability
monitor accepts them (kv_engine engines/ep/src/dcp/passive_stream.cc, vbucket.cc,
durability/passive_durability_monitor.cc).

``durability-legal``: a producer connection with sync replication, vbuckets 0 and 1
interleaved: prepares committed and aborted in order, a new prepare of a committed key, a
Disk snapshot (HCS) that re-sends an outstanding prepare (the duplicate-prepare window), an
abort whose prepare the backfill deduplicated, a commit sent as a mutation, then a memory
commit of the re-sent prepare; and a consumer connection (ns_server's proxy leg: the controls
and the stream request server→client, the data client→server) with a prepare and its commit.
No warning or error. ``durability-violations``: each rule on its own vbucket (one message
each), and a connection without enable_sync_writes.
"""

from __future__ import annotations

from ..codec import encode
from .dsl import T0, Script, Spec, dcp_open, doc, failover, marker, mutation, ok, stream_req
from .dsl import controls_exchange as _controls
from .netsynth import Endpoint

UUID = 0xD0A0000000000000
PRODUCER = Endpoint("10.0.6.1", 11209)
SYNC_REPL = (("enable_noop", "true"), ("enable_sync_writes", "true"),
             ("consumer_name", "replica-b"))


def prepare(vb: int, opaque: int, seqno: int, key: str, level: int = 1) -> bytes:
    return encode(0x60, dict(by_seqno=seqno, rev_seqno=1, flags=0x02000006, expiration=0,
                             lock_time=0, nru=0, deleted=0, durability_level=level),
                  key=key.encode(), value=doc(seqno), vbucket=vb, opaque=opaque, datatype=0x01,
                  cas=0x17A0000000000000 + seqno)


def commit(vb: int, opaque: int, prepared: int, seqno: int, key: str) -> bytes:
    return encode(0x62, dict(prepared_seqno=prepared, commit_seqno=seqno), key=key.encode(),
                  vbucket=vb, opaque=opaque)


def abort(vb: int, opaque: int, prepared: int, seqno: int, key: str) -> bytes:
    return encode(0x63, dict(prepared_seqno=prepared, abort_seqno=seqno), key=key.encode(),
                  vbucket=vb, opaque=opaque)


def mem(vb, opaque, start, end):
    return marker(vb, opaque, start, end, "memory+checkpoint", layout="V2.0",
                  max_visible_seqno=end, high_completed_seqno=0)


def disk(vb, opaque, start, end, hcs):
    return marker(vb, opaque, start, end, "disk+checkpoint", layout="V2.0",
                  max_visible_seqno=end, high_completed_seqno=hcs)




def _stream(s: Script, vb: int, opaque: int, consumer=False, **kw) -> None:
    ask, answer = (s.s2c, s.c2s) if consumer else (s.c2s, s.s2c)
    start = kw.get("start", 0)
    ask(stream_req(vb, opaque, uuid=UUID + vb if start else 0, **kw))
    answer(failover(opaque, (UUID + vb, 0)))


def _producer_conn(name: str, port: int, start_ns: int, controls=SYNC_REPL) -> Script:
    s = Script(Endpoint("10.0.6.2", port), PRODUCER, start_ns=start_ns)
    s.c2s(dcp_open(name, 0x1, 1))
    s.s2c(ok(0x50, 1))
    _controls(s, 2, *controls)
    return s


# --- legal ----------------------------------------------------------------------------------

def _legal_producer() -> Script:
    s = _producer_conn("durability-legal", 50600, T0)
    _stream(s, 0, 0x100)
    _stream(s, 1, 0x101)
    s.s2c(mem(0, 0x100, 0, 4))
    s.s2c(prepare(0, 0x100, 1, "k1"))
    s.s2c(mem(1, 0x101, 0, 3))
    s.s2c(prepare(0, 0x100, 2, "k2"))
    s.s2c(prepare(1, 0x101, 1, "x"))
    s.s2c(commit(0, 0x100, 1, 3, "k1"))
    s.s2c(abort(1, 0x101, 1, 2, "x"))
    s.s2c(commit(0, 0x100, 2, 4, "k2"))
    s.s2c(mutation(1, 0x101, 3, "y", doc(3)))
    s.s2c(mem(0, 0x100, 5, 6))
    s.s2c(prepare(0, 0x100, 5, "k3"))                   # left outstanding
    s.s2c(mem(1, 0x101, 4, 5))
    s.s2c(prepare(1, 0x101, 4, "x"))                    # a new prepare of an aborted key
    s.s2c(mutation(0, 0x100, 6, "z", doc(6)))
    s.s2c(commit(1, 0x101, 4, 5, "x"))
    # vb 0's cursor was dropped: a backfill. k3@5 was aborted at 7 and re-prepared at 8 (the
    # abort deduplicated away): the replica still holds k3@5, inside the duplicate window
    s.s2c(disk(0, 0x100, 7, 10, 7))
    s.s2c(prepare(0, 0x100, 8, "k3"))
    s.s2c(abort(0, 0x100, 7, 9, "k5"))                  # prepare 7 deduplicated: legal on disk
    s.s2c(mutation(0, 0x100, 10, "k6", doc(10)))        # a commit sent as a mutation
    s.s2c(mem(0, 0x100, 11, 12))
    s.s2c(commit(0, 0x100, 8, 11, "k3"))
    s.s2c(mutation(0, 0x100, 12, "z", doc(12)))
    s.s2c(encode(0x5C, opaque=10000001))
    s.c2s(ok(0x5C, 10000001))
    s.conv.close()
    return s


def _legal_consumer_leg() -> Script:
    """ns_server → replica memcached: the replica sends the controls and the stream request."""
    s = Script(Endpoint("10.0.6.3", 43600), Endpoint("10.0.6.2", 11209), start_ns=T0 + 2_000_000)
    s.c2s(dcp_open("replication:ns_1@10.0.6.1->ns_1@10.0.6.2:default", 0x0, 1))
    s.s2c(ok(0x50, 1))
    _controls(s, 2, *SYNC_REPL, consumer=True)
    _stream(s, 2, 0x202, consumer=True)
    s.c2s(mem(2, 0x202, 0, 3))
    s.c2s(prepare(2, 0x202, 1, "p"))
    s.c2s(prepare(2, 0x202, 2, "q"))
    s.c2s(commit(2, 0x202, 1, 3, "p"))
    s.c2s(mem(2, 0x202, 4, 4))
    s.c2s(abort(2, 0x202, 2, 4, "q"))
    s.conv.close()
    return s


def durability_legal() -> list[Script]:
    return [_legal_producer(), _legal_consumer_leg()]


# --- violations -----------------------------------------------------------------------------

def _violations_sync() -> Script:
    s = _producer_conn("durability-violations", 50610, T0)
    for vb in range(10):
        if vb == 9:
            _stream(s, 9, 0x109, start=5)               # resumes at 5
        else:
            _stream(s, vb, 0x100 + vb)
    # vb 0: commit of a prepare never sent; the replica answers KeyEnoent
    s.s2c(mem(0, 0x100, 0, 3))
    s.s2c(commit(0, 0x100, 1, 2, "a"))                  # sync-commit-without-prepare
    s.c2s(ok(0x62, 0x100, status=0x01))                 # sync-replica-error-reply
    s.s2c(mutation(0, 0x100, 3, "a0", doc(3)))
    # vb 1: abort in a memory snapshot without a prepare; the replica answers Einval
    s.s2c(mem(1, 0x101, 0, 3))
    s.s2c(abort(1, 0x101, 1, 2, "b"))                   # sync-abort-without-prepare
    s.c2s(ok(0x63, 0x101, status=0x04))                 # sync-replica-error-reply
    s.s2c(mutation(1, 0x101, 3, "b0", doc(3)))
    # vb 2: abort after the commit of the same prepare
    s.s2c(mem(2, 0x102, 0, 3))
    s.s2c(prepare(2, 0x102, 1, "c"))
    s.s2c(commit(2, 0x102, 1, 2, "c"))
    s.s2c(abort(2, 0x102, 1, 3, "c"))                   # sync-abort-after-commit
    # vb 3: the younger prepare committed first, in a memory snapshot
    s.s2c(mem(3, 0x103, 0, 4))
    s.s2c(prepare(3, 0x103, 1, "d"))
    s.s2c(prepare(3, 0x103, 2, "e"))
    s.s2c(commit(3, 0x103, 2, 3, "e"))                  # sync-completion-out-of-order
    s.s2c(commit(3, 0x103, 1, 4, "d"))
    # vb 4: a commit naming another prepare seqno
    s.s2c(mem(4, 0x104, 0, 3))
    s.s2c(prepare(4, 0x104, 1, "f"))
    s.s2c(mutation(4, 0x104, 2, "g", doc(2)))
    s.s2c(commit(4, 0x104, 2, 3, "f"))                  # sync-completion-seqno-mismatch
    # vb 5: a second prepare of a key while the first is outstanding (no Disk window)
    s.s2c(mem(5, 0x105, 0, 1))
    s.s2c(prepare(5, 0x105, 1, "h"))
    s.s2c(mem(5, 0x105, 2, 3))
    s.s2c(prepare(5, 0x105, 2, "h"))                    # sync-prepare-while-pending
    s.c2s(ok(0x60, 0x105, status=0xA2))                 # sync-replica-error-reply
    s.s2c(mutation(5, 0x105, 3, "h0", doc(3)))
    # vb 6: a mutation over an outstanding prepare in a memory snapshot
    s.s2c(mem(6, 0x106, 0, 2))
    s.s2c(prepare(6, 0x106, 1, "i"))
    s.s2c(mutation(6, 0x106, 2, "i", doc(2)))           # sync-mutation-while-pending
    # vb 7: the HCS of a Disk marker goes backwards
    s.s2c(disk(7, 0x107, 0, 3, 3))
    for i in (1, 2, 3):
        s.s2c(mutation(7, 0x107, i, f"j{i}", doc(i)))
    s.s2c(disk(7, 0x107, 4, 5, 1))                      # sync-hcs-backwards
    s.s2c(mutation(7, 0x107, 5, "j5", doc(5)))
    # vb 8: an abort after a commit inside a Disk snapshot: accepted
    s.s2c(disk(8, 0x108, 0, 3, 0))
    s.s2c(prepare(8, 0x108, 1, "l"))
    s.s2c(commit(8, 0x108, 1, 2, "l"))
    s.s2c(abort(8, 0x108, 1, 3, "l"))                   # sync-abort-after-commit-disk
    # vb 9 (resumed at 5): a commit of a prepare at or before the start: unsure
    s.s2c(mem(9, 0x109, 5, 7))
    s.s2c(commit(9, 0x109, 3, 6, "m"))                  # sync-prepare-unseen
    s.s2c(mutation(9, 0x109, 7, "m0", doc(7)))
    s.conv.close()
    return s


def _violations_no_sync_writes() -> Script:
    s = _producer_conn("durability-no-sync", 50620, T0 + 3_000_000,
                       controls=(("enable_noop", "true"),))
    _stream(s, 0, 0x200)
    s.s2c(marker(0, 0x200, 0, 2, "memory+checkpoint"))
    s.s2c(prepare(0, 0x200, 1, "n"))                    # sync-write-not-negotiated
    s.s2c(commit(0, 0x200, 1, 2, "n"))                  # sync-write-not-negotiated
    s.conv.close()
    return s


def durability_violations() -> list[Script]:
    return [_violations_sync(), _violations_no_sync_writes()]


SPECS: tuple = (
    Spec("durability-legal", "durability-legal.pcap",
         "sync writes as the replica accepts them, both connection roles: prepares committed "
         "and aborted in order on interleaved vbuckets, a Disk snapshot re-sending an "
         "outstanding prepare (duplicate-prepare window), a deduplicated prepare's abort, a "
         "commit sent as a mutation", durability_legal),
    Spec("durability-violations", "durability-violations.pcap",
         "each sync-write rule on its own vbucket: commit/abort without prepare, abort after "
         "commit (Memory and Disk), out-of-order and mismatched completions, prepare and "
         "mutation over an outstanding prepare, HCS backwards, the replica's error replies, a "
         "completion of a prepare before the stream's start, sync writes without "
         "enable_sync_writes", durability_violations),
)
