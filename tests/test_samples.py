"""The committed samples are the builder's output, and decode to exactly what it wrote."""

from collections import defaultdict

import pytest

from dcpdissect.codec import decode
from dcpdissect.reassembly.pdus import ConnectionOpened, Pdu, Resync, StreamGap, iter_events
from dcpdissect.reassembly.tcp import LOST
from dcpdissect.samples.builder import all_specs


def test_committed_samples_equal_a_fresh_build(built, samples_dir):
    committed = {p.name for p in samples_dir.iterdir() if p.is_file()}
    assert committed == {b.filename for b in built.values()}, \
        "samples/ differs from the scenarios' samples: python -m dcpdissect.regen"
    for sample in built.values():
        assert (samples_dir / sample.filename).read_bytes() == sample.data, \
            f"samples/{sample.filename} is stale: python -m dcpdissect.regen"


@pytest.mark.parametrize("name", [s.name for s in all_specs()])
def test_sample_decodes_to_exactly_the_written_messages(name, built, samples_dir):
    sample = built[name]
    events = list(iter_events(str(samples_dir / sample.filename)))
    ends = {e.conn: (e.client, e.server) for e in events if type(e) is ConnectionOpened}
    got = defaultdict(list)
    for e in events:
        if type(e) is Pdu:
            got[(*ends[e.conn], e.direction)].append((e.data, e.frames, e.missing))
    want = defaultdict(list)
    for m in sample.messages:
        want[(m.client, m.server, m.direction)].append((m.data, m.frames, m.missing))
    assert dict(got) == dict(want)
    assert sum(type(e) is StreamGap and e.cause == LOST for e in events) == sample.gaps
    assert sum(type(e) is Resync for e in events) == sample.resyncs
    if name.startswith(("violations-", "hostile-")):
        return      # these samples carry malformed messages on purpose
    for data, _, missing in (x for v in got.values() for x in v):
        assert decode(data).problems == [] or missing


def test_pathology_samples_lose_only_what_the_capture_lacks(built):
    assert built["tcp-loss"].lost == 0            # the document cut by the lost segment
    assert built["tcp-loss"].partial == 1         # is decoded from its captured start
    assert built["tcp-loss-header"].lost >= 1
    assert built["tcp-mid-stream"].lost > 0
    for name in ("tcp-reorder", "tcp-retransmit", "tcp-seq-wrap", "clean-replication"):
        assert built[name].lost == 0, name


def test_reordered_pdu_completes_in_the_later_frame(samples_dir):
    pdus = [e for e in iter_events(str(samples_dir / "tcp-reorder.pcap")) if type(e) is Pdu]
    late = [p for p in pdus if p.frame > max(p.frames)]
    assert late, "the reorder sample must deliver a PDU only when an earlier hole fills"


def test_pdu_ending_at_a_chunk_boundary_does_not_claim_the_next_frame():
    from dcpdissect.codec import encode
    from dcpdissect.reassembly.framing import PduFramer
    a, b = encode(0x5C, opaque=1), encode(0x5C, opaque=2)
    framer = PduFramer(1, 1, in_sync=False)
    out = framer.data(0, b"\x00" * 5 + a[:10], 1, 0) + framer.data(15, a[10:], 2, 0)
    out += framer.data(5 + len(a), b, 3, 0) + framer.close()
    pdus = [e for e in out if type(e) is Pdu]
    assert [p.frames for p in pdus] == [(1, 2), (3,)]
