"""Connections on other ports, as the heuristic of :mod:`dcpdissect.reassembly.pdus` finds
them (never silently clean).

``ports-heuristic``: a stream-id connector's DCP conversation on port 12000 (not a DCP port:
decoded because its first bytes are MCBP) whose V2.0 marker the connection did not negotiate
(``snapshot-version-not-negotiated``, judged there as on a DCP port), an HTTP conversation on
8080 beside it (not decoded, no finding), and two TLS connections, one on the TLS port 11207
and one on 8443 (``tls-connection`` info each, not decoded).
"""

from __future__ import annotations

from .dsl import T0, Script, Spec
from .netsynth import Endpoint
from .scenarios_basic import CONNECTOR, stream_id_connector

DCP_12000 = Endpoint("10.0.0.1", 12000)
HTTP_REQUEST = (b"GET /pools/default HTTP/1.1\r\nHost: 10.0.0.1:8080\r\n"
                b"Authorization: Basic QWRtaW5pc3RyYXRvcjpwYXNzd29yZA==\r\n"
                b"Accept: */*\r\n\r\n")
HTTP_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 29\r\n"
                 b'\r\n{"name":"default","nodes":[]}')
# A ClientHello and a ServerHello record, cut short: only their start is ever looked at.
CLIENT_HELLO = (b"\x16\x03\x01\x00\x45\x01\x00\x00\x41\x03\x03" + bytes(range(32))
                + b"\x00\x00\x04\x13\x01\x13\x02\x01\x00\x00\x14\x00\x2b\x00\x03\x02\x03\x04"
                + b"\x00\x0a\x00\x04\x00\x02\x00\x1d\x00\x00")
SERVER_HELLO = (b"\x16\x03\x03\x00\x2a\x02\x00\x00\x26\x03\x03" + bytes(range(32, 64))
                + b"\x00\x13\x01\x00" + b"\x17\x03\x03\x00\x10" + bytes(16))


def dcp_on(port: int, **kw) -> Script:
    """The stream-id connector's conversation with the server on ``port``."""
    return stream_id_connector(client=CONNECTOR, server=Endpoint("10.0.0.1", port), **kw)


def raw(client: Endpoint, server: Endpoint, *exchange: tuple[str, bytes], **kw) -> Script:
    """A conversation that is not MCBP: its bytes are sent but not recorded as messages."""
    s = Script(client, server, **kw)
    for direction, data in exchange:
        s.conv.send(direction, data)
    s.conv.close()
    return s


def http(port: int = 8080, **kw) -> Script:
    return raw(Endpoint("10.0.0.7", 51080), Endpoint("10.0.0.1", port),
               ("c2s", HTTP_REQUEST), ("s2c", HTTP_RESPONSE), **kw)


def tls(port: int, client_port: int, **kw) -> Script:
    return raw(Endpoint("10.0.0.8", client_port), Endpoint("10.0.0.1", port),
               ("c2s", CLIENT_HELLO), ("s2c", SERVER_HELLO), **kw)


def ports_heuristic() -> list[Script]:
    return [dcp_on(12000, start_ns=T0, marker_layout="V2.0"), http(start_ns=T0 + 500),
            tls(11207, 52207, start_ns=T0 + 1500), tls(8443, 52443, start_ns=T0 + 2500)]


SPECS: tuple = (
    Spec("ports-heuristic", "ports-heuristic.pcap",
         "DCP on port 12000 found by its first bytes (and its V2.0 marker judged), HTTP on "
         "8080 left undecoded, TLS on 11207 and 8443 reported (tls-connection info)",
         ports_heuristic),
)
