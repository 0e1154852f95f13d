"""Rules that only several capture points decide (:mod:`dcpdissect.analysis.nodes`).

Their samples are pairs of captures under ``samples/multinode/``: the rule's sample is the
capture it reports frames of; the other point is named like it with ``-replica`` for
``-active``.
"""

from .model import ERROR, family

rule = family("nodes")

MESSAGE_LOST_BETWEEN_POINTS = rule(
    "message-lost-between-points", ERROR,
    "a message sent at one capture point never reached the other, which saw the messages "
    "before and after it",
    "the two legs of a relay (ns_server's DCP proxy) carry the same messages in the same "
    "order; kv_engine's PassiveStream takes a stream's messages in seqno order, so a "
    "message the relay does not forward is missing from the replica for good (or until "
    "a rollback); on one TCP connection the kernel retransmits, so only relayed legs are "
    "judged", "multinode/dropped-active.pcapng")

RULES = (MESSAGE_LOST_BETWEEN_POINTS,)
