"""What each connection negotiated, as far as the capture shows it: the one record of it.

HELLO (the features the server's response enables), DcpOpen (its name and flags, once the
server accepted it), the DcpControl keys the server accepted, the bucket SelectBucket chose,
and whether the connection's start was captured at all: a value the capture did not show is
None, and the rules that depend on it do not apply. The :class:`~.engine.Analyzer` keeps one
per connection up to date and hands it to the single-message rules and to the stream tracker.
"""

from __future__ import annotations

from ..protocol import (
    DATATYPE_FEATURES, DCP_OPEN_FLAGS, FEATURE_COLLECTIONS, SERVER_MAGICS, STATUS_SUCCESS,
    opcode_code,
)

HELLO, DCP_OPEN = opcode_code("Hello"), opcode_code("DcpOpen")
DCP_CONTROL, SELECT_BUCKET = opcode_code("DcpControl"), opcode_code("SelectBucket")
NEGOTIATING = frozenset({HELLO, DCP_OPEN, DCP_CONTROL, SELECT_BUCKET})  # all the others change nothing
_PRODUCER = DCP_OPEN_FLAGS.bit("producer")
_DELETE_TIMES = DCP_OPEN_FLAGS.bit("include_delete_times")
MAX_UNANSWERED = 64      # requests of the kinds above remembered until answered
MAX_CONTROLS = 256       # accepted DcpControl keys remembered (kv_engine knows ~20)


class Negotiation:
    """One connection's negotiated state (kv_engine daemon/connection.h)."""

    __slots__ = ("features", "open_flags", "name", "controls", "bucket", "dcp", "unseen",
                 "_pending")

    def __init__(self, start_seen: bool):
        self.features: frozenset[int] | None = None   # HELLO features the server enabled
        self.open_flags: int | None = None             # flags of the accepted DcpOpen
        self.name: str | None = None                   # name of the accepted DcpOpen
        self.controls: dict[str, str] = {}             # DcpControl key -> value, accepted
        self.bucket: str | None = None                 # bucket of the accepted SelectBucket
        self.dcp: bool | None = False if start_seen else None   # opened as a DCP connection
        self.unseen = not start_seen    # some of the client's requests were not decoded
        self._pending: dict[tuple[int, int], object] = {}

    @property
    def collections(self) -> bool | None:
        return None if self.features is None else FEATURE_COLLECTIONS in self.features

    @property
    def datatypes(self) -> int | None:
        """Datatype bits the connection may use (Connection::isDatatypeEnabled)."""
        if self.features is None:
            return None
        return sum(bit for feature, bit in DATATYPE_FEATURES.items() if feature in self.features)

    @property
    def consumer(self) -> bool | None:
        """A consumer connection (DcpOpen without Producer): memcached receives the stream."""
        return None if self.open_flags is None else not self.open_flags & _PRODUCER

    @property
    def delete_v2(self) -> bool | None:
        """Deletions carry the 21-byte V2 extras (Connection::isDcpDeleteV2)."""
        if self.collections or (self.open_flags or 0) & _DELETE_TIMES:
            return True
        if self.collections is None or self.open_flags is None:
            return None
        return False

    def undecoded(self) -> None:
        """Some of the connection's bytes were lost or skipped: whether it sent a DcpOpen is
        no longer known (what was seen stays known)."""
        if self.dcp is False:
            self.dcp = None
        self.unseen = True

    def on_message(self, msg, from_client: bool) -> None:
        """A decoded message of the connection: requests the client sent, responses the
        server sent (server-initiated messages name nothing)."""
        if msg.magic in SERVER_MAGICS:
            return
        if msg.is_request and from_client:
            self.request(msg)
        elif not msg.is_request and not from_client:
            self.response(msg)

    def request(self, msg) -> None:
        """A request the client sent (the server acts on requests in order). One the capture
        cut names nothing it did not capture: a DcpOpen whose name was cut opens the
        connection with its flags but no name; the others are as if unseen."""
        op = msg.opcode
        whole = len(msg.key) == msg.keylen and len(msg.value) == msg.value_len
        if not whole and not (op == DCP_OPEN and "flags" in msg.fields):
            self.undecoded()
            return
        if op == HELLO:
            self._remember(msg, None)
        elif op == DCP_OPEN:
            self._remember(msg, (msg.fields.get("flags"), self.dcp,
                                 _text(msg.key) if whole else None))
            self.dcp = True
        elif op == DCP_CONTROL:
            self._remember(msg, (_text(msg.key), _text(msg.value)))
        elif op == SELECT_BUCKET:
            self._remember(msg, _text(msg.key))

    def response(self, msg) -> None:
        """A response the server sent: what it accepted becomes the connection's."""
        info = self._pending.pop((msg.opcode, msg.opaque), False)
        if info is False:
            return
        ok = msg.status == STATUS_SUCCESS
        op = msg.opcode
        if op == HELLO and ok and len(msg.value) == msg.value_len:    # else: not captured
            v = bytes(msg.value)
            self.features = frozenset(int.from_bytes(v[i:i + 2], "big")
                                      for i in range(0, len(v) - 1, 2))
        elif op == DCP_OPEN:
            flags, before, name = info
            if ok:
                self.open_flags, self.name = flags, name
            else:
                self.dcp = before
        elif op == DCP_CONTROL and ok:
            key, value = info
            if key in self.controls or len(self.controls) < MAX_CONTROLS:
                self.controls[key] = value
        elif op == SELECT_BUCKET and ok:
            self.bucket = info

    def _remember(self, msg, info) -> None:
        if len(self._pending) >= MAX_UNANSWERED:
            del self._pending[next(iter(self._pending))]
        self._pending[(msg.opcode, msg.opaque)] = info


def _text(raw) -> str:
    return bytes(raw).decode("utf-8", "replace")
