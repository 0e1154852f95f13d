"""Resume fidelity: does a consumer resume a vbucket where its previous stream stopped?

When a stream ends (or its connection does), the point it reached is remembered per
consumer and vbucket: the DcpOpen name in a bucket (SelectBucket; each bucket has its own
DcpConnMap, so one name may be used in two buckets), with the vbucket and stream id, across
the cluster: a consumer that resumes the vbucket on another node after a rebalance or a
failover, or on 11207 after 11210, is judged against the stream before it. How the connection ended does not matter: a FIN both ways, an RST, a
half-close, nothing at all (the server restarted) or a connection still open in the capture,
because a second accepted DcpOpen with the same name on the same server and bucket ends the
old connection's streams (the tracker calls :meth:`Resume.on_stream_end` for them then, as
kv_engine's DcpConnMap::newProducer / newConsumer disconnect the connection that holds the
name). When the same consumer requests the vbucket again on another connection, the request
is judged against the latest point: a start beyond
the last seqno received skips data (after an unfinished OSO snapshot, the seqno held before
its start counts); a snapshot range collapsed to [start, start] inside a partly received
snapshot hides from the server that a rollback is needed. Implicit streams (opened by a
marker of a stream whose request the capture did not show) are never judged here, nor a
point a cut made uncertain (messages hidden after the stream's last captured marker), nor a
request after a cut of its connection's requests (an earlier resume may be hidden).
"""

from __future__ import annotations

from ..findings import finding_for
from ..rules.stream import RESUME_BEYOND_RECEIVED, RESUME_COLLAPSED_SNAPSHOT
from . import bounds
from .state import FROM_LATEST, Conn, ResumePoint, Stream


class Resume:
    """Resume points of the consumers' streams, judged when a consumer requests again."""

    def __init__(self):
        # (name, bucket, vb, sid) -> point
        self.points: dict[tuple, ResumePoint] = {}

    def on_stream_end(self, c: Conn, st: Stream) -> None:
        """Remember where the stream stopped."""
        key = _consumer(c, st)
        if key is None or st.request is None or st.request.get("flags", 0) & FROM_LATEST:
            return
        snap = st.snap
        last = st.last_received if st.last_received is not None else st.request.get(
            "start_seqno", 0)
        if st.in_oso:       # oso_snapshot.md: resume from the seqno held before the OSO start
            last, snap = st.oso_resume_seqno, None
        self.points.pop(key, None)          # the latest point is the newest entry
        if len(self.points) >= bounds.MAX_RESUME:
            del self.points[next(iter(self.points))]
        self.points[key] = ResumePoint(st.conn, last, snap and (snap.start, snap.end),
                                       snap.pdu.frame if snap else st.request_pdu.frame,
                                       st.in_oso, uncertain=st.cut)

    def on_stream_request(self, c: Conn, st: Stream, pdu, msg, out) -> None:
        """Judge a stream request against where the consumer's previous stream stopped."""
        key = _consumer(c, st)
        point = self.points.get(key) if key else None
        if point is None or point.conn == c.id:
            return
        del self.points[key]
        if point.uncertain or c.cut_between(1 - c.producer_direction, -1, pdu.ts_ns):
            return          # where it stopped, or an earlier resume on this connection, hidden
        f = st.request
        if f.get("flags", 0) & FROM_LATEST:
            return
        start, s0, s1 = f["start_seqno"], f["snap_start_seqno"], f["snap_end_seqno"]
        x = point.last_received
        shown = {"start_seqno": start, "snap_start_seqno": s0, "snap_end_seqno": s1,
                 "last_received": x, "previous_connection": point.conn}
        if start > x:
            oso = (" before an OSO snapshot it did not complete (items inside one are no "
                   "consistent point)") if point.inside_oso else ""
            out.append(finding_for(RESUME_BEYOND_RECEIVED.id, f"resume of vb {st.vb} at start "
                                   f"{start}, but the previous stream (connection {point.conn}) "
                                   f"received up to seqno {x}{oso}", pdu, msg, shown,
                                   (point.frame,)))
            return
        if point.snapshot is None:
            return
        s, e = point.snapshot
        shown["previous_snapshot"] = f"[{s},{e}]"
        if not (s <= x < e and start == x):
            return
        how = None
        if s1 < e:
            how = f"sends snapshot [{s0},{s1}] start {start}"
        elif s0 == start and s < x:          # needsRollback then takes the range as [start,start]
            how = f"sends snapshot [{s0},{s1}] with snap_start == start {start}, read as [{x},{x}]"
        if how is not None:
            out.append(finding_for(RESUME_COLLAPSED_SNAPSHOT.id,
                                   f"resume of vb {st.vb} {how}; the previous stream (connection "
                                   f"{point.conn}) stopped at {x} inside snapshot [{s},{e}] "
                                   f"(frame {point.frame}), so it must send [{s},{e}]: the "
                                   "server cannot see that a rollback is needed", pdu, msg,
                                   shown, (point.frame,)))


def _consumer(c: Conn, st: Stream):
    """(DcpOpen name, bucket, vbucket, stream id), or None before the DcpOpen was accepted.
    The bucket is None when no SelectBucket was seen."""
    name = c.negotiation.name
    return None if name is None else (name, c.negotiation.bucket, st.vb, st.sid)
