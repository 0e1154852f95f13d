"""Liveness and flow-control rules: noops, buffer acknowledgements and the consumer's window, answers to messages never sent, datatypes used per direction.

Judged by :mod:`dcpdissect.analysis.streams.flow`.
"""

from .model import ERROR, INFO, WARNING, family  # noqa: F401

rule = family("flow")

FV = "flow-violations.pcap"
FL = "flow-undecided.pcap"

BUFFER_ACK_EXCEEDS_SENT = rule(
    "buffer-ack-exceeds-sent", WARNING,
    "buffer acknowledgement of more bytes than the producer sent and has not had acked",
    "engines/ep/src/dcp/producer.cc DcpProducer::bufferAcknowledgement → "
    "BufferLog::acknowledge → BufferLog::release: an ack larger than bytesOutstanding is "
    "logged ('Attempting to release number of bytes which is greater than "
    "bytesOutstanding') and the size_t counter wraps, so the log stays full (logged, "
    "nothing disconnects); bytes are "
    "counted per connection as ActiveStream::nextQueuedItem inserts them "
    "(bufferLogInsert(getMessageSize()): the message on the wire, noops excluded), and "
    "acks only while connection_buffer_size (control()) is non-zero", FV)
FLOW_CONTROL_WINDOW_EXCEEDED = rule(
    "flow-control-window-exceeded", WARNING,
    "the producer sent while the consumer's flow-control window was full",
    "engines/ep/src/dcp/producer.cc BufferLog::insert accepts a message only while "
    "bytesOutstanding < maxBytes (connection_buffer_size from DcpProducer::control), so "
    "the message that crosses the window is legal and the next one waits; DcpProducer::"
    "step pauses (PausedReason::BufferLogFull) until bufferAcknowledgement releases bytes; "
    "noops bypass the log (maybeSendNoop runs before the isFull check); a StreamEnd past "
    "the window is not reported. The consumer (consumer.cc, flow-control.cc FlowControl) "
    "does not check: nothing disconnects", FV)
NOOP_INTERVAL_EXCEEDED = rule(
    "noop-interval-exceeded", WARNING,
    "with noops enabled, the producer stayed silent longer than twice the noop interval",
    "engines/ep/src/dcp/producer.cc DcpProducer::maybeSendNoop sends a DcpNoop when "
    "dcpNoopTxInterval (set_noop_interval in DcpProducer::control, default "
    "defaultDcpNoopTxInterval 20 s) has passed and the previous noop was answered "
    "(noopCtx.pendingRecv); it is checked at each step, at the connection manager's "
    "pace, so only silence beyond 2 × interval + 5 s is reported (the consumer "
    "disconnects only after dcp_idle_timeout)", FV)
CONSUMER_IDLE_TIMEOUT = rule(
    "consumer-idle-timeout", WARNING,
    "with noops enabled, the consumer left the producer's noop unanswered and sent nothing "
    "else the producer counts for longer than dcp_idle_timeout (360 s by default): the "
    "producer disconnects",
    "engines/ep/src/dcp/producer.cc DcpProducer::maybeDisconnect, first in DcpProducer::step "
    "(run at least every connection_manager_interval, 0.1 s), disconnects when "
    "noopCtx.enabled (enable_noop, DcpProducer::control) and nothing was received for "
    "getIdleTimeout(): dcp_idle_timeout, 360 s by default (engines/ep/configuration.json; "
    "dynamic, per bucket, not in a capture); lastReceiveTime is set by every response of "
    "the consumer (DcpProducer::handleResponse, the noop answer among them) and by "
    "streamRequest, closeStream, bufferAcknowledgement, control and getFailoverLog, not by "
    "seqno acknowledgements; maybeSendNoop sends no other noop while one is unanswered "
    "(noopCtx.pendingRecv). Judged when the capture shows enable_noop accepted; when the "
    "producer's side closes the connection within 5 s after the timeout, the finding says "
    "this is why", FV)
RESPONSE_WITHOUT_REQUEST = rule(
    "response-without-request", WARNING,
    "a response whose opcode and opaque match no request captured in the other direction",
    "daemon/connection.cc hands a client's response on a DCP connection to the engine: "
    "engines/ep/src/dcp/producer.cc DcpProducer::handleResponse accepts a Success answer "
    "to a DCP opcode without looking for its request, and errorMessageHandler logs the "
    "others; judged only when the capture shows the connection from its start and no "
    "bytes of it were lost (a gap may hide the request). The consumer's Noop, "
    "SeqnoAdvanced and OSO answers are the controls rules'", FV)
PRODUCER_DATATYPE_NOT_NEGOTIATED = rule(
    "producer-datatype-not-negotiated", WARNING,
    "the producer sent a datatype the connection did not enable (Snappy without HELLO "
    "Snappy, Xattr without include_xattrs)",
    "engines/ep/src/dcp/producer.cc DcpProducer::DcpProducer sets "
    "connectionSupportsSnappy from cookie->isDatatypeSupported(SNAPPY) (HELLO) and "
    "includeXattrs from the DcpOpen flag IncludeXattrs; engines/ep/src/dcp/"
    "active_stream.cc shouldModifyItem / ActiveStream::makeResponseFromItem inflate a "
    "Snappy value and strip xattrs otherwise (daemon/connection.cc Connection::mutation "
    "sends the item's datatype as is, so the JSON bit is not filtered and not judged). "
    "What the client sends is judged by datatype-not-negotiated", FV)
FLOW_CONTROL_UNDECIDED = rule(
    "flow-control-undecided", INFO,
    "buffer acks or noops on a connection whose negotiation the capture did not show",
    "engines/ep/src/dcp/producer.cc DcpProducer::control sets the window "
    "(connection_buffer_size) and noop settings (enable_noop, set_noop_interval) when "
    "the connection is set up; BufferLog counts from the connection's start: a capture "
    "that started inside the connection cannot tell the window, the bytes outstanding "
    "or the noop interval, and says so once per connection", FL)

RULES = (
    BUFFER_ACK_EXCEEDS_SENT, FLOW_CONTROL_WINDOW_EXCEEDED, NOOP_INTERVAL_EXCEEDED,
    CONSUMER_IDLE_TIMEOUT, RESPONSE_WITHOUT_REQUEST, PRODUCER_DATATYPE_NOT_NEGOTIATED,
    FLOW_CONTROL_UNDECIDED,
)
