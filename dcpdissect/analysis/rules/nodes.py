"""Rules that only several capture points decide (:mod:`dcpdissect.analysis.nodes`).

Their samples are pairs of captures under ``samples/multinode/``: the rule's sample is the
capture it reports frames of; the other point is named like it with ``-active`` and
``-replica`` swapped.
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

SNAPSHOT_ACK_LOST_BETWEEN_POINTS = rule(
    "snapshot-ack-lost-between-points", ERROR,
    "a snapshot acknowledged at the consumer's capture point never reached the producer's, "
    "which saw the marker asking for it and the consumer's messages after the ack",
    "engines/ep/src/dcp/passive_stream.cc PassiveStream::handleSnapshotEnd answers a marker "
    "with the Ack flag (0x08) by a success response once the snapshot's end item is "
    "processed; active_stream.cc ActiveStream sets the flag in TakeoverSend and counts it in "
    "waitForSnapshot, and sends the vbucket's new state only when no ack is awaited: an ack "
    "lost between the relay's legs stalls the takeover (the rebalance's vbucket move) with "
    "both ends believing they did their part; judged on relayed legs, as "
    "message-lost-between-points (which it replaces for that message)",
    "multinode/ack-dropped-replica.pcapng")

RULES = (MESSAGE_LOST_BETWEEN_POINTS, SNAPSHOT_ACK_LOST_BETWEEN_POINTS)
