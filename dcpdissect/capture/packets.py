"""Decode a captured frame down to its TCP segment.

``decode_packet(linktype, data)`` is a pure function: it returns a
:class:`Segment` for TCP over IPv4/IPv6 and None for anything else,
and never raises.
"""

from __future__ import annotations

import struct
from socket import AF_INET, AF_INET6, inet_ntop
from struct import Struct
from typing import NamedTuple, Optional

__all__ = ["Segment", "decode_packet", "SUPPORTED_LINKTYPES"]

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

_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_VLAN_TYPES = frozenset((0x8100, 0x88A8, 0x9100))
_AF_INET6_VALUES = frozenset((10, 24, 28, 30))
_RAW_LINKTYPES = frozenset((12, 14, 101, 228, 229))
_IPV6_EXT_8 = frozenset((0, 43, 60))        # length field counts 8-byte units, excluding the first 8

_U16 = Struct("!H")
_IP4 = Struct("!BxHxxHxB")                  # ver/ihl, total length, flags/frag offset, protocol
_IP6 = Struct("!HB")                        # payload length, next header (at +4)
_TCP = Struct("!HHIIBB")                    # sport, dport, seq, ack, data offset, flags
_u16 = _U16.unpack_from
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


def _tcp(data: bytes, t: int, end: int, missing: int, fam: int,
         src: bytes, dst: bytes) -> Optional[Segment]:
    if t + 20 > end:
        return None
    sport, dport, seq, ack, doff, flags = _tcp_hdr(data, t)
    hl = (doff >> 4) << 2
    if hl < 20 or t + hl > end:
        return None
    return _new_tuple(Segment, (inet_ntop(fam, src), inet_ntop(fam, dst), sport, dport,
                                seq, ack, flags, data[t + hl:end], missing))


def _ipv4(data: bytes, off: int) -> Optional[Segment]:
    vihl, total, frag, proto = _ip4(data, off)
    if vihl >> 4 != 4 or proto != 6 or frag & 0x3FFF:
        return None
    ihl = (vihl & 0x0F) << 2
    avail = len(data) - off
    if ihl < 20 or avail < ihl:
        return None
    if total == 0:              # segmentation offload: length left unset
        total = avail
    elif total < ihl:
        return None
    if total > avail:
        missing = total - avail
        end = len(data)
    else:
        missing = 0
        end = off + total
    return _tcp(data, off + ihl, end, missing, AF_INET,
                data[off + 12:off + 16], data[off + 16:off + 20])


def _ipv6(data: bytes, off: int) -> Optional[Segment]:
    n = len(data)
    p = off + 40
    if p > n or data[off] >> 4 != 6:
        return None
    plen, nh = _ip6(data, off + 4)
    avail = n - p
    if plen == 0:               # jumbogram or segmentation offload
        plen = avail
    if plen > avail:
        missing = plen - avail
        end = n
    else:
        missing = 0
        end = p + plen
    while nh != 6:
        if nh in _IPV6_EXT_8:
            if p + 8 > end:
                return None
            nh, hl = data[p], (data[p + 1] + 1) << 3
        elif nh == 51:          # AH: length in 4-byte units, minus 2
            if p + 8 > end:
                return None
            nh, hl = data[p], (data[p + 1] + 2) << 2
        elif nh == 44:          # fragment: only an atomic fragment carries a whole segment
            if p + 8 > end or _u16(data, p + 2)[0] & 0xFFF9:
                return None
            nh, hl = data[p], 8
        else:
            return None
        p += hl
    return _tcp(data, p, end, missing, AF_INET6, data[off + 8:off + 24], data[off + 24:off + 40])


def _ether(data: bytes, etype: int, off: int) -> Optional[Segment]:
    while etype in _VLAN_TYPES:
        etype = _u16(data, off + 2)[0]
        off += 4
    if etype == _ETH_IPV4:
        return _ipv4(data, off)
    if etype == _ETH_IPV6:
        return _ipv6(data, off)
    return None


def _ip_any(data: bytes, off: int) -> Optional[Segment]:
    v = data[off] >> 4
    if v == 4:
        return _ipv4(data, off)
    if v == 6:
        return _ipv6(data, off)
    return None


def _bsd_family(data: bytes) -> Optional[Segment]:
    fam = data[:4]
    if len(fam) < 4:
        return None
    le = int.from_bytes(fam, "little")
    be = int.from_bytes(fam, "big")
    if le == 2 or be == 2:
        return _ipv4(data, 4)
    if le in _AF_INET6_VALUES or be in _AF_INET6_VALUES:
        return _ipv6(data, 4)
    return None


def decode_packet(linktype: int, data: bytes) -> Optional[Segment]:
    """TCP segment carried by a frame of the given LINKTYPE_, or None."""
    try:
        if type(data) is not bytes:
            data = bytes(data)
        if linktype == 1:
            if len(data) < 14:
                return None
            return _ether(data, (data[12] << 8) | data[13], 14)
        if linktype == 113:
            if len(data) < 16:
                return None
            return _ether(data, (data[14] << 8) | data[15], 16)
        if linktype == 276:
            if len(data) < 20:
                return None
            return _ether(data, (data[0] << 8) | data[1], 20)
        if linktype in _RAW_LINKTYPES:
            return _ip_any(data, 0)
        if linktype == 0 or linktype == 108:
            return _bsd_family(data)
        return None
    except (IndexError, ValueError, TypeError, OverflowError, struct.error):
        return None
