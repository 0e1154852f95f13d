"""Collections as a capture shows them: the collection id and logical key of each document
key on the connections whose HELLO enabled Collections, and the names the system events gave
those ids.

A key carries its leb128 collection prefix only on a connection that negotiated Collections
(kv_engine Connection::isCollectionsSupported); where the capture did not show the HELLO the
key is left whole. Names come from the create and modify events of collections and scopes
(:func:`~dcpdissect.codec.keys.system_event`), per bucket (SelectBucket; None when not
seen), and stay known after a drop. A stream request's filter names collections and scopes
by id only (engines/ep/src/collections/vbucket_filter.cc Filter::constructFromJson), so it
gives no names.
"""

from __future__ import annotations

from typing import NamedTuple

from ..codec.keys import split_collection_key, system_event
from ..protocol import opcode_code
from ..reassembly.connections import ConnectionClosed
from ..reassembly.framing import Pdu
from .negotiation import Negotiation

SYSTEM_EVENT = opcode_code("DcpSystemEvent")
MAX_NAMES = 10_000          # collection and scope names remembered per bucket


class DocKey(NamedTuple):
    """A document key of a collection-aware connection."""
    collection_id: int
    key: bytes                    # the logical key (without the prefix)
    name: str | None              # "scope.collection", or the collection's name alone


class Names:
    """Collection and scope names of one bucket, from its system events."""

    def __init__(self):
        self.scopes: dict[int, str] = {}
        self.collections: dict[int, tuple[int, str]] = {}     # id -> (scope id, name)

    def learn(self, event) -> None:
        if event.name is None:
            return
        if event.collection is None:
            table, entry, key = self.scopes, event.name, event.scope
        else:
            table, entry, key = self.collections, (event.scope, event.name), event.collection
        if key in table or len(table) < MAX_NAMES:
            table[key] = entry

    def name(self, collection_id: int) -> str | None:
        entry = self.collections.get(collection_id)
        if entry is None:
            return None
        scope = self.scopes.get(entry[0])
        return entry[1] if scope is None else f"{scope}.{entry[1]}"


class CollectionsView:
    """Feed every event of a capture in order; :meth:`doc_key` answers for each message."""

    def __init__(self):
        self.negotiations: dict[int, Negotiation] = {}
        self.names: dict[str | None, Names] = {}

    def feed(self, ev, msg=None) -> DocKey | None:
        """Take one event (``msg``: the decoded message of a ``Pdu``); return the collection
        id and logical key of its document key, if it has one on a collection-aware
        connection."""
        kind = type(ev)
        if kind is ConnectionClosed:
            self.negotiations.pop(ev.conn, None)
            return None
        if kind is not Pdu or msg is None:
            return None
        neg = self.negotiations.get(ev.conn)
        if neg is None:
            neg = self.negotiations[ev.conn] = Negotiation(start_seen=False)
        neg.on_message(msg, ev.direction == 0)
        if msg.opcode == SYSTEM_EVENT and msg.is_request and msg.fields:
            event = system_event(msg.fields.get("event"), msg.fields.get("version"),
                                 msg.key, msg.value)
            if event is not None:
                self._names(neg).learn(event)
        return self.doc_key(ev.conn, msg)

    def aware(self, conn: int) -> bool | None:
        """Whether the connection's HELLO enabled Collections (None: not seen)."""
        neg = self.negotiations.get(conn)
        return None if neg is None else neg.collections

    def doc_key(self, conn: int, msg) -> DocKey | None:
        neg = self.negotiations.get(conn)
        if neg is None or not neg.collections or not msg.key:
            return None
        if not getattr(msg.shape, "document_key", False):
            return None
        key = bytes(msg.key)
        cid, prefix, problem = split_collection_key(key)
        if problem or cid is None:
            return None
        return DocKey(cid, key[prefix:], self._names(neg).name(cid))

    def _names(self, neg: Negotiation) -> Names:
        names = self.names.get(neg.bucket)
        if names is None:
            names = self.names[neg.bucket] = Names()
        return names


__all__ = ["CollectionsView", "DocKey", "Names"]
