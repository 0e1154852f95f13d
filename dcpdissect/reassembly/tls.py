"""TLS connections decrypted with a key log, their application data framed as MCBP.

A :class:`TlsSession` follows one connection's handshake (ClientHello and ServerHello in the
clear: randoms, version, suite), derives the record keys from the key log's secrets and
decrypts every record of both directions: TLS 1.2 (``CLIENT_RANDOM`` master secret, key
expansion with the PRF of the suite's hash, AES-GCM with its explicit nonce, ChaCha20-Poly1305
with the RFC 7905 nonce) and TLS 1.3 (handshake and traffic secrets, HKDF-Expand-Label, key
updates; encrypted handshake messages are followed but not decoded, the inner content type
and padding stripped). The application data of each direction feeds a
:class:`~.framing.PduFramer`; each PDU carries every frame that carried the records its bytes
came from.

A connection whose suite or version cannot be decrypted, whose secrets are missing, or a
record that fails authentication (wrong key, altered bytes) gives a :class:`TlsProblem`, and
the direction (or connection) is not decoded from there on: no byte of it is framed as MCBP.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from .framing import Hidden, Pdu, PduFramer
from .tcp import LOST, UNCAPTURED

HANDSHAKE, CHANGE_CIPHER_SPEC, ALERT, APPLICATION_DATA = 22, 20, 21, 23
CLIENT_HELLO, SERVER_HELLO, FINISHED, KEY_UPDATE = 1, 2, 20, 24
TLS12, TLS13 = 0x0303, 0x0304
MAX_RECORD = (1 << 14) + 2048        # the largest legal ciphertext record
_HRR_RANDOM = hashlib.sha256(b"HelloRetryRequest").digest()
VERSION_NAMES = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", TLS12: "TLS 1.2",
                 TLS13: "TLS 1.3"}


class Suite(NamedTuple):
    name: str
    version: int          # TLS12 or TLS13
    aead: type            # AESGCM or ChaCha20Poly1305
    key_len: int
    hash: str             # hashlib name of the PRF / HKDF hash


SUITES = {s_code: Suite(*s) for s_code, s in {
    0x1301: ("TLS_AES_128_GCM_SHA256", TLS13, AESGCM, 16, "sha256"),
    0x1302: ("TLS_AES_256_GCM_SHA384", TLS13, AESGCM, 32, "sha384"),
    0x1303: ("TLS_CHACHA20_POLY1305_SHA256", TLS13, ChaCha20Poly1305, 32, "sha256"),
    0xC02B: ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", TLS12, AESGCM, 16, "sha256"),
    0xC02C: ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", TLS12, AESGCM, 32, "sha384"),
    0xC02F: ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", TLS12, AESGCM, 16, "sha256"),
    0xC030: ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", TLS12, AESGCM, 32, "sha384"),
    0xCCA8: ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", TLS12, ChaCha20Poly1305, 32, "sha256"),
    0xCCA9: ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", TLS12, ChaCha20Poly1305, 32, "sha256"),
    0x009C: ("TLS_RSA_WITH_AES_128_GCM_SHA256", TLS12, AESGCM, 16, "sha256"),
    0x009D: ("TLS_RSA_WITH_AES_256_GCM_SHA384", TLS12, AESGCM, 32, "sha384"),
    0x009E: ("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", TLS12, AESGCM, 16, "sha256"),
    0x009F: ("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", TLS12, AESGCM, 32, "sha384"),
}.items()}

# The problems (the analyzer reports each as the rule of analysis/rules/tls.py of that id).
NO_KEY, UNSUPPORTED, AUTH_FAILED, TLS_GAP = ("tls-no-key", "tls-unsupported",
                                             "tls-auth-failed", "tls-gap")


class TlsProblem(NamedTuple):
    """A TLS connection (or one direction of it) that is not decrypted from ``frame`` on."""
    conn: int | None                # None: not numbered (no key: never decoded)
    client: tuple[str, int]
    server: tuple[str, int]
    frame: int
    ts_ns: int
    rule: str                       # NO_KEY, UNSUPPORTED, AUTH_FAILED or TLS_GAP
    detail: str
    client_random: str              # hex, "" when unknown


# -- handshake parsing ---------------------------------------------------------------------
def hello_random(buf) -> bytes | None:
    """The client random of the ClientHello at the start of ``buf`` (a direction's first
    bytes); None when not all of it is there yet, b"" when it is no ClientHello."""
    if len(buf) < 5 + 4 + 2 + 32:
        return None
    if buf[0] != HANDSHAKE or buf[5] != CLIENT_HELLO:
        return b""
    return bytes(buf[11:43])


def _extensions(body: bytes, pos: int):
    """(type, data) of the extensions block at ``pos`` (none when absent)."""
    if pos + 2 > len(body):
        return
    end = min(len(body), pos + 2 + struct.unpack_from(">H", body, pos)[0])
    pos += 2
    while pos + 4 <= end:
        etype, elen = struct.unpack_from(">HH", body, pos)
        yield etype, body[pos + 4:pos + 4 + elen]
        pos += 4 + elen


def parse_server_hello(body: bytes) -> tuple[int, bytes, int]:
    """(version, server random, suite) of a ServerHello body; the version is the
    supported_versions extension's when present (TLS 1.3). ValueError when malformed."""
    if len(body) < 35 or len(body) < 38 + body[34]:
        raise ValueError(f"a ServerHello of {len(body)} bytes is too short")
    version, random = struct.unpack_from(">H", body, 0)[0], body[2:34]
    pos = 35 + body[34]
    suite = struct.unpack_from(">H", body, pos)[0]
    for etype, data in _extensions(body, pos + 3):
        if etype == 0x002B and len(data) == 2:
            version = struct.unpack(">H", data)[0]
    return version, random, suite


# -- key derivation ------------------------------------------------------------------------
def prf(secret: bytes, label: bytes, seed: bytes, length: int, hash_name: str) -> bytes:
    """The TLS 1.2 PRF (RFC 5246 §5): P_hash with the suite's hash."""
    seed = label + seed
    out, a = b"", seed
    while len(out) < length:
        a = hmac.digest(secret, a, hash_name)
        out += hmac.digest(secret, a + seed, hash_name)
    return out[:length]


def hkdf_expand_label(secret: bytes, label: str, length: int, hash_name: str) -> bytes:
    """HKDF-Expand-Label of RFC 8446 §7.1 with an empty context."""
    full = b"tls13 " + label.encode()
    info = struct.pack(">HB", length, len(full)) + full + b"\x00"
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(secret, block + info + bytes([i]), hash_name)
        out += block
        i += 1
    return out[:length]


class _Keys:
    """One direction's record protection: AEAD, IV and the record sequence number."""
    __slots__ = ("aead", "iv", "seq", "explicit")

    def __init__(self, suite: Suite, key: bytes, iv: bytes):
        self.aead = suite.aead(key)
        self.iv = iv
        self.seq = 0
        self.explicit = suite.version == TLS12 and suite.aead is AESGCM

    def open(self, header: bytes, fragment: bytes, tls13: bool) -> bytes:
        """The plaintext of one record (raises InvalidTag when it does not authenticate)."""
        seq = self.seq
        if len(fragment) < 16 + 8 * self.explicit:
            raise InvalidTag            # shorter than its tag (and explicit nonce)
        if self.explicit:       # TLS 1.2 GCM: 4-byte salt + 8-byte explicit nonce
            nonce, fragment = self.iv + fragment[:8], fragment[8:]
        else:                   # TLS 1.3 and RFC 7905: IV xor the padded sequence number
            nonce = (int.from_bytes(self.iv, "big") ^ seq).to_bytes(12, "big")
        if tls13:
            aad = header
        else:
            aad = struct.pack(">QBHH", seq, header[0], TLS12, len(fragment) - 16)
        plain = self.aead.decrypt(nonce, bytes(fragment), aad)
        self.seq = seq + 1
        return plain


# -- one connection ------------------------------------------------------------------------
class TlsSession:
    """The TLS state of one connection; ``direction(d)`` is the framer of direction ``d``."""

    def __init__(self, conn: int, client, server, keylog, client_random: bytes,
                 hello_direction: int = 0):
        self.conn, self.client, self.server = conn, client, server
        self.keylog = keylog
        self.client_random = client_random
        self.hello_direction = hello_direction
        self.version: int | None = None
        self.suite: Suite | None = None
        self.server_random = b""
        self.retry = False                  # a HelloRetryRequest was seen
        self.dead = False                   # nothing of the connection is decrypted
        self.dirs = (TlsDirection(self, 0), TlsDirection(self, 1))

    def direction(self, d: int) -> "TlsDirection":
        return self.dirs[d]

    def problem(self, rule: str, detail: str, frame: int, ts_ns: int) -> TlsProblem:
        return TlsProblem(self.conn, self.client, self.server, frame, ts_ns, rule, detail,
                          self.client_random.hex())

    def on_server_hello(self, body: bytes, frame: int, ts_ns: int, out: list) -> None:
        try:
            version, random, code = parse_server_hello(body)
        except ValueError as exc:
            self.stop(out, UNSUPPORTED, f"{exc}: not decrypted", frame, ts_ns)
            return
        if random == _HRR_RANDOM:
            self.retry = True
            return
        self.server_random = random
        suite = SUITES.get(code)
        if version not in (TLS12, TLS13) or suite is None or suite.version != version:
            self.stop(out, UNSUPPORTED,
                      f"{VERSION_NAMES.get(version, f'version {version:#06x}')} with suite "
                      f"{code:#06x}{f' ({suite.name})' if suite else ''}: only TLS 1.2 and 1.3 "
                      "AES-GCM and ChaCha20-Poly1305 suites are decrypted", frame, ts_ns)
            return
        self.version, self.suite = version, suite
        if version == TLS12:
            labels = ("CLIENT_RANDOM",)
        else:
            labels = ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                      "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0")
        missing = [l for l in labels if self.keylog.secret(l, self.client_random) is None]
        if missing:
            self.stop(out, NO_KEY, f"{VERSION_NAMES[version]} {suite.name}: the key log has "
                      f"no {' or '.join(missing)} for client random "
                      f"{self.client_random.hex()[:16]}…", frame, ts_ns)

    def stop(self, out: list, rule: str, detail: str, frame: int, ts_ns: int) -> None:
        """Nothing more of the connection is decrypted."""
        self.dead = True
        for d in self.dirs:
            d.stopped = True
            d.buf.clear()
            d.chunks.clear()
        out.append(self.problem(rule, detail, frame, ts_ns))

    def keys(self, d: int, secret_label: str | None = None, secret: bytes | None = None) -> tuple:
        """(keys, traffic secret) for direction ``d``: TLS 1.2 from the master secret,
        TLS 1.3 from ``secret`` or the key log's ``secret_label``."""
        suite = self.suite
        client = d == self.hello_direction
        if self.version == TLS12:
            master = self.keylog.secret("CLIENT_RANDOM", self.client_random)
            iv_len = 4 if suite.aead is AESGCM else 12
            n = suite.key_len
            block = prf(master, b"key expansion", self.server_random + self.client_random,
                        2 * (n + iv_len), suite.hash)
            key = block[:n] if client else block[n:2 * n]
            iv = block[2 * n:2 * n + iv_len] if client else block[2 * n + iv_len:]
            return _Keys(suite, key, iv), None
        if secret is None:
            secret = self.keylog.secret(("CLIENT_" if client else "SERVER_") + secret_label,
                                        self.client_random)
        return (_Keys(suite, hkdf_expand_label(secret, "key", suite.key_len, suite.hash),
                      hkdf_expand_label(secret, "iv", 12, suite.hash)), secret)

    def pump_other(self, d: int, now) -> list:
        """Records of the other direction that waited for the ServerHello."""
        other = self.dirs[1 - d]
        return other.pump(now) if other.buf and not other.stopped else []


class TlsDirection:
    """One direction of a TLS connection, with the interface of a :class:`PduFramer`."""

    def __init__(self, session: TlsSession, d: int):
        self.session, self.d = session, d
        self.framer = PduFramer(session.conn, d, in_sync=True)
        self.buf = bytearray()
        self.base = 0                   # stream offset of buf[0]
        self.chunks: list[tuple[int, int, int]] = []    # (end offset, frame, ts) of the bytes
        self.started = False
        self.stopped = False
        self.keys: _Keys | None = None
        self.secret: bytes | None = None
        self.encrypted = False          # TLS 1.2: after this direction's ChangeCipherSpec
        self.handshake = bytearray()    # handshake bytes not yet parsed
        self.plain_end = 0              # application bytes framed so far
        self.provenance: list[tuple[int, tuple]] = []   # (plain end offset, record frames)

    # -- the framer interface --------------------------------------------------------------
    def data(self, offset: int, data: bytes, frame: int, ts_ns: int, now=None) -> list:
        if self.stopped:
            return []
        if not self.started:
            self.base, self.started = offset, True
        self.buf += data
        self.chunks.append((offset + len(data), frame, ts_ns))
        out = self.pump(now or (frame, ts_ns))
        if self.session.version is not None:
            out += self.session.pump_other(self.d, now or (frame, ts_ns))
        return out

    def gap(self, offset: int, length: int, frame: int, ts_ns: int, cause: str = LOST) -> list:
        if self.stopped:
            return []
        self.stopped = True
        self.buf.clear()
        self.chunks.clear()
        how = "not captured" if cause == UNCAPTURED else "lost"
        framer = self.framer
        return framer.close() + [self.session.problem(
            TLS_GAP, f"{length or 'an unknown number of'} bytes {how} in "
            f"{_DIRECTION_NAMES[self.d]}: the records after them cannot be decrypted",
            frame, ts_ns), Hidden(framer.conn, self.d, offset - length, framer.framed_ts, cause,
                                  frame, ts_ns)]

    def close(self) -> list:
        return self._attribute(self.framer.close())

    # -- records -----------------------------------------------------------------------------
    def pump(self, now) -> list:
        """Decrypt every complete record that can be decrypted now."""
        out: list = []
        session = self.session
        buf = self.buf
        while len(buf) >= 5 and not self.stopped:
            rtype = buf[0]
            length = (buf[3] << 8) | buf[4]
            end = 5 + length
            start_off = self.base
            if length > MAX_RECORD or rtype not in (HANDSHAKE, CHANGE_CIPHER_SPEC, ALERT,
                                                     APPLICATION_DATA):
                frame, ts = self._carrier(start_off)
                session.stop(out, AUTH_FAILED, f"{_DIRECTION_NAMES[self.d]}: no TLS record "
                             f"at stream offset {start_off} (type {rtype}, length {length})",
                             frame, ts)
                break
            if len(buf) < end:
                break
            protected = self.encrypted or rtype == APPLICATION_DATA
            if (protected or rtype == CHANGE_CIPHER_SPEC) and session.version is None:
                if rtype == CHANGE_CIPHER_SPEC and session.retry:
                    pass            # TLS 1.3 middlebox compatibility after a retry
                else:
                    break           # wait for the ServerHello (the other direction)
            header, fragment = bytes(buf[:5]), bytes(buf[5:end])
            frames, frame, ts = self._record_frames(start_off, start_off + end)
            del buf[:end]
            self.base += end
            self._trim_chunks()
            if session.dead:
                break
            if rtype == CHANGE_CIPHER_SPEC:
                if session.version == TLS12:
                    self.keys, _ = session.keys(self.d)
                    self.encrypted = True
                continue
            if protected:
                if self.keys is None:       # TLS 1.3: the handshake traffic secret
                    self.keys, self.secret = session.keys(self.d, "HANDSHAKE_TRAFFIC_SECRET")
                tls13 = session.version == TLS13
                try:
                    plain = self.keys.open(header, fragment, tls13)
                except InvalidTag:
                    self._fail(out, frame, ts, start_off)
                    break
                if tls13:
                    stripped = plain.rstrip(b"\x00")
                    if not stripped:
                        self._fail(out, frame, ts, start_off)
                        break
                    rtype, plain = stripped[-1], stripped[:-1]
            else:
                plain = fragment
            if rtype == APPLICATION_DATA:
                self._emit(plain, frames, frame, ts, now, out)
            elif rtype == HANDSHAKE:
                self.handshake += plain
                self._handshake_messages(frame, ts, out)
        return out

    def _handshake_messages(self, frame: int, ts: int, out: list) -> None:
        hs = self.handshake
        session = self.session
        while len(hs) >= 4:
            mlen = int.from_bytes(hs[1:4], "big")
            if len(hs) < 4 + mlen:
                return
            mtype, body = hs[0], bytes(hs[4:4 + mlen])
            del hs[:4 + mlen]
            if mtype == SERVER_HELLO and session.version is None:
                session.on_server_hello(body, frame, ts, out)
                if session.dead:
                    return
            elif session.version == TLS13 and self.keys is not None:
                if mtype == FINISHED and self.secret is not None and not self.encrypted:
                    self.keys, self.secret = session.keys(self.d, "TRAFFIC_SECRET_0")
                    self.encrypted = True       # application traffic keys in use
                elif mtype == KEY_UPDATE:
                    nxt = hkdf_expand_label(self.secret, "traffic upd",
                                            hashlib.new(session.suite.hash).digest_size,
                                            session.suite.hash)
                    self.keys, self.secret = session.keys(self.d, secret=nxt)

    def _fail(self, out: list, frame: int, ts: int, offset: int) -> None:
        self.stopped = True
        self.buf.clear()
        self.chunks.clear()
        out.extend(self._attribute(self.framer.close()))
        out.append(self.session.problem(
            AUTH_FAILED, f"{_DIRECTION_NAMES[self.d]}: the record at stream offset {offset} "
            "fails authentication (wrong key in the key log, or altered bytes); the rest of "
            "this direction is not decoded", frame, ts))

    def _emit(self, plain: bytes, frames: tuple, frame: int, ts: int, now, out: list) -> None:
        if not plain:
            return
        start = self.plain_end
        self.plain_end = start + len(plain)
        self.provenance.append((self.plain_end, frames))
        out.extend(self._attribute(self.framer.data(start, plain, frame, ts, now)))

    def _attribute(self, events: list) -> list:
        """PDUs carry every frame of the records their bytes came from."""
        prov = self.provenance
        for i, ev in enumerate(events):
            if type(ev) is not Pdu:
                continue
            lo, hi = ev.offset, ev.offset + len(ev.data)
            frames = set()
            for end, rec_frames in prov:
                if end > lo:
                    frames.update(rec_frames)
                    if end >= hi:
                        break
            events[i] = ev._replace(frames=tuple(sorted(frames)))
        keep = self.framer.base
        while prov and prov[0][0] <= keep:
            del prov[0]
        return events

    def _record_frames(self, start: int, end: int) -> tuple[tuple, int, int]:
        """(every frame carrying stream bytes [start, end), the frame of the last byte, its
        timestamp)."""
        frames, prev = set(), self.base
        last = (0, 0)
        for c_end, frame, ts in self.chunks:
            if c_end > start and prev < end:
                frames.add(frame)
                last = (frame, ts)
            if c_end >= end:
                break
            prev = c_end
        return tuple(sorted(frames)), last[0], last[1]

    def _carrier(self, offset: int) -> tuple[int, int]:
        for c_end, frame, ts in self.chunks:
            if c_end > offset:
                return frame, ts
        return (self.chunks[-1][1], self.chunks[-1][2]) if self.chunks else (0, 0)

    def _trim_chunks(self) -> None:
        chunks, base = self.chunks, self.base
        i = 0
        while i < len(chunks) and chunks[i][0] <= base:
            i += 1
        if i:
            del chunks[:i]


_DIRECTION_NAMES = ("client→server", "server→client")

__all__ = ["TlsSession", "TlsDirection", "TlsProblem", "SUITES", "hello_random", "prf",
           "hkdf_expand_label", "NO_KEY", "UNSUPPORTED", "AUTH_FAILED", "TLS_GAP"]
