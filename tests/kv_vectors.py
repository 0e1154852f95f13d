"""kv_engine's DCP validator test cases rebuilt as byte vectors with the server's verdict.

An independent oracle for the analyzer and the Lua plugin.  Source: couchbase/kv_engine
commit eba4298981505cdc3371abbfb8be213236f7875a:

* tests/mcbp/mcbp_dcp_test.cc: every validate()/validate_error_context() call of every
  TEST_P, as one :class:`KvCase` in :data:`CASES` (fixtures in tests/mcbp/mcbp_test.cc);
  the DcpSnapshotMarkerCodecTest round trips as :data:`CODEC_CASES`;
* protocol/mcbp/request_test.cc: the Request_ParseFrameExtras* and Request_GetDurationSpec*
  framing extras as :data:`FRAME_EXTRAS_CASES`, each with the verdict of
  daemon/mcbp_validators.cc (parseFrameExtras) when put on a DcpNoop (magic 0x08);
* layouts from include/memcached/protocol_binary.h, include/mcbp/protocol/framebuilder.h,
  dcp_cache_transfer_buffer.h, xattr/blob.cc, utilities/durability_spec.cc.

How the bytes are made: :class:`_Blob` replays each test on a zero-filled buffer (4096
bytes, 2 MiB for DcpXattrValidatorTest) with the same header writes and the same
RequestBuilder moves (setExtras/setKey/setValue move what follows and fix bodylen), and the
frame is the first 24 + bodylen bytes.  One change: most fixtures never write the opcode
byte (it stays 0) because ValidatorTest::validate(opcode, ...) picks the validator from its
argument; here byte 1 always holds that opcode so that a capture is decoded the same way.
Names are gtest's: ``testing::PrintToStringParamName()`` prints a bool param as
``true``/``false`` (``CollectionsOnOff/DcpOpenValidatorTest.InvalidExtlen/true``).

The verdicts: ``status`` is what the test expects.  ValidatorTest::validate() enables
JSON/XATTR/SNAPPY and unordered execution, so a message that passes every structural check
gets NotSupported from verify_common_dcp_restrictions ("DCP on connections with unordered
execution is not supported"; the initial bucket does have a DCP interface): ``accept`` is
True for those, since on a DCP connection the validator returns Success.  validate_error_context()
enables neither (``datatypes`` is empty then, e.g. the whole DcpMutation suite).  The mutation
suite's connection was never opened as DCP (``opened`` False), so even its correct message is
rejected ("The command can only be sent on a DCP connection").  The DcpOpen suite is also
``opened`` False: a DcpOpen is only valid on a connection that is not DCP yet.  The verdicts
are the validator's: authentication, RBAC and bucket selection are out of scope.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

KV_COMMIT = "eba4298981505cdc3371abbfb8be213236f7875a"
DCP_TEST = "tests/mcbp/mcbp_dcp_test.cc"
REQUEST_TEST = "protocol/mcbp/request_test.cc"

# opcodes (include/mcbp/protocol/opcode.h)
HELLO = 0x1F
DCP_OPEN, DCP_ADD_STREAM, DCP_CLOSE_STREAM, DCP_STREAM_REQ = 0x50, 0x51, 0x52, 0x53
DCP_GET_FAILOVER_LOG, DCP_STREAM_END, DCP_SNAPSHOT_MARKER, DCP_MUTATION = 0x54, 0x55, 0x56, 0x57
DCP_DELETION, DCP_EXPIRATION, DCP_SET_VBUCKET_STATE, DCP_NOOP = 0x58, 0x59, 0x5B, 0x5C
DCP_BUFFER_ACK, DCP_CONTROL, DCP_CACHE_TRANSFER = 0x5D, 0x5E, 0x66
OPCODE_NAMES = {DCP_MUTATION: "DCP_MUTATION", DCP_DELETION: "DCP_DELETION",
                DCP_EXPIRATION: "DCP_EXPIRATION"}

# datatype bits
RAW, JSON, SNAPPY, XATTR = 0x00, 0x01, 0x02, 0x04
ALL_DATATYPES = ("JSON", "XATTR", "SNAPPY")  # what ValidatorTest::validate() enables

# DcpCacheTransferBuffer::minSize() = sizeof(DcpCacheTransferPayload) (40, static_assert'ed;
# the fixture's comment still says 39) + 2
CACHE_TRANSFER_MIN = 40 + 2
PRIVILEGED_BYTES = 1 << 20   # cb::limits::PrivilegedBytes

ACCEPTED = ("all checks pass; NotSupported is verify_common_dcp_restrictions' 'DCP on "
            "connections with unordered execution is not supported' (ValidatorTest::validate "
            "sets unordered execution): Success on a DCP connection")


@dataclass(frozen=True)
class KvCase:
    name: str            # gtest name, '#i' = i-th validate() call of the TEST
    source: str          # file:line of the EXPECT
    frame: bytes = field(repr=False)
    collections: bool    # connection.setCollectionsSupported()
    datatypes: tuple[str, ...]  # HELLO datatypes enabled on the connection
    opened: bool         # the connection was opened with DcpOpen (a consumer)
    status: str          # kv_engine's status
    accept: bool         # verdict on a DCP connection
    why: str

    @property
    def dcp_connection(self) -> bool:
        return self.opened

    @property
    def suite(self) -> str:
        return self.name.split("/")[1 if "/" in self.name else 0].split(".")[0]

    @property
    def opcode(self) -> int:
        return self.frame[1]


@dataclass(frozen=True)
class FrameExtrasCase:
    name: str
    source: str
    framing_extras: bytes
    parsed: tuple[tuple[int, int], ...] | None  # (id, data length) per entry; None = throws
    parser_throws: str | None
    durability: str | None  # Request::getDurabilityRequirements() result, if the test asks
    kv: KvCase             # the framing extras on a DcpNoop (magic 0x08), opened connection


@dataclass(frozen=True)
class CodecCase:
    name: str
    source: str
    marker: dict            # DcpSnapshotMarker ctor arguments (None = std::nullopt)
    encoder_throws: bool
    version: str | None     # "2.0" / "2.2" picked by DcpSnapshotMarker::encode
    frame: bytes = field(repr=False)
    decoded: dict | None    # DcpSnapshotMarker::decode of the frame


# --- byte helpers ------------------------------------------------------------------------

def frame(opcode: int, extras: bytes = b"", key: bytes = b"", value: bytes = b"", *,
          datatype: int = 0, magic: int = 0x80, framing: bytes = b"", vbucket: int = 0,
          status: int | None = None, opaque: int = 0, cas: int = 0,
          bodylen: int | None = None) -> bytes:
    """One MCBP frame; alt magics (0x08/0x18) carry the framing extras length in byte 2."""
    body = framing + extras + key + value
    if magic in (0x08, 0x18):
        lens = bytes([len(framing), len(key)])
    else:
        lens = struct.pack(">H", len(key))
    spec = vbucket if status is None else status
    hdr = bytes([magic, opcode]) + lens + struct.pack(
        ">BBHIIQ", len(extras), datatype, spec, len(body) if bodylen is None else bodylen,
        opaque, cas)
    return hdr + body


def leb128(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def snappy_literal(data: bytes) -> bytes:
    """Snappy encoding of ``data`` as the C++ library writes it when nothing repeats."""
    grams = [data[i:i + 4] for i in range(len(data) - 3)]
    if len(set(grams)) != len(grams):
        raise NotImplementedError("input has a 4-byte repeat: snappy would emit a copy")
    out = leb128(len(data))
    if not data:
        return out
    n = len(data) - 1
    if n < 60:
        return out + bytes([n << 2]) + data
    size = (n.bit_length() + 7) // 8
    return out + bytes([(59 + size) << 2]) + n.to_bytes(size, "little") + data


def xattr_blob(pairs) -> bytes:
    """cb::xattr::Blob encoding: u32 total, then per pair u32 len, key NUL value NUL."""
    body = b"".join(struct.pack(">I", len(k) + len(v) + 2) + k + b"\0" + v + b"\0"
                    for k, v in pairs)
    return struct.pack(">I", len(body)) + body if body else b""


def too_large_system_xattrs() -> bytes:
    """SystemXattrTooLarge's blob: '_foo_N' keys until the blob exceeds PrivilegedBytes + 1."""
    value = b'{"' + b"c" * 2048 + b'"}'
    pairs, size, n = [], 0, 0
    while size <= PRIVILEGED_BYTES + 1:
        n += 1
        key = b"_foo_%d" % n
        pairs.append((key, value))
        size = (size or 4) + 4 + len(key) + 1 + len(value) + 1
    return xattr_blob(pairs)


class _Blob:
    """The test's backing store: header fields plus RequestBuilder's moving setters."""

    def __init__(self, size: int = 4096) -> None:
        self.b = bytearray(size)
        self.reset()

    def reset(self) -> None:  # memset(&request, 0, 24) / RequestBuilder(buffer)
        self.b[:24] = bytes(24)
        self.b[0] = 0x80

    def _u(self, off, fmt, v=None):
        if v is None:
            return struct.unpack_from(fmt, self.b, off)[0]
        struct.pack_into(fmt, self.b, off, v)

    alt = property(lambda s: s.b[0] in (0x08, 0x18))
    felen = property(lambda s: s.b[2] if s.alt else 0)
    keylen = property(lambda s: s.b[3] if s.alt else s._u(2, ">H"))
    extlen = property(lambda s: s.b[4])
    bodylen = property(lambda s: s._u(8, ">I"))

    def set(self, *, extlen=None, keylen=None, bodylen=None, datatype=None, cas=None,
            opcode=None):
        if opcode is not None:
            self.b[1] = opcode
        if keylen is not None:
            if self.alt:
                self.b[3] = keylen
            else:
                self._u(2, ">H", keylen)
        if extlen is not None:
            self.b[4] = extlen
        if datatype is not None:
            self.b[5] = datatype
        if bodylen is not None:
            self._u(8, ">I", bodylen)
        if cas is not None:
            self._u(16, ">Q", cas)
        return self

    def _valuelen(self) -> int:
        return self.bodylen - self.felen - self.extlen - self.keylen

    def _move_insert(self, off: int, old: int, new: bytes, size: int) -> None:
        if 24 + self.bodylen - old + len(new) > len(self.b):
            raise ValueError("FrameBuilder::checkSize: too big to fit in buffer")
        if size > 0 and old != len(new):  # memmove of what follows the field
            self.b[off + len(new):off + len(new) + size] = self.b[off + old:off + old + size]
        self.b[off:off + len(new)] = new
        self._u(8, ">I", self.bodylen - old + len(new))

    def set_extras(self, val: bytes):
        self._move_insert(24 + self.felen, self.extlen, val, self.keylen + self._valuelen())
        self.b[4] = len(val)
        return self

    def set_key(self, val: bytes):
        self._move_insert(24 + self.felen + self.extlen, self.keylen, val, self._valuelen())
        return self.set(keylen=len(val))

    def set_value(self, val: bytes):
        self._move_insert(24 + self.felen + self.extlen + self.keylen, self._valuelen(), val, 0)
        return self

    def frame(self, opcode: int) -> bytes:
        out = bytearray(self.b[:24 + self.bodylen])
        out[1] = opcode
        return bytes(out)


# --- DCP validator cases (tests/mcbp/mcbp_dcp_test.cc) -------------------------------------

CASES: list[KvCase] = []


def _pname(p: bool) -> str:
    return "true" if p else "false"


def _add(suite, test, param, i, line, blob_or_frame, opcode, status, why, *, coll,
         datatypes=ALL_DATATYPES, opened=True, prefix="CollectionsOnOff"):
    data = blob_or_frame.frame(opcode) if isinstance(blob_or_frame, _Blob) else blob_or_frame
    fe, ext, kl, bl = (data[2] if data[0] in (8, 0x18) else 0), data[4], \
        (data[3] if data[0] in (8, 0x18) else struct.unpack_from(">H", data, 2)[0]), \
        struct.unpack_from(">I", data, 8)[0]
    if fe + ext + kl > bl:
        why += (" [header invalid: extras+key > bodylen; a live server closes the connection in "
                "LibeventConnection::isPacketAvailable first]")
    name = f"{prefix}/{suite}.{test}/{param}" + ("" if i is None else f"#{i}")
    accept = status == "NotSupported"
    CASES.append(KvCase(name, f"{DCP_TEST}:{line}", data, coll, tuple(datatypes), opened,
                        status, accept, why))


def _table(suite, opcode, func, setup, rows, *, opened=True):
    """rows: (test, line, header changes, status, why); both CollectionsOnOff params."""
    for p in (False, True):
        for test, line, changes, status, why in rows:
            blob = setup(_Blob())
            blob.set(**changes)
            _add(suite, test, _pname(p), None, line, blob, opcode, status,
                 f"mcbp_validators.cc {func}: {ACCEPTED if status == 'NotSupported' else why}",
                 coll=p, opened=opened)


def _ext(n, body=None):
    return lambda b: b.set(extlen=n, bodylen=n if body is None else body)


NO_EXTRAS = "verify_header: Request must not include extras"
NO_KEY = "verify_header: Request must not include key"
NO_VALUE = "verify_header: Request must not include value"
BAD_DT = "verify_header: Request datatype invalid (datatype mask is RAW only)"


def _simple_suites() -> None:
    def open_setup(b):
        b.b[:] = bytes(len(b.b))
        return b.reset() or b.set(extlen=8, keylen=2, bodylen=10)
    _table("DcpOpenValidatorTest", DCP_OPEN, "dcp_open_validator", open_setup, [
        ("CorrectMessage", 54, {}, "NotSupported", ""),
        ("InvalidExtlen", 60, dict(extlen=9, bodylen=11), "Einval",
         "verify_header: Request must include extras of length 8"),
        ("InvalidKeylen", 66, dict(keylen=0, bodylen=8), "Einval",
         "verify_header: Request must include key"),
        ("InvalidDatatype", 71, dict(datatype=JSON), "Einval", "datatype should be set to RAW"),
        ("Value", 76, dict(bodylen=30), "Einval",
         "datatype should be set to JSON for non-empty value"),
    ], opened=False)

    four = [  # AddStream / StreamEnd / BufferAck: 4 bytes of extras
        ("CorrectMessage", 0, {}, "NotSupported", ""),
        ("InvalidExtlen", 6, dict(extlen=5, bodylen=5), "Einval",
         "verify_header: Request must include extras of length 4"),
        ("InvalidKeylen", 12, dict(keylen=4, bodylen=8), "Einval", NO_KEY),
        ("InvalidDatatype", 17, dict(datatype=JSON), "Einval", BAD_DT),
        ("InvalidBody", 22, dict(bodylen=12), "Einval", NO_VALUE),
    ]
    for suite, opcode, func, first in (
            ("DcpAddStreamValidatorTest", DCP_ADD_STREAM, "dcp_add_stream_validator", 98),
            ("DcpStreamEndValidatorTest", DCP_STREAM_END, "dcp_stream_end_validator", 378),
            ("DcpBufferAckValidatorTest", DCP_BUFFER_ACK,
             "dcp_buffer_acknowledgement_validator", 997)):
        _table(suite, opcode, func, _ext(4), [(t, first + d, c, s, w) for t, d, c, s, w in four])

    empty = [  # CloseStream / GetFailoverLog / Noop: header only
        ("CorrectMessage", 0, {}, "NotSupported", ""),
        ("InvalidExtlen", 6, dict(extlen=5, bodylen=5), "Einval", NO_EXTRAS),
        ("InvalidKeylen", 12, dict(keylen=4, bodylen=4), "Einval", NO_KEY),
        ("InvalidDatatype", 17, dict(datatype=JSON), "Einval", BAD_DT),
        ("InvalidBody", 22, dict(bodylen=12), "Einval", NO_VALUE),
    ]
    for suite, opcode, func, first in (
            ("DcpCloseStreamValidatorTest", DCP_CLOSE_STREAM, "dcp_close_stream_validator", 137),
            ("DcpGetFailoverLogValidatorTest", DCP_GET_FAILOVER_LOG,
             "dcp_get_failover_log_validator", 177),
            ("DcpNoopValidatorTest", DCP_NOOP, "dcp_noop_validator", 953)):
        _table(suite, opcode, func, lambda b: b,
               [(t, first + d, c, s, w) for t, d, c, s, w in empty])

    _table("DcpControlValidatorTest", DCP_CONTROL, "dcp_control_validator",
           lambda b: b.set(keylen=4, bodylen=8), [
               ("CorrectMessage", 1041, {}, "NotSupported", ""),
               ("InvalidExtlen", 1047, dict(extlen=5, bodylen=13), "Einval", NO_EXTRAS),
               ("InvalidKeylen", 1053, dict(keylen=0, bodylen=4), "Einval",
                "verify_header: Request must include key"),
               ("InvalidDatatype", 1058, dict(datatype=JSON), "Einval", BAD_DT),
               ("InvalidBody", 1063, dict(bodylen=4), "Einval",
                "verify_header: Request must include value"),
           ])

    m = CACHE_TRANSFER_MIN
    _table("DcpCacheTransferValidatorTest", DCP_CACHE_TRANSFER, "dcp_cache_transfer_validator",
           lambda b: b.set(extlen=0, keylen=0, bodylen=m), [
               ("CorrectMessage", 1089, {}, "NotSupported", ""),
               ("ValueTooSmall", 1094, dict(bodylen=m - 1), "Einval",
                f"Value length {m - 1} is too short for DCP Cache Transfer minimum {m}"),
               ("InvalidExtlen", 1100, dict(extlen=1, bodylen=m + 1), "Einval", NO_EXTRAS),
               ("InvalidKeylen", 1106, dict(keylen=4, bodylen=m + 4), "Einval", NO_KEY),
               ("InvalidDatatype", 1111, dict(datatype=JSON), "Einval", BAD_DT),
               ("InvalidCas", 1116, dict(cas=12345), "Einval",
                "verify_header: Request CAS must not be set"),
           ])

    _table("DcpSetVbucketStateValidatorTest", DCP_SET_VBUCKET_STATE,
           "dcp_set_vbucket_state_validator", lambda b: _ext(1)(b).set_extras(b"\x01"), [
               ("CorrectMessage", 892, {}, "NotSupported", ""),
               ("InvalidExtlen", 909, dict(extlen=5, bodylen=5), "Einval",
                "verify_header: Request must include extras of length 1"),
               ("InvalidKeylen", 915, dict(keylen=4, bodylen=5), "Einval", NO_KEY),
               ("InvalidDatatype", 920, dict(datatype=JSON), "Einval", BAD_DT),
               ("InvalidBody", 925, dict(bodylen=12), "Einval", NO_VALUE),
           ])
    for p in (False, True):  # the loops of LegalValues and IllegalValues
        blob = _ext(1)(_Blob()).set_extras(b"\x01")
        for i, state in enumerate(range(1, 5)):
            blob.set_extras(bytes([state]))
            _add("DcpSetVbucketStateValidatorTest", "LegalValues", _pname(p), i, 902, blob,
                 DCP_SET_VBUCKET_STATE, "NotSupported",
                 f"mcbp_validators.cc dcp_set_vbucket_state_validator: state {state}; {ACCEPTED}",
                 coll=p)
        blob = _ext(1)(_Blob()).set_extras(b"\x01")
        for i, (state, line) in enumerate(((5, 933), (0, 936))):
            blob.set_extras(bytes([state]))
            _add("DcpSetVbucketStateValidatorTest", "IllegalValues", _pname(p), i, line, blob,
                 DCP_SET_VBUCKET_STATE, "Einval", "mcbp_validators.cc "
                 f"dcp_set_vbucket_state_validator: Request body state invalid ({state})", coll=p)


# DcpAddStreamFlag (include/mcbp/protocol/dcp_add_stream_flags.h)
TAKEOVER, DISK_ONLY, TO_LATEST, NO_VALUE_FLAG = 0x1, 0x2, 0x4, 0x8
ACTIVE_VB_ONLY, STRICT_VB_UUID, FROM_LATEST, IGNORE_PURGED, CACHE_TRANSFER = \
    0x10, 0x20, 0x40, 0x80, 0x100
STREAM_FLAGS_MASK = 0x1F7  # every defined flag but NoValue


def _stream_req() -> None:
    suite, func = "DcpStreamReqValidatorTest", "mcbp_validators.cc dcp_stream_req_validator"
    setup = _ext(48)
    _table(suite, DCP_STREAM_REQ, "dcp_stream_req_validator", setup, [
        ("CorrectMessage", 231, {}, "NotSupported", ""),
        ("InvalidExtlen", 237, dict(extlen=5, bodylen=5), "Einval",
         "verify_header: Request must include extras of length 48"),
        ("InvalidKeylen", 243, dict(keylen=4, bodylen=54), "Einval", NO_KEY),
        ("InvalidDatatype", 248, dict(datatype=JSON), "Einval", BAD_DT),
    ])

    def payload(flags):
        return struct.pack(">II", flags, 0) + bytes(40)  # DcpStreamReqPayload, 48 bytes

    def verdict(flags):
        unknown = flags & ~STREAM_FLAGS_MASK
        if unknown & NO_VALUE_FLAG:
            return "Einval", ("verify_common_dcp_stream_restrictions: "
                              "DCP_ADD_STREAM_FLAG_NO_VALUE{8} flag is no longer used")
        if unknown:
            return "Einval", (f"verify_common_dcp_stream_restrictions: Request contains invalid "
                              f"flags ({unknown:#x} is not a defined flag)")
        if flags & CACHE_TRANSFER and flags & ~(CACHE_TRANSFER | TAKEOVER | ACTIVE_VB_ONLY):
            return "Einval", ("verify_common_dcp_stream_restrictions: CacheTransfer flag can only "
                              "be combined with TakeOver or ActiveVbOnly flags")
        return "NotSupported", f"flags {flags:#x} valid; {ACCEPTED}"

    invalid_ct = (DISK_ONLY, TO_LATEST, NO_VALUE_FLAG, STRICT_VB_UUID, FROM_LATEST, IGNORE_PURGED)
    for p in (False, True):
        blob = setup(_Blob())
        flags = [1 << n for n in range(32)]  # TakeOver .. CacheTransfer, then 0x200 .. 1<<31
        for i, f in enumerate(flags):
            blob.set_extras(payload(f))
            status, why = verdict(f)
            _add(suite, "InvalidFlags", _pname(p), i, 308, blob, DCP_STREAM_REQ, status,
                 f"{func}: {why}", coll=p)
        blob = setup(_Blob())
        for i, f in enumerate(invalid_ct + (TAKEOVER, ACTIVE_VB_ONLY)):
            blob.set_extras(payload(f | CACHE_TRANSFER))
            status, why = verdict(f | CACHE_TRANSFER)
            _add(suite, "FlagsWithCacheTransfer", _pname(p), i, 334 if i < 6 else 343, blob,
                 DCP_STREAM_REQ, status, f"{func}: {why}", coll=p)
        blob = setup(_Blob()).set(bodylen=48 + 20)
        _add(suite, "MessageValue", _pname(p), None, 352 if p else 355, blob, DCP_STREAM_REQ,
             "NotSupported" if p else "Einval",
             f"{func}: " + (f"a value is allowed with collections; {ACCEPTED}" if p else
                            f"{NO_VALUE} (a value needs collections)"), coll=p)


def _snapshot_marker() -> None:
    suite = "DcpSnapshotMarkerValidatorTest"
    func = "mcbp_validators.cc dcp_snapshot_marker_validator"
    op = DCP_SNAPSHOT_MARKER
    setup = _ext(20)
    for p in (False, True):
        P = _pname(p)

        def add(test, i, line, blob, status, why, **kw):
            _add(suite, test, P, i, line, blob, op, status,
                 f"{func}: {ACCEPTED if status == 'NotSupported' else why}", coll=p, **kw)

        blob = setup(_Blob())
        add("CorrectMessage", 0, 437, blob, "NotSupported", "V1")
        blob.set(extlen=1, bodylen=37).set_extras(b"\x00")  # V2.0 version byte
        add("CorrectMessage", 1, 445, blob, "NotSupported", "V2.0")
        add("InvalidExtlen", None, 450, setup(_Blob()).set(extlen=22), "Einval",
            "extlen 22 is neither 20 (V1) nor 1 (V2.x) (no error context)")
        add("InvalidKeylen", None, 456, setup(_Blob()).set(keylen=32, bodylen=52), "Einval", NO_KEY)
        blob = setup(_Blob()).set(bodylen=100)
        add("InvalidBodylen", 0, 461, blob, "Einval", NO_VALUE + " (V1 takes no value)")
        blob.set_extras(b"\x00").set(extlen=1, bodylen=40)
        add("InvalidBodylen", 1, 467, blob, "Einval", "valuelen not expected:36")
        add("InvalidDatatype", None, 472, setup(_Blob()).set(datatype=JSON), "Einval", BAD_DT)
        blob = setup(_Blob()).set(extlen=1, bodylen=37).set_extras(bytes([101]))
        add("InvalidV2Version", None, 481, blob, "Einval", "Unsupported dcp snapshot version:101",
            datatypes=())


def _mutation() -> None:
    suite, func = "DcpMutationValidatorTest", "mcbp_validators.cc dcp_mutation_validator"
    extras = struct.pack(">QQIIIHB", 1, 0, 0, 0, 0, 0, 0)  # DcpMutationPayload, by_seqno 1

    def setup(p):
        return _Blob().set(opcode=DCP_MUTATION).set_extras(extras).set_key(bytes(2 if p else 1))

    for p in (False, True):
        def add(test, line, blob, why):
            _add(suite, test, _pname(p), None, line, blob, DCP_MUTATION, "Einval", f"{func}: {why}",
                 coll=p, datatypes=(), opened=False)
        add("CorrectMessage", 644, setup(p), "verify_common_dcp_restrictions: The command can "
            "only be sent on a DCP connection (the connection was never opened as DCP)")
        add("InvalidExtlen", 651, setup(p).set(extlen=21, bodylen=23),
            "verify_header: Request must include extras of length 31")
        add("InvalidKeylen", 658, setup(p).set(keylen=0, bodylen=31),
            "verify_header: Request must include key")
        if p:  # `if (isCollectionsEnabled())`: no validate() call without collections
            add("InvalidKey1", 668, setup(p).set_key(b"\x81" * 10),
                "is_document_key_valid: No stop-byte found")
            add("InvalidKey2", 679, setup(p).set_key(leb128(0xDAF7)),
                "is_document_key_valid: No logical key found")


def _deletion() -> None:
    suite, func = "DcpDeletionValidatorTest", "mcbp_validators.cc dcp_deletion_validator"
    op = DCP_DELETION
    for p in (False, True):
        ext = 21 if p else 18  # DcpDeletionV2Payload (collections => DeleteV2) / V1Payload

        def setup():
            blob = _Blob().set(opcode=op, datatype=RAW).set_key(b"document-key")
            return blob.set_extras(bytes(ext))

        def add(test, i, line, blob, status, why):
            _add(suite, test, _pname(p), i, line, blob, op, status,
                 f"{func}: {ACCEPTED if status == 'NotSupported' else why}", coll=p)

        add("CorrectMessage", None, 728, setup(), "NotSupported", "")
        blob = setup()
        xattrs = xattr_blob([(b"_foo", b'{"bar":5}')])
        for i, dt in enumerate((RAW, RAW | SNAPPY, XATTR, XATTR | SNAPPY)):
            value = xattrs if dt & XATTR else b"My value"
            blob.set(datatype=dt).set_value(snappy_literal(value) if dt & SNAPPY else value)
            add("ValidDatatype", i, 756, blob, "NotSupported", "")
        blob = setup()
        for i, dt in enumerate((JSON, SNAPPY | JSON)):
            value = b'{"foo":"bar"}'
            blob.set(datatype=dt).set_value(snappy_literal(value) if dt & SNAPPY else value)
            add("InvalidDatatype", i, 781, blob, "Einval",
                f"valid_dcp_delete_datatype({dt:#x}) false: Request datatype invalid")
        add("InvalidExtlen", None, 791, setup().set(extlen=5, bodylen=7), "Einval",
            f"verify_header: Request must include extras of length {ext}")
        add("InvalidExtlenCollections", None, 799, setup().set(extlen=18 if p else 21), "Einval",
            f"verify_header: Request must include extras of length {ext}")
        add("InvalidKeylen", None, 805, setup().set(keylen=1 if p else 0, bodylen=18), "Einval",
            "is_document_key_valid: Key length must be >= 2" if p else
            "verify_header: Request must include key")
        add("WithValue", None, 810, setup().set(bodylen=100), "NotSupported", "")


def _expiration() -> None:
    suite, func = "DcpExpirationValidatorTest", "mcbp_validators.cc dcp_expiration_validator"
    op = DCP_EXPIRATION
    for p in (False, True):
        def setup():
            return _Blob().set(opcode=op).set_extras(bytes(20)).set_key(bytes(5 if p else 1))

        def add(test, line, blob, status, why):
            _add(suite, test, _pname(p), None, line, blob, op, status,
                 f"{func}: {ACCEPTED if status == 'NotSupported' else why}", coll=p)

        add("CorrectMessage", 844, setup(), "NotSupported", "")
        add("InvalidExtlen", 850, setup().set(extlen=5, bodylen=7), "Einval",
            "verify_header: Request must include extras of length 20")
        add("InvalidKeylen", 856, setup().set(keylen=1 if p else 0, bodylen=19), "Einval",
            "is_document_key_valid: Key length must be >= 2" if p else
            "verify_header: Request must include key")
        add("WithValue", 861, setup().set(bodylen=100), "NotSupported", "")


def _xattr() -> None:
    big = too_large_system_xattrs()
    extras = {DCP_MUTATION: struct.pack(">QQIIIHB", 1, 0, 0, 0, 0, 0, 0),
              DCP_DELETION: bytes(21), DCP_EXPIRATION: bytes(20)}
    for op in (DCP_MUTATION, DCP_DELETION, DCP_EXPIRATION):
        for snappy in (False, True):
            blob = _Blob(2 << 20).set(opcode=op, datatype=XATTR | (SNAPPY if snappy else 0))
            blob.set_key(b"\x00a").set_extras(extras[op])
            # the test deflates `value`, still an empty string_view, not the blob
            blob.set_value(snappy_literal(b"") if snappy else big)
            why = ("the test compresses the empty string, so the inflated segment is empty"
                   if snappy else "xattr/utils.cc validate1: the values '{\"cc..c\"}' are not "
                   "JSON, which fails before the 1 MiB system-size limit")
            why = ("mcbp_validators.cc verify_header (is_valid_xattr_blob): The provided xattr "
                   f"segment is not valid ({why})")
            _add("DcpXattrValidatorTest", "SystemXattrTooLarge",
                 f"{OPCODE_NAMES[op]}_snappy_is_{_pname(snappy)}", None, 1209, blob, op,
                 "XattrEinval", why, coll=True, datatypes=("XATTR", "SNAPPY"),
                 prefix="SnappyOnOff")


_simple_suites()
_stream_req()
_snapshot_marker()
_mutation()
_deletion()
_expiration()
_xattr()


# --- DcpSnapshotMarkerCodecTest ----------------------------------------------------------

DISK = 0x02
CODEC_CASES: list[CodecCase] = []


def _codec() -> None:
    start, end, hcs, hps, mvs, purge = 1, 2, 3, 4, 5, 6
    calls = {  # test -> ((line, flags-from-param?, hcs, hps, mvs, purge), ...)
        "RoundtripV2_0_MVSOnly": ((571, False, None, None, mvs, None),
                                  (572, True, None, None, mvs, None)),
        "RoundtripV2_0_HCSOnly": ((577, False, hcs, None, None, None),
                                  (578, True, hcs, None, None, None)),
        "RoundtripV2_0_HCSAndMVS": ((583, False, hcs, None, mvs, None),
                                    (584, True, hcs, None, mvs, None)),
        "RoundtripV2_2_HPSOnly": ((589, False, hcs, hps, mvs, None),
                                  (590, True, hcs, hps, mvs, None)),
        "RoundtripV2_2_PurgeOnly": ((595, False, hcs, None, mvs, purge),
                                    (596, True, hcs, hps, mvs, None)),
        "RoundtripV2_2_All": ((601, False, hcs, hps, mvs, purge),
                              (602, True, hcs, hps, mvs, purge)),
    }
    for disk in (False, True):
        for test, tests in calls.items():
            for i, (line, use_param, h, hp, m, pu) in enumerate(tests):
                flags = DISK if use_param and disk else 0
                marker = dict(start=start, end=end, flags=flags, hcs=h, hps=hp, mvs=m, purge=pu)
                name = f"DiskSnapshotOnOff/DcpSnapshotMarkerCodecTest.{test}/{_pname(disk)}#{i}"
                src = f"{DCP_TEST}:{line}"
                if (h is not None or hp is not None) and not flags & DISK:
                    CODEC_CASES.append(CodecCase(name, src, marker, True, None, b"", None))
                    continue
                v20 = struct.pack(">QQIQQ", start, end, flags, m or 0, h or 0)
                if hp is not None or pu is not None:
                    version, value = "2.2", v20 + struct.pack(">QQ", pu or 0, hp or 0)
                else:
                    version, value = "2.0", v20
                data = frame(DCP_SNAPSHOT_MARKER, bytes([2 if version == "2.2" else 0]), b"", value)
                decoded = dict(start=start, end=end, flags=flags, mvs=m or 0,
                               hcs=(h or 0) if flags & DISK else None,
                               hps=(hp or 0) if flags & DISK and version == "2.2" else None,
                               purge=(pu or 0) if version == "2.2" else None)
                CODEC_CASES.append(CodecCase(name, src, marker, False, version, data, decoded))


_codec()


# --- framing extras (protocol/mcbp/request_test.cc) on a DcpNoop ------------------------------

FRAME_EXTRAS_CASES: list[FrameExtrasCase] = []

_BAD_DUR = "parseFrameExtras: DurabilityRequirement: cb::durability::Requirements throws "
_NO_DUR = ("parseFrameExtras: valid durability, but is_durability_supported(DcpNoop) is false: "
           "The requested command does not support durability requirements")
_FE_ROWS = (  # name, line, framing extras, parsed, parser throws, durability, status, why
    ("Request_ParseFrameExtras.ExtendedIdAndSize", 68,
     bytes([0xFF, 32 - 15, 37 - 15]) + bytes(37), ((32, 37),), None, None, "UnknownFrameInfo",
     "parseFrameExtras: frame info id 32 is not a known FrameInfoId"),
    ("Request_ParseFrameExtras.ExtendedIdAndSize_Edge", 100, bytes([0xFF, 0, 0]) + bytes(15),
     ((15, 15),), None, None, "UnknownFrameInfo",
     "parseFrameExtras: frame info id 15 is not a known FrameInfoId"),
    ("Request_ParseFrameExtras.Barrier_LegalPacket", 124, b"\x00", ((0, 0),), None, None,
     "Success", "parseFrameExtras: Barrier without data sets the barrier; DcpNoop then passes"),
    ("Request_ParseFrameExtras.Barrier_BufferOverflow", 146, b"\x02\x00", None,
     "std::overflow_error: parseFrameExtras: outside frame extras", None, "Einval",
     "parseFrameExtras: Invalid encoding in FrameExtras (overflow_error)"),
    ("Request_ParseFrameExtras.DurabilityRequirement_LegalPacket#0", 172, b"\x11\x00",
     ((1, 1),), None, None, "DurabilityInvalidLevel",
     _BAD_DUR + "(level None: Content represents an invalid requirement specification), size 1"),
    ("Request_ParseFrameExtras.DurabilityRequirement_LegalPacket#1", 191, b"\x13\x00\x00\x00",
     ((1, 3),), None, None, "DurabilityInvalidLevel",
     _BAD_DUR + "(Timeout(): Cannot specify bucket default timeout), size 3"),
    ("Request_ParseFrameExtras.MultipleEncoding", 230, b"\x13\xaa\xbb\xcc\x00",
     ((1, 3), (0, 0)), None, None, "DurabilityInvalidLevel",
     _BAD_DUR + "(level 0xaa: invalid requirement specification), size 3; parsing stops"),
    ("Request_GetDurationSpec.NoSpecPresent", 240, b"", (), None, "none", "Success",
     "verify_header: no framing extras to parse; DcpNoop passes"),
    ("Request_GetDurationSpec.OnlyRequirement", 253, b"\x11\x01", ((1, 1),), None,
     "Majority, default timeout", "Einval", _NO_DUR),
    ("Request_GetDurationSpec.FullSpecPresent", 270, b"\x13\x03\xaa\xbb", ((1, 3),), None,
     "PersistToMajority, timeout 0xaabb", "Einval", _NO_DUR),
    ("Request_GetDurationSpec.InvalidTimeoutZero", 289, b"\x13\x03\x00\x00", ((1, 3),), None,
     "throws std::invalid_argument", "DurabilityInvalidLevel",
     _BAD_DUR + "(Timeout(): Cannot specify bucket default timeout), size 3"),
    ("Request_GetDurationSpec.InvalidTimeoutFFFF", 307, b"\x13\x03\xff\xff", ((1, 3),), None,
     "throws std::invalid_argument", "DurabilityInvalidLevel",
     _BAD_DUR + "(Timeout(): Cannot specify an infinite timeout), size 3"),
)
for _name, _line, _fe, _parsed, _throws, _dur, _status, _why in _FE_ROWS:
    _src = f"{REQUEST_TEST}:{_line}"
    _kv = KvCase(_name, _src, frame(DCP_NOOP, magic=0x08, framing=_fe), True, ALL_DATATYPES,
                 True, _status, _status == "Success", "mcbp_validators.cc " + _why)
    FRAME_EXTRAS_CASES.append(FrameExtrasCase(_name, _src, _fe, _parsed, _throws, _dur, _kv))

# every vector that goes into the capture
VECTOR_CASES: list[KvCase] = CASES + [f.kv for f in FRAME_EXTRAS_CASES]

