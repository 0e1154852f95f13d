"""Tunnel and label headers between a captured frame and the packet it carries.

Each parser reads one header at offset ``p`` of ``data`` (``end``: where the carrying packet
ends) and returns ``(etype, start, end, label)``: what follows, as an EtherType
(:data:`ETH_IPV4`, :data:`ETH_IPV6`, :data:`ETH_BRIDGED` for a whole Ethernet frame,
:data:`ETH_MPLS`), where it starts and ends, and the header's description without the
carrying IP endpoints (``"VXLAN vni 42"``); or None when the header is cut short or is not
one these parsers understand. None of them raises on short input.

Supported: VXLAN (RFC 7348, on the given UDP ports), Geneve (RFC 8926, UDP 6081, options
skipped), GRE (RFC 2784/2890: checksum, key and sequence number fields; version 0 without
RFC 1701 routing), ERSPAN types I, II and III (GRE protocol 0x88BE or 0x22EB; type III with
or without its platform-specific subheader; told apart as Wireshark does: type I has no GRE
flags at all, otherwise the ERSPAN version field decides), and MPLS label stacks, whose
payload is told by its first nibble as Wireshark does: 4 IPv4, 6 IPv6, 0 an Ethernet
pseudowire behind its control word.
"""

from __future__ import annotations

from struct import Struct
from typing import Optional

__all__ = ["ETH_IPV4", "ETH_IPV6", "ETH_BRIDGED", "ETH_MPLS", "ETH_MPLS_MULTICAST",
           "VXLAN_PORT", "GENEVE_PORT", "udp", "looks_like_vxlan", "vxlan", "geneve", "gre", "erspan",
           "mpls"]

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
ETH_BRIDGED = 0x6558            # transparent Ethernet bridging: an Ethernet frame follows
ETH_MPLS = 0x8847
ETH_MPLS_MULTICAST = 0x8848
ERSPAN_I_II = 0x88BE
ERSPAN_III = 0x22EB
VXLAN_PORT = 4789
GENEVE_PORT = 6081

Inner = tuple               # (etype, start, end, label)

_U16 = Struct("!H").unpack_from
_U32 = Struct("!I").unpack_from
_UDP = Struct("!HHH").unpack_from            # source port, destination port, length

_FRAME_TYPES = frozenset((ETH_IPV4, ETH_IPV6, 0x0806, 0x8100))
_GRE_CSUM, _GRE_ROUTING, _GRE_KEY, _GRE_SEQ, _GRE_VERSION = 0x8000, 0x4000, 0x2000, 0x1000, 0x0007


def udp(data: bytes, p: int, end: int, vxlan_ports: frozenset) -> Optional[Inner]:
    """The tunnel a UDP datagram carries: VXLAN on ``vxlan_ports``, Geneve on 6081."""
    if p + 8 > end:
        return None
    sport, dport, length = _UDP(data, p)
    if length >= 8 and p + length < end:       # the UDP length bounds the payload
        end = p + length
    if dport in vxlan_ports or sport in vxlan_ports:
        return vxlan(data, p + 8, end)
    if dport == GENEVE_PORT or sport == GENEVE_PORT:
        return geneve(data, p + 8, end)
    return None


def looks_like_vxlan(data: bytes, p: int, end: int) -> bool:
    """A UDP datagram at ``p`` whose payload starts like VXLAN around an Ethernet frame
    (the I flag, reserved bytes zero, an IP, ARP or VLAN EtherType): worth a hint."""
    return (p + 30 <= end and data[p + 8] & 0x08 and data[p + 9:p + 11] == b"\0\0"
            and data[p + 15] == 0 and _U16(data, p + 28)[0] in _FRAME_TYPES)


def vxlan(data: bytes, p: int, end: int) -> Optional[Inner]:
    """VXLAN: flags (I: the VNI is valid), 24 reserved bits, the 24-bit VNI, 8 reserved
    bits; an Ethernet frame follows."""
    if p + 8 > end:
        return None
    vni = _U32(data, p + 4)[0] >> 8
    return ETH_BRIDGED, p + 8, end, f"VXLAN vni {vni}" if data[p] & 0x08 else "VXLAN"


def geneve(data: bytes, p: int, end: int) -> Optional[Inner]:
    """Geneve version 0: 2-bit version, 6-bit options length (4-byte words), flags, the
    protocol type of what follows, the 24-bit VNI; the options are skipped."""
    if p + 8 > end or data[p] >> 6:
        return None
    start = p + 8 + ((data[p] & 0x3F) << 2)
    if start > end:
        return None
    vni = _U32(data, p + 4)[0] >> 8
    return _U16(data, p + 2)[0], start, end, f"Geneve vni {vni}"


def gre(data: bytes, p: int, end: int) -> Optional[Inner]:
    """GRE version 0: the flags say which of checksum (and reserved), key and sequence
    number follow the 4-byte base header; ERSPAN is read behind it (:func:`erspan`)."""
    if p + 4 > end:
        return None
    flags = _U16(data, p)[0]
    if flags & (_GRE_ROUTING | _GRE_VERSION):
        return None
    proto = _U16(data, p + 2)[0]
    start = p + 4
    if flags & _GRE_CSUM:
        start += 4
    key = None
    if flags & _GRE_KEY:
        if start + 4 > end:
            return None
        key = _U32(data, start)[0]
        start += 4
    if flags & _GRE_SEQ:
        start += 4
    if start > end:
        return None
    if proto == ERSPAN_I_II or proto == ERSPAN_III:
        return erspan(data, start, end, flags)
    return proto, start, end, "GRE" if key is None else f"GRE key {key}"


def erspan(data: bytes, p: int, end: int, gre_flags: int) -> Optional[Inner]:
    """ERSPAN behind a GRE header with ``gre_flags``: type I (no GRE flags) has no header of
    its own; type II an 8-byte one (version 1), type III a 12-byte one (version 2) plus an
    8-byte platform-specific subheader when its O bit is set. An Ethernet frame follows."""
    if not gre_flags:
        return ETH_BRIDGED, p, end, "ERSPAN I"
    if p + 8 > end:
        return None
    version = data[p] >> 4
    session = _U16(data, p + 2)[0] & 0x03FF
    if version == 1:
        return ETH_BRIDGED, p + 8, end, f"ERSPAN II session {session}"
    if version != 2 or p + 12 > end:
        return None
    start = p + 20 if data[p + 11] & 0x01 else p + 12
    if start > end:
        return None
    return ETH_BRIDGED, start, end, f"ERSPAN III session {session}"


def mpls(data: bytes, p: int, end: int) -> Optional[Inner]:
    """An MPLS label stack down to its bottom entry; the payload by its first nibble."""
    labels = []
    while True:
        if p + 4 > end:
            return None
        entry = _U32(data, p)[0]
        labels.append(str(entry >> 12))
        p += 4
        if entry & 0x100:
            break
    if p >= end:
        return None
    label = "MPLS " + "/".join(labels)
    nibble = data[p] >> 4
    if nibble == 4:
        return ETH_IPV4, p, end, label
    if nibble == 6:
        return ETH_IPV6, p, end, label
    if nibble == 0:                     # Ethernet pseudowire: control word, then the frame
        return ETH_BRIDGED, p + 4, end, label
    return None
