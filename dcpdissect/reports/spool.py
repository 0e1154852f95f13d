"""A capture read from stdin, kept in a temporary file as it is read (for evidence
bundles, which read the capture again)."""

from __future__ import annotations

import os
import sys
import tempfile


class SpooledStdin:
    """Context manager for reading a capture from stdin while keeping a copy: inside it,
    ``sys.stdin`` reads through to a temporary file (``path``), removed on exit, so that
    an evidence bundle can read the capture again."""

    def __enter__(self):
        self._file = tempfile.NamedTemporaryFile(prefix="dcpdissect-stdin-", delete=False,
                                                 buffering=0)
        self.path = self._file.name
        self._stdin = sys.stdin
        sys.stdin = _Tee(getattr(sys.stdin, "buffer", sys.stdin), self._file)
        return self

    def __exit__(self, *exc):
        sys.stdin = self._stdin
        self._file.close()
        os.unlink(self.path)
        return False


class _Tee:
    """A binary stream that copies everything read from ``source`` into ``copy``."""

    def __init__(self, source, copy):
        self.source, self.copy = source, copy
        self.buffer = self

    def read(self, n: int = -1) -> bytes:
        data = self.source.read(n)
        self.copy.write(data)
        return data

    def read1(self, n: int = -1) -> bytes:
        data = (getattr(self.source, "read1", None) or self.source.read)(n)
        self.copy.write(data)
        return data

    def fileno(self) -> int:
        return self.source.fileno()
