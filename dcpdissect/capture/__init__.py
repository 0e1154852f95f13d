"""Capture file reading and link/IP/TCP decoding."""

from ..kernel import load

load(__name__, "readers", "packets")      # compiled when built (dcpdissect.kernel)
from .packets import SUPPORTED_LINKTYPES, Segment, decode_packet
from .readers import CaptureError, CaptureReader, Frame, open_capture

__all__ = [
    "CaptureError",
    "CaptureReader",
    "Frame",
    "open_capture",
    "Segment",
    "decode_packet",
    "SUPPORTED_LINKTYPES",
]
