"""A replication stream carrying one very large JSON document (for the real captures).

One producer send holds a snapshot marker, two small items, the large document and one
more small item, as a producer's output buffer does; real loopback TCP cuts it into
segments of up to 64 KB, most of them inside the document's value.
"""

from __future__ import annotations

import json

from ..codec import encode
from .dsl import Script, control, dcp_open, doc, failover, marker, mutation, ok, stream_req
from .scenarios_basic import CONSUMER, PRODUCER_11209

DOCUMENT_KEY = "catalogue::2026"
DOCUMENT_SEQNO = 3


def catalogue(size: int) -> bytes:
    """A JSON document of at least ``size`` bytes: an array of product records cycling
    through 64 distinct ones (real repetition; gzip shrinks it a thousandfold)."""
    rows = [json.dumps({"sku": f"SKU-{i:05d}", "name": f"replayed product {i}",
                        "price": round(4.75 + 1.25 * i, 2), "stock": (i * 37) % 101,
                        "tags": ["dcp", "replay", f"shelf-{i % 8}"]}, separators=(",", ":"))
            for i in range(64)]
    cycle = ",".join(rows)
    repeats = -(-size // (len(cycle) + 1))
    return ('{"items":[' + ",".join([cycle] * repeats) + "]}").encode()


def big_document(size: int = 12 * 2**20) -> Script:
    """DcpOpen, one control, a stream on vbucket 0, then snapshot [1,4] with a
    ``size``-byte document as item 3, snapshot [5,6], a noop and the consumer's buffer ack."""
    s = Script(CONSUMER, PRODUCER_11209)
    s.c2s(dcp_open("replication:ns_1@10.0.0.1->ns_1@10.0.0.2:default", 0x25, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(control("enable_noop", "true", 2))
    s.s2c(ok(0x5E, 2))
    s.c2s(stream_req(0, 0x10))
    s.s2c(failover(0x10, (0xA1B2C3D4E5F60000, 0)))
    s.s2c(marker(0, 0x10, 0, 4, "disk+checkpoint"),
          mutation(0, 0x10, 1, "doc-1", doc(1)), mutation(0, 0x10, 2, "doc-2", doc(2)),
          mutation(0, 0x10, DOCUMENT_SEQNO, DOCUMENT_KEY, catalogue(size)),
          mutation(0, 0x10, 4, "doc-4", doc(4)))
    s.s2c(marker(0, 0x10, 5, 6, "memory"), mutation(0, 0x10, 5, "doc-5", doc(5)),
          mutation(0, 0x10, 6, "doc-6", doc(6)))
    s.s2c(encode(0x5C, opaque=0x20))
    s.c2s(ok(0x5C, 0x20), encode(0x5D, {"bytes_to_ack": s.offsets["s2c"]}, opaque=3))
    s.conv.close()
    return s
