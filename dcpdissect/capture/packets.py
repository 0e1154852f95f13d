"""Decode a captured frame down to its TCP segment, through tunnels and IP fragments.

A :class:`Decoder` walks a frame of a given LINKTYPE_ through Ethernet (VLAN and QinQ
tags), Linux cooked headers, BSD loopback or raw IP, then IPv4/IPv6 and, at any nesting,
the tunnels of :mod:`.tunnels` (VXLAN, Geneve, GRE, ERSPAN, MPLS) and IP-in-IP (IPv4
protocol 4 and 41, IPv6 next header 4 and 41), down to a TCP segment. The segment keeps
its inner endpoints and says what it came through (:attr:`Segment.tunnel`, outermost
first). The inner IP length is the authority for what the capture did not keep
(:attr:`Segment.missing`), whatever cut the outer headers' packets.

IP fragments, outer or inner, are reassembled by the decoder's :class:`.fragments.Defragmenter`
(:meth:`Decoder.decode_frame`): the packet belongs to the frame of its last fragment and
lists the frames of all (:attr:`Segment.frames`). Without one, a fragment is only counted.

``decode_packet(linktype, data)`` is the pure form: the default VXLAN port, no
reassembly. Nothing here raises on bad input: it decodes to None.
"""

from __future__ import annotations

import struct
from socket import AF_INET, AF_INET6, inet_ntop
from struct import Struct
from typing import NamedTuple, Optional

from . import tunnels
from .fragments import Defragmenter

__all__ = ["Segment", "Decoder", "decode_packet", "SUPPORTED_LINKTYPES", "MAX_NESTING"]

SUPPORTED_LINKTYPES: dict[int, str] = {
    0: "NULL",
    1: "ETHERNET",
    12: "RAW",
    14: "RAW",
    101: "RAW",
    108: "LOOP",
    113: "LINUX_SLL",
    228: "IPV4",
    229: "IPV6",
    276: "LINUX_SLL2",
}
MAX_NESTING = 8             # tunnels (and reassembled packets) inside one another
MAX_ADDRESSES = 4096        # IP addresses whose text a decoder keeps

_ETH_IPV4 = tunnels.ETH_IPV4
_ETH_IPV6 = tunnels.ETH_IPV6
_VLAN_TYPES = frozenset((0x8100, 0x88A8, 0x9100))
_MPLS_TYPES = frozenset((tunnels.ETH_MPLS, tunnels.ETH_MPLS_MULTICAST))
_AF_INET6_VALUES = frozenset((10, 24, 28, 30))
_RAW_LINKTYPES = frozenset((12, 14, 101, 228, 229))
_IPV6_EXT_8 = frozenset((0, 43, 60))        # length field counts 8-byte units, excluding the first 8
_IN_IP = {(4, AF_INET): "IPv4-in-IPv4", (4, AF_INET6): "IPv4-in-IPv6",
          (41, AF_INET): "IPv6-in-IPv4", (41, AF_INET6): "IPv6-in-IPv6"}

_U16 = Struct("!H")
_IP4 = Struct("!BxHxxHxB")                  # ver/ihl, total length, flags/frag offset, protocol
_IP6 = Struct("!HB")                        # payload length, next header (at +4)
_TCP = Struct("!HHIIBB")                    # sport, dport, seq, ack, data offset, flags
_u16 = _U16.unpack_from
_u32 = Struct("!I").unpack_from
_ip4 = _IP4.unpack_from
_ip6 = _IP6.unpack_from
_tcp_hdr = _TCP.unpack_from
_new_tuple = tuple.__new__


class Segment(NamedTuple):
    """A TCP segment with its IP endpoints."""

    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes
    missing: int      # payload bytes on the wire that the capture did not keep (snaplen); 0: whole
    tunnel: str = ""  # what it came through, outermost first ("VXLAN vni 42 10.9.0.1→10.9.0.2")
    frames: tuple = ()    # reassembled from IP fragments: the frames of all of them


class Decoder:
    """Frames to TCP segments. ``vxlan_ports``: UDP ports carrying VXLAN besides 4789;
    ``defragmenter``: reassembles IP fragments (without one they are counted in
    :attr:`fragments` and decode to None)."""

    __slots__ = ("vxlan_ports", "defragmenter", "fragments", "last_fragment", "vxlan_like",
                 "depth", "frame", "ts_ns", "within", "log", "addresses")

    def __init__(self, vxlan_ports=(), defragmenter: Optional[Defragmenter] = None):
        self.vxlan_ports = frozenset((tunnels.VXLAN_PORT, *vxlan_ports))
        self.defragmenter = defragmenter
        self.fragments = 0          # fragments met without a defragmenter
        self.last_fragment = b""    # the captured bytes the last of them carries
        self.vxlan_like: dict = {}  # UDP destination port -> datagrams that look like VXLAN
        #                             on a port not read as VXLAN (at most 16 ports)
        self.depth = 0              # tunnels entered by the frame being decoded
        self.frame = 0              # the frame being decoded, for the defragmenter
        self.ts_ns = 0
        self.within = ()            # the frames of the reassembled packet being decoded
        self.log: Optional[list] = None     # a list: (frame, offset, bytes) of each fragment
        #                                     fed to the defragmenter from a frame of its own
        self.addresses: dict = {}   # packed IP address -> its text (inet_ntop is slow)

    def decode_frame(self, linktype: int, data: bytes, frame: int, ts_ns: int) -> Optional[Segment]:
        """:meth:`decode` of frame number ``frame`` captured at ``ts_ns``."""
        self.frame = frame
        self.ts_ns = ts_ns
        return self.decode(linktype, data)

    def decode(self, linktype: int, data: bytes) -> Optional[Segment]:
        """TCP segment carried by a frame of the given LINKTYPE_, or None."""
        try:
            if type(data) is not bytes:
                data = bytes(data)
            if linktype == 1:
                if len(data) < 14:
                    return None
                return _ether(data, (data[12] << 8) | data[13], 14, len(data), self)
            if linktype == 113:
                if len(data) < 16:
                    return None
                return _ether(data, (data[14] << 8) | data[15], 16, len(data), self)
            if linktype == 276:
                if len(data) < 20:
                    return None
                return _ether(data, (data[0] << 8) | data[1], 20, len(data), self)
            if linktype in _RAW_LINKTYPES:
                return _ip_any(data, 0, self)
            if linktype == 0 or linktype == 108:
                return _bsd_family(data, self)
            return None
        except (IndexError, ValueError, TypeError, OverflowError, struct.error):
            self.depth = 0
            self.within = ()
            return None

    def fragment(self, key: tuple, offset: int, more: int, chunk: bytes, wire: int, proto: int,
                 fam: int, src: bytes, dst: bytes) -> Optional[Segment]:
        """An IP fragment: the segment of the packet it completes, if it does."""
        if self.defragmenter is None:
            self.fragments += 1
            self.last_fragment = chunk
            return None
        if self.log is not None and not self.within:
            self.log.append((self.frame, offset, chunk))
        got = self.defragmenter.add(key, offset, bool(more), chunk, wire, proto,
                                    self.within or (self.frame,), self.ts_ns)
        if got is None or self.depth >= MAX_NESTING:
            return None
        self.depth += 1
        outer, self.within = self.within, got.frames
        data = got.data
        if fam == AF_INET:
            seg = _carried(data, 0, len(data), got.missing, got.proto, fam, src, dst, self)
        else:
            seg = _ip6_chain(data, 0, len(data), got.missing, got.proto, src, dst, self)
        self.within = outer
        self.depth -= 1
        if seg is None:
            return None
        frames = got.frames
        if seg.frames:                  # fragments inside fragments
            frames = tuple(sorted(set(frames).union(seg.frames)))
        return seg._replace(frames=frames)


def _tcp(data: bytes, t: int, end: int, missing: int, fam: int,
         src: bytes, dst: bytes, dec: Decoder) -> Optional[Segment]:
    if t + 20 > end:
        return None
    sport, dport, seq, ack, doff, flags = _tcp_hdr(data, t)
    hl = (doff >> 4) << 2
    if hl < 20 or t + hl > end:
        return None
    return _new_tuple(Segment, (_text(fam, src, dec), _text(fam, dst, dec), sport, dport,
                                seq, ack, flags, data[t + hl:end], missing, "", ()))


def _text(fam: int, packed: bytes, dec: Decoder) -> str:
    """``inet_ntop(fam, packed)``, remembered by the decoder."""
    known = dec.addresses
    text = known.get(packed)
    if text is None:
        if len(known) >= MAX_ADDRESSES:
            known.clear()
        text = known[packed] = inet_ntop(fam, packed)
    return text


def _ipv4(data: bytes, off: int, end: int, dec: Decoder) -> Optional[Segment]:
    vihl, total, frag, proto = _ip4(data, off)
    if vihl >> 4 != 4:
        return None
    ihl = (vihl & 0x0F) << 2
    avail = end - off
    if ihl < 20 or avail < ihl:
        return None
    if total == 0:              # segmentation offload: length left unset
        total = avail
    elif total < ihl:
        return None
    if total > avail:
        missing = total - avail
    else:
        missing = 0
        end = off + total
    if proto == 6 and not frag & 0x3FFF:
        return _tcp(data, off + ihl, end, missing, AF_INET,
                    data[off + 12:off + 16], data[off + 16:off + 20], dec)
    src, dst, p = data[off + 12:off + 16], data[off + 16:off + 20], off + ihl
    if frag & 0x3FFF:
        return dec.fragment((4, src, dst, proto, _u16(data, off + 4)[0]), (frag & 0x1FFF) << 3,
                            frag & 0x2000, data[p:end], end - p + missing, proto, AF_INET,
                            src, dst)
    return _carried(data, p, end, missing, proto, AF_INET, src, dst, dec)


def _ipv6(data: bytes, off: int, end: int, dec: Decoder) -> Optional[Segment]:
    p = off + 40
    if p > end or data[off] >> 4 != 6:
        return None
    plen, nh = _ip6(data, off + 4)
    avail = end - p
    if plen == 0:               # jumbogram or segmentation offload
        plen = avail
    if plen > avail:
        missing = plen - avail
    else:
        missing = 0
        end = p + plen
    if nh == 6:
        return _tcp(data, p, end, missing, AF_INET6, data[off + 8:off + 24], data[off + 24:off + 40],
                    dec)
    return _ip6_chain(data, p, end, missing, nh, data[off + 8:off + 24], data[off + 24:off + 40],
                      dec)


def _ip6_chain(data: bytes, p: int, end: int, missing: int, nh: int, src: bytes, dst: bytes,
               dec: Decoder) -> Optional[Segment]:
    """IPv6 extension headers from ``p`` on, then what they carry."""
    while True:
        if nh in _IPV6_EXT_8:
            if p + 8 > end:
                return None
            nh, hl = data[p], (data[p + 1] + 1) << 3
        elif nh == 51:          # AH: length in 4-byte units, minus 2
            if p + 8 > end:
                return None
            nh, hl = data[p], (data[p + 1] + 2) << 2
        elif nh == 44:          # fragment header
            if p + 8 > end:
                return None
            frag = _u16(data, p + 2)[0]
            if frag & 0xFFF9:   # not an atomic fragment: offset or "more fragments"
                return dec.fragment((6, src, dst, _u32(data, p + 4)[0]), frag & 0xFFF8,
                                    frag & 1, data[p + 8:end], end - p - 8 + missing, data[p],
                                    AF_INET6, src, dst)
            nh, hl = data[p], 8
        else:
            return _carried(data, p, end, missing, nh, AF_INET6, src, dst, dec)
        p += hl


def _carried(data: bytes, p: int, end: int, missing: int, proto: int, fam: int, src: bytes,
             dst: bytes, dec: Decoder) -> Optional[Segment]:
    """The segment in an IP payload of protocol ``proto``: TCP, or a tunnel's inner packet."""
    if proto == 6:
        return _tcp(data, p, end, missing, fam, src, dst, dec)
    if proto == 17:
        inner = tunnels.udp(data, p, end, dec.vxlan_ports)
        if inner is None and tunnels.looks_like_vxlan(data, p, end):
            port, seen = _u16(data, p + 2)[0], dec.vxlan_like
            if port in seen or len(seen) < 16:
                seen[port] = seen.get(port, 0) + 1
    elif proto == 47:
        inner = tunnels.gre(data, p, end)
    elif proto == 4:
        inner = (_ETH_IPV4, p, end, _IN_IP[4, fam])
    elif proto == 41:
        inner = (_ETH_IPV6, p, end, _IN_IP[41, fam])
    elif proto == 137:
        inner = (tunnels.ETH_MPLS, p, end, "MPLS-in-IP")
    else:
        return None
    if inner is None:
        return None
    return _through(data, inner, dec, f" {inet_ntop(fam, src)}→{inet_ntop(fam, dst)}")


def _through(data: bytes, inner: tuple, dec: Decoder, ends: str = "") -> Optional[Segment]:
    """The segment inside a tunnel (``inner`` from :mod:`.tunnels`), which it names."""
    if dec.depth >= MAX_NESTING:
        return None
    etype, start, end, label = inner
    dec.depth += 1
    seg = _ether(data, etype, start, end, dec)
    dec.depth -= 1
    if seg is None:
        return None
    tunnel = label + ends
    return seg._replace(tunnel=f"{tunnel} / {seg.tunnel}" if seg.tunnel else tunnel)


def _ether(data: bytes, etype: int, off: int, end: int, dec: Decoder) -> Optional[Segment]:
    while etype in _VLAN_TYPES:
        if off + 4 > end:
            return None
        etype = _u16(data, off + 2)[0]
        off += 4
    if etype == _ETH_IPV4:
        return _ipv4(data, off, end, dec)
    if etype == _ETH_IPV6:
        return _ipv6(data, off, end, dec)
    if etype in _MPLS_TYPES:
        inner = tunnels.mpls(data, off, end)
        return None if inner is None else _through(data, inner, dec)
    if etype == tunnels.ETH_BRIDGED:        # an Ethernet frame: its own header first
        if off + 14 > end:
            return None
        return _ether(data, _u16(data, off + 12)[0], off + 14, end, dec)
    return None


def _ip_any(data: bytes, off: int, dec: Decoder) -> Optional[Segment]:
    v = data[off] >> 4
    if v == 4:
        return _ipv4(data, off, len(data), dec)
    if v == 6:
        return _ipv6(data, off, len(data), dec)
    return None


def _bsd_family(data: bytes, dec: Decoder) -> Optional[Segment]:
    fam = data[:4]
    if len(fam) < 4:
        return None
    le = int.from_bytes(fam, "little")
    be = int.from_bytes(fam, "big")
    if le == 2 or be == 2:
        return _ipv4(data, 4, len(data), dec)
    if le in _AF_INET6_VALUES or be in _AF_INET6_VALUES:
        return _ipv6(data, 4, len(data), dec)
    return None


decode_packet = Decoder().decode
