"""What ``codec.decode`` found wrong with a frame: a code to match on, a text to show.

Consumers compare ``problem.code`` with these constants; ``problem.text`` is for people and
may be reworded freely.
"""

from __future__ import annotations

from typing import NamedTuple

UNKNOWN_MAGIC = "unknown_magic"        # the magic is neither a request nor a response magic
TRUNCATED = "truncated"                # the buffer holds less than 24 + bodylen bytes
HEADER_OVERRUN = "header_overrun"      # framing extras + extras + key exceed the body length
FRAME_INFO = "frame_info"              # the framing extras are not a valid frame-info encoding
EXTRAS_SIZE = "extras_size"            # the extras length matches no extras layout of the opcode
VALUE_SIZE = "value_size"              # the value length matches no value layout of the opcode

CODES = (UNKNOWN_MAGIC, TRUNCATED, HEADER_OVERRUN, FRAME_INFO, EXTRAS_SIZE, VALUE_SIZE)


class Problem(NamedTuple):
    code: str
    text: str

    def __str__(self) -> str:
        return self.text


def has(problems, code: str) -> bool:
    """Whether any of ``problems`` has ``code``."""
    return any(p.code == code for p in problems)
