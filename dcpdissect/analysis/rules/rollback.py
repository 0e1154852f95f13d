"""Rollback rules: each stream request's answer against kv_engine's failover-table decision.

Judged by :mod:`dcpdissect.analysis.rollback_checks`.
"""

from .model import ERROR, INFO, WARNING, rule

RULES = (
    rule("rollback-missed", ERROR, "server answered success where a rollback was required "
         "(possible data loss)", "R10; FailoverTable::needsRollback with the failover log seen in "
         "the capture (reference §5.8)", "rollback-missed.pcap"),
    rule("rollback-unexpected", WARNING, "server asked for a rollback that the model does not require",
         "R10; FailoverTable::needsRollback", "rollback-violations.pcap"),
    rule("rollback-seqno-above-start", ERROR, "rollback seqno greater than the request's start seqno",
         "R10; the rollback seqno is min(upper, snap_start) <= start", "rollback-violations.pcap"),
    rule("rollback-loop", ERROR, "the same request answered ROLLBACK to its own start again",
         "R10; rollback loop (MB-11376/7): the client cannot make progress", "rollback-violations.pcap"),
    rule("rollback-not-applied", WARNING, "after ROLLBACK(R) the next request for the vbucket "
         "starts above R or uses a uuid from above R", "R11; rollback.md: drop snapshots and "
         "failover entries above R, then re-request", "rollback-violations.pcap"),
    rule("rollback-purge-seqno-not-sent", WARNING, "a resume does not carry the purge seqno of the "
         "last disk marker seen for the vbucket", "R13; stream-request-value.md purge_seqno lets the "
         "server skip a purge rollback to 0 (MB-27800)", "rollback-violations.pcap"),
    rule("rollback-prediction-unsure", INFO, "the rollback decision depends on the server's high "
         "or purge seqno, which the capture does not show",
         "R10; the high seqno is only known as a lower bound from the seqnos seen",
         "rollback-violations.pcap"),
)
