"""Stream rules: snapshots and items, correlation, consumer answers, resume fidelity.

Judged by :mod:`dcpdissect.analysis.streams` (per-connection and per-stream state).
"""

from .model import ERROR, INFO, WARNING, family

rule = family("stream")

ST = "stream-markers.pcap"
CV = "controls-violations.pcap"

DATA_BEFORE_MARKER = rule(
    "data-before-marker", ERROR, "data message on a stream before any snapshot marker",
    "R18; the kv_engine consumer's snapshot range starts at [0,0]: ERANGE, then the producer "
    "disconnects", ST)
SNAPSHOT_END_NOT_INCREASING = rule(
    "snapshot-end-not-increasing", ERROR,
    "snapshot marker end is not above the previous marker's end",
    "R17; PassiveStream cur_snapshot_end is strictly monotonic (exception: Disk|History marker "
    "with an equal end, MB-58548)", ST)
SNAPSHOT_START_OVERLAP = rule(
    "snapshot-start-overlap", ERROR, "snapshot marker start is not above the previous marker's end",
    "R17; engines/ep/src/dcp/active_stream.cc ActiveStream::snapshot / markDiskSnapshot throw "
    "when start <= last sent end, only on an active vbucket: judged only for streams "
    "requested with ActiveVbOnly (a replica may serve the others and merge snapshots); not "
    "for the first marker after an OSO snapshot (completeOSOBackfill leaves "
    "lastSentSnapEndSeqno at 0); exception: History marker after a non-history one", CV)
SNAPSHOT_START_BELOW_REQUESTED = rule(
    "snapshot-start-below-requested", ERROR,
    "first snapshot marker starts below the requested snapshot start",
    "R17; the first marker uses min(snap_start, computed start) and may not go below the "
    "requested snap_start (MB-59759)", ST)
SNAPSHOT_BEHIND_LAST_SEQNO = rule(
    "snapshot-behind-last-seqno", ERROR,
    "snapshot marker start and end are both behind the last received seqno",
    "R16; PassiveStream::messageReceived returns ERANGE and drops the marker (MB-16044)", ST)
DATA_OUTSIDE_SNAPSHOT = rule(
    "data-outside-snapshot", ERROR, "data seqno outside the current snapshot [start, end]",
    "engines/ep/src/dcp/passive_stream.cc PassiveStream::processMessageInner: a mutation, "
    "deletion, expiration or prepare outside [start, end] is answered ERANGE and the producer "
    "disconnects; commit, abort and system events are not range-checked by the consumer, "
    "but kv_engine's producer never sends them outside the snapshot", ST)
DATA_SEQNO_NOT_INCREASING = rule(
    "data-seqno-not-increasing", ERROR, "data seqno not above the previous seqno of the stream",
    "R18; the consumer returns ERANGE ('out of sequence'); lastSentSeqno is strictly "
    "monotonic except inside OSO (MB-50543)", ST)
SNAPSHOT_INCOMPLETE = rule(
    "snapshot-incomplete", WARNING,
    "snapshot not completed (no item or SeqnoAdvanced at its end seqno) before the next "
    "marker or STREAM_END(Ok)", "R19; MB-73354, MB-47009, MB-48368 (empty snapshots occur "
    "legitimately during takeover, MB-11219)", ST)
DATA_AFTER_SEQNO_ADVANCED = rule(
    "data-after-seqno-advanced", ERROR, "data message at or below a previous SeqnoAdvanced seqno",
    "R20; SeqnoAdvanced(S) promises nothing up to S follows (MB-62847)", ST)
DATA_DUPLICATE_KEY = rule(
    "data-duplicate-key", WARNING,
    "the same key gets the same kind of change twice (two mutations, two deletions or two "
    "prepares) in one snapshot without MayContainDuplicates",
    "R22; checkpoints and backfills deduplicate keys (MB-71914, MB-72198)", ST)
SNAPSHOT_START_INCONSISTENT = rule(
    "snapshot-start-inconsistent", WARNING, "inconsistent start-seqno semantics",
    "engines/ep/src/dcp/active_stream.cc: the first marker starts at min(snap_start, "
    "computed start), the requested snap_start (ActiveStream::snapshot after filtering, "
    "markDiskSnapshot and sendSnapshotAndSeqnoAdvanced through adjustStartIfFirstSnapshot, "
    "also for a first snapshot the filter held back, MB-47009), or for FromLatest the "
    "vbucket's high seqno (producer.cc DcpProducer::streamRequest), below its first item; "
    "after an OSO backfill (completeOSOBackfill sets firstMarkerSent) the next marker is not "
    "the first; CHK marker start <= first item; memory marker without CHK start = first "
    "sent item, computed after filtering (relaxed only for a collections/scope filter); "
    "backfill start <= first item", ST)
OSO_UNPAIRED = rule(
    "oso-unpaired", ERROR, "OSO snapshot start/end markers are not paired",
    "R24; the producer sends 0x65 start, items in key order, then 0x65 end", "stream-oso.pcap")
OSO_CONTAINS_MARKER = rule(
    "oso-contains-marker", ERROR, "snapshot marker 0x56 inside an OSO snapshot",
    "R24; no 0x56 markers are sent between the OSO start and end", "stream-oso.pcap")
CONSUMER_ERROR_RESPONSE = rule(
    "consumer-error-response", ERROR,
    "the consumer answered a producer message with a status the producer disconnects on",
    "engines/ep/src/dcp/producer.cc DcpProducer::handleResponse: a data message (mutation, "
    "deletion, expiration, system event, prepare, commit, abort) must be answered Success, "
    "a StreamEnd Success or KEY_ENOENT; otherwise errorMessageHandler keeps the connection "
    "only for NOT_MY_VBUCKET, DCP_STREAM_NOT_FOUND, OPAQUE_NO_MATCH and, unless "
    "v7_dcp_status_codes was accepted, KEY_EEXISTS or KEY_ENOENT (never KEY_ENOENT to "
    "DcpCommit/DcpAbort), and disconnects", "stream-consumer.pcap")
CONSUMER_ERROR_RESPONSE_UNDECIDED = rule(
    "consumer-error-response-undecided", INFO,
    "the consumer answered KEY_EEXISTS/KEY_ENOENT; whether the producer disconnects "
    "depends on v7_dcp_status_codes, which the capture does not show",
    "engines/ep/src/dcp/producer.cc DcpProducer::handleResponse (allowPreV7StatusCodes "
    "requires !enabledV7DcpStatus); the control may have been sent before the capture "
    "started", "controls-undecided.pcap")
CONSUMER_NOOP_OPAQUE_MISMATCH = rule(
    "consumer-noop-opaque-mismatch", ERROR,
    "noop response whose opaque is not the producer's last noop's",
    "engines/ep/src/dcp/producer.cc DcpProducer::handleResponse: a DcpNoop response is "
    "accepted only with noopCtx.opaque (each noop increments it, from 10000000); any "
    "other goes to errorMessageHandler, which disconnects unless the status is tolerated", CV)
CONSUMER_RESPONSE_UNEXPECTED = rule(
    "consumer-response-unexpected", ERROR,
    "the consumer answered a SeqnoAdvanced or OSO snapshot message",
    "engines/ep/src/dcp/producer.cc DcpProducer::handleResponse: no case for "
    "DcpSeqnoAdvanced/DcpOsoSnapshot, the default branch throws logic_error ('received an "
    "unknown client opcode') and the connection is closed", CV)
SNAPSHOT_VERSION_NOT_NEGOTIATED = rule(
    "snapshot-version-not-negotiated", WARNING,
    "V2.0 marker on a stream requested without sync replication, or V2.2 marker on one "
    "requested without max_marker_version=2.2",
    "engines/ep/src/dcp/active_stream.cc ActiveStream::snapshot / markDiskSnapshot send the "
    "MVS and HCS only with supportSyncReplication() (enable_sync_writes and a non-empty "
    "consumer_name accepted, in either order, producer.cc DcpProducer::control), the purge "
    "seqno and HPS only with maxMarkerVersion V2_2 (max_marker_version=2.2, which control() "
    "accepts only with collections), both copied into the ActiveStream when it is created; "
    "protocol/mcbp/dcp_snapshot_marker_codec.cc DcpSnapshotMarker::encode writes V2.2 when "
    "a purge seqno or HPS is set, V2.0 when an MVS or HCS is, V1 otherwise: the producer "
    "is not behaving as kv_engine does (kv_engine's consumer decodes every version)", CV)
SNAPSHOT_V1_DISK_SYNC_REPLICATION = rule(
    "snapshot-v1-disk-sync-replication", ERROR,
    "V1 Disk marker (no HCS) on a stream that negotiated sync replication",
    "engines/ep/src/dcp/passive_stream.cc PassiveStream::processMarker throws 'missing "
    "HCS' for a Disk marker without HCS when the stream supports sync replication; the "
    "producer always sends the MVS there (V2.0 or V2.2, active_stream.cc)", CV)
SNAPSHOT_HISTORY_NOT_NEGOTIATED = rule(
    "snapshot-history-not-negotiated", WARNING,
    "History or MayContainDuplicates marker flag on a stream requested without "
    "change_streams",
    "engines/ep/src/dcp/active_stream.cc ActiveStream::getMarkerFlags sets History only "
    "with changeStreamsEnabled, and markDiskSnapshot sets History|MayContainDuplicates only "
    "for a history scan, which backfill_disk_to_stream.cc "
    "DCPBackfillDiskToStream::setupForHistoryScan starts only when "
    "areChangeStreamsEnabled(): copied from the producer's change_streams control "
    "(producer.cc DcpProducer::control) when the stream is created; the producer is not "
    "behaving as kv_engine does (the consumer tolerates the flags)", CV)
OSO_NOT_NEGOTIATED = rule(
    "oso-not-negotiated", WARNING,
    "OSO snapshot on a connection without enable_out_of_order_snapshots",
    "engines/ep/src/dcp/active_stream.cc schedules an OSO backfill only when "
    "producer.cc DcpProducer::isOutOfOrderSnapshotsEnabled (control "
    "enable_out_of_order_snapshots=true|true_with_seqno_advanced, and a bucket that can "
    "scan by id); a client that did not ask for it gets items out of seqno order", CV)
SEQNO_ADVANCED_NOT_ENABLED = rule(
    "seqno-advanced-not-enabled", WARNING,
    "SeqnoAdvanced on a stream for which the producer never sends it",
    "engines/ep/src/dcp/active_stream.cc ActiveStream::isSeqnoAdvancedEnabled: only "
    "collection streams (a non-legacy filter: HELLO Collections on the producer connection), "
    "and not sync-write streams with flatbuffers_system_events unless "
    "skip_deletes_in_initial_backfill; inside OSO also completeBackfillInner with "
    "enable_out_of_order_snapshots=true_with_seqno_advanced", CV)
EXPIRATION_NOT_NEGOTIATED = rule(
    "expiration-not-negotiated", WARNING,
    "DcpExpiration on a connection without enable_expiry_opcode",
    "engines/ep/src/dcp/producer.cc DcpProducer::step sends an expiration as a deletion "
    "(deletionV1OrV2) unless enableExpiryOpcode, which DcpProducer::control sets only for "
    "enable_expiry_opcode=true on a connection opened with the DcpOpen flag "
    "include_delete_times (read when the message is sent, not per stream); the producer "
    "is not behaving as kv_engine does (the consumer accepts 0x59 either way)", CV)
STREAM_ID_REQUEST_MISMATCH = rule(
    "stream-id-request-mismatch", ERROR,
    "stream request with a sid without enable_stream_id, or without one with it",
    "engines/ep/src/dcp/producer.cc DcpProducer::constructFilterForStreamRequest: 'a valid "
    "stream-ID is required' / 'a stream-ID is present but not required', answered "
    "DcpStreamIdInvalid", CV)
STREAM_ID_MESSAGE_MISMATCH = rule(
    "stream-id-message-mismatch", WARNING,
    "producer message with a stream id on a connection without enable_stream_id, or "
    "without one on a connection with it",
    "daemon/connection.cc Connection::marker/mutation/...: the producer adds the stream-id "
    "frame info (magic 0x08) exactly when the stream has a sid, which only "
    "enable_stream_id allows (producer.cc DcpProducer::control); the client cannot tell "
    "which of its streams the message belongs to", CV)
SNAPSHOT_ACK_UNEXPECTED = rule(
    "snapshot-ack-unexpected", WARNING,
    "a success response to a snapshot marker that did not carry the Ack flag",
    "R28; the consumer acknowledges only markers with Ack (0x08), after the end item",
    "stream-consumer.pcap")
SNAPSHOT_FROM_CLIENT = rule(
    "snapshot-from-client", ERROR, "a snapshot marker sent by the client of a producer connection",
    "engines/ep/src/connhandler.cc ConnHandler::snapshotMarker (DcpProducer does not override "
    "it): the producer disconnects; on a consumer connection memcached receives markers "
    "(consumer.cc DcpConsumer::snapshotMarker)",
    "stream-consumer.pcap")
ADD_STREAM_NEW_OPAQUE_MISMATCH = rule(
    "add-stream-new-opaque-mismatch", ERROR,
    "add stream response new opaque differs from the consumer's stream request opaque",
    "R27; DcpConsumer sends the add-stream response with extras = the stream request opaque",
    "stream-add-stream.pcap")
ADD_STREAM_STATUS_MISMATCH = rule(
    "add-stream-status-mismatch", ERROR,
    "add stream response status differs from the stream request's status",
    "R27; the add-stream response mirrors the stream-request status", "stream-add-stream.pcap")
ADD_STREAM_ROLLBACK = rule(
    "add-stream-rollback", ERROR, "add stream response with status ROLLBACK",
    "R27; the consumer handles ROLLBACK internally and never forwards it", "stream-add-stream.pcap")
STREAM_OPAQUE_MISMATCH = rule(
    "stream-opaque-mismatch", WARNING, "stream message opaque differs from the stream's opaque",
    "R27; every message of a stream carries the stream-request opaque; the consumer answers "
    "KEY_EEXISTS/OPAQUE_NO_MATCH otherwise", "stream-add-stream.pcap")
RESUME_COLLAPSED_SNAPSHOT = rule(
    "resume-collapsed-snapshot", ERROR,
    "resume collapsed a partly received snapshot to [start, start]",
    "engines/ep/src/failover-table.cc FailoverTable::needsRollback judges a resume by its "
    "snapshot range: a consumer at X inside a partly received snapshot [S,E] must send "
    "[S,E] start X; [X,X] hides a branch between X and E, the server answers success and "
    "the data after the branch is lost (DCP design discussion, humpty_dumpty). A consumer "
    "is its DcpOpen name in a bucket across connections and nodes: a resume after a "
    "rebalance or failover, or on 11207 after 11210, is judged against the stream before it",
    "resume-collapsed.pcap")
RESUME_BEYOND_RECEIVED = rule(
    "resume-beyond-received", ERROR, "resume start is beyond the last seqno received",
    "engines/ep/src/dcp/producer.cc DcpProducer::streamRequest streams from the start "
    "seqno asked: a consumer that asks to start after the last seqno it received skips the "
    "seqnos in between (after an unfinished OSO snapshot: beyond the seqno held before its "
    "start, oso_snapshot.md); judged across connections and nodes like "
    "resume-collapsed-snapshot", "resume-beyond.pcap")
SEMANTICS_SUPPRESSED = rule(
    "semantics-suppressed", INFO, "stream rules not applied here",
    "a cut (lost or uncaptured bytes that hid message boundaries, garbage skipped) makes "
    "uncertain only what it could have hidden: each stream's snapshot rules resume at its "
    "next marker, the rules that need a message the cut may have hidden wait for the other "
    "direction and are dropped when a cut there could explain them; when the stream "
    "request was not captured, the rules that need only the markers apply from the first "
    "captured marker, never those that need the request (first-marker conventions, resume, "
    "correlation)", "cut-lost-headers.pcap")

RULES = (
    DATA_BEFORE_MARKER, SNAPSHOT_END_NOT_INCREASING, SNAPSHOT_START_OVERLAP,
    SNAPSHOT_START_BELOW_REQUESTED, SNAPSHOT_BEHIND_LAST_SEQNO, DATA_OUTSIDE_SNAPSHOT,
    DATA_SEQNO_NOT_INCREASING, SNAPSHOT_INCOMPLETE, DATA_AFTER_SEQNO_ADVANCED, DATA_DUPLICATE_KEY,
    SNAPSHOT_START_INCONSISTENT, OSO_UNPAIRED, OSO_CONTAINS_MARKER, CONSUMER_ERROR_RESPONSE,
    CONSUMER_ERROR_RESPONSE_UNDECIDED, CONSUMER_NOOP_OPAQUE_MISMATCH, CONSUMER_RESPONSE_UNEXPECTED,
    SNAPSHOT_VERSION_NOT_NEGOTIATED, SNAPSHOT_V1_DISK_SYNC_REPLICATION,
    SNAPSHOT_HISTORY_NOT_NEGOTIATED, OSO_NOT_NEGOTIATED, SEQNO_ADVANCED_NOT_ENABLED,
    EXPIRATION_NOT_NEGOTIATED, STREAM_ID_REQUEST_MISMATCH, STREAM_ID_MESSAGE_MISMATCH,
    SNAPSHOT_ACK_UNEXPECTED, SNAPSHOT_FROM_CLIENT, ADD_STREAM_NEW_OPAQUE_MISMATCH,
    ADD_STREAM_STATUS_MISMATCH, ADD_STREAM_ROLLBACK, STREAM_OPAQUE_MISMATCH,
    RESUME_COLLAPSED_SNAPSHOT, RESUME_BEYOND_RECEIVED, SEMANTICS_SUPPRESSED,
)

# ns_server's proxy (analysis/streams/relay.py): the producer leg (ns_server → active node's
# memcached, DcpOpen with Producer) and the consumer leg (ns_server → the replica's memcached,
# same DcpOpen name, no Producer) must carry the same messages.
RN, RV = "replica-node.pcap", "replica-node-violations.pcap"
RELAY_MESSAGE_DIFFERS = rule(
    "relay-message-differs", ERROR,
    "a message relayed by ns_server's proxy differs between its producer and consumer legs",
    "ns_server dcp_proxy:handle_packet appends each packet byte for byte (dcp_producer_conn "
    "and dcp_consumer_conn rewrite nothing they proxy, not the opaque, not the stream "
    "request flags): a producer message that reaches the replica changed, or a consumer's "
    "stream request (engines/ep/src/dcp/passive_stream.cc PassiveStream::streamRequest) "
    "that reaches the producer changed, leaves the replica with other data than the active "
    "(kv_engine docs/dcp/documentation/rebalance.md, EBucketMigrator)", RV)
RELAY_MESSAGE_MISSING = rule(
    "relay-message-missing", ERROR,
    "a producer message (or the consumer's stream request) never reached the other leg of "
    "ns_server's proxy, though later ones did",
    "dcp_proxy:process_data_loop relays in the order it reads: a later message on the other "
    "leg proves the earlier one lost; the replica's PassiveStream then has a hole (or the "
    "producer never got the request)", RV)
RELAY_MESSAGE_REORDERED = rule(
    "relay-message-reordered", ERROR,
    "ns_server's proxy relayed a producer message (or the consumer's stream request) after "
    "one it read later",
    "dcp_proxy:process_data_loop relays in the order it reads; out of order the replica's "
    "PassiveStream sees seqnos go backwards (passive_stream.cc processMessageInner: ERANGE) "
    "or markers and items swapped", RV)
RELAY_CONSUMER_MESSAGE_MISMATCH = rule(
    "relay-consumer-message-mismatch", WARNING,
    "a consumer message other than the stream request (ack, buffer ack, control, error or "
    "noop answer) differs, is missing or comes out of order on ns_server's producer leg",
    "the producer's flow control and acks (engines/ep/src/dcp/producer.cc "
    "DcpProducer::bufferAcknowledgement, handleResponse) see other answers than the "
    "replica gave: the stream may stall or be dropped; the data is not changed", RV)
RELAY_NOT_CONFIRMED = rule(
    "relay-not-confirmed", INFO,
    "messages read on one leg of ns_server's proxy never appeared on the other before a "
    "leg or the capture ended",
    "they may have been in flight (dcp_proxy buffers and relays asynchronously); no later "
    "relayed message proves them lost", RN)
RELAY_WINDOW_OVERFLOW = rule(
    "relay-window-overflow", INFO,
    "too many messages of one stream wait for their copy on the other leg of ns_server's "
    "proxy: its relay is no longer judged",
    "bounded memory: at most analysis.streams.relay.MAX_RELAY_WINDOW unmatched messages "
    "per pair, flow and stream", RV)

RULES += (
    RELAY_MESSAGE_DIFFERS, RELAY_MESSAGE_MISSING, RELAY_MESSAGE_REORDERED,
    RELAY_CONSUMER_MESSAGE_MISMATCH, RELAY_NOT_CONFIRMED, RELAY_WINDOW_OVERFLOW,
)
