"""Scapy packets from captures through dcpdissect's own reader and TCP reassembler."""

from __future__ import annotations

import os

from scapy.plist import PacketList
from scapy.utils import EDecimal

from ..codec.header import frame_size
from ..protocol import HEADER_SIZE
from ..reassembly.pdus import Options, Pdu, iter_events
from .layers import MCBP

_NS = EDecimal(1_000_000_000)


def read(path: str, **options) -> PacketList:
    """Every complete PDU of a capture as an ``MCBP`` packet, in the order the reassembler
    yields them. ``options`` are those of ``dcpdissect.reassembly.pdus.Options``
    (``ports``, ``any_port``, ``max_connections``). Each packet carries ``frames`` (every
    frame contributing bytes), ``frame`` (the completing frame), ``conn``, ``direction``
    (0 client->server, 1 server->client), ``offset`` (stream offset) and ``time``.
    """
    opts = Options(**options) if options else None
    out = []
    for ev in iter_events(path, opts):
        if type(ev) is Pdu:
            out.append(pdu_packet(ev))
    return PacketList(out, name=os.path.basename(path))


def pdu_packet(pdu: Pdu) -> MCBP:
    """One reassembled PDU as an ``MCBP`` packet carrying its provenance."""
    pkt = MCBP(pdu.data)
    pkt.time = EDecimal(pdu.ts_ns) / _NS
    pkt.direction = pdu.direction
    # Plain attributes, set directly so that they never reach a same-named field.
    for name in ("frames", "frame", "conn", "offset"):
        object.__setattr__(pkt, name, getattr(pdu, name))
    return pkt


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
