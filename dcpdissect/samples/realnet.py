"""Real captures around a replay: dumpcap or tcpdump on an interface, two network
namespaces joined by a veth pair (optionally a VXLAN tunnel over it), and frames deleted
from a finished capture with editcap.

Everything here needs root (packet capture, ``ip netns``); :func:`missing` says what this
machine lacks instead of failing half-way.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Sequence

CLONE_NEWNET = 0x40000000
VXLAN_ID = 42
VXLAN_PORT = 4789
UNDERLAY = ("192.0.2.1", "192.0.2.2")       # client and server side of the veth pair
TOOLS = ("dumpcap", "tcpdump", "capinfos", "editcap", "tshark", "ip")
MARKER_PORT = 47999                         # UDP port of the capture-start markers


def missing(namespaces: bool = False) -> str | None:
    """Why real captures cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "packet capture and network namespaces need root"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"not installed: {', '.join(absent)}"
    if namespaces:
        probe = f"dcpr-probe-{os.getpid()}"
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if made.returncode:
            return f"ip netns add fails: {made.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*args: str, ns: str | None = None) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


@contextlib.contextmanager
def in_netns(name: str | None):
    """Run the block with the calling thread in network namespace ``name`` (sockets made
    there stay in it)."""
    if name is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), f"setns {name}")
        try:
            yield
        finally:
            if libc.setns(home, CLONE_NEWNET):
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(target)
        os.close(home)


class Namespaces:
    """Two fresh namespaces, ``client`` and ``server``, joined by a veth pair (and a VXLAN
    tunnel, id 42 on UDP 4789, over it when ``vxlan``); IPv6 is off unless ``ipv6`` (no
    neighbour discovery chatter in the captures). Names are unique per instance;
    everything is deleted on exit, also after an error during setup.

    ``place(ip, side, on='link')`` puts a scripted address on that side's link device (the
    VXLAN device when there is one, else the veth) or on its loopback (``on='lo'``), with a
    route to it from the other side."""

    def __init__(self, vxlan: bool = False, ipv6: bool = False):
        self.ipv6 = ipv6
        tag = uuid.uuid4().hex[:6]
        self.ns = {"client": f"dcpr-{tag}-c", "server": f"dcpr-{tag}-s"}
        self.veth = {"client": f"dr{tag}c", "server": f"dr{tag}s"}
        self.vxlan = {"client": f"vx{tag}c", "server": f"vx{tag}s"} if vxlan else None
        self._made: list[str] = []

    def link(self, side: str) -> str:
        return (self.vxlan or self.veth)[side]

    def __enter__(self) -> "Namespaces":
        try:
            self._setup()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _setup(self) -> None:
        for side in ("client", "server"):
            _run("ip", "netns", "add", self.ns[side])
            self._made.append(self.ns[side])
            _run("ip", "link", "set", "lo", "up", ns=self.ns[side])
            if not self.ipv6:
                _run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                     "net.ipv6.conf.default.disable_ipv6=1", ns=self.ns[side])
        _run("ip", "link", "add", self.veth["client"], "netns", self.ns["client"], "type", "veth",
             "peer", "name", self.veth["server"], "netns", self.ns["server"])
        for side, mine, other in (("client", *UNDERLAY), ("server", *reversed(UNDERLAY))):
            ns = self.ns[side]
            _run("ip", "addr", "add", f"{mine}/24", "dev", self.veth[side], ns=ns)
            _run("ip", "link", "set", self.veth[side], "up", ns=ns)
            if self.vxlan:
                _run("ip", "link", "add", self.vxlan[side], "type", "vxlan", "id", str(VXLAN_ID),
                     "dstport", str(VXLAN_PORT), "remote", other, "local", mine,
                     "dev", self.veth[side], ns=ns)
                _run("ip", "link", "set", self.vxlan[side], "up", ns=ns)

    def __exit__(self, *exc) -> None:
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()

    def place(self, ip: str, side: str, on: str = "link") -> None:
        other = "server" if side == "client" else "client"
        v6 = ipaddress.ip_address(ip).version == 6
        prefix, fam = ("128", "-6") if v6 else ("32", "-4")
        device = "lo" if on == "lo" else self.link(side)
        extra = ["nodad"] if v6 else []
        _run("ip", fam, "addr", "add", f"{ip}/{prefix}", "dev", device, *extra, ns=self.ns[side])
        _run("ip", fam, "route", "replace", f"{ip}/{prefix}", "dev", self.link(other),
             ns=self.ns[other])


class NamespaceNet:
    """Addresses for :class:`~dcpdissect.samples.replay.Player` in :class:`Namespaces`:
    scripted addresses are kept, each on the side ``sides`` gives it."""

    def __init__(self, spaces: Namespaces, sides: dict[str, str]):
        self.spaces = spaces
        self.sides = sides

    def address(self, ip: str) -> str:
        return ip

    def socket(self, ip: str) -> socket.socket:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        with in_netns(self.spaces.ns[self.sides[ip]]):
            return socket.socket(family, socket.SOCK_STREAM)


class Marker:
    """UDP datagrams that show a capture is live: sent from namespace ``src_ns`` to ``dst``,
    where a socket in ``dst_ns`` receives them (so no ICMP answer is sent)."""

    def __init__(self, dst: str, src_ns: str | None = None, dst_ns: str | None = None):
        self.dst = (dst, MARKER_PORT)
        family = socket.AF_INET6 if ":" in dst else socket.AF_INET
        with in_netns(dst_ns):
            self.receiver = socket.socket(family, socket.SOCK_DGRAM)
        with in_netns(src_ns):
            self.sender = socket.socket(family, socket.SOCK_DGRAM)
        self.receiver.bind(self.dst)

    def send(self) -> None:
        self.sender.sendto(b"dcpdissect capture marker", self.dst)

    def close(self) -> None:
        self.sender.close()
        self.receiver.close()


class Capture:
    """A running dumpcap (``tool='dumpcap'``: one or more interfaces, pcapng or pcap) or
    tcpdump (pcap; ``interfaces=('any',)`` gives Linux cooked v2) writing ``path``, optionally
    inside namespace ``ns`` and with a capture ``bpf`` filter. The kernel buffer is
    ``buffer_mib`` MiB: the 2 MiB default loses frames of a 12 MB loopback burst.

    Entering waits for the tool's own "capturing" line, then sends ``markers`` until the
    tool has captured some (dumpcap's packet count, tcpdump's file growing): a capture that
    holds them was live before the replay. Leaving waits ``settle`` seconds for the last
    packets, stops the tool with SIGINT, checks that every interface captured a marker,
    deletes the marker frames (editcap) and reads the file with capinfos (:attr:`info`)."""

    def __init__(self, path: str | Path, interfaces: Sequence[str] = ("lo",), *,
                 tool: str = "dumpcap", snaplen: int | None = None, fmt: str = "pcapng",
                 ns: str | None = None, bpf: str | None = None,
                 markers: Sequence[Marker] = (), buffer_mib: int = 64, settle: float = 1.0):
        if tool not in ("dumpcap", "tcpdump"):
            raise ValueError(f"unknown capture tool {tool!r}")
        if fmt not in ("pcap", "pcapng") or (tool == "tcpdump" and fmt != "pcap"):
            raise ValueError(f"{tool} cannot write {fmt}")
        self.path = Path(path)
        self.tool, self.interfaces = tool, tuple(interfaces)
        self.markers, self.settle = markers, settle
        self.cmd = (["ip", "netns", "exec", ns] if ns else []) + [tool]
        for iface in interfaces:
            self.cmd += ["-i", iface]
        if snaplen:
            self.cmd += ["-s", str(snaplen)]
        self.cmd += ["-B", str(buffer_mib * (1 if tool == "dumpcap" else 1024))]
        self.cmd += ["-w", str(self.path)]
        if tool == "dumpcap":
            self.cmd += ["-P"] if fmt == "pcap" else []
        else:
            self.cmd += ["-U", "-n", "--immediate-mode"]
        if bpf:
            self.cmd += ["-f", bpf] if tool == "dumpcap" else [bpf]
        self.stderr: list[str] = []
        self.info: dict[str, str] = {}
        self._count = 0

    def __enter__(self) -> "Capture":
        self.path.unlink(missing_ok=True)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        ready_text = "Capturing on" if self.tool == "dumpcap" else "listening on"

        def drain():
            for line in self.proc.stderr:         # universal newlines: dumpcap's \r counts too
                self.stderr.append(line.rstrip("\n"))
                if m := re.match(r"Packets: (\d+)", line):
                    self._count = int(m.group(1))
                if ready_text in line:
                    ready.set()
            ready.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        try:
            if not ready.wait(15) or self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(self.cmd)} did not start: {' | '.join(self.stderr)}")
            self._await_markers()
        except BaseException:
            self._stop()
            raise
        return self

    def _captured_any(self) -> bool:
        if self.tool == "dumpcap":
            return self._count > 0
        return self.path.exists() and self.path.stat().st_size > 24     # past the file header

    def _await_markers(self) -> None:
        deadline = time.monotonic() + 15
        extra_rounds = 3                # more markers after the first is seen: one per interface
        while extra_rounds and self.markers:
            for marker in self.markers:
                marker.send()
            time.sleep(0.05)
            if self._captured_any():
                extra_rounds -= 1
            elif time.monotonic() > deadline:
                raise RuntimeError(f"{self.tool} captured none of the markers: "
                                   f"{' | '.join(self.stderr)}")

    def _stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(15)
        finally:
            self._drain.join(5)

    def __exit__(self, exc_type, *exc) -> None:
        time.sleep(self.settle)
        rc = self._stop()
        if exc_type is not None:
            return
        if rc:
            raise RuntimeError(f"{self.tool} exited {rc}: {' | '.join(self.stderr)}")
        if dropped(self.stderr):
            raise RuntimeError(f"{self.tool} dropped packets: {' | '.join(self.stderr)}")
        if self.markers:
            self._remove_markers()
        self.info = capinfos(self.path)

    def _remove_markers(self) -> None:
        rows = _run("tshark", "-r", str(self.path), "-Y", f"udp.dstport == {MARKER_PORT}",
                    "-T", "fields", "-e", "frame.number", "-e", "frame.interface_id").split("\n")
        marks = [row.split("\t") for row in rows if row]
        live = {iface for _, iface in marks}
        if self.tool == "dumpcap" and len(live) < len(self.interfaces):
            raise RuntimeError(f"not every interface captured a marker: {self.interfaces}")
        tmp = self.path.with_name(self.path.name + ".tmp")
        delete_frames(self.path, tmp, [int(n) for n, _ in marks])
        os.replace(tmp, self.path)


def dropped(stderr: Sequence[str]) -> int:
    """Packets the capture tool says it dropped (dumpcap's received/dropped line per
    interface, tcpdump's 'dropped by kernel')."""
    total = 0
    for line in stderr:
        if m := re.search(r"received/dropped on interface .*: \d+/(\d+)", line):
            total += int(m.group(1))
        elif m := re.match(r"(\d+) packets dropped by kernel", line):
            total += int(m.group(1))
    return total


def capinfos(path: str | Path) -> dict[str, str]:
    """capinfos' table (-T -M) of one file as a dict; raises if it cannot read the file."""
    proc = subprocess.run(["capinfos", "-T", "-M", str(path)], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"capinfos {path}: {proc.stderr.strip()}")
    head, row = proc.stdout.splitlines()[:2]
    return dict(zip(head.split("\t"), row.split("\t")))


def delete_frames(src: str | Path, dst: str | Path, frames: Sequence[int]) -> None:
    """Write ``src`` without the given frame numbers (editcap)."""
    _run("editcap", str(src), str(dst), *[str(f) for f in frames])
