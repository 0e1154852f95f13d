"""Every packet of a real capture carried through a tunnel, as an overlay or a switch mirror
would carry it.

:func:`encapsulate` wraps each frame of a capture (Ethernet or raw IP) in a stack of outer
layers, outermost first (:class:`Layer`): Ethernet, 802.1Q, MPLS, IPv4, IPv6, UDP, VXLAN,
Geneve (with options), GRE (checksum, key, sequence number), ERSPAN II and III (with or
without the platform-specific subheader). Lengths, IPv4 header, UDP and GRE checksums are
computed, and each layer's type field follows from the layer inside it. The innermost
outer layer carries the inner Ethernet frame (VXLAN, ERSPAN, and Geneve, GRE or MPLS given
``ethernet=True``; MPLS puts a control word before it) or else the frame's IP packet. The
outer endpoints follow the inner packet's direction (the side that sent the first packet
is behind the first address), except for a mirror (ERSPAN), which always sends from its
first address to its second; a UDP source port is a hash of the inner flow, as VTEPs pick
it. Optionally the outermost or the inner IP packet is split at an MTU (:class:`Fragmenting`;
the inner one with its "don't fragment" bit cleared), each fragment a frame with the
original's timestamp.

The inner bytes are not changed otherwise. :data:`SAMPLES` describes ``samples/encap``;
``python -m dcpdissect.samples.encapsulate samples/encap`` rewrites it from the real
captures there (``--capture`` first captures those again with :func:`capture_inner`, which needs
root, dumpcap and ``ip netns``) together with its README.
"""

from __future__ import annotations

import argparse
import ipaddress
import struct
import sys
import zlib
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional

from ..capture.pcapwrite import LINKTYPE_ETHERNET, PcapWriter
from ..capture.readers import Frame, open_capture
from .dsl import Script
from .netsynth import Endpoint
from .realnet import in_namespaces, missing
from .scenarios_basic import replication
from .scenarios_streams import resume_collapsed

__all__ = ["Layer", "Fragmenting", "Wrapped", "encapsulate", "write_wrapped", "ipv4_fragments",
           "ipv6_fragments", "Sample", "SAMPLES", "SCENARIOS", "capture_inner", "build", "main"]

ETHERTYPE = {"ipv4": 0x0800, "ipv6": 0x86DD, "vlan": 0x8100, "mpls": 0x8847,
             "ethernet": 0x6558, "erspan2": 0x88BE, "erspan3": 0x22EB}
IP_PROTO = {"udp": 17, "gre": 47, "ipv4": 4, "ipv6": 41, "mpls": 137}
_FRAME_CARRIERS = {"vxlan", "erspan2", "erspan3"}
_u16 = struct.Struct("!H").unpack_from


class Layer(NamedTuple):
    """One outer layer: ``kind`` (eth, vlan, mpls, ipv4, ipv6, udp, vxlan, geneve, gre,
    erspan2, erspan3) and its settings (see :func:`_wrap`)."""
    kind: str
    opts: dict = {}


class Fragmenting(NamedTuple):
    which: str              # "outer": the outermost IP packet; "inner": the captured one
    mtu: int                # the largest fragment, IP header included


class Wrapped(NamedTuple):
    frames: list            # (ts_ns, bytes), in order
    origin: list            # the input frame number of each output frame


def _csum(data: bytes) -> int:
    if len(data) & 1:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4_header(src: bytes, dst: bytes, proto: int, payload_len: int, ident: int) -> bytes:
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, ident, 0, 64, proto, 0,
                      src, dst)
    return hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]


def ipv6_header(src: bytes, dst: bytes, nh: int, payload_len: int) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60000000, payload_len, nh, 64, src, dst)


def _with_udp_checksum(src: bytes, dst: bytes, udp: bytes) -> bytes:
    pseudo = (src + dst + struct.pack("!xBH", 17, len(udp)) if len(src) == 4
              else src + dst + struct.pack("!I3xB", len(udp), 17))
    return udp[:6] + struct.pack("!H", _csum(pseudo + udp) or 0xFFFF) + udp[8:]


# -- fragments ----------------------------------------------------------------------------

def ipv4_fragments(packet: bytes, mtu: int, ident: int) -> list[bytes]:
    """An IPv4 packet split at ``mtu`` (each fragment with the whole header), its "don't
    fragment" bit cleared and its identification set to ``ident``."""
    ihl = (packet[0] & 0x0F) * 4
    step = (mtu - ihl) // 8 * 8
    if len(packet) <= mtu or step <= 0:
        return [packet]
    data, out = packet[ihl:], []
    for at in range(0, len(data), step):
        chunk = data[at:at + step]
        h = bytearray(packet[:ihl])
        more = 0x2000 if at + step < len(data) else 0
        struct.pack_into("!HHH", h, 2, ihl + len(chunk), ident, more | at // 8)
        struct.pack_into("!H", h, 10, 0)
        struct.pack_into("!H", h, 10, _csum(bytes(h)))
        out.append(bytes(h) + chunk)
    return out


def ipv6_fragments(packet: bytes, mtu: int, ident: int) -> list[bytes]:
    """An IPv6 packet (its payload right after the base header) split at ``mtu``, each
    fragment with a Fragment header of identification ``ident``."""
    step = (mtu - 48) // 8 * 8
    if len(packet) <= mtu or step <= 0:
        return [packet]
    nh, data, out = packet[6], packet[40:], []
    for at in range(0, len(data), step):
        chunk = data[at:at + step]
        head = bytearray(packet[:40])
        struct.pack_into("!HB", head, 4, 8 + len(chunk), 44)
        more = 1 if at + step < len(data) else 0
        out.append(bytes(head) + struct.pack("!BxHI", nh, at | more, ident) + chunk)
    return out


def _fragments(packet: bytes, mtu: int, ident: int) -> list[bytes]:
    split = ipv4_fragments if packet[0] >> 4 == 4 else ipv6_fragments
    return split(packet, mtu, ident)


# -- the wrapping -------------------------------------------------------------------------

class _State:
    """One run's counters: IP identifications, GRE sequence numbers, ERSPAN indexes."""

    def __init__(self):
        self.ident = 0
        self.counts: dict = {}

    def next_ident(self) -> int:
        self.ident = self.ident % 0xFFFF + 1
        return self.ident

    def next(self, key) -> int:
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]


class _Packet(NamedTuple):
    direction: int          # 0: from the side that sent first
    flow: int               # a hash of the inner addresses and ports
    mirror: bool


def _wrap(layer: Layer, payload: bytes, inner: str, p: _Packet, state: _State) -> bytes:
    """``payload`` (of kind ``inner``) inside one outer ``layer`` other than IP."""
    kind, o = layer
    if kind == "eth":
        a, b = bytes((2, 0, 0, 0, 0, 1)), bytes((2, 0, 0, 0, 0, 2))
        src, dst = (a, b) if p.direction == 0 or p.mirror else (b, a)
        return dst + src + struct.pack("!H", ETHERTYPE[inner]) + payload
    if kind == "vlan":
        return struct.pack("!HH", o.get("vid", 100), ETHERTYPE[inner]) + payload
    if kind == "mpls":
        labels = o["labels"]
        stack = b"".join(struct.pack("!I", label << 12 | (i == len(labels) - 1) << 8 | 64)
                         for i, label in enumerate(labels))
        return stack + (b"\0\0\0\0" if inner == "ethernet" else b"") + payload
    if kind == "udp":
        sport = 49152 + p.flow % 16384
        return struct.pack("!HHHH", sport, o["dport"], 8 + len(payload), 0) + payload
    if kind == "vxlan":
        return struct.pack("!II", 0x08000000, o["vni"] << 8) + payload
    if kind == "geneve":
        options = b"".join(struct.pack("!HBB", cls, typ, len(data) // 4) + data
                           for cls, typ, data in o.get("options", ()))
        return (bytes((len(options) // 4, 0)) + struct.pack("!HI", ETHERTYPE[inner], o["vni"] << 8)
                + options + payload)
    if kind == "gre":
        flags, fields = 0, b""
        if o.get("checksum"):
            flags |= 0x8000
            fields += b"\0\0\0\0"
        if "key" in o:
            flags |= 0x2000
            fields += struct.pack("!I", o["key"])
        if o.get("seq"):
            flags |= 0x1000
            fields += struct.pack("!I", state.next(("gre", p.direction)))
        gre = struct.pack("!HH", flags, ETHERTYPE[inner]) + fields + payload
        if o.get("checksum"):
            gre = gre[:4] + struct.pack("!H", _csum(gre)) + gre[6:]
        return gre
    if kind == "erspan2":
        return struct.pack("!HHI", 0x1000 | o.get("vlan", 0), o["session"],
                           state.next("erspan") & 0xFFFFF) + payload
    if kind == "erspan3":
        sub = o.get("subheader", b"")
        return struct.pack("!HHIHH", 0x2000 | o.get("vlan", 0), o["session"],
                           state.next("erspan"), 0, 1 if sub else 0) + sub + payload
    raise ValueError(f"unknown layer {kind!r}")


def _ip(layer: Layer, payload: bytes, inner: str, p: _Packet, state: _State,
        fragmenting: Optional[Fragmenting]) -> list[bytes]:
    """``payload`` inside an outer IPv4 or IPv6 packet (its fragments with ``fragmenting``)."""
    a, b = (ipaddress.ip_address(layer.opts[k]).packed for k in ("src", "dst"))
    src, dst = (a, b) if p.direction == 0 or p.mirror else (b, a)
    if inner == "udp":
        payload = _with_udp_checksum(src, dst, payload)
    ident = state.next_ident()
    if layer.kind == "ipv4":
        packet = ipv4_header(src, dst, IP_PROTO[inner], len(payload), ident) + payload
    else:
        packet = ipv6_header(src, dst, IP_PROTO[inner], len(payload)) + payload
    return [packet] if fragmenting is None else _fragments(packet, fragmenting.mtu, ident)


def _carries_frame(layers: list[Layer]) -> bool:
    last = layers[-1]
    return last.kind in _FRAME_CARRIERS or bool(last.opts.get("ethernet"))


def _split_frame(fr: Frame) -> tuple[bytes, Optional[bytes]]:
    """(Ethernet header with its tags, IP packet up to its IP length, or None) of a frame;
    a raw IP frame gets an Ethernet header of zero addresses."""
    data = fr.data
    if fr.linktype in (101, 228, 229):
        off, etype = 0, 0x0800 if data[:1] and data[0] >> 4 == 4 else 0x86DD
        head = bytes(12) + struct.pack("!H", etype)
    elif fr.linktype == LINKTYPE_ETHERNET:
        off = 12
        while _u16(data, off)[0] in (0x8100, 0x88A8):
            off += 4
        etype = _u16(data, off)[0]
        head, off = data[:off + 2], off + 2
    else:
        raise ValueError(f"frame {fr.number}: link type {fr.linktype}, not Ethernet or raw IP")
    if etype == 0x0800 and len(data) >= off + 20:
        return head, data[off:off + _u16(data, off + 2)[0]]            # its total length
    if etype == 0x86DD and len(data) >= off + 40:
        return head, data[off:off + 40 + _u16(data, off + 4)[0]]       # its payload length
    return head, None


def encapsulate(frames: Iterable[Frame], layers: list[Layer],
                fragmenting: Optional[Fragmenting] = None) -> Wrapped:
    """Each frame inside ``layers`` (outermost first); a frame without an IP packet only
    where the tunnel carries Ethernet frames. See the module docstring."""
    state = _State()
    frames_out, origin = [], []
    first_src = None
    mirror = any(layer.kind.startswith("erspan") for layer in layers)
    outer_ip = next(i for i, layer in enumerate(layers) if layer.kind in ("ipv4", "ipv6")) \
        if any(layer.kind in ("ipv4", "ipv6") for layer in layers) else None
    frame_tunnel = _carries_frame(layers)
    for fr in frames:
        head, packet = _split_frame(fr)
        if packet is None:
            if not frame_tunnel:
                continue
            src, flow, inner = b"", 0, "ethernet"
        else:
            v4 = packet[0] >> 4 == 4
            src = packet[12:16] if v4 else packet[8:24]
            flow = zlib.crc32(packet[12:24] if v4 else packet[8:44])
            inner = "ethernet" if frame_tunnel else "ipv4" if v4 else "ipv6"
        if first_src is None:
            first_src = src
        info = _Packet(0 if src == first_src else 1, flow, mirror)
        if fragmenting is not None and fragmenting.which == "inner" and packet is not None:
            pieces = _fragments(packet, fragmenting.mtu, state.next_ident())
            payloads = [head + f for f in pieces] if frame_tunnel else pieces
        else:
            payloads = [fr.data if frame_tunnel else packet]
        for i in range(len(layers) - 1, -1, -1):
            kind = inner if i == len(layers) - 1 else layers[i + 1].kind
            layer = layers[i]
            if layer.kind in ("ipv4", "ipv6"):
                outer = fragmenting if i == outer_ip and fragmenting and \
                    fragmenting.which == "outer" else None
                payloads = [q for p in payloads for q in _ip(layer, p, kind, info, state, outer)]
            else:
                payloads = [_wrap(layer, p, kind, info, state) for p in payloads]
        frames_out += [(fr.ts_ns, p) for p in payloads]
        origin += [fr.number] * len(payloads)
    return Wrapped(frames_out, origin)


def write_wrapped(path, wrapped: Wrapped) -> None:
    """A pcap (Ethernet, nanosecond timestamps) of the wrapped frames."""
    with open(path, "wb") as fh:
        writer = PcapWriter(fh, linktype=LINKTYPE_ETHERNET, nanosecond=True)
        for ts_ns, data in wrapped.frames:
            writer.write(ts_ns, data)
        writer.close()


# -- samples/encap ------------------------------------------------------------------------

class Sample(NamedTuple):
    name: str                       # samples/encap/NAME.pcap
    source: str                     # the real capture it wraps (or, captured by the kernel,
    #                                 the loopback capture of the same conversation)
    layers: tuple                   # of Layer, outermost first ((): captured, see CAPTURES)
    fragmenting: Optional[Fragmenting]
    what: str                       # the README's description
    options: tuple = ()             # dcpdissect options it needs
    tshark: tuple = ()              # tshark options it needs


_ETH = Layer("eth")
_IP4 = Layer("ipv4", {"src": "10.9.0.1", "dst": "10.9.0.2"})
_IP6 = Layer("ipv6", {"src": "2001:db8:9::1", "dst": "2001:db8:9::2"})
_V4, _V6, _RESUME = "loopback-replication.pcap", "loopback-replication-ipv6.pcap", \
    "loopback-resume-collapsed.pcap"
_VXLAN = (_ETH, _IP4, Layer("udp", {"dport": 4789}), Layer("vxlan", {"vni": 42}))
_PLATFORM = struct.pack("!II", 3 << 26 | 7, 0x5F5E100)        # platform id 3: port 7, time

CAPTURES = {            # the real captures, by capture_inner() (scenario, mode, veth MTU)
    _V4: ("replication", "loopback", 0),
    _V6: ("replication-ipv6", "loopback", 0),
    _RESUME: ("resume-collapsed", "loopback", 0),
    "vxlan-kernel.pcap": ("replication", "vxlan", 1500),
    "vxlan-kernel-fragments.pcap": ("replication", "vxlan", 1400),
}

SAMPLES: tuple[Sample, ...] = (
    Sample("vxlan", _V4, _VXLAN, None, "VXLAN VNI 42, UDP 4789, over IPv4"),
    Sample("vxlan-ipv6", _V4, (_ETH, _IP6, Layer("udp", {"dport": 4789}),
                               Layer("vxlan", {"vni": 42})), None,
           "VXLAN inside IPv6 (UDP checksum over the IPv6 pseudo-header)"),
    Sample("vxlan-8472", _V4, (_ETH, _IP4, Layer("udp", {"dport": 8472}),
                               Layer("vxlan", {"vni": 1})), None,
           "VXLAN on UDP 8472 (Linux's and flannel's default port)",
           ("--vxlan-port", "8472"), ("-d", "udp.port==8472,vxlan")),
    Sample("geneve", _V4, (_ETH, _IP4, Layer("udp", {"dport": 6081}),
                           Layer("geneve", {"vni": 7, "ethernet": True, "options": (
                               (0x0102, 0x80, b"abcd"), (0xFFFF, 0x01, b"12345678"))})), None,
           "Geneve VNI 7 with two options, carrying Ethernet"),
    Sample("gre", _V4, (_ETH, _IP4, Layer("gre", {"checksum": True, "key": 7, "seq": True})),
           None, "GRE with checksum, key 7 and sequence numbers, carrying IPv4"),
    Sample("gre-ethernet", _V4, (_ETH, _IP4, Layer("gre", {"key": 0x1234500,
                                                                "ethernet": True})), None,
           "GRE transparent Ethernet bridging (0x6558, NVGRE-style key)"),
    Sample("erspan-ii", _V4, (_ETH, _IP4, Layer("gre", {"seq": True}),
                              Layer("erspan2", {"session": 3})), None,
           "ERSPAN type II, session 3 (GRE 0x88BE with sequence numbers)"),
    Sample("erspan-iii", _V4, (_ETH, _IP4, Layer("gre", {"seq": True}),
                               Layer("erspan3", {"session": 4})), None,
           "ERSPAN type III, session 4, without the optional subheader (GRE 0x22EB)"),
    Sample("erspan-iii-subheader", _V4, (_ETH, _IP4, Layer("gre", {"seq": True}),
                                         Layer("erspan3", {"session": 5,
                                                           "subheader": _PLATFORM})), None,
           "ERSPAN type III, session 5, with the platform-specific subheader"),
    Sample("ipip", _V4, (_ETH, _IP4), None, "IPv4 in IPv4 (protocol 4)"),
    Sample("sit", _V6, (_ETH, _IP4), None, "IPv6 in IPv4 (protocol 41, 6in4/SIT)"),
    Sample("ip4in6", _V4, (_ETH, _IP6), None, "IPv4 in IPv6 (next header 4)"),
    Sample("ip6in6", _V6, (_ETH, _IP6), None, "IPv6 in IPv6 (next header 41)"),
    Sample("mpls", _V4, (_ETH, Layer("mpls", {"labels": (16, 17)})), None,
           "MPLS label stack 16/17 carrying IPv4"),
    Sample("mpls-gre", _V4, (_ETH, _IP4, Layer("gre", {}), Layer("mpls", {"labels": (18,)})),
           None, "MPLS inside GRE (0x8847) carrying IPv4"),
    Sample("vlan-mpls-gre-ipv6", _V6, (_ETH, Layer("vlan", {"vid": 100}),
                                       Layer("mpls", {"labels": (16,)}), _IP4,
                                       Layer("gre", {"key": 9})), None,
           "VLAN 100, MPLS 16, IPv4, GRE key 9, carrying IPv6"),
    Sample("vxlan-outer-fragments", _V4, _VXLAN, Fragmenting("outer", 1500),
           "VXLAN whose outer IPv4 packets are fragmented at 1500 bytes"),
    Sample("vxlan-inner-fragments", _V4, _VXLAN, Fragmenting("inner", 1400),
           "VXLAN carrying inner IPv4 fragments of at most 1400 bytes"),
    Sample("gre-ipv6-outer-fragments", _V4, (_ETH, _IP6, Layer("gre", {"key": 11})),
           Fragmenting("outer", 1280), "GRE over IPv6, outer packets fragmented at 1280 bytes"),
    Sample("ipv4-fragments", _V4, (_ETH,), Fragmenting("inner", 1280),
           "plain Ethernet, IPv4 packets fragmented at 1280 bytes"),
    Sample("ipv6-fragments", _V6, (_ETH,), Fragmenting("inner", 1280),
           "plain Ethernet, IPv6 packets fragmented at 1280 bytes (Fragment header)"),
    Sample("resume-collapsed-erspan-ii", _RESUME, (_ETH, _IP4, Layer("gre", {"seq": True}),
                                                    Layer("erspan2", {"session": 9})), None,
           "the resume-collapsed conversation mirrored by ERSPAN II"),
    Sample("resume-collapsed-vxlan-fragments", _RESUME, (_ETH, _IP6) + _VXLAN[2:],
           Fragmenting("inner", 200),
           "the resume-collapsed conversation in VXLAN over IPv6, inner packets fragmented at "
           "200 bytes"),
    Sample("vxlan-kernel", _V4, (), None,
           "VXLAN sent by the Linux kernel (two namespaces, a veth pair, vxlan devices)"),
    Sample("vxlan-kernel-fragments", _V4, (), None,
           "VXLAN sent by the Linux kernel over a 1400-byte veth: the kernel fragments the "
           "outer IPv4 packets until path MTU discovery lowers the MSS"),
)


SCENARIOS: dict[str, Callable[[], list[Script]]] = {
    "replication": lambda: [replication()],
    "replication-ipv6": lambda: [replication(client=Endpoint("fd00::2", 50123),
                                             server=Endpoint("fd00::1", 11209))],
    "resume-collapsed": resume_collapsed,
}


def capture_inner(path, scenario: str, mode: str = "loopback", mtu: int = 1500) -> None:
    """Write ``path`` (pcap): ``scenario``'s conversations replayed over the kernel's TCP
    (:mod:`.realnet`), keeping the scripts' addresses. ``loopback``: both ends on one
    namespace's loopback, captured there; ``vxlan``: the client's and the server's
    namespace joined by VXLAN devices (VNI 42, UDP 4789, MTU 1500) over a veth pair of MTU
    ``mtu`` without segmentation offload, captured on the client's veth: VXLAN as Linux
    sends it, its outer IPv4 packets fragmented where they exceed the veth."""
    scripts = SCENARIOS[scenario]()
    sides = {e.ip: side for s in scripts
             for side, e in (("client", s.conv.client), ("server", s.conv.server))}
    if mode == "loopback":
        in_namespaces(path, scripts, {ip: ("server", "lo") for ip in sides},
                      spaces_kw={"ipv6": any(":" in ip for ip in sides)}, capture_side="server",
                      interfaces=lambda spaces: ["lo"], fmt="pcap")
    else:
        in_namespaces(path, scripts, {ip: (side, "link") for ip, side in sides.items()},
                      spaces_kw={"vxlan": True, "mtu": mtu, "vxlan_mtu": 1500, "gso": False},
                      capture_side="client", interfaces=lambda spaces: [spaces.veth["client"]],
                      fmt="pcap", bpf="ip proto 17")      # VXLAN and its fragments


def wrap_file(source: str, layers, fragmenting: Optional[Fragmenting] = None) -> Wrapped:
    with open_capture(source) as reader:
        return encapsulate(reader, list(layers), fragmenting)


def build(directory, capture: bool = False) -> list[Path]:
    """Write every sample of :data:`SAMPLES` and the README into ``directory`` (from the real
    captures there; ``capture``: capture those again first). Returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    if capture:
        for name, (scenario, mode, mtu) in CAPTURES.items():
            capture_inner(directory / name, scenario, mode, mtu or 1500)
            written.append(directory / name)
    for s in SAMPLES:
        if s.layers:
            path = directory / f"{s.name}.pcap"
            write_wrapped(path, wrap_file(str(directory / s.source), s.layers, s.fragmenting))
            written.append(path)
    (directory / "README.md").write_text(readme(), encoding="utf-8")
    return written + [directory / "README.md"]


def _layers_text(s: Sample) -> str:
    if not s.layers:
        return "Ethernet / IPv4 / UDP / VXLAN as the kernel sent it"
    names = {"eth": "Ethernet", "vlan": "802.1Q", "mpls": "MPLS", "ipv4": "IPv4",
             "ipv6": "IPv6", "udp": "UDP", "vxlan": "VXLAN", "geneve": "Geneve", "gre": "GRE",
             "erspan2": "ERSPAN II", "erspan3": "ERSPAN III"}
    text = " / ".join(names[layer.kind] for layer in s.layers)
    if s.fragmenting:
        text += f"; {s.fragmenting.which} IP fragments ≤ {s.fragmenting.mtu} bytes"
    return text


def readme() -> str:
    rows = "".join(
        f"| `{s.name}.pcap` | {s.what} | {_layers_text(s)} | `{s.source}` | "
        f"{' '.join(s.options) or '-'} | {' '.join(s.tshark) or '-'} |\n" for s in SAMPLES)
    captures = "".join(f"| `{name}` | `{scenario}` | {mode}"
                       f"{f', veth MTU {mtu}' if mode == 'vxlan' else ''} |\n"
                       for name, (scenario, mode, mtu) in CAPTURES.items())
    return f"""# Encapsulated samples

DCP conversations captured inside overlays and mirrors: every sample decodes, through its
tunnels and fragments, to the same messages as its real inner capture, and `dcpdissect
analyze` reports the same findings (the `resume-collapsed-*` samples keep their one
`resume-collapsed-snapshot` error; the others, a clean replication, have none).
`tests/test_encap_samples.py` checks each one against tshark and the inner capture.

## Real captures

The kernel's own TCP, captured with dumpcap: the sample builder's scripts replayed over
real sockets by the real-capture harness (`dcpdissect/samples/replay.py`, `realnet.py`),
both ends on one network namespace's loopback (`loopback`), or across two namespaces
joined by VXLAN devices over a veth pair without segmentation offload (`vxlan`).

| file | scenario | mode |
|---|---|---|
{captures}
## Samples

Built by `dcpdissect/samples/encapsulate.py` around every packet of a real capture (outer
headers with their lengths and checksums; fragments cut at the MTU shown), or captured as
the kernel sent them. Options: what `dcpdissect` and `tshark` need besides
`-d tcp.port==11209,couchbase` / `-d tcp.port==11210,couchbase`.

| file | what | layers (outermost first) | inner capture (or the same conversation's) | dcpdissect | tshark |
|---|---|---|---|---|---|
{rows}
## Rebuilding

```
python -m dcpdissect.samples.encapsulate samples/encap              # wrap the real captures again
sudo python -m dcpdissect.samples.encapsulate samples/encap --capture   # capture them first
```

Wrapping is deterministic: the first command rewrites the samples byte for byte. A new
capture has new timestamps and its own acknowledgement pattern.
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="where the samples are (samples/encap)")
    p.add_argument("--capture", action="store_true",
                   help="capture the real conversations again first (root, dumpcap, ip netns)")
    args = p.parse_args(argv)
    why = args.capture and missing(namespaces=True)
    if why:
        print(f"cannot capture here: {why}", file=sys.stderr)
        return 2
    for path in build(args.dir, args.capture):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
