"""dissect's one pass: records leave in capture order, each marker's with its convention,
whatever the number of records held in memory before they go to the temporary file."""

import pytest

from dcpdissect.analysis.conventions import InCaptureOrder, classify_file, marker_key
from dcpdissect.analysis.engine import Analyzer
from dcpdissect.codec import decode
from dcpdissect.reassembly.pdus import CaptureError, Pdu, iter_events
from dcpdissect.reports.messages import jsonl_line, labelled_json, message_json, message_record

SAMPLES = ("stream-markers.pcap", "clean-replication.pcap", "stream-oso.pcap",
           "resume-collapsed.pcap", "tcp-loss.pcap")


def ordered_records(path, max_held, make=message_record, labelled=None,
                    conventions_only=False):
    out = []
    ordered = InCaptureOrder(out.append, max_held=max_held, labelled=labelled)
    analyzer = Analyzer(on_marker=ordered.label, conventions_only=conventions_only)
    for ev in iter_events(path):
        analyzer.feed(ev)
        if type(ev) is Pdu:
            msg = decode(ev.data)
            ordered.add(ev, msg, make(ev, msg))
    analyzer.finish()
    ordered.close()
    return out


@pytest.mark.parametrize("name", SAMPLES)
def test_records_in_capture_order_with_their_conventions(samples_dir, name):
    path = str(samples_dir / name)
    plain = [message_record(ev, decode(ev.data)) for ev in iter_events(path) if type(ev) is Pdu]
    labels = classify_file(path)
    want = []
    for ev, record in zip((ev for ev in iter_events(path) if type(ev) is Pdu), plain):
        if "convention" in record or (record["opcode"] == 0x56 and record["magic"] in (0x80, 0x08)):
            record = {**record, "convention": labels.get(marker_key(ev))}
        want.append(record)
    assert any(r.get("convention") for r in want) or name == "tcp-loss.pcap"
    for max_held in (1, 2, 3, 10_000):
        got = ordered_records(path, max_held)
        assert [(r["frame"], r["opcode"]) for r in got] == [(r["frame"], r["opcode"]) for r in want]
        assert [r.get("convention") for r in got] == [r.get("convention") for r in want], max_held


def _labels(path, **options):
    labels = []
    analyzer = Analyzer(on_marker=lambda pdu, label: labels.append((marker_key(pdu), label)),
                        **options)
    try:
        for ev in iter_events(path):
            analyzer.feed(ev)
    except CaptureError:            # a damaged sample: compare what was read before the fault
        labels.append("fault")
    analyzer.finish()
    return labels


def test_conventions_only_labels_every_sample_like_the_full_analyzer(samples_dir):
    """dissect runs the analyzer with ``conventions_only``: the full one is the reference."""
    paths = sorted(p for p in samples_dir.iterdir() if p.suffix in (".pcap", ".pcapng", ".gz"))
    assert len(paths) > 50
    labelled = 0
    for path in paths:
        full = _labels(str(path))
        assert _labels(str(path), conventions_only=True) == full, path.name
        labelled += sum(1 for _, label in full if label is not None)
    assert labelled > 50


@pytest.mark.parametrize("name", SAMPLES)
def test_json_lines_in_capture_order_with_the_conventions_of_the_full_analyzer(samples_dir,
                                                                               name):
    """dissect's own path: JSON texts labelled as they leave, conventions from the
    conventions-only analyzer; the same lines as the records labelled by the full one."""
    path = str(samples_dir / name)
    want = [jsonl_line(r) for r in ordered_records(path, 10_000)]
    for max_held in (1, 3, 10_000):
        got = ordered_records(path, max_held, message_json, labelled_json, conventions_only=True)
        assert [text + "}\n" for text in got] == want, max_held
