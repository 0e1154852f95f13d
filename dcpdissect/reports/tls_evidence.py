"""Evidence bundles of decrypted captures: which key log lines open the bundled TLS
connections, the key log the bundle ships (``keylog.txt``, those lines only), and the
options that make tshark and dcpdissect decrypt the trimmed capture.

With redaction the bundle ships no key log: the encrypted connections' payloads are
replaced whole in the capture (the decrypted documents must not be recoverable), and the
report's messages and hexdumps come from the decrypted, redacted messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..capture.keylog import KeyLog

KEYLOG = "keylog.txt"


@dataclass
class TlsBundle:
    randoms: dict[int, str]                 # bundled TLS connection -> client random (hex)
    ports: set[int] = field(default_factory=set)      # their server ports
    lines: list[str] = field(default_factory=list)    # the key log lines shipped
    redact: bool = False

    @property
    def tshark_args(self) -> str:
        if not self.randoms or self.redact:
            return ""
        return (f" -o tls.keylog_file:{KEYLOG}"
                f" -o dcp.tls_ports:{','.join(map(str, sorted(self.ports)))}")

    @property
    def analyze_args(self) -> str:
        return f" --tls-keylog {KEYLOG}" if self.randoms and not self.redact else ""

    def notes(self, connections: dict[int, str]) -> list[str]:
        """Paragraphs for the report."""
        if not self.randoms:
            return []
        opened = "; ".join(
            f"connection {c} ({connections.get(c, '?')}): client random `{r[:16]}…`, "
            + ", ".join(sorted({line.split()[0] for line in self.lines
                                if line.split()[1] == r})) for c, r in sorted(self.randoms.items()))
        if self.redact:
            return [f"**Encrypted capture**: decrypted with a key log ({opened}). Redaction "
                    "replaced the encrypted payloads whole and no key log is shipped: the "
                    "messages and hexdumps below come from the decrypted, redacted messages; "
                    "the TLS connections of the capture cannot be decrypted again."]
        return [f"**Encrypted capture**: decrypted with a key log; `{KEYLOG}` holds the "
                f"lines that open the bundled connections ({opened}), and the commands above "
                "use it."]

    def readme(self) -> list[str]:
        if not self.randoms:
            return []
        if self.redact:
            return ["Encrypted: the TLS connections were decrypted with a key log; redaction "
                    "replaced their payloads whole and no key log is shipped."]
        return [f"{KEYLOG:<16} the key log lines of the {len(self.randoms)} TLS "
                "connection(s) in the capture (the commands above decrypt with it)"]

    def write(self, out: Path) -> None:
        if self.randoms and not self.redact:
            (out / KEYLOG).write_text("\n".join(self.lines) + "\n", encoding="ascii")


def tls_bundle(randoms: dict[int, str], conns, opened: dict, keylog_text: str,
               redact: bool) -> TlsBundle:
    """The TLS part of a bundle of connections ``conns``: ``randoms`` are the client randoms
    of the capture's decrypted connections (``Summary.tls_randoms``)."""
    mine = {c: r for c, r in randoms.items() if c in conns}
    lines = KeyLog(keylog_text).lines_for(bytes.fromhex(r) for r in mine.values())
    ports = {opened[c].server[1] for c in mine if c in opened}
    return TlsBundle(mine, ports, lines, redact)
