"""Stream rules: snapshots and items, correlation, consumer answers, resume fidelity.

Judged by :mod:`dcpdissect.analysis.streams` (per-connection and per-stream state).
"""

from .model import ERROR, INFO, WARNING, rule

ST = "stream-markers.pcap"

RULES = (
    rule("data-before-marker", ERROR, "data message on a stream before any snapshot marker",
         "R18; the kv_engine consumer's snapshot range starts at [0,0]: ERANGE, then the producer "
         "disconnects", ST),
    rule("snapshot-end-not-increasing", ERROR, "snapshot marker end is not above the previous marker's end",
         "R17; PassiveStream cur_snapshot_end is strictly monotonic (exception: Disk|History marker "
         "with an equal end, MB-58548)", ST),
    rule("snapshot-start-overlap", ERROR, "snapshot marker start is not above the previous marker's end",
         "R17; ActiveStream::snapshot / markDiskSnapshot throw when start <= last sent end on an "
         "active source (exception: History marker after a non-history one; replica-sourced "
         "streams may overlap)", ST),
    rule("snapshot-start-below-requested", ERROR,
         "first snapshot marker starts below the requested snapshot start",
         "R17; the first marker uses min(snap_start, computed start) and may not go below the "
         "requested snap_start (MB-59759)", ST),
    rule("snapshot-behind-last-seqno", ERROR,
         "snapshot marker start and end are both behind the last received seqno",
         "R16; PassiveStream::messageReceived returns ERANGE and drops the marker (MB-16044)", ST),
    rule("data-outside-snapshot", ERROR, "data seqno outside the current snapshot [start, end]",
         "engines/ep/src/dcp/passive_stream.cc PassiveStream::processMessageInner: a mutation, "
         "deletion, expiration or prepare outside [start, end] is answered ERANGE and the producer "
         "disconnects; commit, abort and system events are not range-checked by the consumer, "
         "but kv_engine's producer never sends them outside the snapshot", ST),
    rule("data-seqno-not-increasing", ERROR, "data seqno not above the previous seqno of the stream",
         "R18; the consumer returns ERANGE ('out of sequence'); lastSentSeqno is strictly "
         "monotonic except inside OSO (MB-50543)", ST),
    rule("snapshot-incomplete", WARNING,
         "snapshot not completed (no item or SeqnoAdvanced at its end seqno) before the next "
         "marker or STREAM_END(Ok)", "R19; MB-73354, MB-47009, MB-48368 (empty snapshots occur "
         "legitimately during takeover, MB-11219)", ST),
    rule("data-after-seqno-advanced", ERROR, "data message at or below a previous SeqnoAdvanced seqno",
         "R20; SeqnoAdvanced(S) promises nothing up to S follows (MB-62847)", ST),
    rule("data-duplicate-key", WARNING,
         "the same key gets the same kind of change twice (two mutations, two deletions or two "
         "prepares) in one snapshot without MayContainDuplicates or History",
         "R22; checkpoints and backfills deduplicate keys (MB-71914, MB-72198)", ST),
    rule("snapshot-start-inconsistent", WARNING, "inconsistent start-seqno semantics",
         "snapshot-marker.md 'Implementation notes': first marker = requested start/snap_start, "
         "CHK marker start <= first item, memory marker without CHK start = first item, "
         "backfill start <= first item", ST),
    rule("oso-unpaired", ERROR, "OSO snapshot start/end markers are not paired",
         "R24; the producer sends 0x65 start, items in key order, then 0x65 end", "stream-oso.pcap"),
    rule("oso-contains-marker", ERROR, "snapshot marker 0x56 inside an OSO snapshot",
         "R24; no 0x56 markers are sent between the OSO start and end", "stream-oso.pcap"),
    rule("consumer-error-response", ERROR,
         "the consumer rejected a data message (a status other than those meaning the stream is gone)",
         "R28; DcpProducer::handleResponse disconnects on any error other than NOT_MY_VBUCKET, "
         "STREAM_NOT_FOUND, OPAQUE_NO_MATCH (pre-v7 KEY_EEXISTS/KEY_ENOENT)", "stream-consumer.pcap"),
    rule("snapshot-ack-unexpected", WARNING,
         "a success response to a snapshot marker that did not carry the Ack flag",
         "R28; the consumer acknowledges only markers with Ack (0x08), after the end item",
         "stream-consumer.pcap"),
    rule("snapshot-from-client", ERROR, "a snapshot marker sent by the client of a producer connection",
         "engines/ep/src/connhandler.cc ConnHandler::snapshotMarker (DcpProducer does not override "
         "it): the producer disconnects; on a consumer connection memcached receives markers "
         "(consumer.cc DcpConsumer::snapshotMarker)",
         "stream-consumer.pcap"),
    rule("add-stream-new-opaque-mismatch", ERROR,
         "add stream response new opaque differs from the consumer's stream request opaque",
         "R27; DcpConsumer sends the add-stream response with extras = the stream request opaque",
         "stream-add-stream.pcap"),
    rule("add-stream-status-mismatch", ERROR,
         "add stream response status differs from the stream request's status",
         "R27; the add-stream response mirrors the stream-request status", "stream-add-stream.pcap"),
    rule("add-stream-rollback", ERROR, "add stream response with status ROLLBACK",
         "R27; the consumer handles ROLLBACK internally and never forwards it", "stream-add-stream.pcap"),
    rule("stream-opaque-mismatch", WARNING, "stream message opaque differs from the stream's opaque",
         "R27; every message of a stream carries the stream-request opaque; the consumer answers "
         "KEY_EEXISTS/OPAQUE_NO_MATCH otherwise", "stream-add-stream.pcap"),
    rule("resume-collapsed-snapshot", ERROR,
         "resume collapsed a partly received snapshot to [start, start]",
         "R12; the resume must send the last marker's [S,E] with start X; [X,X] hides the need for "
         "a rollback and can lose data (DCP design discussion, humpty_dumpty)", "resume-collapsed.pcap"),
    rule("resume-beyond-received", ERROR, "resume start is beyond the last seqno received",
         "R12; the consumer asks to skip seqnos it never received (after an unfinished OSO "
         "snapshot: beyond the seqno held before its start, oso_snapshot.md)", "resume-beyond.pcap"),
    rule("semantics-suppressed", INFO, "stream rules not applied here",
         "stream state is unknown after a capture gap or resync; when the stream request was "
         "not captured (a capture started inside the connection), the rules that need only the "
         "markers apply from the first captured marker, never those that need the request "
         "(first-marker conventions, resume, correlation)", "tcp-loss.pcap"),
)

# ns_server's proxy (analysis/streams/relay.py): the producer leg (ns_server → active node's
# memcached, DcpOpen with Producer) and the consumer leg (ns_server → the replica's memcached,
# same DcpOpen name, no Producer) must carry the same messages.
RN, RV = "replica-node.pcap", "replica-node-violations.pcap"
RULES += (
    rule("relay-message-differs", ERROR,
         "a message relayed by ns_server's proxy differs between its producer and consumer legs",
         "ns_server dcp_proxy:handle_packet appends each packet byte for byte (dcp_producer_conn "
         "and dcp_consumer_conn rewrite nothing they proxy, not the opaque, not the stream "
         "request flags): a producer message that reaches the replica changed, or a consumer's "
         "stream request (engines/ep/src/dcp/passive_stream.cc PassiveStream::streamRequest) "
         "that reaches the producer changed, leaves the replica with other data than the active "
         "(kv_engine docs/dcp/documentation/rebalance.md, EBucketMigrator)", RV),
    rule("relay-message-missing", ERROR,
         "a producer message (or the consumer's stream request) never reached the other leg of "
         "ns_server's proxy, though later ones did",
         "dcp_proxy:process_data_loop relays in the order it reads: a later message on the other "
         "leg proves the earlier one lost; the replica's PassiveStream then has a hole (or the "
         "producer never got the request)", RV),
    rule("relay-message-reordered", ERROR,
         "ns_server's proxy relayed a producer message (or the consumer's stream request) after "
         "one it read later",
         "dcp_proxy:process_data_loop relays in the order it reads; out of order the replica's "
         "PassiveStream sees seqnos go backwards (passive_stream.cc processMessageInner: ERANGE) "
         "or markers and items swapped", RV),
    rule("relay-consumer-message-mismatch", WARNING,
         "a consumer message other than the stream request (ack, buffer ack, control, error or "
         "noop answer) differs, is missing or comes out of order on ns_server's producer leg",
         "the producer's flow control and acks (engines/ep/src/dcp/producer.cc "
         "DcpProducer::bufferAcknowledgement, handleResponse) see other answers than the "
         "replica gave: the stream may stall or be dropped; the data is not changed", RV),
    rule("relay-not-confirmed", INFO,
         "messages read on one leg of ns_server's proxy never appeared on the other before a "
         "leg or the capture ended",
         "they may have been in flight (dcp_proxy buffers and relays asynchronously); no later "
         "relayed message proves them lost", RN),
    rule("relay-window-overflow", INFO,
         "too many messages of one stream wait for their copy on the other leg of ns_server's "
         "proxy: its relay is no longer judged",
         "bounded memory: at most analysis.streams.relay.MAX_RELAY_WINDOW unmatched messages "
         "per pair, flow and stream", RV),
)
