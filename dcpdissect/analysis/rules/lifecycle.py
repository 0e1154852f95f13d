"""Stream lifecycle rules: nothing for a stream after its end, its close, a completed takeover or a dropped collection; change-stream (history) snapshots.

Judged by :mod:`dcpdissect.analysis.streams` (:mod:`~dcpdissect.analysis.streams.lifecycle`;
``history-duplicate-key`` by :mod:`~dcpdissect.analysis.streams.snapshots`).
"""

from .model import ERROR, INFO, WARNING, family

rule = family("lifecycle")

LV = "lifecycle-violations.pcap"

DATA_AFTER_STREAM_END = rule(
    "data-after-stream-end", WARNING,
    "a message with a stream's opaque after that stream's StreamEnd (any reason)",
    "engines/ep/src/dcp/active_stream.cc ActiveStream::endStream transitions the stream to "
    "Dead and queues the StreamEnd behind its last item, deadPhase drains the readyQ and "
    "nothing follows; engines/ep/src/dcp/consumer.cc DcpConsumer::streamEnd removes the "
    "stream, so a later message gets getNoStreamFoundErrorCode (KEY_ENOENT or "
    "STREAM_NOT_FOUND) from lookupStreamAndDispatchMessage, which producer.cc "
    "DcpProducer::handleResponse logs and tolerates (a re-request with a new opaque is a new "
    "stream; an old opaque while it is active is stream-opaque-mismatch)", LV)
DATA_AFTER_CLOSE = rule(
    "data-after-close", WARNING,
    "a stream message, or its StreamEnd, after the success response to the consumer's "
    "CloseStream, on a connection without send_stream_end_on_client_close_stream",
    "engines/ep/src/dcp/producer.cc DcpProducer::closeStream: without "
    "sendStreamEndOnClientStreamClose, closeStreamInner erases the stream from the "
    "streams map before ActiveStream::setDead(Closed) queues its StreamEnd and before the "
    "response, and DcpProducer::getNextItemFromVbucket only steps streams of the map: "
    "nothing of it follows, not even that StreamEnd (with the control the stream stays in "
    "the map, deadPhase drains the readyQ up to StreamEnd(Closed) and DcpProducer::step "
    "erases it once that is sent: data-after-stream-end after it); messages before the "
    "response are in flight; consumer.cc DcpConsumer::closeStream sets the PassiveStream "
    "dead and passive_stream.cc PassiveStream::messageReceived ignores its messages", LV)
DATA_AFTER_CLOSE_UNDECIDED = rule(
    "data-after-close-undecided", INFO,
    "a stream message, or its StreamEnd, after the CloseStream response on a connection "
    "whose negotiation the capture did not show",
    "engines/ep/src/dcp/producer.cc DcpProducer::closeStream: legal only with the control "
    "send_stream_end_on_client_close_stream (ActiveStream::deadPhase drains until "
    "StreamEnd(Closed)), which may have been sent before the capture started",
    "lifecycle-undecided.pcap")
DATA_AFTER_TAKEOVER = rule(
    "data-after-takeover", WARNING,
    "a stream message other than StreamEnd after the producer's SetVbucketState(active)",
    "engines/ep/src/dcp/active_stream.cc ActiveStream::takeoverSendPhase sends "
    "SetVBucketState only with an empty readyQ and no checkpoint items left, then moves to "
    "TakeoverWait; setVBucketStateAckRecieved answers the ack to 'active' with "
    "endStream(Ok); passive_stream.cc PassiveStream::processSetVBucketState makes the "
    "vbucket active, and a later item fails permittedVBStates (replica, pending) with "
    "NOT_MY_VBUCKET, which DcpProducer::handleResponse tolerates", LV)
DATA_FOR_DROPPED_COLLECTION = rule(
    "data-for-dropped-collection", ERROR,
    "an item of a collection after the stream's drop event (EndCollection) for it",
    "engines/ep/src/collections/system_event_types.h DropEventDcpData (manifest uid, scope "
    "id, collection id) and passive_stream.cc PassiveStream::processDropCollection drop "
    "the collection from the replica's vbucket manifest; a later item of it has no "
    "collection (setWithMeta/deleteWithMeta answer unknown_collection, not a status "
    "DcpProducer::handleResponse tolerates); the producer's collections filter "
    "(collections/vbucket_filter.cc) and checkpoints never queue an item after the drop "
    "(a BeginCollection of the id revives it; FlatBuffers (version 2) events are not read)",
    LV)
HISTORY_DUPLICATE_KEY = rule(
    "history-duplicate-key", ERROR,
    "a History snapshot without MayContainDuplicates (0x20) carries the same key twice",
    "engines/ep/src/checkpoint.cc Checkpoint::queueDirty returns FailureDuplicateItem for a "
    "key that cannot be deduplicated (history), and checkpoint_manager.cc "
    "CheckpointManager::queueDirty opens a new checkpoint for it on the active (so each "
    "memory History snapshot holds a key once); a non-active vbucket throws on it ('should "
    "not see this for non-active vBuckets'); only a disk History snapshot "
    "(active_stream.cc ActiveStream::markDiskSnapshot: History|MayContainDuplicates) may "
    "repeat a key", LV)

RULES = (
    DATA_AFTER_STREAM_END, DATA_AFTER_CLOSE, DATA_AFTER_CLOSE_UNDECIDED, DATA_AFTER_TAKEOVER,
    DATA_FOR_DROPPED_COLLECTION, HISTORY_DUPLICATE_KEY,
)
