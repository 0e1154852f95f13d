"""The declarative protocol tables: the single source of truth for every renderer."""

from .constants import *  # noqa: F401,F403
from .model import Field, FlagSet, Layout, Opcode, Presence, Shape, ValueNames  # noqa: F401
from .opcodes import DCP_OPCODES, OTHER_OPCODE_NAMES  # noqa: F401

OPCODES: dict[int, Opcode] = {op.code: op for op in DCP_OPCODES}
OPCODE_NAMES: dict[int, str] = {**OTHER_OPCODE_NAMES, **{op.code: op.name for op in DCP_OPCODES}}


def opcode_name(magic: int, code: int) -> str:
    """Name of an opcode as the magic interprets it (server magics use their own table)."""
    if magic in SERVER_MAGICS:  # noqa: F405
        return SERVER_OPCODES.values.get(code, f"unknown:{code:#04x}")  # noqa: F405
    return OPCODE_NAMES.get(code, f"unknown:{code:#04x}")


def is_known_opcode(magic: int, code: int) -> bool:
    if magic in SERVER_MAGICS:  # noqa: F405
        return code in SERVER_OPCODES.values  # noqa: F405
    return code in OPCODE_NAMES
