"""TLS rules: connections decrypted with ``--tls-keylog``, and those that cannot be.

Judged by :mod:`dcpdissect.analysis.engine` from the ``TlsProblem`` events of
:mod:`dcpdissect.reassembly.tls`; the samples are decoded with their ``.keylog`` beside them.
"""

from .model import INFO, WARNING, family

rule = family("tls")

SAMPLE = "tls/tls-problems.pcap"

TLS_NO_KEY = rule(
    "tls-no-key", WARNING, "a TLS connection whose secrets are not in the key log",
    "TLS 1.2 needs the CLIENT_RANDOM master secret, TLS 1.3 the handshake and traffic "
    "secrets of the ClientHello's random (NSS key log format, as Wireshark reads it); "
    "without them the connection is not decoded. On the TLS port 11207, a DCP port or a "
    "--port only: elsewhere a TLS connection is not known to carry MCBP (tls-connection "
    "info)", SAMPLE)
TLS_UNSUPPORTED = rule(
    "tls-unsupported", WARNING, "a TLS version or cipher suite that is not decrypted",
    "decrypted: TLS 1.2 and 1.3 with AES-128/256-GCM or ChaCha20-Poly1305 (the suites "
    "OpenSSL and Go negotiate by default); other versions and suites are not decoded",
    SAMPLE)
TLS_AUTH_FAILED = rule(
    "tls-auth-failed", WARNING,
    "a TLS record fails authentication: its direction is not decoded further",
    "the AEAD tag does not verify with the key log's secrets (a wrong key, or bytes "
    "altered in the capture); no byte from that record on is decoded as MCBP", SAMPLE)
TLS_GAP = rule(
    "tls-gap", INFO, "bytes lost in a TLS direction: the records after them are not decrypted",
    "record boundaries and sequence numbers cannot be recovered after a capture gap",
    SAMPLE)

RULES = (
    TLS_NO_KEY, TLS_UNSUPPORTED, TLS_AUTH_FAILED, TLS_GAP,
)
