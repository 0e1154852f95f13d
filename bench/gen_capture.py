"""Generate a large, realistic DCP capture for benchmarks.

Several replication connections, each streaming several vbuckets: a stream request and its
failover log, then snapshot markers every ~50 items (memory and disk, V1/V2.0/V2.2),
mutations and deletions with 100-1500 byte documents, noops and buffer acks; the server's
bytes are cut into 1448-byte segments, so PDUs span segments and segments hold several
PDUs. Frames are written directly with struct (TCP checksums left 0, as offloading NICs
capture them) so that gigabyte captures build in reasonable time.

    python bench/gen_capture.py OUT.pcap --size 100MB [--connections 4] [--vbuckets 16]
    python bench/gen_capture.py OUT.pcap --size 150MB --shape many-vbuckets

Shapes (``SHAPES``): ``replication`` (4 connections of 16 vbuckets, ~50 items per marker,
100-1500 byte documents) and ``many-vbuckets`` (1024 vbuckets interleaved over 2
connections, 10 items per marker, 50-900 byte documents: many small messages per frame) and
``shared-vbuckets`` (4 consumers with their own names streaming vbucket 0 of one server, as
replication, indexing, search and a connector do).
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
from typing import NamedTuple

from dcpdissect.codec import encode
from dcpdissect.samples.dsl import dcp_open, failover, ok, stream_req

MSS = 1448
ETH = bytes.fromhex("020000000001" "020000000002" "0800")
_IP = struct.Struct(">BBHHHBBH4s4s")
_TCP = struct.Struct(">HHIIBBHHH")
_REC = struct.Struct("<IIII")
T0 = 1_700_000_000


def parse_size(text: str) -> int:
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
    for unit, mul in units.items():
        if text.upper().endswith(unit):
            return int(float(text[:-2]) * mul)
    return int(text)


class Shape(NamedTuple):
    connections: int
    vbuckets: int           # per connection
    items: tuple            # (min, max) items per snapshot marker
    doc_size: tuple         # (min, max) document bytes
    shared: bool = False    # every connection streams the same vbuckets


SHAPES = {
    "replication": Shape(4, 16, (40, 60), (100, 1500)),
    "many-vbuckets": Shape(2, 512, (8, 12), (50, 900)),
    "shared-vbuckets": Shape(4, 1, (40, 60), (100, 1500), shared=True),
}


class Connection:
    """One replication connection: produces server->client bytes on demand."""

    def __init__(self, index: int, vbuckets: list[int], rng: random.Random,
                 items: tuple = (40, 60), doc_size: tuple = (100, 1500)):
        self.index = index
        self.client = bytes([10, 1, index >> 8 & 0xFF, index & 0xFF])
        self.server = bytes([10, 0, 0, 1])
        self.cport = 40000 + index
        self.sport = 11209 if index % 2 else 11210
        self.seq = {0: 1000, 1: 5000}
        self.vbuckets = vbuckets
        self.rng = rng
        self.seqnos = {vb: 0 for vb in vbuckets}
        self.pending = b""
        self.ip_id = 1
        self.items = items
        self.doc_size = doc_size

    def handshake_bytes(self) -> tuple[bytes, bytes]:
        c2s = [dcp_open(f"replication:bench-{self.index}", 0x25, 1)]
        s2c = [ok(0x50, 1)]
        for vb in self.vbuckets:
            c2s.append(stream_req(vb, 0x100 + vb))
            s2c.append(failover(0x100 + vb, (0xB0000000 + vb, 0)))
        return b"".join(c2s), b"".join(s2c)

    def snapshot(self) -> bytes:
        """One marker and its items for a random vbucket."""
        rng = self.rng
        vb = rng.choice(self.vbuckets)
        opaque = 0x100 + vb
        start = self.seqnos[vb] + 1
        n = rng.randint(*self.items)
        end = start + n - 1
        # the first marker of a stream requested from 0 starts at the requested snap_start
        # (kv_engine: the smaller of it and the snapshot's first seqno)
        marker = 0 if start == 1 else start
        kind = rng.random()
        if kind < 0.6:
            out = [encode(0x56, dict(start_seqno=marker, end_seqno=end, flags=0x05),
                          layout="V1", vbucket=vb, opaque=opaque)]
        elif kind < 0.8:
            out = [encode(0x56, dict(start_seqno=marker, end_seqno=end, flags=0x06,
                                     max_visible_seqno=end, high_completed_seqno=0),
                          layout="V2.0", vbucket=vb, opaque=opaque)]
        else:
            out = [encode(0x56, dict(start_seqno=marker, end_seqno=end, flags=0x06,
                                     max_visible_seqno=end, purge_seqno=0, high_prepared_seqno=0),
                          layout="V2.2", vbucket=vb, opaque=opaque)]
        for seqno in range(start, end + 1):
            key = f"doc::{vb}::{seqno % 5000:05d}::{seqno}".encode()
            if rng.random() < 0.1:
                out.append(encode(0x58, dict(by_seqno=seqno, rev_seqno=2, delete_time=T0),
                                  layout="V2", key=key, vbucket=vb, opaque=opaque, cas=seqno))
            else:
                size = rng.randint(*self.doc_size)
                value = b'{"v":"' + b"x" * (size - 8) + b'"}'
                out.append(encode(0x57, dict(by_seqno=seqno, rev_seqno=1, flags=0x02000006),
                                  key=key, value=value, vbucket=vb, opaque=opaque,
                                  datatype=1, cas=seqno))
        self.seqnos[vb] = end
        return b"".join(out)


def frame(conn: Connection, direction: int, payload: bytes, flags: int) -> bytes:
    src, dst = (conn.client, conn.server) if direction == 0 else (conn.server, conn.client)
    sp, dp = (conn.cport, conn.sport) if direction == 0 else (conn.sport, conn.cport)
    seq, ack = conn.seq[direction], conn.seq[1 - direction]
    tcp = _TCP.pack(sp, dp, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
    conn.seq[direction] += len(payload) + (1 if flags & 0x03 else 0)
    conn.ip_id += 1
    ip = _IP.pack(0x45, 0, 20 + len(tcp) + len(payload), conn.ip_id & 0xFFFF, 0x4000, 64, 6, 0, src, dst)
    return ETH + ip + tcp + payload


def generate(path: str, size: int, connections: int | None = None, vbuckets: int | None = None,
             seed: int = 1, shape: str = "replication") -> int:
    """Write the capture; returns the number of frames."""
    rng = random.Random(seed)
    sh = SHAPES[shape]
    connections = connections or sh.connections
    vbuckets = vbuckets or sh.vbuckets
    first = [0 if sh.shared else i * vbuckets for i in range(connections)]
    conns = [Connection(i, list(range(first[i], first[i] + vbuckets)), rng, sh.items,
                        sh.doc_size) for i in range(connections)]
    frames = 0
    ts = 0
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        written = 24

        def put(data: bytes) -> None:
            nonlocal frames, ts, written
            ts += 7
            fh.write(_REC.pack(T0 + ts // 1_000_000, ts % 1_000_000, len(data), len(data)))
            fh.write(data)
            frames += 1
            written += 16 + len(data)

        for c in conns:                          # handshakes and stream requests
            put(frame(c, 0, b"", 0x02))
            put(frame(c, 1, b"", 0x12))
            put(frame(c, 0, b"", 0x10))
            c2s, s2c = c.handshake_bytes()
            put(frame(c, 0, c2s, 0x18))
            c.pending = s2c
        acked = 0
        while written < size:
            for c in conns:
                if len(c.pending) < MSS * 4:
                    c.pending += c.snapshot()
                for _ in range(4):
                    put(frame(c, 1, c.pending[:MSS], 0x18))
                    c.pending = c.pending[MSS:]
                acked += 1
                if acked % 8 == 0:
                    put(frame(c, 0, encode(0x5D, {"bytes_to_ack": 8 * 4 * MSS}, opaque=7), 0x18))
        for c in conns:                          # flush and close
            while c.pending:
                put(frame(c, 1, c.pending[:MSS], 0x18))
                c.pending = c.pending[MSS:]
            put(frame(c, 0, b"", 0x11))
            put(frame(c, 1, b"", 0x11))
            put(frame(c, 0, b"", 0x10))
    return frames


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--size", default="100MB", type=parse_size)
    p.add_argument("--shape", choices=sorted(SHAPES), default="replication")
    p.add_argument("--connections", type=int, help="default: the shape's")
    p.add_argument("--vbuckets", type=int, help="per connection; default: the shape's")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    n = generate(args.out, args.size, args.connections, args.vbuckets, args.seed, args.shape)
    print(f"{args.out}: {n} frames", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
