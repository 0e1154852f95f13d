"""Write the kv_engine vectors (tests/kv_vectors.py) into one capture, one connection each.

Each connection (client 10.0.0.1:<40000 + n> -> server 10.0.0.2:11210) has the handshake, a
HELLO with the case's datatypes (JSON 0x0b, XATTR 0x06, Snappy 0x0a) plus Collections 0x12
when the case has collections, and its success response echoing the features; if the case
is ``opened``, a DcpOpen (seqno 0, flags 0: a consumer, as in the test fixture) with key
``kv-vectors-<n>`` and its success response; then the vector in a TCP segment of its own
(cut into 64000-byte segments when it is larger), then FIN.  Fully deterministic.
"""

from __future__ import annotations

import struct

from dcpdissect.samples import netsynth as ns
from kv_vectors import DCP_OPEN, HELLO, frame

CLIENT_IP, SERVER_IP, SERVER_PORT, FIRST_PORT = "10.0.0.1", "10.0.0.2", 11210, 40000
FEATURES = {"JSON": 0x0B, "XATTR": 0x06, "SNAPPY": 0x0A}
COLLECTIONS = 0x12
MAX_SEGMENT = 64000  # an IPv4 packet holds at most 65535 bytes
START_NS = 1_700_000_000_000_000_000
SPACING_NS = 1_000_000  # 1 ms per connection: connections never interleave


def hello_features(case) -> bytes:
    ids = [FEATURES[d] for d in case.datatypes] + ([COLLECTIONS] if case.collections else [])
    return b"".join(struct.pack(">H", f) for f in ids)


def conversation(n: int, case) -> tuple[ns.TcpConversation, int]:
    """The connection of case number ``n`` and the client stream offset of its vector."""
    conv = ns.TcpConversation(ns.Endpoint(CLIENT_IP, FIRST_PORT + n),
                              ns.Endpoint(SERVER_IP, SERVER_PORT),
                              start_ns=START_NS + n * SPACING_NS)
    feats = hello_features(case)
    sent = [frame(HELLO, key=b"kv-vectors", value=feats, opaque=1)]
    conv.send("c2s", sent[-1])
    conv.send("s2c", frame(HELLO, value=feats, magic=0x81, status=0, opaque=1))
    if case.opened:
        sent.append(frame(DCP_OPEN, struct.pack(">II", 0, 0), b"kv-vectors-%d" % n, opaque=2))
        conv.send("c2s", sent[-1])
        conv.send("s2c", frame(DCP_OPEN, magic=0x81, status=0, opaque=2))
    size = len(case.frame)
    cuts = [MAX_SEGMENT] * (size // MAX_SEGMENT) + [size % MAX_SEGMENT] * bool(size % MAX_SEGMENT)
    conv.send("c2s", case.frame, segment_sizes=cuts)
    conv.close("fin")
    return conv, sum(map(len, sent))


def write_vectors_pcap(path, cases, *, spans: dict | None = None) -> dict[str, int]:
    """Write ``cases``; return name -> frame number (1-based) of the segment ending the vector.

    ``spans``, if given, receives name -> (first, last) frame numbers of the vector's segments.
    """
    convs, offsets = zip(*(conversation(n, c) for n, c in enumerate(cases)))
    plans = [conv.packets() for conv in convs]
    written = ns.write_pcap(path, plans)
    number = {id(p): i + 1 for i, p in enumerate(written)}
    out = {}
    for case, plan, off in zip(cases, plans, offsets):
        frames = [number[id(p)] for p in plan
                  if p.direction == "c2s" and p.payload and p.stream_offset >= off]
        out[case.name] = frames[-1]
        if spans is not None:
            spans[case.name] = (frames[0], frames[-1])
    return out
