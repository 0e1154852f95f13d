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
from ..reassembly.connections import ConnectionClosed, ConnectionOpened
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


ACTIVITY_COLUMNS = ("conn", "tcp.stream", "client", "server", "role", "bucket", "dcp name",
                    "first", "c→s msgs", "c→s bytes", "s→c msgs", "s→c bytes", "duration",
                    "ended")
_SIDES = ("client", "server")


class ConnectionActivity(ConnectionLegend):
    """The legend with what each connection carried and how it ended (``dcpdissect
    connections``): Wireshark's ``tcp.stream`` and the frames and bytes on the wire per
    direction from ``tcp_streams`` (a :class:`~dcpdissect.reassembly.tcp_streams.TcpStreams`
    fed by the same pass, as ``tshark -z conv,tcp`` counts them), the MCBP messages and
    their bytes per direction, and the close: its reason (``fin``, ``rst``, ``end`` of the
    capture, ``reused`` by a new SYN, ``evicted`` over the connection cap), which side sent
    the first FIN or the RST, and the frame that ended it."""

    def __init__(self, tcp_streams=None):
        super().__init__()
        self.tcp_streams = tcp_streams
        self.messages: dict[int, list] = {}     # conn -> [messages c2s, s2c, bytes c2s, s2c]
        self.closed: dict[int, ConnectionClosed] = {}

    def on_message(self, pdu, msg) -> None:
        super().on_message(pdu, msg)
        counts = self.messages.setdefault(pdu.conn, [0, 0, 0, 0])
        counts[pdu.direction] += 1
        counts[2 + pdu.direction] += len(pdu.data) + pdu.missing

    def on_event(self, ev) -> None:
        super().on_event(ev)
        if type(ev) is ConnectionClosed:
            self.closed[ev.conn] = ev

    def _conversation(self, conn: int):
        index = self.opened[conn].conversation
        return None if index is None else self.tcp_streams.conversations[index]

    def activity(self, conn: int) -> dict:
        """The ``connection`` record of one connection: its legend entry, ``type`` and
        ``ts_ns`` (its first frame), ``tcp_stream``, then per direction (``_c2s``,
        ``_s2c``) frames, bytes, messages and message bytes, duration in seconds and how
        it ended."""
        o, record = self.opened[conn], self.record(conn)
        conv = self._conversation(conn)
        first, last = (conv.first_ts_ns, conv.last_ts_ns) if conv else (o.ts_ns, o.ts_ns)
        out = {"type": "connection", "ts_ns": first, "connection": conn,
               "tcp_stream": conv.number if conv else None}
        out.update((k, v) for k, v in record.items() if k != "connection")
        sent = [conv.sent(o.client), conv.sent(o.server)] if conv else [(None, None)] * 2
        counts = self.messages.get(conn, [0, 0, 0, 0])
        for i, way in enumerate(("c2s", "s2c")):
            out[f"frames_{way}"], out[f"bytes_{way}"] = sent[i]
            out[f"messages_{way}"], out[f"message_bytes_{way}"] = counts[i], counts[2 + i]
        out["duration"] = round((last - first) / 1e9, 9)
        closed = self.closed.get(conn)
        out["close_reason"] = closed.reason if closed else None
        out["closed_by"] = (_SIDES[closed.first_close[0]]
                            if closed and closed.first_close else None)
        out["close_frame"] = (closed.first_close[1] if closed and closed.first_close
                              else closed.frame if closed else None)
        return out

    def activities(self) -> list[dict]:
        """:meth:`activity` of every connection, by connection number."""
        return [self.activity(c) for c in sorted(self.opened)]


def ended(r: dict) -> str:
    """How a connection record ended, for people: ``FIN by client (frame 40)``,
    ``RST by server (frame 12)``, ``open at capture end``..."""
    reason, by, frame = r["close_reason"], r["closed_by"], r["close_frame"]
    at = f" (frame {frame})" if frame else ""
    if reason in ("fin", "rst"):
        return f"{reason.upper()} by {by}{at}" if by else f"{reason.upper()}{at}"
    if reason == "reused":
        return f"port reused by a new SYN{at}"
    if reason == "evicted":
        return f"evicted over the connection cap{at}"
    if by:          # a FIN without the other side's before the capture ended
        return f"half closed: FIN by {by}{at}, open at capture end"
    return "open at capture end"


def activity_rows(records: list[dict], clock) -> list[list]:
    """Table rows of :meth:`ConnectionActivity.activities` under :data:`ACTIVITY_COLUMNS`
    (then the tunnel, when a record has one)."""
    tunnelled = any("tunnel" in r for r in records)

    def n(v):
        return "-" if v is None else v
    return [[r["connection"], n(r["tcp_stream"]), r["client"], r["server"], r["role"] or "-",
             r["bucket"] or "-", r["dcp_name"] or "-", clock.text(r["ts_ns"]),
             r["messages_c2s"], n(r["bytes_c2s"]), r["messages_s2c"], n(r["bytes_s2c"]),
             f"{r['duration']:.6f} s", ended(r)]
            + ([r.get("tunnel", "-")] if tunnelled else []) for r in records]


def activity_table(records: list[dict], clock) -> str:
    """One row per connection (``no connections`` when there is none)."""
    if not records:
        return "no connections\n"
    tunnelled = any("tunnel" in r for r in records)
    return tabulate(activity_rows(records, clock),
                    headers=ACTIVITY_COLUMNS + ((TUNNEL_COLUMN,) if tunnelled else ()),
                    disable_numparse=True) + "\n"
