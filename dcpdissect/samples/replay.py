"""Play scripted DCP conversations over real kernel TCP sockets.

A :class:`~dcpdissect.samples.dsl.Script` records what each side sends; its
synthesised plan (``netsynth``) gives every send, pause and close a time. The
:class:`Player` turns the scripts of one sample into a single global timeline (all
connections, both directions, in the plan's time order, as ``netsynth.write_pcap`` merges
them) and performs it with real sockets: the server side listens on the scripted port, the
client binds the scripted port where it can, the frames of one send group are written with
one ``sendall`` (so the kernel segments them as a producer's buffer), and every send is read
in full by the peer before the next event. The kernel chooses segment sizes, ACKs and
window updates; the capture around it (``realnet.Capture``) records them.

``python -m dcpdissect.samples.real_samples DIR`` rebuilds the real samples with it.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..codec.header import frame_size
from ..protocol.constants import HEADER_SIZE
from .dsl import Script
from .netsynth import FIN, RST

ENDINGS = ("fin", "rst", "half", "open")
TIMEOUT = 20.0          # seconds any single socket operation may take
MIN_SLEEP = 100e-6      # scripted gaps shorter than this are not slept


@dataclass(frozen=True)
class Event:
    """One step of a script: ``connect``, ``send`` (``data`` from ``direction``'s writer)
    or ``close`` (``how`` in :data:`ENDINGS`, started by ``direction``'s writer)."""
    ts_ns: int
    script: int
    kind: str
    direction: str = "c2s"
    data: bytes = b""
    how: str = ""

    @property
    def frames(self) -> list[bytes]:
        """The MCBP messages of a send (split on each header's body length)."""
        out, pos = [], 0
        while pos + HEADER_SIZE <= len(self.data):
            end = pos + frame_size(self.data, pos)
            out.append(self.data[pos:end])
            pos = end
        return out


def script_events(index: int, script: Script, ending: str | None = None) -> list[Event]:
    """The connect, send groups and close of one script, timed by its synthesised plan.

    Sends joined by ``coalesce_with_next`` form one group, as ``netsynth`` segments them.
    ``ending`` replaces the script's own close (``open``: none)."""
    conv = script.conv
    pkts = conv.packets()
    first_ts: dict[tuple[str, int], int] = {}
    for p in pkts:
        if p.payload:
            first_ts.setdefault((p.direction, p.stream_offset), p.ts_ns)
    events = [Event(pkts[0].ts_ns, index, "connect")]
    offsets = {"c2s": 0, "s2c": 0}
    ops = conv.operations()
    i = 0
    while i < len(ops):
        op = ops[i]
        i += 1
        if op[0] == "send":
            group = [op]
            while group[-1][3] and i < len(ops) and ops[i][0] == "send" and ops[i][1] == op[1]:
                group.append(ops[i])
                i += 1
            data = b"".join(g[2] for g in group)
            if data:
                events.append(Event(first_ts[(op[1], offsets[op[1]])], index, "send", op[1], data))
                offsets[op[1]] += len(data)
        elif op[0] == "close" and ending != "open":
            ts = next(p.ts_ns for p in pkts if p.flags & (FIN | RST))
            events.append(Event(ts, index, "close", op[2], how=ending or op[1]))
    if ending not in (None, "open") and events[-1].kind != "close":
        events.append(Event(pkts[-1].ts_ns + 1, index, "close", "c2s", how=ending))
    return events


def timeline(scripts: Sequence[Script], endings: dict[int, str] | None = None) -> list[Event]:
    """Every script's events in one order: plan time, then script order (ties as
    ``netsynth.merge_packets``), each script keeping its own order."""
    endings = endings or {}
    for how in endings.values():
        if how not in ENDINGS:
            raise ValueError(f"unknown ending {how!r}; expected one of {ENDINGS}")
    events = [ev for k, s in enumerate(scripts) for ev in script_events(k, s, endings.get(k))]
    return sorted(events, key=lambda ev: (ev.ts_ns, ev.script))


class Loopback:
    """Scripted addresses on this host's loopback: IPv4 ``a.b.c.d`` becomes
    ``127.<second>.c.d`` (distinct scripted hosts stay distinct), IPv6 becomes ``::1``."""

    def __init__(self, second_octet: int = 42):
        self.second_octet = second_octet
        self._seen: dict[str, str] = {}

    def address(self, ip: str) -> str:
        addr = ipaddress.ip_address(ip)
        if addr.version == 6:
            return "::1"
        mapped = f"127.{self.second_octet}.{addr.packed[2]}.{addr.packed[3]}"
        if self._seen.setdefault(mapped, ip) != ip:
            raise ValueError(f"{ip} and {self._seen[mapped]} both map to {mapped}")
        return mapped

    def capture_filter(self, scripts: Sequence[Script]) -> str:
        """A BPF filter keeping the replay's packets and no other loopback traffic."""
        ports = sorted({s.conv.server.port for s in scripts})
        return (f"net 127.{self.second_octet}.0.0/16 or "
                f"(ip6 host ::1 and tcp port ({' or '.join(map(str, ports))}))")

    def socket(self, ip: str) -> socket.socket:
        """A TCP socket for the (mapped) address ``ip``."""
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        return socket.socket(family, socket.SOCK_STREAM)


@dataclass
class Connection:
    """One replayed script: the addresses really used and its two sockets."""
    script: int
    client: tuple[str, int]
    server: tuple[str, int]
    sockets: dict[str, socket.socket | None]     # writer of c2s ('c2s') and of s2c ('s2c')


def _abort(sock: socket.socket | None) -> None:
    """Close without FIN (nothing is sent for a connection already ended)."""
    if sock is not None and sock.fileno() != -1:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def _read_exactly(sock: socket.socket, expected: bytes, errors: list) -> None:
    got = bytearray()
    try:
        while len(got) < len(expected):
            chunk = sock.recv(min(1 << 20, len(expected) - len(got)))
            if not chunk:
                raise ConnectionError(f"peer closed after {len(got)} of {len(expected)} bytes")
            got += chunk
        if got != expected:
            raise ConnectionError("received bytes differ from the bytes sent")
    except Exception as exc:        # reported by the sending thread
        errors.append(exc)


def _expect_eof(sock: socket.socket) -> None:
    if sock.recv(1) != b"":
        raise ConnectionError("data where the end of the stream was expected")


class Player:
    """Replays scripts on ``net`` (default :class:`Loopback`; ``realnet.NamespaceNet`` for
    two network namespaces). Use as a context manager around the capture:
    listeners open on entry, :meth:`play` runs the timeline, sockets still open (endings
    ``half`` and ``open``) are aborted on exit, after the capture has stopped.

    ``nodelay``: TCP_NODELAY on every socket (False: Nagle's algorithm as the kernel does it);
    ``time_scale``: scripted gaps between events are slept this many times over (0: none);
    ``delay(event)``: extra seconds to wait before an event; ``endings``: per script index,
    one of :data:`ENDINGS` instead of the script's own close."""

    def __init__(self, scripts: Sequence[Script], net=None, *, nodelay: bool = True,
                 time_scale: float = 1.0, delay: Callable[[Event], float] | None = None,
                 endings: dict[int, str] | None = None):
        self.scripts = list(scripts)
        self.net = net or Loopback()
        self.nodelay = nodelay
        self.time_scale = time_scale
        self.delay = delay
        self.events = timeline(self.scripts, endings)
        self.connections: dict[int, Connection] = {}
        self._listeners: dict[tuple[str, int], socket.socket] = {}

    def __enter__(self) -> "Player":
        for s in self.scripts:
            server = s.conv.server
            where = (self.net.address(server.ip), server.port)
            if where not in self._listeners:
                sock = self.net.socket(where[0])
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(where)
                sock.listen(16)
                sock.settimeout(TIMEOUT)
                self._listeners[where] = sock
        return self

    def __exit__(self, *exc) -> None:
        for conn in self.connections.values():
            for sock in conn.sockets.values():
                _abort(sock)
        for sock in self._listeners.values():
            sock.close()

    def play(self) -> list[Connection]:
        """Perform every event in order; returns the connections by script index."""
        previous = None
        for ev in self.events:
            wait = 0.0 if previous is None else (ev.ts_ns - previous.ts_ns) * 1e-9 * self.time_scale
            wait += self.delay(ev) if self.delay else 0.0
            if wait >= MIN_SLEEP:
                time.sleep(wait)
            getattr(self, f"_{ev.kind}")(ev)
            previous = ev
        return [self.connections[k] for k in sorted(self.connections)]

    def _configure(self, sock: socket.socket) -> None:
        sock.settimeout(TIMEOUT)
        if self.nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _connect(self, ev: Event) -> None:
        conv = self.scripts[ev.script].conv
        server = (self.net.address(conv.server.ip), conv.server.port)
        client_ip = self.net.address(conv.client.ip)
        client = None
        for port in (conv.client.port, 0):        # the scripted port, else any free one
            client = self.net.socket(client_ip)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._configure(client)
            try:
                client.bind((client_ip, port))
                client.connect(server)
                break
            except OSError:
                client.close()
                if port == 0:
                    raise
        accepted, peer = self._listeners[server].accept()
        if peer[:2] != client.getsockname()[:2]:
            raise ConnectionError(f"accepted {peer}, expected {client.getsockname()}")
        self._configure(accepted)
        self.connections[ev.script] = Connection(ev.script, client.getsockname()[:2], server,
                                                 {"c2s": client, "s2c": accepted})

    def _send(self, ev: Event) -> None:
        socks = self.connections[ev.script].sockets
        writer, reader = socks[ev.direction], socks["s2c" if ev.direction == "c2s" else "c2s"]
        errors: list = []
        thread = threading.Thread(target=_read_exactly, args=(reader, self.delivered(ev), errors))
        thread.start()
        writer.sendall(ev.data)       # one send() call for the whole group, more if it was partial
        thread.join()
        if errors:
            raise errors[0]

    def delivered(self, ev: Event) -> bytes:
        """The bytes of a send that reach the peer (all of them, unless something between
        the two drops some)."""
        return ev.data

    def _close(self, ev: Event) -> None:
        socks = self.connections[ev.script].sockets
        first, second = ev.direction, "s2c" if ev.direction == "c2s" else "c2s"
        if ev.how == "rst":
            _abort(socks[first])
            socks[first] = None
            return
        socks[first].shutdown(socket.SHUT_WR)
        _expect_eof(socks[second])
        if ev.how == "fin":
            socks[second].shutdown(socket.SHUT_WR)
            _expect_eof(socks[first])
            for side in (first, second):
                socks[side].close()
                socks[side] = None

