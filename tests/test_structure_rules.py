"""Single-message rules that depend on the connection: HELLO, DcpOpen, the capture's view.

Each case feeds one connection's messages to the analyzer and compares the structure
findings with kv_engine's verdict (daemon/mcbp_validators.cc), in the shapes a capture can
have: the connection's start captured or not, bytes lost, messages from either side.
"""

import struct

import pytest

from dcpdissect.analysis.rules import RULES
from dcpdissect.codec import encode
from dcpdissect.samples.dsl import dcp_open, ok
from feed import feed

STRUCTURE = {r.id for r in RULES.values() if r.family == "structure"}
C2S, S2C = 0, 1


def run(*messages, mid_stream=False):
    """(rule, index) of the structure findings for (direction, bytes | "gap") messages."""
    return [(r, i) for r, i in feed(*messages, mid_stream=mid_stream) if r in STRUCTURE]


def hello(*features):
    value = b"".join(struct.pack(">H", f) for f in features)
    return [(C2S, encode(0x1F, key=b"t", value=value, opaque=9)), (S2C, ok(0x1F, 9, value=value))]


def opened(flags=0x0):
    return [(C2S, dcp_open("t", flags, 1)), (S2C, ok(0x50, 1))]


CONTROL = encode(0x5E, key=b"enable_noop", value=b"true", opaque=3)


def test_dcp_command_needs_a_dcp_open_when_the_start_was_captured():
    assert run((C2S, CONTROL)) == [("dcp-not-open", 0)]
    assert run(*opened(), (C2S, CONTROL)) == []
    assert run((C2S, CONTROL), mid_stream=True) == []                   # start not seen
    assert run((C2S, "gap"), (C2S, CONTROL)) == []                      # DcpOpen may be lost
    assert run((S2C, CONTROL)) == []                                   # memcached sent it
    failed = [(C2S, dcp_open("t", 0, 1)), (S2C, ok(0x50, 1, status=0x24))]
    assert run(*failed, (C2S, CONTROL)) == [("dcp-not-open", 2)]        # the open was refused


def test_dcp_open_once_per_connection():
    assert run(*opened(), (C2S, dcp_open("again", 0, 2))) == [("dcp-open-twice", 2)]
    refused = [(C2S, dcp_open("t", 0, 1)), (S2C, ok(0x50, 1, status=0x04))]
    assert run(*refused, (C2S, dcp_open("again", 0, 2))) == []


STREAM_VALUE = dict(flags=0, start_seqno=0, end_seqno=10, vbucket_uuid=1, snap_start_seqno=0,
                    snap_end_seqno=0)


@pytest.mark.parametrize("features, want", [((0x12,), []), ((0x0B,), [("value-presence", 4)]),
                                            (None, [])])
def test_stream_request_value_needs_collections(features, want):
    req = encode(0x53, STREAM_VALUE, value=b'{"uid":"0"}', opaque=5)
    pre = hello(*features) if features is not None else []
    assert run(*pre, *opened(0x1), (C2S, req)) == [(r, i - (2 if features is None else 0))
                                                   for r, i in want]


@pytest.mark.parametrize("flags, collections, extras, want", [
    (0x00, False, "V1", []), (0x00, False, "V2", ["extras-length"]),
    (0x20, False, "V2", []), (0x20, False, "V1", ["extras-length"]),
    (0x00, True, "V2", []), (0x00, True, "V1", ["extras-length"]),
])
def test_deletion_extras_follow_delete_times_and_collections(flags, collections, extras, want):
    fields = {"by_seqno": 3, "rev_seqno": 1, **({"delete_time": 0} if extras == "V2" else {"nmeta": 0})}
    key = b"\x00doc" if collections else b"doc"
    deletion = encode(0x58, fields, layout=extras, key=key, vbucket=1, opaque=7)
    pre = hello(0x0B, 0x12) if collections else hello(0x0B)
    assert [r for r, _ in run(*pre, *opened(flags), (C2S, deletion))] == want


def test_deletion_extras_unknown_without_the_negotiation():
    for layout in ("V1", "V2"):
        fields = {"by_seqno": 3, "rev_seqno": 1, "delete_time": 0, "nmeta": 0}
        deletion = encode(0x58, {k: v for k, v in fields.items() if k != ("nmeta" if layout == "V2"
                                                                         else "delete_time")},
                          layout=layout, key=b"doc", vbucket=1, opaque=7)
        assert run((C2S, deletion), mid_stream=True) == []


def test_datatypes_need_hello():
    mutation = encode(0x57, {"by_seqno": 1, "rev_seqno": 1}, key=b"\x00k", value=b"\x02\x04ab",
                      datatype=0x02, opaque=7)
    assert run(*hello(0x0B, 0x12), *opened(), (C2S, mutation)) == [("datatype-not-negotiated", 4)]
    assert run(*hello(0x0A, 0x12), *opened(), (C2S, mutation)) == []
    assert run(*opened(), (C2S, mutation)) == []                         # HELLO not captured
    assert run(*hello(0x0B, 0x12), *opened(0x1), (S2C, mutation)) == []  # the server's own choice


def test_collection_keys_only_on_collection_aware_connections():
    mutation = encode(0x57, {"by_seqno": 1, "rev_seqno": 1}, key=b"\x80", value=b"{}", opaque=7)
    assert run(*hello(0x12), *opened(), (C2S, mutation)) == [("document-key-invalid", 4)]
    assert run(*hello(0x0B), *opened(), (C2S, mutation)) == []
    reserved = encode(0x57, {"by_seqno": 1, "rev_seqno": 1}, key=b"\x03doc", value=b"{}", opaque=7)
    assert run(*hello(0x12), *opened(), (C2S, reserved)) == [("document-key-invalid", 4)]
    legal = encode(0x57, {"by_seqno": 1, "rev_seqno": 1}, key=b"\x88\x01doc", value=b"{}", opaque=7)
    assert run(*hello(0x12), *opened(), (C2S, legal)) == []


def test_stream_id_only_on_producer_connections():
    noop = encode(0x5C, opaque=3, stream_id=2)
    assert run(*opened(0x0), (C2S, noop)) == [("stream-id-on-consumer", 2)]
    assert run(*opened(0x1), (C2S, noop)) == []


def test_producer_only_opcodes_refused_by_memcached():
    adv = encode(0x64, {"by_seqno": 9}, vbucket=1, opaque=3)
    assert run(*opened(), (C2S, adv)) == [("unsupported-on-server", 2)]
    assert run(*opened(0x1), (S2C, adv)) == []


def test_context_free_rules_hold_in_both_directions():
    zero = encode(0x57, {"by_seqno": 0, "rev_seqno": 1}, key=b"k", value=b"{}", opaque=7)
    assert run(*opened(0x1), (S2C, zero)) == [("seqno-zero", 2)]
    assert run(*opened(0x0), (C2S, zero)) == [("seqno-zero", 2)]


def test_headers_like_a_passing_one_are_still_judged_on_what_differs():
    """The analyzer skips re-judging a header like one that passed; the lengths' limits,
    datatype and CAS are part of what "like" means."""
    def mut(keylen, **kw):
        return encode(0x57, {"by_seqno": 1, "rev_seqno": 1}, key=b"k" * keylen, value=b"{}",
                      opaque=7, **kw)
    msgs = [(S2C, mut(251)), (S2C, mut(252)), (S2C, mut(3)), (S2C, mut(3, datatype=0x08)),
            (S2C, mut(3, cas=5)), (S2C, mut(0))]
    assert run(*opened(0x1), *msgs) == [("key-too-long", 3), ("datatype-invalid", 5),
                                         ("key-presence", 7)]
