"""The declarative protocol tables: the single source of truth for every renderer."""

from .client_opcodes import CLEAR_CLIENT_OPCODES, CLIENT_OPCODE_NAMES
from .constants import *  # noqa: F401,F403
from .header import (  # noqa: F401
    CLASSIC_HEADER, CLASSIC_MAGICS, FLEXIBLE_HEADER, HEADER_FIELDS, HEADER_LAYOUTS, HeaderField,
    header_field, header_layout,
)
from .model import (  # noqa: F401
    ERROR, INFO, WARNING, Check, Field, FlagSet, Layout, Opcode, Presence, Sender, Shape, ValueNames,
)
from .opcodes import DCP_OPCODES  # noqa: F401



def opcode_tables(opcodes: tuple[Opcode, ...]) -> dict[str, object]:
    """Every table derived from a list of opcodes, by module-global name. The globals below
    are ``opcode_tables(DCP_OPCODES)``; a test that adds a made-up opcode rebuilds them all
    from here (and patches them where they are imported)."""
    names = {**CLIENT_OPCODE_NAMES, **{op.code: op.name for op in opcodes}}
    return {
        "DCP_OPCODES": opcodes,
        "OPCODES": {op.code: op for op in opcodes},
        "OPCODE_NAMES": names,
        "OPCODE_CODES": {name: code for code, name in names.items()},
        # Roles of opcodes (never listed by hand elsewhere).
        "DOCUMENT_OPCODES": frozenset(op.code for op in opcodes if op.document),
        "STREAM_OPCODES": frozenset(op.code for op in opcodes if op.stream),
        "ITEM_OPCODES": frozenset(op.code for op in opcodes if op.item),
        # Responses that carry a failover log (stream request, get failover log).
        "FAILOVER_LOG_OPCODES": frozenset(
            op.code for op in opcodes
            if any(lay.repeated == "failover_log" for lay in op.response.values)),
    }


assert all(CLIENT_OPCODE_NAMES[op.code] == op.name for op in DCP_OPCODES), "opcode names disagree"
_TABLES = opcode_tables(DCP_OPCODES)
OPCODES: dict[int, Opcode] = _TABLES["OPCODES"]
OPCODE_NAMES: dict[int, str] = _TABLES["OPCODE_NAMES"]
OPCODE_CODES: dict[str, int] = _TABLES["OPCODE_CODES"]
DOCUMENT_OPCODES: frozenset[int] = _TABLES["DOCUMENT_OPCODES"]
STREAM_OPCODES: frozenset[int] = _TABLES["STREAM_OPCODES"]
ITEM_OPCODES: frozenset[int] = _TABLES["ITEM_OPCODES"]
FAILOVER_LOG_OPCODES: frozenset[int] = _TABLES["FAILOVER_LOG_OPCODES"]
assert set(_TABLES) <= set(globals()), "every derived table is a module global"


def opcode_code(name: str) -> int:
    """The code of the opcode kv_engine calls ``name`` (``"DcpSnapshotMarker"`` -> 0x56)."""
    return OPCODE_CODES[name]


def status_code(name: str) -> int:
    """The code of the status kv_engine calls ``name`` (``"KeyEnoent"`` -> 0x01)."""
    return next(code for code, n in STATUS.values.items() if n == name)  # noqa: F405


def shape_fields(shape: Shape) -> dict[str, Field]:
    """Every field of a shape's extras and value layouts by name (the first layout that
    declares a name wins: layouts of one shape that share a name describe one field)."""
    out: dict[str, Field] = {}
    for lay in shape.extras + shape.values:
        for f in lay.fields:
            out.setdefault(f.name, f)
    return out


def opcode_name(magic: int, code: int) -> str:
    """Name of an opcode as the magic interprets it (server magics use their own table)."""
    names = SERVER_OPCODES.values if magic in SERVER_MAGICS else OPCODE_NAMES  # noqa: F405
    got = names.get(code)
    return f"unknown:{code:#04x}" if got is None else got


def is_known_opcode(magic: int, code: int) -> bool:
    if magic in SERVER_MAGICS:  # noqa: F405
        return code in SERVER_OPCODES.values  # noqa: F405
    return code in OPCODE_NAMES
