"""Property-based and mutation fuzzing of every decoding stage (dcpdissect.fuzz).

The long run is ``python -m dcpdissect.fuzz --inputs 1000000 --seed 1 --jobs 2``; here a
short deterministic run and hypothesis properties keep the invariants honest.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcpdissect import fuzz
from dcpdissect.analysis.rules.structure import check_message
from dcpdissect.capture.packets import SUPPORTED_LINKTYPES, decode_packet
from dcpdissect.capture.readers import CaptureError, open_capture
from dcpdissect.codec import decode, encode
from dcpdissect.codec.problems import FRAME_INFO
from dcpdissect.fuzz.gen import (
    Flow,
    make_input,
    mutate_file,
    mutate_pdu,
    pcap_bytes,
    seed_files,
    seed_pdus,
)
from dcpdissect.reassembly.framing import Pdu, PduFramer
from dcpdissect.reassembly.tcp import DirectionReassembler, StreamData

FAST = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

PCAP_HDR = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
PCAPNG_SHB = (b"\x0a\x0d\x0d\x0a" + struct.pack("<I", 28) + b"\x4d\x3c\x2b\x1a"
              + struct.pack("<HHq", 1, 0, -1) + struct.pack("<I", 28))


def test_short_deterministic_run_finds_nothing(tmp_path):
    rep = fuzz.run(2000, seed=7, jobs=1, time_limit=10, trace_every=25,
                   crash_dir=str(tmp_path / "crashes"))
    assert rep.inputs == 2000
    assert (rep.crashes, rep.hangs, rep.memory) == (0, 0, 0), \
        [(f.number, f.how, f.error) for f in rep.failures[:5]]
    assert rep.peak_traced < 256 << 20
    # every generator was exercised
    assert {"pdu", "mutate-file", "stream", "seq-jump", "garbage-tcp", "dcp-conversation"} <= set(rep.by_how)
    assert not (tmp_path / "crashes").exists()


def test_inputs_are_reproducible():
    assert make_input(3, 12345) == make_input(3, 12345)
    assert make_input(3, 1) != make_input(4, 1)


def test_runner_reports_crashes_and_hangs(tmp_path, monkeypatch):
    runner = fuzz.Runner(time_limit=0.2, trace_every=1)

    def boom(path):
        raise KeyError("x")

    def forever(path):
        while True:
            pass

    try:
        monkeypatch.setattr(fuzz, "check_capture", boom)
        f = runner.run(1, fuzz.Input("capture", "test", b"abc"))
        assert f.kind == "crash" and "KeyError" in f.error and f.data == b"abc"
        monkeypatch.setattr(fuzz, "check_capture", forever)
        f = runner.run(2, fuzz.Input("capture", "test", b"abc"))
        assert f.kind == "hang"
        assert (runner.report.crashes, runner.report.hangs) == (1, 1)
        path = fuzz.save_failure(str(tmp_path), 1, f)
        assert path.read_bytes() == b"abc" and "hang" in path.with_suffix(".pcap.txt").read_text()
    finally:
        runner.close()


def test_cli_prints_the_figures(capsys, tmp_path):
    from dcpdissect.fuzz.__main__ import main
    assert main(["--inputs", "200", "--seed", "2", "--crash-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for word in ("inputs tried   200", "crashes        0", "hangs          0", "peak memory",
                 "inputs/s"):
        assert word in out


# -- properties, stage by stage ------------------------------------------------------------

@FAST
@given(st.one_of(st.binary(max_size=600),
                 st.builds(lambda b: PCAP_HDR + b, st.binary(max_size=600)),
                 st.builds(lambda b: PCAPNG_SHB + b, st.binary(max_size=600))))
def test_reader_raises_only_capture_error(tmp_path, data):
    path = tmp_path / "x.pcap"
    path.write_bytes(data)
    try:
        with open_capture(str(path)) as reader:
            for frame in reader:
                assert frame.number >= 1
    except CaptureError as exc:
        assert str(path) in str(exc)


@FAST
@given(st.sampled_from(sorted(SUPPORTED_LINKTYPES) + [7, 65535]), st.binary(max_size=200))
def test_decode_packet_never_raises(linktype, data):
    seg = decode_packet(linktype, data)
    assert seg is None or 0 <= seg.seq < 2**32


@FAST
@given(st.integers(0, 10**9), st.data())
def test_codec_and_rules_never_raise(seed, data):
    rng = random.Random(seed)
    pdu = mutate_pdu(rng, rng.choice(seed_pdus()))
    if len(pdu) < 24:
        with pytest.raises(ValueError):
            decode(pdu)
        return
    check_message(decode(pdu))


@FAST
@given(st.lists(st.integers(1, 200), min_size=1, max_size=40), st.integers(0, 10**6))
def test_framing_is_independent_of_segmentation(cuts, seed):
    rng = random.Random(seed)
    pdus = [rng.choice(seed_pdus()) for _ in range(rng.randint(1, 8))]
    stream = b"".join(pdus)
    framer = PduFramer(1, 0)
    out, pos, k = [], 0, 0
    while pos < len(stream):
        n = cuts[k % len(cuts)]
        out += framer.data(pos, stream[pos:pos + n], k + 1, k)
        pos += n
        k += 1
    out += framer.close()
    assert [e.data for e in out if type(e) is Pdu] == pdus


class Seg:
    __slots__ = ("ack", "flags", "payload", "seq", "missing")

    def __init__(self, seq, payload):
        self.seq, self.ack, self.flags, self.payload, self.missing = seq, 0, 0x18, payload, 0


@FAST
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 300), min_size=1, max_size=60),
       st.randoms(use_true_random=False), st.integers(0, 5))
def test_reassembly_restores_any_order(isn, sizes, rnd, dups):
    """Any permutation (with duplicates) of segments within the buffer bounds gives back the
    bytes, whatever the wrap of the sequence numbers."""
    data = bytes(random.Random(len(sizes)).randbytes(sum(sizes)))
    segs, pos = [], 0
    for n in sizes:
        segs.append(Seg((isn + 1 + pos) & 0xFFFFFFFF, data[pos:pos + n]))
        pos += n
    order = segs[:]
    rnd.shuffle(order)
    order += [rnd.choice(segs) for _ in range(dups)]
    rd = DirectionReassembler()
    rd.set_isn(isn)
    got = []
    for i, s in enumerate(order):
        got += [e.data for e in rd.feed(i + 1, 0, s) if type(e) is StreamData]
    got += [e.data for e in rd.flush() if type(e) is StreamData]
    assert b"".join(got) == data


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.binary(min_size=0, max_size=120))
def test_scapy_layer_never_raises(data):
    fuzz.check_pdu(data, scapy=True)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10**9))
def test_mutated_seed_captures_run_the_whole_path(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "m.pcap"
    path.write_bytes(mutate_file(rng, rng.choice(seed_files())))
    fuzz.check_capture(str(path))


def test_absurd_lengths_resync_and_later_messages_decode(tmp_path):
    """Body length 0xFFFFFFFF and 30 MiB + 1 on an in-sync stream: the framer resyncs and
    the following messages are decoded."""
    from dcpdissect.analysis.run import analyze_file
    from dcpdissect.reassembly.pdus import iter_events
    good = [encode(0x5C, opaque=n) for n in range(4)]
    for bodylen in (0xFFFFFFFF, 30 * 1024 * 1024 - 24 + 1):
        bad = struct.pack(">BBHBBHIIQ", 0x80, 0x57, 0, 0, 0, 0, bodylen, 9, 0)
        f = Flow()
        frames = f.syn() + [f.seg(1, good[0] + good[1]), f.seg(1, bad), f.seg(1, good[2] + good[3])]
        path = tmp_path / "absurd.pcap"
        path.write_bytes(pcap_bytes(frames))
        assert [e.data for e in iter_events(str(path)) if type(e) is Pdu] == good
        rules = {f.rule for f in analyze_file(str(path))[0]}
        assert {"frame-too-large", "resync-after-garbage"} <= rules


def test_framing_extras_escapes_running_off_the_end():
    for framing in (b"\xf0", b"\x0f", b"\xff", b"\x2f\x05", b"\xf1\x00", b"\x1f"):
        body = framing
        pdu = struct.pack(">BBBBBBHIIQ", 0x08, 0x57, len(framing), 0, 0, 0, 0, len(body), 1, 0) + body
        msg = decode(pdu)
        assert any(p.code == FRAME_INFO for p in msg.problems), framing
        assert "framing-extras-encoding" in {r for r, _t, _f in check_message(msg)}
        fuzz.check_pdu(pdu)
