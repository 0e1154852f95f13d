"""A plaintext sample's DCP conversation carried over real TLS (OpenSSL through Python's
``ssl``), written as a capture with the key log that decrypts it.

Each connection of the plaintext sample is replayed through a client and a server
``SSLObject`` over memory BIOs: the same application bytes, in the same order and chunks (one
chunk per direction and completing frame), and every TLS byte either side puts on the wire is
sent on a TCP conversation (``netsynth``) with the same endpoints, the server port replaced by
the TLS port. The self-signed certificate is made on the fly; the key log is OpenSSL's own
(``keylog_filename``). TLS randomness makes every build different; the messages are the same.

``python -m dcpdissect.samples.tls_capture samples/tls`` writes ``tls13-resume-collapsed.pcap``
and its ``.keylog`` from ``samples/resume-collapsed.pcap`` (in their own folder: they are not
the deterministic builder's output), ``tls-problems.pcap`` (see :func:`build_problems`), and
``resume-collapsed-11207-after-11210.pcap`` / ``resume-correct-11207-after-11210.pcap``: the
first connection in plaintext on 11210, the resume over TLS on 11207. TLS 1.3 suites cannot be chosen through
``ssl``; ``--tls13-suite`` re-runs the build in a child process whose OpenSSL configuration
(``OPENSSL_CONF``, ``Ciphersuites``) allows only that suite.
"""

from __future__ import annotations

import argparse
import datetime
import os
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

from ..reassembly.pdus import ConnectionClosed, ConnectionOpened, Pdu, iter_events
from .netsynth import Endpoint, TcpConversation, data_indices, drop, write_pcap

TLS_PORT = 11207
TLS12_SUITES = ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305")
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                "TLS_CHACHA20_POLY1305_SHA256")


def conversations(path: str) -> list[dict]:
    """The plaintext connections of a capture as our reassembly sees them: endpoints, start
    time, how they ended and their application bytes as (direction, chunk) in order."""
    conns: dict[int, dict] = {}
    for ev in iter_events(path):
        kind = type(ev)
        if kind is ConnectionOpened:
            conns[ev.conn] = {"client": ev.client, "server": ev.server, "ts_ns": ev.ts_ns,
                              "chunks": [], "closed": None}
        elif kind is Pdu:
            chunks = conns[ev.conn]["chunks"]
            key = (ev.direction, ev.frame)
            if chunks and chunks[-1][0] == key:
                chunks[-1][1].append(ev.data)
            else:
                chunks.append((key, [ev.data]))
        elif kind is ConnectionClosed:
            conns[ev.conn]["closed"] = ev.reason
    for conn in conns.values():
        conn["chunks"] = [(d, b"".join(parts)) for (d, _), parts in conn["chunks"]]
    return list(conns.values())


def self_signed(directory: str, rsa: bool = False) -> tuple[str, str]:
    """A certificate and key for CN=couchbase.test, made now (PEM file paths)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa as rsa_keys
    from cryptography.x509.oid import NameOID
    key = (rsa_keys.generate_private_key(public_exponent=65537, key_size=2048) if rsa
           else ec.generate_private_key(ec.SECP256R1()))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "couchbase.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    Path(cert_path).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(key_path).write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                 serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    return cert_path, key_path


def tls_contexts(version: str, suite: str | None, cert: tuple[str, str],
                 keylog: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(client, server) contexts of one TLS version (and TLS 1.2 suite); the client writes
    the key log."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*cert)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    client_ctx.keylog_filename = keylog
    tls = ssl.TLSVersion.TLSv1_3 if version == "1.3" else ssl.TLSVersion.TLSv1_2
    for ctx in (server_ctx, client_ctx):
        ctx.minimum_version = ctx.maximum_version = tls
        if suite and version == "1.2":
            ctx.set_ciphers(suite)
    return client_ctx, server_ctx


class TlsPair:
    """A client and a server ``SSLObject`` joined by memory BIOs; every byte they send is
    recorded on ``conv`` as it would cross the wire. ``session``: the client resumes it."""

    def __init__(self, conv: TcpConversation, contexts: tuple[ssl.SSLContext, ssl.SSLContext],
                 session: ssl.SSLSession | None = None):
        client_ctx, server_ctx = contexts
        self.conv = conv
        self.bios = [(ssl.MemoryBIO(), ssl.MemoryBIO()) for _ in range(2)]   # (in, out)
        self.ends = [client_ctx.wrap_bio(*self.bios[0], server_side=False, session=session),
                     server_ctx.wrap_bio(*self.bios[1], server_side=True)]
        self.received = [bytearray(), bytearray()]      # plaintext each side read
        self.done = [False, False]                      # handshake finished, per side

    def _flush(self) -> bool:
        """Carry pending wire bytes both ways; True when something moved."""
        moved = False
        for side in (0, 1):
            wire = self.bios[side][1].read()
            if wire:
                self.conv.send("c2s" if side == 0 else "s2c", wire)
                self.bios[1 - side][0].write(wire)
                moved = True
                self._read(1 - side)
        return moved

    def _read(self, side: int) -> None:
        end = self.ends[side]
        if not self.done[side]:         # do_handshake reads the handshake
            return
        while True:
            try:
                data = end.read(1 << 16)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            if not data:
                return
            self.received[side] += data

    def handshake(self) -> None:
        while not all(self.done):
            for side in (0, 1):
                if not self.done[side]:
                    try:
                        self.ends[side].do_handshake()
                        self.done[side] = True
                    except ssl.SSLWantReadError:
                        pass
                self._flush()
        while self._flush():
            pass

    def send(self, direction: int, data: bytes) -> None:
        self.ends[direction].write(data)
        while self._flush():
            pass

    @property
    def cipher(self) -> tuple:
        return self.ends[0].cipher()


def tls_conversation(c: dict, contexts: tuple, client_port: int | None = None,
                     mss: int = 1448, port: int = TLS_PORT,
                     session: ssl.SSLSession | None = None) -> tuple[TcpConversation, TlsPair]:
    """One plaintext connection ``c`` of :func:`conversations` replayed over TLS: the TCP
    conversation and the TLS pair that carried it."""
    client = Endpoint(c["client"][0], client_port or c["client"][1])
    conv = TcpConversation(client, Endpoint(c["server"][0], port), start_ns=c["ts_ns"],
                           mss=mss)
    pair = TlsPair(conv, contexts, session)
    pair.handshake()
    for direction, data in c["chunks"]:
        pair.send(direction, data)
    sent = [b"".join(d for k, d in c["chunks"] if k == side) for side in (0, 1)]
    if bytes(pair.received[1]) != sent[0] or bytes(pair.received[0]) != sent[1]:
        raise RuntimeError("the TLS pair did not deliver the conversation")
    if c["closed"] in ("fin", "rst"):
        conv.close(c["closed"])
    return conv, pair


def build(source: str, pcap: str, keylog: str, version: str = "1.3",
          suite: str | None = None, mss: int = 1448, port: int = TLS_PORT,
          resume: bool = False, plain: tuple[int, ...] = ()) -> list[TlsPair]:
    """Write ``pcap`` (and OpenSSL's ``keylog``) carrying ``source``'s connections over TLS
    to server ``port`` in segments of at most ``mss`` bytes; with ``resume`` each connection
    resumes the previous one's TLS session; the connections numbered in ``plain`` (from 1)
    stay plaintext on their own port. Returns the TLS pairs."""
    if os.path.exists(keylog):
        os.unlink(keylog)
    convs, pairs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        cert = self_signed(tmp, rsa=bool(suite and "-RSA-" in suite))
        contexts = tls_contexts(version, suite, cert, keylog)
        for n, c in enumerate(conversations(source), start=1):
            if n in plain:
                convs.append(plain_conversation(c, mss))
                continue
            session = pairs[-1].ends[0].session if resume and pairs else None
            conv, pair = tls_conversation(c, contexts, mss=mss, port=port, session=session)
            convs.append(conv)
            pairs.append(pair)
    write_pcap(pcap, convs)
    return pairs


def plain_conversation(c: dict, mss: int = 1448) -> TcpConversation:
    """One connection of :func:`conversations` replayed as it was, in plaintext."""
    conv = TcpConversation(Endpoint(*c["client"]), Endpoint(*c["server"]), start_ns=c["ts_ns"],
                           mss=mss)
    for direction, data in c["chunks"]:
        conv.send("c2s" if direction == 0 else "s2c", data)
    if c["closed"] in ("fin", "rst"):
        conv.close(c["closed"])
    return conv


def build_problems(source: str, pcap: str, keylog: str) -> None:
    """``tls-problems``: the first connection of ``source`` five times over TLS, on client
    ports 60001-60005: decrypted; its key log lines left out (tls-no-key); its secrets
    altered (tls-auth-failed, both directions); TLS 1.2 with a CBC suite (tls-unsupported);
    decrypted but the server's last data segment lost (capture-gap, tls-gap)."""
    first = conversations(source)[0]
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        cert = self_signed(tmp)
        cases = (("1.3", None, "keep"), ("1.3", None, "omit"), ("1.3", None, "alter"),
                 ("1.2", "ECDHE-ECDSA-AES128-SHA256", "keep"), ("1.3", None, "keep"))
        packets = []
        for n, (version, suite, how) in enumerate(cases, start=1):
            own = os.path.join(tmp, f"{n}.keylog")
            case = dict(first, ts_ns=first["ts_ns"] + n * 1_000_000)
            conv, _ = tls_conversation(case, tls_contexts(version, suite, cert, own), 60000 + n)
            pkts = conv.packets()
            if n == 5:
                pkts = drop(pkts, data_indices(pkts, "s2c")[-1])
            packets.append(pkts)
            for line in Path(own).read_text().splitlines():
                if line.startswith("#") or how == "omit":
                    continue
                if how == "alter":
                    label, random, secret = line.split()
                    line = f"{label} {random} {secret[:-2]}{(int(secret[-2:], 16) ^ 1):02x}"
                lines.append(line)
    write_pcap(pcap, packets)
    Path(keylog).write_text("\n".join(lines) + "\n")


def build_with_suite(source: str, pcap: str, keylog: str, version: str, suite: str) -> None:
    """``build`` with one TLS 1.3 suite: a child process whose OpenSSL allows only it."""
    if version != "1.3":
        build(source, pcap, keylog, version, suite)
        return
    with tempfile.NamedTemporaryFile("w", suffix=".cnf", delete=False) as conf:
        conf.write("openssl_conf = init\n[init]\nssl_conf = ssl\n[ssl]\n"
                   "system_default = defaults\n[defaults]\n"
                   f"Ciphersuites = {suite}\n")
    try:
        subprocess.run([sys.executable, "-m", "dcpdissect.samples.tls_capture", "--source",
                        source, "--pcap", pcap, "--keylog", keylog, "--tls", version,
                        "--expect-suite", suite],
                       env={**os.environ, "OPENSSL_CONF": conf.name}, check=True)
    finally:
        os.unlink(conf.name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", help="write tls13-resume-collapsed.pcap, tls-problems.pcap "
                                          "and their .keylog files here")
    p.add_argument("--source", default="samples/resume-collapsed.pcap")
    p.add_argument("--pcap")
    p.add_argument("--keylog")
    p.add_argument("--tls", choices=("1.2", "1.3"), default="1.3")
    p.add_argument("--suite", help="TLS 1.2: an OpenSSL cipher name; 1.3: a suite name")
    p.add_argument("--expect-suite", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dir:
        stem = os.path.join(args.dir, "tls13-resume-collapsed")
        args.pcap, args.keylog = stem + ".pcap", stem + ".keylog"
        problems = os.path.join(args.dir, "tls-problems")
        build_problems(args.source, problems + ".pcap", problems + ".keylog")
        for name in ("resume-collapsed", "resume-correct"):   # 11210, then 11207 (TLS)
            moved = os.path.join(args.dir, f"{name}-11207-after-11210")
            build(os.path.join(os.path.dirname(args.source), f"{name}.pcap"),
                  moved + ".pcap", moved + ".keylog", plain=(1,))
    if not args.pcap or not args.keylog:
        p.error("give DIR, or --pcap and --keylog")
    if args.suite and not args.expect_suite:
        build_with_suite(args.source, args.pcap, args.keylog, args.tls, args.suite)
        return 0
    for pair in build(args.source, args.pcap, args.keylog, args.tls):
        if args.expect_suite and pair.cipher[0] != args.expect_suite:
            print(f"negotiated {pair.cipher[0]}, not {args.expect_suite}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
