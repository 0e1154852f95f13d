"""Feed one connection's messages to the analyzer, as reassembly would hand them over."""

from dcpdissect.analysis.engine import Analyzer
from dcpdissect.reassembly.connections import ConnectionOpened, StreamGap
from dcpdissect.reassembly.framing import Hidden, Pdu, Resync

GAP = "gap"     # in place of a message: 100 bytes lost in that direction, hiding messages


def feed(*messages, mid_stream: bool = False) -> list[tuple[str, int]]:
    """(rule, index of the message) of every finding for (direction, bytes | GAP) messages
    on one connection (client 10.0.0.2:5000, server 10.0.0.1:11210). A GAP is what the
    framer makes of lost bytes that cover a message boundary: the gap, the cut it hides,
    and the resync at the next message of that direction."""
    a = Analyzer()
    out = a.feed(ConnectionOpened(1, ("10.0.0.2", 5000), ("10.0.0.1", 11210), 1, 0, mid_stream))
    off = [0, 0]
    last = [0, 0]
    cut = [False, False]
    for i, (d, data) in enumerate(messages, start=2):
        if data == GAP:
            out += a.feed(StreamGap(1, d, off[d] + 100, 100, i, i))
            out += a.feed(Hidden(1, d, off[d], last[d], "lost", i, i))
            off[d] += 100
            cut[d] = True
            continue
        if cut[d]:
            out += a.feed(Resync(1, d, off[d], 0, "after_gap", None, "", i, i))
            cut[d] = False
        out += a.feed(Pdu(1, d, off[d], data, (i,), i, i))
        off[d] += len(data)
        last[d] = i
    out += a.finish()
    return [(f.rule, f.frame - 2) for f in out]
