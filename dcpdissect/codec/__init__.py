"""Fast struct-based MCBP codec (no Scapy in this path)."""

from ..kernel import load

load(__name__, "header", "decode")        # compiled when built (dcpdissect.kernel)
from .decode import Message, decode  # noqa: F401
from .encode import encode  # noqa: F401
from .frameinfo import FrameInfo, FrameInfoError, encode_frame_info, parse_frame_infos  # noqa: F401
from .header import Header, body_length, frame_size, peek  # noqa: F401
from .problems import Problem  # noqa: F401
