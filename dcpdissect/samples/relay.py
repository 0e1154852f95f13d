"""A relay between a DCP consumer and its producer that delays or drops chosen messages.

``python -m dcpdissect.samples.relay LISTEN CONNECT [--delay VB=MS ...] [--drop HEX]``
accepts one connection on ``LISTEN`` (ip:port), connects to ``CONNECT`` and forwards both
byte streams, as a proxy does, re-framed into MCBP messages: a producer's DCP stream message
of a vbucket given ``--delay`` is forwarded that many milliseconds after the relay received
it, and the first message equal to ``--drop`` (its bytes in hex), either way, is not
forwarded. Prints ``ready`` once listening; exits when both directions have ended.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time

from ..codec.header import frame_size, peek
from ..protocol import HEADER_SIZE, REQUEST_MAGICS, STREAM_OPCODES


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _delay(message: bytes, delays: dict[int, float]) -> float:
    head = peek(message)
    if head.magic in REQUEST_MAGICS and head.opcode in STREAM_OPCODES:
        return delays.get(head.specific, 0.0)
    return 0.0


def _forward_framed(src: socket.socket, dst: socket.socket, delays: dict[int, float],
                    drop: bytes | None) -> None:
    buf = b""
    while chunk := src.recv(1 << 16):
        received = time.monotonic()
        buf += chunk
        out = bytearray()
        while len(buf) >= HEADER_SIZE and len(buf) >= frame_size(buf):
            size = frame_size(buf)
            message, buf = buf[:size], buf[size:]
            if drop is not None and message == drop:
                drop = None
                continue
            delay = _delay(message, delays)
            if delay:
                if out:
                    dst.sendall(out)
                    out.clear()
                time.sleep(max(0.0, received + delay - time.monotonic()))
            out += message
        if out:
            dst.sendall(out)
    dst.sendall(buf)
    dst.shutdown(socket.SHUT_WR)


def _vbucket_delay(text: str) -> tuple[int, float]:
    vbucket, _, ms = text.partition("=")
    return int(vbucket), float(ms) / 1000


def relay(listen: tuple[str, int], connect: tuple[str, int], delays: dict[int, float],
          drop: bytes | None) -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(listen)
        server.listen(1)
        print("ready", flush=True)
        downstream, _ = server.accept()
    upstream = socket.create_connection(connect)
    for sock in (downstream, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    to_producer = threading.Thread(target=_forward_framed,
                                   args=(downstream, upstream, {}, drop))
    to_producer.start()
    _forward_framed(upstream, downstream, delays, drop)
    to_producer.join()
    downstream.close()
    upstream.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpdissect.samples.relay",
                                description="forward one DCP connection, dropping a message")
    p.add_argument("listen", type=_address, help="ip:port to accept the consumer on")
    p.add_argument("connect", type=_address, help="ip:port of the producer")
    p.add_argument("--delay", type=_vbucket_delay, action="append", default=[],
                   metavar="VB=MS", help="forward this vbucket's stream messages MS ms late")
    p.add_argument("--drop", type=bytes.fromhex, help="the message not to forward (hex)")
    args = p.parse_args(argv)
    relay(args.listen, args.connect, dict(args.delay), args.drop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
