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

The bounds below keep the state of a hostile capture small. The modules read them from this
package at run time, so that a test can lower one.
"""

MAX_KEYS = 1024          # key hashes remembered per snapshot (until it completes)
MAX_PER_RULE = 10        # findings per stream and rule
MAX_PENDING = 4096       # unanswered stream requests remembered per connection
MAX_RESUME = 65536       # (consumer, vbucket) resume points remembered
MAX_ERRORS = 100         # consumer error findings held per connection until it closes
MAX_STREAMS = 65536      # streams (and unknown stream keys) tracked per connection
MAX_ADD_STREAMS = 256    # Add Stream requests remembered until correlated or answered

from .snapshots import classify  # noqa: E402  (the bounds first: the modules read them)
from .tracker import StreamTracker  # noqa: E402

__all__ = ["StreamTracker", "classify", "MAX_KEYS", "MAX_PER_RULE", "MAX_PENDING",
           "MAX_RESUME", "MAX_ERRORS", "MAX_STREAMS", "MAX_ADD_STREAMS"]
