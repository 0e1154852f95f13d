"""Magics, header layout, datatypes, status codes, framing-extras ids and DCP flag sets."""

from __future__ import annotations

from .model import FlagSet, ValueNames

HEADER_SIZE = 24
MAX_FRAME_SIZE = 30 * 1024 * 1024          # server default max_packet_size (24 + body)

MAGIC_CLIENT_REQUEST = 0x80
MAGIC_ALT_CLIENT_REQUEST = 0x08
MAGIC_CLIENT_RESPONSE = 0x81
MAGIC_ALT_CLIENT_RESPONSE = 0x18
MAGIC_SERVER_REQUEST = 0x82
MAGIC_SERVER_RESPONSE = 0x83

MAGICS = ValueNames("magic", {
    0x80: "ClientRequest",
    0x08: "AltClientRequest",
    0x81: "ClientResponse",
    0x18: "AltClientResponse",
    0x82: "ServerRequest",
    0x83: "ServerResponse",
})
REQUEST_MAGICS = frozenset({0x80, 0x08, 0x82})
RESPONSE_MAGICS = frozenset({0x81, 0x18, 0x83})
FLEXIBLE_MAGICS = frozenset({0x08, 0x18})
SERVER_MAGICS = frozenset({0x82, 0x83})

SERVER_OPCODES = ValueNames("server_opcode", {
    0x01: "ClustermapChangeNotification",
    0x02: "Authenticate",
    0x03: "ActiveExternalUsers",
    0x04: "GetAuthorization",
})

DATATYPE = FlagSet("datatype", {0x01: "json", 0x02: "snappy", 0x04: "xattr"})
DATATYPE_MAX = 0x07
DATATYPE_RAW = 0x00
DATATYPE_ALL = frozenset(range(8))         # McbpValidator::AllSupportedDatatypes
# dcp_deletion_validator valid_dcp_delete_datatype: RAW, snappy, xattr (+snappy, +JSON)
DELETION_DATATYPES = frozenset({0x00, 0x02, 0x04, 0x05, 0x06, 0x07})

STATUS = ValueNames("status", {
    0x00: "Success", 0x01: "KeyEnoent", 0x02: "KeyEexists", 0x03: "E2big",
    0x04: "Einval", 0x05: "NotStored", 0x06: "DeltaBadval", 0x07: "NotMyVbucket",
    0x08: "NoBucket", 0x09: "Locked", 0x0A: "DcpStreamNotFound", 0x0B: "OpaqueNoMatch",
    0x0C: "EWouldThrottle", 0x0D: "EConfigOnly", 0x0E: "NotLocked", 0x0F: "CasValueInvalid",
    0x1F: "AuthStale", 0x20: "AuthError", 0x21: "AuthContinue", 0x22: "Erange",
    0x23: "Rollback", 0x24: "Eaccess", 0x25: "NotInitialized",
    0x26: "EncryptionKeyNotAvailable", 0x27: "ChecksumMismatch", 0x28: "ExpiryOverflow",
    0x29: "LockExpiryOverflow",
    0x30: "RateLimitedNetworkIngress", 0x31: "RateLimitedNetworkEgress",
    0x32: "RateLimitedMaxConnections", 0x33: "RateLimitedMaxCommands",
    0x34: "ScopeSizeLimitExceeded", 0x35: "BucketSizeLimitExceeded",
    0x36: "BucketResidentRatioTooLow", 0x37: "BucketDataSizeTooBig",
    0x38: "BucketDiskSpaceTooLow",
    0x50: "BucketPaused", 0x51: "Cancelled",
    0x80: "UnknownFrameInfo", 0x81: "UnknownCommand", 0x82: "Enomem", 0x83: "NotSupported",
    0x84: "Einternal", 0x85: "Ebusy", 0x86: "Etmpfail", 0x87: "XattrEinval",
    0x88: "UnknownCollection", 0x8A: "CannotApplyCollectionsManifest",
    0x8C: "UnknownScope", 0x8D: "DcpStreamIdInvalid",
    0xA0: "DurabilityInvalidLevel", 0xA1: "DurabilityImpossible",
    0xA2: "SyncWriteInProgress", 0xA3: "SyncWriteAmbiguous",
    0xA4: "SyncWriteReCommitInProgress",
    0xA5: "RangeScanCancelled", 0xA6: "RangeScanMore", 0xA7: "RangeScanComplete",
    0xA8: "VbUuidNotEqual",
})
STATUS_SUCCESS = 0x00
STATUS_ROLLBACK = 0x23

# Framing extras: one byte (id << 4 | len), 0xF nibble = escape (next byte + 15).
FRAME_INFO_ESCAPE = 0x0F
REQUEST_FRAME_INFOS = ValueNames("request_frame_info", {
    0: "Barrier", 1: "DurabilityRequirement", 2: "DcpStreamId", 3: "OpenTracingContext",
    4: "Impersonate", 5: "PreserveTtl", 6: "ImpersonateExtraPrivilege",
    7: "ImpersonateWithTokenAuthDataId",
})
RESPONSE_FRAME_INFOS = ValueNames("response_frame_info", {
    0: "ServerRecvSendDuration", 1: "ReadUnits", 2: "WriteUnits", 3: "ThrottleDuration",
})
FRAME_INFO_STREAM_ID = 2
# mcbp_validators.cc parseFrameExtras: the data sizes the server accepts per request frame
# info id ("+": any non-empty); any other id is answered UnknownFrameInfo (3, the removed
# OpenTracingContext, included). Durability and PreserveTtl only go with the opcodes that
# support them (opcode.cc is_durability_supported / is_preserve_ttl_supported), no DCP one.
REQUEST_FRAME_INFO_SIZES = {0: (0,), 1: (1, 3), 2: (2,), 4: "+", 5: (0,), 6: "+", 7: (2,)}
FRAME_INFOS_NOT_FOR_DCP = frozenset({1, 5})

# HELLO features (include/mcbp/protocol/feature.h); the server's HELLO response lists the
# ones it enabled for the connection.
HELLO_FEATURES = ValueNames("hello_feature", {
    0x01: 'Invalid', 0x02: 'TLS', 0x03: 'TcpNoDelay', 0x04: 'MUTATION_SEQNO',
    0x05: 'TCPDELAY_Unsupported', 0x06: 'XATTR', 0x07: 'XERROR', 0x08: 'SELECT_BUCKET',
    0x09: 'Invalid2', 0x0A: 'SNAPPY', 0x0B: 'JSON', 0x0C: 'Duplex',
    0x0D: 'ClustermapChangeNotification', 0x0E: 'UnorderedExecution', 0x0F: 'Tracing',
    0x10: 'AltRequestSupport', 0x11: 'SyncReplication', 0x12: 'Collections',
    0x13: 'SnappyEverywhere', 0x14: 'PreserveTtl', 0x15: 'VAttr', 0x16: 'Invalid3',
    0x17: 'SubdocCreateAsDeleted', 0x18: 'SubdocDocumentMacroSupport',
    0x19: 'SubdocReplaceBodyWithXattr', 0x1A: 'ReportUnitUsage',
    0x1B: 'NonBlockingThrottlingMode', 0x1C: 'SubdocReplicaRead',
    0x1D: 'GetClusterConfigWithKnownVersion', 0x1E: 'DedupeNotMyVbucketClustermap',
    0x1F: 'ClustermapChangeNotificationBrief', 0x20: 'SubdocAllowsAccessOnMultipleXattrKeys',
    0x21: 'SubdocBinaryXattr', 0x22: 'RangeScanIncludeXattr',
    0x23: 'SubdocAllowReplicaReadOnDeletedDocs', 0x24: 'GetRandomKeyIncludeXattr',
    0x25: 'MutateWithMeta', 0x26: 'DcpSkipDeletesInInitialBackfill',
})
FEATURE_COLLECTIONS = 0x12
# Features that enable a datatype bit (Connection::enableDatatype: JSON, SNAPPY, XATTR).
DATATYPE_FEATURES = {0x0B: 0x01, 0x0A: 0x02, 0x06: 0x04}

DURABILITY_LEVELS = ValueNames("durability_level", {
    0: "None", 1: "Majority", 2: "MajorityAndPersistOnMaster", 3: "PersistToMajority",
})

DCP_OPEN_FLAGS = FlagSet("dcp_open_flags", {
    0x001: "producer",
    0x002: "invalid",
    0x004: "include_xattrs",
    0x008: "no_value",
    0x010: "unused",
    0x020: "include_delete_times",
    0x040: "no_value_with_underlying_datatype",
    0x080: "pitr_unsupported",
    0x100: "include_deleted_user_xattrs",
    0x200: "skip_deletes_in_initial_backfill",
})

# Shared by Add Stream (0x51) and Stream Request (0x53).
STREAM_FLAGS = FlagSet("stream_flags", {
    0x001: "takeover",
    0x002: "disk_only",
    0x004: "to_latest",
    0x008: "no_value",
    0x010: "active_vb_only",
    0x020: "strict_vbuuid",
    0x040: "from_latest",
    0x080: "ignore_purged_tombstones",
    0x100: "cache_transfer",
})

SNAPSHOT_FLAGS = FlagSet("snapshot_flags", {
    0x01: "memory",
    0x02: "disk",
    0x04: "checkpoint",
    0x08: "ack",
    0x10: "history",
    0x20: "may_contain_duplicates",
}, titles={
    0x01: "Memory", 0x02: "Disk", 0x04: "Checkpoint", 0x08: "Acknowledge",
    0x10: "History", 0x20: "May Duplicate Keys",
})
SNAPSHOT_MEMORY, SNAPSHOT_DISK, SNAPSHOT_CHECKPOINT = 0x01, 0x02, 0x04
SNAPSHOT_ACK, SNAPSHOT_HISTORY, SNAPSHOT_MAY_DUPLICATE = 0x08, 0x10, 0x20

MARKER_VERSIONS = ValueNames("marker_version", {0: "V2.0", 1: "V2.1 (removed)", 2: "V2.2"})

STREAM_END_REASONS = ValueNames("stream_end_reason", {
    0: "Ok", 1: "Closed", 2: "StateChanged", 3: "Disconnected", 4: "Slow",
    5: "BackfillFail", 6: "Rollback", 7: "FilterEmpty", 8: "LostPrivileges",
})

VBUCKET_STATES = ValueNames("vbucket_state", {1: "active", 2: "replica", 3: "pending", 4: "dead"})

OSO_FLAGS = FlagSet("oso_flags", {0x01: "start", 0x02: "end"})

SYSTEM_EVENTS = ValueNames("system_event", {
    0: "BeginCollection", 1: "EndCollection", 2: "Reserved", 3: "CreateScope",
    4: "DropScope", 5: "ModifyCollection",
})
SYSTEM_EVENT_VERSIONS = ValueNames("system_event_version", {0: "version0", 1: "version1",
                                                             2: "version2"})

# Document keys (include/memcached/limits.h, dockey_view.h; McbpValidator::is_document_key_valid):
# a key is at most 250 bytes, 251 with the leb128 collection prefix of a collections-aware
# connection; the logical key of a non-default collection at most 246; collection ids 1-7
# are reserved.
MAX_KEY_LENGTH = 250
MAX_COLLECTIONS_KEY_LENGTH = 251
MAX_COLLECTIONS_LOGICAL_KEY_LENGTH = 246
RESERVED_COLLECTION_IDS = range(1, 8)

# Extended attributes (xattr/utils.cc validate, key_validator.cc): a key is shorter than 16
# bytes; system xattrs ("_" keys) may use at most 1 MiB (limits.h PrivilegedBytes).
MAX_XATTR_KEY_LENGTH = 16
MAX_SYSTEM_XATTR_BYTES = 1024 * 1024

# TCP ports (conventions, not hard-coded in the server).
DCP_PORTS = (11210, 11209)
TLS_PORTS = (11207,)
