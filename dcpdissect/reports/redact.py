"""Redaction of customer data, driven by the protocol tables.

A message carries customer data when its opcode is marked ``document`` in the tables (its
key and value: mutation, deletion, expiration, prepare, commit, abort, cache transfer, and
any opcode added with that mark), when its shape says its key names a document
(``Shape.document_key``: the key alone), and for every opcode without a layout in the
tables (Get, Set, SaslAuth, ...: key and value) except the few the tables name as clear
(``CLEAR_CLIENT_OPCODES``: HELLO, SelectBucket, ...). Those bytes become ``x`` placeholders of the same
length, so headers, extras (seqnos, CAS) and lengths stay valid. Bytes whose meaning is
unknown (the body of a message cut by a gap, a header that cannot be trusted) are treated
as customer data.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from ..analysis.findings import Finding
from ..codec.header import peek
from ..protocol import (CLEAR_CLIENT_OPCODES, DOCUMENT_OPCODES, HEADER_SIZE, OPCODES,
                        REQUEST_MAGICS, RESPONSE_MAGICS, SERVER_MAGICS)

PLACEHOLDER = b"x"
_CLIENT_MAGICS = (REQUEST_MAGICS | RESPONSE_MAGICS) - SERVER_MAGICS


def document_parts(magic: int, opcode: int) -> tuple[bool, bool]:
    """(key, value): which parts of a message with this magic and opcode are customer
    data, as the tables say."""
    if magic not in _CLIENT_MAGICS:
        return False, False
    if opcode in DOCUMENT_OPCODES:
        return True, True
    op = OPCODES.get(opcode)
    if op is None:                  # no layout: a document unless the tables say clear
        secret = opcode not in CLEAR_CLIENT_OPCODES
        return secret, secret
    shape = op.request if magic in REQUEST_MAGICS else op.response
    return bool(shape is not None and shape.document_key), False


def document_ranges(data: bytes) -> list[tuple[int, int]]:
    """Non-empty byte ranges of ``data`` (one message, possibly cut short) that carry
    customer data: its key and value as the header lays them out, clamped to the bytes
    present. A document message whose lengths do not add up loses everything after its
    header."""
    if len(data) < HEADER_SIZE:
        return []
    h = peek(data)
    key, value = document_parts(h.magic, h.opcode)
    if not (key or value):
        return []
    end = HEADER_SIZE + h.bodylen
    start = HEADER_SIZE + h.framing_len + h.extlen
    if start + h.keylen > end:
        ranges = [(HEADER_SIZE, len(data))]
    else:
        ranges = [(start, start + h.keylen)] if key else []
        if value:
            ranges.append((start + h.keylen, end))
    return [(min(a, len(data)), min(b, len(data))) for a, b in ranges if min(b, len(data)) > a]


def redact_pdu(data: bytes | None) -> bytes | None:
    """The message with its customer data replaced by placeholders; bytes after the header
    of a message with an unknown magic (garbage, or a stream joined mid-message) too."""
    if not data:
        return data
    out = bytearray(data)
    ranges = document_ranges(data)
    if len(data) > HEADER_SIZE and data[0] not in _CLIENT_MAGICS | SERVER_MAGICS:
        ranges = [(HEADER_SIZE, len(data))]
    for a, b in ranges:
        out[a:b] = PLACEHOLDER * (b - a)
    return bytes(out)


def _key_of(data: bytes | None) -> bytes:
    """The customer-data key of a message (empty when it has none)."""
    if not data or len(data) < HEADER_SIZE:
        return b""
    h = peek(data)
    if not document_parts(h.magic, h.opcode)[0]:
        return b""
    start = HEADER_SIZE + h.framing_len + h.extlen
    return bytes(data[start:start + h.keylen])


def _spellings(key: bytes) -> set[str]:
    """Every way the reports spell a key: text (replacement or backslash escapes), latin-1,
    hex, and the printable text after a collection prefix."""
    texts = {key.decode("utf-8", "replace"), key.decode("utf-8", "backslashreplace"),
             key.decode("latin-1")}
    if len(key) >= 4:               # the hex of a shorter key would match plain numbers
        texts |= {key.hex(), key.hex(" ")}
    if key and key[0] < 0x20:
        texts.add(key[1:].decode("utf-8", "backslashreplace"))
    return {t for t in texts if len(t) >= 1}


def scrub(text: str, secrets) -> str:
    """``text`` with every standalone occurrence of a secret replaced by ``x``s."""
    for s in sorted(secrets, key=len, reverse=True):
        text = re.sub(r"(?<![\w\\])" + re.escape(s) + r"(?!\w)", "x" * len(s), text)
    return text


_QUOTED = re.compile(r"b?'(?:[^'\\]|\\.)*'" + r'|b?"(?:[^"\\]|\\.)*"')


def scrub_quoted(text: str, document: bytes) -> str:
    """``text`` with every quoted string (``'k1'``, ``b'_sync'``) whose bytes occur in
    ``document`` replaced by ``x``s inside its quotes."""
    if not document:
        return text

    def sub(m: re.Match) -> str:
        token = m.group(0)
        try:
            value = ast.literal_eval(token)
        except (ValueError, SyntaxError):
            return token
        raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
        if not raw or raw not in document:
            return token
        head = 2 if token.startswith("b") else 1
        return token[:head] + "x" * (len(token) - head - 1) + token[-1]
    return _QUOTED.sub(sub, text)


def _redact_value(value, secrets, document: bytes = b""):
    if isinstance(value, str):
        return scrub_quoted(scrub(value, secrets), document)
    if isinstance(value, dict):
        return {k: _redact_value(v, secrets, document) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redact_value(v, secrets, document) for v in value)
    return value


def redact_finding(f: Finding) -> Finding:
    """The finding with its PDU redacted, and its message and decoded fields without the
    document key it names (as text, escaped or hex) nor any quoted bytes of its document (an
    xattr's name); a ``key`` field becomes ``x``s."""
    key = _key_of(f.pdu)
    document = b"|".join(f.pdu[a:b] for a, b in document_ranges(f.pdu)) if f.pdu else b""
    secrets = _spellings(key) if key else set()
    fields = {}
    for name, value in f.fields.items():
        if name == "key" and isinstance(value, str):
            quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
            inner = value[1:-1] if quoted else value
            secrets |= {inner}
            value = value[0] + "x" * len(inner) + value[-1] if quoted else "x" * len(value)
        fields[name] = value
    if not secrets and not document and f.pdu == redact_pdu(f.pdu):
        return f
    return dataclasses.replace(f, pdu=redact_pdu(f.pdu),
                               message=_redact_value(f.message, secrets, document),
                               fields=_redact_value(fields, secrets, document))


def redact_record(record: dict) -> dict:
    """A ``dissect`` message record without customer data: a document key becomes ``x``s of
    its length in bytes (the tables give document opcodes no value fields)."""
    if record.get("key") is None or not document_parts(record["magic"], record["opcode"])[0]:
        return record
    return {**record, "key": "x" * record["keylen"]}
