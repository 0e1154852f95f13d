"""The connection legend: who each numbered connection of a report is.

One record per decoded connection: client and server ``ip:port``, the DcpOpen name, the
bucket SelectBucket chose, and the role of memcached's side (``producer`` when the accepted
DcpOpen carries the Producer flag, ``consumer`` without it, ``mcbp`` when the connection's
start was captured and it never opened DCP, None when the capture does not show). A
connection captured inside a tunnel (VXLAN, GRE, ERSPAN, ...) shows its inner endpoints and
the tunnel its first segment came through; the ``tunnel`` key and column are there only
when some connection has one. Fed with the capture's events and decoded messages.
"""

from __future__ import annotations

from tabulate import tabulate

from ..analysis.negotiation import DCP_OPEN, DCP_CONTROL, HELLO, SELECT_BUCKET, Negotiation
from ..reassembly.connections import ConnectionOpened
from .messages import iso_time

_NAMING = frozenset({HELLO, DCP_OPEN, DCP_CONTROL, SELECT_BUCKET})
COLUMNS = ("conn", "client", "server", "role", "bucket", "dcp name", "first frame")
TUNNEL_COLUMN = "tunnel"        # after COLUMNS, when a connection came through a tunnel


def _address(ends: tuple) -> str:
    host, port = ends
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def role(neg: Negotiation | None) -> str | None:
    if neg is None:
        return None
    if neg.consumer is not None:
        return "consumer" if neg.consumer else "producer"
    return "mcbp" if neg.dcp is False else None


class ConnectionLegend:
    """Collects the legend as an observer of a :class:`~dcpdissect.analysis.session.Pass`;
    :meth:`records` and :meth:`label` read it at any time."""

    def __init__(self):
        self.opened: dict[int, ConnectionOpened] = {}
        self.negotiated: dict[int, Negotiation] = {}

    def on_message(self, pdu, msg) -> None:
        if msg.opcode in _NAMING:
            neg = self.negotiated.get(pdu.conn)
            if neg is not None:
                neg.on_message(msg, pdu.direction == 0)

    def on_event(self, ev) -> None:
        if type(ev) is ConnectionOpened:
            self.opened[ev.conn] = ev
            self.negotiated[ev.conn] = Negotiation(start_seen=not ev.mid_stream)

    def record(self, conn: int | None) -> dict | None:
        """The legend entry of one connection (None: not a decoded connection)."""
        if conn not in self.opened:
            return None
        o, neg = self.opened[conn], self.negotiated[conn]
        record = {"connection": conn, "client": _address(o.client),
                  "server": _address(o.server), "role": role(neg), "bucket": neg.bucket,
                  "dcp_name": neg.name, "first_frame": o.frame, "time": iso_time(o.ts_ns),
                  "start_captured": not o.mid_stream}
        if o.tunnel:
            record["tunnel"] = o.tunnel
        return record

    def where(self, conn: int) -> tuple:
        """``(server, bucket)`` of a connection as known so far (None: not known)."""
        if conn not in self.opened:
            return (None, None)
        return (_address(self.opened[conn].server), self.negotiated[conn].bucket)

    def records(self, conns=None) -> list[dict]:
        """The legend of ``conns`` (default: every connection), by connection number."""
        return [self.record(c) for c in sorted(self.opened) if conns is None or c in conns]

    def label(self, conn: int) -> str:
        """``client → server (role, bucket, "name") via tunnel``: one line naming a
        connection."""
        r = self.record(conn)
        if r is None:
            return f"connection {conn}"
        extra = [x for x in (r["role"], r["bucket"] and f"bucket {r['bucket']}",
                             r["dcp_name"] and f'"{r["dcp_name"]}"') if x]
        via = f" via {r['tunnel']}" if "tunnel" in r else ""
        return (f"{r['client']} → {r['server']}" + (f" ({', '.join(extra)})" if extra else "")
                + via)

    def columns(self, conns=None) -> tuple:
        """The headers of :meth:`rows`: :data:`COLUMNS`, then ``tunnel`` when one of the
        connections came through a tunnel."""
        tunnelled = any(self.opened[c].tunnel for c in self.opened if conns is None or c in conns)
        return COLUMNS + (TUNNEL_COLUMN,) if tunnelled else COLUMNS

    def rows(self, conns=None) -> list[list]:
        """Table rows under :meth:`columns`."""
        tunnelled = len(self.columns(conns)) > len(COLUMNS)
        return [[r["connection"], r["client"], r["server"], r["role"] or "-",
                 r["bucket"] or "-", r["dcp_name"] or "-", r["first_frame"]]
                + ([r.get("tunnel", "-")] if tunnelled else [])
                for r in self.records(conns)]

    def table(self, conns=None) -> str:
        """The legend as a table (empty string when there is no connection to name)."""
        rows = self.rows(conns)
        if not rows:
            return ""
        return ("connections\n" + tabulate(rows, headers=self.columns(conns),
                                           disable_numparse=True) + "\n")
