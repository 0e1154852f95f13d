"""Hostile captures: one per failure class the decoder must survive without losing what
can still be decoded.

* ``hostile-absurd-bodylen``: headers with body length 0xFFFFFFFF and 30 MiB + 1
  (frame-too-large, resync, later messages decoded);
* ``hostile-escape-overrun``: flexible-framing extras whose id/length escapes run off the
  end of the frame;
* ``hostile-ooo-storm``: a message in 1-byte segments captured in reverse order after a
  lost first segment, beyond the out-of-order buffer cap (tcp-cap, bounded buffer);
* ``hostile-seq-jump``: sequence numbers jump by 2^31 in both directions;
* ``hostile-garbage-tcp``: random bytes between messages (each run followed by two
  messages: after garbage a header is only trusted once the next one confirms it), and a
  connection of garbage;
* ``hostile-findings-flood``: more findings of one rule than the analyzer keeps.
"""

from __future__ import annotations

import dataclasses
import random

from ..codec import encode
from ..codec.header import pack as pack_header
from . import netsynth as ns
from .dsl import (
    T0,
    Script,
    Spec,
    dcp_open,
    doc,
    failover,
    marker,
    mutation,
    ok,
    stream_req,
)
from .netsynth import Endpoint

CONSUMER = Endpoint("10.0.9.2", 50900)
PRODUCER = Endpoint("10.0.9.1", 11210)
UUID = 0x4057113000000000
MAX_FRAME = 30 * 1024 * 1024


def _inject(s: Script, direction: str, raw: bytes) -> None:
    """Bytes that are not an MCBP message (they shift later stream offsets)."""
    s.conv.send(direction, raw)
    s.offsets[direction] += len(raw)


def _start(s: Script, name: str, vb: int = 0) -> None:
    s.c2s(dcp_open(name, 0x1, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(stream_req(vb, 0x100 + vb))
    s.s2c(failover(0x100 + vb, (UUID + vb, 0)))


def _header(opcode: int, bodylen: int, opaque: int) -> bytes:
    return pack_header(0x80, opcode, 0, 0, 0, 0, 0, bodylen, opaque, 0)


def absurd_bodylen() -> list[Script]:
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    _start(s, "hostile-absurd-bodylen")
    s.s2c(marker(0, 0x100, 0, 4, "memory+checkpoint"), mutation(0, 0x100, 1, "a", doc(1)))
    _inject(s, "s2c", _header(0x57, 0xFFFFFFFF, 0x100))
    s.s2c(mutation(0, 0x100, 2, "b", doc(2)), mutation(0, 0x100, 3, "c", doc(3)))
    _inject(s, "c2s", _header(0x5D, MAX_FRAME - 24 + 1, 7))
    s.c2s(encode(0x5D, {"bytes_to_ack": 500}, opaque=8))
    s.s2c(mutation(0, 0x100, 4, "d", doc(4)))
    s.conv.close()
    return [s]


def _flex(opcode: int, framing: bytes, opaque: int, value: bytes = b"") -> bytes:
    """A flexible-framing request whose framing extras are ``framing`` verbatim."""
    body = framing + value
    return pack_header(0x08, opcode, len(framing), 0, 0, 0, 0, len(body), opaque, 0) + body


def escape_overrun() -> list[Script]:
    s = Script(Endpoint("10.0.9.3", 40900), PRODUCER, start_ns=T0)
    s.c2s(dcp_open("hostile-escape-overrun", 0x1, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(encode(0x5E, key=b"enable_stream_id", value=b"true", opaque=2))
    s.s2c(ok(0x5E, 2))
    s.c2s(_flex(0x5E, b"\xf0", 3),              # id escape byte missing (last byte)
          _flex(0x5E, b"\x0f", 4),              # length escape byte missing
          _flex(0x5E, b"\xff", 5),              # both escapes, neither byte present
          _flex(0x5E, b"\x2f\x05", 6),          # length 15 + 5 runs past the end
          _flex(0x5E, b"\x22\x00", 7, b""),     # length 2 with one byte left
          _flex(0x5E, b"\xf1\x00", 8))          # id escape present, its data byte missing
    s.s2c(encode(0x53, dict(flags=0, start_seqno=0, end_seqno=2, vbucket_uuid=0,
                            snap_start_seqno=0, snap_end_seqno=0), vbucket=3, opaque=9))
    s.c2s(stream_req(1, 0x101, end=2))
    s.s2c(failover(0x101, (UUID + 1, 0)))
    s.s2c(marker(1, 0x101, 0, 2, "memory+checkpoint"), mutation(1, 0x101, 1, "x", doc(1)),
          mutation(1, 0x101, 2, "y", doc(2)))
    s.conv.close()
    return [s]


STORM_BYTES = 1100        # > the 1024-segment out-of-order cap


def ooo_storm() -> list[Script]:
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    _start(s, "hostile-ooo-storm")
    s.s2c(marker(0, 0x100, 0, 3, "memory+checkpoint"), mutation(0, 0x100, 1, "a", doc(1)))
    big = mutation(0, 0x100, 2, "storm", b"s" * (STORM_BYTES - 55 - 5))
    s.s2c(big, segment_sizes=(1,) * len(big))
    s.s2c(mutation(0, 0x100, 3, "after", doc(3)))
    s.c2s(encode(0x5D, {"bytes_to_ack": 3000}, opaque=5))
    s.conv.close()
    return [s]


def _storm(pkts):
    """Drop the storm's first segment, reverse the rest, drop the ACKs in between."""
    tiny = [i for i, p in enumerate(pkts) if p.direction == "s2c" and len(p.payload) == 1]
    lo, hi = tiny[0], tiny[-1]
    storm = [pkts[i] for i in tiny[1:]][::-1]
    times = [pkts[i].ts_ns for i in tiny[1:]]
    storm = [dataclasses.replace(p, ts_ns=t) for p, t in zip(storm, times)]
    return list(pkts[:lo]) + storm + list(pkts[hi + 1:])


def seq_jump() -> list[Script]:
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    _start(s, "hostile-seq-jump")
    s.s2c(marker(0, 0x100, 0, 4, "memory+checkpoint"), mutation(0, 0x100, 1, "a", doc(1)))
    s.c2s(encode(0x5D, {"bytes_to_ack": 100}, opaque=5))
    s.s2c(mutation(0, 0x100, 2, "b", doc(2)))         # after the jump
    s.s2c(mutation(0, 0x100, 3, "c", doc(3)), mutation(0, 0x100, 4, "d", doc(4)))
    s.c2s(encode(0x5D, {"bytes_to_ack": 200}, opaque=6))
    s.conv.close()
    return [s]


def _jump(pkts):
    """From the 4th server data segment (2nd client data segment) on, every sequence number
    of that direction moves by 2^31."""
    s2c = ns.data_indices(pkts, "s2c")[3]
    c2s = ns.data_indices(pkts, "c2s")[2]
    out = []
    for i, p in enumerate(pkts):
        if (p.direction == "s2c" and i >= s2c) or (p.direction == "c2s" and i >= c2s):
            p = dataclasses.replace(p, seq=(p.seq + 2**31) % 2**32)
        out.append(p)
    return out


def garbage_tcp() -> list[Script]:
    rng = random.Random(9)
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    _start(s, "hostile-garbage-tcp")
    s.s2c(marker(0, 0x100, 0, 6, "memory+checkpoint"))
    for k in (1, 2, 3):     # after garbage, a header is confirmed by the next one
        # trailing zeros: no candidate header reaches into the message, so it completes
        # in its own frame (as in tshark)
        _inject(s, "s2c", rng.randbytes(300 * k) + bytes(24))
        s.s2c(mutation(0, 0x100, 2 * k - 1, f"g{k}", doc(k)), mutation(0, 0x100, 2 * k, f"h{k}", doc(k)))
    _inject(s, "c2s", b"GET / HTTP/1.1\r\nHost: 10.0.9.1\r\n\r\n")
    s.c2s(encode(0x5D, {"bytes_to_ack": 100}, opaque=5))
    s.conv.close()
    junk = Script(Endpoint("10.0.9.4", 40901), PRODUCER, start_ns=T0 + 500)
    for _ in range(4):
        _inject(junk, "c2s", rng.randbytes(700))
        _inject(junk, "s2c", rng.randbytes(500))
    junk.conv.close()
    return [s, junk]


FLOOD = 1100              # > MAX_FINDINGS_PER_RULE (1000)


def findings_flood() -> list[Script]:
    s = Script(CONSUMER, PRODUCER, start_ns=T0)
    s.c2s(dcp_open("hostile-findings-flood", 0x1, 1))
    s.s2c(ok(0x50, 1))
    unknown = [pack_header(0x80, 0xEE, 0, 0, 0, 0, 0, 0, n, 0) for n in range(FLOOD)]
    for k in range(0, FLOOD, 50):
        s.c2s(*unknown[k:k + 50])
    s.conv.close()
    return [s]


SPECS: tuple[Spec, ...] = (
    Spec("hostile-absurd-bodylen", "hostile-absurd-bodylen.pcap",
         "headers with body length 0xFFFFFFFF (server) and 30 MiB + 1 (client): frame-too-large, "
         "resync, the later messages decoded", absurd_bodylen, resyncs=2),
    Spec("hostile-escape-overrun", "hostile-escape-overrun.pcap",
         "flexible-framing extras whose id/length escapes run off the end of the frame",
         escape_overrun),
    Spec("hostile-ooo-storm", "hostile-ooo-storm.pcap",
         "a message in 1-byte segments captured in reverse after a lost first segment: more "
         "out-of-order segments than the buffer holds (tcp-cap)", ooo_storm, _storm,
         gaps=1, resyncs=1),
    Spec("hostile-seq-jump", "hostile-seq-jump.pcap",
         "sequence numbers jump by 2^31 mid-stream in both directions (tcp-seq-jump)",
         seq_jump, _jump, gaps=2, resyncs=2),
    Spec("hostile-garbage-tcp", "hostile-garbage-tcp.pcap",
         "random bytes between messages, an HTTP request, and a connection of garbage",
         garbage_tcp, resyncs=6),    # the garbage connection and trailing bytes are reported too
    Spec("hostile-findings-flood", "hostile-findings-flood.pcap",
         "1100 requests with an unknown opcode: more findings of one rule than are kept",
         findings_flood),
)
