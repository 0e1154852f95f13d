-- dcpdissect.lua: Couchbase DCP / MCBP dissector for Wireshark 4.0 to 4.6 (Lua 5.2 to 5.4).
-- Rendered from the dcpdissect protocol tables (dcpdissect/protocol/) by
-- `dcpdissect lua generate`; do not edit: change the tables or dcpdissect/luagen instead.
-- Install with `dcpdissect lua install` or load with `tshark -X lua_script:dcpdissect.lua`.
-- While loaded it owns the TCP ports of the preference dcp.tcp_ports (default 11210,11209),
-- replacing Wireshark's built-in couchbase dissector there.

local dcp = Proto("dcp", "Couchbase DCP (dcpdissect)")
local fmt, sbyte = string.format, string.byte
-- Bit operations through the BitOp library (`bit`) that every Wireshark ships, whatever its
-- Lua (Lua 5.2's own bit32 is gone from 5.4). BitOp's results are signed 32-bit numbers: u32
-- turns one into the unsigned value for display.
local band, bor, bnot, rshift = bit.band, bit.bor, bit.bnot, bit.rshift
local function u32(v)
  if v < 0 then return v + 4294967296 end
  return v
end
-- A whole number as text, the same in every Lua (tostring(5.0) is "5.0" from Lua 5.3 on);
-- a UInt64 (vbucket uuid, CAS, seqno) in decimal, as dcpdissect spells them everywhere.
local function int_text(v)
  if type(v) == "number" then return fmt("%d", v) end
  return tostring(v)
end

local function flagtext(bits, mask, v)
  local out = {}
  for i = 1, #bits do
    if band(v, bits[i][1]) ~= 0 then out[#out + 1] = bits[i][2] end
  end
  local unknown = band(v, bnot(mask))
  if unknown ~= 0 then out[#out + 1] = fmt("unknown:0x%x", u32(unknown)) end
  if #out == 0 then return "none" end
  return table.concat(out, "+")
end

-- Value strings
local MAGIC_NAMES = {[8] = "AltClientRequest", [24] = "AltClientResponse", [128] = "ClientRequest", [129] = "ClientResponse", [130] = "ServerRequest", [131] = "ServerResponse"}
local OPCODE_NAMES = {[0] = "Get", [1] = "Set", [2] = "Add", [3] = "Replace", [4] = "Delete", [5] = "Increment", [6] = "Decrement", [7] = "Quit", [8] = "Flush_Unsupported", [9] = "Getq", [10] = "Noop", [11] = "Version", [12] = "Getk", [13] = "Getkq", [14] = "Append", [15] = "Prepend", [16] = "Stat", [17] = "Setq", [18] = "Addq", [19] = "Replaceq", [20] = "Deleteq", [21] = "Incrementq", [22] = "Decrementq", [23] = "Quitq", [24] = "Flushq_Unsupported", [25] = "Appendq", [26] = "Prependq", [27] = "Verbosity", [28] = "Touch", [29] = "Gat", [30] = "Gatq", [31] = "Hello", [32] = "SaslListMechs", [33] = "SaslAuth", [34] = "SaslStep", [35] = "IoctlGet", [36] = "IoctlSet", [37] = "ConfigValidate", [38] = "ConfigReload", [39] = "AuditPut", [40] = "AuditConfigReload", [41] = "Shutdown", [42] = "SetBucketThrottleProperties", [43] = "SetBucketDataLimitExceeded", [44] = "SetNodeThrottleProperties_Unsupported", [45] = "SetActiveEncryptionKeys", [46] = "PruneEncryptionKeys", [47] = "RegisterAuthToken", [48] = "Rget_Unsupported", [49] = "Rset_Unsupported", [50] = "Rsetq_Unsupported", [51] = "Rappend_Unsupported", [52] = "Rappendq_Unsupported", [53] = "Rprepend_Unsupported", [54] = "Rprependq_Unsupported", [55] = "Rdelete_Unsupported", [56] = "Rdeleteq_Unsupported", [57] = "Rincr_Unsupported", [58] = "Rincrq_Unsupported", [59] = "Rdecr_Unsupported", [60] = "Rdecrq_Unsupported", [61] = "SetVbucket", [62] = "GetVbucket", [63] = "DelVbucket", [64] = "TapConnect_Unsupported", [65] = "TapMutation_Unsupported", [66] = "TapDelete_Unsupported", [67] = "TapFlush_Unsupported", [68] = "TapOpaque_Unsupported", [69] = "TapVbucketSet_Unsupported", [70] = "TapCheckpointStart_Unsupported", [71] = "TapCheckpointEnd_Unsupported", [72] = "GetAllVbSeqnos", [73] = "GetEx", [74] = "GetExReplica", [75] = "MutateWithMeta", [80] = "DcpOpen", [81] = "DcpAddStream", [82] = "DcpCloseStream", [83] = "DcpStreamReq", [84] = "DcpGetFailoverLog", [85] = "DcpStreamEnd", [86] = "DcpSnapshotMarker", [87] = "DcpMutation", [88] = "DcpDeletion", [89] = "DcpExpiration", [90] = "DcpFlush_Unsupported", [91] = "DcpSetVbucketState", [92] = "DcpNoop", [93] = "DcpBufferAcknowledgement", [94] = "DcpControl", [95] = "DcpSystemEvent", [96] = "DcpPrepare", [97] = "DcpSeqnoAcknowledged", [98] = "DcpCommit", [99] = "DcpAbort", [100] = "DcpSeqnoAdvanced", [101] = "DcpOsoSnapshot", [102] = "DcpCacheTransfer", [103] = "DcpCacheTransferEnd", [112] = "GetFusionStorageSnapshot", [113] = "ReleaseFusionStorageSnapshot", [114] = "MountFusionVbucket", [115] = "UnmountFusionVbucket", [116] = "SyncFusionLogstore", [117] = "StartFusionUploader", [118] = "StopFusionUploader", [119] = "DeleteFusionNamespace", [120] = "GetFusionNamespaces", [121] = "CreateFusionNamespace", [128] = "StopPersistence", [129] = "StartPersistence", [130] = "SetParam", [131] = "GetReplica", [132] = "SetChronicleAuthToken", [133] = "CreateBucket", [134] = "DeleteBucket", [135] = "ListBuckets", [137] = "SelectBucket", [138] = "PauseBucket", [139] = "ResumeBucket", [140] = "ValidateBucketConfig", [145] = "ObserveSeqno", [146] = "Observe", [147] = "EvictKey", [148] = "GetLocked", [149] = "UnlockKey", [150] = "GetFailoverLog", [151] = "LastClosedCheckpoint_Unsupported", [158] = "DeregisterTapClient_Unsupported", [159] = "ResetReplicationChain_Unsupported", [160] = "GetMeta", [161] = "GetqMeta", [162] = "SetWithMeta", [163] = "SetqWithMeta", [164] = "AddWithMeta", [165] = "AddqWithMeta", [166] = "SnapshotVbStates_Unsupported", [167] = "VbucketBatchCount_Unsupported", [168] = "DelWithMeta", [169] = "DelqWithMeta", [170] = "CreateCheckpoint_Unsupported", [172] = "NotifyVbucketUpdate_Unsupported", [173] = "EnableTraffic", [174] = "DisableTraffic", [175] = "Ifconfig", [176] = "ChangeVbFilter_Unsupported", [177] = "CheckpointPersistence_Unsupported", [178] = "ReturnMeta", [179] = "CompactDb", [180] = "SetClusterConfig", [181] = "GetClusterConfig", [182] = "GetRandomKey", [183] = "SeqnoPersistence", [184] = "GetKeys", [185] = "CollectionsSetManifest", [186] = "CollectionsGetManifest", [187] = "CollectionsGetID", [188] = "CollectionsGetScopeID", [193] = "SetDriftCounterState_Unsupported", [194] = "GetAdjustedTime_Unsupported", [197] = "SubdocGet", [198] = "SubdocExists", [199] = "SubdocDictAdd", [200] = "SubdocDictUpsert", [201] = "SubdocDelete", [202] = "SubdocReplace", [203] = "SubdocArrayPushLast", [204] = "SubdocArrayPushFirst", [205] = "SubdocArrayInsert", [206] = "SubdocArrayAddUnique", [207] = "SubdocCounter", [208] = "SubdocMultiLookup", [209] = "SubdocMultiMutation", [210] = "SubdocGetCount", [211] = "SubdocReplaceBodyWithXattr", [218] = "RangeScanCreate", [219] = "RangeScanContinue", [220] = "RangeScanCancel", [224] = "PrepareSnapshot", [225] = "ReleaseSnapshot", [226] = "DownloadSnapshot", [227] = "GetFileFragment", [240] = "Scrub_Unsupported", [241] = "IsaslRefresh", [242] = "SslCertsRefresh_Unsupported", [243] = "GetCmdTimer", [244] = "SetCtrlToken", [245] = "GetCtrlToken", [246] = "UpdateExternalUserPermissions", [247] = "RbacRefresh", [248] = "AuthProvider", [251] = "DropPrivilege", [252] = "AdjustTimeofday", [253] = "EwouldblockCtl", [254] = "GetErrorMap"}
local SERVER_OPCODE_NAMES = {[1] = "ClustermapChangeNotification", [2] = "Authenticate", [3] = "ActiveExternalUsers", [4] = "GetAuthorization"}
local STATUS_NAMES = {[0] = "Success", [1] = "KeyEnoent", [2] = "KeyEexists", [3] = "E2big", [4] = "Einval", [5] = "NotStored", [6] = "DeltaBadval", [7] = "NotMyVbucket", [8] = "NoBucket", [9] = "Locked", [10] = "DcpStreamNotFound", [11] = "OpaqueNoMatch", [12] = "EWouldThrottle", [13] = "EConfigOnly", [14] = "NotLocked", [15] = "CasValueInvalid", [31] = "AuthStale", [32] = "AuthError", [33] = "AuthContinue", [34] = "Erange", [35] = "Rollback", [36] = "Eaccess", [37] = "NotInitialized", [38] = "EncryptionKeyNotAvailable", [39] = "ChecksumMismatch", [40] = "ExpiryOverflow", [41] = "LockExpiryOverflow", [48] = "RateLimitedNetworkIngress", [49] = "RateLimitedNetworkEgress", [50] = "RateLimitedMaxConnections", [51] = "RateLimitedMaxCommands", [52] = "ScopeSizeLimitExceeded", [53] = "BucketSizeLimitExceeded", [54] = "BucketResidentRatioTooLow", [55] = "BucketDataSizeTooBig", [56] = "BucketDiskSpaceTooLow", [80] = "BucketPaused", [81] = "Cancelled", [128] = "UnknownFrameInfo", [129] = "UnknownCommand", [130] = "Enomem", [131] = "NotSupported", [132] = "Einternal", [133] = "Ebusy", [134] = "Etmpfail", [135] = "XattrEinval", [136] = "UnknownCollection", [138] = "CannotApplyCollectionsManifest", [140] = "UnknownScope", [141] = "DcpStreamIdInvalid", [160] = "DurabilityInvalidLevel", [161] = "DurabilityImpossible", [162] = "SyncWriteInProgress", [163] = "SyncWriteAmbiguous", [164] = "SyncWriteReCommitInProgress", [165] = "RangeScanCancelled", [166] = "RangeScanMore", [167] = "RangeScanComplete", [168] = "VbUuidNotEqual"}
local REQUEST_FRAME_INFO_NAMES = {[0] = "Barrier", [1] = "DurabilityRequirement", [2] = "DcpStreamId", [3] = "OpenTracingContext", [4] = "Impersonate", [5] = "PreserveTtl", [6] = "ImpersonateExtraPrivilege", [7] = "ImpersonateWithTokenAuthDataId"}
local RESPONSE_FRAME_INFO_NAMES = {[0] = "ServerRecvSendDuration", [1] = "ReadUnits", [2] = "WriteUnits", [3] = "ThrottleDuration"}
local VS_STREAM_END_REASON = {[0] = "Ok", [1] = "Closed", [2] = "StateChanged", [3] = "Disconnected", [4] = "Slow", [5] = "BackfillFail", [6] = "Rollback", [7] = "FilterEmpty", [8] = "LostPrivileges"}
local VS_MARKER_VERSION = {[0] = "V2.0", [1] = "V2.1 (removed)", [2] = "V2.2"}
local VS_VBUCKET_STATE = {[1] = "active", [2] = "replica", [3] = "pending", [4] = "dead"}
local VS_SYSTEM_EVENT = {[0] = "BeginCollection", [1] = "EndCollection", [2] = "Reserved", [3] = "CreateScope", [4] = "DropScope", [5] = "ModifyCollection"}
local VS_SYSTEM_EVENT_VERSION = {[0] = "version0", [1] = "version1", [2] = "version2"}
local VS_DURABILITY_LEVEL = {[0] = "None", [1] = "Majority", [2] = "MajorityAndPersistOnMaster", [3] = "PersistToMajority"}

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

-- Protocol constants
local REQUEST_MAGIC = {[8] = true, [128] = true, [130] = true}
local SERVER_MAGIC = {[130] = true, [131] = true}
local FLEX_MAGIC = {[8] = true, [24] = true}
local HEADER_SIZE, MAX_FRAME_SIZE, STREAM_ID_INFO = 24, 31457280, 2
local FRAME_INFO_SIZES = {[0] = {[0] = true}, [1] = {[1] = true, [3] = true}, [2] = {[2] = true}, [4] = "+", [5] = {[0] = true}, [6] = "+", [7] = {[2] = true}}
local FRAME_INFOS_NOT_FOR_DCP = {[1] = true, [5] = true}
local FEATURE_COLLECTIONS = 18
local DATATYPE_FEATURES = {[11] = 1, [10] = 2, [6] = 4}
local OPEN_PRODUCER, OPEN_DELETE_TIMES = 1, 32
local MAX_KEY_LENGTH, MAX_COLLECTIONS_KEY_LENGTH = 250, 251
local MAX_COLLECTIONS_LOGICAL_KEY_LENGTH = 246
local MAX_XATTR_KEY_LENGTH, MAX_SYSTEM_XATTR_BYTES = 16, 1048576

-- Fields
local F = {}
F.magic = ProtoField.uint8("dcp.magic", "Magic", base.HEX, MAGIC_NAMES)
F.opcode = ProtoField.uint8("dcp.opcode", "Opcode", base.HEX, OPCODE_NAMES)
F.server_opcode = ProtoField.uint8("dcp.server_opcode", "Server opcode", base.HEX, SERVER_OPCODE_NAMES)
F.keylen = ProtoField.uint16("dcp.keylen", "Key length", base.DEC)
F.framing_len = ProtoField.uint8("dcp.framing_len", "Framing extras length", base.DEC)
F.extlen = ProtoField.uint8("dcp.extlen", "Extras length", base.DEC)
F.datatype = ProtoField.uint8("dcp.datatype", "Datatype", base.HEX)
F.vbucket = ProtoField.uint16("dcp.vbucket", "vBucket", base.DEC)
F.status = ProtoField.uint16("dcp.status", "Status", base.HEX, STATUS_NAMES)
F.bodylen = ProtoField.uint32("dcp.bodylen", "Total body length", base.DEC)
F.opaque = ProtoField.uint32("dcp.opaque", "Opaque", base.HEX)
F.cas = ProtoField.uint64("dcp.cas", "CAS", base.DEC)
F.frame_info = ProtoField.bytes("dcp.frame_info", "Frame info")
F.frame_info_id = ProtoField.uint16("dcp.frame_info.id", "Frame info id", base.DEC)
F.frame_info_len = ProtoField.uint16("dcp.frame_info.len", "Frame info length", base.DEC)
F.frame_info_data = ProtoField.bytes("dcp.frame_info.data", "Frame info data")
F.stream_id = ProtoField.uint16("dcp.stream_id", "Stream id", base.DEC)
F.extras = ProtoField.bytes("dcp.extras", "Extras")
F.key = ProtoField.string("dcp.key", "Key")
F.collection_id = ProtoField.uint32("dcp.collection_id", "Collection ID", base.HEX)
F.collection_name = ProtoField.string("dcp.collection_name", "Collection")
F.value_len = ProtoField.int32("dcp.value_len", "Value length", base.DEC)
F.value = ProtoField.bytes("dcp.value", "Value")
F.garbage = ProtoField.bytes("dcp.garbage", "Not MCBP (skipped to the end of the segment)")
F.failover_log_count = ProtoField.uint32("dcp.failover_log.count", "Failover log entries", base.DEC)
F.by_seqno = ProtoField.uint64("dcp.by_seqno", "Seqno (any opcode)", base.DEC)
F.response_in = ProtoField.framenum("dcp.response_in", "Response in", base.NONE)
F.response_to = ProtoField.framenum("dcp.response_to", "Request in", base.NONE)
F.time = ProtoField.relative_time("dcp.time", "Time since request")
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
F.close_stream_layout = ProtoField.string("dcp.close_stream.layout", "Layout")
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
F.stream_req_vbucket_uuid = ProtoField.uint64("dcp.stream_req.vbucket_uuid", "vBucket UUID", base.DEC, nil)
F.stream_req_snap_start_seqno = ProtoField.uint64("dcp.stream_req.snap_start_seqno", "Snapshot start seqno", base.DEC, nil)
F.stream_req_snap_end_seqno = ProtoField.uint64("dcp.stream_req.snap_end_seqno", "Snapshot end seqno", base.DEC, nil)
F.failover_log_vbucket_uuid = ProtoField.uint64("dcp.failover_log.vbucket_uuid", "vBucket UUID", base.DEC, nil)
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
F.flush_layout = ProtoField.string("dcp.flush.layout", "Layout")
F.set_vbucket_state_layout = ProtoField.string("dcp.set_vbucket_state.layout", "Layout")
F.set_vbucket_state_state = ProtoField.uint8("dcp.set_vbucket_state.state", "State", base.DEC, VS_VBUCKET_STATE)
F.noop_layout = ProtoField.string("dcp.noop.layout", "Layout")
F.buffer_ack_layout = ProtoField.string("dcp.buffer_ack.layout", "Layout")
F.buffer_ack_bytes_to_ack = ProtoField.uint32("dcp.buffer_ack.bytes_to_ack", "Bytes to ack", base.DEC, nil)
F.control_layout = ProtoField.string("dcp.control.layout", "Layout")
F.system_event_layout = ProtoField.string("dcp.system_event.layout", "Layout")
F.system_event_by_seqno = ProtoField.uint64("dcp.system_event.by_seqno", "By seqno", base.DEC, nil)
F.system_event_event = ProtoField.uint32("dcp.system_event.event", "Event", base.DEC, VS_SYSTEM_EVENT)
F.system_event_version = ProtoField.uint8("dcp.system_event.version", "Version", base.DEC, VS_SYSTEM_EVENT_VERSION)
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
F.cache_transfer_layout = ProtoField.string("dcp.cache_transfer.layout", "Layout")
F.cache_transfer_end_layout = ProtoField.string("dcp.cache_transfer_end.layout", "Layout")
F.datatype_json = ProtoField.bool("dcp.datatype.json", "JSON", 8, nil, 0x1)
F.datatype_snappy = ProtoField.bool("dcp.datatype.snappy", "SNAPPY", 8, nil, 0x2)
F.datatype_xattr = ProtoField.bool("dcp.datatype.xattr", "XATTR", 8, nil, 0x4)
local DATATYPE_BITS = {{F.datatype_json, 0x1}, {F.datatype_snappy, 0x2}, {F.datatype_xattr, 0x4}}
dcp.fields = {F.magic, F.opcode, F.server_opcode, F.keylen, F.framing_len, F.extlen, F.datatype, F.vbucket, F.status, F.bodylen, F.opaque, F.cas, F.frame_info, F.frame_info_id, F.frame_info_len, F.frame_info_data, F.stream_id, F.extras, F.key, F.collection_id, F.collection_name, F.value_len, F.value, F.garbage, F.failover_log_count, F.by_seqno, F.response_in, F.response_to, F.time, F.open_layout, F.open_seqno, F.open_flags, F.open_flags_producer, F.open_flags_invalid, F.open_flags_include_xattrs, F.open_flags_no_value, F.open_flags_unused, F.open_flags_include_delete_times, F.open_flags_no_value_with_underlying_datatype, F.open_flags_pitr_unsupported, F.open_flags_include_deleted_user_xattrs, F.open_flags_skip_deletes_in_initial_backfill, F.add_stream_layout, F.add_stream_flags, F.add_stream_flags_takeover, F.add_stream_flags_disk_only, F.add_stream_flags_to_latest, F.add_stream_flags_no_value, F.add_stream_flags_active_vb_only, F.add_stream_flags_strict_vbuuid, F.add_stream_flags_from_latest, F.add_stream_flags_ignore_purged_tombstones, F.add_stream_flags_cache_transfer, F.add_stream_new_opaque, F.close_stream_layout, F.stream_req_layout, F.stream_req_flags, F.stream_req_flags_takeover, F.stream_req_flags_disk_only, F.stream_req_flags_to_latest, F.stream_req_flags_no_value, F.stream_req_flags_active_vb_only, F.stream_req_flags_strict_vbuuid, F.stream_req_flags_from_latest, F.stream_req_flags_ignore_purged_tombstones, F.stream_req_flags_cache_transfer, F.stream_req_reserved, F.stream_req_start_seqno, F.stream_req_end_seqno, F.stream_req_vbucket_uuid, F.stream_req_snap_start_seqno, F.stream_req_snap_end_seqno, F.failover_log_vbucket_uuid, F.failover_log_seqno, F.rollback_seqno, F.get_failover_log_layout, F.stream_end_layout, F.stream_end_reason, F.snapshot_layout, F.snapshot_start_seqno, F.snapshot_end_seqno, F.snapshot_flags, F.snapshot_flags_memory, F.snapshot_flags_disk, F.snapshot_flags_checkpoint, F.snapshot_flags_ack, F.snapshot_flags_history, F.snapshot_flags_may_contain_duplicates, F.snapshot_version, F.snapshot_max_visible_seqno, F.snapshot_high_completed_seqno, F.snapshot_purge_seqno, F.snapshot_high_prepared_seqno, F.mutation_layout, F.mutation_by_seqno, F.mutation_rev_seqno, F.mutation_flags, F.mutation_expiration, F.mutation_lock_time, F.mutation_nmeta, F.mutation_nru, F.deletion_layout, F.deletion_by_seqno, F.deletion_rev_seqno, F.deletion_nmeta, F.deletion_delete_time, F.deletion_unused, F.expiration_layout, F.expiration_by_seqno, F.expiration_rev_seqno, F.expiration_delete_time, F.flush_layout, F.set_vbucket_state_layout, F.set_vbucket_state_state, F.noop_layout, F.buffer_ack_layout, F.buffer_ack_bytes_to_ack, F.control_layout, F.system_event_layout, F.system_event_by_seqno, F.system_event_event, F.system_event_version, F.prepare_layout, F.prepare_by_seqno, F.prepare_rev_seqno, F.prepare_flags, F.prepare_expiration, F.prepare_lock_time, F.prepare_nru, F.prepare_deleted, F.prepare_durability_level, F.seqno_ack_layout, F.seqno_ack_prepared_seqno, F.commit_layout, F.commit_prepared_seqno, F.commit_commit_seqno, F.abort_layout, F.abort_prepared_seqno, F.abort_abort_seqno, F.seqno_advanced_layout, F.seqno_advanced_by_seqno, F.oso_snapshot_layout, F.oso_snapshot_flags, F.oso_snapshot_flags_start, F.oso_snapshot_flags_end, F.cache_transfer_layout, F.cache_transfer_end_layout, F.datatype_json, F.datatype_snappy, F.datatype_xattr}

-- Expert infos: one per single-message rule of the analyzer, plus framing problems
local EXPERTS = {}
EXPERTS["add-stream-response-extras"] = ProtoExpert.new("dcp.expert.add_stream_response_extras", "[add-stream-response-extras] successful add stream response without its 4-byte stream opaque", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["cas-invalid"] = ProtoExpert.new("dcp.expert.cas_invalid", "[cas-invalid] CAS set where it must be 0, or 0 where it must be set", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["datatype-invalid"] = ProtoExpert.new("dcp.expert.datatype_invalid", "[datatype-invalid] datatype the opcode does not allow", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["datatype-not-negotiated"] = ProtoExpert.new("dcp.expert.datatype_not_negotiated", "[datatype-not-negotiated] datatype bit the connection did not enable with HELLO", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["dcp-not-open"] = ProtoExpert.new("dcp.expert.dcp_not_open", "[dcp-not-open] a DCP command on a connection that was never opened with DcpOpen", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["dcp-open-twice"] = ProtoExpert.new("dcp.expert.dcp_open_twice", "[dcp-open-twice] DcpOpen on a connection already opened for DCP", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["document-key-invalid"] = ProtoExpert.new("dcp.expert.document_key_invalid", "[document-key-invalid] document key without a valid collection prefix", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["durability-level-invalid"] = ProtoExpert.new("dcp.expert.durability_level_invalid", "[durability-level-invalid] prepare without a valid durability level", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["extras-length"] = ProtoExpert.new("dcp.expert.extras_length", "[extras-length] extras length the opcode does not allow", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["failover-log-empty"] = ProtoExpert.new("dcp.expert.failover_log_empty", "[failover-log-empty] successful stream request / failover log response without entries", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["frame-info-invalid"] = ProtoExpert.new("dcp.expert.frame_info_invalid", "[frame-info-invalid] a request frame info with a size the server refuses", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["frame-info-not-supported"] = ProtoExpert.new("dcp.expert.frame_info_not_supported", "[frame-info-not-supported] a frame info the DCP opcode does not support", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["frame-info-unknown"] = ProtoExpert.new("dcp.expert.frame_info_unknown", "[frame-info-unknown] a request frame info id the server does not know", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["framing-extras-encoding"] = ProtoExpert.new("dcp.expert.framing_extras_encoding", "[framing-extras-encoding] framing extras run past their end", expert.group.MALFORMED, expert.severity.ERROR)
EXPERTS["header-invariant"] = ProtoExpert.new("dcp.expert.header_invariant", "[header-invariant] framing extras + extras + key exceed the body length", expert.group.MALFORMED, expert.severity.ERROR)
EXPERTS["key-presence"] = ProtoExpert.new("dcp.expert.key_presence", "[key-presence] key missing where required, or present where forbidden", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["key-too-long"] = ProtoExpert.new("dcp.expert.key_too_long", "[key-too-long] key longer than the server accepts", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-hcs-beyond-end"] = ProtoExpert.new("dcp.expert.marker_hcs_beyond_end", "[marker-hcs-beyond-end] high completed seqno is greater than the snapshot end", expert.group.PROTOCOL, expert.severity.NOTE)
EXPERTS["marker-hcs-without-disk"] = ProtoExpert.new("dcp.expert.marker_hcs_without_disk", "[marker-hcs-without-disk] HCS non-zero on a marker without Disk", expert.group.PROTOCOL, expert.severity.NOTE)
EXPERTS["marker-hps-beyond-end"] = ProtoExpert.new("dcp.expert.marker_hps_beyond_end", "[marker-hps-beyond-end] high prepared seqno of a disk snapshot is above its end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-hps-without-disk"] = ProtoExpert.new("dcp.expert.marker_hps_without_disk", "[marker-hps-without-disk] HPS non-zero on a marker without Disk", expert.group.PROTOCOL, expert.severity.NOTE)
EXPERTS["marker-memory-disk"] = ProtoExpert.new("dcp.expert.marker_memory_disk", "[marker-memory-disk] snapshot marker has neither or both of Memory and Disk", expert.group.PROTOCOL, expert.severity.NOTE)
EXPERTS["marker-mvs-beyond-end"] = ProtoExpert.new("dcp.expert.marker_mvs_beyond_end", "[marker-mvs-beyond-end] max visible seqno is greater than the snapshot end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-purge-beyond-end"] = ProtoExpert.new("dcp.expert.marker_purge_beyond_end", "[marker-purge-beyond-end] purge seqno of a disk snapshot is above its end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-start-after-end"] = ProtoExpert.new("dcp.expert.marker_start_after_end", "[marker-start-after-end] snapshot marker start is greater than its end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-unknown-flags"] = ProtoExpert.new("dcp.expert.marker_unknown_flags", "[marker-unknown-flags] snapshot marker has flag bits outside the six defined", expert.group.PROTOCOL, expert.severity.NOTE)
EXPERTS["marker-v22-documented-44"] = ProtoExpert.new("dcp.expert.marker_v22_documented_44", "[marker-v22-documented-44] DcpSnapshotMarker uses the V2.2-doc44 layout, which servers reject", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["marker-version"] = ProtoExpert.new("dcp.expert.marker_version", "[marker-version] snapshot marker version byte is neither 0 (V2.0) nor 2 (V2.2)", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["nmeta-not-zero"] = ProtoExpert.new("dcp.expert.nmeta_not_zero", "[nmeta-not-zero] extended metadata length (nmeta) is not 0", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["open-flags-combination"] = ProtoExpert.new("dcp.expert.open_flags_combination", "[open-flags-combination] DcpOpen flags the server refuses together", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["open-flags-invalid"] = ProtoExpert.new("dcp.expert.open_flags_invalid", "[open-flags-invalid] DcpOpen flags outside the defined set", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["open-value-datatype"] = ProtoExpert.new("dcp.expert.open_value_datatype", "[open-value-datatype] DcpOpen datatype does not match its value", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["open-value-invalid"] = ProtoExpert.new("dcp.expert.open_value_invalid", "[open-value-invalid] DcpOpen value is not a JSON object of known keys", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["seqno-zero"] = ProtoExpert.new("dcp.expert.seqno_zero", "[seqno-zero] a mutation or prepare with by_seqno 0", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-flags-cache-transfer"] = ProtoExpert.new("dcp.expert.stream_flags_cache_transfer", "[stream-flags-cache-transfer] CacheTransfer combined with flags other than TakeOver / ActiveVbOnly", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-flags-no-value"] = ProtoExpert.new("dcp.expert.stream_flags_no_value", "[stream-flags-no-value] obsolete NoValue flag 0x08 on add stream / stream request", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-flags-unknown"] = ProtoExpert.new("dcp.expert.stream_flags_unknown", "[stream-flags-unknown] add stream / stream request flags outside the defined 0x1F7", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-id-on-consumer"] = ProtoExpert.new("dcp.expert.stream_id_on_consumer", "[stream-id-on-consumer] a stream id frame info sent to a consumer connection", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-snapshot-range"] = ProtoExpert.new("dcp.expert.stream_request_snapshot_range", "[stream-request-snapshot-range] stream request violates snap_start <= start <= snap_end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-start-after-end"] = ProtoExpert.new("dcp.expert.stream_request_start_after_end", "[stream-request-start-after-end] stream request start seqno is greater than its end", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["stream-request-uuid-zero"] = ProtoExpert.new("dcp.expert.stream_request_uuid_zero", "[stream-request-uuid-zero] stream request with vbucket uuid 0 and start > 0", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["system-event-invalid"] = ProtoExpert.new("dcp.expert.system_event_invalid", "[system-event-invalid] system event id or version the server does not know", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["unknown-opcode"] = ProtoExpert.new("dcp.expert.unknown_opcode", "[unknown-opcode] opcode not in kv_engine's opcode table", expert.group.PROTOCOL, expert.severity.WARN)
EXPERTS["unsupported-on-server"] = ProtoExpert.new("dcp.expert.unsupported_on_server", "[unsupported-on-server] an opcode memcached does not accept from a client", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["value-length"] = ProtoExpert.new("dcp.expert.value_length", "[value-length] value length that matches no layout of the opcode", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["value-presence"] = ProtoExpert.new("dcp.expert.value_presence", "[value-presence] value missing where required, or present where forbidden", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["vbucket-state-invalid"] = ProtoExpert.new("dcp.expert.vbucket_state_invalid", "[vbucket-state-invalid] set vbucket state to a state that does not exist", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["xattr-invalid"] = ProtoExpert.new("dcp.expert.xattr_invalid", "[xattr-invalid] a value with the xattr datatype whose xattr blob is invalid", expert.group.PROTOCOL, expert.severity.ERROR)
EXPERTS["unknown-magic"] = ProtoExpert.new("dcp.expert.unknown_magic", "[unknown-magic] a header with an illegal magic byte", expert.group.MALFORMED, expert.severity.ERROR)
EXPERTS["frame-too-large"] = ProtoExpert.new("dcp.expert.frame_too_large", "[frame-too-large] frame larger than the server's 30 MiB max_packet_size", expert.group.MALFORMED, expert.severity.ERROR)
local e_truncated = ProtoExpert.new("dcp.expert.truncated", "PDU cut by the capture (snap length)", expert.group.UNDECODED, expert.severity.NOTE)
local e_internal = ProtoExpert.new("dcp.expert.internal", "dissector error", expert.group.UNDECODED, expert.severity.ERROR)
do local list = {e_truncated, e_internal}
  for _, id in ipairs({"add-stream-response-extras", "cas-invalid", "datatype-invalid", "datatype-not-negotiated", "dcp-not-open", "dcp-open-twice", "document-key-invalid", "durability-level-invalid", "extras-length", "failover-log-empty", "frame-info-invalid", "frame-info-not-supported", "frame-info-unknown", "framing-extras-encoding", "header-invariant", "key-presence", "key-too-long", "marker-hcs-beyond-end", "marker-hcs-without-disk", "marker-hps-beyond-end", "marker-hps-without-disk", "marker-memory-disk", "marker-mvs-beyond-end", "marker-purge-beyond-end", "marker-start-after-end", "marker-unknown-flags", "marker-v22-documented-44", "marker-version", "nmeta-not-zero", "open-flags-combination", "open-flags-invalid", "open-value-datatype", "open-value-invalid", "seqno-zero", "stream-flags-cache-transfer", "stream-flags-no-value", "stream-flags-unknown", "stream-id-on-consumer", "stream-request-snapshot-range", "stream-request-start-after-end", "stream-request-uuid-zero", "system-event-invalid", "unknown-opcode", "unsupported-on-server", "value-length", "value-presence", "vbucket-state-invalid", "xattr-invalid", "unknown-magic", "frame-too-large"}) do list[#list + 1] = EXPERTS[id] end
  dcp.experts = list end

-- The severity of every rule of the analyzer (findings in packet comments)
local RULE_SEVERITY = {["add-stream-new-opaque-mismatch"] = "error", ["add-stream-response-extras"] = "error", ["add-stream-rollback"] = "error", ["add-stream-status-mismatch"] = "error", ["buffer-ack-exceeds-sent"] = "warning", ["capture-gap"] = "info", ["cas-invalid"] = "error", ["connections-not-mcbp"] = "info", ["consumer-error-response"] = "error", ["consumer-error-response-undecided"] = "info", ["consumer-idle-timeout"] = "warning", ["consumer-noop-opaque-mismatch"] = "error", ["consumer-response-unexpected"] = "error", ["data-after-close"] = "warning", ["data-after-close-undecided"] = "info", ["data-after-seqno-advanced"] = "error", ["data-after-stream-end"] = "warning", ["data-after-takeover"] = "warning", ["data-before-marker"] = "error", ["data-duplicate-key"] = "warning", ["data-for-dropped-collection"] = "error", ["data-outside-snapshot"] = "error", ["data-seqno-not-increasing"] = "error", ["datatype-invalid"] = "error", ["datatype-not-negotiated"] = "error", ["dcp-not-open"] = "error", ["dcp-open-twice"] = "error", ["document-key-invalid"] = "error", ["durability-level-invalid"] = "error", ["expiration-not-negotiated"] = "warning", ["extras-length"] = "error", ["failover-log-empty"] = "error", ["findings-capped"] = "info", ["flow-control-undecided"] = "info", ["flow-control-window-exceeded"] = "warning", ["frame-info-invalid"] = "error", ["frame-info-not-supported"] = "error", ["frame-info-unknown"] = "error", ["frame-too-large"] = "error", ["framing-extras-encoding"] = "error", ["header-invariant"] = "error", ["history-duplicate-key"] = "error", ["key-presence"] = "error", ["key-too-long"] = "error", ["lost-pdu"] = "info", ["marker-hcs-beyond-end"] = "info", ["marker-hcs-without-disk"] = "info", ["marker-hps-beyond-end"] = "error", ["marker-hps-without-disk"] = "info", ["marker-memory-disk"] = "info", ["marker-mvs-beyond-end"] = "error", ["marker-purge-beyond-end"] = "error", ["marker-start-after-end"] = "error", ["marker-unknown-flags"] = "info", ["marker-v22-documented-44"] = "error", ["marker-version"] = "error", ["message-lost-between-points"] = "error", ["mid-stream-start"] = "info", ["nmeta-not-zero"] = "error", ["noop-interval-exceeded"] = "warning", ["open-flags-combination"] = "error", ["open-flags-invalid"] = "error", ["open-value-datatype"] = "error", ["open-value-invalid"] = "error", ["oso-contains-marker"] = "error", ["oso-not-negotiated"] = "warning", ["oso-unpaired"] = "error", ["producer-datatype-not-negotiated"] = "warning", ["relay-consumer-message-mismatch"] = "warning", ["relay-message-differs"] = "error", ["relay-message-missing"] = "error", ["relay-message-reordered"] = "error", ["relay-not-confirmed"] = "info", ["relay-window-overflow"] = "info", ["response-without-request"] = "warning", ["resume-beyond-received"] = "error", ["resume-collapsed-snapshot"] = "error", ["resync-after-garbage"] = "warning", ["rollback-loop"] = "error", ["rollback-missed"] = "error", ["rollback-not-applied"] = "warning", ["rollback-prediction-unsure"] = "info", ["rollback-purge-seqno-not-sent"] = "info", ["rollback-seqno-above-start"] = "error", ["rollback-unexpected"] = "warning", ["semantics-suppressed"] = "info", ["seqno-advanced-not-enabled"] = "warning", ["seqno-zero"] = "error", ["snapshot-ack-lost-between-points"] = "error", ["snapshot-ack-unexpected"] = "warning", ["snapshot-behind-last-seqno"] = "error", ["snapshot-end-not-increasing"] = "error", ["snapshot-from-client"] = "error", ["snapshot-history-not-negotiated"] = "warning", ["snapshot-incomplete"] = "warning", ["snapshot-start-below-requested"] = "error", ["snapshot-start-inconsistent"] = "warning", ["snapshot-start-overlap"] = "error", ["snapshot-v1-disk-sync-replication"] = "error", ["snapshot-version-not-negotiated"] = "warning", ["stream-flags-cache-transfer"] = "error", ["stream-flags-no-value"] = "error", ["stream-flags-unknown"] = "error", ["stream-id-message-mismatch"] = "warning", ["stream-id-on-consumer"] = "error", ["stream-id-request-mismatch"] = "error", ["stream-opaque-mismatch"] = "warning", ["stream-request-snapshot-range"] = "error", ["stream-request-start-after-end"] = "error", ["stream-request-uuid-zero"] = "error", ["sync-abort-after-commit"] = "error", ["sync-abort-after-commit-disk"] = "warning", ["sync-abort-without-prepare"] = "error", ["sync-commit-without-prepare"] = "error", ["sync-completion-out-of-order"] = "error", ["sync-completion-seqno-mismatch"] = "error", ["sync-hcs-backwards"] = "error", ["sync-mutation-while-pending"] = "error", ["sync-prepare-unseen"] = "info", ["sync-prepare-while-pending"] = "error", ["sync-replica-error-reply"] = "info", ["sync-write-not-negotiated"] = "warning", ["system-event-invalid"] = "error", ["tcp-cap"] = "info", ["tcp-overlap-mismatch"] = "warning", ["tcp-seq-jump"] = "warning", ["tls-auth-failed"] = "warning", ["tls-connection"] = "info", ["tls-gap"] = "info", ["tls-no-key"] = "warning", ["tls-unsupported"] = "warning", ["uncaptured-not-judged"] = "info", ["unknown-magic"] = "error", ["unknown-opcode"] = "warning", ["unsupported-on-server"] = "error", ["value-length"] = "error", ["value-presence"] = "error", ["vbucket-state-invalid"] = "error", ["xattr-invalid"] = "error"}

-- Shapes: layouts (extras by size, value by `when` and size) and constraints per opcode
local SHAPES = {}
SHAPES[0x50] = {name = "DcpOpen", layout_field = F.open_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = false,
  req = {extras_sizes = "(8,)", size_set = {[8] = true}, sizes_text = "8", extras_context = false, validated = true, key = "required", value = "optional", value_min = 0, cas = "optional", datatypes = {[0] = true, [1] = true}, document_key = false, keep_value = true, text_value = true,
    extras = {{label = "V1", size = 8, when = {}, rep = nil, text = "Extras (V1, 8 bytes)",
      fields = {{name = "seqno", offset = 0, width = 4, field = F.open_seqno, bits = nil, kept = false, text = nil},
        {name = "flags", offset = 4, width = 4, field = F.open_flags, bits = {{F.open_flags_producer, 0x1}, {F.open_flags_invalid, 0x2}, {F.open_flags_include_xattrs, 0x4}, {F.open_flags_no_value, 0x8}, {F.open_flags_unused, 0x10}, {F.open_flags_include_delete_times, 0x20}, {F.open_flags_no_value_with_underlying_datatype, 0x40}, {F.open_flags_pitr_unsupported, 0x80}, {F.open_flags_include_deleted_user_xattrs, 0x100}, {F.open_flags_skip_deletes_in_initial_backfill, 0x200}}, kept = true, text = flagtext_dcp_open_flags}}}},
    values = {},
    checks = {{rule = "open-flags-invalid", text = "invalid flag bits in {flags:x}", test = {"mask", "flags", 877}, when = {}},
    {rule = "open-flags-combination", text = "flags {flags:x}: no_value with no_value_with_underlying_datatype", test = {"not_both", "flags", 8, 64}, when = {}},
    {rule = "open-flags-combination", text = "flags {flags:x}: include_deleted_user_xattrs without include_xattrs", test = {"needs", "flags", 256, 4}, when = {}},
    {rule = "open-flags-combination", text = "flags {flags:x}: skip_deletes_in_initial_backfill without producer", test = {"needs", "flags", 512, 1}, when = {}},
    {rule = "open-value-datatype", text = "datatype {datatype} without a value", test = {"in", "datatype", {0}}, when = {{"eq", "value_len", 0}}},
    {rule = "open-value-datatype", text = "datatype {datatype} with a value (JSON required)", test = {"in", "datatype", {1}}, when = {{"ne", "value_len", 0}}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x51] = {name = "DcpAddStream", layout_field = F.add_stream_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = true,
  req = {extras_sizes = "(4,)", size_set = {[4] = true}, sizes_text = "4", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{name = "flags", offset = 0, width = 4, field = F.add_stream_flags, bits = {{F.add_stream_flags_takeover, 0x1}, {F.add_stream_flags_disk_only, 0x2}, {F.add_stream_flags_to_latest, 0x4}, {F.add_stream_flags_no_value, 0x8}, {F.add_stream_flags_active_vb_only, 0x10}, {F.add_stream_flags_strict_vbuuid, 0x20}, {F.add_stream_flags_from_latest, 0x40}, {F.add_stream_flags_ignore_purged_tombstones, 0x80}, {F.add_stream_flags_cache_transfer, 0x100}}, kept = true, text = flagtext_stream_flags}}}},
    values = {},
    checks = {{rule = "stream-flags-no-value", text = "flag 0x08 NoValue is no longer used (DcpOpen carries NoValue)", test = {"mask", "flags", 4294967287}, when = {}},
    {rule = "stream-flags-unknown", text = "invalid flag bits in {flags:x}", test = {"mask", "flags", 511}, when = {}},
    {rule = "stream-flags-cache-transfer", text = "cache_transfer combined with other flags in {flags:x}", test = {"only_with", "flags", 256, 17}, when = {}}}},
  rsp = {extras_sizes = "(4,)", size_set = {[4] = true}, sizes_text = "4", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{name = "new_opaque", offset = 0, width = 4, field = F.add_stream_new_opaque, bits = nil, kept = false, text = nil}}}},
    values = {},
    checks = {{rule = "add-stream-response-extras", text = "success with {extlen} bytes of extras, not the 4-byte stream opaque", test = {"in", "extlen", {4}}, when = {{"eq", "status", 0}}}}}}
SHAPES[0x52] = {name = "DcpCloseStream", layout_field = F.close_stream_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = true,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x53] = {name = "DcpStreamReq", layout_field = F.stream_req_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = true,
  req = {extras_sizes = "(48,)", size_set = {[48] = true}, sizes_text = "48", extras_context = false, validated = true, key = "forbidden", value = "optional", value_context = "collections", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = true, text_value = true,
    extras = {{label = "V1", size = 48, when = {}, rep = nil, text = "Extras (V1, 48 bytes)",
      fields = {{name = "flags", offset = 0, width = 4, field = F.stream_req_flags, bits = {{F.stream_req_flags_takeover, 0x1}, {F.stream_req_flags_disk_only, 0x2}, {F.stream_req_flags_to_latest, 0x4}, {F.stream_req_flags_no_value, 0x8}, {F.stream_req_flags_active_vb_only, 0x10}, {F.stream_req_flags_strict_vbuuid, 0x20}, {F.stream_req_flags_from_latest, 0x40}, {F.stream_req_flags_ignore_purged_tombstones, 0x80}, {F.stream_req_flags_cache_transfer, 0x100}}, kept = true, text = flagtext_stream_flags},
        {name = "reserved", offset = 4, width = 4, field = F.stream_req_reserved, bits = nil, kept = false, text = nil},
        {name = "start_seqno", offset = 8, width = 8, field = F.stream_req_start_seqno, bits = nil, kept = true, text = nil},
        {name = "end_seqno", offset = 16, width = 8, field = F.stream_req_end_seqno, bits = nil, kept = true, text = nil},
        {name = "vbucket_uuid", offset = 24, width = 8, field = F.stream_req_vbucket_uuid, bits = nil, kept = true, text = nil},
        {name = "snap_start_seqno", offset = 32, width = 8, field = F.stream_req_snap_start_seqno, bits = nil, kept = true, text = nil},
        {name = "snap_end_seqno", offset = 40, width = 8, field = F.stream_req_snap_end_seqno, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {{rule = "stream-flags-no-value", text = "flag 0x08 NoValue is no longer used (DcpOpen carries NoValue)", test = {"mask", "flags", 4294967287}, when = {}},
    {rule = "stream-flags-unknown", text = "invalid flag bits in {flags:x}", test = {"mask", "flags", 511}, when = {}},
    {rule = "stream-flags-cache-transfer", text = "cache_transfer combined with other flags in {flags:x}", test = {"only_with", "flags", 256, 17}, when = {}},
    {rule = "stream-request-start-after-end", text = "start {start_seqno} > end {end_seqno}", test = {"le", "start_seqno", "end_seqno"}, when = {{"clear", "flags", 64}}},
    {rule = "stream-request-snapshot-range", text = "snapshot [{snap_start_seqno}, {snap_end_seqno}] does not contain start {start_seqno}", test = {"range", "snap_start_seqno", "start_seqno", "snap_end_seqno"}, when = {{"clear", "flags", 64}}},
    {rule = "stream-request-uuid-zero", text = "vbucket uuid 0 with start {start_seqno}: the server must roll back to 0", test = {"in", "start_seqno", {0}}, when = {{"eq", "vbucket_uuid", 0}, {"clear", "flags", 64}}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "optional", value_min = 0, cas = "optional", document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {{label = "failover_log", size = 16, when = {{"status", 0}}, rep = "failover_log", text = "Value (failover_log, 16 bytes)",
      fields = {{name = "vbucket_uuid", offset = 0, width = 8, field = F.failover_log_vbucket_uuid, bits = nil, kept = true, text = nil},
        {name = "seqno", offset = 8, width = 8, field = F.failover_log_seqno, bits = nil, kept = false, text = nil}}},
    {label = "rollback", size = 8, when = {{"status", 35}}, rep = nil, text = "Value (rollback, 8 bytes)",
      fields = {{name = "rollback_seqno", offset = 0, width = 8, field = F.rollback_seqno, bits = nil, kept = true, text = nil}}}},
    checks = {{rule = "failover-log-empty", text = "success with an empty failover log", test = {"ne", "value_len", 0}, when = {{"eq", "status", 0}}}}}}
SHAPES[0x54] = {name = "DcpGetFailoverLog", layout_field = F.get_failover_log_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = true,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "optional", value_min = 0, cas = "optional", document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {{label = "failover_log", size = 16, when = {{"status", 0}}, rep = "failover_log", text = "Value (failover_log, 16 bytes)",
      fields = {{name = "vbucket_uuid", offset = 0, width = 8, field = F.failover_log_vbucket_uuid, bits = nil, kept = true, text = nil},
        {name = "seqno", offset = 8, width = 8, field = F.failover_log_seqno, bits = nil, kept = false, text = nil}}}},
    checks = {{rule = "failover-log-empty", text = "success with an empty failover log", test = {"ne", "value_len", 0}, when = {{"eq", "status", 0}}}}}}
SHAPES[0x55] = {name = "DcpStreamEnd", layout_field = F.stream_end_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = true, vbucket = true,
  req = {extras_sizes = "(4,)", size_set = {[4] = true}, sizes_text = "4", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{name = "reason", offset = 0, width = 4, field = F.stream_end_reason, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x56] = {name = "DcpSnapshotMarker", layout_field = F.snapshot_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = true, vbucket = true,
  req = {extras_sizes = "(20, 1)", size_set = {[1] = true, [20] = true}, sizes_text = "1 or 20", extras_context = false, validated = true, key = "forbidden", value = "optional", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 20, when = {}, rep = nil, text = "Extras (V1, 20 bytes)", value = "forbidden",
      fields = {{name = "start_seqno", offset = 0, width = 8, field = F.snapshot_start_seqno, bits = nil, kept = true, text = nil},
        {name = "end_seqno", offset = 8, width = 8, field = F.snapshot_end_seqno, bits = nil, kept = true, text = nil},
        {name = "flags", offset = 16, width = 4, field = F.snapshot_flags, bits = {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, kept = true, text = flagtext_snapshot_flags}}},
    {label = "V2", size = 1, when = {}, rep = nil, text = "Extras (V2, 1 bytes)", value = "required",
      fields = {{name = "version", offset = 0, width = 1, field = F.snapshot_version, bits = nil, kept = true, text = nil}}}},
    values = {{label = "V2.0", size = 36, when = {{"version", 0}}, rep = nil, text = "Value (V2.0, 36 bytes)",
      fields = {{name = "start_seqno", offset = 0, width = 8, field = F.snapshot_start_seqno, bits = nil, kept = true, text = nil},
        {name = "end_seqno", offset = 8, width = 8, field = F.snapshot_end_seqno, bits = nil, kept = true, text = nil},
        {name = "flags", offset = 16, width = 4, field = F.snapshot_flags, bits = {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, kept = true, text = flagtext_snapshot_flags},
        {name = "max_visible_seqno", offset = 20, width = 8, field = F.snapshot_max_visible_seqno, bits = nil, kept = true, text = nil},
        {name = "high_completed_seqno", offset = 28, width = 8, field = F.snapshot_high_completed_seqno, bits = nil, kept = true, text = nil}}},
    {label = "V2.2", size = 52, when = {{"version", 2}}, rep = nil, text = "Value (V2.2, 52 bytes)",
      fields = {{name = "start_seqno", offset = 0, width = 8, field = F.snapshot_start_seqno, bits = nil, kept = true, text = nil},
        {name = "end_seqno", offset = 8, width = 8, field = F.snapshot_end_seqno, bits = nil, kept = true, text = nil},
        {name = "flags", offset = 16, width = 4, field = F.snapshot_flags, bits = {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, kept = true, text = flagtext_snapshot_flags},
        {name = "max_visible_seqno", offset = 20, width = 8, field = F.snapshot_max_visible_seqno, bits = nil, kept = true, text = nil},
        {name = "high_completed_seqno", offset = 28, width = 8, field = F.snapshot_high_completed_seqno, bits = nil, kept = true, text = nil},
        {name = "purge_seqno", offset = 36, width = 8, field = F.snapshot_purge_seqno, bits = nil, kept = true, text = nil},
        {name = "high_prepared_seqno", offset = 44, width = 8, field = F.snapshot_high_prepared_seqno, bits = nil, kept = true, text = nil}}},
    {label = "V2.2-doc44", size = 44, when = {{"version", 2}}, rep = nil, text = "Value (V2.2-doc44, 44 bytes)", rule = "marker-v22-documented-44", note = "a 44-byte V2.2 value (no HPS), as pre-release drafts of snapshot-marker.md listed it (2024-07 to 2025-01); servers send and accept 52 bytes (purge seqno then HPS)",
      fields = {{name = "start_seqno", offset = 0, width = 8, field = F.snapshot_start_seqno, bits = nil, kept = true, text = nil},
        {name = "end_seqno", offset = 8, width = 8, field = F.snapshot_end_seqno, bits = nil, kept = true, text = nil},
        {name = "flags", offset = 16, width = 4, field = F.snapshot_flags, bits = {{F.snapshot_flags_memory, 0x1}, {F.snapshot_flags_disk, 0x2}, {F.snapshot_flags_checkpoint, 0x4}, {F.snapshot_flags_ack, 0x8}, {F.snapshot_flags_history, 0x10}, {F.snapshot_flags_may_contain_duplicates, 0x20}}, kept = true, text = flagtext_snapshot_flags},
        {name = "max_visible_seqno", offset = 20, width = 8, field = F.snapshot_max_visible_seqno, bits = nil, kept = true, text = nil},
        {name = "high_completed_seqno", offset = 28, width = 8, field = F.snapshot_high_completed_seqno, bits = nil, kept = true, text = nil},
        {name = "purge_seqno", offset = 36, width = 8, field = F.snapshot_purge_seqno, bits = nil, kept = true, text = nil}}}},
    checks = {{rule = "marker-version", text = "version byte {version}", test = {"in", "version", {0, 2}}, when = {}},
    {rule = "marker-unknown-flags", text = "unknown flag bits in {flags:x}", test = {"mask", "flags", 63}, when = {}},
    {rule = "marker-memory-disk", text = "flags {flags:x}: not exactly one of Memory and Disk", test = {"one_bit", "flags", 3}, when = {}},
    {rule = "marker-start-after-end", text = "start {start_seqno} > end {end_seqno}", test = {"le", "start_seqno", "end_seqno"}, when = {}},
    {rule = "marker-mvs-beyond-end", text = "max visible seqno {max_visible_seqno} > end {end_seqno}", test = {"le", "max_visible_seqno", "end_seqno"}, when = {}},
    {rule = "marker-hps-beyond-end", text = "high prepared seqno {high_prepared_seqno} > end {end_seqno}", test = {"le", "high_prepared_seqno", "end_seqno"}, when = {{"set", "flags", 2}}},
    {rule = "marker-purge-beyond-end", text = "purge seqno {purge_seqno} > end {end_seqno}", test = {"le", "purge_seqno", "end_seqno"}, when = {{"set", "flags", 2}}},
    {rule = "marker-hcs-beyond-end", text = "high completed seqno {high_completed_seqno} > end {end_seqno}", test = {"le", "high_completed_seqno", "end_seqno"}, when = {{"set", "flags", 2}}},
    {rule = "marker-hcs-without-disk", text = "high completed seqno {high_completed_seqno} set without Disk", test = {"in", "high_completed_seqno", {0}}, when = {{"clear", "flags", 2}}},
    {rule = "marker-hps-without-disk", text = "high prepared seqno {high_prepared_seqno} set without Disk", test = {"in", "high_prepared_seqno", {0}}, when = {{"clear", "flags", 2}}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x57] = {name = "DcpMutation", layout_field = F.mutation_layout, seqno = "by_seqno", server_rejects = nil, document = true, item = true, stream = true, vbucket = true,
  req = {extras_sizes = "(31,)", size_set = {[31] = true}, sizes_text = "31", extras_context = false, validated = true, key = "required", value = "optional", value_min = 0, cas = "optional", datatypes = {[0] = true, [1] = true, [2] = true, [3] = true, [4] = true, [5] = true, [6] = true, [7] = true}, document_key = true, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 31, when = {}, rep = nil, text = "Extras (V1, 31 bytes)",
      fields = {{name = "by_seqno", offset = 0, width = 8, field = F.mutation_by_seqno, bits = nil, kept = true, text = nil},
        {name = "rev_seqno", offset = 8, width = 8, field = F.mutation_rev_seqno, bits = nil, kept = false, text = nil},
        {name = "flags", offset = 16, width = 4, field = F.mutation_flags, bits = nil, kept = true, text = nil},
        {name = "expiration", offset = 20, width = 4, field = F.mutation_expiration, bits = nil, kept = false, text = nil},
        {name = "lock_time", offset = 24, width = 4, field = F.mutation_lock_time, bits = nil, kept = false, text = nil},
        {name = "nmeta", offset = 28, width = 2, field = F.mutation_nmeta, bits = nil, kept = true, text = nil},
        {name = "nru", offset = 30, width = 1, field = F.mutation_nru, bits = nil, kept = false, text = nil}}}},
    values = {},
    checks = {{rule = "seqno-zero", text = "mutation with by_seqno 0", test = {"ne", "by_seqno", 0}, when = {}},
    {rule = "nmeta-not-zero", text = "mutation with nmeta {nmeta}", test = {"in", "nmeta", {0}}, when = {}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x58] = {name = "DcpDeletion", layout_field = F.deletion_layout, seqno = "by_seqno", server_rejects = nil, document = true, item = true, stream = true, vbucket = true,
  req = {extras_sizes = "(18, 21)", size_set = {[18] = true, [21] = true}, sizes_text = "18 or 21", extras_context = true, validated = true, key = "required", value = "optional", value_min = 0, cas = "optional", datatypes = {[0] = true, [2] = true, [4] = true, [5] = true, [6] = true, [7] = true}, document_key = true, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 18, when = {}, rep = nil, text = "Extras (V1, 18 bytes)", context = "!delete_v2",
      fields = {{name = "by_seqno", offset = 0, width = 8, field = F.deletion_by_seqno, bits = nil, kept = true, text = nil},
        {name = "rev_seqno", offset = 8, width = 8, field = F.deletion_rev_seqno, bits = nil, kept = false, text = nil},
        {name = "nmeta", offset = 16, width = 2, field = F.deletion_nmeta, bits = nil, kept = true, text = nil}}},
    {label = "V2", size = 21, when = {}, rep = nil, text = "Extras (V2, 21 bytes)", context = "delete_v2",
      fields = {{name = "by_seqno", offset = 0, width = 8, field = F.deletion_by_seqno, bits = nil, kept = true, text = nil},
        {name = "rev_seqno", offset = 8, width = 8, field = F.deletion_rev_seqno, bits = nil, kept = false, text = nil},
        {name = "delete_time", offset = 16, width = 4, field = F.deletion_delete_time, bits = nil, kept = false, text = nil},
        {name = "unused", offset = 20, width = 1, field = F.deletion_unused, bits = nil, kept = false, text = nil}}}},
    values = {},
    checks = {{rule = "nmeta-not-zero", text = "deletion with nmeta {nmeta}", test = {"in", "nmeta", {0}}, when = {}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x59] = {name = "DcpExpiration", layout_field = F.expiration_layout, seqno = "by_seqno", server_rejects = nil, document = true, item = true, stream = true, vbucket = true,
  req = {extras_sizes = "(20,)", size_set = {[20] = true}, sizes_text = "20", extras_context = false, validated = true, key = "required", value = "optional", value_min = 0, cas = "optional", datatypes = {[0] = true, [1] = true, [2] = true, [3] = true, [4] = true, [5] = true, [6] = true, [7] = true}, document_key = true, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 20, when = {}, rep = nil, text = "Extras (V1, 20 bytes)",
      fields = {{name = "by_seqno", offset = 0, width = 8, field = F.expiration_by_seqno, bits = nil, kept = true, text = nil},
        {name = "rev_seqno", offset = 8, width = 8, field = F.expiration_rev_seqno, bits = nil, kept = false, text = nil},
        {name = "delete_time", offset = 16, width = 4, field = F.expiration_delete_time, bits = nil, kept = false, text = nil}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x5a] = {name = "DcpFlush_Unsupported", layout_field = F.flush_layout, seqno = nil, server_rejects = "NotSupported", document = false, item = false, stream = false, vbucket = false,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x5b] = {name = "DcpSetVbucketState", layout_field = F.set_vbucket_state_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = true, vbucket = true,
  req = {extras_sizes = "(1,)", size_set = {[1] = true}, sizes_text = "1", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 1, when = {}, rep = nil, text = "Extras (V1, 1 bytes)",
      fields = {{name = "state", offset = 0, width = 1, field = F.set_vbucket_state_state, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {{rule = "vbucket-state-invalid", text = "state {state}", test = {"in", "state", {1, 2, 3, 4}}, when = {}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x5c] = {name = "DcpNoop", layout_field = F.noop_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = false,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x5d] = {name = "DcpBufferAcknowledgement", layout_field = F.buffer_ack_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = false,
  req = {extras_sizes = "(4,)", size_set = {[4] = true}, sizes_text = "4", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{name = "bytes_to_ack", offset = 0, width = 4, field = F.buffer_ack_bytes_to_ack, bits = nil, kept = false, text = nil}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x5e] = {name = "DcpControl", layout_field = F.control_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = false,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = true, key = "required", value = "required", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = true,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x5f] = {name = "DcpSystemEvent", layout_field = F.system_event_layout, seqno = "by_seqno", server_rejects = nil, document = false, item = true, stream = true, vbucket = true,
  req = {extras_sizes = "(13,)", size_set = {[13] = true}, sizes_text = "13", extras_context = false, validated = true, key = "optional", value = "optional", value_min = 0, cas = "optional", datatypes = {[0] = true, [1] = true, [2] = true, [3] = true, [4] = true, [5] = true, [6] = true, [7] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 13, when = {}, rep = nil, text = "Extras (V1, 13 bytes)",
      fields = {{name = "by_seqno", offset = 0, width = 8, field = F.system_event_by_seqno, bits = nil, kept = true, text = nil},
        {name = "event", offset = 8, width = 4, field = F.system_event_event, bits = nil, kept = true, text = nil},
        {name = "version", offset = 12, width = 1, field = F.system_event_version, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {{rule = "system-event-invalid", text = "event id {event}", test = {"in", "event", {0, 1, 3, 4, 5}}, when = {}},
    {rule = "system-event-invalid", text = "event version {version}", test = {"in", "version", {0, 1, 2}}, when = {}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x60] = {name = "DcpPrepare", layout_field = F.prepare_layout, seqno = "by_seqno", server_rejects = nil, document = true, item = true, stream = true, vbucket = true,
  req = {extras_sizes = "(31,)", size_set = {[31] = true}, sizes_text = "31", extras_context = false, validated = true, key = "required", value = "optional", value_min = 0, cas = "required", datatypes = {[0] = true, [1] = true, [2] = true, [3] = true, [4] = true, [5] = true, [6] = true, [7] = true}, document_key = true, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 31, when = {}, rep = nil, text = "Extras (V1, 31 bytes)",
      fields = {{name = "by_seqno", offset = 0, width = 8, field = F.prepare_by_seqno, bits = nil, kept = true, text = nil},
        {name = "rev_seqno", offset = 8, width = 8, field = F.prepare_rev_seqno, bits = nil, kept = false, text = nil},
        {name = "flags", offset = 16, width = 4, field = F.prepare_flags, bits = nil, kept = true, text = nil},
        {name = "expiration", offset = 20, width = 4, field = F.prepare_expiration, bits = nil, kept = false, text = nil},
        {name = "lock_time", offset = 24, width = 4, field = F.prepare_lock_time, bits = nil, kept = false, text = nil},
        {name = "nru", offset = 28, width = 1, field = F.prepare_nru, bits = nil, kept = false, text = nil},
        {name = "deleted", offset = 29, width = 1, field = F.prepare_deleted, bits = nil, kept = false, text = nil},
        {name = "durability_level", offset = 30, width = 1, field = F.prepare_durability_level, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {{rule = "seqno-zero", text = "prepare with by_seqno 0", test = {"ne", "by_seqno", 0}, when = {}},
    {rule = "durability-level-invalid", text = "durability level {durability_level}", test = {"in", "durability_level", {1, 2, 3}}, when = {}}}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x61] = {name = "DcpSeqnoAcknowledged", layout_field = F.seqno_ack_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = true,
  req = {extras_sizes = "(8,)", size_set = {[8] = true}, sizes_text = "8", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "forbidden", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 8, when = {}, rep = nil, text = "Extras (V1, 8 bytes)",
      fields = {{name = "prepared_seqno", offset = 0, width = 8, field = F.seqno_ack_prepared_seqno, bits = nil, kept = false, text = nil}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x62] = {name = "DcpCommit", layout_field = F.commit_layout, seqno = "commit_seqno", server_rejects = nil, document = true, item = true, stream = true, vbucket = true,
  req = {extras_sizes = "(16,)", size_set = {[16] = true}, sizes_text = "16", extras_context = false, validated = true, key = "required", value = "forbidden", value_min = 0, cas = "forbidden", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 16, when = {}, rep = nil, text = "Extras (V1, 16 bytes)",
      fields = {{name = "prepared_seqno", offset = 0, width = 8, field = F.commit_prepared_seqno, bits = nil, kept = false, text = nil},
        {name = "commit_seqno", offset = 8, width = 8, field = F.commit_commit_seqno, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x63] = {name = "DcpAbort", layout_field = F.abort_layout, seqno = "abort_seqno", server_rejects = nil, document = true, item = true, stream = true, vbucket = true,
  req = {extras_sizes = "(16,)", size_set = {[16] = true}, sizes_text = "16", extras_context = false, validated = true, key = "required", value = "forbidden", value_min = 0, cas = "forbidden", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 16, when = {}, rep = nil, text = "Extras (V1, 16 bytes)",
      fields = {{name = "prepared_seqno", offset = 0, width = 8, field = F.abort_prepared_seqno, bits = nil, kept = false, text = nil},
        {name = "abort_seqno", offset = 8, width = 8, field = F.abort_abort_seqno, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x64] = {name = "DcpSeqnoAdvanced", layout_field = F.seqno_advanced_layout, seqno = "by_seqno", server_rejects = "UnknownCommand", document = false, item = false, stream = true, vbucket = true,
  req = {extras_sizes = "(8,)", size_set = {[8] = true}, sizes_text = "8", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 8, when = {}, rep = nil, text = "Extras (V1, 8 bytes)",
      fields = {{name = "by_seqno", offset = 0, width = 8, field = F.seqno_advanced_by_seqno, bits = nil, kept = true, text = nil}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x65] = {name = "DcpOsoSnapshot", layout_field = F.oso_snapshot_layout, seqno = nil, server_rejects = "UnknownCommand", document = false, item = false, stream = true, vbucket = true,
  req = {extras_sizes = "(4,)", size_set = {[4] = true}, sizes_text = "4", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {{label = "V1", size = 4, when = {}, rep = nil, text = "Extras (V1, 4 bytes)",
      fields = {{name = "flags", offset = 0, width = 4, field = F.oso_snapshot_flags, bits = {{F.oso_snapshot_flags_start, 0x1}, {F.oso_snapshot_flags_end, 0x2}}, kept = true, text = flagtext_oso_flags}}}},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x66] = {name = "DcpCacheTransfer", layout_field = F.cache_transfer_layout, seqno = nil, server_rejects = nil, document = true, item = false, stream = true, vbucket = true,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = true, key = "forbidden", value = "required", value_min = 42, cas = "forbidden", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x67] = {name = "DcpCacheTransferEnd", layout_field = F.cache_transfer_end_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = true, vbucket = true,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "forbidden", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}}}
SHAPES[0x96] = {name = "GetFailoverLog", layout_field = F.get_failover_log_layout, seqno = nil, server_rejects = nil, document = false, item = false, stream = false, vbucket = true,
  req = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = true, key = "forbidden", value = "forbidden", value_min = 0, cas = "optional", datatypes = {[0] = true}, document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {},
    checks = {}},
  rsp = {extras_sizes = "(0,)", size_set = {[0] = true}, sizes_text = "0", extras_context = false, validated = false, key = "forbidden", value = "optional", value_min = 0, cas = "optional", document_key = false, keep_value = false, text_value = false,
    extras = {},
    values = {{label = "failover_log", size = 16, when = {{"status", 0}}, rep = "failover_log", text = "Value (failover_log, 16 bytes)",
      fields = {{name = "vbucket_uuid", offset = 0, width = 8, field = F.failover_log_vbucket_uuid, bits = nil, kept = true, text = nil},
        {name = "seqno", offset = 8, width = 8, field = F.failover_log_seqno, bits = nil, kept = false, text = nil}}}},
    checks = {{rule = "failover-log-empty", text = "success with an empty failover log", test = {"ne", "value_len", 0}, when = {{"eq", "status", 0}}}}}}

local tvb_raw = Tvb.raw
local owned = {}      -- TCP port -> the dissector that had it before (false: none)

-- Each shape's extras layouts by size (decoding and the extras-length rule look them up).
for _, spec in pairs(SHAPES) do
  for _, shape in ipairs({spec.req, spec.rsp}) do
    shape.extras_by_size = {}
    for i = 1, #shape.extras do shape.extras_by_size[shape.extras[i].size] = shape.extras[i] end
  end
end

-- Single-message rules ----------------------------------------------------------------------
-- The same table data as dcpdissect.analysis.rules.structure, interpreted the same way:
-- generic header rules (kv_engine McbpValidator::verify_header) from each opcode's shape,
-- then the shape's checks. Rules that depend on the connection's negotiation (HELLO,
-- DcpOpen) apply to messages the client sent, and only when the capture showed it.

local function num(v)
  if type(v) == "number" then return v end
  return v:tonumber()
end

local HEADER_NAMES = {extlen = true, keylen = true, value_len = true, datatype = true, status = true}

local function val(m, name)
  local v = m.f[name]
  if v ~= nil then return v end
  if HEADER_NAMES[name] then return m[name] end
  return nil
end

local function render_text(text, m)
  return (string.gsub(text, "{([%w_]+)(:?x?)}", function(name, hex)
    local v = val(m, name)
    if v == nil then return "?" end
    if hex == ":x" then return fmt("0x%x", num(v)) end
    return int_text(v)
  end))
end

local function le(a, b)
  if type(a) == type(b) then return a <= b end
  return num(a) <= num(b)
end

local function one_of(v, list)
  local n = num(v)
  for i = 1, #list do if list[i] == n then return true end end
  return false
end

local function holds(cond, m)
  local v = val(m, cond[2])
  if v == nil then return nil end
  local kind, arg = cond[1], cond[3]
  if kind == "set" then return band(num(v), arg) ~= 0 end
  if kind == "clear" then return band(num(v), arg) == 0 end
  if kind == "eq" then return num(v) == arg end
  return num(v) ~= arg
end

local function check_passes(c, m)
  for i = 1, #c.when do
    if not holds(c.when[i], m) then return true end
  end
  local t = c.test
  local kind, v = t[1], val(m, t[2])
  if v == nil then return true end
  if kind == "le" then
    local other = val(m, t[3])
    return other == nil or le(v, other)
  elseif kind == "range" then
    local x, hi = val(m, t[3]), val(m, t[4])
    return x == nil or hi == nil or (le(v, x) and le(x, hi))
  elseif kind == "ne" then return num(v) ~= t[3]
  elseif kind == "in" then return one_of(v, t[3])
  elseif kind == "mask" then return band(num(v), bnot(t[3])) == 0
  elseif kind == "only_with" then
    v = num(v)
    return band(v, t[3]) == 0 or band(v, bnot(bor(t[3], t[4]))) == 0
  elseif kind == "not_both" then
    v = num(v)
    return not (band(v, t[3]) ~= 0 and band(v, t[4]) ~= 0)
  elseif kind == "needs" then
    v = num(v)
    return band(v, t[3]) == 0 or band(v, t[4]) ~= 0
  elseif kind == "one_bit" then
    local bits = band(num(v), t[3])
    return bits ~= 0 and band(bits, bits - 1) == 0
  end
  error("unknown check " .. tostring(kind))
end

-- Negotiation (HELLO, DcpOpen) per connection. A context is never changed in place: a new
-- one replaces it and joins the connection's history ({frame that changed it, context}),
-- so that a later re-dissection (Wireshark's GUI) judges each frame by the context in force
-- when it was first dissected.
local contexts = {}   -- "client-server" -> {ctx = ..., first = ..., history = {...}, pending = {}}
local changed_in = 0  -- the frame being dissected (set by connection())

local function set_ctx(conn, ctx)
  conn.ctx = ctx
  local history = conn.history
  if history then history[#history + 1] = {changed_in, ctx} end
end

-- The context in force at the start of `frame`'s first dissection.
local function ctx_before(conn, frame)
  local ctx, history = conn.first, conn.history
  for i = 1, #history do
    if history[i][1] >= frame then break end
    ctx = history[i][2]
  end
  return ctx
end

local function ctx_with(ctx, key, value)
  local new = {}
  for k, v in pairs(ctx) do new[k] = v end
  new[key] = value
  return new
end

local function collections(ctx)
  if ctx.features == nil then return nil end
  return ctx.features[FEATURE_COLLECTIONS] == true
end

local function enabled_datatypes(ctx)
  if ctx.features == nil then return nil end
  local bits = 0
  for feature, bit in pairs(DATATYPE_FEATURES) do
    if ctx.features[feature] then bits = bits + bit end
  end
  return bits
end

local function is_consumer(ctx)
  if ctx.open_flags == nil then return nil end
  return band(ctx.open_flags, OPEN_PRODUCER) == 0
end

local function delete_v2(ctx)
  if collections(ctx) or band(ctx.open_flags or 0, OPEN_DELETE_TIMES) ~= 0 then return true end
  if collections(ctx) == nil or ctx.open_flags == nil then return nil end
  return false
end

local function negotiate(conn, m, from_client)
  if SERVER_MAGIC[m.magic] then return end
  local key = m.opcode * 4294967296 + m.opaque
  if m.request and from_client then
    if m.opcode == 0x1f then
      conn.pending[key] = {}
    elseif m.opcode == 0x50 then
      conn.pending[key] = {flags = m.f.flags, dcp = conn.ctx.dcp}
      set_ctx(conn, ctx_with(conn.ctx, "dcp", true))
    end
  elseif not m.request and not from_client then
    local info = conn.pending[key]
    if info == nil then return end
    conn.pending[key] = nil
    if m.opcode == 0x1f and m.status == 0 then
      local features, v = {}, m.value_bytes or ""
      for i = 1, #v - 1, 2 do features[sbyte(v, i) * 256 + sbyte(v, i + 1)] = true end
      set_ctx(conn, ctx_with(conn.ctx, "features", features))
    elseif m.opcode == 0x50 then
      if m.status == 0 then
        set_ctx(conn, ctx_with(conn.ctx, "open_flags", info.flags))
      else
        set_ctx(conn, ctx_with(conn.ctx, "dcp", info.dcp))
      end
    end
  end
end

-- A negotiating request the capture cut (its value or key not whole): what it asked is not
-- known, nor whether the connection is a DCP one (Negotiation.undecoded).
local NEGOTIATING = {[0x1f] = true, [0x50] = true, [0x5e] = true, [0x89] = true}
local function negotiate_cut(conn, m, from_client)
  if m.request and from_client and NEGOTIATING[m.opcode] and conn.ctx.dcp == false then
    set_ctx(conn, ctx_with(conn.ctx, "dcp", nil))
  end
end

local function layout_allowed(lay, ctx)
  if lay.context == nil or ctx == nil or delete_v2(ctx) == nil then return true end
  return delete_v2(ctx) == (lay.context == "delete_v2")
end

-- The leb128 collection id before a document key (include/mcbp/protocol/unsigned_leb128.h):
-- collection id and prefix length, or nil, nil and why the server refuses the prefix.
local function split_collection_key(key)
  local cid = 0
  for i = 1, math.min(#key, 5) do
    local b = sbyte(key, i)
    cid = cid + band(b, 0x7f) * 2 ^ (7 * (i - 1))
    if b < 0x80 then
      if i > 1 and b == 0 then return nil, nil, "non-canonical leb128" end
      return cid, i, nil
    end
  end
  return nil, nil, "no stop byte"
end

-- Collection and scope names, capture-wide, from the system events that create or modify
-- them (ids: include/memcached/protocol_binary.h mcbp::systemevent::id; the key is the name;
-- values of versions 0 and 1: engines/ep/src/collections/system_event_types.h, manifest
-- uid u64, scope id u32, collection id u32; version 2: a FlatBuffers table of
-- engines/ep/src/collections/events.fbs, field 1 scopeId, field 2 collectionId).
local scope_names, collection_names = {}, {}   -- id -> name; id -> {scope id, name}

local function u32_be(s, at)
  local a, b, c, d = sbyte(s, at, at + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function u_le(s, at, width)
  local v = 0
  for i = at + width - 1, at, -1 do v = v * 256 + sbyte(s, i) end
  return v
end

-- Field `field` (a uint32) of a FlatBuffers root table: 0 when absent, nil when malformed.
local function flatbuffer_uint32(s, field)
  local n = #s
  if n < 8 then return nil end
  local tbl = u_le(s, 1, 4)
  if tbl + 4 > n then return nil end
  local soff = u_le(s, tbl + 1, 4)
  if soff >= 2147483648 then soff = soff - 4294967296 end
  local vt = tbl - soff
  if vt < 0 or vt + 4 > n then return nil end
  local slot = 4 + 2 * field
  if slot + 2 > u_le(s, vt + 1, 2) or vt + slot + 2 > n then return 0 end
  local at = u_le(s, vt + slot + 1, 2)
  if at == 0 then return 0 end
  if tbl + at + 4 > n then return nil end
  return u_le(s, tbl + at + 1, 4)
end

local function learn_names(event, version, key, value)
  if #key == 0 or not (event == 0 or event == 3 or event == 5) then return end
  local scope, cid
  if version == 0 or version == 1 then
    if #value < (event == 3 and 12 or 16) then return end
    scope = u32_be(value, 9)
    if event ~= 3 then cid = u32_be(value, 13) end
  elseif version == 2 then
    scope = flatbuffer_uint32(value, 1)
    if event ~= 3 then cid = flatbuffer_uint32(value, 2) end
    if scope == nil or (event ~= 3 and cid == nil) then return end
  else
    return
  end
  if event == 3 then scope_names[scope] = key else collection_names[cid] = {scope, key} end
end

local function collection_name(cid)
  local entry = collection_names[cid]
  if entry == nil then return nil end
  local scope = scope_names[entry[1]]
  return scope and scope .. "." .. entry[2] or entry[2]
end

-- leb128 collection prefix (McbpValidator::is_document_key_valid)
local function document_key_problem(key)
  if #key <= 1 then return "key length must be >= 2 on a collection-aware connection" end
  local cid, prefix, problem = split_collection_key(key)
  if problem then return "collection prefix: " .. problem end
  local logical = #key - prefix
  if logical == 0 then return "no logical key after the collection prefix" end
  if cid >= 1 and cid <= 7 then return fmt("reserved collection id %d", cid) end
  local limit = cid == 0 and MAX_KEY_LENGTH or MAX_COLLECTIONS_LOGICAL_KEY_LENGTH
  if logical > limit then return fmt("logical key of %d bytes exceeds %d", logical, limit) end
  return nil
end

local function utf8_valid(s)
  local i, n = 1, #s
  while i <= n do
    local c = sbyte(s, i)
    local w = c < 0x80 and 1 or (c >= 0xc2 and c < 0xe0 and 2) or (c >= 0xe0 and c < 0xf0 and 3)
              or (c >= 0xf0 and c < 0xf5 and 4) or nil
    if w == nil or i + w - 1 > n then return false end
    for j = i + 1, i + w - 1 do
      if band(sbyte(s, j), 0xc0) ~= 0x80 then return false end
    end
    i = i + w
  end
  return true
end

-- Python's repr() of a bytes object (the analyzer's messages show keys that way)
local function py_bytes(s)
  local quote = "'"
  if string.find(s, "'", 1, true) and not string.find(s, '"', 1, true) then quote = '"' end
  local out = {"b", quote}
  for i = 1, #s do
    local c = sbyte(s, i)
    local ch = string.char(c)
    if ch == "\\" or ch == quote then out[#out + 1] = "\\" .. ch
    elseif c == 9 then out[#out + 1] = "\\t"
    elseif c == 10 then out[#out + 1] = "\\n"
    elseif c == 13 then out[#out + 1] = "\\r"
    elseif c < 32 or c >= 127 then out[#out + 1] = fmt("\\x%02x", c)
    else out[#out + 1] = ch end
  end
  out[#out + 1] = quote
  return table.concat(out)
end

-- A small JSON reader for the DcpOpen value: objects keep their keys in order.
local function json_value(s, i)
  i = string.find(s, "[^ \t\r\n]", i)
  if i == nil then return nil end
  local c = string.sub(s, i, i)
  if c == "{" then
    local obj = {}
    i = string.find(s, "[^ \t\r\n]", i + 1)
    if i and string.sub(s, i, i) == "}" then return obj, i + 1 end
    while i do
      local k
      k, i = json_value(s, i)
      if type(k) ~= "string" then return nil end
      i = string.find(s, "[^ \t\r\n]", i)
      if not i or string.sub(s, i, i) ~= ":" then return nil end
      local v
      v, i = json_value(s, i + 1)
      if i == nil then return nil end
      obj[#obj + 1] = {k, v}
      i = string.find(s, "[^ \t\r\n]", i)
      if not i then return nil end
      local sep = string.sub(s, i, i)
      if sep == "}" then return obj, i + 1 end
      if sep ~= "," then return nil end
      i = i + 1
    end
    return nil
  elseif c == "[" then
    local arr = {is_array = true}
    i = string.find(s, "[^ \t\r\n]", i + 1)
    if i and string.sub(s, i, i) == "]" then return arr, i + 1 end
    while i do
      local v
      v, i = json_value(s, i)
      if i == nil then return nil end
      arr[#arr + 1] = v
      i = string.find(s, "[^ \t\r\n]", i)
      if not i then return nil end
      local sep = string.sub(s, i, i)
      if sep == "]" then return arr, i + 1 end
      if sep ~= "," then return nil end
      i = i + 1
    end
    return nil
  elseif c == '"' then
    local j = i + 1
    while true do
      local k = string.find(s, '["\\]', j)
      if k == nil then return nil end
      if string.sub(s, k, k) == '"' then return string.sub(s, i + 1, k - 1), k + 1 end
      j = k + 2
    end
  end
  local lit = string.match(s, "^-?%d+%.?%d*[eE]?[-+]?%d*", i)
  if lit and #lit > 0 then return tonumber(lit), i + #lit end
  for word, v in pairs({["true"] = true, ["false"] = false, ["null"] = "null"}) do
    if string.sub(s, i, i + #word - 1) == word then return v, i + #word end
  end
  return nil
end

-- xattr blob (xattr/utils.cc validate, key_validator.cc is_valid_xattr_key)
local function be32(s, i)
  local a, b, c, d = sbyte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function xattr_key_valid(key)
  if #key == 0 then return false end
  if not utf8_valid(key) then return false end
  local first = sbyte(key, 1)
  local system = first == 95 or first == 36
  if not system and (string.find(string.sub(key, 1, 1), "^[%p%c]") or first == 127) then return false end
  local dot = string.find(key, "[.%[]") or (#key + 1)
  dot = dot - 1
  return not (dot == 0 or dot >= MAX_XATTR_KEY_LENGTH or (system and dot == 1))
end

local function is_json(text)
  local v, i = json_value(text, 1)
  return i ~= nil and string.find(text, "[^ \t\r\n]", i) == nil
end

local function xattr_problem(value)
  if #value < 4 then return "no room for the xattr blob length" end
  local size = be32(value, 1) + 4
  if size > #value then return fmt("xattr blob length %d exceeds the value", size - 4) end
  local offset, system, keys = 4, 4, {}
  while offset < size do
    if offset + 7 > size then return "truncated xattr pair" end
    local pair = be32(value, offset + 1)
    offset = offset + 4
    if offset + pair > size then return "xattr pair runs past the blob" end
    local end_key = string.find(value, "\0", offset + 1, true)
    if end_key and end_key > size then end_key = nil end
    local end_value = end_key and string.find(value, "\0", end_key + 1, true)
    if end_value and end_value > size then end_value = nil end
    if not end_value then return "xattr pair without its NUL terminators" end
    local key, val = string.sub(value, offset + 1, end_key - 1), string.sub(value, end_key + 1, end_value - 1)
    offset = end_value
    if not xattr_key_valid(key) then return "invalid xattr key " .. py_bytes(string.sub(key, 1, 20)) end
    if not is_json(val) then return "xattr " .. py_bytes(string.sub(key, 1, 20)) .. " value is not JSON" end
    if pair ~= #key + #val + 2 then return "xattr pair length does not match its key and value" end
    if keys[key] then return "duplicate xattr key " .. py_bytes(string.sub(key, 1, 20)) end
    keys[key] = true
    if sbyte(key, 1) == 95 then system = system + 4 + #key + #val + 2 end
  end
  if offset ~= size then return "xattr blob does not end on a pair" end
  if system > MAX_SYSTEM_XATTR_BYTES then
    return fmt("system xattrs use %d bytes, more than %d", system, MAX_SYSTEM_XATTR_BYTES)
  end
  return nil
end

local function snappy_length(data)
  local v = 0
  for i = 1, math.min(#data, 5) do
    local b = sbyte(data, i)
    v = v + band(b, 0x7f) * 2 ^ (7 * (i - 1))
    if b < 0x80 then return v end
  end
  return nil
end

local function open_value_problem(m)
  local doc, i = json_value(m.value_bytes or "", 1)
  if doc ~= nil and i ~= nil and string.find(m.value_bytes, "[^ \t\r\n]", i) then doc = nil end
  if type(doc) ~= "table" or doc.is_array then return "value is not a JSON object" end
  for n = 1, #doc do
    local k, v = doc[n][1], doc[n][2]
    if k ~= "consumer_name" then return "unsupported JSON property " .. k end
    if band(m.f.flags or 0, OPEN_PRODUCER) ~= 0 then return "consumer_name on a producer connection" end
    if type(v) ~= "string" then return "consumer_name must be a string" end
  end
  return nil
end

local function join_sizes(sizes)
  table.sort(sizes)
  local out = {}
  for i = 1, #sizes do out[i] = int_text(sizes[i]) end
  return table.concat(out, " or ")
end

-- The extras sizes the server accepts here (the deletion's depend on the negotiation), as a
-- set and as text, and the extras layout of size `extlen` among them.
local function allowed_extras(shape, ctx, extlen)
  if not shape.extras_context or ctx == nil or delete_v2(ctx) == nil then
    return shape.size_set, shape.sizes_text, shape.extras_by_size[extlen]
  end
  local sizes, seen, extras = {}, {}, nil
  for i = 1, #shape.extras do
    local lay = shape.extras[i]
    if layout_allowed(lay, ctx) then
      if not seen[lay.size] then sizes[#sizes + 1], seen[lay.size] = lay.size, true end
      if lay.size == extlen then extras = lay end
    end
  end
  return seen, join_sizes(sizes), extras
end

local function layout_rule(lays, label, name, add)
  for i = 1, #lays do
    local lay = lays[i]
    if lay.label == label and lay.rule then add(lay.rule, name .. ": " .. lay.note) end
  end
end

local function verify_header(m, shape, ctx, add)
  local name = m.spec.name
  local seen, sizes_text, extras = allowed_extras(shape, ctx, m.extlen)
  if not seen[m.extlen] then
    add("extras-length", fmt("%s: extras length %d, must be %s", name, m.extlen, sizes_text))
    return
  end
  -- key
  local coll = nil
  if ctx then coll = collections(ctx) end
  if shape.key == "required" and m.keylen == 0 then
    add("key-presence", name .. ": no key, one is required")
  elseif shape.key == "forbidden" and m.keylen ~= 0 then
    add("key-presence", fmt("%s: a %d-byte key is not allowed", name, m.keylen))
  else
    local limit = MAX_COLLECTIONS_KEY_LENGTH
    if coll == false then limit = MAX_KEY_LENGTH end
    if m.keylen > limit then
      add("key-too-long", fmt("%s: key of %d bytes, at most %d", name, m.keylen, limit))
    elseif shape.document_key and coll then
      local problem = document_key_problem(tvb_raw(m.tvb, m.key_at, m.keylen))
      if problem then add("document-key-invalid", name .. ": " .. problem) end
    end
  end
  -- value
  local value = shape.value
  if extras and extras.value then value = extras.value end
  if shape.value_context == "collections" and ctx and coll == false then value = "forbidden" end
  if value == "required" and m.value_len == 0 then
    add("value-presence", name .. ": no value, one is required")
  elseif value == "forbidden" and m.value_len ~= 0 then
    local why = ""
    if shape.value ~= "forbidden" and shape.value_context then why = " (HELLO did not enable Collections)" end
    add("value-presence", fmt("%s: a %d-byte value is not allowed%s", name, m.value_len, why))
  elseif shape.value_min > 0 and m.value_len < shape.value_min then
    add("value-length", fmt("%s: value of %d bytes, at least %d required", name, m.value_len, shape.value_min))
  end
  if m.value_problem then add("value-length", name .. ": " .. m.value_problem) end
  -- CAS
  if shape.cas == "required" and m.cas_zero then
    add("cas-invalid", name .. ": CAS 0, the request must carry one")
  elseif shape.cas == "forbidden" and not m.cas_zero then
    add("cas-invalid", fmt("%s: CAS %s, must be 0", name, int_text(m.cas_range:uint64())))
  end
  -- datatype
  if m.datatype > 7 or (shape.datatypes and not shape.datatypes[m.datatype]) then
    add("datatype-invalid", fmt("%s: datatype 0x%02x not allowed", name, m.datatype))
  elseif ctx and enabled_datatypes(ctx) and band(m.datatype, bnot(enabled_datatypes(ctx))) ~= 0 then
    add("datatype-not-negotiated", fmt("%s: datatype bits 0x%02x not enabled by HELLO", name,
        u32(band(m.datatype, bnot(enabled_datatypes(ctx))))))
  end
  -- xattr blob
  if band(m.datatype, 4) ~= 0 and m.datatype <= 7 then
    local value, problem = tvb_raw(m.tvb, m.val_at, m.value_len), nil
    if band(m.datatype, 2) ~= 0 then
      local n = snappy_length(value)
      if n == nil or n < 4 then problem = "snappy value too short for an xattr blob" end
    else
      problem = xattr_problem(value)
    end
    if problem then add("xattr-invalid", name .. ": " .. problem) end
  end
  -- frame infos: the first one the server refuses
  for i = 1, #m.infos do
    local id, len = m.infos[i][1], m.infos[i][2]
    local what = fmt("%s: frame info %d (%s)", name, id, REQUEST_FRAME_INFO_NAMES[id] or "unknown")
    local legal = FRAME_INFO_SIZES[id]
    if legal == nil then
      add("frame-info-unknown", what .. " is not one the server knows") break
    elseif FRAME_INFOS_NOT_FOR_DCP[id] then
      add("frame-info-not-supported", what .. " is not supported by this opcode") break
    elseif (legal == "+" and len == 0) or (legal ~= "+" and not legal[len]) then
      add("frame-info-invalid", fmt("%s with %d bytes of data", what, len)) break
    end
  end
  -- a documented layout the server rejects
  if m.layout then
    layout_rule(shape.extras, m.layout, name, add)
    layout_rule(shape.values, m.layout, name, add)
  end
  if m.opcode == 0x50 and m.value_len > 0 then
    local problem = open_value_problem(m)
    if problem then add("open-value-invalid", "DcpOpen: " .. problem) end
  end
end

-- verify_common_dcp_restrictions and the opcodes memcached refuses from clients
local function connection_rules(m, spec, ctx, add)
  if spec.server_rejects then
    add("unsupported-on-server", fmt("%s sent to the server (answered %s)", spec.name, spec.server_rejects))
    return
  end
  if m.stream_id and is_consumer(ctx) then
    add("stream-id-on-consumer", fmt("%s with stream id %d on a consumer connection", spec.name, m.stream_id))
  end
  if m.opcode == 0x50 then
    if ctx.dcp then add("dcp-open-twice", "DcpOpen on a connection already opened for DCP") end
  elseif m.opcode ~= 0x96 and ctx.dcp == false then
    add("dcp-not-open", spec.name .. " on a connection that sent no DcpOpen since its start")
  end
end

-- verify_header without a negotiation, skipped for a header like one that passed: what it
-- judges then is the shape, the lengths' classes, datatype, CAS and layout (the message has
-- no frame infos, no xattr and no decoding problem).
local passed, n_passed = {}, 0   -- shape -> layout -> header signature -> true
local MAX_PASSED = 4096

local function verify_header_seen(m, shape, add)
  local sig = (m.extlen * 256 + m.datatype) * 32 + (m.keylen == 0 and 1 or 0)
      + (m.keylen > MAX_COLLECTIONS_KEY_LENGTH and 2 or 0) + (m.value_len == 0 and 4 or 0)
      + (m.value_len < shape.value_min and 8 or 0) + (m.cas_zero and 16 or 0)
  local by_layout = passed[shape]
  if by_layout == nil then by_layout = {} passed[shape] = by_layout end
  local sigs = by_layout[m.layout or ""]
  if sigs == nil then sigs = {} by_layout[m.layout or ""] = sigs end
  if sigs[sig] then return end
  local found = 0
  verify_header(m, shape, nil, function(rule, text) found = found + 1 add(rule, text) end)
  if found == 0 and n_passed < MAX_PASSED then
    sigs[sig], n_passed = true, n_passed + 1
  end
end

local function check_message(m, ctx, from_client, add)
  if m.overrun then
    add("header-invariant", fmt("framing extras %d + extras %d + key %d exceed body length %d",
        m.framing_len, m.extlen, m.keylen, m.bodylen))
  end
  if m.frame_error then add("framing-extras-encoding", "bad framing extras: " .. m.frame_error) end
  local spec = m.spec
  if not spec then
    if not SERVER_MAGIC[m.magic] and not OPCODE_NAMES[m.opcode] then
      add("unknown-opcode", fmt("opcode 0x%02x is not a known opcode", m.opcode))
    end
    return
  end
  if m.overrun or m.truncated then return end
  local shape = m.request and spec.req or spec.rsp
  local rctx = nil
  if from_client then rctx = ctx end
  if m.request and shape.validated then
    if rctx == nil and #m.infos == 0 and band(m.datatype, 4) == 0 and m.opcode ~= 0x50
        and not m.value_problem and not m.frame_error then
      verify_header_seen(m, shape, add)
    else
      verify_header(m, shape, rctx, add)
    end
    if from_client then connection_rules(m, spec, ctx, add) end
  else
    if m.extras_problem then add("extras-length", spec.name .. ": " .. m.extras_problem) end
    if m.value_problem then add("value-length", spec.name .. ": " .. m.value_problem) end
    if m.request and from_client and spec.server_rejects then connection_rules(m, spec, ctx, add) end
  end
  local checks = shape.checks
  for i = 1, #checks do
    local c = checks[i]
    if not check_passes(c, m) then add(c.rule, render_text(c.text, m)) end
  end
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
local tvb_range, tvb_len, tvb_reported_len = Tvb.range, Tvb.len, Tvb.reported_len
local r_uint, r_uint64 = TvbRange.uint, TvbRange.uint64
local f_magic, f_opcode, f_server_opcode, f_keylen, f_framing_len = F.magic, F.opcode, F.server_opcode, F.keylen, F.framing_len
local f_extlen, f_datatype, f_vbucket, f_status, f_bodylen = F.extlen, F.datatype, F.vbucket, F.status, F.bodylen
local f_opaque, f_cas, f_extras, f_key, f_value_len, f_value = F.opaque, F.cas, F.extras, F.key, F.value_len, F.value
local tcp_completeness = Field.new("tcp.completeness")
local DOCUMENT_TEXT = gui_enabled ~= nil and gui_enabled()   -- JSON documents as text
-- Wireshark's built-in Couchbase dissector: every message that is not DCP (HELLO, SASL,
-- Get/Set, error maps, server pushes, ...) is also handed to it, so that it shows what it
-- always showed there and `couchbase.*` filters and colouring rules keep matching.
local builtin = nil
do
  local ok, d = pcall(Dissector.get, "couchbase")
  if ok then builtin = d end
end

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
-- A flags field gets its flag names appended and one boolean item per defined bit, set or
-- not (so that `dcp.snapshot.flags.disk == 0` finds markers without it). The field named
-- `seqno` (the opcode's seqno) is also shown as dcp.by_seqno.
local function add_fields(tvb, tree, base, lay, vals, seqno)
  local fields = lay.fields
  for i = 1, #fields do
    local fd = fields[i]
    local r = tvb_range(tvb, base + fd.offset, fd.width)
    if fd.kept then
      if fd.width == 8 then vals[fd.name] = r_uint64(r) else vals[fd.name] = r_uint(r) end
    end
    local item = ti_add(tree, fd.field, r)
    local bits = fd.bits
    if bits then
      ti_append_text(item, " (" .. fd.text(r_uint(r)) .. ")")
      for j = 1, #bits do ti_add(item, bits[j][1], r) end
    end
    if fd.name == seqno then ti_add(tree, F.by_seqno, r) end
  end
end

-- Framing extras: (id << 4 | len) tags, nibble 0xF escapes to 15 + next byte.
local function dissect_frame_infos(tvb, tree, m, start, stop)
  local names = m.request and REQUEST_FRAME_INFO_NAMES or RESPONSE_FRAME_INFO_NAMES
  local sub = tree:add(F.frame_info, tvb(start, stop - start))
  sub:set_text(fmt("Framing extras (%d bytes)", stop - start))
  local pos, sid, sid_at, err, infos = start, nil, nil, nil, {}
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
    infos[#infos + 1] = {fid, flen}
    if fid == STREAM_ID_INFO and flen == 2 and sid == nil then
      sid = tvb(pos, 2):uint()
      sid_at = pos
    end
    pos = pos + flen
  end
  m.frame_error = err
  if err == nil then
    m.infos = infos
    if sid ~= nil then
      m.stream_id = sid
      tree:add(F.stream_id, tvb(sid_at, 2))
    end
  end
end

local prefixes, n_prefixes = {}, 0   -- "DcpMutation vb:3" by magic, opcode, vbucket/status

local function printable(text)        -- bytes outside printable ASCII as \xNN
  return (string.gsub(text, "[^\32-\126]", function(c) return fmt("\\x%02x", sbyte(c)) end))
end

local function seqno_text(v)          -- a seqno, "max" for the largest
  if string.lower(v:tohex()) == "ffffffffffffffff" then return "max" end
  return int_text(v)
end

local function stream_request_text(f)
  return "start=" .. int_text(f.start_seqno) .. " end=" .. seqno_text(f.end_seqno)
      .. " snap=[" .. int_text(f.snap_start_seqno) .. "," .. int_text(f.snap_end_seqno)
      .. "] uuid=" .. int_text(f.vbucket_uuid)
end

local function summary(m)
  local key = (m.magic * 256 + m.opcode) * 65536 + (m.vbucket or m.status)
  local s = prefixes[key]
  if s == nil then
    if SERVER_MAGIC[m.magic] then
      s = SERVER_OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    else
      s = OPCODE_NAMES[m.opcode] or fmt("unknown:0x%02x", m.opcode)
    end
    if m.request then
      if not m.spec or m.spec.vbucket then s = s .. " vb:" .. m.vbucket end
    elseif m.status ~= 0 then s = s .. " " .. (STATUS_NAMES[m.status] or fmt("status:0x%x", m.status))
    else s = s .. " rsp" end
    if n_prefixes >= 4096 then prefixes, n_prefixes = {}, 0 end
    prefixes[key], n_prefixes = s, n_prefixes + 1
  end
  if m.stream_id then s = s .. " sid:" .. int_text(m.stream_id) end
  local f = m.f
  if m.opcode == 0x53 and m.request and f.start_seqno and f.snap_start_seqno then
    s = s .. " " .. stream_request_text(f)
  elseif m.opcode == 0x50 and m.request and f.flags and m.name_text then
    local role = "consumer"
    if band(f.flags, OPEN_PRODUCER) ~= 0 then role = "producer" end
    s = s .. " " .. m.name_text .. " (" .. role .. ")"
  elseif m.opcode == 0x56 and f.start_seqno and f.end_seqno then
    s = s .. " [" .. int_text(f.start_seqno) .. ".." .. int_text(f.end_seqno) .. "] " .. (m.layout or "")
  elseif m.spec and m.spec.seqno and f[m.spec.seqno] then
    s = s .. " seqno=" .. int_text(f[m.spec.seqno])
  elseif f.failover_log then
    s = s .. " failover_log(" .. #f.failover_log .. ")"
  elseif f.rollback_seqno then
    s = s .. " rollback_seqno=" .. int_text(f.rollback_seqno)
  end
  return s
end

local info_frame, info_text = nil, nil   -- the frame and Info text this dissector last wrote

-- One Info update per dissector call; a second call for the same frame (bytes after a
-- reassembled message) appends.
local function set_info(pinfo, text)
  local col = pinfo.cols.info
  local cur = tostring(col)
  if cur == "(info)" then return end    -- no columns in this run (tshark -T fields)
  if info_frame == pinfo.number and cur == info_text then
    col:append("; " .. text)
  else
    col:set(text)
  end
  info_frame, info_text = pinfo.number, tostring(col)
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

local expert_node = nil   -- the message node that check_message's findings go to

local function add_expert(rule, msg)
  ti_expert(expert_node, EXPERTS[rule], "[" .. rule .. "] " .. msg)
end

-- The message being dissected: one table, refilled for every message.
local msg = {magic = 0, opcode = 0, bodylen = 0, extlen = 0, datatype = 0, request = false,
             f = false, framing_len = 0, keylen = 0, k_end = 0, value_len = 0, vbucket = 0,
             status = 0, spec = false, layout = false, stream_id = false, frame_error = false}
local NO_INFOS = {}

-- One message at `off`, of which `cap` bytes are captured (`plen` in all), `head` its first
-- 12 bytes; returns its Info text. Extras fields go straight into the message's subtree.
local connection   -- defined below: the negotiation of the frame's connection
local link         -- defined below: a request's response, a response's request
local account      -- defined below: the DCP streams statistics

-- The key. The key of a document opcode's request on a connection whose HELLO enabled
-- Collections is shown as its collection id (leb128) and the logical key, so that
-- `dcp.key contains "foo"` sees the key.
local function add_key(tvb, node, spec, at, len, pinfo, from_client)
  if spec and spec.document and collections(connection(pinfo, from_client).ctx) then
    local cid, prefix = split_collection_key(tvb_raw(tvb, at, len < 5 and len or 5))
    if cid then
      local r = tvb_range(tvb, at, prefix)
      local item = ti_add(node, F.collection_id, r, cid)
      local name = collection_name(cid)
      if name then
        ti_append_text(item, " (" .. name .. ")")
        ti_set_generated(ti_add(node, F.collection_name, r, name))
      end
      at, len = at + prefix, len - prefix
    end
  end
  if len > 0 then ti_add(node, f_key, tvb_range(tvb, at, len)) end
end

local function dissect_message(tvb, tree, off, cap, plen, head, pinfo, from_client)
  if cap < HEADER_SIZE then
    local node = ti_add(tree, dcp, tvb_range(tvb, off, cap))
    ti_set_text(node, "Couchbase DCP: header cut by the capture")
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d header bytes",
        cap, HEADER_SIZE))
    return "[cut by the capture]"
  end
  local h1, h2, h3, h4, h5, h6, h7, h8, h9, h10, h11, h12, h13, h14, h15, h16, h17, h18, h19, h20, h21, h22, h23, h24 = sbyte(head, 1, 24)
  local magic = h1
  local opcode = h2
  local keylen = (h3) * 256 + h4
  local extlen = h5
  local datatype = h6
  local specific = (h7) * 256 + h8
  local bodylen = (((h9) * 256 + h10) * 256 + h11) * 256 + h12
  local opaque = (((h13) * 256 + h14) * 256 + h15) * 256 + h16
  local cas_zero = h17 + h18 + h19 + h20 + h21 + h22 + h23 + h24 == 0
  local framing_len = 0
  if FLEX_MAGIC[magic] then framing_len = h3 keylen = h4 end
  if not MAGIC_NAMES[magic] then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("illegal magic 0x%02x", magic), "unknown-magic")
  end
  if HEADER_SIZE + bodylen > MAX_FRAME_SIZE then
    return dissect_garbage(tvb, tree, off, cap, plen, fmt("body length %d exceeds the %d MiB frame limit",
        bodylen, math.floor(MAX_FRAME_SIZE / 1048576)), "frame-too-large")
  end
  local request, server = REQUEST_MAGIC[magic] == true, SERVER_MAGIC[magic]
  local k_end = framing_len + extlen + keylen
  local m = msg
  m.magic, m.opcode, m.bodylen, m.extlen, m.datatype = magic, opcode, bodylen, extlen, datatype
  m.request, m.f, m.framing_len, m.keylen, m.k_end = request, {}, framing_len, keylen, k_end
  m.value_len, m.spec, m.layout, m.stream_id, m.frame_error = bodylen - k_end, nil, nil, nil, nil
  m.opaque, m.infos, m.overrun, m.truncated = opaque, NO_INFOS, k_end > bodylen, false
  m.extras_problem, m.value_problem, m.value_bytes = nil, nil, nil
  m.tvb, m.key_at = tvb, off + HEADER_SIZE + framing_len + extlen
  m.val_at = m.key_at + keylen
  if request then m.vbucket, m.status = specific, nil else m.vbucket, m.status = nil, specific end
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
  for i = 1, #DATATYPE_BITS do ti_add(dt, DATATYPE_BITS[i][1], dtr) end
  ti_add(node, request and f_vbucket or f_status, tvb_range(tvb, off + 6, 2))
  local r_bodylen = tvb_range(tvb, off + 8, 4)
  ti_add(node, f_bodylen, r_bodylen)
  ti_add(node, f_opaque, tvb_range(tvb, off + 12, 4))
  local r_cas = tvb_range(tvb, off + 16, 8)
  ti_add(node, f_cas, r_cas)
  m.cas_zero, m.cas_range = cas_zero, r_cas

  local complete = cap >= HEADER_SIZE + bodylen
  m.truncated = not complete
  if not complete then
    ti_expert(node, e_truncated, fmt("PDU cut by the capture: %d of %d bytes",
        cap, HEADER_SIZE + bodylen))
  end
  local body = off + HEADER_SIZE
  local e_end = framing_len + extlen
  local have = cap - HEADER_SIZE      -- body bytes captured: a cut message shows what they hold
  -- framing extras (the part of them inside the body)
  if framing_len > 0 and have >= math.min(framing_len, bodylen) then
    dissect_frame_infos(tvb, node, m, body, body + math.min(framing_len, bodylen))
  end
  if k_end <= bodylen and have >= e_end then
    local spec, shape = m.spec, nil
    if spec then
      if request then shape = spec.req else shape = spec.rsp end
    end
    -- extras
    if extlen > 0 then
      local ext_at = body + framing_len
      local lay = shape and shape.extras_by_size[extlen]
      if lay then
        add_fields(tvb, node, ext_at, lay, m.f, spec and spec.seqno)
        m.layout = lay.label
      else
        ti_add(node, f_extras, tvb_range(tvb, ext_at, extlen))
        if shape then m.extras_problem = fmt("extras length %d not in %s", extlen, shape.extras_sizes) end
      end
    end
    if keylen > 0 and have > e_end then
      add_key(tvb, node, request and spec, body + e_end, math.min(keylen, have - e_end), pinfo,
              from_client)
    end
    local n = m.value_len
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, n))
    local val_at = body + k_end
    if not complete then
      n = 0                           -- the value was not captured whole: not decoded
    elseif n > 0 and (opcode == 0x1f or (shape and shape.keep_value)) then
      m.value_bytes = tvb_raw(tvb, val_at, n)
    end
    local decoded, wanted = false, nil
    if shape and #shape.values > 0 and complete then
      for i = 1, #shape.values do
        local lay = shape.values[i]
        if layout_matches(lay, m) then
          wanted = (wanted and wanted .. "/" or "") .. lay.size .. (lay.rep and "*n" or "")
          if lay.rep then
            if n % lay.size == 0 and (n > 0 or #lay.when > 0) then
              local vt = node:add(f_value, tvb(val_at, n))
              local entries, count = {}, math.floor(n / lay.size)
              vt:set_text(fmt("Value: %s, %d entries", lay.rep, count))
              vt:add(F.failover_log_count, tvb(val_at, n), count):set_generated()
              for k = 0, count - 1 do
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
            add_fields(tvb, vt, val_at, lay, m.f, spec and spec.seqno)
            m.layout = lay.label
            decoded = true
            break
          end
        end
      end
    end
    if not decoded and n > 0 then
      local item = ti_add(node, f_value, tvb_range(tvb, val_at, n))
      -- Text values as text, as the built-in dissector shows them: DcpControl's, DcpOpen's
      -- and stream requests', and in the GUI documents whose datatype says JSON (in tshark a
      -- text label on every document would cost 15% of the CPU).
      if (shape and shape.text_value) or (DOCUMENT_TEXT and spec and spec.document
                                          and datatype % 4 == 1) then
        ti_set_text(item, "Value: " .. printable(tvb_raw(tvb, val_at, math.min(n, 256)))
                    .. (n > 256 and "..." or ""))
      end
    end
    if not decoded and wanted and complete then
      m.value_problem = fmt("value length %d does not match %s", n, wanted)
    end
    if m.layout and spec and spec.layout_field then
      ti_set_generated(ti_add(node, spec.layout_field, m.layout))
    end
  elseif complete or k_end <= bodylen then
    ti_set_generated(ti_add(node, f_value_len, r_bodylen, m.value_len))
  end

  m.name_text = nil
  if opcode == 0x50 and request then      -- DcpOpen: its name (the key) in the Info column
    local n = math.min(keylen, off + cap - m.key_at)
    if n >= 0 then
      m.name_text = '"' .. printable(tvb_raw(tvb, m.key_at, n)) .. '"'
    end
  end
  local text = summary(m)
  ti_set_text(node, "Couchbase DCP, " .. text)
  link(node, m, pinfo, from_client, off)
  account(m, pinfo, from_client)
  expert_node = node
  -- the negotiation matters for what the client sends and for HELLO / DcpOpen answers
  local conn = nil
  if from_client or opcode == 0x1f or opcode == 0x50 then conn = connection(pinfo, from_client) end
  check_message(m, conn and conn.ctx, from_client, add_expert)
  if conn then
    if complete or (opcode == 0x50 and m.f.flags ~= nil) then   -- a cut DcpOpen: its flags
      negotiate(conn, m, from_client)
    else
      negotiate_cut(conn, m, from_client)
    end
  end
  if opcode == 0x5f and request and complete and keylen > 0 and m.value_len > 0
      and not pinfo.visited then
    learn_names(m.f.event, m.f.version, tvb_raw(tvb, m.key_at, keylen),
                tvb_raw(tvb, m.val_at, m.value_len))
  end
  if builtin and complete and not m.spec then
    builtin:call(tvb_range(tvb, off, cap):tvb(), pinfo, tree)
    local shown = tostring(pinfo.cols.info)
    if shown ~= "(info)" and shown ~= "" then text = shown end
    return text, false
  end
  return text, true
end

local texts = {}   -- Info texts of the messages of one dissector call

local call_conn = nil   -- the connection of the current dissector call, once looked up
local tcp_stream = Field.new("tcp.stream")
local stream_keys = {}  -- 2 * tcp.stream (+ 1 from the client) -> "client-server"

local function last(...)
  local n = select("#", ...)
  if n > 0 then return (select(n, ...)) end
end

-- "client-server" of the frame's TCP connection; each TCP stream's is built once.
local function connection_key(pinfo, from_client)
  local stream = last(tcp_stream())
  local skey = stream and stream.value * 2 + (from_client and 1 or 0)
  local key = skey and stream_keys[skey]
  if key == nil then
    local a, b = tostring(pinfo.src) .. ":" .. pinfo.src_port, tostring(pinfo.dst) .. ":" .. pinfo.dst_port
    if not from_client then a, b = b, a end
    key = a .. "-" .. b
    if skey then stream_keys[skey] = key end
  end
  return key
end

-- Requests and responses linked as Wireshark's request/response protocols show them: a
-- response names its request's frame and the time since it, a request its response's frame
-- once that is known (Wireshark's second pass: the GUI, tshark -2). A request is known by its
-- TCP stream, the side that sent it, its opaque and opcode; stream items are left out (they
-- are answered only on errors). A message is known by its frame and offset.
local requests, n_requests = {}, 0   -- request key -> {message, abs_ts}
local answered, answers = {}, {}     -- request -> response; response -> {request, seconds}

link = function(node, m, pinfo, from_client, off)
  if m.spec and m.spec.item then return end
  local stream = last(tcp_stream())
  if stream == nil then return end
  local here = pinfo.number .. ":" .. off
  local sender = from_client
  if not m.request then sender = not from_client end
  local key = fmt("%d:%s:%d:%d", stream.value, tostring(sender), m.opaque, m.opcode)
  if m.request then
    if not pinfo.visited then
      if n_requests >= 65536 then requests, n_requests = {}, 0 end
      requests[key], n_requests = {here, pinfo.abs_ts}, n_requests + 1
    end
    local rsp = answered[here]
    if rsp then ti_set_generated(ti_add(node, F.response_in, tonumber(string.match(rsp, "^%d+")))) end
  else
    if not pinfo.visited then
      local req = requests[key]
      if req then
        requests[key], n_requests = nil, n_requests - 1
        answered[req[1]], answers[here] = here, {req[1], pinfo.abs_ts - req[2]}
      end
    end
    local a = answers[here]
    if a then
      ti_set_generated(ti_add(node, F.response_to, tonumber(string.match(a[1], "^%d+"))))
      local secs = math.floor(a[2])
      ti_set_generated(ti_add(node, F.time, NSTime.new(secs, math.floor((a[2] - secs) * 1e9 + 0.5))))
    end
  end
end

-- DCP streams (Statistics > DCP Streams; tshark -z dcp,streams) -------------------------------
-- Per stream (TCP connection, vbucket, stream id) what the first pass saw: its request and
-- answer, markers, items, first and last seqno, last snapshot and end; `dcpdissect streams`
-- gives the same per stream, with the analyzer's findings.
local streams, stream_list, opened = {}, {}, {}   -- opened: connection opaque -> stream
local call_key = nil     -- the connection of the current dissector call, once looked up

-- The stream of (connection, vbucket, stream id); a new one from each stream request.
local function stream_at(conn, vb, sid, new)
  local of_conn = streams[conn]
  if of_conn == nil then of_conn = {} streams[conn] = of_conn end
  local key = vb * 65536 + (sid or 65535)
  local s = of_conn[key]
  if s == nil or new then
    s = {conn = conn, vb = vb, sid = sid, requested = "-", answer = "-", markers = 0,
         items = 0, first = nil, last = nil, snapshot = "-", ended = "-"}
    of_conn[key] = s
    stream_list[#stream_list + 1] = s
  end
  return s
end

-- A stream request names its stream id in its JSON value ({"sid": 7}).
local function requested_sid(m)
  if m.stream_id or not m.value_bytes then return m.stream_id end
  local doc = json_value(m.value_bytes, 1)
  if type(doc) ~= "table" or doc.is_array then return nil end
  for n = 1, #doc do         -- an object: {key, value} pairs in order
    if doc[n][1] == "sid" and type(doc[n][2]) == "number" then return doc[n][2] end
  end
  return nil
end

account = function(m, pinfo, from_client)
  local spec = m.spec
  if pinfo.visited or not spec or not spec.vbucket then return end
  call_key = call_key or connection_key(pinfo, from_client)
  local f, conn = m.f, call_key
  if m.request and m.opcode == 0x53 then
    local s = stream_at(conn, m.vbucket, requested_sid(m), true)
    if f.start_seqno and f.snap_start_seqno then s.requested = stream_request_text(f) end
    opened[conn .. "|" .. m.opaque] = s
  elseif not m.request and m.opcode == 0x53 then
    local s = opened[conn .. "|" .. m.opaque]
    if s == nil then return end
    if m.status == 0 then
      s.answer = "success"
      if f.failover_log then s.answer = s.answer .. ", failover log of " .. #f.failover_log end
    elseif f.rollback_seqno then
      s.answer = "rollback to " .. int_text(f.rollback_seqno)
    else
      s.answer = STATUS_NAMES[m.status] or fmt("status 0x%x", m.status)
    end
  elseif m.request and spec.stream then
    local s = stream_at(conn, m.vbucket, m.stream_id)
    if m.opcode == 0x56 and f.start_seqno then
      s.markers = s.markers + 1
      s.snapshot = "[" .. int_text(f.start_seqno) .. "," .. int_text(f.end_seqno) .. "]"
    elseif m.opcode == 0x55 then
      s.ended = VS_STREAM_END_REASON[f.reason] or (f.reason and int_text(f.reason)) or "yes"
    elseif spec.item then
      s.items = s.items + 1
    end
    local seqno = spec.seqno and f[spec.seqno]
    if seqno then
      s.first = s.first or seqno
      s.last = seqno
    end
  end
end

-- The streams as a text table, in the order they were first seen.
local function streams_text()
  local rows = {{"connection", "vb", "sid", "requested", "answer", "markers", "items", "seqnos",
                 "last snapshot", "end"}}
  for _, s in ipairs(stream_list) do
    local seqnos = "-"
    if s.first then seqnos = int_text(s.first) .. ".." .. int_text(s.last) end
    rows[#rows + 1] = {(string.gsub(s.conn, "%-", " -> ")), int_text(s.vb),
                       s.sid and int_text(s.sid) or "-", s.requested, s.answer,
                       int_text(s.markers), int_text(s.items), seqnos, s.snapshot, s.ended}
  end
  local widths = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do widths[i] = math.max(widths[i] or 0, #cell) end
  end
  local out = {}
  for _, row in ipairs(rows) do
    local cells = {}
    for i, cell in ipairs(row) do cells[i] = cell .. string.rep(" ", widths[i] - #cell) end
    out[#out + 1] = (string.gsub(table.concat(cells, "  "), "%s+$", ""))
  end
  return "DCP streams: " .. #stream_list .. "\n" .. table.concat(out, "\n") .. "\n"
end

local function streams_window()
  TextWindow.new("DCP streams"):set(streams_text())
end

if register_stat_cmd_arg then       -- -z dcp,streams: printed by tshark, a window in the GUI
  register_stat_cmd_arg("dcp,streams", function()
    local tap, shown = Listener.new("frame", "dcp"), false
    function tap.draw()
      if not gui_enabled() then
        io.write(streams_text())
      elseif not shown then
        shown = true
        streams_window()
      end
    end
  end)
end
if gui_enabled and gui_enabled() then
  register_menu("DCP Streams", streams_window, MENU_STAT_GENERIC)
end

-- The connection's negotiation as it was when this frame was first dissected (recorded on
-- the first pass, replayed when Wireshark dissects the frame again).
connection = function(pinfo, from_client)
  if call_conn then return call_conn end
  local key = connection_key(pinfo, from_client)
  local conn = contexts[key]
  if conn == nil then
    local start = tcp_completeness()
    local dcp_state = nil
    if start and band(start.value, 1) ~= 0 then dcp_state = false end
    local ctx = {dcp = dcp_state}
    conn = {ctx = ctx, first = ctx, history = {}, pending = {}}
    contexts[key] = conn
  end
  local frame = pinfo.number
  if pinfo.visited then
    conn = {ctx = ctx_before(conn, frame), pending = {}}
  end
  changed_in = frame
  call_conn = conn
  return conn
end

-- Messages are cut from the TCP stream here rather than with dissect_tcp_pdus (one Lua
-- call per segment instead of two per message): a message that runs past the segment
-- asks TCP for more bytes (pinfo.desegment_offset/len) and comes back reassembled.
-- An implausible header swallows the rest of the segment.
function dcp.dissector(tvb, pinfo, tree)
  local captured, reported = tvb_len(tvb), tvb_reported_len(tvb)
  local can_desegment = pinfo.can_desegment > 0
  local n_texts, off, dcp_seen = 0, 0, false
  local from_client = owned[pinfo.dst_port] ~= nil and owned[pinfo.src_port] == nil
  call_conn, call_key = nil, nil
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
      head = tvb_raw(tvb, off, 24)
      local magic, _, _, _, _, _, _, _, l1, l2, l3, l4 = sbyte(head, 1, 12)
      local size = HEADER_SIZE + ((l1 * 256 + l2) * 256 + l3) * 256 + l4
      if MAGIC_NAMES[magic] and size <= MAX_FRAME_SIZE then plen = size end
    end
    if plen > avail and can_desegment then
      pinfo.desegment_offset, pinfo.desegment_len = off, plen - avail
      break
    end
    local ok, text, own = pcall(dissect_message, tvb, tree, off, avail < plen and avail or plen, plen,
                                head, pinfo, from_client)
    if not ok then
      ti_expert(tree, e_internal, "dcpdissect: " .. tostring(text))
      text = "[dissector error]"
    end
    dcp_seen = dcp_seen or own ~= false
    n_texts = n_texts + 1
    texts[n_texts] = text
    off = off + plen
  end
  -- The protocol column says DCP when a message of this call was not the built-in's.
  if dcp_seen or n_texts == 0 then pinfo.cols.protocol = "DCP" end
  if n_texts > 0 then set_info(pinfo, table.concat(texts, "; ", 1, n_texts)) end
  return captured
end

function dcp.init()
  info_frame, info_text = nil, nil
  requests, n_requests, answered, answers = {}, 0, {}, {}
  streams, stream_list, opened = {}, {}, {}
  contexts, stream_keys = {}, {}
  scope_names, collection_names = {}, {}
end

-- Ports ------------------------------------------------------------------------------------
dcp.prefs.tcp_ports = Pref.range("TCP ports", "11210,11209",
    "TCP ports decoded as DCP/MCBP (the built-in couchbase dissector is replaced there)", 65535)

local tcp_table = DissectorTable.get("tcp.port")

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

-- TLS: with `-o tls.keylog_file:FILE` Wireshark decrypts the connections and hands the
-- application data of the TLS ports (preference dcp.tls_ports) to this dissector.
dcp.prefs.tls_ports = Pref.range("TLS ports", "11207",
    "TLS ports whose decrypted application data is DCP/MCBP (set tls.keylog_file)", 65535)

local tls_table, tls_owned = DissectorTable.get("tls.port"), {}

local function take_tls_ports(ranges)
  local wanted = port_list(ranges)
  for p in pairs(tls_owned) do
    if not wanted[p] then tls_table:remove(p, dcp) tls_owned[p] = nil end
  end
  for p in pairs(wanted) do
    if not tls_owned[p] then tls_table:add(p, dcp) tls_owned[p] = true end
  end
end

take_tls_ports("11207")

function dcp.prefs_changed()
  take_ports(tostring(dcp.prefs.tcp_ports))
  take_tls_ports(tostring(dcp.prefs.tls_ports))
end

-- Findings in packet comments ----------------------------------------------------------------
-- `dcpdissect analyze --annotate` and the evidence bundles write one packet comment
-- "[rule] message" per finding on each of its frames; a postdissector shows them under their
-- own tree, each as an expert info of the rule's own severity (errors are errors).
local findings = Proto("dcpfindings", "dcpdissect findings")
local f_finding = ProtoField.string("dcpfindings.finding", "Finding")
local f_finding_rule = ProtoField.string("dcpfindings.rule", "Rule")
local f_finding_severity = ProtoField.string("dcpfindings.severity", "Severity")
local e_findings = {
  error = ProtoExpert.new("dcpfindings.error", "dcpdissect finding (error)",
                          expert.group.PROTOCOL, expert.severity.ERROR),
  warning = ProtoExpert.new("dcpfindings.warning", "dcpdissect finding (warning)",
                            expert.group.PROTOCOL, expert.severity.WARN),
  info = ProtoExpert.new("dcpfindings.info", "dcpdissect finding (info)",
                         expert.group.PROTOCOL, expert.severity.NOTE),
}
findings.fields = {f_finding, f_finding_rule, f_finding_severity}
findings.experts = {e_findings.error, e_findings.warning, e_findings.info}
local comment_field
for _, name in ipairs({"frame.comment", "pkt_comment"}) do
  local ok, field = pcall(Field.new, name)
  if ok then comment_field = field break end
end

function findings.dissector(tvb, pinfo, tree)
  if comment_field == nil or comment_field() == nil then return end   -- most frames
  local node
  for _, c in ipairs({comment_field()}) do
    local text = tostring(c.value)
    local rule = string.match(text, "^%[([%w][%w%-]*)%] ")
    local severity = rule and RULE_SEVERITY[rule]
    if severity then
      node = node or tree:add(findings, tvb(0, 0))
      local item = node:add(f_finding, text)
      item:add(f_finding_rule, rule):set_generated()
      item:add(f_finding_severity, severity):set_generated()
      item:add_proto_expert_info(e_findings[severity], text)
    end
  end
end

register_postdissector(findings)
