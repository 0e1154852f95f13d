"""The declarative protocol tables: the single source of truth for every renderer."""

from .client_opcodes import (  # noqa: F401
    CLEAR_CLIENT_OPCODES, CLIENT_OPCODE_NAMES, NEGOTIATION_CLIENT_OPCODES,
)
from .constants import *  # noqa: F401,F403
from .constants import STATUS
from .header import (  # noqa: F401
    CLASSIC_HEADER, CLASSIC_MAGICS, FLEXIBLE_HEADER, HEADER_FIELDS, HEADER_LAYOUTS, HeaderField,
    header_field, header_layout,
)
from .model import (  # noqa: F401
    ERROR, INFO, WARNING, Check, Field, FlagSet, Layout, Opcode, Presence, Reply, Sender, Shape,
    SyncWrite, ValueNames,
)
from .opcodes import DCP_OPCODES  # noqa: F401
from .spelling import u64_text  # noqa: F401

# The duplicate-key check's namespace of each sync-write part: the key indexes of a
# checkpoint (checkpoint.h Checkpoint::committedKeyIndex / preparedKeyIndex). Commits and
# aborts are not judged by it.
KEY_NAMESPACE = {SyncWrite.MUTATION: "committed", SyncWrite.PREPARE: "prepared"}


def shape_fields(shape: Shape) -> dict[str, Field]:
    """Every field of a shape's extras and value layouts by name (the first layout that
    declares a name wins: layouts of one shape that share a name describe one field)."""
    out: dict[str, Field] = {}
    for lay in shape.extras + shape.values:
        for f in lay.fields:
            out.setdefault(f.name, f)
    return out


class TableError(ValueError):
    """The opcode tables contradict themselves (raised when they are built)."""


def check_tables(opcodes: tuple[Opcode, ...]) -> None:
    """Raise :class:`TableError` naming each opcode that is wrong and how: a code or name
    used twice or already kv_engine's name for another client opcode, no section, a role
    that needs another one, a field or status that does not exist."""
    problems = []
    codes: dict[int, str] = {}
    names: dict[str, int] = {}
    client_names = {name: code for code, name in CLIENT_OPCODE_NAMES.items()}
    statuses = set(STATUS.values.values())
    for op in opcodes:
        def bad(text, op=op):
            problems.append(f"opcode {op.code:#04x} {op.name}: {text}")
        if not 0 <= op.code <= 0xFF:
            bad("the code is not one byte")
        if op.code in codes:
            bad(f"code {op.code:#04x} is also {codes[op.code]}'s")
        if op.name in names:
            bad(f"name {op.name} is also opcode {names[op.name]:#04x}'s")
        if op.code in CLIENT_OPCODE_NAMES:
            bad(f"code {op.code:#04x} is the client opcode {CLIENT_OPCODE_NAMES[op.code]} "
                "(protocol/client_opcodes.py)")
        if op.name in client_names:
            bad(f"name {op.name} is the client opcode {client_names[op.name]:#04x} "
                "(protocol/client_opcodes.py)")
        codes.setdefault(op.code, op.name)
        names.setdefault(op.name, op.code)
        if not op.section:
            bad("no section (the dcp.<section>.<field> filter names and JSON need one)")
        if op.item and not op.stream:
            bad("item without stream: an item is a message of a stream")
        if op.seqno_field and op.seqno_field not in shape_fields(op.request):
            bad(f"seqno_field {op.seqno_field} is not a field of its request")
        if op.sync_write is not None and not op.item:
            bad(f"sync_write {op.sync_write.value} on a message that is not a stream item")
        if op.stream and op.reply is None:
            bad("a stream message needs its reply: how DcpProducer::handleResponse takes the "
                "consumer's response (model.Reply)")
        if op.reply is not None and op.reply.taken is not None:
            for status in sorted(op.reply.taken - statuses):
                bad(f"reply status {status} is not a status (constants.STATUS)")
    if problems:
        raise TableError("the protocol tables are inconsistent:\n  " + "\n  ".join(problems))


def opcode_tables(opcodes: tuple[Opcode, ...]) -> dict[str, object]:
    """Every table derived from a list of opcodes, by module-global name, after
    :func:`check_tables`. The globals below are ``opcode_tables(DCP_OPCODES)``; a test that
    adds a made-up opcode rebuilds them all from here. The roles of opcodes are read from
    these tables, never listed by hand elsewhere."""
    check_tables(opcodes)
    names = dict(sorted({**CLIENT_OPCODE_NAMES, **{op.code: op.name for op in opcodes}}.items()))
    return {
        "DCP_OPCODES": opcodes,
        "OPCODES": {op.code: op for op in opcodes},
        "OPCODE_NAMES": names,
        "OPCODE_CODES": {name: code for code, name in names.items()},
        "DOCUMENT_OPCODES": frozenset(op.code for op in opcodes if op.document),
        # Stream messages: the stream rules follow them; flow control counts their bytes.
        "STREAM_OPCODES": frozenset(op.code for op in opcodes if op.stream),
        "ITEM_OPCODES": frozenset(op.code for op in opcodes if op.item),
        # Items whose key is a document key (its collection is the key's leb128 prefix).
        "DOCUMENT_ITEM_OPCODES": frozenset(op.code for op in opcodes if op.item and op.document),
        # Responses that carry a failover log (stream request, get failover log).
        "FAILOVER_LOG_OPCODES": frozenset(
            op.code for op in opcodes
            if any(lay.repeated == "failover_log" for lay in op.response.values)),
        "SYNC_WRITES": {op.code: op.sync_write for op in opcodes if op.sync_write is not None},
        "KEY_NAMESPACES": {op.code: KEY_NAMESPACE[op.sync_write] for op in opcodes
                           if op.sync_write in KEY_NAMESPACE},
        # Messages of the producer the consumer must not answer.
        "NO_REPLY_OPCODES": frozenset(op.code for op in opcodes
                                      if op.reply is not None and not op.reply.expected),
        "NEGOTIATION_OPCODES": NEGOTIATION_CLIENT_OPCODES | {op.code for op in opcodes
                                                             if op.negotiates},
        "STREAM_OPENING_OPCODES": frozenset(op.code for op in opcodes if op.opens_stream),
    }


_TABLES = opcode_tables(DCP_OPCODES)
OPCODES: dict[int, Opcode] = _TABLES["OPCODES"]
OPCODE_NAMES: dict[int, str] = _TABLES["OPCODE_NAMES"]
OPCODE_CODES: dict[str, int] = _TABLES["OPCODE_CODES"]
DOCUMENT_OPCODES: frozenset[int] = _TABLES["DOCUMENT_OPCODES"]
STREAM_OPCODES: frozenset[int] = _TABLES["STREAM_OPCODES"]
ITEM_OPCODES: frozenset[int] = _TABLES["ITEM_OPCODES"]
DOCUMENT_ITEM_OPCODES: frozenset[int] = _TABLES["DOCUMENT_ITEM_OPCODES"]
FAILOVER_LOG_OPCODES: frozenset[int] = _TABLES["FAILOVER_LOG_OPCODES"]
SYNC_WRITES: dict[int, SyncWrite] = _TABLES["SYNC_WRITES"]
KEY_NAMESPACES: dict[int, str] = _TABLES["KEY_NAMESPACES"]
NO_REPLY_OPCODES: frozenset[int] = _TABLES["NO_REPLY_OPCODES"]
NEGOTIATION_OPCODES: frozenset[int] = _TABLES["NEGOTIATION_OPCODES"]
STREAM_OPENING_OPCODES: frozenset[int] = _TABLES["STREAM_OPENING_OPCODES"]
assert set(_TABLES) <= set(globals()), "every derived table is a module global"


def opcode_code(name: str) -> int:
    """The code of the opcode kv_engine calls ``name`` (``"DcpSnapshotMarker"`` -> 0x56)."""
    return OPCODE_CODES[name]


def status_code(name: str) -> int:
    """The code of the status kv_engine calls ``name`` (``"KeyEnoent"`` -> 0x01)."""
    return next(code for code, n in STATUS.values.items() if n == name)  # noqa: F405


def opcode_name(magic: int, code: int) -> str:
    """Name of an opcode as the magic interprets it (server magics use their own table)."""
    names = SERVER_OPCODES.values if magic in SERVER_MAGICS else OPCODE_NAMES  # noqa: F405
    got = names.get(code)
    return f"unknown:{code:#04x}" if got is None else got


def is_known_opcode(magic: int, code: int) -> bool:
    if magic in SERVER_MAGICS:  # noqa: F405
        return code in SERVER_OPCODES.values  # noqa: F405
    return code in OPCODE_NAMES
