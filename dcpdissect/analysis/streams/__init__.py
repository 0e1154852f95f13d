"""Stream semantics: the per-connection and per-stream state machines of DCP.

The :class:`StreamTracker` (:mod:`.tracker`) follows each DCP connection and each stream on
it, keyed by (connection, vbucket, stream id), and hands every message to the concerns that
judge it, in order:

* :mod:`.snapshots`: markers versus data, SeqnoAdvanced, OSO, snapshot completeness and the
  start-seqno convention of each marker (reported through ``on_marker``);
* :mod:`.correlation`: Add Stream versus the consumer's stream request, the stream's opaque,
  the consumer's answers (acks, rejections);
* :mod:`.resume`: whether a consumer resumes a stream where its previous one stopped.

:mod:`.state` holds what they share. What a connection negotiated (HELLO, DcpOpen, DcpControl,
SelectBucket) is the caller's :class:`~dcpdissect.analysis.negotiation.Negotiation`. What a
cut (missing bytes that hid messages, garbage skipped) could have hidden is not judged, nor
what needs the request of a stream whose request the capture did not show: one
``semantics-suppressed`` note says so.

The bounds that keep the state of a hostile capture small are in :mod:`.bounds`.
"""

from .snapshots import classify
from .tracker import StreamTracker

__all__ = ["StreamTracker", "classify"]
