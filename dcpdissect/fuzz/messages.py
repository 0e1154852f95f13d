"""Well-framed DCP messages drawn from the protocol tables, for the fuzzer.

Every opcode of the tables is drawn, as a request and as a response, with each extras
layout its shape allows, the value layout those extras (or the status) select, a key and
a value when its shape asks for them, one of its datatypes, and fields filled from their
flag and value tables: an opcode added to the tables is fuzzed from that day on.

On top of the tables, :class:`Stream` keeps a grammar of realistic sequences: a stream
request resumes from the last seqno with the stream's uuid and is answered with a failover
log or a rollback, a marker opens the snapshot after the last one, items take the next
seqnos inside it. One field in five is left to chance instead, so that the sequences also
break the rules. Every draw comes from the ``random.Random`` given.
"""

from __future__ import annotations

import random
import struct

from ..codec import encode
from ..codec.keys import leb128
from ..codec.layouts import pack
from ..protocol import (
    DATATYPE_ALL, DCP_OPCODES, OPCODES, SNAPSHOT_FLAGS, STATUS, STATUS_SUCCESS,
    Field, Layout, Opcode, Presence, Sender, Shape, opcode_code,
)

SEQNOS = (0, 1, 2, 3, 4, 5, 7, 10, 100, 2**63, 2**64 - 1, 2**64 - 2)
UUIDS = (0, 1, 2, 2**63)
JSON_VALUES = (b'{"sid":7}', b'{"sid":[7]}', b'{"sid":{"a":1}}', b'{"sid":"7"}', b'{"sid":70000}',
               b'{"sid":-1}', b'{"sid":1.5}', b'{"sid":true}', b'[1]', b'"x"', b'null', b'{',
               b'{"purge_seqno":"12"}', b'{"purge_seqno":1e999}', b'{"purge_seqno":[1]}',
               b'{"purge_seqno":"-5"}', b'{"collections":["0"]}', b'{"sid":' * 3000,
               b'{"scope":"\\ud800"}', b'\xff\xfe')
TEXT_VALUES = (b"true", b"false", b"20", b"10485760", b"", b"\xff")
DOCUMENT_KEYS = tuple(f"k{n}".encode() for n in range(5))     # few: keys repeat in a snapshot
NAME_KEYS = (b"enable_noop", b"set_noop_interval", b"connection_buffer_size",
             b"enable_stream_id", b"replication:a->b:default", b"_collection")
XATTRS = ((b"_sync", b'{"rev":"1-a"}'), (b"meta", b"1"), (b"$doc", b'"v"'), (b"", b"x"))
FOLLOWS_GRAMMAR = 0.8       # share of fields that take the stream's value
PRESENT = {Presence.REQUIRED: 0.97, Presence.OPTIONAL: 0.5, Presence.FORBIDDEN: 0.03}

MARKER, STREAM_REQ = opcode_code("DcpSnapshotMarker"), opcode_code("DcpStreamReq")
MEMORY, DISK, CHECKPOINT = (SNAPSHOT_FLAGS.bit(n) for n in ("memory", "disk", "checkpoint"))
MARKER_FLAGS = (MEMORY, DISK, MEMORY | CHECKPOINT, DISK | CHECKPOINT)


def seqno(rng: random.Random) -> int:
    return rng.choice(SEQNOS) if rng.random() < 0.7 else rng.randrange(2**64)


def _draws(opcodes: tuple[Opcode, ...]) -> tuple[list[tuple[Opcode, bool]], list[int]]:
    """Every (opcode, request?) pair with its weight: stream items most, then the other
    stream messages, then the rest; responses less, those with a body more than others."""
    pairs, weights = [], []
    for op in opcodes:
        pairs.append((op, True))
        weights.append(10 if op.item else 4 if op.stream else 2)
        pairs.append((op, False))
        weights.append(2 if op.response != Shape() else 1)
    return pairs, weights


DRAWS, WEIGHTS = _draws(DCP_OPCODES)


class Stream:
    """What the messages of one vbucket have said so far (the grammar's state)."""

    def __init__(self, rng: random.Random):
        self.uuid = rng.choice(UUIDS)
        self.seqno = rng.choice((0, 0, 1, 100))       # the last seqno sent
        self.end = self.seqno                         # the end of the open snapshot
        self.requested = self.answered = False

    def draw(self, rng: random.Random) -> tuple[Opcode, bool]:
        """The next (opcode, request?): the stream's next step half of the time, else any."""
        if rng.random() < 0.5:
            if not self.requested:
                return OPCODES[STREAM_REQ], True
            if not self.answered:
                return OPCODES[STREAM_REQ], False
            if self.seqno >= self.end:
                return OPCODES[MARKER], True
        return rng.choices(DRAWS, WEIGHTS)[0]

    def hints(self, rng: random.Random, op: Opcode, request: bool) -> dict[str, int]:
        """Field values that continue the stream (by field name)."""
        if op.code == STREAM_REQ and request:
            return dict(start_seqno=self.seqno, end_seqno=rng.choice((2**64 - 1, self.seqno + 10)),
                        vbucket_uuid=self.uuid, snap_start_seqno=self.seqno,
                        snap_end_seqno=self.seqno, flags=0)
        if op.code == STREAM_REQ:
            return dict(vbucket_uuid=self.uuid, seqno=self.seqno,
                        rollback_seqno=rng.randrange(self.seqno + 1))
        if op.code == MARKER:
            start = self.seqno + 1
            end = start + rng.randrange(6)
            return dict(start_seqno=start, end_seqno=end, flags=rng.choice(MARKER_FLAGS),
                        max_visible_seqno=end, high_completed_seqno=0, purge_seqno=0,
                        high_prepared_seqno=0)
        hints = {}
        if op.seqno_field:
            hints = {"prepared_seqno": max(self.seqno - rng.randrange(2), 1),
                     "rev_seqno": rng.randrange(1, 4)}
            hints[op.seqno_field] = self.seqno + 1 if op.item else max(self.end, self.seqno + 1)
        return hints

    def sent(self, op: Opcode, request: bool, fields: dict[str, int]) -> None:
        """Move the stream on by what a message carried."""
        if op.code == STREAM_REQ:
            if request:
                self.requested = True
                self.seqno = self.end = fields.get("start_seqno", self.seqno)
            else:
                self.answered = True
        elif op.code == MARKER and request and "end_seqno" in fields:
            self.end = fields["end_seqno"]
            self.seqno = max(fields.get("start_seqno", 1) - 1, 0)
        elif op.seqno_field in fields:
            self.seqno = fields[op.seqno_field]


def _field(rng: random.Random, f: Field, hints: dict[str, int]) -> int:
    top = (1 << 8 * f.width) - 1
    if f.name in hints and rng.random() < FOLLOWS_GRAMMAR:
        return hints[f.name] & top
    if f.flags is not None and rng.random() < 0.8:
        value = 0
        for bit in f.flags.bits:
            if rng.random() < 0.3:
                value |= bit
        return value
    if f.names is not None and rng.random() < 0.8:
        return rng.choice(tuple(f.names.values))
    if f.name.endswith("seqno"):
        return seqno(rng) & top
    return rng.choice((0, 0, 0, 1, 2, top, rng.randrange(top + 1)))


def _fields(rng: random.Random, layout: Layout, hints: dict[str, int]) -> dict[str, int]:
    return {f.name: _field(rng, f, hints) for f in layout.fields}


def _selectable(layout: Layout, extras: Layout | None, request: bool) -> bool:
    """Whether the value layout's conditions can hold with these extras."""
    names = {f.name for f in extras.fields} if extras else set()
    return all(k in names or (k == "status" and not request) for k, _ in layout.when)


def _xattrs(rng: random.Random) -> bytes:
    pairs = [k + b"\0" + v + b"\0" for k, v in rng.sample(XATTRS, rng.randint(1, 2))]
    blob = b"".join(struct.pack(">I", len(p)) + p for p in pairs)
    return struct.pack(">I", len(blob)) + blob


def _snappy(data: bytes) -> bytes:
    """``data`` (at most 60 bytes) as one snappy literal: length varint, tag, bytes."""
    return bytes((len(data), (len(data) - 1) << 2)) + data if data else b"\0"


def _document(rng: random.Random, datatype: int, seq: int) -> bytes:
    body = rng.choice((b"{}", b'{"a":1}', b'{"seq":%d}' % seq, rng.randbytes(rng.randrange(1, 40))))
    if datatype & 0x04 and rng.random() < 0.9:
        body = _xattrs(rng) + body
    if datatype & 0x02 and rng.random() < 0.9:
        body = _snappy(body[:60])
    return body


def _value(rng: random.Random, op: Opcode, shape: Shape, datatype: int, seq: int) -> bytes:
    """A value the tables do not lay out, by its kind."""
    if shape.value_kind == "json":
        return rng.choice(JSON_VALUES)
    if shape.value_kind == "text":
        return rng.choice(TEXT_VALUES)
    if shape.value_kind == "records":
        return rng.randbytes(max(0, shape.value_min + rng.randrange(-2, 64)))
    value = _document(rng, datatype, seq) if op.document else rng.randbytes(rng.randrange(1, 24))
    if len(value) < shape.value_min and rng.random() < 0.9:
        value += bytes(shape.value_min - len(value))
    return value


def _key(rng: random.Random, shape: Shape) -> bytes:
    if not shape.document_key:
        return rng.choice(NAME_KEYS)
    key = rng.choice(DOCUMENT_KEYS)
    if rng.random() < 0.25:                        # a collection-aware connection's key
        key = leb128(rng.choice((0, 8, 0x88))) + key
    return key


def _datatype(rng: random.Random, shape: Shape, value: bool) -> int:
    if rng.random() < 0.05:
        return rng.randrange(256)
    allowed = sorted(DATATYPE_ALL if shape.datatypes is None else shape.datatypes)
    if value and shape.value_kind == "json" and 1 in allowed:
        return 1
    return rng.choice(allowed)


def frame(rng: random.Random, op: Opcode, request: bool, hints: dict[str, int], vbucket: int,
          opaque: int) -> tuple[bytes, dict[str, int]]:
    """One message of ``op`` (its request or response shape) and the fields it carries."""
    shape = op.request if request else op.response
    extras = rng.choice(shape.extras) if shape.extras and rng.random() < 0.97 else None
    fields = _fields(rng, extras, hints) if extras else {}
    status = STATUS_SUCCESS if request or rng.random() < 0.8 else rng.choice(tuple(STATUS.values))
    with_value = rng.random() < PRESENT[extras.value if extras and extras.value else shape.value]
    layouts = [lay for lay in shape.values if _selectable(lay, extras, request)]
    value = b""
    if with_value and layouts:
        layout = rng.choice(layouts)
        for k, v in layout.when:
            if k == "status":
                status = v
            else:
                fields[k] = v
        if layout.repeated:
            entries = [_fields(rng, layout, hints if n == 0 else {}) for n in range(rng.randrange(5))]
            value = b"".join(pack(layout, e) for e in entries)
        else:
            value_fields = _fields(rng, layout, hints)
            value = pack(layout, value_fields)
            fields.update(value_fields)
    datatype = _datatype(rng, shape, with_value)
    if with_value and not layouts:
        value = _value(rng, op, shape, datatype, hints.get(op.seqno_field, 0))
    key = _key(rng, shape) if rng.random() < PRESENT[shape.key] else b""
    cas = {Presence.REQUIRED: rng.randrange(1, 2**64),
           Presence.FORBIDDEN: 0 if rng.random() < 0.97 else 1,
           Presence.OPTIONAL: rng.choice((0, 1, 0x17A0000000000000))}[shape.cas]
    sid = rng.choice((7, 0)) if op.stream and rng.random() < 0.25 else None
    return encode(op.code, request=request, vbucket=vbucket, status=status, opaque=opaque,
                  cas=cas, datatype=datatype, key=key, value=value,
                  extras=pack(extras, fields) if extras else b"", stream_id=sid), fields


def _direction(rng: random.Random, op: Opcode, request: bool) -> int:
    """0 for the client (the consumer), 1 for the server (the producer)."""
    sender = {Sender.CONSUMER: 0, Sender.PRODUCER: 1}.get(op.sender, rng.randrange(2))
    return sender if request else 1 - sender


def _hello(rng: random.Random, opaque: int) -> bytes:
    """A HELLO (outside the DCP tables) with a few random features."""
    feats = struct.pack(">3H", *(rng.randrange(0x20) for _ in range(3)))
    return encode(opcode_code("Hello"), key=b"f", value=feats, opaque=opaque,
                  request=rng.random() < 0.5)


def message(rng: random.Random, stream: Stream, vbucket: int, opaque: int) -> tuple[int, bytes]:
    """(direction, frame) of the next message of a conversation on ``stream``."""
    if rng.random() < 0.03:
        return rng.randrange(2), _hello(rng, opaque)
    op, request = stream.draw(rng)
    data, fields = frame(rng, op, request, stream.hints(rng, op, request), vbucket, opaque)
    stream.sent(op, request, fields)
    return _direction(rng, op, request), data


def any_message(rng: random.Random) -> bytes:
    """One message of any opcode of the tables, outside a conversation."""
    op, request = rng.choices(DRAWS, WEIGHTS)[0]
    stream = Stream(rng)
    return frame(rng, op, request, stream.hints(rng, op, request), rng.randrange(1024),
                 rng.randrange(1 << 32))[0]
