"""Collections as a capture shows them: the collection id and logical key of each document
key on the connections whose HELLO enabled Collections, and the names the system events gave
those ids.

A key carries its leb128 collection prefix only on a connection that negotiated Collections
(kv_engine Connection::isCollectionsSupported), in the requests of the document opcodes of the
tables (mutation, deletion, expiration, prepare, commit, abort: their executors read the key
with Connection::makeDocKey, daemon/protocol/mcbp/dcp_*.cc); where the capture did not show
the HELLO the key is left whole. Names come from the create and modify events of collections and scopes
(:func:`~dcpdissect.codec.keys.system_event`), per bucket (SelectBucket; None when not
seen), and stay known after a drop. A stream request's filter names its collections and
scope by id only, as hex strings (engines/ep/src/collections/vbucket_filter.cc
Filter::constructFromJson, makeCollectionID / makeScopeID): :meth:`CollectionsView.stream_filter`
gives those ids with the names the events gave them.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from ..codec.keys import split_collection_key, system_event
from ..protocol import DOCUMENT_OPCODES, SERVER_MAGICS, opcode_code
from ..reassembly.connections import ConnectionClosed
from ..reassembly.framing import Pdu
from .negotiation import Negotiation

SYSTEM_EVENT, STREAM_REQ = opcode_code("DcpSystemEvent"), opcode_code("DcpStreamReq")
MAX_NAMES = 10_000          # collection and scope names remembered per bucket


class DocKey(NamedTuple):
    """A document key of a collection-aware connection."""
    collection_id: int
    key: bytes                    # the logical key (without the prefix)
    name: str | None              # "scope.collection", or the collection's name alone


class StreamFilter(NamedTuple):
    """The collections or scope a stream request asks for, each as {"id", "name"}."""
    scope: dict | None
    collections: list[dict]


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
        if (msg.opcode not in DOCUMENT_OPCODES or not msg.is_request
                or msg.magic in SERVER_MAGICS):
            return None
        key = bytes(msg.key)
        cid, prefix, problem = split_collection_key(key)
        if problem or cid is None:
            return None
        return DocKey(cid, key[prefix:], self._names(neg).name(cid))

    def stream_filter(self, conn: int, msg) -> StreamFilter | None:
        """The collection filter of a stream request's JSON value, with names where known."""
        if msg.opcode != STREAM_REQ or not msg.is_request or not msg.value:
            return None
        try:
            value = json.loads(bytes(msg.value))
            scope = value.get("scope")
            collections = value.get("collections", [])
            scope_id = None if scope is None else int(scope, 16)
            if not isinstance(collections, list):
                return None
            ids = [int(c, 16) for c in collections]
        except (ValueError, TypeError, AttributeError, RecursionError):
            return None     # not a filter kv_engine accepts (it answers Einval)
        if (scope_id is None and not ids) or max(ids + [scope_id or 0]) > 0xFFFFFFFF:
            return None
        neg = self.negotiations.get(conn)
        names = self._names(neg) if neg is not None else Names()
        return StreamFilter(
            None if scope_id is None else {"id": scope_id, "name": names.scopes.get(scope_id)},
            [{"id": cid, "name": names.name(cid)} for cid in ids])

    def _names(self, neg: Negotiation) -> Names:
        names = self.names.get(neg.bucket)
        if names is None:
            names = self.names[neg.bucket] = Names()
        return names


__all__ = ["CollectionsView", "DocKey", "Names", "StreamFilter"]
