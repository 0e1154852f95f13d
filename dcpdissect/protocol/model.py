"""Building blocks of the declarative protocol tables.

Everything that describes the wire format, and every constraint the server puts on it, is
data made of these classes: the codec, the Scapy layers, the Lua dissector, the analyzer's
single-message rules and docs/protocol.md are all rendered from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


ERROR, WARNING, INFO = "error", "warning", "info"


class Presence(str, Enum):
    """Whether a message part (key or value) must, may or must not be present."""

    REQUIRED = "required"
    OPTIONAL = "optional"
    FORBIDDEN = "forbidden"


@dataclass(frozen=True)
class FlagSet:
    """A bit field: ``bits`` maps each mask to its short name."""

    name: str
    bits: dict[int, str]
    titles: dict[int, str] = field(default_factory=dict)

    @property
    def mask(self) -> int:
        m = 0
        for bit in self.bits:
            m |= bit
        return m

    def bit(self, name: str) -> int:
        """The mask of the bit called ``name``."""
        return next(bit for bit, n in self.bits.items() if n == name)

    def names(self, value: int) -> list[str]:
        """Names of the set bits, then ``unknown:0x..`` for bits not in the table."""
        out = [name for bit, name in self.bits.items() if value & bit]
        unknown = value & ~self.mask
        if unknown:
            out.append(f"unknown:{unknown:#x}")
        return out

    def text(self, value: int) -> str:
        return "+".join(self.names(value)) or "none"

    def parse(self, text: str | int) -> int:
        """``"memory+checkpoint"`` or ``"memory|ack"`` or an int -> the bit value."""
        if isinstance(text, int):
            return text
        by_name = {name: bit for bit, name in self.bits.items()}
        value = 0
        for part in text.replace("|", "+").split("+"):
            part = part.strip()
            if part and part != "none":
                value |= by_name[part] if part in by_name else int(part, 0)
        return value


@dataclass(frozen=True)
class ValueNames:
    """An enumeration: numeric value -> name."""

    name: str
    values: dict[int, str]

    def text(self, value: int) -> str:
        got = self.values.get(value)
        return f"unknown:{value:#x}" if got is None else got

    def code(self, name: str) -> int:
        """The value called ``name``."""
        return next(value for value, n in self.values.items() if n == name)


@dataclass(frozen=True)
class Field:
    """One fixed-width big-endian integer field of an extras or value layout.

    ``offset`` counts from the start of the section (extras or value). ``display``
    is ``"dec"`` or ``"hex"``. ``flags`` / ``names`` attach a bit or value table.
    ``short`` is its name in one-line summaries; ``shown`` says when summaries show it:
    ``"always"``, ``"if_set"`` (non-zero only) or ``"never"``.
    """

    name: str
    offset: int
    width: int
    title: str
    display: str = "dec"
    flags: FlagSet | None = None
    names: ValueNames | None = None
    short: str | None = None
    shown: str = "always"

    @property
    def label(self) -> str:
        return self.short or self.name


@dataclass(frozen=True)
class Check:
    """A constraint on one message, attached to the shape it constrains (as Spicy's
    ``&requires``); it is one rule of the analyzer and one expert info of the Lua plugin.

    ``test`` is one of a small closed set, interpreted alike in Python
    (:mod:`dcpdissect.analysis.rules.structure`) and Lua (``luagen/runtime.lua``):

    - ``("le", a, b)``: field a <= field b
    - ``("range", lo, x, hi)``: lo <= x <= hi
    - ``("ne", a, value)``: field a != value
    - ``("in", a, (values...))``: field a is one of the values
    - ``("mask", a, allowed)``: field a has no bit outside ``allowed``
    - ``("only_with", a, bit, allowed)``: if ``bit`` is set, no other bit outside ``allowed``
    - ``("not_both", a, m1, m2)``: bits m1 and m2 of field a are not both set
    - ``("needs", a, m1, m2)``: bit m1 set implies bit m2 set
    - ``("one_bit", a, mask)``: exactly one bit of ``mask`` is set

    Besides decoded fields, tests and conditions may name the header values ``extlen``,
    ``keylen``, ``value_len``, ``datatype`` and ``status``. ``when`` holds conditions
    that must all hold for the test to apply: ``("set", a, mask)`` any bit of mask set,
    ``("clear", a, mask)`` no bit of mask set, ``("eq", a, value)``, ``("ne", a, value)``.
    Checks of one rule id after the first may leave title and rationale empty. A test or condition naming a field the message did not decode
    does not apply. ``text`` is the finding's message: ``{field}`` is replaced by the
    decimal value, ``{field:x}`` by ``0x`` and hex digits.
    """

    rule: str
    severity: str
    title: str
    rationale: str
    test: tuple
    text: str
    when: tuple = ()
    sample: str = "violations-validator.pcap"

    @property
    def fields(self) -> set[str]:
        names = {self.test[1]}
        if self.test[0] == "le":
            names.add(self.test[2])
        elif self.test[0] == "range":
            names |= {self.test[2], self.test[3]}
        return names | {cond[1] for cond in self.when}


@dataclass(frozen=True)
class Layout:
    """A fixed-size group of fields (an extras section or a value body).

    ``label`` names the variant (``"V1"``, ``"V2.2"``...). ``when`` holds conditions
    on already decoded fields (or the header ``status``) that select this layout.
    ``repeated`` means the value is a list of entries of this layout (size must be a
    multiple of ``size``). For an extras layout, ``value`` says whether a value may follow
    it (the marker's V1 extras forbid one, V2 requires one) and ``context`` names the
    negotiated feature that selects it (``"delete_v2"``: DcpOpen IncludeDeleteTimes or
    HELLO Collections; ``"!delete_v2"``: neither). ``rule`` names the rule a message
    decoded with this layout breaks (a documented variant that servers reject), with
    ``note`` as its explanation.
    """

    label: str
    fields: tuple[Field, ...]
    size: int
    when: tuple[tuple[str, int], ...] = ()
    repeated: str | None = None
    note: str | None = None
    value: Presence | None = None
    context: str | None = None
    rule: str | None = None
    section: str | None = None     # filter section of its fields ("": top level); None: the opcode's

    def __post_init__(self):
        end = max((f.offset + f.width for f in self.fields), default=0)
        if end > self.size:
            raise ValueError(f"layout {self.label}: fields run past size {self.size}")


@dataclass(frozen=True)
class Shape:
    """What one direction (request or response) of an opcode carries, and what the
    server's validator requires of it (kv_engine ``McbpValidator::verify_header``: extras
    length, key, value, CAS, datatype, document key)."""

    extras: tuple[Layout, ...] = ()          # allowed extras layouts; selected by size
    key: Presence = Presence.FORBIDDEN
    value: Presence = Presence.FORBIDDEN
    values: tuple[Layout, ...] = ()          # value layouts, selected by ``when`` and size
    datatypes: frozenset[int] | None = frozenset({0})   # allowed datatypes (None: any valid)
    value_kind: str | None = None            # "json" / "text" / "records" for undecoded values
    cas: Presence = Presence.OPTIONAL        # REQUIRED: CAS set; FORBIDDEN: CAS must be 0
    document_key: bool = False               # the key names a document (collection prefix)
    value_min: int = 0                       # minimum value length when a value is present
    value_context: str | None = None         # feature a value needs ("collections")
    checks: tuple[Check, ...] = ()           # field constraints (rules of their own)
    validated: bool = False                  # the server validates this direction

    @property
    def extras_sizes(self) -> tuple[int, ...]:
        return tuple(layout.size for layout in self.extras) or (0,)


class Sender(str, Enum):
    """Which end of a DCP connection sends an opcode's requests."""

    PRODUCER = "producer"      # the end that streams (memcached on a producer connection)
    CONSUMER = "consumer"      # the end that asks for streams
    EITHER = "either"


class SyncWrite(str, Enum):
    """An item's part in sync replication, as the replica's passive durability monitor
    sees it (engines/ep/src/dcp/passive_stream.cc PassiveStream::processMessage)."""

    PREPARE = "prepare"        # a pending sync write (item.h queue_op::pending_sync_write)
    COMMIT = "commit"          # completes the key's prepare (VBucket::commit)
    ABORT = "abort"            # aborts the key's prepare (VBucket::abort)
    MUTATION = "mutation"      # a write committed by itself (queue_op::mutation: mutations,
    #                            deletions, expirations); VBucket::processSet lets it replace
    #                            the key's prepare in a Disk snapshot only


@dataclass(frozen=True)
class Reply:
    """How the producer takes the consumer's response to a message it sent
    (engines/ep/src/dcp/producer.cc DcpProducer::handleResponse).

    ``expected`` False: no response is expected (the switch's default branch throws
    logic_error, "received an unknown client opcode"). ``taken``: the statuses taken as
    they are; any other goes to errorMessageHandler, which keeps the connection for the
    statuses that affect one stream and disconnects for the others. None: every status is
    taken (the stream notes the acknowledgement)."""

    expected: bool = True
    taken: frozenset[str] | None = frozenset({"Success"})


@dataclass(frozen=True)
class Opcode:
    """One MCBP opcode with its request and response shapes and its role in DCP.

    ``section`` names its fields for filters (``dcp.<section>.<field>``) and JSON.
    ``document`` marks opcodes whose key and value carry customer data (redacted),
    ``stream`` those that belong to a vbucket stream: the producer's ActiveStream queues
    them in its readyQ, so each passes the connection's BufferLog (active_stream.cc
    ActiveStream::nextQueuedItem: bufferLogInsert(getMessageSize())) and flow control counts
    its bytes; the stream rules follow them. ``item`` marks the stream's items (a seqno
    inside the current snapshot), ``sender`` who sends the request. ``server_rejects`` is
    the status memcached answers when it receives the request (an opcode it has no
    validator or executor for).

    Roles the analysis reads:

    * ``sync_write``: the item's part in sync replication (:class:`SyncWrite`), read by the
      durability rules; it also puts the item's key in a namespace of the duplicate-key
      check, as a checkpoint keeps one key index for committed items and one for prepares
      (checkpoint.h Checkpoint::committedKeyIndex / preparedKeyIndex): a mutation's key in
      the committed one, a prepare's in the prepared one.
    * ``reply``: how the producer takes the consumer's response to it (:class:`Reply`);
      None for a message the producer's streams do not send.
    * ``negotiates``: the request sets what the connection may carry (the DcpOpen flags:
      daemon/protocol/mcbp/dcp_open_executor.cc; the DcpControl keys: engines/ep/src/dcp/
      producer.cc DcpProducer::control); analysis/negotiation.py follows them, and evidence
      keeps them for every finding of their connection.
    * ``opens_stream``: the request asks for a vbucket's stream (a stream request:
      DcpProducer::streamRequest; an add stream, which makes a consumer send one:
      DcpConsumer::addStream); evidence keeps it for a finding about its vbucket.
    * ``per_vbucket``: the header's vbucket names the vbucket the message is about. False
      for the messages about the connection, whose handlers take no vbucket
      (dcp_open_executor.cc; DcpProducer::control, bufferAcknowledgement and the noop of
      DcpProducer::maybeSendNoop / DcpConsumer::handleNoop); displays leave it out.
    """

    code: int
    name: str            # kv_engine's identifier, e.g. "DcpSnapshotMarker"
    title: str           # human title, e.g. "DCP Snapshot Marker"
    request: Shape = Shape()
    response: Shape = Shape()
    seqno_field: str | None = None   # field giving the item's seqno for stream checks
    section: str = ""
    document: bool = False
    stream: bool = False
    item: bool = False
    sender: Sender = Sender.EITHER
    server_rejects: str | None = None
    sync_write: SyncWrite | None = None
    reply: Reply | None = None
    negotiates: bool = False
    opens_stream: bool = False
    per_vbucket: bool = True
