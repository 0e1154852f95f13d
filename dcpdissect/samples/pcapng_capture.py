"""pcapng samples as Wireshark's tools write them, from real kernel TCP.

A plaintext sample's DCP conversation (``--source``) is replayed over real sockets by the
real-capture harness (:mod:`.realnet`) between two network namespaces, a client and a
server, through a third one that routes between them; dumpcap captures in the router, on
the veth end facing the client (the client's packets) and on the one facing the server (the
server's packets). Each side sends its chunks in the recorded order, paced, after the other
side has read the chunks before them.

``python -m dcpdissect.samples.pcapng_capture samples/pcapng`` (as root) writes:

``two-interfaces.pcapng``
    one dumpcap on both interfaces: each interface's packets are written as its buffer
    drains, so the blocks are not in time order;
``two-interfaces-reordered.pcapng``
    the same through ``reordercap``;
``sections.pcapng``, ``merged.pcapng``
    another replay, each interface captured by its own dumpcap: the two files end to end
    (two sections, each with its interface), and ``mergecap``'s chronological merge;
``variants.pcapng``
    ``merged.pcapng``'s frames re-written by hand in what the tools do not write: a
    big-endian second section with a Linux cooked interface beside the Ethernet ones,
    an interface whose frames end in an Ethernet FCS
    (``if_fcslen``, then ``epb_flags``), one of them with an IP total length of 0 (as
    segmentation offload leaves it), binary and decimal ``if_tsresol``, ``if_tsoffset``, a
    simple packet block, a custom block, name resolution and interface statistics blocks,
    comments;
``*-dsb.pcapng``
    the TLS samples of ``samples/tls`` with their key logs injected by ``editcap
    --inject-secrets`` (``tls-problems-dsb`` also gets an SSH secrets block),
    ``tls13-half-dsb.pcapng`` with the lines of the first connection only, and
    ``tls13-late-dsb.pcapng``: the secrets block moved by hand after the first
    connection's ClientHello.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

from .dsl import Script
from .netsynth import Endpoint
from .realnet import NamespaceReplay, capinfos, missing

PORT = 11210
CLIENT, SERVER = "10.99.1.2", "10.99.2.2"
PACE = 0.01                     # seconds before each chunk (the replay within 2 s: the
#                                 time-order window that reads sections.pcapng in order)
GAP_NS = 1_000_000              # from one connection's last packet to the next one's first


# -- the conversation, replayed and captured --------------------------------------------------

def replayed_scripts(source: str) -> list[Script]:
    """``source``'s connections from CLIENT (each from its own client port) to SERVER:PORT,
    one after the other: each chunk one send, closed by the client as the capture shows
    (RST, else FIN)."""
    from .tls_capture import conversations
    scripts: list[Script] = []
    for c in conversations(source):
        start = scripts[-1].conv.packets()[-1].ts_ns + GAP_NS if scripts else c["ts_ns"]
        script = Script(Endpoint(CLIENT, c["client"][1]), Endpoint(SERVER, PORT), start_ns=start)
        for direction, data in c["chunks"]:
            script.send(("c2s", "s2c")[direction], data)
        script.conv.close("rst" if c["closed"] == "rst" else "fin")
        scripts.append(script)
    return scripts


def capture(scripts: list[Script], files: dict[Path, tuple[str, ...]]) -> None:
    """One paced replay of ``scripts`` from the client's namespace to the server's through
    a router's; each file written by its own dumpcap in the router, on its veths facing the
    sides named, each keeping the packets that come in from its side."""
    placement = {CLIENT: ("client", "link"), SERVER: ("server", "link")}
    pace = {"delay": lambda ev: PACE if ev.kind == "send" else 0.0}
    with NamespaceReplay(scripts, placement, pace, router=True) as lab:
        with contextlib.ExitStack() as captures:
            for path, sides in files.items():
                captures.enter_context(lab.capture(
                    path, [lab.spaces.router_veth[side] for side in sides], "router",
                    bpf="inbound and ip"))
            lab.play()


# -- hand-built blocks -----------------------------------------------------------------------

class Blocks:
    """pcapng blocks in one byte order."""

    def __init__(self, order: str):
        self.o = order

    def block(self, btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        return struct.pack(self.o + "II", btype, len(body) + 12) + body + \
            struct.pack(self.o + "I", len(body) + 12)

    def options(self, *opts: tuple[int, bytes]) -> bytes:
        if not opts:
            return b""
        return b"".join(struct.pack(self.o + "HH", c, len(v)) + v + b"\0" * (-len(v) % 4)
                        for c, v in opts) + struct.pack(self.o + "HH", 0, 0)

    def shb(self, *opts) -> bytes:
        return self.block(0x0A0D0D0A, struct.pack(self.o + "IHHq", 0x1A2B3C4D, 1, 0, -1)
                          + self.options(*opts))

    def idb(self, linktype: int, *opts) -> bytes:
        return self.block(1, struct.pack(self.o + "HHI", linktype, 0, 0) + self.options(*opts))

    def epb(self, ifid: int, units: int, data: bytes, wirelen: int, *opts) -> bytes:
        return self.block(6, struct.pack(self.o + "IIIII", ifid, units >> 32,
                                         units & 0xFFFFFFFF, len(data), wirelen)
                          + data + b"\0" * (-len(data) % 4) + self.options(*opts))

    def spb(self, data: bytes) -> bytes:
        return self.block(3, struct.pack(self.o + "I", len(data)) + data)

    def nrb(self, *names: tuple[str, str]) -> bytes:
        recs = b""
        for ip, name in names:
            value = socket.inet_aton(ip) + name.encode() + b"\0"
            recs += struct.pack(self.o + "HH", 1, len(value)) + value + b"\0" * (-len(value) % 4)
        return self.block(4, recs + struct.pack(self.o + "HH", 0, 0))

    def isb(self, ifid: int, units: int, received: int) -> bytes:
        return self.block(5, struct.pack(self.o + "III", ifid, units >> 32, units & 0xFFFFFFFF)
                          + self.options((4, struct.pack(self.o + "Q", received))))

    def custom(self, data: bytes) -> bytes:
        return self.block(0x00000BAD, struct.pack(self.o + "I", 32473) + data)


def with_fcs(frame: bytes) -> bytes:
    return frame + struct.pack("<I", zlib.crc32(frame))


def cooked(frame: bytes) -> bytes:
    """An Ethernet frame as a Linux cooked capture (SLL) of a packet sent shows it."""
    return struct.pack("!HHH", 4, 1, 6) + frame[6:12] + b"\0\0" + frame[12:]


def without_ip_length(frame: bytes) -> bytes:
    """An Ethernet/IPv4 frame whose IP total length is 0 (checksum made again), as a
    capture of a segmentation-offloaded packet shows it."""
    ip = bytearray(frame[14:34])
    ip[2:4] = b"\0\0"
    ip[10:12] = b"\0\0"
    words = struct.unpack("!10H", bytes(ip))
    total = sum(words)
    total = (total & 0xFFFF) + (total >> 16)
    ip[10:12] = struct.pack("!H", ~((total & 0xFFFF) + (total >> 16)) & 0xFFFF)
    return frame[:14] + bytes(ip) + frame[34:]


def variants(source: str, out: str) -> None:
    """``source``'s frames (two Ethernet interfaces: 0 the client's packets, 1 the
    server's) re-written as described in the module docstring."""
    from ..capture.packets import decode_packet
    from ..capture.readers import open_capture
    with open_capture(source) as reader:
        frames = list(reader)
    half = len(frames) // 2
    le, be = Blocks("<"), Blocks(">")
    t0 = frames[0].ts_ns // 10**9
    tso = next(i for i, f in enumerate(frames[:half]) if f.interface == 1
               and decode_packet(f.linktype, f.data).payload)
    spb = next(i for i, f in enumerate(frames[half:], half) if f.interface == 0
               and not decode_packet(f.linktype, f.data).payload)
    parts = [le.shb((1, b"hand-built: sections, FCS, time resolutions, other blocks")),
             le.idb(1, (2, b"toc"), (9, b"\x09")),
             le.idb(1, (2, b"tos"), (9, b"\x94"), (13, b"\x04")),   # 2^-20 s, 4-byte FCS
             le.nrb((CLIENT, "client.dcp.test"), (SERVER, "server.dcp.test"))]
    for i, f in enumerate(frames[:half]):
        if f.interface == 0:
            parts.append(le.epb(0, f.ts_ns, f.data, f.wirelen,
                                *([(1, b"a packet comment")] if i == 3 else [])))
        else:
            data = without_ip_length(f.data) if i == tso else f.data
            parts.append(le.epb(1, (f.ts_ns << 20) // 10**9, with_fcs(data), f.wirelen + 4))
        if i == 5:
            parts.append(le.custom(b"a block tshark shows as a frame"))
    parts.append(le.isb(0, frames[half - 1].ts_ns, half))
    parts += [be.shb(), be.idb(1, (2, b"toc"), (9, b"\x06"),       # microseconds, offset t0
                               (14, struct.pack(">q", t0))),
              be.idb(1, (2, b"tos"), (9, b"\x07")),                # 100 ns
              be.idb(113, (2, b"any"), (9, b"\x09"))]              # Linux cooked capture
    for i, f in enumerate(frames[half:], half):
        if i == spb:
            parts.append(be.spb(f.data))
        elif f.interface == 0:
            parts.append(be.epb(0, (f.ts_ns - t0 * 10**9) // 1000, f.data, f.wirelen))
        elif i % 2:
            parts.append(be.epb(2, f.ts_ns, cooked(f.data), f.wirelen + 2))
        else:                                        # FCS length 4 in epb_flags
            parts.append(be.epb(1, f.ts_ns // 100, with_fcs(f.data), f.wirelen + 4,
                                (2, struct.pack(">I", 4 << 5))))
    Path(out).write_bytes(b"".join(parts))


# -- decryption secrets ---------------------------------------------------------------------

def inject(tls_dir: str, out_dir: str) -> None:
    """The TLS samples with their key logs injected by editcap, and the late one."""
    resume = os.path.join(tls_dir, "tls13-resume-collapsed")
    with tempfile.TemporaryDirectory() as tmp:
        ssh, half = os.path.join(tmp, "ssh.keys"), os.path.join(tmp, "half.keylog")
        Path(ssh).write_text("0001020304050607 SHARED_SECRET 08090a0b0c0d0e0f\n")
        lines = [line for line in Path(resume + ".keylog").read_text().splitlines()
                 if line and not line.startswith("#")]
        first = lines[0].split()[1]             # the first connection's client random
        Path(half).write_text("".join(line + "\n" for line in lines if first in line))
        for name, keys, extra, out in (
                ("tls13-resume-collapsed", None, [], "tls13-resume-collapsed-dsb"),
                ("tls13-resume-collapsed", half, [], "tls13-half-dsb"),
                ("tls-problems", None, ["--inject-secrets", f"ssh,{ssh}"], "tls-problems-dsb")):
            source = os.path.join(tls_dir, name)
            subprocess.run(["editcap", "--inject-secrets", f"tls,{keys or source + '.keylog'}",
                            *extra, source + ".pcap", os.path.join(out_dir, out + ".pcapng")],
                           check=True)
    move_secrets(os.path.join(out_dir, "tls13-resume-collapsed-dsb.pcapng"),
                 os.path.join(out_dir, "tls13-late-dsb.pcapng"))


def move_secrets(source: str, out: str) -> None:
    """``source`` with its secrets block moved after the first ClientHello's frame."""
    from ..capture.packets import decode_packet
    from ..capture.readers import open_capture
    with open_capture(source) as reader:
        hello = next(f.number for f in reader
                     if (seg := decode_packet(f.linktype, f.data)) and seg.payload[:1] == b"\x16"
                     and seg.payload[5:6] == b"\x01")
    data = Path(source).read_bytes()
    blocks, pos = [], 0
    while pos < len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        blocks.append((btype, data[pos:pos + blen]))
        pos += blen
    dsb = next(b for t, b in blocks if t == 0x0A)
    out_blocks, packets = [], 0
    for btype, b in blocks:
        if btype == 0x0A:
            continue
        out_blocks.append(b)
        packets += btype == 6
        if btype == 6 and packets == hello:
            out_blocks.append(dsb)
    Path(out).write_bytes(b"".join(out_blocks))


# -- all of it ----------------------------------------------------------------------------------

def build(out_dir: str, source: str, tls_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    out = Path(out_dir)
    scripts = replayed_scripts(source)
    two = out / "two-interfaces.pcapng"
    for _attempt in range(3):
        capture(scripts, {two: ("client", "server")})
        if capinfos(two)["Strict time order"] == "False":
            break
    else:
        raise SystemExit("dumpcap wrote the blocks in time order three times")
    subprocess.run(["reordercap", "-n", str(two), str(out / "two-interfaces-reordered.pcapng")],
                   check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="dcpng-") as tmp:
        a, b = Path(tmp) / "client.pcapng", Path(tmp) / "server.pcapng"
        capture(scripts, {a: ("client",), b: ("server",)})
        (out / "sections.pcapng").write_bytes(a.read_bytes() + b.read_bytes())
        subprocess.run(["mergecap", "-w", str(out / "merged.pcapng"), str(a), str(b)], check=True)
    variants(str(out / "merged.pcapng"), str(out / "variants.pcapng"))
    inject(tls_dir, out_dir)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", default="samples/pcapng")
    p.add_argument("--source", default="samples/flow-legal.pcap")
    p.add_argument("--tls", default="samples/tls", help="the TLS samples and their key logs")
    p.add_argument("--secrets-only", action="store_true",
                   help="only inject the TLS samples' key logs again (after they were rebuilt)")
    args = p.parse_args(argv)
    if args.secrets_only:
        inject(args.tls, args.dir)
        return 0
    why = missing(namespaces=True)
    if why:
        print(f"cannot capture here: {why}", file=sys.stderr)
        return 2
    build(args.dir, args.source, args.tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
