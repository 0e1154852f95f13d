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
    """The secrets of a key log, by (label, client random)."""

    def __init__(self, text: str = ""):
        self.secrets: dict[tuple[str, bytes], bytes] = {}
        self.lines: dict[bytes, list[str]] = {}        # client random -> its lines
        for line in text.splitlines():
            m = _LINE.match(line.strip())
            if m is None:
                continue
            label, random, secret = m.group(1), bytes.fromhex(m.group(2)), m.group(3)
            if len(secret) % 2:
                continue
            self.secrets[(label, random)] = bytes.fromhex(secret)
            self.lines.setdefault(random, []).append(line.strip())

    def __len__(self) -> int:
        return len(self.secrets)

    def secret(self, label: str, client_random: bytes) -> bytes | None:
        return self.secrets.get((label, client_random))

    def has(self, client_random: bytes) -> bool:
        return client_random in self.lines

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
