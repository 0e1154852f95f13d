"""Display-filter names of the table fields: ``dcp.<section>.<field>``.

The Lua plugin declares a field under this name and docs/protocol.md lists it, so both
take it from here. It follows from the tables alone: a layout's ``section``, else the name
of its repeated entries, else its opcode's ``section`` ("" puts a field at the top level).
"""

from __future__ import annotations

from .model import Layout, Opcode

PROTO = "dcp"


def filter_section(op: Opcode, lay: Layout) -> str:
    """The filter section of a layout's fields ("" = top level)."""
    if lay.section is not None:
        return lay.section
    return lay.repeated or op.section


def filter_name(section: str, field: str) -> str:
    """``dcp.<section>.<field>``, or ``dcp.<field>`` at the top level."""
    return f"{PROTO}.{section}.{field}" if section else f"{PROTO}.{field}"


def field_filters(op: Opcode, request: bool) -> dict[str, str]:
    """Field name -> display-filter name, for every layout field of one direction of ``op``
    (a field in several layouts keeps the name of the first)."""
    shape = op.request if request else op.response
    out: dict[str, str] = {}
    for lay in shape.extras + shape.values:
        section = filter_section(op, lay)
        for fd in lay.fields:
            out.setdefault(fd.name, filter_name(section, fd.name))
    return out
