"""Every DCP opcode 0x50-0x67 and GetFailoverLog 0x96: layouts, roles and server constraints.

The constraints are kv_engine's (commit eba4298981505cdc3371abbfb8be213236f7875a):
``daemon/mcbp_validators.cc`` (``verify_header`` and each ``dcp_*_validator``) for what
memcached accepts, ``engines/ep/src/dcp/consumer.cc`` / ``passive_stream.cc`` for what a
consumer accepts, ``producer.cc`` for what a producer accepts in a stream request. The
roles an opcode plays for the analysis (stream, item, sync write, reply, ...) are described,
with the kv_engine code they rest on, on :class:`.model.Opcode`.
"""

from __future__ import annotations

from .constants import (
    DATATYPE_ALL, DCP_OPEN_FLAGS, DELETION_DATATYPES, DURABILITY_LEVELS, MARKER_VERSIONS,
    OSO_FLAGS, SNAPSHOT_FLAGS, STATUS_ROLLBACK, STATUS_SUCCESS, STREAM_END_REASONS,
    STREAM_FLAGS, SYSTEM_EVENT_VERSIONS, SYSTEM_EVENTS, VBUCKET_STATES,
)
from .model import (ERROR, INFO, Check, Field, Layout, Opcode, Presence, Reply, Sender, Shape,
                    SyncWrite)

R, O, F = Presence.REQUIRED, Presence.OPTIONAL, Presence.FORBIDDEN
PREPARE, COMMIT, ABORT, MUTATION = (SyncWrite.PREPARE, SyncWrite.COMMIT, SyncWrite.ABORT,
                                    SyncWrite.MUTATION)
S, SNAP, OPEN = STREAM_FLAGS.bit, SNAPSHOT_FLAGS.bit, DCP_OPEN_FLAGS.bit
RAW = frozenset({0})
VALIDATORS = "daemon/mcbp_validators.cc"


def u64(name, offset, title, display="dec", **kw):
    return Field(name, offset, 8, title, display, **kw)


def u32(name, offset, title, display="dec", **kw):
    return Field(name, offset, 4, title, display, **kw)


def u16(name, offset, title, **kw):
    return Field(name, offset, 2, title, **kw)


def u8(name, offset, title, **kw):
    return Field(name, offset, 1, title, **kw)


def extras(label, size, *fields, **kw):
    return Layout(label, tuple(fields), size, **kw)


def request(*layouts, **kw):
    """A request the server validates (``verify_header`` semantics)."""
    return Shape(tuple(layouts), validated=True, **kw)


# --- stream flags (0x51 Add Stream, 0x53 Stream Request) -------------------------------------
STREAM_FLAG_CHECKS = (
    Check("stream-flags-no-value", ERROR, "obsolete NoValue flag 0x08 on add stream / stream request",
          f"{VALIDATORS} verify_common_dcp_stream_restrictions: 'DCP_ADD_STREAM_FLAG_NO_VALUE{{8}} "
          "flag is no longer used' (MB-22525), Einval", ("mask", "flags", 0xFFFFFFFF & ~S("no_value")),
          "flag 0x08 NoValue is no longer used (DcpOpen carries NoValue)",
          sample="violations-add-stream.pcap"),
    Check("stream-flags-unknown", ERROR, "add stream / stream request flags outside the defined 0x1F7",
          f"{VALIDATORS} verify_common_dcp_stream_restrictions: 'Request contains invalid flags', Einval",
          ("mask", "flags", STREAM_FLAGS.mask), "invalid flag bits in {flags:x}", sample="violations-add-stream.pcap"),
    Check("stream-flags-cache-transfer", ERROR,
          "CacheTransfer combined with flags other than TakeOver / ActiveVbOnly",
          f"{VALIDATORS} verify_common_dcp_stream_restrictions: 'CacheTransfer flag can only be combined "
          "with TakeOver or ActiveVbOnly', Einval", ("only_with", "flags", S("cache_transfer"), S("takeover") | S("active_vb_only")),
          "cache_transfer combined with other flags in {flags:x}", sample="violations-add-stream.pcap"),
)

# --- 0x53 Stream Request ---------------------------------------------------------------------
FROM_LATEST = S("from_latest")
STREAM_REQ_EXTRAS = extras(
    "V1", 48,
    u32("flags", 0, "Flags", display="hex", flags=STREAM_FLAGS),
    u32("reserved", 4, "Reserved", shown="never"),
    u64("start_seqno", 8, "Start seqno", short="start"),
    u64("end_seqno", 16, "End seqno", short="end"),
    u64("vbucket_uuid", 24, "vBucket UUID", short="uuid"),
    u64("snap_start_seqno", 32, "Snapshot start seqno", short="snap_start"),
    u64("snap_end_seqno", 40, "Snapshot end seqno", short="snap_end"),
)
_PRODUCER = "engines/ep/src/dcp/producer.cc DcpProducer::streamRequest"
STREAM_REQ_CHECKS = STREAM_FLAG_CHECKS + (
    Check("stream-request-start-after-end", ERROR, "stream request start seqno is greater than its end",
          f"{_PRODUCER}: start > end is answered Erange (checked after FromLatest replaced start)",
          ("le", "start_seqno", "end_seqno"), "start {start_seqno} > end {end_seqno}",
          when=(("clear", "flags", FROM_LATEST),), sample="violations-stream-request.pcap"),
    Check("stream-request-snapshot-range", ERROR, "stream request violates snap_start <= start <= snap_end",
          f"{_PRODUCER}: Erange; known client bug signatures: snap_start = start + 1 (JDCP-95/241), "
          "snap_end < start (MB-11502). FromLatest requests are exempt: the producer replaces start "
          "and the snapshot with its high seqno first",
          ("range", "snap_start_seqno", "start_seqno", "snap_end_seqno"),
          "snapshot [{snap_start_seqno}, {snap_end_seqno}] does not contain start {start_seqno}",
          when=(("clear", "flags", FROM_LATEST),), sample="violations-stream-request.pcap"),
    Check("stream-request-uuid-zero", ERROR, "stream request with vbucket uuid 0 and start > 0",
          "engines/ep/src/failover-table.cc FailoverTable::needsRollback: no entry has uuid 0, so the "
          "producer must roll back to 0; FromLatest requests are exempt (producer.cc replaces uuid 0 "
          "with the latest uuid)", ("in", "start_seqno", (0,)),
          "vbucket uuid 0 with start {start_seqno}: the server must roll back to 0",
          when=(("eq", "vbucket_uuid", 0), ("clear", "flags", FROM_LATEST)),
          sample="violations-stream-request.pcap"),
)

# --- 0x56 Snapshot Marker --------------------------------------------------------------------
_MARKER_RANGE = (
    u64("start_seqno", 0, "Start seqno", short="start"),
    u64("end_seqno", 8, "End seqno", short="end"),
    u32("flags", 16, "Snapshot type", display="hex", flags=SNAPSHOT_FLAGS),
)
_MARKER_V2_0 = _MARKER_RANGE + (
    u64("max_visible_seqno", 20, "Max visible seqno", short="mvs", shown="if_set"),
    u64("high_completed_seqno", 28, "High completed seqno", short="hcs", shown="if_set"),
)
MARKER_V1 = extras("V1", 20, *_MARKER_RANGE, value=F)
MARKER_V2_EXTRAS = extras("V2", 1, u8("version", 0, "Version", names=MARKER_VERSIONS, shown="never"),
                          value=R)
MARKER_V2_0 = Layout("V2.0", _MARKER_V2_0, 36, when=(("version", 0),))
MARKER_V2_2 = Layout("V2.2", _MARKER_V2_0 + (
    u64("purge_seqno", 36, "Purge seqno", short="purge", shown="if_set"),
    u64("high_prepared_seqno", 44, "High prepared seqno", short="hps", shown="if_set"),
), 52, when=(("version", 2),))
MARKER_V2_2_DOC = Layout("V2.2-doc44", _MARKER_V2_0 + (
    u64("purge_seqno", 36, "Purge seqno", short="purge", shown="if_set"),
), 44, when=(("version", 2),), rule="marker-v22-documented-44",
    note="a 44-byte V2.2 value (no HPS), as pre-release drafts of snapshot-marker.md listed it "
         "(2024-07 to 2025-01); servers send and accept 52 bytes (purge seqno then HPS)")
DISK, MEMORY = SNAP("disk"), SNAP("memory")
_CONSUMER = "engines/ep/src/dcp/passive_stream.cc PassiveStream::processMarker"
MARKER_CHECKS = (
    Check("marker-version", ERROR, "snapshot marker version byte is neither 0 (V2.0) nor 2 (V2.2)",
          f"{VALIDATORS} dcp_snapshot_marker_validator: 'Unsupported dcp snapshot version', Einval "
          "(1 was the removed V2.1)", ("in", "version", (0, 2)), "version byte {version}",
          sample="violations-marker.pcap"),
    Check("marker-unknown-flags", INFO, "snapshot marker has flag bits outside the six defined",
          "include/mcbp/protocol/dcp_snapshot_marker_flags.h defines 0x01-0x20; the consumer ignores "
          "other bits", ("mask", "flags", SNAPSHOT_FLAGS.mask), "unknown flag bits in {flags:x}",
          sample="violations-marker.pcap"),
    Check("marker-memory-disk", INFO, "snapshot marker has neither or both of Memory and Disk",
          "engines/ep/src/dcp/active_stream.cc sets exactly one; the consumer treats a marker without "
          "Disk as a memory snapshot", ("one_bit", "flags", MEMORY | DISK),
          "flags {flags:x}: not exactly one of Memory and Disk", sample="violations-marker.pcap"),
    Check("marker-start-after-end", ERROR, "snapshot marker start is greater than its end",
          "engines/ep/src/dcp/consumer.cc DcpConsumer::snapshotMarker: start > end is answered "
          "Einval (MB-16042)", ("le", "start_seqno", "end_seqno"),
          "start {start_seqno} > end {end_seqno}", sample="violations-marker.pcap"),
    Check("marker-mvs-beyond-end", ERROR, "max visible seqno is greater than the snapshot end",
          f"{_CONSUMER}: logic_error 'snapEnd < visibleSnapEnd' (MB-55357), the consumer disconnects",
          ("le", "max_visible_seqno", "end_seqno"), "max visible seqno {max_visible_seqno} > end "
          "{end_seqno}", sample="violations-marker.pcap"),
    Check("marker-hps-beyond-end", ERROR, "high prepared seqno of a disk snapshot is above its end",
          f"{_CONSUMER}: logic_error 'HPS is out of range' for HPS > end on Disk markers; HPS below "
          "start is legal and means no HPS (MB-66831)", ("le", "high_prepared_seqno", "end_seqno"),
          "high prepared seqno {high_prepared_seqno} > end {end_seqno}",
          when=(("set", "flags", DISK),), sample="violations-marker.pcap"),
    Check("marker-purge-beyond-end", ERROR, "purge seqno of a disk snapshot is above its end",
          f"{_CONSUMER}: logic_error 'invalid purgeSeqno' (checked on Disk markers only)",
          ("le", "purge_seqno", "end_seqno"), "purge seqno {purge_seqno} > end {end_seqno}",
          when=(("set", "flags", DISK),), sample="violations-marker.pcap"),
    Check("marker-hcs-beyond-end", INFO, "high completed seqno is greater than the snapshot end",
          f"no server check ({_CONSUMER} never compares HCS with end); kv_engine's producer "
          "never sends it", ("le", "high_completed_seqno", "end_seqno"),
          "high completed seqno {high_completed_seqno} > end {end_seqno}",
          when=(("set", "flags", DISK),), sample="violations-marker.pcap"),
    Check("marker-hcs-without-disk", INFO, "HCS non-zero on a marker without Disk",
          "mcbp/codec/dcp_snapshot_marker.cc: the encoder throws for HCS without Disk and the "
          "decoder ignores it", ("in", "high_completed_seqno", (0,)),
          "high completed seqno {high_completed_seqno} set without Disk",
          when=(("clear", "flags", DISK),), sample="violations-marker.pcap"),
    Check("marker-hps-without-disk", INFO, "HPS non-zero on a marker without Disk",
          "mcbp/codec/dcp_snapshot_marker.cc: the encoder throws for HPS without Disk and the "
          "decoder ignores it", ("in", "high_prepared_seqno", (0,)),
          "high prepared seqno {high_prepared_seqno} set without Disk",
          when=(("clear", "flags", DISK),), sample="violations-marker.pcap"),
)

# --- 0x53 / 0x54 / 0x96 failover log and rollback ----------------------------------------------
FAILOVER_ENTRY = Layout("failover_log", (
    u64("vbucket_uuid", 0, "vBucket UUID", short="uuid"),
    u64("seqno", 8, "Seqno", shown="if_set"),
), 16, when=(("status", STATUS_SUCCESS),), repeated="failover_log")
ROLLBACK = Layout("rollback", (u64("rollback_seqno", 0, "Rollback seqno"),), 8,
                  when=(("status", STATUS_ROLLBACK),), section="")
FAILOVER_LOG_EMPTY = Check(
    "failover-log-empty", ERROR, "successful stream request / failover log response without entries",
    "engines/ep/src/dcp/consumer.cc DcpConsumer::handleResponse: a failover log must hold at least "
    "one entry; kv_engine's producer always sends the vbucket's table", ("ne", "value_len", 0),
    "success with an empty failover log", when=(("eq", "status", STATUS_SUCCESS),),
    sample="violations-stream-request.pcap")
FAILOVER_RESPONSE = Shape(value=O, values=(FAILOVER_ENTRY,), datatypes=None, checks=(FAILOVER_LOG_EMPTY,))

_ITEM = (u64("by_seqno", 0, "By seqno", short="seqno"),
         u64("rev_seqno", 8, "Rev seqno", short="rev"))
_DOC = dict(key=R, value=O, datatypes=DATATYPE_ALL, document_key=True)


def seqno_not_zero(what: str) -> Check:
    return Check("seqno-zero", ERROR, "a mutation or prepare with by_seqno 0",
                 f"{VALIDATORS} dcp_mutation_validator / dcp_prepare_validator: 'Invalid seqno(0)', "
                 "Einval", ("ne", "by_seqno", 0), f"{what} with by_seqno 0")


def no_nmeta(what: str) -> Check:
    return Check("nmeta-not-zero", ERROR, "extended metadata length (nmeta) is not 0",
                 f"{VALIDATORS} dcp_mutation_validator / dcp_deletion_validator: 'DCP does not "
                 "support extended metadata', Einval", ("in", "nmeta", (0,)),
                 f"{what} with nmeta {{nmeta}}")


# How engines/ep/src/dcp/producer.cc DcpProducer::handleResponse takes the consumer's
# response to each message the producer's streams send.
SUCCESS_REPLY = Reply()
ACK_REPLY = Reply(taken=None)   # marker and set vbucket state: the ActiveStream notes the ack
NO_REPLY = Reply(expected=False)    # not in handleResponse's switch: logic_error


DCP_OPCODES: tuple[Opcode, ...] = (
    Opcode(0x50, "DcpOpen", "DCP Open Connection", section="open", sender=Sender.CONSUMER,
           negotiates=True, per_vbucket=False,
           request=request(extras("V1", 8, u32("seqno", 0, "Seqno (reserved)", shown="if_set"),
                                  u32("flags", 4, "Flags", display="hex", flags=DCP_OPEN_FLAGS)),
                           key=R, value=O, datatypes=frozenset({0, 1}), value_kind="json",
                           checks=(
            Check("open-flags-invalid", ERROR, "DcpOpen flags outside the defined set",
                  f"{VALIDATORS} dcp_open_validator: 'Request contains invalid flags', Einval "
                  "(0x02, 0x10 and 0x80 are no longer accepted)", ("mask", "flags", DCP_OPEN_FLAGS.mask & ~(OPEN("invalid") | OPEN("unused") | OPEN("pitr_unsupported"))),
                  "invalid flag bits in {flags:x}"),
            Check("open-flags-combination", ERROR, "DcpOpen flags the server refuses together",
                  f"{VALIDATORS} dcp_open_validator: NoValue with NoValueWithUnderlyingDatatype, "
                  "IncludeDeletedUserXattrs without IncludeXattrs, SkipDeletesInInitialBackfill "
                  "without Producer: Einval", ("not_both", "flags", OPEN("no_value"), OPEN("no_value_with_underlying_datatype")),
                  "flags {flags:x}: no_value with no_value_with_underlying_datatype"),
            Check("open-flags-combination", ERROR, "", "", ("needs", "flags", OPEN("include_deleted_user_xattrs"), OPEN("include_xattrs")),
                  "flags {flags:x}: include_deleted_user_xattrs without include_xattrs"),
            Check("open-flags-combination", ERROR, "", "", ("needs", "flags", OPEN("skip_deletes_in_initial_backfill"), OPEN("producer")),
                  "flags {flags:x}: skip_deletes_in_initial_backfill without producer"),
            Check("open-value-datatype", ERROR, "DcpOpen datatype does not match its value",
                  f"{VALIDATORS} dcp_open_validator: RAW without a value, JSON with one, else Einval",
                  ("in", "datatype", (0,)), "datatype {datatype} without a value",
                  when=(("eq", "value_len", 0),)),
            Check("open-value-datatype", ERROR, "", "", ("in", "datatype", (1,)),
                  "datatype {datatype} with a value (JSON required)", when=(("ne", "value_len", 0),)),
        ))),
    Opcode(0x51, "DcpAddStream", "DCP Add Stream", section="add_stream", sender=Sender.CONSUMER,
           opens_stream=True,
           request=request(extras("V1", 4, u32("flags", 0, "Flags", display="hex", flags=STREAM_FLAGS)),
                           checks=STREAM_FLAG_CHECKS),
           response=Shape((extras("V1", 4, u32("new_opaque", 0, "New stream opaque", display="hex")),),
                          checks=(
            Check("add-stream-response-extras", ERROR,
                  "successful add stream response without its 4-byte stream opaque",
                  "daemon/connection.cc Connection::add_stream_rsp sends the stream opaque in the extras "
                  "of a success; synchronous errors (dcp_add_stream_executor.cc) carry no extras",
                  ("in", "extlen", (4,)), "success with {extlen} bytes of extras, not the 4-byte stream opaque",
                  when=(("eq", "status", 0),), sample="violations-add-stream.pcap"),))),
    Opcode(0x52, "DcpCloseStream", "DCP Close Stream", section="close_stream", sender=Sender.CONSUMER,
           request=request()),
    Opcode(0x53, "DcpStreamReq", "DCP Stream Request", section="stream_req", sender=Sender.CONSUMER,
           opens_stream=True,
           request=request(STREAM_REQ_EXTRAS, value=O, value_context="collections", value_kind="json",
                           checks=STREAM_REQ_CHECKS),
           response=Shape(value=O, values=(FAILOVER_ENTRY, ROLLBACK), datatypes=None,
                          checks=(FAILOVER_LOG_EMPTY,))),
    Opcode(0x54, "DcpGetFailoverLog", "DCP Get Failover Log", section="get_failover_log",
           sender=Sender.CONSUMER, request=request(), response=FAILOVER_RESPONSE),
    Opcode(0x55, "DcpStreamEnd", "DCP Stream End", section="stream_end", stream=True,
           sender=Sender.PRODUCER,
           # KeyEnoent too: the consumer may have closed the stream already
           reply=Reply(taken=frozenset({"Success", "KeyEnoent"})),
           request=request(extras("V1", 4, u32("reason", 0, "Reason", names=STREAM_END_REASONS)))),
    Opcode(0x56, "DcpSnapshotMarker", "DCP Snapshot Marker", section="snapshot", stream=True,
           sender=Sender.PRODUCER, reply=ACK_REPLY,
           request=request(MARKER_V1, MARKER_V2_EXTRAS, value=O,
                           values=(MARKER_V2_0, MARKER_V2_2, MARKER_V2_2_DOC), checks=MARKER_CHECKS)),
    Opcode(0x57, "DcpMutation", "DCP Mutation", section="mutation", stream=True, item=True, document=True,
           sender=Sender.PRODUCER, seqno_field="by_seqno", sync_write=MUTATION, reply=SUCCESS_REPLY,
           request=request(extras("V1", 31, *_ITEM,
                                  u32("flags", 16, "Document flags", display="hex"),
                                  u32("expiration", 20, "Expiration", shown="if_set"),
                                  u32("lock_time", 24, "Lock time", shown="never"),
                                  u16("nmeta", 28, "Extended metadata length", shown="never"),
                                  u8("nru", 30, "NRU", shown="never")),
                           **_DOC, checks=(seqno_not_zero("mutation"), no_nmeta("mutation")))),
    Opcode(0x58, "DcpDeletion", "DCP Deletion", section="deletion", stream=True, item=True, document=True,
           sender=Sender.PRODUCER, seqno_field="by_seqno", sync_write=MUTATION, reply=SUCCESS_REPLY,
           request=request(extras("V1", 18, *_ITEM, u16("nmeta", 16, "Extended metadata length",
                                                        shown="never"), context="!delete_v2"),
                           extras("V2", 21, *_ITEM, u32("delete_time", 16, "Delete time", shown="if_set"),
                                  u8("unused", 20, "Unused", shown="never"), context="delete_v2"),
                           **{**_DOC, "datatypes": DELETION_DATATYPES}, checks=(no_nmeta("deletion"),))),
    Opcode(0x59, "DcpExpiration", "DCP Expiration", section="expiration", stream=True, item=True, document=True,
           sender=Sender.PRODUCER, seqno_field="by_seqno", sync_write=MUTATION, reply=SUCCESS_REPLY,
           request=request(extras("V1", 20, *_ITEM, u32("delete_time", 16, "Delete time",
                                                        shown="if_set")), **_DOC)),
    Opcode(0x5A, "DcpFlush_Unsupported", "DCP Flush (removed)", section="flush",
           server_rejects="NotSupported", per_vbucket=False),
    Opcode(0x5B, "DcpSetVbucketState", "DCP Set vBucket State", section="set_vbucket_state",
           stream=True, sender=Sender.PRODUCER, reply=ACK_REPLY,
           request=request(extras("V1", 1, u8("state", 0, "State", names=VBUCKET_STATES)), checks=(
               Check("vbucket-state-invalid", ERROR, "set vbucket state to a state that does not exist",
                     f"{VALIDATORS} dcp_set_vbucket_state_validator: 'Request body state invalid' "
                     "(1 active, 2 replica, 3 pending, 4 dead), Einval", ("in", "state", (1, 2, 3, 4)),
                     "state {state}"),))),
    Opcode(0x5C, "DcpNoop", "DCP Noop", section="noop", per_vbucket=False, request=request()),
    Opcode(0x5D, "DcpBufferAcknowledgement", "DCP Buffer Acknowledgement", section="buffer_ack",
           sender=Sender.CONSUMER, per_vbucket=False,
           request=request(extras("V1", 4, u32("bytes_to_ack", 0, "Bytes to ack")))),
    Opcode(0x5E, "DcpControl", "DCP Control", section="control", negotiates=True,
           per_vbucket=False,
           request=request(key=R, value=R, value_kind="text")),
    Opcode(0x5F, "DcpSystemEvent", "DCP System Event", section="system_event", stream=True, item=True,
           sender=Sender.PRODUCER, seqno_field="by_seqno", reply=SUCCESS_REPLY,
           request=request(extras("V1", 13, u64("by_seqno", 0, "By seqno", short="seqno"),
                                  u32("event", 8, "Event", names=SYSTEM_EVENTS),
                                  u8("version", 12, "Version", names=SYSTEM_EVENT_VERSIONS, shown="never")),
                           key=O, value=O, datatypes=DATATYPE_ALL, checks=(
               Check("system-event-invalid", ERROR, "system event id or version the server does not know",
                     f"{VALIDATORS} dcp_system_event_validator: 'Invalid system event id' "
                     "(DcpSystemEventPayload::isValidEvent: 0, 1, 3, 4, 5), Einval",
                     ("in", "event", tuple(k for k in SYSTEM_EVENTS.values if k != 2)), "event id {event}"),
               Check("system-event-invalid", ERROR, "", "", ("in", "version", (0, 1, 2)),
                     "event version {version}"),))),
    Opcode(0x60, "DcpPrepare", "DCP Prepare", section="prepare", stream=True, item=True, document=True,
           sender=Sender.PRODUCER, seqno_field="by_seqno", sync_write=PREPARE, reply=SUCCESS_REPLY,
           request=request(extras("V1", 31, *_ITEM,
                                  u32("flags", 16, "Document flags", display="hex"),
                                  u32("expiration", 20, "Expiration", shown="if_set"),
                                  u32("lock_time", 24, "Lock time", shown="never"),
                                  u8("nru", 28, "NRU", shown="never"),
                                  u8("deleted", 29, "Deleted"),
                                  u8("durability_level", 30, "Durability level",
                                     names=DURABILITY_LEVELS)),
                           **_DOC, cas=R, checks=(
               seqno_not_zero("prepare"),
               Check("durability-level-invalid", ERROR, "prepare without a valid durability level",
                     f"{VALIDATORS} dcp_prepare_validator: 'Invalid durability specifier' (None is "
                     "not a level for a prepare), Einval", ("in", "durability_level", (1, 2, 3)),
                     "durability level {durability_level}"),))),
    Opcode(0x61, "DcpSeqnoAcknowledged", "DCP Seqno Acknowledged", section="seqno_ack",
           sender=Sender.CONSUMER,
           request=request(extras("V1", 8, u64("prepared_seqno", 0, "Prepared seqno")), cas=F)),
    Opcode(0x62, "DcpCommit", "DCP Commit", section="commit", stream=True, item=True, document=True,
           sender=Sender.PRODUCER, seqno_field="commit_seqno", sync_write=COMMIT,
           reply=SUCCESS_REPLY,
           request=request(extras("V1", 16, u64("prepared_seqno", 0, "Prepared seqno"),
                                  u64("commit_seqno", 8, "Commit seqno")), key=R, cas=F)),
    Opcode(0x63, "DcpAbort", "DCP Abort", section="abort", stream=True, item=True, document=True,
           sender=Sender.PRODUCER, seqno_field="abort_seqno", sync_write=ABORT,
           reply=SUCCESS_REPLY,
           request=request(extras("V1", 16, u64("prepared_seqno", 0, "Prepared seqno"),
                                  u64("abort_seqno", 8, "Abort seqno")), key=R, cas=F)),
    Opcode(0x64, "DcpSeqnoAdvanced", "DCP Seqno Advanced", section="seqno_advanced", stream=True,
           sender=Sender.PRODUCER, seqno_field="by_seqno", server_rejects="UnknownCommand",
           reply=NO_REPLY,
           request=Shape((extras("V1", 8, u64("by_seqno", 0, "Seqno", short="seqno")),))),
    Opcode(0x65, "DcpOsoSnapshot", "DCP OSO Snapshot", section="oso_snapshot", stream=True,
           sender=Sender.PRODUCER, server_rejects="UnknownCommand", reply=NO_REPLY,
           request=Shape((extras("V1", 4, u32("flags", 0, "Flags", display="hex", flags=OSO_FLAGS)),))),
    Opcode(0x66, "DcpCacheTransfer", "DCP Cache Transfer", section="cache_transfer", stream=True,
           document=True, sender=Sender.PRODUCER,
           # Enomem too: a consumer without memory for the transfer (the stream cancels it)
           reply=Reply(taken=frozenset({"Success", "Enomem"})),
           request=request(value=R, value_kind="records", cas=F,
                           value_min=42)),   # DcpCacheTransferBuffer::minSize(): 40-byte payload + 2
    Opcode(0x67, "DcpCacheTransferEnd", "DCP Cache Transfer End", section="cache_transfer_end",
           stream=True, sender=Sender.PRODUCER, reply=SUCCESS_REPLY,
           request=request(cas=F, datatypes=RAW)),
    Opcode(0x96, "GetFailoverLog", "Get Failover Log", section="get_failover_log",
           sender=Sender.CONSUMER, request=request(), response=FAILOVER_RESPONSE),
)
