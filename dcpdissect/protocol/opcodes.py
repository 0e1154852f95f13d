"""Per-opcode layouts: every DCP opcode 0x50-0x67, GetFailoverLog 0x96, and names of the rest."""

from __future__ import annotations

from .constants import (
    DCP_OPEN_FLAGS, DELETION_DATATYPES, DURABILITY_LEVELS, MARKER_VERSIONS, OSO_FLAGS,
    SNAPSHOT_FLAGS, STATUS_ROLLBACK, STATUS_SUCCESS, STREAM_END_REASONS, STREAM_FLAGS,
    SYSTEM_EVENTS, VBUCKET_STATES,
)
from .model import Field, Layout, Opcode, Presence, Shape

ANY_DATATYPE = None
R, O, F = Presence.REQUIRED, Presence.OPTIONAL, Presence.FORBIDDEN


def u64(name, offset, title, display="dec"):
    return Field(name, offset, 8, title, display)


def u32(name, offset, title, display="dec", **kw):
    return Field(name, offset, 4, title, display, **kw)


def u16(name, offset, title):
    return Field(name, offset, 2, title)


def u8(name, offset, title, **kw):
    return Field(name, offset, 1, title, **kw)


def extras(label, size, *fields):
    return Layout(label, tuple(fields), size)


NO_BODY = Shape()

# --- 0x56 Snapshot Marker -------------------------------------------------------------
_MARKER_RANGE = (
    u64("start_seqno", 0, "Start seqno"),
    u64("end_seqno", 8, "End seqno"),
    u32("flags", 16, "Snapshot type", display="hex", flags=SNAPSHOT_FLAGS),
)
_MARKER_V2_0 = _MARKER_RANGE + (
    u64("max_visible_seqno", 20, "Max visible seqno"),
    u64("high_completed_seqno", 28, "High completed seqno"),
)
MARKER_V1 = extras("V1", 20, *_MARKER_RANGE)
MARKER_V2_EXTRAS = extras("V2", 1, u8("version", 0, "Version", names=MARKER_VERSIONS))
MARKER_V2_0 = Layout("V2.0", _MARKER_V2_0, 36, when=(("version", 0),))
MARKER_V2_2 = Layout("V2.2", _MARKER_V2_0 + (
    u64("purge_seqno", 36, "Purge seqno"),
    u64("high_prepared_seqno", 44, "High prepared seqno"),
), 52, when=(("version", 2),))
MARKER_V2_2_DOC = Layout("V2.2-doc44", _MARKER_V2_0 + (
    u64("purge_seqno", 36, "Purge seqno"),
), 44, when=(("version", 2),),
    note="44-byte V2.2 as the snapshot-marker spec lists it (no HPS); servers reject it")

# --- 0x53 / 0x54 / 0x96 failover log and rollback ----------------------------------------
FAILOVER_ENTRY = Layout("failover_log", (
    u64("vbucket_uuid", 0, "vBucket UUID", display="hex"),
    u64("seqno", 8, "Seqno"),
), 16, when=(("status", STATUS_SUCCESS),), repeated="failover_log")
ROLLBACK = Layout("rollback", (u64("rollback_seqno", 0, "Rollback seqno"),), 8,
                  when=(("status", STATUS_ROLLBACK),))

STREAM_REQ_EXTRAS = extras(
    "V1", 48,
    u32("flags", 0, "Flags", display="hex", flags=STREAM_FLAGS),
    u32("reserved", 4, "Reserved"),
    u64("start_seqno", 8, "Start seqno"),
    u64("end_seqno", 16, "End seqno"),
    u64("vbucket_uuid", 24, "vBucket UUID", display="hex"),
    u64("snap_start_seqno", 32, "Snapshot start seqno"),
    u64("snap_end_seqno", 40, "Snapshot end seqno"),
)

_ITEM = (u64("by_seqno", 0, "By seqno"), u64("rev_seqno", 8, "Rev seqno"))

DCP_OPCODES: tuple[Opcode, ...] = (
    Opcode(0x50, "DcpOpen", "DCP Open Connection",
           request=Shape((extras("V1", 8, u32("seqno", 0, "Seqno (reserved)"),
                                 u32("flags", 4, "Flags", display="hex", flags=DCP_OPEN_FLAGS)),),
                         key=R, value=O, datatypes=frozenset({0, 1}), value_kind="json")),
    Opcode(0x51, "DcpAddStream", "DCP Add Stream",
           request=Shape((extras("V1", 4, u32("flags", 0, "Flags", display="hex",
                                              flags=STREAM_FLAGS)),)),
           response=Shape((extras("V1", 4, u32("new_opaque", 0, "New stream opaque",
                                               display="hex")),))),
    Opcode(0x52, "DcpCloseStream", "DCP Close Stream", request=NO_BODY),
    Opcode(0x53, "DcpStreamReq", "DCP Stream Request",
           request=Shape((STREAM_REQ_EXTRAS,), value=O, value_kind="json"),
           response=Shape(value=O, values=(FAILOVER_ENTRY, ROLLBACK), datatypes=ANY_DATATYPE)),
    Opcode(0x54, "DcpGetFailoverLog", "DCP Get Failover Log",
           response=Shape(value=O, values=(FAILOVER_ENTRY,), datatypes=ANY_DATATYPE)),
    Opcode(0x55, "DcpStreamEnd", "DCP Stream End",
           request=Shape((extras("V1", 4, u32("reason", 0, "Reason",
                                              names=STREAM_END_REASONS)),))),
    Opcode(0x56, "DcpSnapshotMarker", "DCP Snapshot Marker",
           request=Shape((MARKER_V1, MARKER_V2_EXTRAS), value=O,
                         values=(MARKER_V2_0, MARKER_V2_2, MARKER_V2_2_DOC)),
           seqno_field=None,
           doc="V1: extlen 20; V2: extlen 1 (version byte) + value 36 (V2.0) or 52 (V2.2)"),
    Opcode(0x57, "DcpMutation", "DCP Mutation",
           request=Shape((extras("V1", 31, *_ITEM,
                                 u32("flags", 16, "Document flags", display="hex"),
                                 u32("expiration", 20, "Expiration"),
                                 u32("lock_time", 24, "Lock time"),
                                 u16("nmeta", 28, "Extended metadata length"),
                                 u8("nru", 30, "NRU")),),
                         key=R, value=O, datatypes=ANY_DATATYPE),
           seqno_field="by_seqno"),
    Opcode(0x58, "DcpDeletion", "DCP Deletion",
           request=Shape((extras("V1", 18, *_ITEM, u16("nmeta", 16, "Extended metadata length")),
                          extras("V2", 21, *_ITEM, u32("delete_time", 16, "Delete time"),
                                 u8("unused", 20, "Unused"))),
                         key=R, value=O, datatypes=DELETION_DATATYPES),
           seqno_field="by_seqno"),
    Opcode(0x59, "DcpExpiration", "DCP Expiration",
           request=Shape((extras("V1", 20, *_ITEM, u32("delete_time", 16, "Delete time")),),
                         key=R, value=O, datatypes=ANY_DATATYPE),
           seqno_field="by_seqno"),
    Opcode(0x5A, "DcpFlush", "DCP Flush (obsolete)", request=NO_BODY),
    Opcode(0x5B, "DcpSetVbucketState", "DCP Set vBucket State",
           request=Shape((extras("V1", 1, u8("state", 0, "State", names=VBUCKET_STATES)),))),
    Opcode(0x5C, "DcpNoop", "DCP Noop", request=NO_BODY),
    Opcode(0x5D, "DcpBufferAcknowledgement", "DCP Buffer Acknowledgement",
           request=Shape((extras("V1", 4, u32("bytes_to_ack", 0, "Bytes to ack")),))),
    Opcode(0x5E, "DcpControl", "DCP Control",
           request=Shape(key=R, value=R, value_kind="text")),
    Opcode(0x5F, "DcpSystemEvent", "DCP System Event",
           request=Shape((extras("V1", 13, u64("by_seqno", 0, "By seqno"),
                                 u32("event", 8, "Event", names=SYSTEM_EVENTS),
                                 u8("version", 12, "Version")),),
                         key=O, value=O, datatypes=ANY_DATATYPE),
           seqno_field="by_seqno"),
    Opcode(0x60, "DcpPrepare", "DCP Prepare",
           request=Shape((extras("V1", 31, *_ITEM,
                                 u32("flags", 16, "Document flags", display="hex"),
                                 u32("expiration", 20, "Expiration"),
                                 u32("lock_time", 24, "Lock time"),
                                 u8("nru", 28, "NRU"),
                                 u8("deleted", 29, "Deleted"),
                                 u8("durability_level", 30, "Durability level",
                                    names=DURABILITY_LEVELS)),),
                         key=R, value=O, datatypes=ANY_DATATYPE),
           seqno_field="by_seqno"),
    Opcode(0x61, "DcpSeqnoAcknowledged", "DCP Seqno Acknowledged",
           request=Shape((extras("V1", 8, u64("prepared_seqno", 0, "Prepared seqno")),))),
    Opcode(0x62, "DcpCommit", "DCP Commit",
           request=Shape((extras("V1", 16, u64("prepared_seqno", 0, "Prepared seqno"),
                                 u64("commit_seqno", 8, "Commit seqno")),), key=R),
           seqno_field="commit_seqno"),
    Opcode(0x63, "DcpAbort", "DCP Abort",
           request=Shape((extras("V1", 16, u64("prepared_seqno", 0, "Prepared seqno"),
                                 u64("abort_seqno", 8, "Abort seqno")),), key=R),
           seqno_field="abort_seqno"),
    Opcode(0x64, "DcpSeqnoAdvanced", "DCP Seqno Advanced",
           request=Shape((extras("V1", 8, u64("by_seqno", 0, "Seqno")),)),
           seqno_field="by_seqno"),
    Opcode(0x65, "DcpOsoSnapshot", "DCP OSO Snapshot",
           request=Shape((extras("V1", 4, u32("flags", 0, "Flags", display="hex",
                                              flags=OSO_FLAGS)),))),
    Opcode(0x66, "DcpCacheTransfer", "DCP Cache Transfer",
           request=Shape(value=R, value_kind="records")),
    Opcode(0x67, "DcpCacheTransferEnd", "DCP Cache Transfer End", request=NO_BODY),
    Opcode(0x96, "GetFailoverLog", "Get Failover Log",
           response=Shape(value=O, values=(FAILOVER_ENTRY,), datatypes=ANY_DATATYPE),
           dcp=False),
)

# Names only: the rest of the client opcodes a DCP capture may carry (resync and display).
OTHER_OPCODE_NAMES = {
    0x00: "Get", 0x01: "Set", 0x02: "Add", 0x03: "Replace", 0x04: "Delete",
    0x05: "Increment", 0x06: "Decrement", 0x07: "Quit", 0x08: "Flush", 0x09: "GetQ",
    0x0A: "Noop", 0x0B: "Version", 0x0C: "GetK", 0x0D: "GetKQ", 0x0E: "Append",
    0x0F: "Prepend", 0x10: "Stat", 0x11: "SetQ", 0x12: "AddQ", 0x13: "ReplaceQ",
    0x14: "DeleteQ", 0x15: "IncrementQ", 0x16: "DecrementQ", 0x17: "QuitQ", 0x18: "FlushQ",
    0x19: "AppendQ", 0x1A: "PrependQ", 0x1B: "Verbosity", 0x1C: "Touch", 0x1D: "Gat",
    0x1E: "Gatq", 0x1F: "Hello", 0x20: "SaslListMechs", 0x21: "SaslAuth", 0x22: "SaslStep",
    0x23: "IoctlGet", 0x24: "IoctlSet", 0x25: "ConfigValidate", 0x26: "ConfigReload",
    0x27: "AuditPut", 0x28: "AuditConfigReload", 0x29: "Shutdown",
    0x3D: "SetVbucket", 0x3E: "GetVbucket", 0x3F: "DelVbucket", 0x48: "GetAllVbSeqnos",
    0x83: "GetReplica", 0x85: "CreateBucket", 0x86: "DeleteBucket", 0x87: "ListBuckets",
    0x89: "SelectBucket", 0x91: "ObserveSeqno", 0x92: "Observe", 0x93: "EvictKey",
    0x94: "GetLocked", 0x95: "UnlockKey", 0x97: "LastClosedCheckpoint",
    0xA0: "GetMeta", 0xA1: "GetqMeta", 0xA2: "SetWithMeta", 0xA3: "SetqWithMeta",
    0xA4: "AddWithMeta", 0xA5: "AddqWithMeta", 0xA8: "DelWithMeta", 0xA9: "DelqWithMeta",
    0xAF: "Ifconfig", 0xB3: "CompactDb", 0xB4: "SetClusterConfig", 0xB5: "GetClusterConfig",
    0xB6: "GetRandomKey", 0xB7: "SeqnoPersistence", 0xB8: "GetKeys",
    0xB9: "CollectionsSetManifest", 0xBA: "CollectionsGetManifest",
    0xBB: "CollectionsGetID", 0xBC: "CollectionsGetScopeID",
    0xC5: "SubdocGet", 0xC6: "SubdocExists", 0xC7: "SubdocDictAdd", 0xC8: "SubdocDictUpsert",
    0xC9: "SubdocDelete", 0xCA: "SubdocReplace", 0xCB: "SubdocArrayPushLast",
    0xCC: "SubdocArrayPushFirst", 0xCD: "SubdocArrayInsert", 0xCE: "SubdocArrayAddUnique",
    0xCF: "SubdocCounter", 0xD0: "SubdocMultiLookup", 0xD1: "SubdocMultiMutation",
    0xD2: "SubdocGetCount", 0xD3: "SubdocReplaceBodyWithXattr",
    0xF1: "IsaslRefresh", 0xF3: "GetCmdTimer", 0xF4: "SetCtrlToken", 0xF5: "GetCtrlToken",
    0xF6: "UpdateExternalUserPermissions", 0xF7: "RbacRefresh", 0xF8: "AuthProvider",
    0xFB: "DropPrivilege", 0xFC: "AdjustTimeofday", 0xFD: "EwouldblockCtl",
    0xFE: "GetErrorMap",
}
