"""Sample conversations carried by the kernel's own TCP, captured with dumpcap.

Modes:

``loopback``
    Both ends in one private network namespace whose loopback holds the scripts'
    addresses: a plain capture of real segments, handshakes and acknowledgements (the input
    of :mod:`.encapsulate`).
``vxlan``
    The client's namespace and the server's joined by a veth pair, the scripts' addresses on
    a kernel VXLAN device over it (VNI 42, UDP 4789, VTEPs 10.9.0.1 and 10.9.0.2), captured
    on the client's veth: VXLAN as Linux sends it. With ``mtu`` below 1550 the veth is
    smaller than the VXLAN device and the kernel fragments the outer IPv4 packets.

Each end is its own process in its namespace (``ip netns exec``) and follows the scripts
(:meth:`~.netsynth.TcpConversation.writes`): it writes each group of coalesced sends that
is its own and reads exactly the other end's bytes before going on, and closes as the
script closes. Segmentation offload is off on the devices of the ``vxlan`` mode
(``gso_max_segs 1``), so that the capture holds the segments a network would carry; the
loopback keeps its 64 KiB MTU. Timestamps are those of the capture. Needs root, iproute2
and dumpcap.

    python -m dcpdissect.samples.kernel_capture OUT.pcap SCENARIO [--mode vxlan] [--mtu N]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable

from .builder import Script, replication
from .netsynth import Endpoint

MAX_PAUSE_S = 0.2            # a script's pause, at most, between writes
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _resume_collapsed() -> list[Script]:
    from .scenarios_streams import resume_collapsed
    return resume_collapsed()


SCENARIOS: dict[str, Callable[[], list[Script]]] = {
    "replication": lambda: [replication()],
    "replication-ipv6": lambda: [replication(client=Endpoint("fd00::2", 50123),
                                             server=Endpoint("fd00::1", 11209))],
    "resume-collapsed": _resume_collapsed,
}


# -- one end ------------------------------------------------------------------------------

def _recv_exactly(sock: socket.socket, n: int) -> None:
    while n:
        got = sock.recv(min(n, 1 << 16))
        if not got:
            raise ConnectionError("the other end closed early")
        n -= len(got)


def _drain(sock: socket.socket) -> None:
    """Read until the other end's FIN (or RST)."""
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        pass


def _socket(end: Endpoint) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if end.version == 6 else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((end.ip, end.port))
    return sock


def _connect(script: Script) -> socket.socket:
    sock = _socket(script.conv.client)
    sock.connect((script.conv.server.ip, script.conv.server.port))
    return sock


def run_end(side: str, scenario: str) -> None:
    """Play one end (``client`` or ``server``) of every script of ``scenario``, in order."""
    scripts = SCENARIOS[scenario]()
    mine = "c2s" if side == "client" else "s2c"
    listeners: dict[tuple, socket.socket] = {}
    if side == "server":
        for s in scripts:
            key = (s.conv.server.ip, s.conv.server.port)
            if key not in listeners:
                listeners[key] = _socket(s.conv.server)
                listeners[key].listen(8)
        print("listening", flush=True)          # the client may start
    previous = None
    for s in scripts:
        conv = s.conv
        if side == "server":
            sock, _ = listeners[(conv.server.ip, conv.server.port)].accept()
        else:
            if previous is not None:
                time.sleep(min(MAX_PAUSE_S, max(0, conv.start_ns - previous) / 1e9))
            sock = _connect(s)
        previous = conv.start_ns
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for op in conv.writes():
            if op[0] == "send":
                if op[1] == mine:
                    sock.sendall(op[2])
                else:
                    _recv_exactly(sock, len(op[2]))
            elif op[0] == "pause":
                time.sleep(min(MAX_PAUSE_S, op[1] / 1e9))
            elif op[1] == "rst" and op[2] == mine:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            elif op[2] == mine:                 # FIN: ours first, then the other end's
                sock.shutdown(socket.SHUT_WR)
                _drain(sock)
            else:
                _drain(sock)
        sock.close()
    for sock in listeners.values():
        sock.close()


# -- the capture --------------------------------------------------------------------------

def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _addresses(scripts: list[Script], side: str) -> set[tuple[str, int]]:
    """(address, version) of the scripts' clients or servers."""
    ends = [s.conv.client if side == "client" else s.conv.server for s in scripts]
    return {(e.ip, e.version) for e in ends}


def _add_address(ns: str, dev: str, ip: str, version: int, prefix: int | None = None) -> None:
    if version == 6:
        _ip("-n", ns, "addr", "add", f"{ip}/{prefix or 128}", "dev", dev, "nodad")
    else:
        _ip("-n", ns, "addr", "add", f"{ip}/{prefix or 32}", "dev", dev)


def _setup(mode: str, names: tuple[str, str], scripts: list[Script], mtu: int) -> tuple[str, str]:
    """The namespaces and devices of ``mode``; returns (namespace, device) to capture on."""
    client_ns, server_ns = names
    for ns in set(names):
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
    if mode == "loopback":
        for ip, version in _addresses(scripts, "client") | _addresses(scripts, "server"):
            _add_address(client_ns, "lo", ip, version)
        return client_ns, "lo"
    _ip("link", "add", "va", "netns", client_ns, "type", "veth", "peer", "name", "vb",
        "netns", server_ns)
    for ns, dev, local, remote in ((client_ns, "va", "10.9.0.1", "10.9.0.2"),
                                   (server_ns, "vb", "10.9.0.2", "10.9.0.1")):
        _ip("-n", ns, "addr", "add", f"{local}/24", "dev", dev)
        _ip("-n", ns, "link", "set", dev, "up", "mtu", str(mtu), "gso_max_segs", "1")
        _ip("-n", ns, "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789",
            "local", local, "remote", remote)
        _ip("-n", ns, "link", "set", "vx0", "up", "gso_max_segs", "1")
        side = "client" if ns == client_ns else "server"
        for ip, version in _addresses(scripts, side):
            _add_address(ns, "vx0", ip, version, 64 if version == 6 else 24)
    return client_ns, "va"


def capture(out: str, scenario: str, mode: str = "loopback", mtu: int = 1500) -> None:
    """Write ``out`` (pcap): ``scenario``'s conversations through the kernel, in ``mode``."""
    scripts = SCENARIOS[scenario]()
    tag = f"dcpd{os.getpid()}"
    names = (f"{tag}-c", f"{tag}-c" if mode == "loopback" else f"{tag}-s")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    dumpcap = None
    try:
        ns, dev = _setup(mode, names, scripts, mtu)
        wanted = "tcp" if mode == "loopback" else "ip proto 17"      # VXLAN and its fragments
        dumpcap = subprocess.Popen(["ip", "netns", "exec", ns, "dumpcap", "-q", "-i", dev, "-P",
                                    "-w", out, "-f", wanted], stderr=subprocess.PIPE, text=True)
        for line in dumpcap.stderr:             # "File: ..." once it captures
            if line.startswith("File:"):
                break
        ends = []
        for side, name in (("server", names[1]), ("client", names[0])):
            ends.append(subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-m",
                                          f"{__package__}.kernel_capture", "--end", side, out,
                                          scenario], env=env, stdout=subprocess.PIPE, text=True))
            if side == "server" and ends[0].stdout.readline() != "listening\n":
                raise RuntimeError("the replay's server did not start")
        for p in ends:
            if p.wait(timeout=60):
                raise RuntimeError(f"the replay's {p.args[-3]} end failed")
        time.sleep(0.5)
    finally:
        if dumpcap is not None:
            dumpcap.send_signal(signal.SIGINT)
            dumpcap.wait(timeout=10)
        for ns in set(names):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--mode", choices=("loopback", "vxlan"), default="loopback")
    p.add_argument("--mtu", type=int, default=1500, help="vxlan: the veth's MTU")
    p.add_argument("--end", choices=("client", "server"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.end:
        run_end(args.end, args.scenario)
    else:
        capture(args.out, args.scenario, args.mode, args.mtu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
