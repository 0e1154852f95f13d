"""Sync-write (durability) rules: prepares and their resolution, the HCS, as the replica's passive durability monitor and the producer see them.

Judged by :mod:`dcpdissect.analysis.streams.durability`.
"""

from .model import ERROR, INFO, WARNING, family

rule = family("durability")

DV = "durability-violations.pcap"
PS = "engines/ep/src/dcp/passive_stream.cc"
PDM = "engines/ep/src/durability/passive_durability_monitor.cc"
VB = "engines/ep/src/vbucket.cc"

SYNC_COMMIT_WITHOUT_PREPARE = rule(
    "sync-commit-without-prepare", ERROR,
    "commit of a key with no outstanding prepare on the stream",
    f"{PS} PassiveStream::processCommit → {VB} VBucket::commit: no pending item in the "
    "HashTable is logged ('failed as no pending HashTable item found') and answered "
    "no_such_key, Disk snapshot or not (the producer sends a Mutation, never a Commit, "
    "for a prepare deduplicated by a backfill: active_stream.cc "
    "ActiveStream::makeResponseFromItem); engines/ep/src/dcp/producer.cc "
    "DcpProducer::handleResponse disconnects on KeyEnoent to DcpCommit. Judged only for a "
    "prepare seqno after the stream's start (else sync-prepare-unseen)", DV)
SYNC_ABORT_WITHOUT_PREPARE = rule(
    "sync-abort-without-prepare", ERROR,
    "abort of a key with no outstanding prepare, in a Memory snapshot",
    f"{PS} PassiveStream::processAbort → {VB} VBucket::abort: without a pending item and "
    "outside a Disk snapshot (isReceivingDiskSnapshot) the replica logs 'received an abort "
    "for a prepare that does not exist' and answers invalid_arguments; "
    "producer.cc DcpProducer::handleResponse disconnects. In a Disk snapshot the abort is "
    "legal (addNewAbort: its prepare was deduplicated away)", DV)
SYNC_ABORT_AFTER_COMMIT = rule(
    "sync-abort-after-commit", ERROR,
    "abort of a prepare already committed on the stream, in a Memory snapshot",
    f"{VB} VBucket::abort: the commit removed the pending item, so outside a Disk "
    "snapshot the replica answers invalid_arguments and producer.cc "
    "DcpProducer::handleResponse disconnects", DV)
SYNC_ABORT_AFTER_COMMIT_DISK = rule(
    "sync-abort-after-commit-disk", WARNING,
    "abort of a prepare already committed on the stream, in a Disk snapshot",
    f"{VB} VBucket::abort accepts an abort without pending item inside a Disk snapshot "
    "(addNewAbort / abortStoredValue) without checking that its prepare was committed: "
    "the replica records an abort for a committed prepare", DV)
SYNC_COMPLETION_SEQNO_MISMATCH = rule(
    "sync-completion-seqno-mismatch", ERROR,
    "commit or abort names a prepare seqno other than the outstanding prepare's",
    f"{VB} VBucket::commit / VBucket::abort: a prepare seqno that differs from the pending "
    "item's requires a Disk snapshot and prepareSeqno >= the open snapshot start "
    f"(Expects, which throws); {PDM} PassiveDurabilityMonitor::completeSyncWrite also "
    "throws 'Pending resolution for ...' in a Memory snapshot: the connection is closed", DV)
SYNC_COMPLETION_OUT_OF_ORDER = rule(
    "sync-completion-out-of-order", ERROR,
    "commit or abort in a Memory snapshot while an older prepare is unresolved",
    f"{PDM} PassiveDurabilityMonitor::completeSyncWrite: outside a Disk snapshot "
    "(enforceOrderedCompletion) the completion must be for the next tracked write after "
    "the HCS, else it throws logic_error ('Pending resolution for ...'); only a Disk "
    "snapshot may complete out of order (deduplication)", DV)
SYNC_PREPARE_WHILE_PENDING = rule(
    "sync-prepare-while-pending", ERROR,
    "prepare of a key whose earlier prepare is still outstanding, outside the "
    "duplicate-prepare window",
    f"{PS} PassiveStream::processMarker calls VBucket::setDuplicatePrepareWindow on a Disk "
    f"marker (threshold: the highest tracked prepare); {VB} VBucket::prepare overwrites an "
    "outstanding prepare only at or below that threshold, else VBucket::processSet answers "
    "IsPendingSyncWrite (SyncWriteInProgress, the producer disconnects) or throws inside "
    "a Disk snapshot ('expected a complete item but the item is a prepare')", DV)
SYNC_MUTATION_WHILE_PENDING = rule(
    "sync-mutation-while-pending", ERROR,
    "mutation, deletion or expiration of a key with an outstanding prepare, in a Memory "
    "snapshot",
    f"{VB} VBucket::processSet / processSoftDelete: an in-flight SyncWrite may be "
    "overwritten on a replica only while receiving a Disk snapshot (the backfill's "
    "Mutation completes it, PassiveDurabilityMonitor::completeSyncWrite); otherwise "
    "IsPendingSyncWrite → SyncWriteInProgress, and DcpProducer::handleResponse disconnects",
    DV)
SYNC_HCS_BACKWARDS = rule(
    "sync-hcs-backwards", ERROR,
    "Disk marker HCS below the HCS the stream already reached",
    f"{PS} PassiveStream::processMarker keeps the Disk marker's HCS; at the snapshot end "
    f"PassiveStream::handleSnapshotEnd → {PDM} "
    "PassiveDurabilityMonitor::notifySnapshotEndReceived sets highCompletedSeqno."
    "lastWriteSeqno, which is weakly monotonic with ThrowExceptionPolicy "
    "(durability_monitor_impl.h Position); completeSyncWrite raised it to each completed "
    "prepare's seqno: the replica throws", DV)
SYNC_WRITE_NOT_NEGOTIATED = rule(
    "sync-write-not-negotiated", WARNING,
    "prepare, commit or abort on a stream requested without enable_sync_writes",
    "engines/ep/src/dcp/producer.cc DcpProducer::control accepts enable_sync_writes and "
    "the ActiveStream copies it when created; without it active_stream.cc "
    "ActiveStream::makeResponseFromItem sends commits as Mutations and never prepares or "
    "aborts. engines/ep/src/dcp/consumer.cc DcpConsumer::prepare / commit / abort do not "
    "check it: the replica applies them. Judged only when the capture shows the controls",
    DV)
SYNC_PREPARE_UNSEEN = rule(
    "sync-prepare-unseen", INFO,
    "commit or abort of a prepare at or before the stream's start: unsure",
    f"{VB} VBucket::commit / VBucket::abort look the prepare up in the replica's "
    "HashTable, which outlives the stream: a prepare at or below the requested start seqno "
    "(or before the first captured marker) may be outstanding from an earlier stream; the "
    "capture cannot tell", DV)
SYNC_REPLICA_ERROR_REPLY = rule(
    "sync-replica-error-reply", INFO,
    "the replica's error reply to a sync-write message flagged above",
    "engines/ep/src/dcp/consumer.cc DcpConsumer::lookupStreamAndDispatchMessage returns "
    f"the error of {PS} PassiveStream::processMessage, which memcached sends back with the "
    "message's opaque; producer.cc DcpProducer::handleResponse then disconnects "
    "(consumer-error-response reports it); this links the reply to its cause", DV)

RULES = (
    SYNC_COMMIT_WITHOUT_PREPARE, SYNC_ABORT_WITHOUT_PREPARE, SYNC_ABORT_AFTER_COMMIT,
    SYNC_ABORT_AFTER_COMMIT_DISK, SYNC_COMPLETION_SEQNO_MISMATCH, SYNC_COMPLETION_OUT_OF_ORDER,
    SYNC_PREPARE_WHILE_PENDING, SYNC_MUTATION_WHILE_PENDING, SYNC_HCS_BACKWARDS,
    SYNC_WRITE_NOT_NEGOTIATED, SYNC_PREPARE_UNSEEN, SYNC_REPLICA_ERROR_REPLY,
)
