"""How the connections of one capture meet in the analyzer (the chunked pipeline runs them
in separate analysis groups, and runs again as one the groups that meet), and the moment
position of the end of a capture."""

from __future__ import annotations

from ..protocol import FAILOVER_LOG_OPCODES, STREAM_OPCODES, opcode_code

END = 1 << 127                   # moment position of the end of the capture


# Connections meet in the Analyzer only through state not keyed by connection. Audited in
# dcpdissect/analysis (each entry: the state, its key, the coupling key that covers it):
#   streams/tracker.py   StreamTracker.names (DcpOpen name, server, bucket)     -> name
#   streams/resume.py    Resume.points (name, server, bucket, vb, sid)          -> name
#   streams/relay.py     Relay.pairs by DcpOpen name (proxy legs on two servers) -> name
#   rollback_checks.py   seen_purge (consumer name, server, bucket, vb)         -> name
#                        tables, high, purge (server, bucket, vb)               -> vb
#                        rollbacks (client ip, server, bucket, vb)              -> vb
#                        (the bucket as the Analyzer's negotiation has it then)
#   streams/correlation.py  Correlation.adds, across connections: an Add Stream's
#                        consumer host and vb meet a stream request's client host and vb
#                        -> add (host, vb) / answers add (host, vb); the list keeps the newest MAX_ADD_STREAMS of
#                        all connections -> add-stream (every Add Stream connection)
#   engine.py            the per-rule finding cap MAX_FINDINGS_PER_RULE: applied by the
#                        driver to the merged findings, in analyze's order (merge.py)
# Keyed by connection, so never shared: engine.py (connections, negotiated), negotiation.py,
# streams/state.py Conn, controls.py, flow.py, lifecycle.py, durability.py (by connection,
# vb, sid), snapshots.py (per stream), rollback_checks.py pending (connection, opaque),
# stream_summary.py. Bounds shared by every connection (MAX_RESUME and MAX_PAIRS names,
# rollback MAX_PENDING requests, durability MAX_TRACKED streams) and the connection
# table's (max_connections, remembered closed and TLS 4-tuples) apply per group: they
# only bind beyond tens of thousands of entries.
# Names and vbuckets are taken from requests either way (the consumer's leg of the proxy
# sends its stream requests server→client); names and Add Stream hosts are coarser than
# the state's keys (no server, bucket or stream id): when unsure, couple.

DCP_OPEN = opcode_code("DcpOpen")
ADD_STREAM = opcode_code("DcpAddStream")
STREAM_REQUEST = opcode_code("DcpStreamReq")
VB_OPCODES = FAILOVER_LOG_OPCODES | STREAM_OPCODES
COUPLING_OPCODES = VB_OPCODES | {DCP_OPEN, ADD_STREAM, STREAM_REQUEST}
ANSWERS_ADD = ("answers add",)      # a stream request's key: it meets ("add", host, vb) only


def coupling_keys(msg, client: tuple, server: tuple, bucket: str | None) -> list[tuple]:
    """The keys through which the request ``msg`` of a connection (``client``, ``server``
    endpoints, ``bucket`` selected) may meet other connections; responses carry none."""
    if not msg.is_request:
        return []
    op = msg.opcode
    out = []
    if op == DCP_OPEN:
        out.append(("name", bytes(msg.key)))
    vb = msg.vbucket
    if vb is None:
        return out
    if op in VB_OPCODES:
        out.append(("vb", server, bucket, vb))
    if op == ADD_STREAM:
        out += [("add-stream",), ("add", server[0], vb)]
    elif op == STREAM_REQUEST:
        out.append(ANSWERS_ADD + (client[0], vb))
    return out
