"""Record-aligned pieces of capture files: a cheap index pass and a reader that starts
at any piece.

``index_file(path, chunk_size)`` parses record headers only (pcap: the 16-byte header of
each record; pcapng: block headers and trailers, the packet-block fields and whole
section/interface blocks; reads go through a 1 MiB window, so only bodies larger than that
are skipped on disk) and cuts the file into chunks of about
``chunk_size`` bytes. Each :class:`Piece` carries what is needed to parse from its
offset: the pcap byte order, timestamp resolution, snap length and link type, or the
pcapng byte order and interface table in force there. Chunks are split further into
blocks of at most ``block_frames`` frames with their largest timestamp; those let a
reader find "the first packet after frame N with a timestamp of at least T" by
re-reading one block instead of the file. Each piece also carries the state of the
file's time order where it starts (:class:`~dcpdissect.capture.order.TimeKeys`), so that
its frames get the order times they get in the whole file, and the index keeps the
decryption secrets blocks with the number of frames before each.

The index pass finds the same faults as :func:`dcpdissect.capture.readers.open_capture`,
with the same frame numbers and reasons, so the pieces cover exactly the frames the local
reader yields. gzip-compressed files cannot be indexed without decompressing them: they
become one unsplittable piece read with ``open_capture``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ..capture.order import TimeKeys
from ..capture.readers import (
    _PCAP_REC,
    MAX_CAPLEN,
    MIN_SNAP_LIMIT,
    CaptureError,
    Frame,
    _cut,
    open_capture,
    walk_pcapng,
)

__all__ = [
    "BLOCK_FRAMES",
    "DEFAULT_CHUNK_SIZE",
    "FileIndex",
    "Piece",
    "index_file",
    "parse_size",
    "read_piece",
    "read_piece_at",
]

DEFAULT_CHUNK_SIZE = 256 << 20
BLOCK_FRAMES = 4096
WINDOW = 1 << 20
_new_tuple = tuple.__new__


class Piece(NamedTuple):
    """A run of consecutive records of one capture file."""

    path: str
    offset: int          # byte offset of the first record (0 when unsplittable)
    first_frame: int     # its 1-based frame number
    frames: int          # number of frames; -1: read the whole file with open_capture
    nbytes: int          # bytes covered
    ctx: tuple           # ('pcap', order, nano, snaplen, linktype) | ('pcapng', order, ifaces) | ('stream',)
    max_ts: int | None  # largest record timestamp (None: unknown)
    order: tuple | None = None   # TimeKeys state before its first frame (None: a file's start)


class FileIndex(NamedTuple):
    path: str
    format: str                  # 'pcap', 'pcapng' or '' when unreadable
    splittable: bool
    frames: int                  # frames before the end or the fault (-1: unknown, unsplittable)
    chunks: list                 # [Piece]
    blocks: list                 # [Piece], finer than chunks (splittable files only)
    error: CaptureError | None
    secrets: tuple = ()          # (frames before, secrets type, data) per secrets block


def parse_size(text) -> int:
    """'256MB', '64k', '1.5GB' or a byte count."""
    if isinstance(text, int):
        return text
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    if mul != 1:
        t = t[:-1]
    value = int(float(t) * mul)
    if value <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return value


class _Window:
    """Random access to a file through a sliding read buffer."""

    def __init__(self, f):
        self.f = f
        self.base = 0
        self.buf = b""

    def view(self, pos: int, n: int, frame: int | None = None) -> tuple[bytes, int, int]:
        """(buffer, offset of pos in it, bytes available from pos, at most n); ``frame``
        (the frame being read) as :func:`~dcpdissect.capture.readers.walk_pcapng` gives it."""
        off = pos - self.base
        buf = self.buf
        if off < 0 or off + n > len(buf):
            self.f.seek(pos)
            buf = self.buf = self.f.read(max(WINDOW, n))
            self.base = pos
            off = 0
        return buf, off, min(n, len(buf) - off)


class _Cutter:
    """Accumulates records into blocks and chunks."""

    def __init__(self, path: str, chunk_size: int, block_frames: int):
        self.path = path
        self.chunk_size = chunk_size
        self.block_frames = block_frames
        self.chunks: list[Piece] = []
        self.blocks: list[Piece] = []
        self.chunk = None        # [offset, first, frames, ctx, max_ts, order]
        self.block = None
        self.keys = TimeKeys()

    def add(self, pos: int, end: int, number: int, ts: int, size: int, ctx: tuple) -> None:
        if self.chunk is None:
            self.chunk = [pos, number, 0, ctx, ts, self.keys.state()]
        if self.block is None:
            self.block = [pos, number, 0, ctx, ts, self.keys.state()]
        self.keys.key(ts, size)
        for p in (self.chunk, self.block):
            p[2] += 1
            p[4] = max(p[4], ts)
        if end - self.chunk[0] >= self.chunk_size:
            self._close_block(end)
            self._close_chunk(end)
        elif self.block[2] >= self.block_frames:
            self._close_block(end)

    def _close_block(self, end: int) -> None:
        if self.block is not None:
            off, first, n, ctx, ts, order = self.block
            self.blocks.append(Piece(self.path, off, first, n, end - off, ctx, ts, order))
            self.block = None

    def _close_chunk(self, end: int) -> None:
        if self.chunk is not None:
            off, first, n, ctx, ts, order = self.chunk
            self.chunks.append(Piece(self.path, off, first, n, end - off, ctx, ts, order))
            self.chunk = None

    def finish(self, end: int) -> None:
        self._close_block(end)
        self._close_chunk(end)


def index_file(path: str, chunk_size: int = DEFAULT_CHUNK_SIZE,
               block_frames: int = BLOCK_FRAMES) -> FileIndex:
    """Index one capture (see the module docstring). Never raises CaptureError: a fault
    is returned in ``error`` together with the pieces before it."""
    try:
        reader = open_capture(path)
    except CaptureError as exc:
        return FileIndex(path, "", False, 0, [], [], exc)
    with reader:
        fmt, compressed, hdr = reader.format, reader.compressed, reader._pcap_hdr
        size = reader.size
    if compressed or size is None:
        whole = Piece(path, 0, 1, -1, size or 0, ("stream",), None)
        return FileIndex(path, fmt, False, -1, [whole], [], None)
    cutter = _Cutter(path, max(1, chunk_size), max(1, block_frames))
    try:
        f = open(path, "rb", buffering=0)
    except OSError as exc:
        return FileIndex(path, fmt, False, 0, [], [],
                         CaptureError(path, None, f"cannot open ({exc.strerror or exc})"))
    secrets: list = []
    with f:
        win = _Window(f)
        if fmt == "pcap":
            frames, end, error = _index_pcap(path, win, size, hdr, cutter)
        else:
            frames, end, error = _index_pcapng(path, win, size, cutter, secrets)
    cutter.finish(end)
    return FileIndex(path, fmt, True, frames, cutter.chunks, cutter.blocks, error,
                     tuple(secrets))


def _index_pcap(path, win, size, hdr, cutter):
    order, nano, snaplen, linktype = hdr
    ctx = ("pcap", order, nano, snaplen, linktype)
    limit = min(max(snaplen, MIN_SNAP_LIMIT), MAX_CAPLEN)
    rec = _PCAP_REC[order].unpack_from
    frac_mul = 1 if nano else 1000
    add = cutter.add
    pos = 24
    number = 0
    while True:
        buf, off, avail = win.view(pos, 16)
        if avail < 16:
            if avail == 0:
                return number, pos, None
            return number, pos, CaptureError(path, number + 1, _cut(number + 1, "record header", avail, 16))
        sec, frac, caplen, _wirelen = rec(buf, off)
        if caplen > limit:
            return number, pos, CaptureError(path, number + 1, f"record captured length {caplen} is absurd")
        end = pos + 16 + caplen
        if end > size:
            return number, pos, CaptureError(path, number + 1,
                                              _cut(number + 1, "record data", size - pos - 16, caplen))
        number += 1
        add(pos, end, number, sec * 1_000_000_000 + frac * frac_mul, caplen, ctx)
        pos = end


def _index_pcapng(path, win, size, cutter, secrets: list):
    add = cutter.add
    number = 0
    at = [0]                    # offset of the block being read

    def view(pos, n, frame):
        at[0] = pos
        return win.view(pos, n)

    def found(after, stype, data):
        secrets.append((after, stype, data))

    try:
        for number, ts, _lt, _buf, _start, caplen, _wire, _ifid, pos, end, ctx in \
                walk_pcapng(path, view, secrets=found):
            add(pos, end, number, ts, caplen, ctx)
    except CaptureError as exc:
        return number, at[0], exc
    return number, size, None


def read_piece(piece: Piece) -> Iterator[Frame]:
    """The frames of one piece, numbered as in the whole file. A fault raises
    :class:`CaptureError` after every earlier frame was yielded."""
    for frame, _at in read_piece_at(piece):
        yield frame


def read_piece_at(piece: Piece) -> Iterator[tuple[Frame, int]]:
    """(frame, file offset of its data) for the frames of one piece, as :func:`read_piece`
    (offset -1 in an unsplittable piece)."""
    if piece.frames < 0:
        with open_capture(piece.path) as reader:
            for frame in reader:
                yield frame, -1
        return
    if piece.frames == 0:
        return
    try:
        f = open(piece.path, "rb", buffering=0)
    except OSError as exc:
        raise CaptureError(piece.path, piece.first_frame,
                           f"cannot open ({exc.strerror or exc})") from None
    with f:
        win = _Window(f)
        if piece.ctx[0] == "pcap":
            yield from _read_pcap(piece, win)
        else:
            yield from _read_pcapng(piece, win)


def _changed(piece: Piece, number: int, reason: str) -> CaptureError:
    return CaptureError(piece.path, number, f"{reason} (file changed after it was indexed?)")


def _read_pcap(piece: Piece, win: _Window) -> Iterator[tuple[Frame, int]]:
    _, order, nano, _snap, linktype = piece.ctx
    rec = _PCAP_REC[order].unpack_from
    frac_mul = 1 if nano else 1000
    new = _new_tuple
    pos = piece.offset
    number = piece.first_frame - 1
    last = number + piece.frames
    view = win.view
    while number < last:
        buf, off, avail = view(pos, 16)
        if avail < 16:
            raise _changed(piece, number + 1, _cut(number + 1, "record header", avail, 16))
        sec, frac, caplen, wirelen = rec(buf, off)
        if off + 16 + caplen > len(buf):
            buf, off, avail = view(pos, 16 + caplen)
            if avail < 16 + caplen:
                raise _changed(piece, number + 1,
                               _cut(number + 1, "record data", avail - 16, caplen))
        number += 1
        yield new(Frame, (number, sec * 1_000_000_000 + frac * frac_mul, linktype,
                          buf[off + 16:off + 16 + caplen], wirelen, 0)), pos + 16
        pos += 16 + caplen


def _read_pcapng(piece: Piece, win: _Window) -> Iterator[tuple[Frame, int]]:
    new = _new_tuple
    last = piece.first_frame - 1 + piece.frames
    try:
        for number, ts, linktype, buf, start, caplen, wirelen, ifid, _pos, _end, _ctx in \
                walk_pcapng(piece.path, win.view, piece.offset, piece.first_frame - 1,
                            piece.ctx, last):
            # ``buf`` is the window's buffer, read from ``win.base``
            yield (new(Frame, (number, ts, linktype, buf[start:start + caplen], wirelen, ifid)),
                   win.base + start)
    except CaptureError as exc:
        raise _changed(piece, exc.frame, exc.reason) from None
