"""The language of the sample scenarios: a :class:`Script` records the MCBP messages sent on
one scripted TCP conversation (``netsynth``), a :class:`Spec` names a sample and how its
capture is made, and the helpers below build the messages every scenario sends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from ..codec import encode
from . import netsynth as ns
from .netsynth import Endpoint, TcpConversation

MAX_SEQNO = 2**64 - 1
T0 = 1_700_000_000_000_000_000


class Script:
    """A TCP conversation that remembers the MCBP messages sent on it."""

    def __init__(self, client: Endpoint, server: Endpoint, **kw):
        self.conv = TcpConversation(client, server, **kw)
        self.messages: list[tuple[str, int, bytes]] = []
        self.offsets = {"c2s": 0, "s2c": 0}

    def send(self, direction: str, *frames: bytes, **kw) -> None:
        """Send one or more frames; several frames are coalesced into shared segments."""
        for i, frame in enumerate(frames):
            self.messages.append((direction, self.offsets[direction], frame))
            self.offsets[direction] += len(frame)
            last = i == len(frames) - 1
            self.conv.send(direction, frame, coalesce_with_next=not last or kw.get("coalesce", False),
                           segment_sizes=kw.get("segment_sizes") if last else None)

    def c2s(self, *frames, **kw):
        self.send("c2s", *frames, **kw)

    def s2c(self, *frames, **kw):
        self.send("s2c", *frames, **kw)


@dataclass
class Spec:
    """One sample: its name, file and description; the scripts that make it, an optional
    transform of the first script's packets, the file format, and what the capture lacks
    (TCP gaps and resyncs a decoder must report, a snap length)."""
    name: str
    filename: str
    description: str
    scripts: Callable[[], list[Script]]
    transform: Callable[[list], list] | None = None
    fmt: str = "pcap"                      # pcap | pcapng | pcap.gz
    write_kw: dict = field(default_factory=dict)
    gaps: int = 0
    resyncs: int = 0
    snaplen: int | None = None             # every data frame of every script cut to it


# --- message helpers ----------------------------------------------------------------------

def dcp_open(name: str, flags: int, opaque: int) -> bytes:
    return encode(0x50, {"flags": flags}, key=name.encode(), opaque=opaque)


def ok(opcode: int, opaque: int, **kw) -> bytes:
    return encode(opcode, kw.pop("fields", None), request=False, opaque=opaque, **kw)


def control(key: str, value: str, opaque: int) -> bytes:
    return encode(0x5E, key=key.encode(), value=value.encode(), opaque=opaque)


def hello_exchange(s: "Script", opaque: int, *features: int) -> None:
    """HELLO with these features, answered by the server with the same list."""
    value = b"".join(f.to_bytes(2, "big") for f in features)
    s.c2s(encode(0x1F, key=b"dcpdissect", value=value, opaque=opaque))
    s.s2c(ok(0x1F, opaque, value=value))


def controls_exchange(s: "Script", first_opaque: int, *pairs: tuple[str, str],
                      consumer: bool = False) -> None:
    """DcpControl requests from the DCP consumer (the TCP server on a consumer connection),
    each answered Success by the producer side."""
    ask, answer = (s.s2c, s.c2s) if consumer else (s.c2s, s.s2c)
    for i, (k, v) in enumerate(pairs):
        ask(control(k, v, first_opaque + i))
        answer(ok(0x5E, first_opaque + i))


def stream_req(vb: int, opaque: int, start=0, end=MAX_SEQNO, uuid=0, snap_start=None,
               snap_end=None, flags=0, value=b"") -> bytes:
    return encode(0x53, dict(flags=flags, start_seqno=start, end_seqno=end, vbucket_uuid=uuid,
                             snap_start_seqno=start if snap_start is None else snap_start,
                             snap_end_seqno=start if snap_end is None else snap_end),
                  vbucket=vb, opaque=opaque, value=value)


def failover(opaque: int, *entries: tuple[int, int]) -> bytes:
    return encode(0x53, {"failover_log": [dict(vbucket_uuid=u, seqno=s) for u, s in entries]},
                  request=False, opaque=opaque)


def marker(vb: int, opaque: int, start: int, end: int, flags, layout="V1", sid=None, **extra) -> bytes:
    return encode(0x56, dict(start_seqno=start, end_seqno=end, flags=flags, **extra),
                  layout=layout, vbucket=vb, opaque=opaque, stream_id=sid)


def mutation(vb: int, opaque: int, seqno: int, key: str, value: bytes, sid=None, cas=None) -> bytes:
    return encode(0x57, dict(by_seqno=seqno, rev_seqno=1, flags=0x02000006, expiration=0),
                  key=key.encode(), value=value, vbucket=vb, opaque=opaque, datatype=0x01,
                  cas=cas if cas is not None else 0x17A0000000000000 + seqno, stream_id=sid)


def deletion(vb: int, opaque: int, seqno: int, key: str, sid=None) -> bytes:
    return encode(0x58, dict(by_seqno=seqno, rev_seqno=2, delete_time=1_700_000_000),
                  layout="V2", key=key.encode(), vbucket=vb, opaque=opaque,
                  cas=0x17A0000000000000 + seqno, stream_id=sid)


def expiration(vb: int, opaque: int, seqno: int, key: str) -> bytes:
    return encode(0x59, dict(by_seqno=seqno, rev_seqno=3, delete_time=1_700_000_100),
                  key=key.encode(), vbucket=vb, opaque=opaque, cas=0x17A0000000000000 + seqno)


def doc(seqno: int, size: int = 40) -> bytes:
    body = json.dumps({"seq": seqno, "pad": "x" * max(0, size - 24)}, separators=(",", ":"))
    return body.encode()


# --- transforms ---------------------------------------------------------------------------

def from_first_marker(pkts):
    """The capture starts at the server's first snapshot marker (no handshake, no request)."""
    first = next(i for i in ns.data_indices(pkts, "s2c") if pkts[i].payload[1] == 0x56)
    return ns.start_at(pkts, first)
