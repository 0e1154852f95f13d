-- dcpdissect.lua: Couchbase DCP / MCBP dissector for Wireshark 4.0 (Lua 5.2).
-- Rendered from the dcpdissect protocol tables (dcpdissect/protocol/) by
-- `dcpdissect lua generate`; do not edit: change the tables or dcpdissect/luagen instead.
-- Install with `dcpdissect lua install` or load with `tshark -X lua_script:dcpdissect.lua`.
-- While loaded it owns the TCP ports of the preference dcp.tcp_ports (default 11210,11209),
-- replacing Wireshark's built-in couchbase dissector there.

local dcp = Proto("dcp", "Couchbase DCP (dcpdissect)")
local fmt, sbyte = string.format, string.byte
local band, rshift = bit32.band, bit32.rshift
local U0 = UInt64(0, 0)

local function nonzero(v) return v ~= nil and v ~= U0 end
local function or0(v) if v == nil then return "0" end return tostring(v) end

local function flagtext(bits, mask, v)
  local out = {}
  for i = 1, #bits do
    if band(v, bits[i][1]) ~= 0 then out[#out + 1] = bits[i][2] end
  end
  local unknown = band(v, bit32.bnot(mask))
  if unknown ~= 0 then out[#out + 1] = fmt("unknown:0x%x", unknown) end
  if #out == 0 then return "none" end
  return table.concat(out, "+")
end

-- Value strings
local MAGIC_NAMES = {[8] = "AltClientRequest", [24] = "AltClientResponse", [128] = "ClientRequest", [129] = "ClientResponse", [130] = "ServerRequest", [131] = "ServerResponse"}
local OPCODE_NAMES = {[0] = "Get", [1] = "Set", [2] = "Add", [3] = "Replace", [4] = "Delete", [5] = "Increment", [6] = "Decrement", [7] = "Quit", [8] = "Flush", [9] = "GetQ", [10] = "Noop", [11] = "Version", [12] = "GetK", [13] = "GetKQ", [14] = "Append", [15] = "Prepend", [16] = "Stat", [17] = "SetQ", [18] = "AddQ", [19] = "ReplaceQ", [20] = "DeleteQ", [21] = "IncrementQ", [22] = "DecrementQ", [23] = "QuitQ", [24] = "FlushQ", [25] = "AppendQ", [26] = "PrependQ", [27] = "Verbosity", [28] = "Touch", [29] = "Gat", [30] = "Gatq", [31] = "Hello", [32] = "SaslListMechs", [33] = "SaslAuth", [34] = "SaslStep", [35] = "IoctlGet", [36] = "IoctlSet", [37] = "ConfigValidate", [38] = "ConfigReload", [39] = "AuditPut", [40] = "AuditConfigReload", [41] = "Shutdown", [61] = "SetVbucket", [62] = "GetVbucket", [63] = "DelVbucket", [72] = "GetAllVbSeqnos", [80] = "DcpOpen", [81] = "DcpAddStream", [82] = "DcpCloseStream", [83] = "DcpStreamReq", [84] = "DcpGetFailoverLog", [85] = "DcpStreamEnd", [86] = "DcpSnapshotMarker", [87] = "DcpMutation", [88] = "DcpDeletion", [89] = "DcpExpiration", [90] = "DcpFlush", [91] = "DcpSetVbucketState", [92] = "DcpNoop", [93] = "DcpBufferAcknowledgement", [94] = "DcpControl", [95] = "DcpSystemEvent", [96] = "DcpPrepare", [97] = "DcpSeqnoAcknowledged", [98] = "DcpCommit", [99] = "DcpAbort", [100] = "DcpSeqnoAdvanced", [101] = "DcpOsoSnapshot", [102] = "DcpCacheTransfer", [103] = "DcpCacheTransferEnd", [131] = "GetReplica", [133] = "CreateBucket", [134] = "DeleteBucket", [135] = "ListBuckets", [137] = "SelectBucket", [145] = "ObserveSeqno", [146] = "Observe", [147] = "EvictKey", [148] = "GetLocked", [149] = "UnlockKey", [150] = "GetFailoverLog", [151] = "LastClosedCheckpoint", [160] = "GetMeta", [161] = "GetqMeta", [162] = "SetWithMeta", [163] = "SetqWithMeta", [164] = "AddWithMeta", [165] = "AddqWithMeta", [168] = "DelWithMeta", [169] = "DelqWithMeta", [175] = "Ifconfig", [179] = "CompactDb", [180] = "SetClusterConfig", [181] = "GetClusterConfig", [182] = "GetRandomKey", [183] = "SeqnoPersistence", [184] = "GetKeys", [185] = "CollectionsSetManifest", [186] = "CollectionsGetManifest", [187] = "CollectionsGetID", [188] = "CollectionsGetScopeID", [197] = "SubdocGet", [198] = "SubdocExists", [199] = "SubdocDictAdd", [200] = "SubdocDictUpsert", [201] = "SubdocDelete", [202] = "SubdocReplace", [203] = "SubdocArrayPushLast", [204] = "SubdocArrayPushFirst", [205] = "SubdocArrayInsert", [206] = "SubdocArrayAddUnique", [207] = "SubdocCounter", [208] = "SubdocMultiLookup", [209] = "SubdocMultiMutation", [210] = "SubdocGetCount", [211] = "SubdocReplaceBodyWithXattr", [241] = "IsaslRefresh", [243] = "GetCmdTimer", [244] = "SetCtrlToken", [245] = "GetCtrlToken", [246] = "UpdateExternalUserPermissions", [247] = "RbacRefresh", [248] = "AuthProvider", [251] = "DropPrivilege", [252] = "AdjustTimeofday", [253] = "EwouldblockCtl", [254] = "GetErrorMap"}
local SERVER_OPCODE_NAMES = {[1] = "ClustermapChangeNotification", [2] = "Authenticate", [3] = "ActiveExternalUsers", [4] = "GetAuthorization"}
local STATUS_NAMES = {[0] = "Success", [1] = "KeyEnoent", [2] = "KeyEexists", [3] = "E2big", [4] = "Einval", [5] = "NotStored", [6] = "DeltaBadval", [7] = "NotMyVbucket", [8] = "NoBucket", [9] = "Locked", [10] = "DcpStreamNotFound", [11] = "OpaqueNoMatch", [12] = "EWouldThrottle", [13] = "EConfigOnly", [14] = "NotLocked", [15] = "CasValueInvalid", [31] = "AuthStale", [32] = "AuthError", [33] = "AuthContinue", [34] = "Erange", [35] = "Rollback", [36] = "Eaccess", [37] = "NotInitialized", [38] = "EncryptionKeyNotAvailable", [39] = "ChecksumMismatch", [40] = "ExpiryOverflow", [41] = "LockExpiryOverflow", [48] = "RateLimitedNetworkIngress", [49] = "RateLimitedNetworkEgress", [50] = "RateLimitedMaxConnections", [51] = "RateLimitedMaxCommands", [52] = "ScopeSizeLimitExceeded", [53] = "BucketSizeLimitExceeded", [54] = "BucketResidentRatioTooLow", [55] = "BucketDataSizeTooBig", [56] = "BucketDiskSpaceTooLow", [80] = "BucketPaused", [81] = "Cancelled", [128] = "UnknownFrameInfo", [129] = "UnknownCommand", [130] = "Enomem", [131] = "NotSupported", [132] = "Einternal", [133] = "Ebusy", [134] = "Etmpfail", [135] = "XattrEinval", [136] = "UnknownCollection", [138] = "CannotApplyCollectionsManifest", [140] = "UnknownScope", [141] = "DcpStreamIdInvalid", [160] = "DurabilityInvalidLevel", [161] = "DurabilityImpossible", [162] = "SyncWriteInProgress", [163] = "SyncWriteAmbiguous", [164] = "SyncWriteReCommitInProgress", [165] = "RangeScanCancelled", [166] = "RangeScanMore", [167] = "RangeScanComplete", [168] = "VbUuidNotEqual"}
local REQUEST_FRAME_INFO_NAMES = {[0] = "Barrier", [1] = "DurabilityRequirement", [2] = "DcpStreamId", [3] = "OpenTracingContext", [4] = "Impersonate", [5] = "PreserveTtl", [6] = "ImpersonateExtraPrivilege", [7] = "ImpersonateWithTokenAuthDataId"}
local RESPONSE_FRAME_INFO_NAMES = {[0] = "ServerRecvSendDuration", [1] = "ReadUnits", [2] = "WriteUnits", [3] = "ThrottleDuration"}
local VS_STREAM_END_REASON = {[0] = "Ok", [1] = "Closed", [2] = "StateChanged", [3] = "Disconnected", [4] = "Slow", [5] = "BackfillFail", [6] = "Rollback", [7] = "FilterEmpty", [8] = "LostPrivileges"}
local VS_MARKER_VERSION = {[0] = "V2.0", [1] = "V2.1 (removed)", [2] = "V2.2"}
local VS_VBUCKET_STATE = {[1] = "active", [2] = "replica", [3] = "pending", [4] = "dead"}
local VS_SYSTEM_EVENT = {[0] = "BeginCollection", [1] = "EndCollection", [2] = "Reserved", [3] = "CreateScope", [4] = "DropScope", [5] = "ModifyCollection"}
local VS_DURABILITY_LEVEL = {[0] = "None", [1] = "Majority", [2] = "MajorityAndPersistOnMaster", [3] = "PersistToMajority"}
local REQUEST_MAGIC = {[8] = true, [128] = true, [130] = true}
local SERVER_MAGIC = {[130] = true, [131] = true}
local FLEX_MAGIC = {[8] = true, [24] = true}
local HEADER_SIZE, MAX_FRAME_SIZE, STREAM_ID_INFO = 24, 31457280, 2

-- Flag texts (as FlagSet.text)
local FLAGBITS_DATATYPE = {{1, "json"}, {2, "snappy"}, {4, "xattr"}}
local function flagtext_datatype(v) return flagtext(FLAGBITS_DATATYPE, 7, v) end
local FLAGBITS_DCP_OPEN_FLAGS = {{1, "producer"}, {2, "invalid"}, {4, "include_xattrs"}, {8, "no_value"}, {16, "unused"}, {32, "include_delete_times"}, {64, "no_value_with_underlying_datatype"}, {128, "pitr_unsupported"}, {256, "include_deleted_user_xattrs"}, {512, "skip_deletes_in_initial_backfill"}}
local function flagtext_dcp_open_flags(v) return flagtext(FLAGBITS_DCP_OPEN_FLAGS, 1023, v) end
local FLAGBITS_STREAM_FLAGS = {{1, "takeover"}, {2, "disk_only"}, {4, "to_latest"}, {8, "no_value"}, {16, "active_vb_only"}, {32, "strict_vbuuid"}, {64, "from_latest"}, {128, "ignore_purged_tombstones"}, {256, "cache_transfer"}}
local function flagtext_stream_flags(v) return flagtext(FLAGBITS_STREAM_FLAGS, 511, v) end
local FLAGBITS_SNAPSHOT_FLAGS = {{1, "memory"}, {2, "disk"}, {4, "checkpoint"}, {8, "ack"}, {16, "history"}, {32, "may_contain_duplicates"}}
local function flagtext_snapshot_flags(v) return flagtext(FLAGBITS_SNAPSHOT_FLAGS, 63, v) end
local FLAGBITS_OSO_FLAGS = {{1, "start"}, {2, "end"}}
local function flagtext_oso_flags(v) return flagtext(FLAGBITS_OSO_FLAGS, 3, v) end

-- Fields
local F = {}
F.magic = ProtoField.uint8("dcp.magic", "Magic", base.HEX, MAGIC_NAMES)
F.opcode = ProtoField.uint8("dcp.opcode", "Opcode", base.HEX, OPCODE_NAMES)
F.server_opcode = ProtoField.uint8("dcp.server_opcode", "Server opcode", base.HEX, SERVER_OPCODE_NAMES)
F.keylen = ProtoField.uint16("dcp.keylen", "Key length", base.DEC)
F.framing_len = ProtoField.uint8("dcp.framing_len", "Framing extras length", base.DEC)
F.extlen = ProtoField.uint8("dcp.extlen", "Extras length", base.DEC)
F.datatype = ProtoField.uint8("dcp.datatype", "Datatype", base.HEX)
F.datatype_json = ProtoField.bool("dcp.datatype.json", "JSON", 8, nil, 0x1)
F.datatype_snappy = ProtoField.bool("dcp.datatype.snappy", "SNAPPY", 8, nil, 0x2)
F.datatype_xattr = ProtoField.bool("dcp.datatype.xattr", "XATTR", 8, nil, 0x4)
F.vbucket = ProtoField.uint16("dcp.vbucket", "vBucket", base.DEC)
F.status = ProtoField.uint16("dcp.status", "Status", base.HEX, STATUS_NAMES)
F.bodylen = ProtoField.uint32("dcp.bodylen", "Total body length", base.DEC)
F.opaque = ProtoField.uint32("dcp.opaque", "Opaque", base.HEX)
F.cas = ProtoField.uint64("dcp.cas", "CAS", base.HEX)
F.frame_info = ProtoField.bytes("dcp.frame_info", "Frame info")
F.frame_info_id = ProtoField.uint16("dcp.frame_info.id", "Frame info id", base.DEC)
F.frame_info_len = ProtoField.uint16("dcp.frame_info.len", "Frame info length", base.DEC)
F.frame_info_data = ProtoField.bytes("dcp.frame_info.data", "Frame info data")
F.stream_id = ProtoField.uint16("dcp.stream_id", "Stream id", base.DEC)
F.extras = ProtoField.bytes("dcp.extras", "Extras")
F.key = ProtoField.string("dcp.key", "Key")
F.value_len = ProtoField.int32("dcp.value_len", "Value length", base.DEC)
F.value = ProtoField.bytes("dcp.value", "Value")
F.garbage = ProtoField.bytes("dcp.garbage", "Not MCBP (skipped to the end of the segment)")
F.open_layout = ProtoField.string("dcp.open.layout", "Layout")
F.open_seqno = ProtoField.uint32("dcp.open.seqno", "Seqno (reserved)", base.DEC, nil)
F.open_flags = ProtoField.uint32("dcp.open.flags", "Flags", base.HEX, nil)
F.open_flags_producer = ProtoField.bool("dcp.open.flags.producer", "producer", 32, nil, 0x1)
F.open_flags_invalid = ProtoField.bool("dcp.open.flags.invalid", "invalid", 32, nil, 0x2)
F.open_flags_include_xattrs = ProtoField.bool("dcp.open.flags.include_xattrs", "include_xattrs", 32, nil, 0x4)
F.open_flags_no_value = ProtoField.bool("dcp.open.flags.no_value", "no_value", 32, nil, 0x8)
F.open_flags_unused = ProtoField.bool("dcp.open.flags.unused", "unused", 32, nil, 0x10)
F.open_flags_include_delete_times = ProtoField.bool("dcp.open.flags.include_delete_times", "include_delete_times", 32, nil, 0x20)
F.open_flags_no_value_with_underlying_datatype = ProtoField.bool("dcp.open.flags.no_value_with_underlying_datatype", "no_value_with_underlying_datatype", 32, nil, 0x40)
F.open_flags_pitr_unsupported = ProtoField.bool("dcp.open.flags.pitr_unsupported", "pitr_unsupported", 32, nil, 0x80)
F.open_flags_include_deleted_user_xattrs = ProtoField.bool("dcp.open.flags.include_deleted_user_xattrs", "include_deleted_user_xattrs", 32, nil, 0x100)
F.open_flags_skip_deletes_in_initial_backfill = ProtoField.bool("dcp.open.flags.skip_deletes_in_initial_backfill", "skip_deletes_in_initial_backfill", 32, nil, 0x200)
F.add_stream_layout = ProtoField.string("dcp.add_stream.layout", "Layout")
F.add_stream_flags = ProtoField.uint32("dcp.add_stream.flags", "Flags", base.HEX, nil)
F.add_stream_flags_takeover = ProtoField.bool("dcp.add_stream.flags.takeover", "takeover", 32, nil, 0x1)
F.add_stream_flags_disk_only = ProtoField.bool("dcp.add_stream.flags.disk_only", "disk_only", 32, nil, 0x2)
F.add_stream_flags_to_latest = ProtoField.bool("dcp.add_stream.flags.to_latest", "to_latest", 32, nil, 0x4)
F.add_stream_flags_no_value = ProtoField.bool("dcp.add_stream.flags.no_value", "no_value", 32, nil, 0x8)
F.add_stream_flags_active_vb_only = ProtoField.bool("dcp.add_stream.flags.active_vb_only", "active_vb_only", 32, nil, 0x10)
F.add_stream_flags_strict_vbuuid = ProtoField.bool("dcp.add_stream.flags.strict_vbuuid", "strict_vbuuid", 32, nil, 0x20)
F.add_stream_flags_from_latest = ProtoField.bool("dcp.add_stream.flags.from_latest", "from_latest", 32, nil, 0x40)
F.add_stream_flags_ignore_purged_tombstones = ProtoField.bool("dcp.add_stream.flags.ignore_purged_tombstones", "ignore_purged_tombstones", 32, nil, 0x80)
F.add_stream_flags_cache_transfer = ProtoField.bool("dcp.add_stream.flags.cache_transfer", "cache_transfer", 32, nil, 0x100)
F.add_stream_new_opaque = ProtoField.uint32("dcp.add_stream.new_opaque", "New stream opaque", base.HEX, nil)
F.stream_req_layout = ProtoField.string("dcp.stream_req.layout", "Layout")
F.stream_req_flags = ProtoField.uint32("dcp.stream_req.flags", "Flags", base.HEX, nil)
F.stream_req_flags_takeover = ProtoField.bool("dcp.stream_req.flags.takeover", "takeover", 32, nil, 0x1)
F.stream_req_flags_disk_only = ProtoField.bool("dcp.stream_req.flags.disk_only", "disk_only", 32, nil, 0x2)
F.stream_req_flags_to_latest = ProtoField.bool("dcp.stream_req.flags.to_latest", "to_latest", 32, nil, 0x4)
F.stream_req_flags_no_value = ProtoField.bool("dcp.stream_req.flags.no_value", "no_value", 32, nil, 0x8)
F.stream_req_flags_active_vb_only = ProtoField.bool("dcp.stream_req.flags.active_vb_only", "active_vb_only", 32, nil, 0x10)
F.stream_req_flags_strict_vbuuid = ProtoField.bool("dcp.stream_req.flags.strict_vbuuid", "strict_vbuuid", 32, nil, 0x20)
F.stream_req_flags_from_latest = ProtoField.bool("dcp.stream_req.flags.from_latest", "from_latest", 32, nil, 0x40)
F.stream_req_flags_ignore_purged_tombstones = ProtoField.bool("dcp.stream_req.flags.ignore_purged_tombstones", "ignore_purged_tombstones", 32, nil, 0x80)
F.stream_req_flags_cache_transfer = ProtoField.bool("dcp.stream_req.flags.cache_transfer", "cache_transfer", 32, nil, 0x100)
F.stream_req_reserved = ProtoField.uint32("dcp.stream_req.reserved", "Reserved", base.DEC, nil)
F.stream_req_start_seqno = ProtoField.uint64("dcp.stream_req.start_seqno", "Start seqno", base.DEC, nil)
F.stream_req_end_seqno = ProtoField.uint64("dcp.stream_req.end_seqno", "End seqno", base.DEC, nil)
F.stream_req_vbucket_uuid = ProtoField.uint64("dcp.stream_req.vbucket_uuid", "vBucket UUID", base.HEX, nil)
F.stream_req_snap_start_seqno = ProtoField.uint64("dcp.stream_req.snap_start_seqno", "Snapshot start seqno", base.DEC, nil)
F.stream_req_snap_end_seqno = ProtoField.uint64("dcp.stream_req.snap_end_seqno", "Snapshot end seqno", base.DEC, nil)
F.failover_log_vbucket_uuid = ProtoField.uint64("dcp.failover_log.vbucket_uuid", "vBucket UUID", base.HEX, nil)
F.failover_log_seqno = ProtoField.uint64("dcp.failover_log.seqno", "Seqno", base.DEC, nil)
F.rollback_seqno = ProtoField.uint64("dcp.rollback_seqno", "Rollback seqno", base.DEC, nil)
F.get_failover_log_layout = ProtoField.string("dcp.get_failover_log.layout", "Layout")
F.stream_end_layout = ProtoField.string("dcp.stream_end.layout", "Layout")
F.stream_end_reason = ProtoField.uint32("dcp.stream_end.reason", "Reason", base.DEC, VS_STREAM_END_REASON)
F.snapshot_layout = ProtoField.string("dcp.snapshot.layout", "Layout")
F.snapshot_start_seqno = ProtoField.uint64("dcp.snapshot.start_seqno", "Start seqno", base.DEC, nil)
F.snapshot_end_seqno = ProtoField.uint64("dcp.snapshot.end_seqno", "End seqno", base.DEC, nil)
F.snapshot_flags = ProtoField.uint32("dcp.snapshot.flags", "Snapshot type", base.HEX, nil)
F.snapshot_flags_memory = ProtoField.bool("dcp.snapshot.flags.memory", "Memory", 32, nil, 0x1)
F.snapshot_flags_disk = ProtoField.bool("dcp.snapshot.flags.disk", "Disk", 32, nil, 0x2)
F.snapshot_flags_checkpoint = ProtoField.bool("dcp.snapshot.flags.checkpoint", "Checkpoint", 32, nil, 0x4)
F.snapshot_flags_ack = ProtoField.bool("dcp.snapshot.flags.ack", "Acknowledge", 32, nil, 0x8)
F.snapshot_flags_history = ProtoField.bool("dcp.snapshot.flags.history", "History", 32, nil, 0x10)
F.snapshot_flags_may_contain_duplicates = ProtoField.bool("dcp.snapshot.flags.may_contain_duplicates", "May Duplicate Keys", 32, nil, 0x20)
F.snapshot_version = ProtoField.uint8("dcp.snapshot.version", "Version", base.DEC, VS_MARKER_VERSION)
F.snapshot_max_visible_seqno = ProtoField.uint64("dcp.snapshot.max_visible_seqno", "Max visible seqno", base.DEC, nil)
F.snapshot_high_completed_seqno = ProtoField.uint64("dcp.snapshot.high_completed_seqno", "High completed seqno", base.DEC, nil)
F.snapshot_purge_seqno = ProtoField.uint64("dcp.snapshot.purge_seqno", "Purge seqno", base.DEC, nil)
F.snapshot_high_prepared_seqno = ProtoField.uint64("dcp.snapshot.high_prepared_seqno", "High prepared seqno", base.DEC, nil)
F.mutation_layout = ProtoField.string("dcp.mutation.layout", "Layout")
F.mutation_by_seqno = ProtoField.uint64("dcp.mutation.by_seqno", "By seqno", base.DEC, nil)
F.mutation_rev_seqno = ProtoField.uint64("dcp.mutation.rev_seqno", "Rev seqno", base.DEC, nil)
F.mutation_flags = ProtoField.uint32("dcp.mutation.flags", "Document flags", base.HEX, nil)
F.mutation_expiration = ProtoField.uint32("dcp.mutation.expiration", "Expiration", base.DEC, nil)
F.mutation_lock_time = ProtoField.uint32("dcp.mutation.lock_time", "Lock time", base.DEC, nil)
F.mutation_nmeta = ProtoField.uint16("dcp.mutation.nmeta", "Extended metadata length", base.DEC, nil)
F.mutation_nru = ProtoField.uint8("dcp.mutation.nru", "NRU", base.DEC, nil)
F.deletion_layout = ProtoField.string("dcp.deletion.layout", "Layout")
F.deletion_by_seqno = ProtoField.uint64("dcp.deletion.by_seqno", "By seqno", base.DEC, nil)
F.deletion_rev_seqno = ProtoField.uint64("dcp.deletion.rev_seqno", "Rev seqno", base.DEC, nil)
F.deletion_nmeta = ProtoField.uint16("dcp.deletion.nmeta", "Extended metadata length", base.DEC, nil)
F.deletion_delete_time = ProtoField.uint32("dcp.deletion.delete_time", "Delete time", base.DEC, nil)
F.deletion_unused = ProtoField.uint8("dcp.deletion.unused", "Unused", base.DEC, nil)
F.expiration_layout = ProtoField.string("dcp.expiration.layout", "Layout")
F.expiration_by_seqno = ProtoField.uint64("dcp.expiration.by_seqno", "By seqno", base.DEC, nil)
F.expiration_rev_seqno = ProtoField.uint64("dcp.expiration.rev_seqno", "Rev seqno", base.DEC, nil)
F.expiration_delete_time = ProtoField.uint32("dcp.expiration.delete_time", "Delete time", base.DEC, nil)
F.set_vbucket_state_layout = ProtoField.string("dcp.set_vbucket_state.layout", "Layout")
F.set_vbucket_state_state = ProtoField.uint8("dcp.set_vbucket_state.state", "State", base.DEC, VS_VBUCKET_STATE)
F.buffer_ack_layout = ProtoField.string("dcp.buffer_ack.layout", "Layout")
F.buffer_ack_bytes_to_ack = ProtoField.uint32("dcp.buffer_ack.bytes_to_ack", "Bytes to ack", base.DEC, nil)
F.system_event_layout = ProtoField.string("dcp.system_event.layout", "Layout")
F.system_event_by_seqno = ProtoField.uint64("dcp.system_event.by_seqno", "By seqno", base.DEC, nil)
F.system_event_event = ProtoField.uint32("dcp.system_event.event", "Event", base.DEC, VS_SYSTEM_EVENT)
F.system_event_version = ProtoField.uint8("dcp.system_event.version", "Version", base.DEC, nil)
F.prepare_layout = ProtoField.string("dcp.prepare.layout", "Layout")
F.prepare_by_seqno = ProtoField.uint64("dcp.prepare.by_seqno", "By seqno", base.DEC, nil)
F.prepare_rev_seqno = ProtoField.uint64("dcp.prepare.rev_seqno", "Rev seqno", base.DEC, nil)
F.prepare_flags = ProtoField.uint32("dcp.prepare.flags", "Document flags", base.HEX, nil)
F.prepare_expiration = ProtoField.uint32("dcp.prepare.expiration", "Expiration", base.DEC, nil)
F.prepare_lock_time = ProtoField.uint32("dcp.prepare.lock_time", "Lock time", base.DEC, nil)
F.prepare_nru = ProtoField.uint8("dcp.prepare.nru", "NRU", base.DEC, nil)
F.prepare_deleted = ProtoField.uint8("dcp.prepare.deleted", "Deleted", base.DEC, nil)
F.prepare_durability_level = ProtoField.uint8("dcp.prepare.durability_level", "Durability level", base.DEC, VS_DURABILITY_LEVEL)
F.seqno_ack_layout = ProtoField.string("dcp.seqno_ack.layout", "Layout")
F.seqno_ack_prepared_seqno = ProtoField.uint64("dcp.seqno_ack.prepared_seqno", "Prepared seqno", base.DEC, nil)
F.commit_layout = ProtoField.string("dcp.commit.layout", "Layout")
F.commit_prepared_seqno = ProtoField.uint64("dcp.commit.prepared_seqno", "Prepared seqno", base.DEC, nil)
F.commit_commit_seqno = ProtoField.uint64("dcp.commit.commit_seqno", "Commit seqno", base.DEC, nil)
F.abort_layout = ProtoField.string("dcp.abort.layout", "Layout")
F.abort_prepared_seqno = ProtoField.uint64("dcp.abort.prepared_seqno", "Prepared seqno", base.DEC, nil)
F.abort_abort_seqno = ProtoField.uint64("dcp.abort.abort_seqno", "Abort seqno", base.DEC, nil)
F.seqno_advanced_layout = ProtoField.string("dcp.seqno_advanced.layout", "Layout")
F.seqno_advanced_by_seqno = ProtoField.uint64("dcp.seqno_advanced.by_seqno", "Seqno", base.DEC, nil)
F.oso_snapshot_layout = ProtoField.string("dcp.oso_snapshot.layout", "Layout")
F.oso_snapshot_flags = ProtoField.uint32("dcp.oso_snapshot.flags", "Flags", base.HEX, nil)
F.oso_snapshot_flags_start = ProtoField.bool("dcp.oso_snapshot.flags.start", "start", 32, nil, 0x1)
F.oso_snapshot_flags_end = ProtoField.bool("dcp.oso_snapshot.flags.end", "end", 32, nil, 0x2)
F.failover_log_count = ProtoField.uint32("dcp.failover_log.count", "Failover log entries", base.DEC)
local DATATYPE_BITS = {{F.datatype_json, 0x1}, {F.datatype_snappy, 0x2}, {F.datatype_xattr, 0x4}}
dcp.fields = {F.magic, F.opcode, F.server_opcode, F.keylen, F.framing_len, F.extlen, F.datatype, F.datatype_json, F.datatype_snappy, F.datatype_xattr, F.vbucket, F.status, F.bodylen, F.opaque, F.cas, F.frame_info, F.frame_info_id, F.frame_info_len, F.frame_info_data, F.stream_id, F.extras, F.key, F.value_len, F.value, F.garbage, F.open_layout, F.open_seqno, F.open_flags, F.open_flags_producer, F.open_flags_invalid, F.open_flags_include_xattrs, F.open_flags_no_value, F.open_flags_unused, F.open_flags_include_delete_times, F.open_flags_no_value_with_underlying_datatype, F.open_flags_pitr_unsupported, F.open_flags_include_deleted_user_xattrs, F.open_flags_skip_deletes_in_initial_backfill, F.add_stream_layout, F.add_stream_flags, F.add_stream_flags_takeover, F.add_stream_flags_disk_only, F.add_stream_flags_to_latest, F.add_stream_flags_no_value, F.add_stream_flags_active_vb_only, F.add_stream_flags_strict_vbuuid, F.add_stream_flags_from_latest, F.add_stream_flags_ignore_purged_tombstones, F.add_stream_flags_cache_transfer, F.add_stream_new_opaque, F.stream_req_layout, F.stream_req_flags, F.stream_req_flags_takeover, F.stream_req_flags_disk_only, F.stream_req_flags_to_latest, F.stream_req_flags_no_value, F.stream_req_flags_active_vb_only, F.stream_req_flags_strict_vbuuid, F.stream_req_flags_from_latest, F.stream_req_flags_ignore_purged_tombstones, F.stream_req_flags_cache_transfer, F.stream_req_reserved, F.stream_req_start_seqno, F.stream_req_end_seqno, F.stream_req_vbucket_uuid, F.stream_req_snap_start_seqno, F.stream_req_snap_end_seqno, F.failover_log_vbucket_uuid, F.failover_log_seqno, F.rollback_seqno, F.get_failover_log_layout, F.stream_end_layout, F.stream_end_reason, F.snapshot_layout, F.snapshot_start_seqno, F.snapshot_end_seqno, F.snapshot_flags, F.snapshot_flags_memory, F.snapshot_flags_disk, F.snapshot_flags_checkpoint, F.snapshot_flags_ack, F.snapshot_flags_history, F.snapshot_flags_may_contain_duplicates, F.snapshot_version, F.snapshot_max_visible_seqno, F.snapshot_high_completed_seqno, F.snapshot_purge_seqno, F.snapshot_high_prepared_seqno, F.mutation_layout, F.mutation_by_seqno, F.mutation_rev_seqno, F.mutation_flags, F.mutation_expiration, F.mutation_lock_time, F.mutation_nmeta, F.mutation_nru, F.deletion_layout, F.deletion_by_seqno, F.deletion_rev_seqno, F.deletion_nmeta, F.deletion_delete_time, F.deletion_unused, F.expiration_layout, F.expiration_by_seqno, F.expiration_rev_seqno, F.expiration_delete_time, F.set_vbucket_state_layout, F.set_vbucket_state_state, F.buffer_ack_layout, F.buffer_ack_bytes_to_ack, F.system_event_layout, F.system_event_by_seqno, F.system_event_event, F.system_event_version, F.prepare_layout, F.prepare_by_seqno, F.prepare_rev_seqno, F.prepare_flags, F.prepare_expiration, F.prepare_lock_time, F.prepare_nru, F.prepare_deleted, F.prepare_durability_level, F.seqno_ack_layout, F.seqno_ack_prepared_seqno, F.commit_layout, F.commit_prepared_seqno, F.commit_commit_seqno, F.abort_layout, F.abort_prepared_seqno, F.abort_abort_seqno, F.seqno_advanced_layout, F.seqno_advanced_by_seqno, F.oso_snapshot_layout, F.oso_snapshot_flags, F.oso_snapshot_flags_start, F.oso_snapshot_flags_end, F.failover_log_count}

-- Expert infos: one per single-PDU rule of the analyzer, plus framing problems
local EXPERTS = {}
EXPERTS["add-stream-datatype"] = ProtoExpert.new("dcp.expert.add_stream_datatype", "[add-stream-datatype] add stream request datatype is not RAW", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["add-stream-extras-length"] = ProtoExpert.new("dcp.expert.add_stream_extras_length", "[add-stream-extras-length] add stream request extras are not 4 bytes", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["add-stream-key-or-value"] = ProtoExpert.new("dcp.expert.add_stream_key_or_value", "[add-stream-key-or-value] add stream request carries a key or a value", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["add-stream-response-extras"] = ProtoExpert.new("dcp.expert.add_stream_response_extras", "[add-stream-response-extras] add stream response without its 4-byte new-opaque extras", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["failover-log-length"] = ProtoExpert.new("dcp.expert.failover_log_length", "[failover-log-length] successful stream request / failover log response value is empty or not a multiple of 16", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["framing-extras-encoding"] = ProtoExpert.new("dcp.expert.framing_extras_encoding", "[framing-extras-encoding] framing extras run past their end", expert.group.MALFORMED, expert.severity.ERROR)
EXPERTS["header-invariant"] = ProtoExpert.new("dcp.expert.header_invariant", "[header-invariant] framing extras + extras + key exceed the body length", expert.group.MALFORMED, expert.severity.ERROR)
EXPERTS["marker-datatype"] = ProtoExpert.new("dcp.expert.marker_datatype", "[marker-datatype] snapshot marker datatype is not RAW", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-extras-length"] = ProtoExpert.new("dcp.expert.marker_extras_length", "[marker-extras-length] snapshot marker extras length is neither 20 (V1) nor 1 (V2)", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-hcs-beyond-end"] = ProtoExpert.new("dcp.expert.marker_hcs_beyond_end", "[marker-hcs-beyond-end] high completed seqno is greater than the snapshot end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-hcs-hps-without-disk"] = ProtoExpert.new("dcp.expert.marker_hcs_hps_without_disk", "[marker-hcs-hps-without-disk] HCS or HPS non-zero on a marker without Disk", expert.group.PROTOCOL, expert.severity.WARN)
EXPERTS["marker-hps-out-of-range"] = ProtoExpert.new("dcp.expert.marker_hps_out_of_range", "[marker-hps-out-of-range] high prepared seqno is non-zero and outside [start, end]", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-key"] = ProtoExpert.new("dcp.expert.marker_key", "[marker-key] snapshot marker carries a key", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-memory-disk"] = ProtoExpert.new("dcp.expert.marker_memory_disk", "[marker-memory-disk] snapshot marker has neither or both of Memory and Disk", expert.group.PROTOCOL, expert.severity.WARN)
EXPERTS["marker-mvs-beyond-end"] = ProtoExpert.new("dcp.expert.marker_mvs_beyond_end", "[marker-mvs-beyond-end] max visible seqno is greater than the snapshot end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-purge-beyond-end"] = ProtoExpert.new("dcp.expert.marker_purge_beyond_end", "[marker-purge-beyond-end] purge seqno is greater than the snapshot end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-start-after-end"] = ProtoExpert.new("dcp.expert.marker_start_after_end", "[marker-start-after-end] snapshot marker start is greater than its end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-unknown-flags"] = ProtoExpert.new("dcp.expert.marker_unknown_flags", "[marker-unknown-flags] snapshot marker has flag bits outside the six defined", expert.group.PROTOCOL, expert.severity.WARN)
EXPERTS["marker-v1-value"] = ProtoExpert.new("dcp.expert.marker_v1_value", "[marker-v1-value] V1 snapshot marker carries a value", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-v22-documented-44"] = ProtoExpert.new("dcp.expert.marker_v22_documented_44", "[marker-v22-documented-44] V2.2 snapshot marker uses the documented 44-byte value (no HPS), which servers reject", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-value-length"] = ProtoExpert.new("dcp.expert.marker_value_length", "[marker-value-length] V2 snapshot marker value is not 36 (V2.0) or 52 (V2.2) bytes", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-version"] = ProtoExpert.new("dcp.expert.marker_version", "[marker-version] snapshot marker version byte is neither 0 (V2.0) nor 2 (V2.2)", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["rollback-value-length"] = ProtoExpert.new("dcp.expert.rollback_value_length", "[rollback-value-length] rollback response value is not exactly 8 bytes", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-flags-cache-transfer"] = ProtoExpert.new("dcp.expert.stream_flags_cache_transfer", "[stream-flags-cache-transfer] CacheTransfer combined with flags other than TakeOver/ActiveVbOnly", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-flags-no-value"] = ProtoExpert.new("dcp.expert.stream_flags_no_value", "[stream-flags-no-value] obsolete NoValue flag 0x08 on add stream / stream request", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-flags-unknown"] = ProtoExpert.new("dcp.expert.stream_flags_unknown", "[stream-flags-unknown] add stream / stream request flags outside the allowed mask 0x1F7", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-datatype"] = ProtoExpert.new("dcp.expert.stream_request_datatype", "[stream-request-datatype] stream request datatype is not RAW", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-extras-length"] = ProtoExpert.new("dcp.expert.stream_request_extras_length", "[stream-request-extras-length] stream request extras are not 48 bytes", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-key"] = ProtoExpert.new("dcp.expert.stream_request_key", "[stream-request-key] stream request carries a key", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-snapshot-range"] = ProtoExpert.new("dcp.expert.stream_request_snapshot_range", "[stream-request-snapshot-range] stream request violates snap_start <= start <= snap_end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-start-after-end"] = ProtoExpert.new("dcp.expert.stream_request_start_after_end", "[stream-request-start-after-end] stream request start seqno is greater than end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-uuid-zero"] = ProtoExpert.new("dcp.expert.stream_request_uuid_zero", "[stream-request-uuid-zero] stream request with vbucket uuid 0 and start > 0", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["unknown-opcode"] = ProtoExpert.new("dcp.expert.unknown_opcode", "[unknown-opcode] opcode not in the protocol tables", expert.group.PROTOCOL, expert.severity.WARN)
EXPERTS["unknown-magic"] = ProtoExpert.new("dcp.expert.unknown_magic", "[unknown-magic] a header with an illegal magic byte", expert.group.MALFORMED, expert.severity.ERROR)
EXPERTS["frame-too-large"] = ProtoExpert.new("dcp.expert.frame_too_large", "[frame-too-large] frame larger than the server's 30 MiB max_packet_size", expert.group.MALFORMED, expert.severity.ERROR)
local e_truncated = ProtoExpert.new("dcp.expert.truncated", "PDU cut by the capture (snap length)", expert.group.MALFORMED, expert.severity.WARN)
local e_internal = ProtoExpert.new("dcp.expert.internal", "dissector error", expert.group.UNDECODED, expert.severity.ERROR)
local e_extras_length = ProtoExpert.new("dcp.expert.extras_length", "extras length matches no layout of the opcode", expert.group.MALFORMED, expert.severity.WARN)
local e_value_length = ProtoExpert.new("dcp.expert.value_length", "value length matches no layout of the opcode", expert.group.MALFORMED, expert.severity.WARN)
do local list = {e_truncated, e_internal, e_extras_length, e_value_length}
  for _, id in ipairs({"add-stream-datatype", "add-stream-extras-length", "add-stream-key-or-value", "add-stream-response-extras", "failover-log-length", "framing-extras-encoding", "header-invariant", "marker-datatype", "marker-extras-length", "marker-hcs-beyond-end", "marker-hcs-hps-without-disk", "marker-hps-out-of-range", "marker-key", "marker-memory-disk", "marker-mvs-beyond-end", "marker-purge-beyond-end", "marker-start-after-end", "marker-unknown-flags", "marker-v1-value", "marker-v22-documented-44", "marker-value-length", "marker-version", "rollback-value-length", "stream-flags-cache-transfer", "stream-flags-no-value", "stream-flags-unknown", "stream-request-datatype", "stream-request-extras-length", "stream-request-key", "stream-request-snapshot-range", "stream-request-start-after-end", "stream-request-uuid-zero", "unknown-opcode", "unknown-magic", "frame-too-large"}) do list[#list + 1] = EXPERTS[id] end
  dcp.experts = list end

-- Shapes: extras layouts (by size) and value layouts (by `when` and size) per opcode
local SHAPES = {}
SHAPES[0x50] = {name = "DcpOpen", layout_field = F.open_layout, seqno = nil,
  req = {extras_sizes = "(8,)",
    extras = {{label = "V1", size = 8, when = {}, rep = nil, text = "Extras (V1, 8 bytes)",
      fields = {{"seqno", 0, 4, F.open_seqno, nil, false, nil},
        {"flags", 4, 4, F.open_flags, {{F.open_flags_producer, 0x1}, {F.open_flags_invalid, 0x2}, {F.open_flags_include_xattrs, 0x4}, {F.open_flags_no_value, 0x8}, {F.open_flags_unused, 0x10}, {F.open_flags_include_delete_times, 0x20}, {F.open_flags_no_value_with_underlying_datatype, 0x40}, {F.open_flags_pitr_unsupported, 0x80}, {F.open_flags_include_deleted_user_xattrs, 0x100}, {F.open_flags_skip_deletes_in_initial_backfill, 0x200}}, false, flagtext_dcp_open_flags}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x51] = {name = "DcpAddStream", layout_field = F.add_stream_layout, seqno = nil,
  req = {extras_sizes = "(4,)",
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{"flags", 0, 4, F.add_stream_flags, {{F.add_stream_flags_takeover, 0x1}, {F.add_stream_flags_disk_only, 0x2}, {F.add_stream_flags_to_latest, 0x4}, {F.add_stream_flags_no_value, 0x8}, {F.add_stream_flags_active_vb_only, 0x10}, {F.add_stream_flags_strict_vbuuid, 0x20}, {F.add_stream_flags_from_latest, 0x40}, {F.add_stream_flags_ignore_purged_tombstones, 0x80}, {F.add_stream_flags_cache_transfer, 0x100}}, true, flagtext_stream_flags}}}},
    values = {}},
  rsp = {extras_sizes = "(4,)",
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{"new_opaque", 0, 4, F.add_stream_new_opaque, nil, true, nil}}}},
    values = {}}}
SHAPES[0x52] = {name = "DcpCloseStream", layout_field = nil, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x53] = {name = "DcpStreamReq", layout_field = F.stream_req_layout, seqno = nil,
  req = {extras_sizes = "(48,)",
    extras = {{label = "V1", size = 48, when = {}, rep = nil, text = "Extras (V1, 48 bytes)",
      fields = {{"flags", 0, 4, F.stream_req_flags, {{F.stream_req_flags_takeover, 0x1}, {F.stream_req_flags_disk_only, 0x2}, {F.stream_req_flags_to_latest, 0x4}, {F.stream_req_flags_no_value, 0x8}, {F.stream_req_flags_active_vb_only, 0x10}, {F.stream_req_flags_strict_vbuuid, 0x20}, {F.stream_req_flags_from_latest, 0x40}, {F.stream_req_flags_ignore_purged_tombstones, 0x80}, {F.stream_req_flags_cache_transfer, 0x100}}, true, flagtext_stream_flags},
        {"reserved", 4, 4, F.stream_req_reserved, nil, true, nil},
        {"start_seqno", 8, 8, F.stream_req_start_seqno, nil, true, nil},
        {"end_seqno", 16, 8, F.stream_req_end_seqno, nil, true, nil},
        {"vbucket_uuid", 24, 8, F.stream_req_vbucket_uuid, nil, true, nil},
        {"snap_start_seqno", 32, 8, F.stream_req_snap_start_seqno, nil, true, nil},
        {"snap_end_seqno", 40, 8, F.stream_req_snap_end_seqno, nil, true, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {{label = "failover_log", size = 16, when = {{"status", 0}}, rep = "failover_log", text = "Value (failover_log, 16 bytes)",
      fields = {{"vbucket_uuid", 0, 8, F.failover_log_vbucket_uuid, nil, true, nil},
        {"seqno", 8, 8, F.failover_log_seqno, nil, true, nil}}},
    {label = "rollback", size = 8, when = {{"status", 35}}, rep = nil, text = "Value (rollback, 8 bytes)",
      fields = {{"rollback_seqno", 0, 8, F.rollback_seqno, nil, true, nil}}}}}}
SHAPES[0x54] = {name = "DcpGetFailoverLog", layout_field = F.get_failover_log_layout, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {{label = "failover_log", size = 16, when = {{"status", 0}}, rep = "failover_log", text = "Value (failover_log, 16 bytes)",
      fields = {{"vbucket_uuid", 0, 8, F.failover_log_vbucket_uuid, nil, true, nil},
        {"seqno", 8, 8, F.failover_log_seqno, nil, true, nil}}}}}}
SHAPES[0x55] = {name = "DcpStreamEnd", layout_field = F.stream_end_layout, seqno = nil,
  req = {extras_sizes = "(4,)",
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{"reason", 0, 4, F.stream_end_reason, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x56] = {name = "DcpSnapshotMarker", layout_field = F.snapshot_layout, seqno = nil,
  req = {extras_sizes = "(20, 1)",
    extras = {{label = "V1", size = 20, when = {}, rep = nil, text = "Extras (V1, 20 bytes)",
      fields = {{"start_seqno", 0, 8, F.snapshot_start_seqno, nil, true, nil},
        {"end_seqno", 8, 8, F.snapshot_end_seqno, nil, true, nil},
        {"flags", 16, 4, F.snapshot_flags, {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, true, flagtext_snapshot_flags}}},
    {label = "V2", size = 1, when = {}, rep = nil, text = "Extras (V2, 1 bytes)",
      fields = {{"version", 0, 1, F.snapshot_version, nil, true, nil}}}},
    values = {{label = "V2.0", size = 36, when = {{"version", 0}}, rep = nil, text = "Value (V2.0, 36 bytes)",
      fields = {{"start_seqno", 0, 8, F.snapshot_start_seqno, nil, true, nil},
        {"end_seqno", 8, 8, F.snapshot_end_seqno, nil, true, nil},
        {"flags", 16, 4, F.snapshot_flags, {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, true, flagtext_snapshot_flags},
        {"max_visible_seqno", 20, 8, F.snapshot_max_visible_seqno, nil, true, nil},
        {"high_completed_seqno", 28, 8, F.snapshot_high_completed_seqno, nil, true, nil}}},
    {label = "V2.2", size = 52, when = {{"version", 2}}, rep = nil, text = "Value (V2.2, 52 bytes)",
      fields = {{"start_seqno", 0, 8, F.snapshot_start_seqno, nil, true, nil},
        {"end_seqno", 8, 8, F.snapshot_end_seqno, nil, true, nil},
        {"flags", 16, 4, F.snapshot_flags, {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, true, flagtext_snapshot_flags},
        {"max_visible_seqno", 20, 8, F.snapshot_max_visible_seqno, nil, true, nil},
        {"high_completed_seqno", 28, 8, F.snapshot_high_completed_seqno, nil, true, nil},
        {"purge_seqno", 36, 8, F.snapshot_purge_seqno, nil, true, nil},
        {"high_prepared_seqno", 44, 8, F.snapshot_high_prepared_seqno, nil, true, nil}}},
    {label = "V2.2-doc44", size = 44, when = {{"version", 2}}, rep = nil, text = "Value (V2.2-doc44, 44 bytes)",
      fields = {{"start_seqno", 0, 8, F.snapshot_start_seqno, nil, true, nil},
        {"end_seqno", 8, 8, F.snapshot_end_seqno, nil, true, nil},
        {"flags", 16, 4, F.snapshot_flags, {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, true, flagtext_snapshot_flags},
        {"max_visible_seqno", 20, 8, F.snapshot_max_visible_seqno, nil, true, nil},
        {"high_completed_seqno", 28, 8, F.snapshot_high_completed_seqno, nil, true, nil},
        {"purge_seqno", 36, 8, F.snapshot_purge_seqno, nil, true, nil}}}}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x57] = {name = "DcpMutation", layout_field = F.mutation_layout, seqno = "by_seqno",
  req = {extras_sizes = "(31,)",
    extras = {{label = "V1", size = 31, when = {}, rep = nil, text = "Extras (V1, 31 bytes)",
      fields = {{"by_seqno", 0, 8, F.mutation_by_seqno, nil, true, nil},
        {"rev_seqno", 8, 8, F.mutation_rev_seqno, nil, false, nil},
        {"flags", 16, 4, F.mutation_flags, nil, false, nil},
        {"expiration", 20, 4, F.mutation_expiration, nil, false, nil},
        {"lock_time", 24, 4, F.mutation_lock_time, nil, false, nil},
        {"nmeta", 28, 2, F.mutation_nmeta, nil, false, nil},
        {"nru", 30, 1, F.mutation_nru, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x58] = {name = "DcpDeletion", layout_field = F.deletion_layout, seqno = "by_seqno",
  req = {extras_sizes = "(18, 21)",
    extras = {{label = "V1", size = 18, when = {}, rep = nil, text = "Extras (V1, 18 bytes)",
      fields = {{"by_seqno", 0, 8, F.deletion_by_seqno, nil, true, nil},
        {"rev_seqno", 8, 8, F.deletion_rev_seqno, nil, false, nil},
        {"nmeta", 16, 2, F.deletion_nmeta, nil, false, nil}}},
    {label = "V2", size = 21, when = {}, rep = nil, text = "Extras (V2, 21 bytes)",
      fields = {{"by_seqno", 0, 8, F.deletion_by_seqno, nil, true, nil},
        {"rev_seqno", 8, 8, F.deletion_rev_seqno, nil, false, nil},
        {"delete_time", 16, 4, F.deletion_delete_time, nil, false, nil},
        {"unused", 20, 1, F.deletion_unused, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x59] = {name = "DcpExpiration", layout_field = F.expiration_layout, seqno = "by_seqno",
  req = {extras_sizes = "(20,)",
    extras = {{label = "V1", size = 20, when = {}, rep = nil, text = "Extras (V1, 20 bytes)",
      fields = {{"by_seqno", 0, 8, F.expiration_by_seqno, nil, true, nil},
        {"rev_seqno", 8, 8, F.expiration_rev_seqno, nil, false, nil},
        {"delete_time", 16, 4, F.expiration_delete_time, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x5a] = {name = "DcpFlush", layout_field = nil, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x5b] = {name = "DcpSetVbucketState", layout_field = F.set_vbucket_state_layout, seqno = nil,
  req = {extras_sizes = "(1,)",
    extras = {{label = "V1", size = 1, when = {}, rep = nil, text = "Extras (V1, 1 bytes)",
      fields = {{"state", 0, 1, F.set_vbucket_state_state, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x5c] = {name = "DcpNoop", layout_field = nil, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x5d] = {name = "DcpBufferAcknowledgement", layout_field = F.buffer_ack_layout, seqno = nil,
  req = {extras_sizes = "(4,)",
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{"bytes_to_ack", 0, 4, F.buffer_ack_bytes_to_ack, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x5e] = {name = "DcpControl", layout_field = nil, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x5f] = {name = "DcpSystemEvent", layout_field = F.system_event_layout, seqno = "by_seqno",
  req = {extras_sizes = "(13,)",
    extras = {{label = "V1", size = 13, when = {}, rep = nil, text = "Extras (V1, 13 bytes)",
      fields = {{"by_seqno", 0, 8, F.system_event_by_seqno, nil, true, nil},
        {"event", 8, 4, F.system_event_event, nil, false, nil},
        {"version", 12, 1, F.system_event_version, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x60] = {name = "DcpPrepare", layout_field = F.prepare_layout, seqno = "by_seqno",
  req = {extras_sizes = "(31,)",
    extras = {{label = "V1", size = 31, when = {}, rep = nil, text = "Extras (V1, 31 bytes)",
      fields = {{"by_seqno", 0, 8, F.prepare_by_seqno, nil, true, nil},
        {"rev_seqno", 8, 8, F.prepare_rev_seqno, nil, false, nil},
        {"flags", 16, 4, F.prepare_flags, nil, false, nil},
        {"expiration", 20, 4, F.prepare_expiration, nil, false, nil},
        {"lock_time", 24, 4, F.prepare_lock_time, nil, false, nil},
        {"nru", 28, 1, F.prepare_nru, nil, false, nil},
        {"deleted", 29, 1, F.prepare_deleted, nil, false, nil},
        {"durability_level", 30, 1, F.prepare_durability_level, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x61] = {name = "DcpSeqnoAcknowledged", layout_field = F.seqno_ack_layout, seqno = nil,
  req = {extras_sizes = "(8,)",
    extras = {{label = "V1", size = 8, when = {}, rep = nil, text = "Extras (V1, 8 bytes)",
      fields = {{"prepared_seqno", 0, 8, F.seqno_ack_prepared_seqno, nil, false, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x62] = {name = "DcpCommit", layout_field = F.commit_layout, seqno = "commit_seqno",
  req = {extras_sizes = "(16,)",
    extras = {{label = "V1", size = 16, when = {}, rep = nil, text = "Extras (V1, 16 bytes)",
      fields = {{"prepared_seqno", 0, 8, F.commit_prepared_seqno, nil, false, nil},
        {"commit_seqno", 8, 8, F.commit_commit_seqno, nil, true, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x63] = {name = "DcpAbort", layout_field = F.abort_layout, seqno = "abort_seqno",
  req = {extras_sizes = "(16,)",
    extras = {{label = "V1", size = 16, when = {}, rep = nil, text = "Extras (V1, 16 bytes)",
      fields = {{"prepared_seqno", 0, 8, F.abort_prepared_seqno, nil, false, nil},
        {"abort_seqno", 8, 8, F.abort_abort_seqno, nil, true, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x64] = {name = "DcpSeqnoAdvanced", layout_field = F.seqno_advanced_layout, seqno = "by_seqno",
  req = {extras_sizes = "(8,)",
    extras = {{label = "V1", size = 8, when = {}, rep = nil, text = "Extras (V1, 8 bytes)",
      fields = {{"by_seqno", 0, 8, F.seqno_advanced_by_seqno, nil, true, nil}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x65] = {name = "DcpOsoSnapshot", layout_field = F.oso_snapshot_layout, seqno = nil,
  req = {extras_sizes = "(4,)",
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{"flags", 0, 4, F.oso_snapshot_flags, {{F.oso_snapshot_flags_start, 0x1}, {F.oso_snapshot_flags_end, 0x2}}, false, flagtext_oso_flags}}}},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x66] = {name = "DcpCacheTransfer", layout_field = nil, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x67] = {name = "DcpCacheTransferEnd", layout_field = nil, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {}}}
SHAPES[0x96] = {name = "GetFailoverLog", layout_field = F.get_failover_log_layout, seqno = nil,
  req = {extras_sizes = "(0,)",
    extras = {},
    values = {}},
  rsp = {extras_sizes = "(0,)",
    extras = {},
    values = {{label = "failover_log", size = 16, when = {{"status", 0}}, rep = "failover_log", text = "Value (failover_log, 16 bytes)",
      fields = {{"vbucket_uuid", 0, 8, F.failover_log_vbucket_uuid, nil, true, nil},
        {"seqno", 8, 8, F.failover_log_seqno, nil, true, nil}}}}}}

-- Single-PDU rules (same logic as dcpdissect.analysis.structural)
local function stream_flag_checks(m, f, add)
  if f.flags == nil then return end
  -- stream-flags-no-value
  if band(f.flags, 8) ~= 0 then
    add("stream-flags-no-value", "flag 0x08 NoValue is no longer used (use DcpOpen NoValue)")
  end
  -- stream-flags-unknown
  if band(f.flags, 4294966784) ~= 0 then
    add("stream-flags-unknown", fmt("invalid flag bits 0x%x", band(f.flags, 4294966784)))
  end
  -- stream-flags-cache-transfer
  if band(f.flags, 256) ~= 0 then
    local others = band(f.flags, 238)
    if others ~= 0 then
      add("stream-flags-cache-transfer", "cache_transfer with " .. flagtext_stream_flags(others))
    end
  end
end

local OPCODE_CHECKS = {}
OPCODE_CHECKS[173] = function(m, f, add)
  -- marker-extras-length
  if m.extlen ~= 20 and m.extlen ~= 1 then
    add("marker-extras-length", fmt("extras length %d (V1 is 20, V2 is 1)", m.extlen))
    return
  end
  -- marker-key
  if m.keylen ~= 0 then add("marker-key", fmt("key of %d bytes on a snapshot marker", m.keylen)) end
  -- marker-datatype
  if m.datatype ~= 0 then add("marker-datatype", fmt("datatype 0x%02x, must be RAW", m.datatype)) end
  -- marker-v1-value
  if m.extlen == 20 and m.value_len ~= 0 then
    add("marker-v1-value", fmt("V1 marker with a %d-byte value", m.value_len))
  end
  -- marker-version
  if m.extlen == 1 and f.version ~= 0 and f.version ~= 2 then
    add("marker-version", fmt("version byte %s%s", f.version == nil and "None" or tostring(f.version),
        f.version == 1 and " (the removed V2.1)" or ""))
    return
  end
  -- marker-v22-documented-44
  if m.extlen == 1 and m.layout == "V2.2-doc44" then
    add("marker-v22-documented-44", "V2.2 value of 44 bytes as the spec document lists it; " ..
        "servers send and accept 52 bytes (purge seqno then HPS)")
  end
  -- marker-value-length
  if m.extlen == 1 and m.layout ~= "V2.2-doc44" and m.layout ~= "V2.0" and m.layout ~= "V2.2" then
    add("marker-value-length", fmt("V2 version %d value of %d bytes, expected %d", f.version,
        m.value_len, f.version == 0 and 36 or 52))
    return
  end
  if f.flags == nil then return end
  local flags, start, stop = f.flags, f.start_seqno or U0, f.end_seqno or U0
  local mvs, hcs = f.max_visible_seqno, f.high_completed_seqno
  local hps, purge = f.high_prepared_seqno, f.purge_seqno
  local disk = band(flags, 2) ~= 0
  -- marker-unknown-flags
  if band(flags, 4294967232) ~= 0 then
    add("marker-unknown-flags", fmt("unknown flag bits 0x%x", band(flags, 4294967232)))
  end
  -- marker-memory-disk
  local kind = band(flags, 3)
  if kind == 0 or kind == 3 then
    add("marker-memory-disk", fmt("flags %s: %s Memory and Disk", flagtext_snapshot_flags(flags),
        kind == 0 and "neither" or "both"))
  end
  -- marker-start-after-end
  if start > stop then add("marker-start-after-end", fmt("start %s > end %s", tostring(start), tostring(stop))) end
  -- marker-hcs-hps-without-disk
  if not disk and (nonzero(hcs) or nonzero(hps)) then
    add("marker-hcs-hps-without-disk", fmt("HCS %s / HPS %s set without Disk", or0(hcs), or0(hps)))
  end
  -- marker-mvs-beyond-end
  if mvs and mvs > stop then
    add("marker-mvs-beyond-end", fmt("max visible seqno %s > end %s", tostring(mvs), tostring(stop)))
  end
  -- marker-hcs-beyond-end
  if hcs and hcs > stop and disk then
    add("marker-hcs-beyond-end", fmt("high completed seqno %s > end %s", tostring(hcs), tostring(stop)))
  end
  -- marker-hps-out-of-range
  if nonzero(hps) and (hps < start or hps > stop) then
    add("marker-hps-out-of-range", fmt("high prepared seqno %s outside [%s, %s]", tostring(hps),
        tostring(start), tostring(stop)))
  end
  -- marker-purge-beyond-end
  if purge and purge > stop then
    add("marker-purge-beyond-end", fmt("purge seqno %s > end %s", tostring(purge), tostring(stop)))
  end
end
OPCODE_CHECKS[163] = function(m, f, add)
  -- add-stream-extras-length
  if m.extlen ~= 4 then add("add-stream-extras-length", fmt("extras length %d, must be 4", m.extlen)) end
  -- add-stream-key-or-value
  if m.keylen ~= 0 or m.value_len ~= 0 then
    add("add-stream-key-or-value", fmt("key %d bytes, value %d bytes", m.keylen, m.value_len))
  end
  -- add-stream-datatype
  if m.datatype ~= 0 then add("add-stream-datatype", fmt("datatype 0x%02x, must be RAW", m.datatype)) end
  stream_flag_checks(m, f, add)
end
OPCODE_CHECKS[162] = function(m, f, add)
  -- add-stream-response-extras
  if m.extlen ~= 4 then
    add("add-stream-response-extras", fmt("response extras length %d, must be 4 (the new stream opaque)", m.extlen))
  end
end
OPCODE_CHECKS[167] = function(m, f, add)
  -- stream-request-extras-length
  if m.extlen ~= 48 then
    add("stream-request-extras-length", fmt("extras length %d, must be 48", m.extlen))
    return
  end
  -- stream-request-key
  if m.keylen ~= 0 then add("stream-request-key", fmt("key of %d bytes", m.keylen)) end
  -- stream-request-datatype
  if m.datatype ~= 0 then add("stream-request-datatype", fmt("datatype 0x%02x, must be RAW", m.datatype)) end
  stream_flag_checks(m, f, add)
  local start, stop = f.start_seqno, f.end_seqno
  local s0, s1, uuid = f.snap_start_seqno, f.snap_end_seqno, f.vbucket_uuid
  if start == nil then return end
  -- stream-request-start-after-end
  if start > stop then
    add("stream-request-start-after-end", fmt("start %s > end %s", tostring(start), tostring(stop)))
  end
  -- stream-request-snapshot-range
  if s0 > start or start > s1 then
    local sig = ""
    if s0 == start + 1 then
      sig = " (signature of adopting a marker before its first item, JDCP-95/241)"
    elseif s1 < start then
      sig = " (signature of snap_end < start, MB-11502)"
    end
    add("stream-request-snapshot-range", fmt("snapshot [%s, %s] does not contain start %s%s",
        tostring(s0), tostring(s1), tostring(start), sig))
  end
  -- stream-request-uuid-zero
  if uuid == U0 and start > U0 then
    add("stream-request-uuid-zero", fmt("vbucket uuid 0 with start %s: the server must roll back to 0",
        tostring(start)))
  end
end
OPCODE_CHECKS[166] = function(m, f, add)
  -- failover-log-length
  if m.status == 0 and (m.value_len == 0 or m.value_len % 16 ~= 0) then
    add("failover-log-length", fmt("success value of %d bytes", m.value_len))
  -- rollback-value-length
  elseif m.status == 35 and m.opcode == 0x53 and m.value_len ~= 8 then
    add("rollback-value-length", fmt("rollback value of %d bytes", m.value_len))
  end
end
OPCODE_CHECKS[168] = function(m, f, add)
  -- failover-log-length
  if m.status == 0 and (m.value_len == 0 or m.value_len % 16 ~= 0) then
    add("failover-log-length", fmt("success value of %d bytes", m.value_len))
  -- rollback-value-length
  elseif m.status == 35 and m.opcode == 0x53 and m.value_len ~= 8 then
    add("rollback-value-length", fmt("rollback value of %d bytes", m.value_len))
  end
end
OPCODE_CHECKS[300] = function(m, f, add)
  -- failover-log-length
  if m.status == 0 and (m.value_len == 0 or m.value_len % 16 ~= 0) then
    add("failover-log-length", fmt("success value of %d bytes", m.value_len))
  -- rollback-value-length
  elseif m.status == 35 and m.opcode == 0x53 and m.value_len ~= 8 then
    add("rollback-value-length", fmt("rollback value of %d bytes", m.value_len))
  end
end

local function check_message(m, add)
  local f = m.f
  -- header-invariant
  if m.k_end > m.bodylen then
    add("header-invariant", fmt("framing extras %d + extras %d + key %d exceed body length %d",
        m.framing_len, m.extlen, m.keylen, m.bodylen))
  end
  -- framing-extras-encoding
  if m.frame_error then add("framing-extras-encoding", "bad framing extras: " .. m.frame_error) end
  -- unknown-opcode
  if not m.spec or SERVER_MAGIC[m.magic] then
    if not SERVER_MAGIC[m.magic] and not OPCODE_NAMES[m.opcode] then
      add("unknown-opcode", fmt("opcode 0x%02x is not a known opcode", m.opcode))
    end
    return
  end
  if m.k_end > m.bodylen then return end
  local check = OPCODE_CHECKS[m.opcode * 2 + (m.request and 1 or 0)]
  if check then check(m, f, add) end
end


-- Decoding ---------------------------------------------------------------------------------
-- Each tree item leaves two userdata (TreeItem, TvbRange) to collect. The collector runs
-- without pause and in large steps, so that garbage is freed while it is still in the CPU
-- caches: this keeps the cost per message flat over long captures (about 10% less CPU at
-- 100 MB). Wireshark has one Lua state, so the setting applies to every Lua plugin.
collectgarbage("setpause", 100)
collectgarbage("setstepmul", 1000)
-- Class methods fetched once: calling them directly skips the per-call method lookup
-- through each object's metatable.
local ti_add, ti_set_text, ti_append_text = TreeItem.add, TreeItem.set_text, TreeItem.append_text
local ti_set_generated, ti_expert = TreeItem.set_generated, TreeItem.add_proto_expert_info
local tvb_range, tvb_raw, tvb_len, tvb_reported_len = Tvb.range, Tvb.raw, Tvb.len, Tvb.reported_len
local r_uint, r_uint64 = TvbRange.uint, TvbRange.uint64
local f_magic, f_opcode, f_server_opcode, f_keylen, f_framing_len = F.magic, F.opcode, F.server_opcode, F.keylen, F.framing_len
local f_extlen, f_datatype, f_vbucket, f_status, f_bodylen = F.extlen, F.datatype, F.vbucket, F.status, F.bodylen
local f_opaque, f_cas, f_extras, f_key, f_value_len, f_value = F.opaque, F.cas, F.extras, F.key, F.value_len, F.value

local function layout_matches(lay, m)
  for i = 1, #lay.when do
    local k, v = lay.when[i][1], lay.when[i][2]
    local have
    if k == "status" then have = m.status else have = m.f[k] end
    if have ~= v then return false end
  end
  return true
end

-- Add every field of `lay` read at `base` (the caller checked the bounds); record values.
-- A flags field gets its flag names appended and one boolean item per set bit (every mask
-- is a single bit, tested with arithmetic rather than a bit32 call).
local function add_fields(tvb, tree, base, lay, vals)
  local fields = lay.fields
  for i = 1, #fields do
    local fd = fields[i]
    local r = tvb_range(tvb, base + fd[2], fd[3])
    if fd[6] then
      if fd[3] == 8 then vals[fd[1]] = r_uint64(r) else vals[fd[1]] = r_uint(r) end
    end
    local item = ti_add(tree, fd[4], r)
    local bits = fd[5]
    if bits then
      local v = r_uint(r)
      ti_append_text(item, " (" .. fd[7](v) .. ")")
      for j = 1, #bits do
        local mask = bits[j][2]
        if v % (mask + mask) >= mask then ti_add(item, bits[j][1], r) end
      end
    end
  end
end

-- Framing extras: (id << 4 | len) tags, nibble 0xF escapes to 15 + next byte.
local function dissect_frame_infos(tvb, tree, m, start, stop)
  local names = m.request and REQUEST_FRAME_INFO_NAMES or RESPONSE_FRAME_INFO_NAMES
  local sub = tree:add(F.frame_info, tvb(start, stop - start))
  sub:set_text(fmt("Framing extras (%d bytes)", stop - start))
  local pos, sid, sid_at, err = start, nil, nil, nil
  while pos < stop do
    local tag_at = pos
    local tag = tvb(pos, 1):uint()
    pos = pos + 1
    local fid, flen = rshift(tag, 4), band(tag, 0x0f)
    if fid == 0x0f then
      if pos >= stop then err = fmt("id escape byte missing at offset %d", pos - 1 - start) break end
      fid = 15 + tvb(pos, 1):uint()
      pos = pos + 1
    end
    if flen == 0x0f then
      if pos >= stop then err = fmt("length escape byte missing at offset %d", pos - 1 - start) break end
      flen = 15 + tvb(pos, 1):uint()
      pos = pos + 1
    end
    if pos + flen > stop then
      err = fmt("frame info %d length %d runs past the end (%d left)", fid, flen, stop - pos)
      break
    end
    local t = sub:add(tvb(tag_at, pos + flen - tag_at),
                      fmt("%s (id %d, %d bytes)", names[fid] or fmt("unknown:%d", fid), fid, flen))
    t:add(F.frame_info_id, tvb(tag_at, 1), fid):append_text(" (" .. (names[fid] or "unknown") .. ")")
    t:add(F.frame_info_len, tvb(tag_at, 1), flen)
    if flen > 0 then t:add(F.frame_info_data, tvb(pos, flen)) end
    if fid == STREAM_ID_INFO and flen == 2 and sid == nil then
      sid = tvb(pos, 2):uint()
      sid_at = pos
    end
    pos = pos + flen
  end
  m.frame_error = err
  if err == nil and sid ~= nil then
    m.stream_id = sid
    tree:add(F.stream_id, tvb(sid_at, 2))
  end
end

local prefixes, n_prefixes = {}, 0   -- "DcpMutation vb:3" by magic, opcode, vbucket/status

local function summary(m)
  local key = (m.magic * 256 + m.opcode) * 65536 + (m.vbucket or m.status)
  local s = prefixes[key]
  if s == nil then
    if SERVER_MAGIC[m.magic] then
      s = SERVER_OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    else
      s = OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    end
    if m.request then s = s .. " vb:" .. m.vbucket
    elseif m.status ~= 0 then s = s .. " " .. (STATUS_NAMES[m.status] or fmt("status:0x%x", m.status))
    else s = s .. " rsp" end
    if n_prefixes >= 4096 then prefixes, n_prefixes = {}, 0 end
    prefixes[key], n_prefixes = s, n_prefixes + 1
  end
  if m.stream_id then s = s .. " sid:" .. m.stream_id end
  local f = m.f
  if m.opcode == 0x56 and f.start_seqno and f.end_seqno then
    s = s .. " [" .. tostring(f.start_seqno) .. ".." .. tostring(f.end_seqno) .. "] " .. (m.layout or "")
  elseif m.spec and m.spec.seqno and f[m.spec.seqno] then
    s = s .. " seqno=" .. tostring(f[m.spec.seqno])
  elseif f.failover_log then
    s = s .. " failover_log(" .. #f.failover_log .. ")"
  elseif f.rollback_seqno then
    s = s .. " rollback_seqno=" .. tostring(f.rollback_seqno)
  end
  return s
end

local info_text = nil   -- what this dissector last wrote to the Info column

-- One Info update per dissector call; a second call for the same frame (bytes after a
-- reassembled message) appends.
local function set_info(pinfo, text)
  local col = pinfo.cols.info
  local cur = tostring(col)
  if cur == "(info)" then return end    -- no columns in this run (tshark -T fields)
  if info_text ~= nil and cur == info_text then
    col:append("; " .. text)
  else
    col:set(text)
  end
  info_text = tostring(col)
end

-- Bytes that cannot start a message, `cap` captured of `plen` (the rest of the segment).
local function dissect_garbage(tvb, tree, off, cap, plen, problem, rule)
  local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
  ti_set_text(node, "Couchbase DCP: not MCBP (" .. problem .. ")")
  ti_add(node, F.garbage, tvb_range(tvb, off, cap))
  ti_expert(node, EXPERTS[rule], "[" .. rule .. "] " .. problem ..
      fmt("; %d bytes skipped", plen))
  return "[not MCBP: " .. problem .. "]"
end

local expert_node = nil   -- the PDU node that check_message's findings go to

local function add_expert(rule, msg)
  ti_expert(expert_node, EXPERTS[rule], "[" .. rule .. "] " .. msg)
end

-- The message being dissected: one table, refilled for every message.
local msg = {magic = 0, opcode = 0, bodylen = 0, extlen = 0, datatype = 0, request = false,
             f = false, framing_len = 0, keylen = 0, k_end = 0, value_len = 0, vbucket = 0,
             status = 0, spec = false, layout = false, stream_id = false, frame_error = false}

-- One message at `off`, of which `cap` bytes are captured (`plen` in all), `head` its first
-- 12 bytes; returns its Info text. Extras fields go straight into the message's subtree.
local function dissect_message(tvb, tree, off, cap, plen, head)
  if cap < HEADER_SIZE then
    local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
    ti_set_text(node, "Couchbase DCP: header cut by the capture")
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d header bytes",
        cap, HEADER_SIZE))
    return "[cut by the capture]"
  end
  local magic, opcode, b2, b3, extlen, datatype, s1, s2, l1, l2, l3, l4 = sbyte(head, 1, 12)
  local bodylen = ((l1 * 256 + l2) * 256 + l3) * 256 + l4
  if not MAGIC_NAMES[magic] then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("illegal magic 0x%02x", magic), "unknown-magic")
  end
  if HEADER_SIZE + bodylen > MAX_FRAME_SIZE then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("body length %d exceeds the %d MiB frame limit",
        bodylen, MAX_FRAME_SIZE / 1048576), "frame-too-large")
  end
  local request, server = REQUEST_MAGIC[magic] == true, SERVER_MAGIC[magic]
  local framing_len, keylen = 0, b2 * 256 + b3
  if FLEX_MAGIC[magic] then framing_len, keylen = b2, b3 end
  local k_end = framing_len + extlen + keylen
  local m = msg
  m.magic, m.opcode, m.bodylen, m.extlen, m.datatype = magic, opcode, bodylen, extlen, datatype
  m.request, m.f, m.framing_len, m.keylen, m.k_end = request, {}, framing_len, keylen, k_end
  m.value_len, m.spec, m.layout, m.stream_id, m.frame_error = bodylen - k_end, nil, nil, nil, nil
  if request then m.vbucket, m.status = s1 * 256 + s2, nil else m.vbucket, m.status = nil, s1 * 256 + s2 end
  if not server then m.spec = SHAPES[opcode] end
  local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
  ti_add(node, f_magic, tvb_range(tvb, off, 1))
  ti_add(node, server and f_server_opcode or f_opcode, tvb_range(tvb, off + 1, 1))
  if FLEX_MAGIC[magic] then
    ti_add(node, f_framing_len, tvb_range(tvb, off + 2, 1))
    ti_add(node, f_keylen, tvb_range(tvb, off + 3, 1))
  else
    ti_add(node, f_keylen, tvb_range(tvb, off + 2, 2))
  end
  ti_add(node, f_extlen, tvb_range(tvb, off + 4, 1))
  local dtr = tvb_range(tvb, off + 5, 1)
  local dt = ti_add(node, f_datatype, dtr)
  if datatype ~= 0 then
    for i = 1, #DATATYPE_BITS do
      local bit = DATATYPE_BITS[i]
      local mask = bit[2]
      if datatype % (mask + mask) >= mask then ti_add(dt, bit[1], dtr) end
    end
  end
  ti_add(node, request and f_vbucket or f_status, tvb_range(tvb, off + 6, 2))
  local r_bodylen = tvb_range(tvb, off + 8, 4)
  ti_add(node, f_bodylen, r_bodylen)
  ti_add(node, f_opaque, tvb_range(tvb, off + 12, 4))
  ti_add(node, f_cas, tvb_range(tvb, off + 16, 8))

  local complete = cap >= HEADER_SIZE + bodylen
  if not complete then
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d bytes",
        cap, HEADER_SIZE + bodylen))
  end
  local body = off + HEADER_SIZE
  local e_end = framing_len + extlen
  -- framing extras (the part of them inside the body)
  if framing_len > 0 and complete then
    dissect_frame_infos(tvb, node, m, body, body + math.min(framing_len, bodylen))
  end
  if k_end <= bodylen and complete then
    local spec, shape = m.spec, nil
    if spec then
      if request then shape = spec.req else shape = spec.rsp end
    end
    -- extras
    if extlen > 0 then
      local ext_at = body + framing_len
      local lay = nil
      if shape then
        local ex = shape.extras
        for i = 1, #ex do
          if ex[i].size == extlen then lay = ex[i] break end
        end
      end
      if lay then
        add_fields(tvb, node, ext_at, lay, m.f)
        m.layout = lay.label
      else
        local et = ti_add(node, f_extras, tvb_range(tvb, ext_at, extlen))
        if shape then
          ti_expert(et, e_extras_length, fmt("extras length %d not in %s", extlen,
              shape.extras_sizes))
        end
      end
    end
    if keylen > 0 then ti_add(node, f_key, tvb_range(tvb, body + e_end, keylen)) end
    local n = m.value_len
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, n))
    local val_at = body + k_end
    local decoded, wanted = false, nil
    if shape and #shape.values > 0 then
      for i = 1, #shape.values do
        local lay = shape.values[i]
        if layout_matches(lay, m) then
          wanted = (wanted and wanted .. "/" or "") .. lay.size .. (lay.rep and "*n" or "")
          if lay.rep then
            if n % lay.size == 0 and (n > 0 or #lay.when > 0) then
              local vt = node:add(f_value, tvb(val_at, n))
              local entries = {}
              vt:set_text(fmt("Value: %s, %d entries", lay.rep, n / lay.size))
              vt:add(F.failover_log_count, tvb(val_at, n), n / lay.size):set_generated()
              for k = 0, n / lay.size - 1 do
                local et = vt:add(tvb(val_at + k * lay.size, lay.size), fmt("Entry %d", k))
                local entry = {}
                add_fields(tvb, et, val_at + k * lay.size, lay, entry)
                entries[#entries + 1] = entry
              end
              m.f[lay.rep] = entries
              m.layout = lay.label
              decoded = true
              break
            end
          elseif n == lay.size then
            local vt = ti_add(node, f_value, tvb_range(tvb, val_at, n))
            ti_set_text(vt, lay.text)
            add_fields(tvb, vt, val_at, lay, m.f)
            m.layout = lay.label
            decoded = true
            break
          end
        end
      end
    end
    if not decoded and n > 0 then ti_add(node, f_value, tvb_range(tvb, val_at, n)) end
    if not decoded and wanted then
      ti_expert(node, e_value_length, fmt("value length %d does not match %s", n, wanted))
    end
    if m.layout and spec and spec.layout_field then
      ti_set_generated(ti_add(node, spec.layout_field, m.layout))
    end
  elseif complete then
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, m.value_len))
  end

  local text = summary(m)
  ti_set_text(node, "Couchbase DCP, " .. text)
  expert_node = node
  check_message(m, add_expert)
  return text
end

local texts = {}   -- Info texts of the messages of one dissector call

-- Messages are cut from the TCP stream here rather than with dissect_tcp_pdus (one Lua
-- call per segment instead of two per message): a message that runs past the segment
-- asks TCP for more bytes (pinfo.desegment_offset/len) and comes back reassembled.
-- An implausible header swallows the rest of the segment.
function dcp.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "DCP"
  local captured, reported = tvb_len(tvb), tvb_reported_len(tvb)
  local can_desegment = pinfo.can_desegment > 0
  local n_texts, off = 0, 0
  while off < reported do
    local avail = captured - off
    if avail < 0 then break end
    local plen, head = reported - off, nil
    if avail < HEADER_SIZE then
      if can_desegment then
        pinfo.desegment_offset, pinfo.desegment_len = off, DESEGMENT_ONE_MORE_SEGMENT
        break
      end
    else
      head = tvb_raw(tvb, off, 12)
      local magic, _, _, _, _, _, _, _, l1, l2, l3, l4 = sbyte(head, 1, 12)
      local size = HEADER_SIZE + ((l1 * 256 + l2) * 256 + l3) * 256 + l4
      if MAGIC_NAMES[magic] and size <= MAX_FRAME_SIZE then plen = size end
    end
    if plen > avail and can_desegment then
      pinfo.desegment_offset, pinfo.desegment_len = off, plen - avail
      break
    end
    local ok, text = pcall(dissect_message, tvb, tree, off, avail < plen and avail or plen, plen, head)
    if not ok then
      ti_expert(tree, e_internal, "dcpdissect: " .. tostring(text))
      text = "[dissector error]"
    end
    n_texts = n_texts + 1
    texts[n_texts] = text
    off = off + plen
  end
  if n_texts > 0 then set_info(pinfo, table.concat(texts, "; ", 1, n_texts)) end
  return captured
end

function dcp.init()
  info_text = nil
end

-- Ports ------------------------------------------------------------------------------------
dcp.prefs.tcp_ports = Pref.range("TCP ports", "11210,11209",
    "TCP ports decoded as DCP/MCBP (the built-in couchbase dissector is replaced there)", 65535)

local tcp_table = DissectorTable.get("tcp.port")
local owned = {}      -- port -> the dissector that had it before (false: none)

local function port_list(ranges)
  local ports = {}
  for part in string.gmatch(ranges, "[^,%s]+") do
    local a, b = string.match(part, "^(%d+)-(%d+)$")
    if a == nil then a = string.match(part, "^(%d+)$") b = a end
    if a ~= nil then
      for p = tonumber(a), math.min(tonumber(b), tonumber(a) + 1024) do ports[p] = true end
    end
  end
  return ports
end

local function take_ports(ranges)
  local wanted = port_list(ranges)
  for p, prev in pairs(owned) do
    if not wanted[p] then
      tcp_table:remove(p, dcp)
      if prev then tcp_table:add(p, prev) end
      owned[p] = nil
    end
  end
  for p in pairs(wanted) do
    if owned[p] == nil then
      owned[p] = tcp_table:get_dissector(p) or false
      tcp_table:add(p, dcp)
    end
  end
end

take_ports("11210,11209")

function dcp.prefs_changed()
  take_ports(tostring(dcp.prefs.tcp_ports))
end
