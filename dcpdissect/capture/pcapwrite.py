"""Minimal writers for classic pcap and pcapng capture files.

Both writers take timestamps as integer nanoseconds since the Unix epoch and
never consult the clock, so output is fully determined by the arguments.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

__all__ = [
    "PcapWriter",
    "PcapngWriter",
    "tsresol_units_per_second",
    "LINKTYPE_ETHERNET",
    "LINKTYPE_NULL",
    "LINKTYPE_RAW",
    "LINKTYPE_LINUX_SLL",
    "LINKTYPE_LINUX_SLL2",
]

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276

_PCAP_MAGIC_US = 0xA1B2C3D4
_PCAP_MAGIC_NS = 0xA1B23C4D

_BT_SHB = 0x0A0D0D0A
_BT_IDB = 0x00000001
_BT_EPB = 0x00000006
_BYTE_ORDER_MAGIC = 0x1A2B3C4D

_OPT_ENDOFOPT = 0
_OPT_COMMENT = 1
_SHB_USERAPPL = 4
_IF_NAME = 2
_IF_TSRESOL = 9

_NS_PER_S = 1_000_000_000


def tsresol_units_per_second(tsresol: int) -> int:
    """Units per second encoded by a raw ``if_tsresol`` option byte."""
    if not 0 <= tsresol <= 0xFF:
        raise ValueError(f"if_tsresol must be one byte, got {tsresol!r}")
    exp = tsresol & 0x7F
    return (2 ** exp) if tsresol & 0x80 else (10 ** exp)


def _check_ts(ts_ns: int) -> int:
    ts_ns = int(ts_ns)
    if ts_ns < 0:
        raise ValueError("timestamps before the epoch are not supported")
    return ts_ns


def _lengths(data: bytes, wirelen: int | None, snaplen: int) -> tuple[bytes, int]:
    orig = len(data) if wirelen is None else int(wirelen)
    captured = bytes(data[:snaplen])
    if orig < len(captured):
        raise ValueError("wirelen is smaller than the captured length")
    return captured, orig


class PcapWriter:
    """Write a classic libpcap file (microsecond or nanosecond timestamps)."""

    def __init__(
        self,
        fileobj: BinaryIO,
        linktype: int = LINKTYPE_ETHERNET,
        nanosecond: bool = False,
        big_endian: bool = False,
        snaplen: int = 262144,
    ) -> None:
        self._f = fileobj
        self.linktype = linktype
        self.nanosecond = nanosecond
        self.snaplen = snaplen
        self._bo = ">" if big_endian else "<"
        self.count = 0
        magic = _PCAP_MAGIC_NS if nanosecond else _PCAP_MAGIC_US
        self._f.write(struct.pack(self._bo + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))

    def write(self, ts_ns: int, data: bytes, wirelen: int | None = None) -> None:
        """Append one record; ``data`` beyond the snaplen is cut off."""
        ts_ns = _check_ts(ts_ns)
        captured, orig = _lengths(data, wirelen, self.snaplen)
        sec, rem = divmod(ts_ns, _NS_PER_S)
        frac = rem if self.nanosecond else rem // 1000
        if sec > 0xFFFFFFFF:
            raise ValueError("timestamp does not fit a 32-bit seconds field")
        self._f.write(struct.pack(self._bo + "IIII", sec, frac, len(captured), orig))
        self._f.write(captured)
        self.count += 1

    def close(self) -> None:
        """Flush the underlying file object (it is not closed)."""
        self._f.flush()

    def __enter__(self) -> "PcapWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pad4(n: int) -> int:
    return (-n) % 4


class PcapngWriter:
    """Write a pcapng file: SHB, IDBs and Enhanced Packet Blocks."""

    def __init__(self, fileobj: BinaryIO, big_endian: bool = False, userappl: str | None = "dcpdissect") -> None:
        self._f = fileobj
        self._bo = ">" if big_endian else "<"
        self._userappl = userappl
        self._ifaces: list[tuple[int, int, int]] = []  # (linktype, units/s, snaplen)
        self.count = 0
        self._write_shb()

    # -- low level -------------------------------------------------------
    def _option(self, code: int, value: bytes) -> bytes:
        return struct.pack(self._bo + "HH", code, len(value)) + value + b"\0" * _pad4(len(value))

    def _options(self, opts: list[tuple[int, bytes]]) -> bytes:
        if not opts:
            return b""
        body = b"".join(self._option(c, v) for c, v in opts)
        return body + struct.pack(self._bo + "HH", _OPT_ENDOFOPT, 0)

    def _block(self, btype: int, body: bytes) -> None:
        body += b"\0" * _pad4(len(body))
        total = 12 + len(body)
        self._f.write(struct.pack(self._bo + "II", btype, total) + body + struct.pack(self._bo + "I", total))

    def _write_shb(self) -> None:
        opts = []
        if self._userappl:
            opts.append((_SHB_USERAPPL, self._userappl.encode("utf-8")))
        body = struct.pack(self._bo + "IHHq", _BYTE_ORDER_MAGIC, 1, 0, -1) + self._options(opts)
        self._block(_BT_SHB, body)

    # -- public API ------------------------------------------------------
    @property
    def interfaces(self) -> list[tuple[int, int, int]]:
        """(linktype, units per second, snaplen) of each interface of the current section."""
        return list(self._ifaces)

    def new_section(self) -> None:
        """Start a new section; interface numbering restarts at 0."""
        self._ifaces = []
        self._write_shb()

    def add_interface(
        self,
        linktype: int,
        tsresol: int = 6,
        snaplen: int = 262144,
        name: str | None = None,
    ) -> int:
        """Write an IDB and return its interface id within the current section."""
        units = tsresol_units_per_second(tsresol)
        opts: list[tuple[int, bytes]] = []
        if name is not None:
            opts.append((_IF_NAME, name.encode("utf-8")))
        opts.append((_IF_TSRESOL, bytes([tsresol])))
        body = struct.pack(self._bo + "HHI", linktype, 0, snaplen) + self._options(opts)
        self._block(_BT_IDB, body)
        self._ifaces.append((linktype, units, snaplen))
        return len(self._ifaces) - 1

    def write(
        self,
        interface: int,
        ts_ns: int,
        data: bytes,
        wirelen: int | None = None,
        comment: str | list[str] | None = None,
    ) -> None:
        """Append an Enhanced Packet Block on ``interface``, with one ``opt_comment``
        per comment given (a string or a list of strings).

        The timestamp is converted to the interface resolution by flooring.
        """
        if not 0 <= interface < len(self._ifaces):
            raise ValueError(f"unknown interface {interface}")
        _, units, snaplen = self._ifaces[interface]
        ts_ns = _check_ts(ts_ns)
        ts = ts_ns * units // _NS_PER_S
        if ts >= 1 << 64:
            raise ValueError("timestamp does not fit 64 bits")
        captured, orig = _lengths(data, wirelen, snaplen)
        comments = [comment] if isinstance(comment, str) else comment or []
        opts = [(_OPT_COMMENT, c.encode("utf-8")) for c in comments if c]
        body = (
            struct.pack(self._bo + "IIIII", interface, ts >> 32, ts & 0xFFFFFFFF, len(captured), orig)
            + captured
            + b"\0" * _pad4(len(captured))
            + self._options(opts)
        )
        self._block(_BT_EPB, body)
        self.count += 1

    def close(self) -> None:
        """Flush the underlying file object (it is not closed)."""
        self._f.flush()

    def __enter__(self) -> "PcapngWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
