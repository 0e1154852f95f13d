"""Input generators for fuzzing: mutated capture files, mutated PDUs and hostile TCP.

Every generator is a pure function of a ``random.Random``; :func:`make_input` maps an
input number and a seed to one input, so any input of a run can be rebuilt exactly.
Captures are written by a small raw pcap writer (Ethernet / IPv4 / TCP, no checksums:
the decoder does not verify them), fast enough for millions of inputs.
"""

from __future__ import annotations

import random
import struct
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from ..protocol import opcode_code
from .messages import Stream, any_message, message

MASK = 0xFFFFFFFF
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
MAX_FRAME = 30 * 1024 * 1024

_PCAP_HDR = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
_REC = struct.Struct("<IIII")
_ETH = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
_IP = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
INTERESTING = (0x00, 0x01, 0x02, 0x0F, 0x10, 0x18, 0x7F, 0x80, 0x81, 0x82, 0x83, 0x08,
               0xF0, 0xFE, 0xFF)
ABSURD_BODYLENS = (0xFFFFFFFF, MAX_FRAME - 24 + 1, MAX_FRAME - 24, 0x80000000, 0x7FFFFFFF,
                   0x10000, 0)


class Input(NamedTuple):
    kind: str        # 'capture' (file bytes) or 'pdu' (one MCBP frame's bytes)
    how: str         # generator name, for the report
    data: bytes


# -- seeds ----------------------------------------------------------------------------------

def samples_dir() -> Path:
    return Path(__file__).resolve().parent.parent.parent / "samples"


@lru_cache(maxsize=1)
def seed_files() -> tuple[bytes, ...]:
    """The committed sample captures (built afresh when the directory is absent)."""
    d = samples_dir()
    files = sorted(p for p in d.glob("*") if p.is_file()) if d.is_dir() else []
    if files:
        return tuple(p.read_bytes() for p in files)
    from ..samples.builder import build_all
    return tuple(s.data for s in build_all().values())


@lru_cache(maxsize=1)
def seed_pdus() -> tuple[bytes, ...]:
    """Every whole PDU of the seed captures (deduplicated, in a stable order)."""
    import os
    import tempfile

    from ..reassembly.pdus import CaptureError, Pdu, iter_events
    seen: dict[bytes, None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, data in enumerate(seed_files()):
            path = os.path.join(tmp, f"seed{n}")
            with open(path, "wb") as f:
                f.write(data)
            try:
                for ev in iter_events(path):
                    if type(ev) is Pdu and not ev.missing:
                        seen.setdefault(ev.data, None)
            except CaptureError:
                pass
    return tuple(seen)


# -- raw capture writer ---------------------------------------------------------------------

def tcp_frame(src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int,
              payload: bytes = b"") -> bytes:
    """An Ethernet/IPv4/TCP frame; ``src``/``dst`` are IPv4 addresses as integers."""
    ip = _IP.pack(0x45, 0, 40 + len(payload), 0, 0x4000, 64, 6, 0,
                  src.to_bytes(4, "big"), dst.to_bytes(4, "big"))
    tcp = _TCP.pack(sport, dport, seq & MASK, ack & MASK, 0x50, flags, 65535, 0, 0)
    return _ETH + ip + tcp + payload


def pcap_bytes(frames) -> bytes:
    """A classic little-endian microsecond pcap of Ethernet frames (1 µs apart)."""
    out = [_PCAP_HDR]
    for n, frame in enumerate(frames):
        out.append(_REC.pack(1_700_000_000 + n // 1_000_000, n % 1_000_000, len(frame), len(frame)))
        out.append(frame)
    return b"".join(out)


class Flow:
    """Both directions of one synthetic TCP connection, as frames."""

    def __init__(self, client: int = 0x0A000002, server: int = 0x0A000001, sport: int = 50000,
                 dport: int = 11210, isn_c: int = 1000, isn_s: int = 5000):
        self.ends = ((client, sport), (server, dport))
        self.nxt = [isn_c & MASK, isn_s & MASK]

    def syn(self) -> list[bytes]:
        (c, cp), (s, sp) = self.ends
        out = [tcp_frame(c, s, cp, sp, self.nxt[0], 0, SYN),
               tcp_frame(s, c, sp, cp, self.nxt[1], self.nxt[0] + 1, SYN | ACK)]
        self.nxt = [(self.nxt[0] + 1) & MASK, (self.nxt[1] + 1) & MASK]
        return out

    def seg(self, direction: int, payload: bytes, seq: int | None = None, flags: int = ACK | PSH,
            advance: bool = True) -> bytes:
        (a, ap), (b, bp) = self.ends if direction == 0 else self.ends[::-1]
        s = self.nxt[direction] if seq is None else seq
        frame = tcp_frame(a, b, ap, bp, s, self.nxt[1 - direction], flags, payload)
        if advance:
            self.nxt[direction] = (s + len(payload)) & MASK
        return frame

    def segments(self, direction: int, data: bytes, sizes) -> list[bytes]:
        out, pos = [], 0
        for n in sizes:
            if pos >= len(data):
                break
            out.append(self.seg(direction, data[pos:pos + n]))
            pos += n
        if pos < len(data):
            out.append(self.seg(direction, data[pos:]))
        return out

    def fin(self) -> list[bytes]:
        return [self.seg(0, b"", flags=FIN | ACK), self.seg(1, b"", flags=FIN | ACK)]


# -- PDU mutations --------------------------------------------------------------------------

def _set_u32(b: bytearray, pos: int, v: int) -> None:
    if pos + 4 <= len(b):
        struct.pack_into(">I", b, pos, v & MASK)


def mutate_pdu(rng: random.Random, data: bytes) -> bytes:
    """One to four mutations of an MCBP frame (header fields, body bytes, lengths)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.25 and b:                                  # header byte
            b[rng.randrange(min(len(b), 24))] = rng.choice(INTERESTING + (rng.randrange(256),))
        elif r < 0.40 and b:                                # bit flip anywhere
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif r < 0.50:                                      # absurd body length
            _set_u32(b, 8, rng.choice(ABSURD_BODYLENS))
        elif r < 0.62 and len(b) >= 24:                     # framing extras that overrun
            b[0] = rng.choice((0x08, 0x18))
            flen = rng.randrange(1, 6)
            b[2] = flen
            tail = bytes(rng.choice((0xF0, 0x0F, 0xFF, 0x2F, 0xF2, 0x0E)) for _ in range(flen))
            b[24:24 + flen] = tail
        elif r < 0.72 and len(b) > 1:                       # truncate
            del b[rng.randrange(1, len(b)):]
        elif r < 0.80:                                      # extras / key length
            if len(b) >= 24:
                b[rng.choice((2, 3, 4))] = rng.choice((0, 1, 20, 31, 0xFF))
        elif r < 0.88:                                      # random tail bytes
            b += rng.randbytes(rng.randrange(1, 64))
        elif b:                                             # overwrite a slice
            i = rng.randrange(len(b))
            n = rng.randrange(1, 16)
            b[i:i + n] = rng.randbytes(n)
    return bytes(b)


def pdu_input(rng: random.Random) -> bytes:
    """Random bytes, a splice of two seed PDUs, or a mutated seed PDU or message drawn
    from the protocol tables (every opcode, whether the samples carry it or not)."""
    pdus = seed_pdus()
    r = rng.random()
    if r < 0.05:
        return rng.randbytes(rng.randrange(0, 96))
    if r < 0.15:                                            # splice two PDUs
        a, b = rng.choice(pdus), rng.choice(pdus)
        return a[:rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1):]
    if r < 0.40:
        message = any_message(rng)
        return mutate_pdu(rng, message) if rng.random() < 0.8 else message
    return mutate_pdu(rng, rng.choice(pdus))


# -- capture-file mutations -----------------------------------------------------------------

def mutate_file(rng: random.Random, data: bytes) -> bytes:
    """Byte-level mutations of a capture file: flips, interesting values, truncation,
    block duplication/removal, splicing with another seed, record length corruption."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        n = len(b)
        if n == 0:
            b += rng.randbytes(rng.randrange(1, 64))
            continue
        if r < 0.30:
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(n)
                b[i] ^= 1 << rng.randrange(8)
        elif r < 0.45:
            b[rng.randrange(n)] = rng.choice(INTERESTING)
        elif r < 0.55:
            del b[rng.randrange(n):]
        elif r < 0.63:
            i, j = sorted((rng.randrange(n), rng.randrange(n)))
            b[j:j] = b[i:min(j, i + 2048)]
        elif r < 0.70:
            i = rng.randrange(n)
            del b[i:i + rng.randrange(1, 256)]
        elif r < 0.78:
            other = rng.choice(seed_files())
            b = b[:rng.randrange(n + 1)] + bytearray(other[rng.randrange(len(other) + 1):])
        elif r < 0.88:                                   # a 32-bit field set to an extreme
            if n >= 4:
                i = rng.randrange(n - 3)
                struct.pack_into(rng.choice("<>") + "I", b, i,
                                 rng.choice((0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x10000000, 24, 65535)))
        else:
            i = rng.randrange(n)
            k = rng.randrange(1, 32)
            b[i:i + k] = rng.randbytes(k)
    return bytes(b)


# -- hostile TCP generators -------------------------------------------------------------------

def _pdu_stream(rng: random.Random, count: int) -> bytes:
    pdus = seed_pdus()
    parts = []
    for _ in range(count):
        p = rng.choice(pdus)
        if rng.random() < 0.3:
            p = mutate_pdu(rng, p)
        parts.append(p)
    return b"".join(parts)


def _sizes(rng: random.Random, total: int) -> list[int]:
    out, left = [], total
    small = rng.random() < 0.3
    while left > 0:
        n = rng.randint(1, 16) if small else rng.randint(1, 1448)
        out.append(min(n, left))
        left -= n
    return out


def stream_capture(rng: random.Random) -> bytes:
    """A few connections carrying (partly mutated) PDUs, cut into random segments,
    then reordered, duplicated, dropped, overlapped with other bytes or truncated."""
    frames: list[bytes] = []
    for k in range(rng.randint(1, 4)):
        f = Flow(sport=40000 + k, dport=rng.choice((11210, 11209)),
                 isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32))
        if rng.random() < 0.8:
            frames += f.syn()
        for _ in range(rng.randint(1, 4)):
            d = rng.randrange(2)
            data = _pdu_stream(rng, rng.randint(1, 6))
            frames += f.segments(d, data, _sizes(rng, len(data)))
        if rng.random() < 0.7:
            frames += f.fin()
    _disorder(rng, frames)
    return pcap_bytes(frames)


def _disorder(rng: random.Random, frames: list[bytes]) -> None:
    n = len(frames)
    if n < 2:
        return
    for _ in range(rng.randint(0, 4)):
        r = rng.random()
        i = rng.randrange(n)
        j = rng.randrange(n)
        if r < 0.4:
            frames[i], frames[j] = frames[j], frames[i]
        elif r < 0.6:
            frames.insert(j, frames[i])
        elif r < 0.8 and len(frames) > 2:
            del frames[i]
        else:
            fr = bytearray(frames[i])
            if len(fr) > 54:
                k = rng.randrange(54, len(fr))
                fr[k] ^= 0xFF
                frames.insert(j, bytes(fr))
        n = len(frames)


def ooo_storm(rng: random.Random, segments: int | None = None) -> bytes:
    """One direction sent in many small segments, captured in reverse (or shuffled)
    order after a lost first segment: far more out-of-order data than the buffer holds."""
    segments = segments or rng.randint(50, 1300)
    f = Flow(isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32))
    frames = f.syn()
    data = _pdu_stream(rng, max(1, segments // 4))
    sizes = [max(1, len(data) // segments)] * segments
    segs = f.segments(1, data, sizes)
    body = segs[1:]
    if rng.random() < 0.5:
        body.reverse()
    else:
        rng.shuffle(body)
    frames += body
    if rng.random() < 0.5:
        frames.append(segs[0])
    return pcap_bytes(frames)


def seq_jump(rng: random.Random) -> bytes:
    """Sequence numbers that jump by 2^31 (and nearby) in the middle of a stream."""
    f = Flow(isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32))
    frames = f.syn()
    for _ in range(rng.randint(1, 6)):
        data = _pdu_stream(rng, rng.randint(1, 4))
        frames += f.segments(1, data, _sizes(rng, len(data)))
        f.nxt[1] = (f.nxt[1] + rng.choice((1 << 31, (1 << 31) - 1, (1 << 31) + 1, 1 << 30,
                                           -(1 << 31)))) & MASK
    frames += f.fin()
    return pcap_bytes(frames)


def many_connections(rng: random.Random, count: int | None = None) -> bytes:
    """Many simultaneous connections, each with one message in flight, interleaved."""
    count = count or rng.randint(50, 600)
    pdus = seed_pdus()
    flows = [Flow(client=0x0A000000 + (k >> 14), sport=1024 + (k & 0x3FFF),
                  isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32)) for k in range(count)]
    frames = []
    for f in flows:
        frames += f.syn()
    for f in flows:
        p = rng.choice(pdus)
        frames.append(f.seg(0, p[:rng.randrange(1, len(p) + 1)]))
    if rng.random() < 0.5:
        for f in flows:
            frames += f.fin()
    return pcap_bytes(frames)


def garbage_tcp(rng: random.Random) -> bytes:
    """A connection whose payload is random bytes with the odd valid PDU inside."""
    f = Flow(isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32))
    frames = f.syn()
    pdus = seed_pdus()
    for _ in range(rng.randint(1, 8)):
        data = rng.randbytes(rng.randrange(1, 3000))
        if rng.random() < 0.5:
            data += rng.choice(pdus)
        frames += f.segments(rng.randrange(2), data, _sizes(rng, len(data)))
    return pcap_bytes(frames)


# -- structurally valid DCP conversations with random content --------------------------------

def dcp_conversation(rng: random.Random) -> bytes:
    """One or two connections of well-framed DCP messages with random fields and order
    (stream state machines, resume and rollback checks)."""
    from ..samples.dsl import dcp_open, ok
    frames: list[bytes] = []
    name = rng.choice(("replication:a->b:default", "eq_dcpq:x", "java-dcp-client"))
    for k in range(rng.randint(1, 2)):
        f = Flow(sport=45000 + k, dport=rng.choice((11210, 11209)),
                 isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32))
        frames += f.syn()
        frames.append(f.seg(0, dcp_open(name, rng.choice((0, 1, 0x25)), 1)))
        frames.append(f.seg(1, ok(opcode_code("DcpOpen"), 1)))
        vbs = [rng.randrange(4) for _ in range(3)]
        streams = {vb: Stream(rng) for vb in vbs}
        for _ in range(rng.randint(2, 40)):
            vb = rng.choice(vbs)
            d, msg = message(rng, streams[vb], vb,
                             0x100 + vb if rng.random() < 0.9 else rng.randrange(1 << 32))
            frames.append(f.seg(d, msg))
        if rng.random() < 0.8:
            frames += f.fin()
    return pcap_bytes(frames)


CAPTURE_GENERATORS = (
    ("mutate-file", 40, lambda rng: mutate_file(rng, rng.choice(seed_files()))),
    ("random-bytes", 3, lambda rng: rng.choice((b"", _PCAP_HDR, b"\x0a\x0d\x0d\x0a"))
     + rng.randbytes(rng.randrange(0, 512))),
    ("stream", 30, stream_capture),
    ("ooo-storm", 2, ooo_storm),
    ("seq-jump", 8, seq_jump),
    ("many-connections", 2, many_connections),
    ("garbage-tcp", 8, garbage_tcp),
    ("mutate-stream", 5, lambda rng: mutate_file(rng, stream_capture(rng))),
    ("dcp-conversation", 20, dcp_conversation),
)
_CAP_NAMES = [g[0] for g in CAPTURE_GENERATORS]
_CAP_WEIGHTS = [g[1] for g in CAPTURE_GENERATORS]
_CAP_FUNCS = {g[0]: g[2] for g in CAPTURE_GENERATORS}


def make_input(seed: int, number: int, pdu_share: float = 0.5) -> Input:
    """Input ``number`` of the run seeded with ``seed``."""
    rng = random.Random((seed << 40) ^ number)
    if rng.random() < pdu_share:
        return Input("pdu", "pdu", pdu_input(rng))
    how = rng.choices(_CAP_NAMES, _CAP_WEIGHTS)[0]
    return Input("capture", how, _CAP_FUNCS[how](rng))
