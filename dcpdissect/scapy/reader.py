"""Scapy packets from captures through dcpdissect's own reader and TCP reassembler."""

from __future__ import annotations

import os
import warnings
from typing import Iterator

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from scapy.plist import PacketList
from scapy.utils import EDecimal

from ..analysis.collections import CollectionsView
from ..codec import decode
from ..codec.header import frame_size
from ..protocol import HEADER_SIZE
from ..reassembly.pdus import (CaptureError, ConnectionClosed, ConnectionOpened, Options, Pdu,
                               Summary, iter_events)
from .layers import MCBP

_NS = EDecimal(1_000_000_000)
PROVENANCE = ("frames", "frame", "conn", "offset", "missing")
NO_MAC = "00:00:00:00:00:00"     # the reassembled capture keeps no link-layer addresses
ISN = 0                          # each direction's first byte has sequence number ISN + 1


class CaptureWarning(UserWarning):
    """The capture has a fault (truncated, corrupt): the packets before it were kept."""


def read(path: str, **options) -> PacketList:
    """Every complete PDU of a capture as one ``Ether/IP/TCP/MCBP`` packet (see
    :func:`iread`), in a ``PacketList`` that ``wrpcap`` writes back as a valid capture."""
    return PacketList(list(iread(path, **options)), name=os.path.basename(path))


def iread(path: str, **options) -> Iterator[Packet]:
    """Yield every complete PDU of a capture, in the order the reassembler produces them,
    without loading the file: ``Ether/IP(v6)/TCP/MCBP`` with the connection's addresses and
    ports and TCP sequence numbers that place each PDU at its stream offset, so that
    ``wrpcap`` writes a capture that reassembles the same. ``options`` are those of
    ``dcpdissect.reassembly.pdus.Options`` (``ports``, ``any_port``, ``vxlan_ports``,
    ``max_connections``).

    Each packet carries ``frames`` (every frame contributing bytes), ``frame`` (the
    completing frame), ``conn``, ``direction`` (0 client->server, 1 server->client),
    ``offset`` (stream offset) and ``time``. On a connection whose HELLO enabled
    Collections, document keys are read as ``collection_id`` and the logical ``key``, and
    the ``MCBP`` layer's ``collection_name`` holds the collection's name when a system event
    gave it. A fault in the capture after its first frame (a truncated or corrupt file)
    ends the iteration with a :class:`CaptureWarning` naming the file and frame; a file
    that is not a capture at all raises ``CaptureError``.
    """
    summary = Summary()
    view = CollectionsView()
    opened: dict[int, ConnectionOpened] = {}     # open connections only
    acked: dict[tuple[int, int], int] = {}       # (conn, direction) -> next stream offset
    try:
        for ev in iter_events(path, Options(**options) if options else None, summary):
            kind = type(ev)
            if kind is ConnectionOpened:
                opened[ev.conn] = ev
            elif kind is ConnectionClosed:
                opened.pop(ev.conn, None)
                acked.pop((ev.conn, 0), None)
                acked.pop((ev.conn, 1), None)
            if kind is not Pdu:
                view.feed(ev)
                continue
            doc_key = view.feed(ev, decode(ev.data))
            pkt = _on_tcp(ev, MCBP(ev.data, collections=view.aware(ev.conn)),
                          opened.get(ev.conn), acked)
            if doc_key is not None:
                pkt[MCBP].collection_name = doc_key.name
            yield pkt
    except CaptureError as exc:
        if not summary.frames:
            raise
        warnings.warn(CaptureWarning(f"{exc}; the {summary.pdus} PDUs before it were kept"),
                      stacklevel=2)


def pdu_packet(pdu: Pdu, collections: bool | None = None) -> MCBP:
    """One reassembled PDU as an ``MCBP`` packet carrying its provenance (``collections``:
    the connection negotiated Collections, so document keys start with a collection id)."""
    return _provenance(MCBP(pdu.data, collections=collections), pdu)


def _provenance(pkt: Packet, pdu: Pdu) -> Packet:
    pkt.time = EDecimal(pdu.ts_ns) / _NS
    pkt.direction = pdu.direction
    # Plain attributes, set directly so that they never reach a same-named field.
    for name in PROVENANCE:
        object.__setattr__(pkt, name, getattr(pdu, name))
    return pkt


def _on_tcp(pdu: Pdu, mcbp: MCBP, opened: ConnectionOpened | None, acked: dict) -> Packet:
    """``mcbp`` inside Ether/IP/TCP of its connection. Where the capture showed the
    connection's start, the first PDU of each direction rides on its SYN (client) or SYN-ACK
    (server), so that a written capture shows the start too."""
    if opened is None:
        client, server, start = ("0.0.0.0", 0), ("0.0.0.0", 11210), False
    else:
        client, server, start = opened.client, opened.server, not opened.mid_stream
    src, dst = (client, server) if pdu.direction == 0 else (server, client)
    ip = IPv6 if ":" in src[0] else IP
    mine, other = (pdu.conn, pdu.direction), (pdu.conn, 1 - pdu.direction)
    first = mine not in acked
    acked[mine] = max(acked.get(mine, 0), pdu.offset + len(pdu.data) + pdu.missing)
    ack = (ISN + 1 + acked.get(other, 0)) % 2**32
    if first and start and pdu.offset == 0:
        syn_ack = pdu.direction == 1
        tcp = TCP(sport=src[1], dport=dst[1], flags="SA" if syn_ack else "S", seq=ISN,
                  ack=ack if syn_ack else 0)
    else:
        tcp = TCP(sport=src[1], dport=dst[1], flags="PA", seq=(ISN + 1 + pdu.offset) % 2**32,
                  ack=ack)
    pkt = Ether(src=NO_MAC, dst=NO_MAC) / ip(src=src[0], dst=dst[0]) / tcp / mcbp
    if pdu.missing:         # a message the capture cut: written cut, as a snaplen would
        wire = len(pkt) + pdu.missing
        pkt[ip].setfieldval("len" if ip is IP else "plen",
                            wire - 14 - (0 if ip is IP else 40))
        pkt.wirelen = wire
    return _provenance(pkt, pdu)


def split_pdus(data: bytes) -> list[MCBP]:
    """Cut an in-sync byte stream (e.g. one TCP payload) into ``MCBP`` packets by the
    header's body length; a trailing partial PDU comes out as a truncated packet."""
    out, pos, end = [], 0, len(data)
    while pos < end:
        if end - pos >= HEADER_SIZE:
            total = frame_size(data, pos)
        else:
            total = end - pos
        out.append(MCBP(data[pos:pos + total]))
        pos += total
    return out
