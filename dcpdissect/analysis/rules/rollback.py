"""Rollback rules: each stream request's answer against kv_engine's failover-table decision.

Judged by :mod:`dcpdissect.analysis.rollback_checks`.
"""

from .model import ERROR, INFO, WARNING, family

rule = family("rollback")

FT = "engines/ep/src/failover-table.cc FailoverTable::needsRollback"
SR = "engines/ep/src/dcp/producer.cc DcpProducer::streamRequest"

ROLLBACK_MISSED = rule(
    "rollback-missed", ERROR, "server answered success where a rollback was required "
    "(possible data loss)", f"{FT}, called by {SR} with the failover log of the response "
    "itself (read under the decision's lock); reported only when the unknown high and purge "
    "seqnos, FromLatest and the collection purge exemption cannot change the answer",
    "rollback-missed.pcap")
ROLLBACK_UNEXPECTED = rule(
    "rollback-unexpected", WARNING, "server asked for a rollback that the model does not require",
    f"{FT}; a ROLLBACK(0) the model cannot explain is only 'unsure' (the purge seqno seen is a "
    "lower bound). Judged with the node's failover log as it was when it answered: one its "
    "answers carried on the same connection, else the next one it sends (a node that "
    "restarted between two connections has a new branch)", "rollback-violations.pcap")
ROLLBACK_SEQNO_ABOVE_START = rule(
    "rollback-seqno-above-start", ERROR, "rollback seqno greater than the request's start seqno",
    f"{FT}: the rollback seqno is min(upper, snap_start) <= start (FromLatest requests "
    "excepted: the producer replaces their start)", "rollback-violations.pcap")
ROLLBACK_LOOP = rule(
    "rollback-loop", ERROR, "the same request answered ROLLBACK to its own start again",
    f"{FT}; rollback loop (MB-11376/7): the client cannot make progress", "rollback-violations.pcap")
ROLLBACK_NOT_APPLIED = rule(
    "rollback-not-applied", WARNING, "after ROLLBACK(R) the next request for the vbucket "
    "starts above R or uses a uuid from above R", "engines/ep/src/dcp/passive_stream.cc "
    "(the consumer rolls back to R before re-requesting); only the re-request of the same "
    "start after ROLLBACK(0), which kv_engine's consumer sends, is exempt",
    "rollback-violations.pcap")
ROLLBACK_PURGE_SEQNO_NOT_SENT = rule(
    "rollback-purge-seqno-not-sent", INFO, "a connector's resume does not pass on the purge "
    "seqno of its last disk marker for the vbucket", f"{FT}: remotePurgeSeqno == localPurgeSeqno "
    "skips the purge rollback to 0 (MB-27800); a value needs HELLO Collections "
    "(mcbp_validators.cc dcp_stream_req_validator), and kv_engine's own replication consumer "
    "never sends it (passive_stream.cc createStreamReqValue)", "rollback-violations.pcap")
ROLLBACK_PREDICTION_UNSURE = rule(
    "rollback-prediction-unsure", INFO, "the rollback decision depends on the server's high "
    "or purge seqno, which the capture does not show",
    f"{FT}: the high and purge seqnos seen are lower bounds; the collection purge exemption "
    "depends on the filter's collections' high seqno", "rollback-legal.pcap")

RULES = (
    ROLLBACK_MISSED, ROLLBACK_UNEXPECTED, ROLLBACK_SEQNO_ABOVE_START, ROLLBACK_LOOP,
    ROLLBACK_NOT_APPLIED, ROLLBACK_PURGE_SEQNO_NOT_SENT, ROLLBACK_PREDICTION_UNSURE,
)
