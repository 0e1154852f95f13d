"""Building blocks of the declarative protocol tables.

Everything that describes the wire format is data made of these classes; the codec,
the Scapy layers, the Lua generator and the docs are all rendered from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


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
        return self.values.get(value, f"unknown:{value:#x}")


@dataclass(frozen=True)
class Field:
    """One fixed-width big-endian integer field of an extras or value layout.

    ``offset`` counts from the start of the section (extras or value). ``display``
    is ``"dec"`` or ``"hex"``. ``flags`` / ``names`` attach a bit or value table.
    """

    name: str
    offset: int
    width: int
    title: str
    display: str = "dec"
    flags: FlagSet | None = None
    names: ValueNames | None = None


@dataclass(frozen=True)
class Layout:
    """A fixed-size group of fields (an extras section or a value body).

    ``label`` names the variant (``"V1"``, ``"V2.2"``...). ``when`` holds conditions
    on already decoded fields (or the header ``status``) that select this layout.
    ``note`` marks documented-but-not-server variants. ``repeated`` means the value
    is a list of entries of this layout (size must be a multiple of ``size``).
    """

    label: str
    fields: tuple[Field, ...]
    size: int
    when: tuple[tuple[str, int], ...] = ()
    repeated: str | None = None
    note: str | None = None

    def __post_init__(self):
        end = max((f.offset + f.width for f in self.fields), default=0)
        if end > self.size:
            raise ValueError(f"layout {self.label}: fields run past size {self.size}")


@dataclass(frozen=True)
class Shape:
    """What one direction (request or response) of an opcode carries."""

    extras: tuple[Layout, ...] = ()          # allowed extras layouts; selected by size
    key: Presence = Presence.FORBIDDEN
    value: Presence = Presence.FORBIDDEN
    values: tuple[Layout, ...] = ()          # value layouts, selected by ``when`` and size
    datatypes: frozenset[int] | None = frozenset({0})   # allowed datatypes (None: any valid)
    value_kind: str | None = None            # "json" / "text" / "records" for undecoded values

    @property
    def extras_sizes(self) -> tuple[int, ...]:
        return tuple(layout.size for layout in self.extras) or (0,)


@dataclass(frozen=True)
class Opcode:
    """One MCBP opcode with its request and response shapes."""

    code: int
    name: str            # kv_engine's identifier, e.g. "DcpSnapshotMarker"
    title: str           # human title, e.g. "DCP Snapshot Marker"
    request: Shape = Shape()
    response: Shape = Shape()
    seqno_field: str | None = None   # field giving the item's seqno for stream checks
    dcp: bool = True
    doc: str = ""
