"""Cut captures: header-only snapshot lengths and lost segments, legal and violating.

* ``cut-snaplen-128`` / ``cut-snaplen-256``: the clean replication stream captured with
  ``tcpdump -s 128`` / ``-s 256``: every frame cut, the messages whose header was captured
  decoded from their captured start; it stays clean (only info notes);
* ``cut-resume-collapsed-snap256``: the collapsed resume of ``resume-collapsed`` with
  ``-s 256``: stream requests, markers and failover logs fit, the error is still found;
* ``cut-lost-headers``: a lost segment that held a message's header half and the messages
  after it (a new snapshot among them): the stream's rules wait for its next marker, legal
  data in between is not judged, a violation after that marker is (``data-outside-snapshot``);
  the half header is a ``lost-pdu``;
* ``cut-request-hidden``: the consumer's second stream request lost and its ACKs never passing
  the hole, so the cut shows only after the producer's answer: ``response-without-request`` and
  the stream rules must wait for it and say nothing.
"""

from __future__ import annotations

from . import netsynth as ns
from .dsl import Script, Spec, dcp_open, doc, failover, marker, mutation, ok, stream_req
from .scenarios_basic import CONSUMER, PRODUCER_11209, replication
from .scenarios_streams import resume_collapsed


def lost_headers() -> list[Script]:
    s = Script(CONSUMER, PRODUCER_11209)
    s.c2s(dcp_open("cut-demo", 0x01, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(stream_req(7, 0x70))
    s.s2c(failover(0x70, (0x7A7A, 0)))
    s.s2c(marker(7, 0x70, 0, 5, "memory+checkpoint"),
          *[mutation(7, 0x70, i, f"k{i}", doc(i)) for i in range(1, 5)])
    s.s2c(mutation(7, 0x70, 5, "k5", doc(5)), segment_sizes=[12])   # header split: 12 | rest
    s.s2c(marker(7, 0x70, 6, 9, "memory+checkpoint"),     # a new snapshot and two of its
          mutation(7, 0x70, 6, "k6", doc(6)), mutation(7, 0x70, 7, "k7", doc(7)))   # items
    s.s2c(mutation(7, 0x70, 8, "k8", doc(8)), mutation(7, 0x70, 9, "k9", doc(9)))
    s.s2c(marker(7, 0x70, 10, 12, "memory+checkpoint"), mutation(7, 0x70, 10, "k10", doc(10)),
          mutation(7, 0x70, 15, "k15", doc(15)))        # outside [10,12]: judged again
    s.conv.close()
    return [s]


def _drop_rest_of_header(pkts):
    """The capture lost the segment with the rest of item 5's header and the one with the
    [6,9] snapshot (the consumer got them: its ACKs pass them)."""
    d = ns.data_indices(pkts, "s2c")
    i = next(k for k in d if len(pkts[k].payload) == 12)
    after = d[d.index(i) + 1:]
    return ns.drop(ns.drop(pkts, after[1]), after[0])


def request_hidden() -> list[Script]:
    s = Script(CONSUMER, PRODUCER_11209)
    s.c2s(dcp_open("cut-demo", 0x01, 1))
    s.s2c(ok(0x50, 1))
    s.c2s(stream_req(3, 0x30))
    s.s2c(failover(0x30, (0x3B3B, 0)))
    s.s2c(marker(3, 0x30, 0, 2, "memory+checkpoint"), mutation(3, 0x30, 1, "a", doc(1)),
          mutation(3, 0x30, 2, "b", doc(2)))
    s.c2s(stream_req(4, 0x40))                          # lost
    s.s2c(failover(0x40, (0x4C4C, 0)))                  # its answer: no request captured
    s.s2c(marker(4, 0x40, 0, 1, "memory+checkpoint"), mutation(4, 0x40, 1, "c", doc(1)))
    s.c2s(stream_req(5, 0x50))                          # shows the cut (its bytes follow it)
    s.s2c(failover(0x50, (0x5D5D, 0)))
    s.conv.close()
    return [s]


def _drop_second_request(pkts):
    d = ns.data_indices(pkts, "c2s")
    i = next(k for k in d if pkts[k].payload[:2] == b"\x80\x53" and pkts[k].payload[7] == 4)
    return ns.causal_acks(ns.drop(pkts, i))


SPECS = (
    Spec("cut-snaplen-128", "cut-snaplen-128.pcap",
         "the clean replication stream captured with tcpdump -s 128: header-only frames",
         lambda: [replication()], snaplen=128, resyncs=6),
    Spec("cut-snaplen-256", "cut-snaplen-256.pcap",
         "the clean replication stream captured with tcpdump -s 256", lambda: [replication()],
         snaplen=256, resyncs=6),
    Spec("cut-resume-collapsed-snap256", "cut-resume-collapsed-snap256.pcap",
         "the collapsed resume captured with tcpdump -s 256: the error is still found",
         resume_collapsed, snaplen=256),
    Spec("cut-lost-headers", "cut-lost-headers.pcap",
         "a lost segment holding half a header, a marker and items: the stream's rules resume "
         "at its next marker (and find data outside it)", lost_headers, _drop_rest_of_header,
         gaps=1, resyncs=1),
    Spec("cut-request-hidden", "cut-request-hidden.pcap",
         "a stream request lost, shown only after the producer answered it: nothing judged "
         "against it", request_hidden, _drop_second_request, gaps=1, resyncs=1),
)
