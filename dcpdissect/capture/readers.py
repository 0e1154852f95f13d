"""Streaming readers for pcap and pcapng capture files (optionally gzip-compressed).

``open_capture(path)`` returns a :class:`CaptureReader`; iterating it yields
:class:`Frame` tuples. Memory use is bounded by the read chunk size plus the
largest single record, whatever the file size. Faults are raised as
:class:`CaptureError` at the point where they are found, after every earlier
frame has been yielded.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import sys
import zlib
from struct import Struct
from typing import Iterator, NamedTuple, Optional

try:
    import cython
except ImportError:                 # without Cython: this module runs from its source
    from .. import kernel as cython

__all__ = ["Frame", "CaptureError", "CaptureReader", "open_capture", "parse_idb", "walk_pcapng",
           "IDLE", "NO_LINKTYPE", "TLS_KEY_LOG"]

CHUNK = 1 << 20                 # read size
MAX_CAPLEN = 0x10000000         # 256 MiB: anything bigger is corruption
MIN_SNAP_LIMIT = 262144         # caplen is only "absurd" above max(snaplen, this)
MAX_BLOCK = MAX_CAPLEN + 0x10000

_GZIP_MAGIC = b"\x1f\x8b"
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
# first four bytes -> (struct byte order, nanosecond resolution)
_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", False),
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),
    b"\xa1\xb2\x3c\x4d": (">", True),
}
_BOM_LE = b"\x4d\x3c\x2b\x1a"
_BOM_BE = b"\x1a\x2b\x3c\x4d"

_PCAP_GLOBAL = {e: Struct(e + "IHHiIII") for e in "<>"}
_PCAP_REC = {e: Struct(e + "IIII") for e in "<>"}
_NG_HDR = {e: Struct(e + "II") for e in "<>"}
_NG_U32 = {e: Struct(e + "I") for e in "<>"}
_NG_SHB = {e: Struct(e + "HH") for e in "<>"}              # major, minor at +12
_NG_IDB = {e: Struct(e + "HxxI") for e in "<>"}            # linktype, snaplen at +8
_NG_EPB = {e: Struct(e + "IIIII") for e in "<>"}           # ifid, tshi, tslo, caplen, wirelen at +8
_NG_PB = {e: Struct(e + "HHIIII") for e in "<>"}           # ifid, drops, tshi, tslo, caplen, wirelen at +8
_NG_OPT = {e: Struct(e + "HH") for e in "<>"}
_NG_I64 = {e: Struct(e + "q") for e in "<>"}
_NG_DSB = {e: Struct(e + "II") for e in "<>"}              # secrets type, length at +8

NO_LINKTYPE = -1            # a record that carries no packet (and no time: ts_ns 0)
TLS_KEY_LOG = 0x544C534B    # decryption secrets type "TLSK": NSS key log lines
_ETHERNET = 1               # the link type whose frames may end in an FCS
IDLE = None                 # iterated instead of a frame (when asked): live input has no
#                             more bytes ready for now

_new_tuple = tuple.__new__


class Frame(NamedTuple):
    """One frame, as tshark numbers them: a captured packet, or a record without one."""

    number: int      # 1-based frame number across the whole file, as tshark numbers it
    ts_ns: int       # absolute timestamp, nanoseconds since the epoch (0: none recorded)
    linktype: int    # LINKTYPE_ value of the capturing interface (NO_LINKTYPE: no packet)
    data: bytes      # captured bytes (without the Ethernet FCS an interface declares)
    wirelen: int     # original length on the wire
    interface: int   # pcapng interface id (0 for classic pcap)


class CaptureError(Exception):
    """Bad or truncated capture.

    ``frame`` is the number of the frame being read when the fault was found
    (last good frame + 1), or None for faults not tied to a frame.
    """

    def __init__(self, path: str, frame: Optional[int], reason: str):
        super().__init__(path, frame, reason)
        self.path = path
        self.frame = frame
        self.reason = reason

    def __str__(self) -> str:
        if self.frame is None:
            return f"{self.path}: {self.reason}"
        return f"{self.path}: frame {self.frame}: {self.reason}"


class _Prefixed:
    """Minimal read-only stream: ``head`` followed by the rest of ``raw``.

    Small reads (gzip header fields) are filled exactly; large ones may be short.
    """

    def __init__(self, head: bytes, raw):
        self._head = head
        self._raw = raw
        self._read1 = getattr(raw, "read1", None) or raw.read
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        head = self._head
        if n is None or n < 0:
            self._head = b""
            return head + self._raw.read()
        if head:
            if n <= len(head):
                self._head = head[n:]
                return head[:n]
            self._head = b""
            n -= len(head)
        if n > 4096:
            return head + self._read1(n) if head else self._read1(n)
        parts = [head]
        while n > 0:
            chunk = self._read1(n)
            if not chunk:
                break
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)


def _tsresol(code: int) -> tuple[int, int]:
    """(mul, div) such that ns = units * mul // div for an if_tsresol byte."""
    n = code & 0x7F
    if code & 0x80:
        return 1_000_000_000, 1 << n
    if n <= 9:
        return 10 ** (9 - n), 1
    return 1, 10 ** (n - 9)


def _cut(frame: int, what: str, got: int, want: int) -> str:
    return f"file cut mid-record (frame {frame}: {what} truncated, got {got} of {want} bytes)"


class CaptureReader:
    """Iterable, context-managed reader over one capture file or stdin."""

    path: str
    format: str
    compressed: bool
    bytes_read: int
    size: Optional[int]

    def __init__(self, path):
        self.path = path if path == "-" else os.fspath(path)
        self.format = ""
        self.compressed = False
        self.bytes_read = 0
        self.size = None
        self._owned = None      # file object we must close
        self._gzip = None
        self._read = None       # callable(n) -> bytes
        self._buf = b""         # bytes already read but not consumed
        self._iter: Optional[Iterator[Frame]] = None
        self._pcap_hdr = None
        # pcapng decryption secrets blocks, as the walk meets them (set before iterating):
        # on_secrets(frames read before the block, secrets type, secrets data)
        self.on_secrets = None
        # live input (a pipe, stdin): when set, IDLE comes between the frames where no
        # more bytes are ready, so that a consumer holding frames can let them go
        self.idle_marks = False
        self._fd: Optional[int] = None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # -- setup -----------------------------------------------------------

    def _error(self, frame: Optional[int], reason: str) -> CaptureError:
        return CaptureError(self.path, frame, reason)

    def _io_reason(self, exc: BaseException) -> str:
        if isinstance(exc, EOFError):
            return "compressed stream truncated (gzip data ends before its end-of-stream marker)"
        if isinstance(exc, (gzip.BadGzipFile, zlib.error)):
            return f"corrupt gzip data ({exc})"
        if isinstance(exc, OSError):
            return f"read error ({exc.strerror or exc})"
        return f"read error ({exc})"

    def _open(self) -> None:
        if self.path == "-":
            stdin = sys.stdin
            raw = getattr(stdin, "buffer", stdin)
            try:
                self._fd = raw.fileno()
            except (AttributeError, OSError, ValueError):
                self._fd = None
        else:
            try:
                raw = io.open(self.path, "rb", buffering=0)
            except FileNotFoundError:
                raise self._error(None, "no such file") from None
            except IsADirectoryError:
                raise self._error(None, "is a directory") from None
            except PermissionError:
                raise self._error(None, "permission denied") from None
            except OSError as e:
                raise self._error(None, f"cannot open ({e.strerror or e})") from None
            self._owned = raw
            try:
                st = os.fstat(raw.fileno())
            except OSError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise self._error(None, "is a directory")
            if st is not None and stat.S_ISREG(st.st_mode):
                self.size = st.st_size
            elif st is not None:
                self._fd = raw.fileno()
        read = getattr(raw, "read1", None) or raw.read
        head = self._read_at_least(read, b"", 4, None)
        if not head:
            raise self._error(None, "empty file (0 bytes)")
        if head[:2] == _GZIP_MAGIC:
            self.compressed = True
            self.size = None
            try:
                gz = gzip.GzipFile(fileobj=_Prefixed(head, raw), mode="rb")
            except Exception as e:  # pragma: no cover - GzipFile does no I/O here
                raise self._error(None, self._io_reason(e)) from None
            self._gzip = gz
            read = gz.read1
            head = self._read_at_least(read, b"", 4, None)
            if not head:
                raise self._error(None, "empty capture (gzip data decompresses to 0 bytes)")
        self._read = read
        magic = head[:4]
        if magic == _PCAPNG_MAGIC:
            self.format = "pcapng"
            self._buf = head
            return
        if magic in _PCAP_MAGICS:
            self.format = "pcap"
            head = self._read_at_least(read, head, 24, None)
            if len(head) < 24:
                raise self._error(None, f"file cut mid-record (global header truncated, got {len(head)} of 24 bytes)")
            order, nano = _PCAP_MAGICS[magic]
            _, _vmaj, _vmin, _zone, _sig, snaplen, network = _PCAP_GLOBAL[order].unpack_from(head)
            self._pcap_hdr = (order, nano, snaplen, network & 0xFFFF)
            self._buf = head[24:]
            self.bytes_read = 24
            return
        if len(head) < 4 and any(m.startswith(head) for m in (*_PCAP_MAGICS, _PCAPNG_MAGIC)):
            raise self._error(None, f"file cut mid-record (global header truncated, got {len(head)} of 24 bytes)")
        raise self._error(None, f"not a pcap or pcapng file (starts with {head[:4].hex()})")

    def _read_at_least(self, read, have: bytes, need: int, frame: Optional[int]) -> bytes:
        """Return ``have`` extended to at least ``need`` bytes, or shorter at EOF."""
        if len(have) >= need:
            return have
        parts = [have]
        got = len(have)
        while got < need:
            try:
                chunk = read(max(CHUNK, need - got))
            except (OSError, EOFError, ValueError, zlib.error) as e:
                raise self._error(frame, self._io_reason(e)) from None
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    # -- iteration -------------------------------------------------------

    def __iter__(self) -> Iterator[Frame]:
        if self._iter is None:
            self._iter = self._iter_pcap() if self.format == "pcap" else self._iter_pcapng()
        return self._iter

    def __enter__(self) -> "CaptureReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying file (stdin is left open)."""
        gz, self._gzip = self._gzip, None
        owned, self._owned = self._owned, None
        for f in (gz, owned):
            if f is not None:
                try:
                    f.close()
                except (OSError, EOFError, ValueError, zlib.error):
                    pass

    def _idle(self) -> bool:
        """Whether live input has no byte ready now (the next read would wait)."""
        if self._fd is None:
            return False
        import select           # live input only: not loaded for files
        try:
            return not select.select([self._fd], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    @cython.locals(frac_mul="long long", limit="Py_ssize_t", buf=bytes, raw="const char *",
                   n="Py_ssize_t", pos="Py_ssize_t", base="Py_ssize_t", number="Py_ssize_t",
                   sec="long long", frac="long long", caplen="Py_ssize_t", start="Py_ssize_t",
                   end="Py_ssize_t")
    def _iter_pcap(self) -> Iterator[Frame]:
        order, nano, snaplen, linktype = self._pcap_hdr
        unpack_rec = _PCAP_REC[order].unpack_from
        frac_mul = 1 if nano else 1000
        limit = min(max(snaplen, MIN_SNAP_LIMIT), MAX_CAPLEN)
        fill = self._read_at_least
        read = self._read
        new = _new_tuple
        buf = self._buf
        raw = buf                   # (compiled: the pointer to its bytes)
        self._buf = b""
        n = len(buf)
        pos = 0
        base = self.bytes_read       # stream offset of buf[0]
        number = 0
        while True:
            if pos + 16 > n:
                if self.idle_marks and self._idle():
                    yield IDLE
                base += pos
                buf = raw = fill(read, buf[pos:], 16, number + 1)
                pos = 0
                n = len(buf)
                if n < 16:
                    if n == 0:
                        return
                    raise self._error(number + 1, _cut(number + 1, "record header", n, 16))
            sec, frac, caplen, wirelen = unpack_rec(buf, pos)
            if caplen > limit:
                raise self._error(number + 1, f"record captured length {caplen} is absurd")
            start = pos + 16
            end = start + caplen
            if end > n:
                if self.idle_marks and self._idle():
                    yield IDLE
                base += pos
                buf = raw = fill(read, buf[pos:], 16 + caplen, number + 1)
                pos = 0
                n = len(buf)
                start = 16
                end = start + caplen
                if end > n:
                    raise self._error(number + 1, _cut(number + 1, "record data", n - 16, caplen))
            number += 1
            pos = end
            self.bytes_read = base + end
            yield new(Frame, (number, sec * 1_000_000_000 + frac * frac_mul, linktype,
                              raw[start:end], wirelen, 0))

    def _iter_pcapng(self) -> Iterator[Frame]:
        new = _new_tuple
        src = _StreamView(self._buf, self._read, self._read_at_least)
        self._buf = b""
        live = self.idle_marks and self._fd is not None
        for number, ts, linktype, buf, start, caplen, wirelen, ifid, _pos, end, ctx in \
                walk_pcapng(self.path, src.view, secrets=self.on_secrets):
            self.bytes_read = end
            yield new(Frame, (number, ts, linktype, buf[start:start + caplen], wirelen, ifid))
            if live and not src.holds_block(end, ctx[1]) and self._idle():
                yield IDLE
        self.bytes_read = src.base + len(src.buf)       # the end: every block was read


def parse_idb(buf: bytes, pos: int, end: int, order: str) -> tuple[int, int, int, int, int, int]:
    """(linktype, snaplen, ts mul, ts div, ts offset ns, FCS bytes) from an IDB."""
    linktype, snaplen = _NG_IDB[order].unpack_from(buf, pos + 8)
    resol = 6
    offset = fcs = 0
    for code, v, olen in _options(buf, pos + 16, end - 4, order):
        if code == 9 and olen >= 1:
            resol = buf[v]
        elif code == 14 and olen == 8:
            offset = _NG_I64[order].unpack_from(buf, v)[0] * 1_000_000_000
        elif code == 13 and olen >= 1:
            fcs = buf[v]
    mul, div = _tsresol(resol)
    return linktype, snaplen, mul, div, offset, fcs if linktype == _ETHERNET else 0


def _options(buf: bytes, o: int, limit: int, order: str):
    """(code, value offset, value length) of each option of a block, from ``o`` to
    ``limit``, up to the end-of-options option or one that runs past ``limit``."""
    opt = _NG_OPT[order]
    while o + 4 <= limit:
        code, olen = opt.unpack_from(buf, o)
        if code == 0:
            return
        v = o + 4
        if v + olen > limit:
            return
        yield code, v, olen
        o = v + ((olen + 3) & ~3)


def _flags_fcs(buf: bytes, o: int, limit: int, order: str) -> int | None:
    """The FCS length of a packet block's ``epb_flags`` option (options from ``o`` to
    ``limit``), None when the block does not give one."""
    for code, v, olen in _options(buf, o, limit, order):
        if code == 2 and olen == 4:
            return (_NG_U32[order].unpack_from(buf, v)[0] >> 5) & 0xF or None
    return None


def _without_fcs(caplen: int, wirelen: int, fcs: int) -> int:
    """The captured length of a frame without the FCS bytes it holds (none when the
    capture cut the frame before them)."""
    keep = wirelen - fcs
    return max(keep, 0) if caplen > keep else caplen


class _StreamView:
    """``view(pos, n, frame)`` over a forward-only stream (file, gzip, stdin): the bytes
    from ``pos`` on, at least ``n`` of them unless the stream ends; earlier bytes are
    dropped as the walk moves on."""

    def __init__(self, head: bytes, read, fill):
        self.buf = head
        self.base = 0
        self.read = read
        self.fill = fill

    def holds_block(self, pos: int, order: str) -> bool:
        """Whether the whole block at ``pos`` has been read already."""
        off = pos - self.base
        left = len(self.buf) - off
        return left >= 12 and left >= _NG_U32[order].unpack_from(self.buf, off + 4)[0]

    def view(self, pos: int, n: int, frame: int) -> tuple[bytes, int, int]:
        off = pos - self.base
        buf = self.buf
        if off + n > len(buf):
            buf = self.buf = self.fill(self.read, buf[off:], n, frame)
            self.base = pos
            off = 0
        return buf, off, min(n, len(buf) - off)


_SHB = 0x0A0D0D0A
_DSB = 0x0000000A
# Blocks that tshark numbers as frames though they carry no packet: systemd journal
# export, custom blocks (copiable or not), sysdig events.
_RECORDS = frozenset((0x00000009, 0x00000BAD, 0x40000BAD, 0x00000204, 0x00000216, 0x00000221))


def walk_pcapng(path: str, view, pos: int = 0, number: int = 0, ctx: tuple | None = None,
                last: int | None = None, secrets=None):
    """The one pcapng block walker (the reader, the pipeline's index pass and its chunk
    reader all use it). ``view(pos, n, frame)`` gives ``(buffer, offset, available)`` for
    the ``n`` bytes at file offset ``pos``. Starts at ``pos`` with frame ``number`` behind
    it and the section context ``ctx`` (``('pcapng', byte order, interfaces)``; None: a
    section header comes first) and stops at the end of the file or after frame ``last``.

    Yields ``(number, ts_ns, linktype, buffer, start, caplen, wirelen, interface, pos, end,
    ctx)`` per frame, numbered as tshark numbers them: packet blocks (their data is
    ``buffer[start:start + caplen]``, an Ethernet FCS left out) and the records tshark
    counts without a packet (``NO_LINKTYPE``, no data, no time). The block spans file
    offsets ``pos`` to ``end``. Each decryption secrets block is handed to
    ``secrets(frames before it, secrets type, data)`` when given. Faults raise
    :class:`CaptureError` naming the frame being read."""
    order, ifaces = (ctx[1], ctx[2]) if ctx else ("", ())
    hdr = epb = u32 = None
    if order:
        hdr, epb, u32 = _NG_HDR[order], _NG_EPB[order], _NG_U32[order]
    if last is not None and number >= last:
        return

    def fail(reason: str) -> CaptureError:
        return CaptureError(path, number + 1, reason)

    while True:
        buf, off, avail = view(pos, 12, number + 1)
        if avail < 12:
            if avail == 0:
                return
            raise fail(_cut(number + 1, "record header", avail, 12))
        if buf[off:off + 4] == _PCAPNG_MAGIC:
            bom = buf[off + 8:off + 12]
            if bom == _BOM_LE:
                order = "<"
            elif bom == _BOM_BE:
                order = ">"
            else:
                raise fail(f"section header has bad byte-order magic {bom.hex()}")
            hdr, epb, u32 = _NG_HDR[order], _NG_EPB[order], _NG_U32[order]
            btype = _SHB
            blen = hdr.unpack_from(buf, off)[1]
        elif hdr is None:
            raise fail("first block is not a section header")
        else:
            btype, blen = hdr.unpack_from(buf, off)
        if blen < 12 or blen & 3:
            raise fail(f"block total length {blen} is invalid (block type 0x{btype:x})")
        if blen > MAX_BLOCK:
            raise fail(f"block total length {blen} is absurd (block type 0x{btype:x})")
        buf, off, avail = view(pos, blen, number + 1)
        if avail < blen:
            raise fail(_cut(number + 1, "record data", avail, blen))
        end = pos + blen
        trail = u32.unpack_from(buf, off + blen - 4)[0]
        if trail != blen:
            raise fail(f"block trailing length {trail} does not match leading length {blen} "
                       f"(block type 0x{btype:x})")
        if btype == 6 or btype == 2:                     # (Enhanced) Packet Block
            if blen < 32:
                what = "enhanced packet block" if btype == 6 else "packet block"
                raise fail(f"{what} too short ({blen} bytes)")
            if btype == 6:
                ifid, tshi, tslo, caplen, wirelen = epb.unpack_from(buf, off + 8)
            else:
                ifid, _drops, tshi, tslo, caplen, wirelen = _NG_PB[order].unpack_from(buf, off + 8)
            if caplen > blen - 32:
                raise fail(f"record captured length {caplen} exceeds its block "
                           f"({blen - 32} bytes of room)")
            if ifid >= len(ifaces):
                raise fail(f"packet names undefined interface {ifid} "
                           f"(section defines {len(ifaces)})")
            linktype, _snap, mul, div, tsoff, fcs = ifaces[ifid]
            if linktype == _ETHERNET:
                opts = off + 28 + ((caplen + 3) & ~3)
                if opts < off + blen - 4:
                    fcs = _flags_fcs(buf, opts, off + blen - 4, order) or fcs
                if fcs:
                    caplen = _without_fcs(caplen, wirelen, fcs)
            number += 1
            yield (number, ((tshi << 32) | tslo) * mul // div + tsoff, linktype, buf, off + 28,
                   caplen, wirelen, ifid, pos, end, ctx)
        elif btype == 3:                                 # Simple Packet Block
            if blen < 16:
                raise fail(f"simple packet block too short ({blen} bytes)")
            if not ifaces:
                raise fail("simple packet block before any interface description")
            linktype, snaplen, _mul, _div, _off, fcs = ifaces[0]
            wirelen = u32.unpack_from(buf, off + 8)[0]
            caplen = min(wirelen, blen - 16)
            if snaplen:
                caplen = min(caplen, snaplen)
            if fcs:
                caplen = _without_fcs(caplen, wirelen, fcs)
            number += 1
            yield number, 0, linktype, buf, off + 12, caplen, wirelen, 0, pos, end, ctx
        elif btype in _RECORDS:
            number += 1
            yield number, 0, NO_LINKTYPE, buf, off, 0, 0, -1, pos, end, ctx
        elif btype == _DSB:
            if blen < 20:
                raise fail(f"decryption secrets block too short ({blen} bytes)")
            stype, slen = _NG_DSB[order].unpack_from(buf, off + 8)
            if slen > blen - 20:
                raise fail(f"decryption secrets length {slen} exceeds its block "
                           f"({blen - 20} bytes of room)")
            if secrets is not None:
                secrets(number, stype, bytes(buf[off + 16:off + 16 + slen]))
        elif btype == _SHB:
            if blen < 28:
                raise fail(f"section header block too short ({blen} bytes)")
            major, minor = _NG_SHB[order].unpack_from(buf, off + 12)
            if major != 1:
                raise fail(f"unsupported pcapng version {major}.{minor}")
            ifaces = ()
            ctx = ("pcapng", order, ifaces)
        elif btype == 1:                                 # Interface Description Block
            if blen < 20:
                raise fail(f"interface description block too short ({blen} bytes)")
            ifaces = ifaces + (parse_idb(buf, off, off + blen, order),)
            ctx = ("pcapng", order, ifaces)
        pos = end
        if last is not None and number >= last:
            return


def open_capture(path: str) -> CaptureReader:
    """Open a pcap/pcapng file (gzip allowed); ``'-'`` reads stdin."""
    return CaptureReader(path)
