"""Events taken in batches (``analyze`` and ``dissect`` on a file) are the events, in order,
also when the capture breaks off in the middle: the events before the fault first, then the
fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcpdissect.capture.readers import CaptureError
from dcpdissect.reassembly.batches import in_batches
from dcpdissect.reassembly.pdus import iter_events

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _events(path) -> tuple[list, Exception | None]:
    out = []
    try:
        for ev in path:
            out.append(ev)
    except CaptureError as exc:
        return out, exc
    return out, None


def _flat(batches) -> tuple[list, list[int], Exception | None]:
    out, sizes = [], []
    try:
        for batch in batches:
            sizes.append(len(batch))
            out.extend(batch)
    except CaptureError as exc:
        return out, sizes, exc
    return out, sizes, None


@pytest.mark.parametrize("size", [1, 7, 256])
def test_whole_capture_same_events_in_order(size):
    path = str(SAMPLES / "durability-violations.pcap")
    plain, fault = _events(iter_events(path))
    batched, sizes, batched_fault = _flat(in_batches(iter_events(path), size))
    assert fault is None and batched_fault is None
    assert len(plain) > 50
    assert batched == plain
    assert all(n == size for n in sizes[:-1]) and 0 < sizes[-1] <= size


@pytest.mark.parametrize("size", [1, 7, 256])
def test_cut_capture_events_before_the_fault_then_the_fault(tmp_path, size):
    whole = (SAMPLES / "durability-violations.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(whole[:len(whole) * 2 // 3 + 5])     # ends inside a record
    plain, fault = _events(iter_events(str(cut)))
    batched, _, batched_fault = _flat(in_batches(iter_events(str(cut)), size))
    assert isinstance(fault, CaptureError)
    assert str(batched_fault) == str(fault)
    assert len(plain) > 20
    assert batched == plain


def test_interrupt_while_reading_keeps_what_was_read():
    def reader():
        yield from range(10)
        raise KeyboardInterrupt

    got = []
    with pytest.raises(KeyboardInterrupt):
        for batch in in_batches(reader(), 4):
            got.append(batch)
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_stopping_early_closes_cleanly():
    batches = in_batches(iter(range(100)), 10)
    assert next(batches) == list(range(10))
    batches.close()             # a consumer that breaks out of its loop
    with pytest.raises(StopIteration):
        next(batches)
