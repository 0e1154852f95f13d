"""pcapng samples as Wireshark's tools write them, from real kernel TCP.

A plaintext sample's DCP conversation (``--source``) is replayed over real sockets between
two network namespaces, a client and a server, through a third one that routes between
them; dumpcap captures in the router, on the veth end facing the client (the client's
packets) and on the one facing the server (the server's packets). Each side sends its
chunks in the recorded order, paced, after reading the other side's chunks before them.

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
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from contextlib import contextmanager
from pathlib import Path

PORT = 11210
CLIENT, SERVER = "10.99.1.2", "10.99.2.2"
PACE = 0.02                     # seconds between two chunks of a side


# -- the conversation, played by one side ----------------------------------------------------

def play(role: str, conversation: str) -> None:
    """Play ``role`` (client or server) of every connection in the JSON file
    ``conversation``: [[direction, hex chunk], ...] per connection."""
    conns = json.loads(Path(conversation).read_text())
    mine = 0 if role == "client" else 1
    if role == "server":
        listener = socket.create_server((SERVER, PORT), reuse_port=False)
    for chunks in conns:
        if role == "client":
            sock = socket.create_connection((SERVER, PORT))
        else:
            sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for direction, data in chunks:
            data = bytes.fromhex(data)
            if direction == mine:
                time.sleep(PACE)
                sock.sendall(data)
            else:
                got = bytearray()
                while len(got) < len(data):
                    part = sock.recv(len(data) - len(got))
                    if not part:
                        raise SystemExit(f"{role}: connection closed early")
                    got += part
        if role == "client":
            sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
        sock.close()


def conversation_file(source: str, where: str) -> str:
    from .tls_capture import conversations
    conns = [[[d, data.hex()] for d, data in c["chunks"]] for c in conversations(source)]
    path = os.path.join(where, "conversation.json")
    Path(path).write_text(json.dumps(conns))
    return path


# -- the namespaces --------------------------------------------------------------------------

class Lab:
    """Client, router and server namespaces joined by two veth pairs (deleted on exit)."""

    def __init__(self):
        tag = os.getpid() % 100000
        self.ns = {k: f"dcpng{tag}{k}" for k in "crs"}

    def sh(self, *cmd: str, ns: str | None = None) -> None:
        prefix = ["ip", "netns", "exec", self.ns[ns]] if ns else []
        subprocess.run([*prefix, *cmd], check=True)

    def popen(self, ns: str, *cmd: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns[ns], *cmd], **kw)

    def __enter__(self) -> "Lab":
        for name in self.ns.values():
            self.sh("ip", "netns", "add", name)
        for side, ip, gw in (("c", CLIENT, "10.99.1.1"), ("s", SERVER, "10.99.2.1")):
            self.sh("ip", "link", "add", "veth0", "netns", self.ns[side], "type", "veth",
                    "peer", "name", f"to{side}", "netns", self.ns["r"])
            self.sh("ip", "addr", "add", f"{ip}/24", "dev", "veth0", ns=side)
            self.sh("ip", "link", "set", "veth0", "up", ns=side)
            self.sh("ip", "link", "set", "lo", "up", ns=side)
            self.sh("ip", "route", "add", "default", "via", gw, ns=side)
            self.sh("ip", "addr", "add", f"{gw}/24", "dev", f"to{side}", ns="r")
            self.sh("ip", "link", "set", f"to{side}", "up", ns="r")
        self.sh("sysctl", "-q", "-w", "net.ipv4.ip_forward=1", ns="r")
        return self

    def __exit__(self, *exc) -> None:
        for name in self.ns.values():
            subprocess.run(["ip", "netns", "del", name], check=False)

    def replay(self, conversation: str) -> None:
        cmd = [sys.executable, "-m", "dcpdissect.samples.pcapng_capture", "--play"]
        server = self.popen("s", *cmd, "server", conversation)
        time.sleep(0.5)
        client = self.popen("c", *cmd, "client", conversation)
        if client.wait(60) or server.wait(60):
            raise SystemExit("the replay failed")

    @contextmanager
    def dumpcap(self, out: str, *interfaces: str):
        """dumpcap in the router on ``interfaces`` (toc: the client's packets, tos: the
        server's), writing ``out`` until the block ends."""
        args = []
        for name in interfaces:
            args += ["-i", name, "-f", f"src host {CLIENT if name == 'toc' else SERVER}"]
        proc = self.popen("r", "dumpcap", "-q", *args, "-w", out, stderr=subprocess.PIPE)
        time.sleep(2)                       # capturing by now
        try:
            yield
            time.sleep(1.5)                 # the last buffers drain
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
        if not os.path.getsize(out):
            raise SystemExit(f"dumpcap wrote nothing: {proc.stderr.read().decode()}")
        os.chmod(out, 0o644)


def in_time_order(path: str) -> bool:
    from ..capture.readers import open_capture
    with open_capture(path) as reader:
        stamps = [f.ts_ns for f in reader]
    return stamps == sorted(stamps)


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
    with tempfile.TemporaryDirectory(prefix="dcpng-") as tmp, Lab() as lab:
        os.chmod(tmp, 0o755)                 # dumpcap may drop privileges to write
        conv = conversation_file(source, tmp)
        two = str(out / "two-interfaces.pcapng")
        for _attempt in range(3):
            with lab.dumpcap(two, "toc", "tos"):
                lab.replay(conv)
            if not in_time_order(two):
                break
        else:
            raise SystemExit("dumpcap wrote the blocks in time order three times")
        subprocess.run(["reordercap", "-n", two, str(out / "two-interfaces-reordered.pcapng")],
                       check=True, stdout=subprocess.DEVNULL)
        a, b = os.path.join(tmp, "toc.pcapng"), os.path.join(tmp, "tos.pcapng")
        with lab.dumpcap(a, "toc"), lab.dumpcap(b, "tos"):
            lab.replay(conv)
        (out / "sections.pcapng").write_bytes(Path(a).read_bytes() + Path(b).read_bytes())
        subprocess.run(["mergecap", "-w", str(out / "merged.pcapng"), a, b], check=True)
    variants(str(out / "merged.pcapng"), str(out / "variants.pcapng"))
    inject(tls_dir, out_dir)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", default="samples/pcapng")
    p.add_argument("--source", default="samples/flow-legal.pcap")
    p.add_argument("--tls", default="samples/tls", help="the TLS samples and their key logs")
    p.add_argument("--secrets-only", action="store_true",
                   help="only inject the TLS samples' key logs again (after they were rebuilt)")
    p.add_argument("--play", nargs=2, metavar=("ROLE", "CONVERSATION"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.play:
        play(*args.play)
        return 0
    if args.secrets_only:
        inject(args.tls, args.dir)
        return 0
    build(args.dir, args.source, args.tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
