"""The opcode tables: the roles the analysis reads, one list of DCP names, readable errors.

The expected roles are written here from kv_engine (commit eba4298981505cdc3371abbfb8be213236f7875a),
not computed from the tables: producer.cc DcpProducer::handleResponse (replies),
item.h queue_op and checkpoint.h's two key indexes (sync writes, key namespaces).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dcpdissect import protocol
from dcpdissect.protocol import (DCP_OPCODES, Field, Layout, Opcode, Reply, Shape, SyncWrite,
                                 TableError, check_tables, opcode_code, opcode_tables)
from dcpdissect.protocol.client_opcodes import CLIENT_OPCODE_NAMES


def _names(codes) -> set[str]:
    return {protocol.OPCODE_NAMES[c] for c in codes}


def test_sync_writes_and_key_namespaces():
    assert {protocol.OPCODE_NAMES[c]: k.value for c, k in protocol.SYNC_WRITES.items()} == {
        "DcpMutation": "mutation", "DcpDeletion": "mutation", "DcpExpiration": "mutation",
        "DcpPrepare": "prepare", "DcpCommit": "commit", "DcpAbort": "abort"}
    assert {protocol.OPCODE_NAMES[c]: ns for c, ns in protocol.KEY_NAMESPACES.items()} == {
        "DcpMutation": "committed", "DcpDeletion": "committed", "DcpExpiration": "committed",
        "DcpPrepare": "prepared"}


def test_replies_as_the_producer_takes_them():
    replies = {op.name: op.reply for op in DCP_OPCODES if op.reply is not None}
    assert {n for n, r in replies.items() if not r.expected} == {"DcpSeqnoAdvanced",
                                                                  "DcpOsoSnapshot"}
    assert {n for n, r in replies.items() if r.taken is None} == {"DcpSnapshotMarker",
                                                                  "DcpSetVbucketState"}
    assert replies["DcpStreamEnd"].taken == {"Success", "KeyEnoent"}
    assert replies["DcpCacheTransfer"].taken == {"Success", "Enomem"}
    success_only = {n for n, r in replies.items() if r.expected and r.taken == {"Success"}}
    assert success_only == {"DcpMutation", "DcpDeletion", "DcpExpiration", "DcpSystemEvent",
                            "DcpPrepare", "DcpCommit", "DcpAbort", "DcpCacheTransferEnd"}
    assert _names(protocol.NO_REPLY_OPCODES) == {"DcpSeqnoAdvanced", "DcpOsoSnapshot"}


def test_other_roles():
    assert _names(protocol.NEGOTIATION_OPCODES) == {"Hello", "SelectBucket", "DcpOpen",
                                                    "DcpControl"}
    assert _names(protocol.STREAM_OPENING_OPCODES) == {"DcpAddStream", "DcpStreamReq"}
    assert _names(protocol.DOCUMENT_ITEM_OPCODES) == {
        "DcpMutation", "DcpDeletion", "DcpExpiration", "DcpPrepare", "DcpCommit", "DcpAbort"}
    # BufferLog: what ActiveStream::nextQueuedItem sends (noops and the consumer's requests not)
    assert _names(protocol.STREAM_OPCODES) == {
        "DcpStreamEnd", "DcpSnapshotMarker", "DcpMutation", "DcpDeletion", "DcpExpiration",
        "DcpSetVbucketState", "DcpSystemEvent", "DcpPrepare", "DcpCommit", "DcpAbort",
        "DcpSeqnoAdvanced", "DcpOsoSnapshot", "DcpCacheTransfer", "DcpCacheTransferEnd"}


def test_dcp_names_are_listed_once():
    assert not set(CLIENT_OPCODE_NAMES) & {op.code for op in DCP_OPCODES}
    assert opcode_code("DcpSnapshotMarker") == 0x56 and opcode_code("GetFailoverLog") == 0x96
    assert protocol.OPCODE_NAMES[0x1F] == "Hello" and protocol.OPCODE_NAMES[0x5C] == "DcpNoop"
    assert list(protocol.OPCODE_NAMES) == sorted(protocol.OPCODE_NAMES)
    assert {c for c in protocol.OPCODE_NAMES if 0x50 <= c <= 0x67} == set(range(0x50, 0x68))


PROBE = Opcode(0x68, "DcpProbe", "DCP Probe", section="probe", stream=True, item=True,
               seqno_field="by_seqno", reply=Reply(),
               request=Shape((Layout("V1", (Field("by_seqno", 0, 8, "By seqno"),), 8),)))


def _refused(*opcodes: Opcode) -> str:
    with pytest.raises(TableError) as got:
        opcode_tables(DCP_OPCODES + opcodes)
    return str(got.value)


def test_a_consistent_new_opcode_is_accepted():
    tables = opcode_tables(DCP_OPCODES + (PROBE,))
    assert tables["OPCODE_NAMES"][0x68] == "DcpProbe" and 0x68 in tables["STREAM_OPCODES"]
    check_tables(DCP_OPCODES)


@pytest.mark.parametrize("probe, expected", [
    (replace(PROBE, code=0x56), "opcode 0x56 DcpProbe: code 0x56 is also DcpSnapshotMarker's"),
    (replace(PROBE, name="DcpNoop"), "opcode 0x68 DcpNoop: name DcpNoop is also opcode 0x5c's"),
    (replace(PROBE, code=0x1F), "opcode 0x1f DcpProbe: code 0x1f is the client opcode Hello"),
    (replace(PROBE, name="Hello"), "opcode 0x68 Hello: name Hello is the client opcode 0x1f"),
    (replace(PROBE, section=""), "opcode 0x68 DcpProbe: no section"),
    (replace(PROBE, reply=None), "opcode 0x68 DcpProbe: a stream message needs its reply"),
    (replace(PROBE, reply=Reply(taken=frozenset({"Sucess"}))),
     "opcode 0x68 DcpProbe: reply status Sucess is not a status"),
    (replace(PROBE, stream=False, reply=None), "opcode 0x68 DcpProbe: item without stream"),
    (replace(PROBE, item=False, seqno_field=None, sync_write=SyncWrite.MUTATION),
     "opcode 0x68 DcpProbe: sync_write mutation on a message that is not a stream item"),
    (replace(PROBE, seqno_field="seqno"),
     "opcode 0x68 DcpProbe: seqno_field seqno is not a field of its request"),
    (replace(PROBE, code=0x100), "opcode 0x100 DcpProbe: the code is not one byte"),
])
def test_an_inconsistent_opcode_is_refused_by_name(probe, expected):
    text = _refused(probe)
    assert text.startswith("the protocol tables are inconsistent:\n  ")
    assert expected in text


def test_every_problem_is_listed():
    text = _refused(replace(PROBE, section="", reply=None), replace(PROBE, code=0x69))
    assert text.count("\n  ") == 3, text
    assert "0x68 DcpProbe: no section" in text and "0x69 DcpProbe: name DcpProbe is also" in text
