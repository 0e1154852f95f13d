"""Fast struct-based MCBP codec (no Scapy in this path)."""

from .decode import HEADER, Message, decode, parse_header  # noqa: F401
from .encode import encode  # noqa: F401
from .frameinfo import FrameInfo, FrameInfoError, encode_frame_info, parse_frame_infos  # noqa: F401
