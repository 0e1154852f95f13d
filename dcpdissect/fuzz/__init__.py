"""Fuzzing of the whole decoding path, from capture file bytes to findings.

Each input is either a capture file (run through ``open_capture`` → link/TCP decode →
reassembly → MCBP framing → ``Analyzer``, and every PDU through the dissect record) or the
bytes of one MCBP frame (run through ``decode``, ``check_message``, the dissect record and
the Scapy ``MCBP`` layer). A failure is any exception other than the documented
``CaptureError`` (or ``ValueError`` from ``decode`` on fewer than 24 bytes), a broken
invariant, an input running longer than the time limit (hang) or allocating more than
the memory limit. :func:`run` fans the inputs out over worker processes; the CLI is
``python -m dcpdissect.fuzz``.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

from ..codec.header import frame_size
from ..protocol import HEADER_SIZE
from .gen import Input, make_input

__all__ = ["Failure", "Hang", "Report", "check_capture", "check_pdu", "run", "run_one"]


class Hang(Exception):
    """The per-input time limit expired."""


class Invariant(AssertionError):
    """The pipeline produced something it must never produce."""


@dataclass
class Failure:
    number: int
    kind: str            # 'crash', 'hang' or 'memory'
    how: str             # generator of the input
    input_kind: str
    error: str
    trace: str = ""
    data: bytes = b""


@dataclass
class Report:
    inputs: int = 0
    crashes: int = 0
    hangs: int = 0
    memory: int = 0
    seconds: float = 0.0
    peak_traced: int = 0           # largest tracemalloc peak of one sampled input (bytes)
    peak_rss: int = 0              # largest worker RSS (bytes)
    slowest: float = 0.0           # slowest single input (seconds)
    by_how: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    def merge(self, other: Report) -> None:
        self.inputs += other.inputs
        self.crashes += other.crashes
        self.hangs += other.hangs
        self.memory += other.memory
        self.peak_traced = max(self.peak_traced, other.peak_traced)
        self.peak_rss = max(self.peak_rss, other.peak_rss)
        self.slowest = max(self.slowest, other.slowest)
        for k, v in other.by_how.items():
            self.by_how[k] = self.by_how.get(k, 0) + v
        self.failures += other.failures

    def text(self) -> str:
        mib = 1 << 20
        return (f"inputs {self.inputs}  crashes {self.crashes}  hangs {self.hangs}  "
                f"memory {self.memory}  peak traced/input {self.peak_traced / mib:.1f} MiB  "
                f"peak RSS {self.peak_rss / mib:.0f} MiB  slowest {self.slowest * 1000:.0f} ms  "
                f"{self.rate:.0f} inputs/s ({self.seconds:.1f} s)")


# -- targets ----------------------------------------------------------------------------------

class _PduLike:
    __slots__ = ("conn", "data", "direction", "frame", "frames", "offset", "ts_ns")

    def __init__(self, data: bytes):
        self.frame, self.frames, self.ts_ns = 1, (1,), 0
        self.conn, self.direction, self.offset, self.data = 1, 0, 0, data


def check_pdu(data: bytes, scapy: bool = True) -> None:
    """One MCBP frame through the codec, the single-message rules, the dissect record and
    (optionally) Scapy."""
    from ..analysis.rules.structure import check_message
    from ..codec import decode
    from ..reports.messages import message_record
    if len(data) < 24:
        try:
            decode(data)
        except ValueError:
            pass
        else:
            raise Invariant("decode accepted fewer than 24 bytes")
    else:
        msg = decode(data)
        check_message(msg)
        message_record(_PduLike(data), msg)
    if scapy:
        from ..scapy import MCBP
        pkt = MCBP(data)
        pkt.summary()
        bytes(pkt)


def check_capture(path: str) -> None:
    """A capture file through the whole path; checks the invariants of every event."""
    from ..analysis.engine import Analyzer
    from ..analysis.findings import MAX_FINDINGS_PER_RULE
    from ..analysis.session import Pass
    from ..reassembly.pdus import Summary, iter_events
    from ..reports.findings import finding_record
    summary = Summary()
    run = Pass([_PduInvariants(), Analyzer()], MAX_FINDINGS_PER_RULE)
    run.run(iter_events(path, summary=summary))
    if run.error is not None and path not in str(run.error):
        raise Invariant(f"capture error does not name the file: {run.error}")
    for f in run.findings:
        finding_record(f)
    if summary.pdus > summary.frames * 65536:
        raise Invariant("more PDUs than the frames can carry")


class _PduInvariants:
    """Every PDU agrees with its body length, its frames are in order, its record builds."""

    def on_message(self, pdu, msg) -> None:
        from ..reports.messages import message_record
        d = pdu.data
        if len(d) < HEADER_SIZE or len(d) + pdu.missing != frame_size(d) or pdu.missing < 0:
            raise Invariant(f"PDU of {len(d)} bytes (+{pdu.missing} missing) disagrees "
                            "with its body length")
        fr = pdu.frames
        if not fr or list(fr) != sorted(set(fr)) or pdu.frame < fr[-1]:
            raise Invariant(f"bad provenance frames={fr} frame={pdu.frame}")
        message_record(pdu, msg)


# -- one input under a time and memory watch ---------------------------------------------------

def _alarm(signum, frame):
    raise Hang()


class Runner:
    """Runs inputs in this process with a per-input time limit (``SIGALRM``) and, every
    ``trace_every`` inputs, a tracemalloc peak measurement."""

    def __init__(self, time_limit: float = 10.0, mem_limit: int = 512 << 20,
                 trace_every: int = 50, scapy: bool = True, workdir: str | None = None):
        self.time_limit = time_limit
        self.mem_limit = mem_limit
        self.trace_every = trace_every
        self.scapy = scapy
        self._tmp = tempfile.mkdtemp(prefix="dcpfuzz-", dir=workdir or _shm())
        self.path = os.path.join(self._tmp, "input.pcap")
        self.report = Report()
        if hasattr(signal, "SIGALRM"):
            signal.signal(signal.SIGALRM, _alarm)

    def close(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass
        try:
            os.rmdir(self._tmp)
        except OSError:
            pass

    def run(self, number: int, inp: Input, keep_data: bool = True) -> Failure | None:
        rep = self.report
        rep.inputs += 1
        rep.by_how[inp.how] = rep.by_how.get(inp.how, 0) + 1
        traced = self.trace_every and number % self.trace_every == 0
        if inp.kind == "capture":
            with open(self.path, "wb") as f:
                f.write(inp.data)
        failure = None
        if traced:
            tracemalloc.start()
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, self.time_limit)
        try:
            if inp.kind == "capture":
                check_capture(self.path)
            else:
                check_pdu(inp.data, self.scapy)
        except Hang:
            failure = Failure(number, "hang", inp.how, inp.kind, f"ran longer than {self.time_limit} s")
        except MemoryError:
            failure = Failure(number, "memory", inp.how, inp.kind, "MemoryError", traceback.format_exc())
        except Exception as exc:     # noqa: BLE001 - every other exception is a crash
            failure = Failure(number, "crash", inp.how, inp.kind, f"{type(exc).__name__}: {exc}"[:500],
                              traceback.format_exc())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.perf_counter() - t0
        rep.slowest = max(rep.slowest, elapsed)
        if traced:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rep.peak_traced = max(rep.peak_traced, peak)
            if peak > self.mem_limit and failure is None:
                failure = Failure(number, "memory", inp.how, inp.kind,
                                  f"allocated {peak} bytes (limit {self.mem_limit})")
        if failure is not None:
            if keep_data:
                failure.data = inp.data
            if failure.kind == "crash":
                rep.crashes += 1
            elif failure.kind == "hang":
                rep.hangs += 1
            else:
                rep.memory += 1
            rep.failures.append(failure)
        return failure


def _shm() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _rss() -> int:
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_one(seed: int, number: int, **kw) -> Failure | None:
    """Rebuild and run one input of a run (for reproducing a failure)."""
    runner = Runner(**kw)
    try:
        return runner.run(number, make_input(seed, number))
    finally:
        runner.close()


def _work(args) -> Report:
    seed, start, count, kw = args
    address_space = kw.pop("address_space", None)
    if address_space:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        except (ValueError, OSError):
            pass
    runner = Runner(**kw)
    try:
        for n in range(start, start + count):
            runner.run(n, make_input(seed, n))
    finally:
        runner.close()
    rep = runner.report
    rep.peak_rss = _rss()
    return rep


def run(inputs: int, seed: int = 1, jobs: int = 1, *, batch: int = 2000, time_limit: float = 10.0,
        mem_limit: int = 512 << 20, trace_every: int = 50, scapy: bool = True,
        address_space: int | None = 4 << 30, crash_dir: str | None = None,
        batch_timeout: float = 900.0, progress=None) -> Report:
    """Run inputs ``0 .. inputs-1`` of ``seed``; failing inputs are written to ``crash_dir``."""
    kw = dict(time_limit=time_limit, mem_limit=mem_limit, trace_every=trace_every, scapy=scapy)
    tasks = [(seed, s, min(batch, inputs - s), dict(kw)) for s in range(0, inputs, batch)]
    total = Report()
    t0 = time.perf_counter()
    if jobs <= 1:
        results = map(_work, tasks)
        pool = None
    else:
        for t in tasks:
            t[3]["address_space"] = address_space
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(jobs, maxtasksperchild=50)
        results = pool.imap_unordered(_work, tasks)
    try:
        for _ in tasks:
            if pool is None:
                rep = next(results)
            else:
                try:        # a worker killed outright (or stuck in C code) stops reporting
                    rep = results.next(timeout=batch_timeout)
                except multiprocessing.TimeoutError:
                    total.hangs += 1
                    total.failures.append(Failure(-1, "hang", "worker", "batch",
                                                  f"a worker reported nothing for {batch_timeout} s"))
                    pool.terminate()
                    break
            total.merge(rep)
            total.seconds = time.perf_counter() - t0
            if crash_dir:
                for f in rep.failures:
                    save_failure(crash_dir, seed, f)
            if progress is not None:
                progress(total)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    total.seconds = time.perf_counter() - t0
    total.peak_rss = max(total.peak_rss, _rss())
    return total


def save_failure(directory: str, seed: int, f: Failure) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ext = "pcap" if f.input_kind == "capture" else "bin"
    path = d / f"seed{seed}-{f.number}-{f.kind}-{f.how}.{ext}"
    path.write_bytes(f.data)
    path.with_suffix(path.suffix + ".txt").write_text(
        f"seed {seed} input {f.number} ({f.how}, {f.input_kind}): {f.kind}\n{f.error}\n\n{f.trace}")
    return path
