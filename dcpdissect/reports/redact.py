"""Redaction of customer data, driven by the protocol tables.

A message carries customer data when its opcode is marked ``document`` in the tables (its
key and value: mutation, deletion, expiration, prepare, commit, abort, cache transfer, and
any opcode added with that mark), when its shape says its key names a document
(``Shape.document_key``: the key alone), and for every opcode without a layout in the
tables (Get, Set, SaslAuth, ...: key and value) except the few the tables name as clear
(``CLEAR_CLIENT_OPCODES``: HELLO, SelectBucket, ...). Document keys and values become
pseudonyms (:class:`Pseudonyms`) of the same length, so that headers, extras (seqnos, CAS) and
lengths stay valid, equal keys or values stay equal and distinct ones distinct, and every rule
judges the redacted capture as the original (see :func:`value_shape` for what of a value's
shape is kept). Bytes whose meaning is unknown (the body of a message cut by a gap, a header
that cannot be trusted, the value of a message not captured whole) are treated as customer
data and become ``x``.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
import re

from ..analysis.findings import Finding
from ..codec.header import peek
from ..codec.xattr import xattr_problem
from ..protocol import (CLEAR_CLIENT_OPCODES, DATATYPE, DOCUMENT_OPCODES, HEADER_SIZE, OPCODES,
                        REQUEST_MAGICS, RESPONSE_MAGICS, SERVER_MAGICS)

PLACEHOLDER = b"x"
_CLIENT_MAGICS = (REQUEST_MAGICS | RESPONSE_MAGICS) - SERVER_MAGICS
JSON, SNAPPY, XATTR = DATATYPE.bit("json"), DATATYPE.bit("snappy"), DATATYPE.bit("xattr")


_ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789"
_DIGITS = b"0123456789"
# A logical key is spelled from one of four sets, and its pseudonym from the same set: keys
# of letters, digits and -_.: (most keys), other printable ASCII keys, keys of bytes from
# 0x80 only (a collection id without its stop byte, or none), and every other key.
_SAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:"
_PRINTABLE = bytes(range(0x20, 0x7F))
_HIGH = bytes(range(0x80, 0x100))
_ANY = bytes(range(256))
_ROUNDS = 8


def _collection_prefix(key: bytes) -> int:
    """Bytes of the collection id a key starts with: a leb128 number whose stop byte is a
    control byte (0: none). Text never ends that way, so the first bytes of a key like
    "éclair" (0xc3 0xa9 'c', a leb128 number too) are not taken for one."""
    if not key or 0x20 <= key[0] < 0x80:
        return 0
    cut = 0
    while cut < len(key) and key[cut] >= 0x80:
        cut += 1
    return cut + 1 if cut < len(key) and key[cut] < 0x20 else 0


class Pseudonyms:
    """Same-length stand-ins for document keys and values, from a keyed hash whose random
    key is made here and never written: a key (a value) always gets the same pseudonym, two
    keys (two values) never the same one, and none its own.

    A key's pseudonym is a function of the secret and the key alone, so processes that share
    the secret agree: a keyed permutation of the keys of its length spelled from its set
    (``_SAFE``, the rest of printable ASCII, bytes from 0x80, any other; a Feistel network
    over the keys' index, cycle-walking into the set) that moves every key (a step along one
    cycle through all of them). A leading collection id (leb128 whose stop byte is below
    0x20: ids below 32, below 4096 in two bytes, ...) is kept, so that collection rules and
    prefixes stay as they were; a key that is nothing but a collection id names no document
    and is kept.

    A value keeps its shape (:func:`value_shape`), is remembered by its keyed hash (not kept)
    and gets the first stand-in from the hash that no other value has; two distinct values
    share one only when a length has fewer stand-ins than distinct values (one-byte JSON
    values: ten)."""

    def __init__(self, secret: bytes | None = None):
        self._secret = secret or os.urandom(32)
        self._mac = hashlib.blake2b(key=self._secret)
        self._given: dict[bytes, bytes] = {}
        self._values: dict[bytes, int] = {}       # keyed hash of a value -> its attempt
        self._values_taken: set[bytes] = set()    # hashes of the values' stand-ins

    def __call__(self, key: bytes) -> bytes:
        key = bytes(key)
        got = self._given.get(key)
        if got is None:
            if len(self._given) >= 65536:
                self._given.clear()             # a cache: the pseudonym needs no memory
            got = self._given[key] = self._make(key)
        return got

    def _make(self, key: bytes) -> bytes:
        cut = _collection_prefix(key)
        prefix, logical = key[:cut], key[cut:]
        if not logical:
            return key
        if all(c in _SAFE for c in logical):
            alphabet, inside = _SAFE, None
        elif all(c in _PRINTABLE for c in logical):
            alphabet, inside = _PRINTABLE, lambda s: not all(c in _SAFE for c in s)
        elif all(c >= 0x80 for c in logical):
            alphabet, inside = _HIGH, None
        else:                   # (without a prefix of its own, a name must not show one)
            alphabet, inside = _ANY, lambda s: not (all(c in _PRINTABLE for c in s)
                                                    or all(c >= 0x80 for c in s)
                                                    or not cut and _collection_prefix(s))
        base, n = len(alphabet), len(logical)
        size = base ** n
        tweak = b"key:%d:%d:" % (base, n)
        x = 0
        for c in logical:
            x = x * base + alphabet.index(c)
        while True:             # the next key of the cycle, until one of the key's set
            x = self._permute((self._permute(x, size, tweak) + 1) % size, size, tweak,
                              inverse=True)
            name = _spelled(x, alphabet, n)
            if inside is None or inside(name):
                return prefix + name

    def _permute(self, x: int, size: int, tweak: bytes, inverse: bool = False) -> int:
        """A keyed permutation of ``range(size)`` (or its inverse): a Feistel network over
        the smallest even number of bits that holds it, applied until the result is in
        range (cycle walking)."""
        bits = max(2, (size - 1).bit_length())
        half = (bits + 1) // 2
        mask = (1 << half) - 1
        rounds = range(_ROUNDS - 1, -1, -1) if inverse else range(_ROUNDS)
        while True:
            left, right = x >> half, x & mask
            for r in rounds:
                if inverse:
                    left, right = right ^ self._round(r, left, half, tweak), left
                else:
                    left, right = right, left ^ self._round(r, right, half, tweak)
            x = left << half | right
            if x < size:
                return x

    def _round(self, r: int, half_value: int, half: int, tweak: bytes) -> int:
        width = (half + 7) // 8
        if width <= 64:
            mac = self._mac.copy()
            mac.update(tweak + b"%d:" % r + half_value.to_bytes(width, "big"))
            digest = mac.digest()
        else:
            digest = self._stream(tweak + b"%d:" % r + half_value.to_bytes(width, "big"), width)
        return int.from_bytes(digest[:width], "big") & ((1 << half) - 1)

    def _stream(self, seed: bytes, n: int) -> bytes:
        """``n`` bytes of the keyed hash of ``seed`` (SHAKE-256 of the secret and it)."""
        return hashlib.shake_256(self._secret + seed).digest(n)

    def text(self, key: str) -> str:
        """The pseudonym of a key given as text (UTF-8), as text."""
        return self(key.encode("utf-8", "surrogateescape")).decode("utf-8", "replace")

    def digest(self, text: str) -> str:
        """A same-length keyed stand-in for a hex digest of customer bytes (an unkeyed
        hash a report quotes): equal digests stay equal."""
        mac = self._mac.copy()
        mac.update(b"digest:" + text.encode())
        return (mac.hexdigest() * (len(text) // 128 + 1))[:len(text)]

    def value(self, value: bytes, datatype: int = 0) -> bytes:
        """The stand-in of a whole document value with this datatype: its shape
        (:func:`value_shape`) filled from the keyed hash, JSON numbers where JSON is
        wanted, letters and digits elsewhere."""
        value = bytes(value)
        mac = self._mac.copy()
        mac.update(b"value:%d:" % datatype + value)
        tag = mac.digest()
        attempt = self._values.get(tag)
        if attempt is not None:
            return self._value(value, datatype, tag, attempt)
        for attempt in range(1000):
            got = self._value(value, datatype, tag, attempt)
            mark = hashlib.blake2b(got, digest_size=16).digest()
            if got != value and mark not in self._values_taken:
                break
        self._values[tag] = attempt
        self._values_taken.add(mark)
        return got

    def _value(self, value: bytes, datatype: int, tag: bytes, attempt: int) -> bytes:
        stream = self._stream(b"%d:" % attempt + tag, len(value))
        return value_shape(value, datatype, lambda a, b, json: _spell(stream[a:b], json))


def _spelled(x: int, alphabet: bytes, n: int) -> bytes:
    """``x`` as ``n`` digits of ``alphabet`` (the first digit the most significant)."""
    out = bytearray(n)
    for i in range(n - 1, -1, -1):
        x, d = divmod(x, len(alphabet))
        out[i] = alphabet[d]
    return bytes(out)


_AS_LETTERS = bytes(_ALPHABET[b % len(_ALPHABET)] for b in range(256))
_AS_DIGITS = bytes(_DIGITS[b % 10] for b in range(256))


def _spell(digest: bytes, json: bool) -> bytes:
    """Hash bytes as letters and digits, or as a JSON number (no leading zero)."""
    if not json:
        return digest.translate(_AS_LETTERS)
    out = digest.translate(_AS_DIGITS)
    return out if len(out) < 2 else bytes([_DIGITS[1 + digest[0] % 9]]) + out[1:]


def _xs(a: int, b: int, json: bool) -> bytes:
    """Placeholders: ``x``s, or a JSON string of ``x``s where JSON is wanted."""
    if json and b - a >= 2:
        return b'"' + PLACEHOLDER * (b - a - 2) + b'"'
    return (b"0" if json else PLACEHOLDER) * (b - a)


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


def _varint_size(data: bytes) -> int:
    """Bytes of the leb128 varint at the start of ``data`` (0: none is valid)."""
    for i, byte in enumerate(data[:5]):
        if not byte & 0x80:
            return i + 1
    return 0


def value_shape(value: bytes, datatype: int, fill) -> bytes:
    """A stand-in for a whole document value that keeps what kv_engine validates and the
    rules read, its content from ``fill(start, end, json)`` (bytes for ``value[start:end]``,
    valid JSON when ``json``):

    - snappy: the varint that announces the uncompressed length (a number the xattr rule
      reads) is kept, the compressed bytes are filled (the stand-in is not snappy data);
    - xattr (uncompressed) with a blob kv_engine accepts: the blob's lengths are kept, its
      names become distinct ``x``s ending in a letter count (a system name keeping its ``_``
      or ``$``), its values JSON of the same length, so the blob stays valid; the body after
      it is filled as JSON when the datatype says JSON. A refused blob is filled whole, which
      keeps it refused (its length field becomes at least 0x30303030);
    - otherwise the value is filled whole, as JSON when the datatype says JSON.
    """
    if datatype & SNAPPY:
        cut = _varint_size(value)
        return value[:cut] + fill(cut, len(value), False)
    json = bool(datatype & JSON)
    if not datatype & XATTR or xattr_problem(value) is not None:
        return fill(0, len(value), json)
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
        at = pos + 4 + len(name) + 1
        out += value[pos:pos + 4] + name + b"\0" + fill(at, at + len(val), True) + b"\0"
        pos, count = pos + 4 + n, count + 1
    return bytes(out) + fill(len(out), len(value), json)


def value_stand_in(data: bytes,
                   pseudonyms: Pseudonyms | None = None) -> tuple[int, int, bytes] | None:
    """(start, end, stand-in) for the value of a whole document message: its pseudonym,
    given ``pseudonyms``; else, for a value whose datatype says xattr or snappy, its shape
    (:func:`value_shape`) with ``x`` placeholders. None otherwise (``x``s)."""
    if len(data) < HEADER_SIZE:
        return None
    h = peek(data)
    end = HEADER_SIZE + h.bodylen
    start = HEADER_SIZE + h.framing_len + h.extlen + h.keylen
    if not start < end <= len(data) or not document_parts(h.magic, h.opcode)[1]:
        return None
    value = data[start:end]
    if pseudonyms is not None:
        return start, end, pseudonyms.value(value, h.datatype)
    if not h.datatype & (SNAPPY | XATTR):
        return None
    return start, end, value_shape(value, h.datatype, _xs)


def redact_pdu(data: bytes | None, pseudonyms: Pseudonyms | None = None) -> bytes | None:
    """The message with its customer data replaced by placeholders (its key and value by
    their pseudonyms, given ``pseudonyms``); bytes after the header of a message with an unknown
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
    stand_in = value_stand_in(data, pseudonyms)
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


def scrub_quoted(text: str, document: bytes, stand_ins=()) -> str:
    """``text`` with every quoted string (``'k1'``, ``b'_sync'``) whose bytes occur in
    ``document`` replaced by ``x``s inside its quotes, but for the ``stand_ins`` (the
    pseudonyms :func:`scrub` wrote: their bytes may occur in the document by chance)."""
    if not document:
        return text

    def sub(m: re.Match) -> str:
        token = m.group(0)
        try:
            value = ast.literal_eval(token)
        except (ValueError, SyntaxError):
            return token
        if value in stand_ins:
            return token
        raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
        if not raw or raw not in document:
            return token
        head = 2 if token.startswith("b") else 1
        return token[:head] + "x" * (len(token) - head - 1) + token[-1]
    return _QUOTED.sub(sub, text)


def _redact_value(value, secrets, document: bytes = b""):
    if isinstance(value, str):
        return scrub_quoted(scrub(value, secrets), document, set(secrets.values()))
    if isinstance(value, dict):
        return {k: _redact_value(v, secrets, document) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redact_value(v, secrets, document) for v in value)
    return value


_DIFFERENCE = re.compile(r"'([^']*)' → '([^']*)'")
_SIZED_DIGEST = re.compile(r"^(\d+ bytes )([0-9a-f]+)$")


def _difference(name: str, text: str, pseudonyms: Pseudonyms | None) -> str:
    """A relay finding's ``key`` or ``value`` difference between its legs (``'6b31' →
    '6b32'``: a key's hex, or the hash of a long one; ``'34 bytes <hash>' → ...``) with
    each side's customer bytes as their stand-ins: a key's hex as its pseudonym's hex, a
    hash keyed; x's without ``pseudonyms``. Equal sides stay equal, distinct distinct."""
    def side(text: str) -> str:
        sized = _SIZED_DIGEST.match(text)
        head, digits = sized.groups() if sized else ("", text)
        if pseudonyms is None:
            return head + "x" * len(digits)
        if name == "key" and not sized and len(digits) % 2 == 0:
            try:
                return pseudonyms(bytes.fromhex(digits)).hex()
            except ValueError:
                pass
        return head + pseudonyms.digest(digits)
    return _DIFFERENCE.sub(lambda m: f"'{side(m[1])}' → '{side(m[2])}'", text)


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
        if name in ("key", "value") and isinstance(value, str) and " → " in value:
            fields[name] = new = _difference(name, value, pseudonyms)
            if new != value:
                secrets[value] = new
            continue
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
