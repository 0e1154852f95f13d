"""MCBP framing over one reassembled byte stream: PDU boundaries, provenance, cuts, resync.

A :class:`PduFramer` receives in-order bytes of one direction (with the frame number each
chunk arrived in) and notices of missing bytes, and yields PDUs, each carrying every frame
its bytes came from.

Missing bytes (a lost segment, or bytes the snapshot length did not keep) do not break
framing when they fall inside a message whose header was captured: its length says where
the next one starts, so the message comes out as a partial :class:`Pdu` (its captured
prefix, ``missing`` bytes short) when the stream reaches its end, and framing goes on. When
the missing bytes hide a message boundary, the framer says so once (:class:`Hidden`) and
looks for the next boundary it can prove: a plausible header (a legal magic, a known opcode,
sane lengths) confirmed by another plausible header right after its frame, or, when its
frame ends in bytes not captured, a header that fits its opcode's layout in the protocol
tables (:func:`fits_layout`). The same scan resynchronises after a capture that started
mid-stream or after garbage.
"""

from __future__ import annotations

import re
from typing import NamedTuple

try:
    import cython
except ImportError:                 # without Cython: this module runs from its source
    from .. import kernel as cython

from ..codec.header import BODYLEN_OFFSET, frame_size, peek, unpack, unpack_bodylen
from ..protocol import (DATATYPE_MAX, HEADER_SIZE, MAGICS, MAX_FRAME_SIZE, OPCODES,
                        REQUEST_MAGICS, Presence, is_known_opcode)
from .tcp import LOST

_LEGAL_MAGICS = frozenset(MAGICS.values)
MAX_PDU_SEGMENTS = 65536           # chunks held for one unfinished PDU (30 MiB in 480-byte segments)
MAX_KEY = 251                      # a document key with its collection prefix (mcbp_validators.cc)
_MAGIC_RE = re.compile(b"[" + b"".join(re.escape(bytes([m])) for m in sorted(_LEGAL_MAGICS)) + b"]")


_new = tuple.__new__     # Pdu(...) without the Python-level __new__ of a NamedTuple


class Pdu(NamedTuple):
    conn: int
    direction: int          # 0 client->server, 1 server->client
    offset: int             # stream offset of the first byte
    data: bytes             # the frame: 24-byte header + body (its captured prefix when cut)
    frames: tuple[int, ...]  # every frame that carried its bytes, ascending
    frame: int              # the frame in which it completed (differs after reordering)
    ts_ns: int              # timestamp of that frame
    missing: int = 0        # bytes of the frame after ``data`` that the capture does not hold


# Resync.cause: what the framer found (match on these, not on Resync.detail).
ILLEGAL_MAGIC = "illegal_magic"     # the header that broke framing has an illegal magic
TOO_LARGE = "too_large"             # ... or a frame size beyond MAX_FRAME_SIZE
NO_HEADER = "no_header"             # no plausible header before the end of the stream
RESYNC_CAUSES = (ILLEGAL_MAGIC, TOO_LARGE, NO_HEADER)


class Resync(NamedTuple):
    conn: int
    direction: int
    offset: int             # stream offset where decoding resumed
    skipped: int            # bytes discarded to get there
    reason: str             # 'mid_stream', 'after_gap', 'garbage'
    cause: str | None       # one of RESYNC_CAUSES; None when no header was judged
    detail: str             # for people: the cause with offsets and values
    frame: int
    ts_ns: int


class Hidden(NamedTuple):
    """Missing bytes hid a message boundary: from ``offset`` on, the messages of this
    direction are unknown until a :class:`Resync` (reason ``after_gap``) finds the next one.
    Messages sent after ``since_ts`` (the last framed byte's time) may be among them."""
    conn: int
    direction: int
    offset: int             # stream offset where the unknown bytes begin
    since_ts: int           # timestamp of the last byte framed before them
    cause: str              # tcp.LOST or tcp.UNCAPTURED
    frame: int              # the frame that showed the cut
    ts_ns: int


def _carrier(chunks, ci: int, offset: int) -> tuple[int, int]:
    """(frame, ts) of the chunk that carried stream ``offset`` (searched from ``ci``)."""
    for c_end, frame, ts in chunks[ci:]:
        if c_end > offset:
            return frame, ts
    return chunks[-1][1], chunks[-1][2]


class LostPdu(NamedTuple):
    """A PDU whose header was not wholly captured before missing bytes or the capture end."""
    conn: int
    direction: int
    offset: int
    have: int
    need: int
    reason: str             # 'gap', 'uncaptured', 'end' or 'cap' (carried by too many segments)
    frame: int
    ts_ns: int


def header_problem(buf, pos: int) -> tuple[str, str] | None:
    """(cause, text): why the 24 bytes at ``pos`` cannot start a frame the server would
    accept as framing (None when they can). Only magic and lengths are judged here."""
    h = peek(buf, pos)
    if h.magic not in _LEGAL_MAGICS:
        return ILLEGAL_MAGIC, f"illegal magic {h.magic:#04x}"
    if HEADER_SIZE + h.bodylen > MAX_FRAME_SIZE:
        return TOO_LARGE, f"body length {h.bodylen} exceeds the {MAX_FRAME_SIZE >> 20} MiB frame limit"
    return None


def plausible(buf, pos: int) -> bool:
    """Strict check used while resynchronising."""
    magic, opcode, framing_len, keylen, extlen, datatype, _vb, bodylen, _o, _c = unpack(buf, pos)
    if magic not in _LEGAL_MAGICS or datatype > DATATYPE_MAX:
        return False
    if HEADER_SIZE + bodylen > MAX_FRAME_SIZE or not is_known_opcode(magic, opcode):
        return False
    return framing_len + keylen + extlen <= bodylen


def fits_layout(buf, pos: int) -> bool:
    """The plausible header at ``pos`` is a DCP message its opcode's table allows: extras
    length of one of its layouts, key and value present or absent as required, a key no
    longer than the server accepts, a datatype it allows. The proof of a boundary whose
    frame ends in bytes the capture does not hold (nothing follows it to confirm it)."""
    magic, opcode, framing_len, keylen, extlen, datatype, _vb, bodylen, _o, _c = unpack(buf, pos)
    op = OPCODES.get(opcode)
    if op is None or magic not in _LEGAL_MAGICS:
        return False
    shape = op.request if magic in REQUEST_MAGICS else op.response
    if extlen not in shape.extras_sizes or keylen > MAX_KEY:
        return False
    if (shape.key is Presence.REQUIRED and not keylen
            or shape.key is Presence.FORBIDDEN and keylen):
        return False
    value = bodylen - framing_len - extlen - keylen
    if shape.value is Presence.FORBIDDEN and value or shape.value is Presence.REQUIRED and not value:
        return False
    return shape.datatypes is None or datatype in shape.datatypes


class _Partial:
    """A PDU whose header was framed but some of whose bytes are missing: its captured
    prefix (with the frames that carried it), until the stream reaches its end."""
    __slots__ = ("offset", "data", "size", "frames", "ts")

    def __init__(self, offset: int, data: bytes, size: int, frames: tuple, ts: int):
        self.offset, self.data, self.size, self.frames, self.ts = offset, data, size, frames, ts


class PduFramer:
    """Frame one direction of one connection."""

    def __init__(self, conn: int, direction: int, in_sync: bool = True):
        self.conn = conn
        self.direction = direction
        self.buf = bytearray()
        self.base = 0            # stream offset of buf[0]
        self.chunks: list[tuple[int, int, int]] = []   # (end offset, frame, ts_ns) per chunk
        self.in_sync = in_sync
        self.resync_reason = None if in_sync else "mid_stream"
        self.skip_to: int | None = None
        self.partial: _Partial | None = None   # the PDU whose rest is being skipped
        self.last_frame = 0
        self.last_ts = 0
        self.framed_ts = 0       # timestamp of the last byte framed (in sync)
        self.started = False
        self._pending_skip = 0
        self._garbage_cause: str | None = None
        self._garbage_detail = ""
        self._garbage_at: tuple[int, int] | None = None    # (frame, ts) of the bad header
        self.now = (0, 0)

    # -- input ------------------------------------------------------------------------
    def data(self, offset: int, data: bytes, frame: int, ts_ns: int,
             now: tuple[int, int] | None = None) -> list:
        """Append in-order bytes that arrived in ``frame``; ``now`` is the (frame, ts) being
        processed, which completes any PDU finished by these bytes (default: ``frame``)."""
        self.now = now or (frame, ts_ns)
        if not self.started:
            self.base = offset
            self.started = True
        self.buf += data
        self.chunks.append((offset + len(data), frame, ts_ns))
        self.last_frame, self.last_ts = frame, ts_ns
        out = self._drain(final=False)
        if len(self.chunks) > MAX_PDU_SEGMENTS:
            self._give_up(out)
        return out

    def gap(self, offset: int, length: int, frame: int, ts_ns: int, cause: str = LOST) -> list:
        """``length`` bytes are missing just before stream ``offset`` (``cause``: lost or
        not captured)."""
        out: list = []
        self.now = (frame, ts_ns)
        if not self.started:        # the stream's first bytes are missing
            self.started = True
            self._hide(offset, length, frame, ts_ns, cause, out)
            return out
        if not self.in_sync and self.skip_to is None:
            # what precedes the cut may still hold a header whose frame runs into it
            if not (self.buf and self._resync(out, final=False, at_cut=True)) \
                    or self._frame_run(out):
                self._discard(len(self.buf))
                self._reset(offset)
                return out
        self._cut_in_sync(offset, length, frame, ts_ns, cause, out)
        return out

    def close(self) -> list:
        """End of the stream: flush what can still be framed, report what cannot."""
        self.now = (self.last_frame, self.last_ts)
        out = self._drain(final=True)
        if self.partial is not None:
            p = self.partial
            out.append(LostPdu(self.conn, self.direction, p.offset, len(p.data), p.size,
                               "end", self.last_frame, self.last_ts))
            self.partial = None
        elif self.buf and self.in_sync and self.skip_to is None:
            need = 0
            if len(self.buf) >= HEADER_SIZE:
                need = frame_size(self.buf, 0)
            out.append(LostPdu(self.conn, self.direction, self.base, len(self.buf), need,
                               "end", self.last_frame, self.last_ts))
        elif not self.in_sync and (self.buf or self._pending_skip):   # trailing garbage
            out.append(self._skipped(self._pending_skip + len(self.buf), NO_HEADER))
            self._pending_skip = 0
        self._reset(self.base + len(self.buf))
        return out

    # -- cuts -------------------------------------------------------------------------
    def _cut_in_sync(self, offset: int, length: int, frame: int, ts_ns: int, cause: str,
                     out: list) -> None:
        """Missing bytes [offset - length, offset) while the buffer starts on a boundary
        (or while the rest of a partial PDU is skipped)."""
        if self.skip_to is None:
            buf = self.buf
            reason = "gap" if cause == LOST else cause
            if len(buf) < BODYLEN_OFFSET + 4 or buf[0] not in _LEGAL_MAGICS:
                if buf:         # its header is cut before its length: framing is lost
                    out.append(LostPdu(self.conn, self.direction, self.base, len(buf), 0,
                                       reason, frame, ts_ns))
                self._hide(offset, length, frame, ts_ns, cause, out)
                return
            start, size = self.base, frame_size(buf, 0)
            if size > MAX_FRAME_SIZE:
                self._hide(offset, length, frame, ts_ns, cause, out)
                return
            if len(buf) < HEADER_SIZE:  # its length was captured, not all its header:
                out.append(LostPdu(self.conn, self.direction, start, len(buf), size, reason,
                                   frame, ts_ns))      # not decoded, but framing goes on
                self._consume(len(buf))
            else:
                data = bytes(buf)
                frames, ts = self._consume(len(buf))
                self.partial = _Partial(start, data, size, frames, ts)
            self.skip_to = start + size
        skip_to = self.skip_to
        self._reset(offset)
        if offset < skip_to:
            return                          # the rest of the message follows the cut
        self.skip_to = None
        self._finish_partial(out)
        if offset > skip_to:
            self._hide(offset, offset - skip_to, frame, ts_ns, cause, out)

    def _finish_partial(self, out: list) -> None:
        """The stream reached the end of the partial PDU: it comes out now (after what
        arrived before its end), cited at the frames of its captured prefix, the frames
        that show it (as Wireshark does)."""
        p = self.partial
        if p is None:
            return
        self.partial = None
        out.append(_new(Pdu, (self.conn, self.direction, p.offset, p.data, p.frames,
                              p.frames[-1], p.ts, p.size - len(p.data))))
        self.framed_ts = p.ts

    def _hide(self, offset: int, length: int, frame: int, ts_ns: int, cause: str,
              out: list) -> None:
        """Missing bytes hide a boundary: out of sync until a provable header."""
        self._reset(offset)
        if not self.in_sync and self.resync_reason == "after_gap":
            return
        self.in_sync = False
        self.resync_reason = "after_gap"
        out.append(Hidden(self.conn, self.direction, offset - length, self.framed_ts, cause,
                          frame, ts_ns))

    # -- reports ----------------------------------------------------------------------
    def _skipped(self, n: int, no_header_cause: str | None) -> Resync:
        """The report of ``n`` skipped bytes: for garbage, at the frame of the bad header."""
        if self.resync_reason == "garbage":
            frame, ts = self._garbage_at or (self.last_frame, self.last_ts)
            return Resync(self.conn, self.direction, self.base + len(self.buf) * (no_header_cause is not None),
                          n, "garbage", self._garbage_cause or no_header_cause,
                          self._garbage_detail or "no plausible header before the end of the stream",
                          frame, ts)
        frame, ts = (self.chunks[0][1], self.chunks[0][2]) if self.chunks else self.now
        detail = "no plausible header before the end of the stream" if no_header_cause else ""
        return Resync(self.conn, self.direction, self.base + len(self.buf) * (no_header_cause is not None),
                      n, self.resync_reason or "garbage", no_header_cause, detail, frame, ts)

    # -- internals ----------------------------------------------------------------------
    def _give_up(self, out: list) -> None:
        """Too many segments carry the unfinished PDU: drop it and skip its remaining
        bytes; or an unconfirmed header (resync) waits too long: try the next candidate.
        Per-direction state stays bounded."""
        buf = self.buf
        if self.in_sync and len(buf) >= HEADER_SIZE:
            need = frame_size(buf, 0)
            out.append(LostPdu(self.conn, self.direction, self.base, len(buf), need, "cap",
                               self.last_frame, self.last_ts))
            self.skip_to = self.base + need
            self._reset(self.base + len(buf))
        else:       # an unconfirmed header waits for its body: skip it, scan on
            while len(self.chunks) > MAX_PDU_SEGMENTS and not self.in_sync and self.buf:
                self._discard(1)
                out += self._drain(final=False)

    def _reset(self, offset: int) -> None:
        self.buf = bytearray()
        self.chunks = []
        self.base = offset

    def _consume(self, n: int) -> tuple[tuple[int, ...], int]:
        """Drop ``n`` bytes from the front; return the frames that carried them and the
        timestamp of the latest of those frames (the one that completed the bytes)."""
        end = self.base + n
        chunks = self.chunks
        frames, last, ts = set(), -1, self.last_ts
        used = 0
        for c_end, frame, c_ts in chunks:
            frames.add(frame)
            if frame > last:
                last, ts = frame, c_ts
            if c_end > end:
                break
            used += 1
            if c_end == end:
                break
        del chunks[:used]
        del self.buf[:n]
        self.base = end
        return tuple(sorted(frames)), ts

    def _drain(self, final: bool) -> list:
        out = []
        while True:
            if self.skip_to is not None:
                drop = min(self.skip_to - self.base, len(self.buf))
                if drop:
                    self._consume(drop)
                if self.base < self.skip_to:
                    return out
                self.skip_to = None
                self.in_sync = True
                self._finish_partial(out)
            if not self.in_sync and not self._resync(out, final):
                return out
            if not self._frame_run(out):
                return out

    def _frame_run(self, out: list) -> bool:
        """Frame consecutive PDUs from the start of the buffer (the hot path). Returns True
        when it stopped at a header that cannot start a frame (now out of sync)."""
        buf, chunks, base = self.buf, self.chunks, self.base
        n, pos, ci = len(buf), 0, 0
        conn, direction = self.conn, self.direction
        now_frame, now_ts = self.now
        bad = False
        view = buf              # (compiled: the pointer to its bytes)
        new, legal = _new, _LEGAL_MAGICS
        header, limit = HEADER_SIZE, MAX_FRAME_SIZE
        ts = self.framed_ts
        while n - pos >= header:
            if cython.compiled:     # unpack_bodylen in C: 4 bytes, big-endian
                b = pos + BODYLEN_OFFSET
                size = view[b]      # (a 64-bit shift)
                size = header + (size << 24 | view[b + 1] << 16 | view[b + 2] << 8 | view[b + 3])
            else:
                size = header + unpack_bodylen(buf, pos + BODYLEN_OFFSET)[0]
            if buf[pos] not in legal or size > limit:   # buf[pos]: the magic
                self.in_sync = False
                self.resync_reason = "garbage"
                self._garbage_cause, text = header_problem(buf, pos)
                self._garbage_detail = f"at offset {base + pos}: {text}"
                self._garbage_at = _carrier(chunks, ci, base + pos)
                bad = True
                break
            end = pos + size
            if end > n:
                break
            abs_end = base + end
            c_end, frame, c_ts = chunks[ci]
            if c_end >= abs_end:                 # the whole PDU came in one chunk
                frames, last, last_ts = (frame,), frame, c_ts
                if c_end == abs_end:
                    ci += 1
            else:
                seen, last, last_ts = {frame}, frame, c_ts
                ci += 1
                while True:
                    c_end, frame, c_ts = chunks[ci]
                    seen.add(frame)
                    if frame > last:
                        last, last_ts = frame, c_ts
                    if c_end > abs_end:
                        break
                    ci += 1
                    if c_end == abs_end:
                        break
                frames = tuple(sorted(seen))
            done, ts = (now_frame, now_ts) if now_frame >= last else (last, last_ts)
            out.append(new(Pdu, (conn, direction, base + pos, bytes(view[pos:end]), frames, done,
                                 ts, 0)))
            pos = end
        self.framed_ts = ts
        if pos:
            del buf[:pos]
            del chunks[:ci]
            self.base = base + pos
        return bad

    def _resync(self, out: list, final: bool, at_cut: bool = False) -> bool:
        """Scan for a proven header; True when back in sync (buffer starts at it).
        ``at_cut``: missing bytes follow the buffer, so a frame that runs past its end is
        proven by its layout (:func:`fits_layout`) instead of by the header after it."""
        buf = self.buf
        n = len(buf)
        pos = 0
        # right after a cut the bytes start where a segment did, where senders start messages:
        # a header there that fits its layout needs no confirmation (waiting for the next
        # header would deliver it after what the other direction sent meanwhile)
        first = self.resync_reason == "after_gap" and not self._pending_skip
        while pos + HEADER_SIZE <= n:
            if plausible(buf, pos):
                nxt = pos + frame_size(buf, pos)
                if first and pos == 0 and fits_layout(buf, 0):
                    break
                if nxt + HEADER_SIZE <= n:
                    if plausible(buf, nxt):
                        break
                elif at_cut:
                    if fits_layout(buf, pos):
                        break
                elif final:
                    if nxt == n:
                        break
                else:
                    self._discard(pos)         # wait for more data to confirm it
                    return False
            found = _MAGIC_RE.search(buf, pos + 1)
            pos = found.start() if found else n
        else:
            if not at_cut:
                self._discard(n if final else max(0, n - HEADER_SIZE + 1))
            return False
        self._discard(pos)
        if self._pending_skip or self.resync_reason == "after_gap":      # a cut ends here
            out.append(self._skipped(self._pending_skip, None))
        self._pending_skip = 0
        self.in_sync = True
        self.resync_reason = None
        return True

    def _discard(self, n: int) -> None:
        if n:
            self._consume(n)
            self._pending_skip += n
