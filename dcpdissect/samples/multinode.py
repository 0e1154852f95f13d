"""Real captures of one replication taken at two points.

The consumer (the replica node, 10.0.0.2) and the producer (the active node, 10.0.0.1) live
in two network namespaces with a router namespace between them (a veth pair to each side);
dumpcap captures on the replica's veth and on the active node's veth at once, so every
packet is seen leaving one point and arriving at the other. What happens between them is
chosen per sample:

- ``forwarded``: the router forwards; the same TCP connection is seen at both points.
- ``delayed``: a relay process (:mod:`.relay`) in the router namespace terminates the
  consumer's connection and opens its own to the producer (ns_server's proxy legs: two TCP
  connections carrying the same DCP messages) and forwards each producer stream message
  of vbucket V :data:`DELAYS_MS` [V] milliseconds after it received it. (``tc netem`` on
  the router would delay the packets of one connection instead, but the kernel the samples
  were made on has no netem qdisc.)
- ``dropped``: the relay forwards at once but drops one producer message
  (:func:`dropped_message`).
- ``acked``: the relay forwards a takeover stream (:func:`takeover`) whose snapshot
  marker asks for an ack, and the consumer's ack, at once.
- ``ack-dropped``: the relay does not forward the consumer's ack; the producer, waiting for
  it, sends no vbucket state.
- ``relayed-relay``, ``dropped-relay``: the relay forwarding everything at once, and
  ``dropped``, captured at three points: dumpcap also runs in the router namespace on both
  of its veths (``NAME-relay.pcapng``, the relay's two legs), so the dropped message is
  seen arriving at the relay and never leaving it.

``python -m dcpdissect.samples.multinode samples/multinode`` rebuilds them and their README
(root, dumpcap, tshark, editcap, capinfos and ``ip netns``). The captures share this host's clock: a
test shifts one with ``editcap -t`` to give the two points different clocks.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from pathlib import Path

from ..codec import encode
from ..codec.header import peek
from .dsl import Script, dcp_open, doc, failover, marker, mutation, ok, stream_req
from .realnet import Capture, Marker, Namespaces, NamespaceNet, missing
from .replay import Connection, Event, Player
from .scenarios_basic import CONSUMER, PRODUCER_11209, REPLICATION_NAME, replication

SIDES = {"10.0.0.2": "client", "10.0.0.1": "server"}     # the replica, the active node
POINTS = {"client": "replica", "server": "active"}         # capture file suffix per side
DELAYS_MS = {0: 20, 1: 50, 2: 5}    # the relay's delay per vbucket in ``delayed``
RELAY_AT = "192.0.2.254"            # the router's address on the replica's side
DROPPED = (1, 2)                    # (vbucket, seqno) of the mutation dropped in ``dropped``
TAKEOVER = (5, 0x1000)              # the vbucket and opaque of the takeover stream
ACK = ok(0x56, TAKEOVER[1])         # the consumer's ack of the snapshot marker


def dropped_message(script) -> bytes:
    """The producer's mutation the ``dropped`` sample's relay does not forward (classic
    framing: its by_seqno is the first 8 bytes after the header)."""
    vbucket, seqno = DROPPED
    return next(m for d, _, m in script.messages
                if d == "s2c" and m[1] == 0x57 and peek(m).specific == vbucket
                and int.from_bytes(m[24:32], "big") == seqno)


def takeover(ack_arrives: bool) -> Script:
    """A takeover stream of one vbucket (the stream request's takeover flag): in
    TakeoverSend kv_engine's ActiveStream::snapshot sets the Ack flag on the marker and
    counts it in waitForSnapshot; PassiveStream::handleSnapshotEnd answers it with a
    success response once the snapshot's end item is processed; the producer sends the
    vbucket's pending state only when no ack is awaited. A noop answered comes between.
    ``ack_arrives`` False: the ack does not reach the producer, which sends no state."""
    vb, opaque = TAKEOVER
    s = Script(CONSUMER, PRODUCER_11209)
    s.c2s(dcp_open(REPLICATION_NAME, 0x25, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(stream_req(vb, opaque, flags=0x1))
    s.s2c(failover(opaque, (0x5A5A000000000005, 0)))
    s.s2c(marker(vb, opaque, 0, 2, "memory+checkpoint+ack"),
          mutation(vb, opaque, 1, "airline_10", doc(1)),
          mutation(vb, opaque, 2, "airline_11", doc(2)))
    s.c2s(ACK)
    s.s2c(encode(0x5C, opaque=0x20))
    s.c2s(ok(0x5C, 0x20))
    if ack_arrives:
        s.s2c(encode(0x5B, {"state": 3}, vbucket=vb, opaque=opaque))
        s.c2s(ok(0x5B, opaque))
    s.conv.close()
    return s


class TwoPoints:
    """The three namespaces (:class:`~.realnet.Namespaces` with a router, no segmentation
    offload) with the scripted addresses placed, markers across the router, and
    :meth:`captures` on both ends."""

    def __enter__(self) -> "TwoPoints":
        with contextlib.ExitStack() as stack:
            self.spaces = stack.enter_context(Namespaces(router=True, gso=False))
            for ip, side in SIDES.items():
                self.spaces.place(ip, side)
            ns = self.spaces.ns
            self.markers = []
            for src, dst in (("client", "server"), ("server", "client")):
                self.markers.append(Marker(self.spaces.underlay(dst), ns[src], ns[dst]))
                stack.callback(self.markers[-1].close)
            self.net = NamespaceNet(self.spaces, SIDES)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def captures(self, out: Path, name: str, relay: bool = False):
        """dumpcap on the replica's and the active node's veth, ``NAME-replica.pcapng`` and
        ``NAME-active.pcapng`` in ``out``; ``relay``: and one on both of the router's veths,
        ``NAME-relay.pcapng``."""
        with contextlib.ExitStack() as stack:
            if relay:
                stack.enter_context(Capture(out / f"{name}-relay.pcapng",
                                            list(self.spaces.router_veth.values()),
                                            ns=self.spaces.ns["router"], markers=self.markers))
            for side, point in POINTS.items():
                stack.enter_context(Capture(out / f"{name}-{point}.pcapng",
                                            [self.spaces.veth[side]], ns=self.spaces.ns[side],
                                            markers=self.markers))
            yield


class RelayedPlayer(Player):
    """A :class:`Player` whose consumer connects to the relay at ``relay_at`` (ip, port)
    instead of the producer; the producer accepts the relay's connection. ``drop``: the
    message the relay does not forward (either way)."""

    def __init__(self, scripts, net, relay_at: tuple[str, int], drop: bytes | None = None):
        super().__init__(scripts, net)
        self.relay_at, self.drop = relay_at, drop

    def _connect(self, ev: Event) -> None:
        conv = self.scripts[ev.script].conv
        server = (conv.server.ip, conv.server.port)
        client = self.net.socket(conv.client.ip)
        self._configure(client)
        client.bind((conv.client.ip, conv.client.port))
        client.connect(self.relay_at)
        accepted, _ = self._listeners[server].accept()
        self._configure(accepted)
        self.connections[ev.script] = Connection(ev.script, client.getsockname()[:2], server,
                                                 {"c2s": client, "s2c": accepted})

    def delivered(self, ev: Event) -> bytes:
        if self.drop is None or self.drop not in ev.frames:
            return ev.data
        frames = ev.frames
        frames.remove(self.drop)
        return b"".join(frames)


def forwarded(out: Path) -> None:
    with TwoPoints() as lab:
        with Player([replication()], lab.net) as player, lab.captures(out, "forwarded"):
            player.play()


def relayed(out: Path, name: str, delays: dict[int, int], drop: bool,
            at_relay: bool = False) -> None:
    script = replication()
    relay_script(out, name, script, delays, dropped_message(script) if drop else None,
                 at_relay)


def relay_script(out: Path, name: str, script: Script, delays: dict[int, int],
                 dropped: bytes | None, at_relay: bool = False) -> None:
    """``script`` played through the relay, which delays and drops as told; ``at_relay``:
    captured at the relay too."""
    server = f"{script.conv.server.ip}:{script.conv.server.port}"
    with TwoPoints() as lab:
        cmd = ["ip", "netns", "exec", lab.spaces.ns["router"], sys.executable, "-m",
               "dcpdissect.samples.relay", f"{RELAY_AT}:{script.conv.server.port}", server]
        cmd += [f"--delay={vb}={ms}" for vb, ms in delays.items()]
        if dropped is not None:
            cmd += ["--drop", dropped.hex()]
        relay = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            if relay.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the relay did not start: {' '.join(cmd)}")
            player = RelayedPlayer([script], lab.net, (RELAY_AT, script.conv.server.port),
                                   dropped)
            with player, lab.captures(out, name, at_relay):
                player.play()
            if relay.wait(15):
                raise RuntimeError(f"the relay exited {relay.returncode}")
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.wait()


HOW = {
    "forwarded": "the router namespace forwards: one TCP connection seen at both points",
    "delayed": "a relay process in the router namespace (two TCP connections, the legs of one "
               "DCP connection) forwards the producer's stream messages late: "
               + ", ".join(f"vbucket {vb} {ms} ms" for vb, ms in DELAYS_MS.items()),
    "dropped": "the relay forwards at once, but not the producer's DcpMutation of vbucket "
               f"{DROPPED[0]} seqno {DROPPED[1]}",
    "acked": f"the relay forwards at once a takeover stream of vbucket {TAKEOVER[0]}: a "
             "snapshot marker with the Ack flag, the consumer's ack, the vbucket's pending "
             "state",
    "ack-dropped": "the same, but the relay does not forward the consumer's ack (and the "
                   "producer, still waiting for it, sends no vbucket state)",
}
THREE_POINTS = {
    "relayed-relay": "the relay forwards everything at once; captured at the relay too (both "
                     "router veths)",
    "dropped-relay": "as `dropped`, captured at the relay too (both router veths)",
}

SAMPLES = {
    "forwarded": forwarded,
    "delayed": lambda out: relayed(out, "delayed", DELAYS_MS, drop=False),
    "dropped": lambda out: relayed(out, "dropped", {}, drop=True),
    "acked": lambda out: relay_script(out, "acked", takeover(True), {}, None),
    "ack-dropped": lambda out: relay_script(out, "ack-dropped", takeover(False), {}, ACK),
    "relayed-relay": lambda out: relayed(out, "relayed-relay", {}, drop=False, at_relay=True),
    "dropped-relay": lambda out: relayed(out, "dropped-relay", {}, drop=True, at_relay=True),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpdissect.samples.multinode",
                                description="rebuild the two-point captures (needs root)")
    p.add_argument("dir", help="output folder, e.g. samples/multinode")
    p.add_argument("--only", nargs="+", choices=sorted(SAMPLES), help="rebuild these samples")
    args = p.parse_args(argv)
    why = missing(namespaces=True)
    if why:
        print(f"cannot make real captures here: {why}", file=sys.stderr)
        return 2
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or SAMPLES:
        SAMPLES[name](out)
        for point in [*POINTS.values(), *(["relay"] if name in THREE_POINTS else [])]:
            print(out / f"{name}-{point}.pcapng")
    (out / "README.md").write_text(readme(out))
    return 0


def _tshark(path: Path, *args: str) -> list[str]:
    return subprocess.run(["tshark", "-r", str(path), "-d", "tcp.port==11209,couchbase", *args],
                          capture_output=True, text=True, check=True).stdout.split()


def readme(out: Path) -> str:
    """The README: each pair of captures, how it was made, and what tshark decodes in it;
    then the three-point capture."""
    rows = []
    for name, how in HOW.items():
        counts = []
        for point in POINTS.values():
            path = out / f"{name}-{point}.pcapng"
            if not path.is_file():
                break
            ops = _tshark(path, "-Y", "couchbase", "-T", "fields", "-e", "couchbase.opcode",
                          "-E", "occurrence=a")
            counts.append(f"{point} {sum(len(o.split(',')) for o in ops)}")
        else:
            rows.append(f"| `{name}-replica.pcapng`, `{name}-active.pcapng` | {how} | "
                        f"{', '.join(counts)} |")
    vb, seqno = DROPPED
    mutation = f"couchbase.vbucket=={vb} && couchbase.opcode==0x57 && couchbase.extras.by_seqno=="
    sent = _tshark(out / "dropped-active.pcapng", "-Y", f"{mutation}{seqno}", "-T", "fields",
                   "-e", "frame.number")
    around = [_tshark(out / "dropped-replica.pcapng", "-Y", f"{mutation}{n}", "-T", "fields",
                      "-e", "frame.number") for n in (seqno - 1, seqno + 1)]
    return "\n".join([
        "# Two-point captures",
        "",
        "One clean replication (`scenarios_basic.replication`: the replica 10.0.0.2 streams",
        "vbuckets 0, 1 and 2 from the active node 10.0.0.1:11209; in `acked` and `ack-dropped`",
        "a takeover stream of vbucket 5, `multinode.takeover`) played over real kernel TCP",
        "between two network namespaces with a router namespace between them, and captured at",
        "two points at once: dumpcap on the replica's veth (`*-replica.pcapng`) and on the",
        "active node's veth (`*-active.pcapng`), full snaplen, no segmentation offload.",
        "Both captures read this host's clock: the tests shift one with `editcap -t` and",
        "expect `dcpdissect nodes` to recover the shift. Rebuild (as root) with",
        "",
        "    python -m dcpdissect.samples.multinode samples/multinode",
        "",
        "| files | between the points | MCBP messages (tshark) |",
        "| --- | --- | --- |",
        *rows,
        "",
        "The injected delays are the relay's: it forwards each producer stream message of",
        "the vbucket that long after it received it (this kernel has no `netem` qdisc to",
        "delay the forwarded packets of one connection instead). In `dropped`, the active",
        f"node sent the dropped mutation in frame {', '.join(sent)} of `dropped-active.pcapng`;",
        f"`dropped-replica.pcapng` has vbucket {vb}'s seqno {seqno - 1} in frame "
        f"{', '.join(around[0])} and seqno {seqno + 1} in frame {', '.join(around[1])}, and",
        f"no seqno {seqno} (`tshark -d tcp.port==11209,couchbase -Y '{mutation}{seqno}'`).",
        *_ack_lines(out),
        *_relay_lines(out, mutation, seqno),
        "",
    ])


def _relay_lines(out: Path, mutation: str, seqno: int) -> list[str]:
    """The three-point samples: what they are, and where tshark finds the dropped
    mutation."""
    lines = ["", "## Three points", ""]
    for name, how in THREE_POINTS.items():
        files = {p: out / f"{name}-{p}.pcapng" for p in ("active", "relay", "replica")}
        if not all(f.is_file() for f in files.values()):
            return []
        counts = []
        for point, path in files.items():
            ops = _tshark(path, "-Y", "couchbase", "-T", "fields", "-e", "couchbase.opcode",
                          "-E", "occurrence=a")
            counts.append(f"{point} {sum(len(o.split(',')) for o in ops)}")
        lines.append(f"- `{name}-active.pcapng`, `{name}-relay.pcapng`, "
                     f"`{name}-replica.pcapng`: {how}; MCBP messages (tshark): "
                     f"{', '.join(counts)}.")

    def at(point: str, n: int) -> str:
        return ", ".join(_tshark(out / f"dropped-relay-{point}.pcapng", "-Y", f"{mutation}{n}",
                                 "-T", "fields", "-e", "frame.number")) or "none"
    return lines + [
        "",
        "The relay's capture holds both of its legs (dumpcap on two interfaces writes their",
        "packets in batches per interface, so its frames are not all in time order across",
        f"the legs). The dropped seqno {seqno} is frame {at('active', seqno)} at the active "
        f"node and frame {at('relay', seqno)} at the relay",
        f"(arriving from the active node), and nowhere in the replica's capture, which has "
        f"seqno {seqno - 1} in frame {at('replica', seqno - 1)}",
        f"and seqno {seqno + 1} in frame {at('replica', seqno + 1)}: the relay read it and "
        "did not forward it.",
    ]


def _ack_lines(out: Path) -> list[str]:
    """Where ``ack-dropped``'s marker and ack are, by tshark."""
    ack = "couchbase.magic==0x81 && couchbase.opcode==0x56"
    marker = "couchbase.opcode==0x56 && couchbase.extras.flags.dcp_snapshot_marker_ack==1"
    frames = {(point, what): ", ".join(_tshark(out / f"ack-dropped-{point}.pcapng", "-Y", flt,
                                               "-T", "fields", "-e", "frame.number")) or "none"
              for point in POINTS.values() for what, flt in (("ack", ack), ("marker", marker))}
    return [
        "In `ack-dropped`, the marker with the Ack flag is frame "
        f"{frames['replica', 'marker']} of `ack-dropped-replica.pcapng` and frame",
        f"{frames['active', 'marker']} of `ack-dropped-active.pcapng`; the consumer's ack is "
        f"frame {frames['replica', 'ack']} of the first and",
        f"{frames['active', 'ack']} in the second (`-Y '{ack}'`).",
    ]


if __name__ == "__main__":
    sys.exit(main())
