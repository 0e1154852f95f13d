"""Scapy layer classes for MCBP / DCP, generated from ``dcpdissect.protocol``.

Importing this package binds ``MCBP`` to TCP ports 11210 and 11209 (either direction).
Use :func:`read` (a list) or :func:`iread` (one packet at a time) to get packets from real
captures (our own reassembler, which copes with loss, reordering, sequence wrap and
mid-stream starts); Scapy's ``TCPSession`` works for clean in-order captures only.
"""

from .layers import *
from .layers import __all__ as _layer_names
from .reader import CaptureWarning, iread, pdu_packet, read, split_pdus

__all__ = [*_layer_names, "read", "iread", "CaptureWarning", "pdu_packet", "split_pdus"]
