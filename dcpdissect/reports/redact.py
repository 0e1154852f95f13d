"""Redaction of customer data, driven by the protocol tables.

A message carries customer data when its opcode is marked ``document`` in the tables (its
key and value: mutation, deletion, expiration, prepare, commit, abort, cache transfer, and
any opcode added with that mark), when its shape says its key names a document
(``Shape.document_key``: the key alone), and for every opcode without a layout in the
tables (Get, Set, SaslAuth, ...: key and value) except the few the tables name as clear
(``CLEAR_CLIENT_OPCODES``: HELLO, SelectBucket, ...). Values become ``x`` placeholders of the
same length, so headers, extras (seqnos, CAS) and lengths stay valid; document keys become
pseudonyms (:class:`Pseudonyms`) of the same length, so that equal keys stay equal and
distinct keys distinct, and every rule about keys judges the redacted capture as the
original. Bytes whose meaning is unknown (the body of a message cut by a gap, a header that
cannot be trusted) are treated as customer data.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import hmac
import os
import re

from ..analysis.findings import Finding
from ..codec.header import peek
from ..codec.xattr import xattr_problem
from ..protocol import (CLEAR_CLIENT_OPCODES, DOCUMENT_OPCODES, HEADER_SIZE, OPCODES,
                        REQUEST_MAGICS, RESPONSE_MAGICS, SERVER_MAGICS)

PLACEHOLDER = b"x"
_CLIENT_MAGICS = (REQUEST_MAGICS | RESPONSE_MAGICS) - SERVER_MAGICS


_ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789"


class Pseudonyms:
    """Same-length stand-ins for document keys, from a keyed hash whose random key is made
    here and never written: a key always gets the same pseudonym, two keys never the same
    one, and no key its own. A leading collection id (leb128, a first byte below 0x20 or
    from 0x80) is kept, so that collection rules and prefixes stay as they were."""

    def __init__(self, secret: bytes | None = None):
        self._secret = secret or os.urandom(32)
        self._given: dict[bytes, bytes] = {}
        self._taken: set[bytes] = set()

    def __call__(self, key: bytes) -> bytes:
        key = bytes(key)
        got = self._given.get(key)
        if got is None:
            got = self._make(key)
            self._given[key] = got
            self._taken.add(got)
        return got

    def _make(self, key: bytes) -> bytes:
        cut = 0
        if key and (key[0] < 0x20 or key[0] >= 0x80):        # a leb128 collection prefix
            while cut < len(key) and key[cut] >= 0x80:
                cut += 1
            cut = min(cut + 1, len(key))
        prefix, logical = key[:cut], key[cut:]
        for attempt in range(1000):
            digest = b""
            block = 0
            while len(digest) < len(logical):
                digest += hmac.new(self._secret, b"%d:%d:" % (attempt, block) + key,
                                   hashlib.sha256).digest()
                block += 1
            name = prefix + bytes(_ALPHABET[b % len(_ALPHABET)] for b in digest[:len(logical)])
            if name != key and name not in self._taken:
                return name
        return prefix + bytes((b + 1) % 256 for b in logical)     # no printable name is free

    def text(self, key: str) -> str:
        """The pseudonym of a key given as text (UTF-8), as text."""
        return self(key.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")


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


def key_range(data: bytes) -> tuple[int, int] | None:
    """Where the customer-data key of a whole message is (None: it has none)."""
    if len(data) < HEADER_SIZE:
        return None
    h = peek(data)
    start = HEADER_SIZE + h.framing_len + h.extlen
    if (not document_parts(h.magic, h.opcode)[0] or not h.keylen
            or start + h.keylen > min(len(data), HEADER_SIZE + h.bodylen)):
        return None
    return start, start + h.keylen


def _xattr_skeleton(value: bytes) -> bytes | None:
    """A value whose datatype says XATTR and whose blob kv_engine accepts, with the blob's
    lengths kept and its names and values replaced (distinct names of ``x``s ending in a
    letter count, a system name keeping its ``_`` or ``$``; a JSON string of the same length),
    the body after it as ``x``s: the blob stays valid, so the redacted capture is judged as
    the original. None for a blob kv_engine refuses (``x``s keep it refused)."""
    if xattr_problem(value) is not None:
        return None
    size = int.from_bytes(value[:4], "big")
    out, pos, count = bytearray(value[:4]), 4, 0
    while pos < 4 + size:
        n = int.from_bytes(value[pos:pos + 4], "big")
        name, val, _ = value[pos + 4:pos + 4 + n].split(b"\0")
        keep = 1 if name[:1] in (b"_", b"$") else 0
        tag, i = b"", count
        while True:                 # the pair's number in letters: names stay distinct
            tag, i = bytes([97 + i % 26]) + tag, i // 26
            if not i:
                break
        name = name[:keep] + (b"x" * (len(name) - keep) + tag)[-(len(name) - keep):]
        val = b'"' + b"x" * (len(val) - 2) + b'"' if len(val) >= 2 else b"0" * len(val)
        out += value[pos:pos + 4] + name + b"\0" + val + b"\0"
        pos, count = pos + 4 + n, count + 1
    return bytes(out) + PLACEHOLDER * (len(value) - len(out))


def value_stand_in(data: bytes) -> tuple[int, int, bytes] | None:
    """(start, end, stand-in) for the value of a whole document message whose datatype says
    XATTR (uncompressed): see :func:`_xattr_skeleton`. None otherwise."""
    if len(data) < HEADER_SIZE:
        return None
    h = peek(data)
    end = HEADER_SIZE + h.bodylen
    if (h.datatype & 0x06) != 0x04 or len(data) < end or not document_parts(h.magic, h.opcode)[1]:
        return None
    start = HEADER_SIZE + h.framing_len + h.extlen + h.keylen
    skeleton = _xattr_skeleton(data[start:end]) if start < end else None
    return (start, end, skeleton) if skeleton is not None else None


def redact_pdu(data: bytes | None, pseudonyms: Pseudonyms | None = None) -> bytes | None:
    """The message with its customer data replaced by placeholders (its key by its
    pseudonym, given ``pseudonyms``); bytes after the header of a message with an unknown
    magic (garbage, or a stream joined mid-message) too."""
    if not data:
        return data
    out = bytearray(data)
    ranges = document_ranges(data)
    if len(data) > HEADER_SIZE and data[0] not in _CLIENT_MAGICS | SERVER_MAGICS:
        ranges = [(HEADER_SIZE, len(data))]
    for a, b in ranges:
        out[a:b] = PLACEHOLDER * (b - a)
    kr = key_range(data) if pseudonyms is not None else None
    if kr is not None and ranges and ranges[0][0] == kr[0]:
        out[kr[0]:kr[1]] = pseudonyms(data[kr[0]:kr[1]])
    stand_in = value_stand_in(data)
    if stand_in is not None:
        a, b, value = stand_in
        out[a:b] = value
    return bytes(out)


def _key_of(data: bytes | None) -> bytes:
    """The customer-data key of a message (empty when it has none)."""
    kr = key_range(data) if data else None
    return bytes(data[kr[0]:kr[1]]) if kr else b""


_SPELLINGS = (lambda k: k.decode("utf-8", "replace"),
              lambda k: k.decode("utf-8", "backslashreplace"),
              lambda k: k.decode("latin-1"))
_HEX_SPELLINGS = (bytes.hex, lambda k: k.hex(" "))


def _spellings(key: bytes, stand_in: bytes | None = None) -> dict[str, str]:
    """Every way the reports spell a key (text with replacement or backslash escapes,
    latin-1, hex, the text after a collection prefix), each with what replaces it: the
    same spelling of ``stand_in``, or ``x``s."""
    ways = list(_SPELLINGS)
    if len(key) >= 4:               # the hex of a shorter key would match plain numbers
        ways += _HEX_SPELLINGS
    if key and key[0] < 0x20:
        ways.append(lambda k: k[1:].decode("utf-8", "backslashreplace"))
    out = {}
    for way in ways:
        text = way(key)
        if text:
            out[text] = way(stand_in) if stand_in is not None else "x" * len(text)
    return out


def scrub(text: str, secrets) -> str:
    """``text`` with every standalone occurrence of a secret replaced: by what ``secrets``
    maps it to (a dict), or by ``x``s."""
    if not isinstance(secrets, dict):
        secrets = {s: "x" * len(s) for s in secrets}
    for s in sorted(secrets, key=len, reverse=True):
        text = re.sub(r"(?<![\w\\])" + re.escape(s) + r"(?!\w)",
                      lambda m, new=secrets[s]: new, text)
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


def redact_finding(f: Finding, pseudonyms: Pseudonyms | None = None) -> Finding:
    """The finding with its PDU redacted, and its message and decoded fields without the
    document key it names (as text, escaped or hex) nor any quoted bytes of its document (an
    xattr's name): the key spelled as its pseudonym, given ``pseudonyms``, else as ``x``s."""
    key = _key_of(f.pdu)
    document = b"|".join(f.pdu[a:b] for a, b in document_ranges(f.pdu)) if f.pdu else b""
    stand_in = pseudonyms(key) if key and pseudonyms is not None else None
    secrets = _spellings(key, stand_in) if key else {}
    fields = {}
    for name, value in f.fields.items():
        if name == "key" and isinstance(value, str):
            quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
            inner = value[1:-1] if quoted else value
            new = pseudonyms.text(inner) if pseudonyms is not None else "x" * len(inner)
            secrets[inner] = new
            value = value[0] + new + value[-1] if quoted else new
        fields[name] = value
    if not secrets and not document and f.pdu == redact_pdu(f.pdu):
        return f
    return dataclasses.replace(f, pdu=redact_pdu(f.pdu, pseudonyms),
                               message=_redact_value(f.message, secrets, document),
                               fields=_redact_value(fields, secrets, document))


def redact_record(record: dict, pseudonyms: Pseudonyms | None = None) -> dict:
    """A ``dissect`` message record without customer data: a document key becomes its
    pseudonym, given ``pseudonyms``, else ``x``s of its length in bytes (the tables give
    document opcodes no value fields)."""
    if record.get("key") is None or not document_parts(record["magic"], record["opcode"])[0]:
        return record
    if pseudonyms is not None:
        return {**record, "key": pseudonyms.text(record["key"])}
    return {**record, "key": "x" * record["keylen"]}
