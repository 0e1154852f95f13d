"""Rules judged from one message alone (they are also rendered as Wireshark expert infos)."""

from __future__ import annotations

from ..codec import Message
from ..protocol import (
    OPCODE_NAMES, SERVER_MAGICS, CACHE_TRANSFER_COMPANIONS, DATATYPE_RAW, SNAPSHOT_DISK, SNAPSHOT_FLAGS, SNAPSHOT_MEMORY,
    STATUS_ROLLBACK, STATUS_SUCCESS, STREAM_FLAG_CACHE_TRANSFER, STREAM_FLAG_NO_VALUE,
    STREAM_FLAGS, STREAM_FLAGS_ALLOWED,
)
from .rules import ERROR, WARNING, rule

S = "single_pdu"
KV = "kv_engine"

R = {
    "header-invariant": rule(
        "header-invariant", ERROR, "framing extras + extras + key exceed the body length",
        f"{KV} Request/Response::isValid: the server disconnects on such a header (ref §1.7)",
        "violations-structure.pcap", single_pdu=True),
    "framing-extras-encoding": rule(
        "framing-extras-encoding", ERROR, "framing extras run past their end",
        f"{KV} parseFrameExtras: Einval 'Invalid encoding in FrameExtras' (ref §1.4)",
        "violations-structure.pcap", single_pdu=True),
    "unknown-opcode": rule(
        "unknown-opcode", WARNING, "opcode not in the protocol tables",
        "MCBP opcode table (include/mcbp/protocol/opcode.h)", "violations-structure.pcap",
        single_pdu=True),
    "marker-extras-length": rule(
        "marker-extras-length", ERROR, "snapshot marker extras length is neither 20 (V1) nor 1 (V2)",
        "R1; dcp_snapshot_marker_validator step 1: Einval", "violations-marker.pcap", single_pdu=True),
    "marker-version": rule(
        "marker-version", ERROR, "snapshot marker version byte is neither 0 (V2.0) nor 2 (V2.2)",
        "R1; validator 'Unsupported dcp snapshot version:N'; 1 = the removed V2.1",
        "violations-marker.pcap", single_pdu=True),
    "marker-value-length": rule(
        "marker-value-length", ERROR, "V2 snapshot marker value is not 36 (V2.0) or 52 (V2.2) bytes",
        "R1; validator 'valuelen not expected:36|52'", "violations-marker.pcap", single_pdu=True),
    "marker-v22-documented-44": rule(
        "marker-v22-documented-44", ERROR,
        "V2.2 snapshot marker uses the documented 44-byte value (no HPS), which servers reject",
        "snapshot-marker.md lists 44 bytes; protocol_binary.h static-asserts 52 and the validator "
        "rejects anything else", "violations-marker.pcap", single_pdu=True),
    "marker-v1-value": rule(
        "marker-v1-value", ERROR, "V1 snapshot marker carries a value",
        "R1; validator 'Request must not include value'", "violations-marker.pcap", single_pdu=True),
    "marker-key": rule(
        "marker-key", ERROR, "snapshot marker carries a key",
        "R1; validator 'Request must not include key'", "violations-marker.pcap", single_pdu=True),
    "marker-datatype": rule(
        "marker-datatype", ERROR, "snapshot marker datatype is not RAW",
        "R1; validator 'Request datatype invalid'", "violations-marker.pcap", single_pdu=True),
    "marker-unknown-flags": rule(
        "marker-unknown-flags", WARNING, "snapshot marker has flag bits outside the six defined",
        "R3; DcpSnapshotMarkerFlag defines 0x01-0x20", "violations-marker.pcap", single_pdu=True),
    "marker-memory-disk": rule(
        "marker-memory-disk", WARNING, "snapshot marker has neither or both of Memory and Disk",
        "R3; the producer always sets exactly one (active_stream.cc)", "violations-marker.pcap",
        single_pdu=True),
    "marker-hcs-hps-without-disk": rule(
        "marker-hcs-hps-without-disk", WARNING, "HCS or HPS non-zero on a marker without Disk",
        "R21; the encoder Expects() HCS/HPS only with Disk; decoders ignore them otherwise",
        "violations-marker.pcap", single_pdu=True),
    "marker-start-after-end": rule(
        "marker-start-after-end", ERROR, "snapshot marker start is greater than its end",
        "R15; DcpConsumer::snapshotMarker returns Einval (MB-16042)", "violations-marker.pcap",
        single_pdu=True),
    "marker-mvs-beyond-end": rule(
        "marker-mvs-beyond-end", ERROR, "max visible seqno is greater than the snapshot end",
        "R21; processMarker logic_error 'snapEnd < visibleSnapEnd' (MB-55357)",
        "violations-marker.pcap", single_pdu=True),
    "marker-hcs-beyond-end": rule(
        "marker-hcs-beyond-end", ERROR, "high completed seqno is greater than the snapshot end",
        "R21", "violations-marker.pcap", single_pdu=True),
    "marker-hps-out-of-range": rule(
        "marker-hps-out-of-range", ERROR, "high prepared seqno is non-zero and outside [start, end]",
        "R21; processMarker 'HPS is out of range' for HPS > end (MB-66577)",
        "violations-marker.pcap", single_pdu=True),
    "marker-purge-beyond-end": rule(
        "marker-purge-beyond-end", ERROR, "purge seqno is greater than the snapshot end",
        "R21; processMarker 'invalid purgeSeqno'", "violations-marker.pcap", single_pdu=True),
    "add-stream-extras-length": rule(
        "add-stream-extras-length", ERROR, "add stream request extras are not 4 bytes",
        "R26; dcp_add_stream_validator", "violations-add-stream.pcap", single_pdu=True),
    "add-stream-key-or-value": rule(
        "add-stream-key-or-value", ERROR, "add stream request carries a key or a value",
        "R26; dcp_add_stream_validator", "violations-add-stream.pcap", single_pdu=True),
    "add-stream-datatype": rule(
        "add-stream-datatype", ERROR, "add stream request datatype is not RAW",
        "R26; dcp_add_stream_validator", "violations-add-stream.pcap", single_pdu=True),
    "stream-flags-unknown": rule(
        "stream-flags-unknown", ERROR, "add stream / stream request flags outside the allowed mask 0x1F7",
        "R5/R26; validator 'Request contains invalid flags'", "violations-add-stream.pcap",
        single_pdu=True),
    "stream-flags-no-value": rule(
        "stream-flags-no-value", ERROR, "obsolete NoValue flag 0x08 on add stream / stream request",
        "R26; validator 'DCP_ADD_STREAM_FLAG_NO_VALUE{8} flag is no longer used'",
        "violations-add-stream.pcap", single_pdu=True),
    "stream-flags-cache-transfer": rule(
        "stream-flags-cache-transfer", ERROR,
        "CacheTransfer combined with flags other than TakeOver/ActiveVbOnly",
        "R5/R26; validator 'CacheTransfer flag can only be combined with TakeOver or ActiveVbOnly'",
        "violations-add-stream.pcap", single_pdu=True),
    "add-stream-response-extras": rule(
        "add-stream-response-extras", ERROR, "add stream response without its 4-byte new-opaque extras",
        "R27; Connection::add_stream_rsp always sends the stream opaque",
        "violations-add-stream.pcap", single_pdu=True),
    "stream-request-extras-length": rule(
        "stream-request-extras-length", ERROR, "stream request extras are not 48 bytes",
        "R5; dcp_stream_req_validator", "violations-stream-request.pcap", single_pdu=True),
    "stream-request-key": rule(
        "stream-request-key", ERROR, "stream request carries a key",
        "R5; validator 'Request must not include key'", "violations-stream-request.pcap",
        single_pdu=True),
    "stream-request-datatype": rule(
        "stream-request-datatype", ERROR, "stream request datatype is not RAW",
        "R5; validator 'Request datatype invalid' (RAW even with a JSON value)",
        "violations-stream-request.pcap", single_pdu=True),
    "stream-request-start-after-end": rule(
        "stream-request-start-after-end", ERROR, "stream request start seqno is greater than end",
        "R8; DcpProducer::streamRequest returns Erange", "violations-stream-request.pcap",
        single_pdu=True),
    "stream-request-snapshot-range": rule(
        "stream-request-snapshot-range", ERROR,
        "stream request violates snap_start <= start <= snap_end",
        "R8; DcpProducer::streamRequest returns Erange; known bug signatures snap_start = start + 1 "
        "(JDCP-95/241) and snap_end < start (MB-11502)", "violations-stream-request.pcap",
        single_pdu=True),
    "stream-request-uuid-zero": rule(
        "stream-request-uuid-zero", ERROR, "stream request with vbucket uuid 0 and start > 0",
        "R14; needsRollback finds no uuid 0: rollback to 0 is guaranteed",
        "violations-stream-request.pcap", single_pdu=True),
    "failover-log-length": rule(
        "failover-log-length", ERROR, "successful stream request / failover log response value is "
        "empty or not a multiple of 16", "R6; the consumer disconnects (consumer.cc handleResponse)",
        "violations-stream-request.pcap", single_pdu=True),
    "rollback-value-length": rule(
        "rollback-value-length", ERROR, "rollback response value is not exactly 8 bytes",
        "R6; the consumer disconnects on a rollback value size != 8", "violations-stream-request.pcap",
        single_pdu=True),
}


def check_message(m: Message) -> list[tuple[str, str, dict]]:
    """(rule id, message, fields that matter) for every single-PDU rule ``m`` breaks."""
    out: list[tuple[str, str, dict]] = []
    add = out.append
    for problem in m.problems:
        if "exceed body length" in problem:
            add(("header-invariant", problem, {"framing_len": m.framing_len, "extlen": m.extlen,
                                               "keylen": m.keylen, "bodylen": m.bodylen}))
        elif problem.startswith("bad framing extras"):
            add(("framing-extras-encoding", problem, {"framing_len": m.framing_len}))
    if m.spec is None:          # not a DCP opcode, or a server (0x82/0x83) opcode
        if m.magic not in SERVER_MAGICS and m.opcode not in OPCODE_NAMES:
            add(("unknown-opcode", f"opcode {m.opcode:#04x} is not a known opcode", {}))
        return out
    if out and out[0][0] == "header-invariant":
        return out
    if any(p.startswith("frame truncated") for p in m.problems):
        return out              # an incomplete body: its fields were never decoded
    checker = _CHECKS.get((m.opcode, m.is_request))
    if checker is not None:
        checker(m, add)
    return out


def _marker(m: Message, add) -> None:
    f = m.fields
    if m.extlen not in (20, 1):
        add(("marker-extras-length", f"extras length {m.extlen} (V1 is 20, V2 is 1)",
             {"extlen": m.extlen}))
        return
    if m.keylen:
        add(("marker-key", f"key of {m.keylen} bytes on a snapshot marker", {"keylen": m.keylen}))
    if m.datatype != DATATYPE_RAW:
        add(("marker-datatype", f"datatype {m.datatype:#04x}, must be RAW", {"datatype": m.datatype}))
    if m.extlen == 20 and m.value_len:
        add(("marker-v1-value", f"V1 marker with a {m.value_len}-byte value", {"value_len": m.value_len}))
    if m.extlen == 1:
        version = f.get("version")
        if version not in (0, 2):
            what = " (the removed V2.1)" if version == 1 else ""
            add(("marker-version", f"version byte {version}{what}", {"version": version}))
            return
        if m.layout == "V2.2-doc44":
            add(("marker-v22-documented-44", "V2.2 value of 44 bytes as the spec document lists it; "
                 "servers send and accept 52 bytes (purge seqno then HPS)", {"value_len": 44}))
        elif m.layout not in ("V2.0", "V2.2"):
            want = 36 if version == 0 else 52
            add(("marker-value-length", f"V2 version {version} value of {m.value_len} bytes, "
                 f"expected {want}", {"version": version, "value_len": m.value_len}))
            return
    if "flags" not in f:
        return
    flags, start, end = f["flags"], f.get("start_seqno", 0), f.get("end_seqno", 0)
    shown = {"start_seqno": start, "end_seqno": end, "flags": SNAPSHOT_FLAGS.text(flags)}
    unknown = flags & ~SNAPSHOT_FLAGS.mask
    if unknown:
        add(("marker-unknown-flags", f"unknown flag bits {unknown:#x}", shown))
    kind = flags & (SNAPSHOT_MEMORY | SNAPSHOT_DISK)
    if kind in (0, SNAPSHOT_MEMORY | SNAPSHOT_DISK):
        add(("marker-memory-disk", f"flags {SNAPSHOT_FLAGS.text(flags)}: "
             f"{'neither' if not kind else 'both'} Memory and Disk", shown))
    if start > end:
        add(("marker-start-after-end", f"start {start} > end {end}", shown))
    mvs, hcs = f.get("max_visible_seqno"), f.get("high_completed_seqno")
    hps, purge = f.get("high_prepared_seqno"), f.get("purge_seqno")
    if not flags & SNAPSHOT_DISK and (hcs or hps):
        add(("marker-hcs-hps-without-disk", f"HCS {hcs or 0} / HPS {hps or 0} set without Disk",
             {**shown, "high_completed_seqno": hcs, "high_prepared_seqno": hps}))
    if mvs is not None and mvs > end:
        add(("marker-mvs-beyond-end", f"max visible seqno {mvs} > end {end}",
             {**shown, "max_visible_seqno": mvs}))
    if hcs is not None and hcs > end and flags & SNAPSHOT_DISK:
        add(("marker-hcs-beyond-end", f"high completed seqno {hcs} > end {end}",
             {**shown, "high_completed_seqno": hcs}))
    if hps and not (start <= hps <= end):
        add(("marker-hps-out-of-range", f"high prepared seqno {hps} outside [{start}, {end}]",
             {**shown, "high_prepared_seqno": hps}))
    if purge is not None and purge > end:
        add(("marker-purge-beyond-end", f"purge seqno {purge} > end {end}",
             {**shown, "purge_seqno": purge}))


def _stream_flags(m: Message, add) -> None:
    flags = m.fields.get("flags")
    if flags is None:
        return
    shown = {"flags": STREAM_FLAGS.text(flags)}
    if flags & STREAM_FLAG_NO_VALUE:
        add(("stream-flags-no-value", "flag 0x08 NoValue is no longer used (use DcpOpen NoValue)", shown))
    unknown = flags & ~(STREAM_FLAGS_ALLOWED | STREAM_FLAG_NO_VALUE)
    if unknown:
        add(("stream-flags-unknown", f"invalid flag bits {unknown:#x}", shown))
    if flags & STREAM_FLAG_CACHE_TRANSFER:
        others = flags & ~(STREAM_FLAG_CACHE_TRANSFER | CACHE_TRANSFER_COMPANIONS)
        if others & STREAM_FLAGS.mask:
            add(("stream-flags-cache-transfer",
                 f"cache_transfer with {STREAM_FLAGS.text(others & STREAM_FLAGS.mask)}", shown))


def _add_stream(m: Message, add) -> None:
    if m.extlen != 4:
        add(("add-stream-extras-length", f"extras length {m.extlen}, must be 4", {"extlen": m.extlen}))
    if m.keylen or m.value_len:
        add(("add-stream-key-or-value", f"key {m.keylen} bytes, value {m.value_len} bytes",
             {"keylen": m.keylen, "value_len": m.value_len}))
    if m.datatype != DATATYPE_RAW:
        add(("add-stream-datatype", f"datatype {m.datatype:#04x}, must be RAW", {"datatype": m.datatype}))
    _stream_flags(m, add)


def _add_stream_response(m: Message, add) -> None:
    if m.extlen != 4:
        add(("add-stream-response-extras", f"response extras length {m.extlen}, must be 4 "
             "(the new stream opaque)", {"extlen": m.extlen, "status": m.status}))


def _stream_request(m: Message, add) -> None:
    f = m.fields
    if m.extlen != 48:
        add(("stream-request-extras-length", f"extras length {m.extlen}, must be 48", {"extlen": m.extlen}))
        return
    if m.keylen:
        add(("stream-request-key", f"key of {m.keylen} bytes", {"keylen": m.keylen}))
    if m.datatype != DATATYPE_RAW:
        add(("stream-request-datatype", f"datatype {m.datatype:#04x}, must be RAW",
             {"datatype": m.datatype}))
    _stream_flags(m, add)
    start, end = f["start_seqno"], f["end_seqno"]
    s0, s1, uuid = f["snap_start_seqno"], f["snap_end_seqno"], f["vbucket_uuid"]
    shown = {"start_seqno": start, "end_seqno": end, "snap_start_seqno": s0,
             "snap_end_seqno": s1, "vbucket_uuid": f"{uuid:#x}"}
    if start > end:
        add(("stream-request-start-after-end", f"start {start} > end {end}", shown))
    if not s0 <= start <= s1:
        sig = ""
        if s0 == start + 1:
            sig = " (signature of adopting a marker before its first item, JDCP-95/241)"
        elif s1 < start:
            sig = " (signature of snap_end < start, MB-11502)"
        add(("stream-request-snapshot-range",
             f"snapshot [{s0}, {s1}] does not contain start {start}{sig}", shown))
    if uuid == 0 and start > 0:
        add(("stream-request-uuid-zero", f"vbucket uuid 0 with start {start}: the server must "
             "roll back to 0", shown))


def _failover_response(m: Message, add) -> None:
    n = m.value_len
    if m.status == STATUS_SUCCESS and (n == 0 or n % 16):
        add(("failover-log-length", f"success value of {n} bytes", {"value_len": n}))
    elif m.status == STATUS_ROLLBACK and m.opcode == 0x53 and n != 8:
        add(("rollback-value-length", f"rollback value of {n} bytes", {"value_len": n}))


_CHECKS = {
    (0x56, True): _marker,
    (0x51, True): _add_stream,
    (0x51, False): _add_stream_response,
    (0x53, True): _stream_request,
    (0x53, False): _failover_response,
    (0x54, False): _failover_response,
    (0x96, False): _failover_response,
}
