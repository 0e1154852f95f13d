"""Captures with cuts: header-only snapshot lengths, lost segments, hidden partners.

Oracles: messages built byte for byte in the tests; tshark's couchbase dissector on real
snaplen captures (samples/real, dumpcap -s); every clean sample re-captured at several
snapshot lengths and with segments missing must stay free of warnings and errors.
"""

from __future__ import annotations

import io
import random
import subprocess
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import INFO, RULES
from dcpdissect.analysis.run import analyze_file
from dcpdissect.codec import decode
from dcpdissect.reassembly.framing import Hidden, LostPdu, Pdu, PduFramer, Resync
from dcpdissect.reassembly.pdus import iter_events
from dcpdissect.reassembly.tcp import LOST, UNCAPTURED
from dcpdissect.samples import netsynth as ns
from dcpdissect.samples.builder import all_specs
from dcpdissect.samples.dsl import mutation
from test_violations import CLEAN

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
REAL = SAMPLES / "real"

BIG = mutation(0, 0x10, 7, "big", b"v" * 5000)      # 24 + 31 + 3 + 5000 bytes
SMALL = [mutation(0, 0x10, i, f"k{i}", b"x" * 20) for i in (8, 9)]


def frame(chunks):
    """Feed (offset, bytes | ("gap", length, cause)) to one framer; its events."""
    f, out = PduFramer(1, 1), []
    pos = 0
    for n, c in enumerate(chunks, start=1):
        if isinstance(c, tuple):
            _, length, cause = c
            pos += length
            out += f.gap(pos, length, n, n, cause)
        else:
            out += f.data(pos, c, n, n)
            pos += len(c)
    return out + f.close()


def pdus(events):
    return [e for e in events if type(e) is Pdu]


# --- framing across cuts ----------------------------------------------------------------------

@pytest.mark.parametrize("cause", [UNCAPTURED, LOST])
def test_a_cut_inside_a_value_keeps_framing(cause):
    head = BIG[:100]
    events = frame([head, ("gap", 4000, cause), BIG[4100:], *SMALL])
    got = pdus(events)
    assert [(p.data, p.missing, p.frames) for p in got] == [
        (head, len(BIG) - 100, (1,)), (SMALL[0], 0, (4,)), (SMALL[1], 0, (5,))]
    assert not [e for e in events if type(e) in (Hidden, Resync, LostPdu)]
    m = decode(got[0].data)
    assert m.fields["by_seqno"] == 7 and m.key == b"big" and m.value_cut and not m.key_cut


def test_a_cut_over_a_boundary_hides_and_resumes_at_the_next_segment():
    # the cut takes the end of BIG and the whole of SMALL[0]; the next segment starts at
    # SMALL[1]'s header, which fits its layout: framing resumes there without waiting
    events = frame([BIG[:100], ("gap", len(BIG) - 100 + len(SMALL[0]), UNCAPTURED), SMALL[1]])
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["Pdu", "Hidden", "Resync", "Pdu"]
    assert events[0].missing == len(BIG) - 100
    assert events[1].offset == len(BIG) and events[1].cause == UNCAPTURED
    assert events[2].reason == "after_gap" and events[2].skipped == 0
    assert events[3].data == SMALL[1]


def test_a_header_cut_after_its_length_keeps_framing():
    events = frame([SMALL[0][:14], ("gap", len(SMALL[0]) - 14, UNCAPTURED), SMALL[1]])
    assert [type(e).__name__ for e in events] == ["LostPdu", "Pdu"]
    assert events[0].have == 14 and events[0].need == len(SMALL[0])
    assert events[1].data == SMALL[1]


def test_a_header_cut_before_its_length_loses_framing():
    events = frame([SMALL[0][:6], ("gap", len(SMALL[0]) - 6, LOST), SMALL[1]])
    assert [type(e).__name__ for e in events] == ["LostPdu", "Hidden", "Resync", "Pdu"]


def test_after_a_cut_value_bytes_are_not_taken_for_a_header():
    """Data after a cut that starts inside a value with a plausible but layout-less header
    (a mutation without extras): it is skipped until a header proven by the next one."""
    fake = b"\x80\x57" + b"\x00" * 22 + b"\x00" * 30
    doc = mutation(0, 0x10, 3, "d", fake)
    start = len(doc) - len(fake)                 # where the value, and the fake header, start
    events = frame([SMALL[0][:6], ("gap", len(SMALL[0]) - 6 + start, LOST), doc[start:],
                    SMALL[1]])
    assert [type(e).__name__ for e in events] == ["LostPdu", "Hidden", "Resync", "Pdu"]
    assert events[2].skipped == len(fake) and events[3].data == SMALL[1]


# --- analysis across cuts ---------------------------------------------------------------------

def findings(name, **kw):
    return [(f.rule, f.frame) for f in analyze_file(str(SAMPLES / name), **kw)[0]
            if RULES[f.rule].severity != INFO]


def test_stream_rules_resume_at_the_next_marker():
    got = analyze_file(str(SAMPLES / "cut-lost-headers.pcap"))[0]
    bad = [(f.rule, f.message) for f in got if RULES[f.rule].severity != INFO]
    # items 8 and 9 (outside [1,5], inside the hidden [6,9]) are not judged; 15 after the
    # [10,12] marker is
    assert bad == [("data-outside-snapshot", "seqno 15 outside the snapshot [10,12]")]
    assert [f.rule for f in got].count("semantics-suppressed") == 1
    assert [f.rule for f in got].count("lost-pdu") == 1


def test_a_partner_hidden_by_a_cut_shown_later_is_not_missed():
    """The producer's answer comes before the capture shows that the request was lost:
    response-without-request waits for the consumer's direction and is dropped."""
    assert findings("cut-request-hidden.pcap") == []
    events = list(iter_events(str(SAMPLES / "cut-request-hidden.pcap")))
    answer = next(e.frame for e in events if type(e) is Pdu and decode(e.data).opaque == 0x40)
    cut = next(e.frame for e in events if type(e) is Hidden)
    assert answer < cut


def test_header_only_capture_keeps_the_flagship_finding():
    assert findings("cut-resume-collapsed-snap256.pcap") == findings("resume-collapsed.pcap")


def test_uncaptured_values_are_said_once_per_rule():
    got = analyze_file(str(SAMPLES / "cut-snaplen-128.pcap"))[0]
    notes = [f for f in got if f.rule == "uncaptured-not-judged"]
    assert notes and len({f.fields["rule"] for f in notes}) == len(notes)


def test_clean_samples_stay_clean_when_cut():
    """Every clean sample captured at snapshot lengths 90-512 and with one or two data
    segments missing (each seeded): no warning, no error."""
    specs = {s.name: s for s in all_specs()}
    bad = []
    for name in CLEAN:
        spec = specs[name]
        if spec.fmt != "pcap" or spec.transform is not None:
            continue
        for snap in (None, 90, 128, 200, 256, 512):
            for drops, seed in ((0, 0), (1, 0), (1, 1), (2, 2)):
                rng = random.Random(seed)
                sources = [s.conv.packets() for s in spec.scripts()]
                if snap:
                    sources = [[ns.truncate_capture([p], 0, snap)[0] if p.payload else p
                                for p in src] for src in sources]
                for _ in range(drops):
                    k = rng.randrange(len(sources))
                    d = ns.data_indices(sources[k])
                    if len(d) > 2:
                        sources[k] = ns.drop(sources[k], rng.choice(d[1:]))
                buf = io.BytesIO()
                ns.write_pcap(buf, sources, **spec.write_kw)
                path = Path(f"/tmp/dcpdissect-cut-{name}-{snap}-{drops}-{seed}.pcap")
                path.write_bytes(buf.getvalue())
                try:
                    bad += [(path.name, f.rule, f.frame) for f in analyze_file(str(path))[0]
                            if RULES[f.rule].severity != INFO]
                finally:
                    path.unlink()
    assert bad == []


# --- real captures (dumpcap -s) ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["replication-lo-snap128.pcap", "replication-lo-snap256.pcap",
                                  "replication-lo-snap512.pcap"])
def test_real_header_only_captures_stay_clean(name):
    assert findings(REAL.name + "/" + name) == []


def test_real_loss_inside_a_12mb_value_keeps_every_message():
    events = list(iter_events(str(REAL / "big-document-lost-value.pcapng.gz")))
    whole = [e for e in iter_events(str(REAL / "big-document-lo.pcapng.gz")) if type(e) is Pdu]
    got = [e for e in events if type(e) is Pdu]
    assert len(got) == len(whole)
    cut = [p for p in got if p.missing]
    assert len(cut) == 1 and decode(cut[0].data).fields["by_seqno"] == 3
    assert not [e for e in events if type(e) is Hidden]
    assert findings(REAL.name + "/big-document-lost-value.pcapng.gz") == []


@pytest.mark.tshark
@pytest.mark.parametrize("name", ["replication-lo-snap128.pcap", "replication-lo-snap256.pcap",
                                  "replication-lo-snap512.pcap"])
def test_every_header_tshark_decodes_in_a_cut_capture_is_ours(name):
    """tshark's couchbase dissector shows the headers at the start of each cut segment;
    each is a message we decode (or, when its header is cut short, one we report lost)."""
    path = REAL / name
    out = subprocess.run(["tshark", "-r", str(path), "-d", "tcp.port==11209,couchbase",
                          "-d", "tcp.port==11210,couchbase", "-T", "fields", "-e",
                          "frame.number", "-e", "couchbase.opcode"], capture_output=True,
                         text=True, check=True).stdout
    theirs = sorted((int(fr), int(op, 16)) for fr, ops in
                    (line.split("\t") for line in out.splitlines() if "\t" in line)
                    for op in ops.split(",") if op)
    ours, lost = [], []
    for e in iter_events(str(path)):
        if type(e) is Pdu:
            ours.append((e.frames[-1], decode(e.data).opcode))
        elif type(e) is LostPdu:
            lost.append(e.frame)
    missing = [x for x in theirs if x not in ours]
    assert len(theirs) >= 30
    assert all(fr in lost for fr, _ in missing), missing
    assert len(missing) <= len(lost)
