"""Real captures around a replay: dumpcap or tcpdump on one or more interfaces, two network
namespaces joined by a veth pair or through a router namespace (optionally a VXLAN tunnel
over it), frames deleted from a finished capture with editcap, and a
:class:`~dcpdissect.samples.replay.Player` captured on this host's loopback
(:func:`on_loopback`) or between namespaces (:class:`NamespaceReplay`, :func:`in_namespaces`).

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
from typing import Callable, Sequence

from .replay import Loopback, Player

CLONE_NEWNET = 0x40000000
VXLAN_ID = 42
VXLAN_PORT = 4789
UNDERLAY = ("192.0.2.1", "192.0.2.2")       # client and server side of the veth pair
ROUTED = {"client": ("192.0.2.1", "192.0.2.254"),          # (the side's, the router's) with
          "server": ("198.51.100.2", "198.51.100.254")}   # a router namespace between
TOOLS = ("dumpcap", "tcpdump", "capinfos", "editcap", "tshark", "ip")
MARKER_PORT = 47999                         # UDP port of the capture-start markers
LOOPBACK_MARKER = "127.42.255.254"          # inside Loopback()'s addresses (and capture filter)


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
    """Two fresh namespaces, ``client`` and ``server``, joined by a veth pair, or with
    ``router`` by a third namespace that routes between them (one veth pair to each side,
    ``router_veth[side]`` its end facing that side; IPv4 only). IPv6 is off unless ``ipv6`` (no
    neighbour discovery chatter in the captures). Names are unique per instance;
    everything is deleted on exit, also after an error during setup.

    ``vxlan``: a VXLAN tunnel, id 42 on UDP 4789, between the two sides' underlay
    addresses; bound to the veth (its MTU 50 bytes below the veth's) unless ``vxlan_mtu``
    gives it its own, with which the kernel fragments outer packets larger than the veth.
    ``mtu``: the veths' MTU; ``gso=False``: no segmentation offload (``gso_max_segs 1``),
    so that captures hold segments as a network carries them.

    ``place(ip, side, on='link')`` puts a scripted address on that side's link device (the
    VXLAN device when there is one, else the veth) or on its loopback (``on='lo'``), with a
    route to it from the other side (through the router when there is one)."""

    def __init__(self, vxlan: bool = False, ipv6: bool = False, *, router: bool = False,
                 mtu: int | None = None, vxlan_mtu: int | None = None, gso: bool = True):
        self.ipv6, self.router, self.gso = ipv6, router, gso
        self.mtu, self.vxlan_mtu = mtu, vxlan_mtu
        tag = uuid.uuid4().hex[:6]
        self.ns = {"client": f"dcpr-{tag}-c", "server": f"dcpr-{tag}-s"}
        self.veth = {"client": f"dr{tag}c", "server": f"dr{tag}s"}
        self.router_veth = {}
        if router:
            self.ns["router"] = f"dcpr-{tag}-r"
            self.router_veth = {"client": f"dr{tag}rc", "server": f"dr{tag}rs"}
        self.vxlan = {"client": f"vx{tag}c", "server": f"vx{tag}s"} if vxlan else None
        self._made: list[str] = []

    def link(self, side: str) -> str:
        return (self.vxlan or self.veth)[side]

    def underlay(self, side: str) -> str:
        """The address of ``side``'s veth."""
        return ROUTED[side][0] if self.router else UNDERLAY[side == "server"]

    def __enter__(self) -> "Namespaces":
        try:
            self._setup()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _setup(self) -> None:
        for ns in self.ns.values():
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            _run("ip", "link", "set", "lo", "up", ns=ns)
            if not self.ipv6:
                _run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                     "net.ipv6.conf.default.disable_ipv6=1", ns=ns)
        if self.router:
            _run("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=self.ns["router"])
            for side, (mine, gateway) in ROUTED.items():
                _run("ip", "link", "add", self.veth[side], "netns", self.ns[side], "type", "veth",
                     "peer", "name", self.router_veth[side], "netns", self.ns["router"])
                self._up(self.router_veth[side], "router", f"{gateway}/24", self.mtu)
                self._up(self.veth[side], side, f"{mine}/24", self.mtu)
                _run("ip", "route", "add", "default", "via", gateway, ns=self.ns[side])
        else:
            _run("ip", "link", "add", self.veth["client"], "netns", self.ns["client"], "type",
                 "veth", "peer", "name", self.veth["server"], "netns", self.ns["server"])
            for side in ("client", "server"):
                self._up(self.veth[side], side, f"{self.underlay(side)}/24", self.mtu)
        if self.vxlan:
            for side, other in (("client", "server"), ("server", "client")):
                bound = [] if self.vxlan_mtu else ["dev", self.veth[side]]
                _run("ip", "link", "add", self.vxlan[side], "type", "vxlan", "id", str(VXLAN_ID),
                     "dstport", str(VXLAN_PORT), "remote", self.underlay(other),
                     "local", self.underlay(side), *bound, ns=self.ns[side])
                self._up(self.vxlan[side], side, None, self.vxlan_mtu)

    def _up(self, device: str, side: str, address: str | None, mtu: int | None) -> None:
        ns = self.ns[side]
        if address:
            _run("ip", "addr", "add", address, "dev", device, ns=ns)
        _run("ip", "link", "set", device, "up", *(["mtu", str(mtu)] if mtu else []),
             *([] if self.gso else ["gso_max_segs", "1"]), ns=ns)

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
        where, via = (("router", self.router_veth[side]) if self.router and not self.vxlan
                      else (other, self.link(other)))
        _run("ip", fam, "route", "replace", f"{ip}/{prefix}", "dev", via, ns=self.ns[where])


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
    inside namespace ``ns`` and with a capture ``bpf`` filter (on every interface). The
    kernel buffer is ``buffer_mib`` MiB: the 2 MiB default loses frames of a 12 MB loopback
    burst.

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
        if bpf and tool == "dumpcap":
            self.cmd += ["-f", bpf]             # before any -i: the filter of every interface
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
        if bpf and tool == "tcpdump":
            self.cmd += [bpf]
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


# -- a replay captured ------------------------------------------------------------------------

def on_loopback(path: str | Path, scripts, player_kw: dict | None = None, **capture_kw) -> dict:
    """Replay on this host's loopback (``Player`` options ``player_kw``), captured with
    dumpcap on ``lo``; capinfos' table. Other programs' loopback traffic is filtered out."""
    marker, net = Marker(LOOPBACK_MARKER), Loopback()
    try:
        with Player(scripts, net, **(player_kw or {})) as player:
            with Capture(path, ["lo"], bpf=net.capture_filter(scripts), markers=[marker],
                         **capture_kw) as cap:
                player.play()
    finally:
        marker.close()
    return cap.info


class NamespaceReplay:
    """Scripts replayed by a ``Player`` (options ``player_kw``) between fresh
    :class:`Namespaces` (options ``spaces_kw``), each scripted address where ``placement``
    puts it (ip -> (side, on), see :meth:`Namespaces.place`). Inside it, :meth:`capture`
    makes captures and :meth:`play` replays once; leaving deletes everything."""

    def __init__(self, scripts, placement: dict[str, tuple[str, str]],
                 player_kw: dict | None = None, **spaces_kw):
        self.scripts, self.placement = scripts, placement
        self.player_kw, self.spaces_kw = player_kw or {}, spaces_kw
        self.markers: list[Marker] = []

    def __enter__(self) -> "NamespaceReplay":
        with contextlib.ExitStack() as stack:
            self.spaces = stack.enter_context(Namespaces(**self.spaces_kw))
            for ip, (side, on) in self.placement.items():
                self.spaces.place(ip, side, on)
            ns = self.spaces.ns
            for src, dst in (("client", "server"), ("server", "client")):   # across the veths
                self.markers.append(Marker(self.spaces.underlay(dst), ns[src], ns[dst]))
                stack.callback(self.markers[-1].close)
            net = NamespaceNet(self.spaces, {ip: side for ip, (side, _) in self.placement.items()})
            self.player = stack.enter_context(Player(self.scripts, net, **self.player_kw))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def capture(self, path: str | Path, interfaces: Sequence[str], side: str,
                **capture_kw) -> "Capture":
        """A :class:`Capture` on ``interfaces`` of ``side``'s namespace, live once it holds
        the markers sent across the veths (and on its loopback when it listens there)."""
        markers = list(self.markers)
        if "lo" in interfaces:
            lo = Marker("127.0.0.1", self.spaces.ns[side], self.spaces.ns[side])
            self._stack.callback(lo.close)
            markers.append(lo)
        return Capture(path, interfaces, ns=self.spaces.ns[side], markers=markers, **capture_kw)

    def play(self) -> list:
        return self.player.play()


def in_namespaces(path: str | Path, scripts, placement: dict[str, tuple[str, str]], *,
                  capture_side: str, interfaces: Callable[[Namespaces], list[str]],
                  spaces_kw: dict | None = None, player_kw: dict | None = None,
                  **capture_kw) -> dict:
    """One :class:`NamespaceReplay` captured on ``capture_side`` on the ``interfaces``
    chosen once the namespaces exist; capinfos' table."""
    with NamespaceReplay(scripts, placement, player_kw, **(spaces_kw or {})) as lab:
        with lab.capture(path, interfaces(lab.spaces), capture_side, **capture_kw) as cap:
            lab.play()
    return cap.info
