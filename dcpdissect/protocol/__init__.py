"""The declarative protocol tables: the single source of truth for every renderer."""

from .client_opcodes import CLIENT_OPCODE_NAMES
from .constants import *  # noqa: F401,F403
from .header import (  # noqa: F401
    CLASSIC_HEADER, CLASSIC_MAGICS, FLEXIBLE_HEADER, HEADER_FIELDS, HEADER_LAYOUTS, HeaderField,
    header_field, header_layout,
)
from .model import (  # noqa: F401
    ERROR, INFO, WARNING, Check, Field, FlagSet, Layout, Opcode, Presence, Sender, Shape, ValueNames,
)
from .opcodes import DCP_OPCODES  # noqa: F401

OPCODES: dict[int, Opcode] = {op.code: op for op in DCP_OPCODES}
OPCODE_NAMES: dict[int, str] = {**CLIENT_OPCODE_NAMES, **{op.code: op.name for op in DCP_OPCODES}}
assert all(CLIENT_OPCODE_NAMES[op.code] == op.name for op in DCP_OPCODES), "opcode names disagree"

# Roles of opcodes, derived from the table (never listed by hand elsewhere).
DOCUMENT_OPCODES = frozenset(op.code for op in DCP_OPCODES if op.document)
STREAM_OPCODES = frozenset(op.code for op in DCP_OPCODES if op.stream)
ITEM_OPCODES = frozenset(op.code for op in DCP_OPCODES if op.item)


def opcode_name(magic: int, code: int) -> str:
    """Name of an opcode as the magic interprets it (server magics use their own table)."""
    if magic in SERVER_MAGICS:  # noqa: F405
        return SERVER_OPCODES.values.get(code, f"unknown:{code:#04x}")  # noqa: F405
    return OPCODE_NAMES.get(code, f"unknown:{code:#04x}")


def is_known_opcode(magic: int, code: int) -> bool:
    if magic in SERVER_MAGICS:  # noqa: F405
        return code in SERVER_OPCODES.values  # noqa: F405
    return code in OPCODE_NAMES
