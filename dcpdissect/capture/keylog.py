"""TLS key logs in the NSS format (``SSLKEYLOGFILE``), as OpenSSL, Go, Java agents, curl and
browsers write them: one ``LABEL <client random hex> <secret hex>`` per line, ``#`` comments.

TLS 1.2 needs ``CLIENT_RANDOM`` (the master secret); TLS 1.3 needs
``CLIENT_HANDSHAKE_TRAFFIC_SECRET``, ``SERVER_HANDSHAKE_TRAFFIC_SECRET``,
``CLIENT_TRAFFIC_SECRET_0`` and ``SERVER_TRAFFIC_SECRET_0``. Other labels are kept for the
lines of a connection but not used.
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^([A-Z_0-9]+) ([0-9a-fA-F]{64}) ([0-9a-fA-F]+)$")


class KeyLog:
    """The secrets of a key log, by (label, client random).

    Lines come from a key log file (known before any frame) or from a capture's decryption
    secrets blocks (known once the frames before the block were read): ``add(text,
    after)``. A connection uses the lines read before the frame that decides it
    (:meth:`has`, :meth:`as_of`), wherever the reading has got to."""

    def __init__(self, text: str = ""):
        self.secrets: dict[tuple[str, bytes], bytes] = {}
        self.lines: dict[bytes, list[str]] = {}        # client random -> its lines
        self.after: dict[tuple[str, bytes], int] = {}  # frames read before each line
        self.first: dict[bytes, int] = {}              # client random -> its earliest line's
        self.start: int | None = None                  # the earliest line's
        if text:
            self.add(text)

    def add(self, text: str, after: int = 0) -> int:
        """Take the lines of ``text``, read after frame ``after`` (0: before any frame);
        a line already known keeps its first place. Returns how many lines were new."""
        new = 0
        for line in text.splitlines():
            m = _LINE.match(line.strip())
            if m is None:
                continue
            label, random, secret = m.group(1), bytes.fromhex(m.group(2)), m.group(3)
            key = (label, random)
            if len(secret) % 2 or key in self.secrets:
                continue
            self.secrets[key] = bytes.fromhex(secret)
            self.after[key] = after
            self.lines.setdefault(random, []).append(line.strip())
            self.first[random] = min(after, self.first.get(random, after))
            self.start = after if self.start is None else min(self.start, after)
            new += 1
        return new

    def __len__(self) -> int:
        return len(self.secrets)

    def secret(self, label: str, client_random: bytes) -> bytes | None:
        return self.secrets.get((label, client_random))

    def has_any(self, frame: int | None = None) -> bool:
        """Whether a line was read before frame ``frame`` (None: at all)."""
        return self.start is not None and (frame is None or self.start < frame)

    def has(self, client_random: bytes, frame: int | None = None) -> bool:
        """Whether a line of this connection was read before frame ``frame`` (None: at all)."""
        first = self.first.get(client_random)
        return first is not None and (frame is None or first < frame)

    def as_of(self, client_random: bytes, frame: int | None) -> "KeyLog":
        """A key log holding this connection's lines read before frame ``frame`` (None:
        all of them; this key log itself when none is left out)."""
        lines = self.lines.get(client_random, ())
        known = [(line, self.after[(line.split(" ", 1)[0], client_random)]) for line in lines]
        known = [(line, after) for line, after in known if frame is None or after < frame]
        if len(known) == len(lines):
            return self
        out = KeyLog()
        for line, after in known:
            out.add(line, after)
        return out

    def lines_for(self, client_randoms) -> list[str]:
        """The key log lines of these connections (by client random), in order."""
        return [line for r in client_randoms for line in self.lines.get(r, ())]


def read_keylog(path: str) -> str:
    """The text of a key log file; ``ValueError`` when it holds no key line at all."""
    with open(path, encoding="ascii", errors="replace") as f:
        text = f.read()
    if not KeyLog(text):
        raise ValueError(f"{path}: no key log line (LABEL <client random> <secret>)")
    return text
