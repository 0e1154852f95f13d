"""Framing and TCP rules: what reassembly and MCBP framing report.

Judged by :mod:`dcpdissect.analysis.engine` from the reassembly events.
"""

from .model import ERROR, INFO, WARNING, family

rule = family("framing")

CAPTURE_GAP = rule(
    "capture-gap", INFO, "bytes missing from the capture (lost segment)",
    "TCP reassembly: stream semantics are suppressed across the gap", "tcp-loss.pcap")
LOST_PDU = rule(
    "lost-pdu", INFO, "a message whose header a cut or the end of the capture left incomplete",
    "MCBP framing: a message whose 24-byte header was captured is decoded from its "
    "captured start; one whose header itself was cut, or whose end never came before the "
    "capture ended, cannot be", "cut-lost-headers.pcap")
UNCAPTURED_NOT_JUDGED = rule(
    "uncaptured-not-judged", INFO, "a rule could not judge messages whose bytes the capture cut",
    "a frame cut by the snapshot length (tcpdump -s) or a lost segment keeps a message's "
    "header; the rules that need its value (or key, or extras) say once that they could "
    "not judge it", "cut-snaplen-128.pcap")
RESYNC_AFTER_GARBAGE = rule(
    "resync-after-garbage", WARNING, "bytes that are not MCBP were skipped to find the next header",
    "MCBP framing: a header must follow the previous frame's body", "violations-garbage.pcap")
UNKNOWN_MAGIC = rule(
    "unknown-magic", ERROR, "a header with an illegal magic byte",
    "magic.h is_legal(): 0x80 0x81 0x08 0x18 0x82 0x83; the server disconnects",
    "violations-garbage.pcap")
FRAME_TOO_LARGE = rule(
    "frame-too-large", ERROR, "frame larger than the server's 30 MiB max_packet_size",
    "daemon/settings.h max_packet_size default 30 MiB; the server disconnects",
    "violations-garbage.pcap")
MID_STREAM_START = rule(
    "mid-stream-start", INFO, "the capture starts in the middle of a connection",
    "no handshake seen: decoding resynchronised on the first plausible header",
    "tcp-mid-stream.pcap")
TCP_OVERLAP_MISMATCH = rule(
    "tcp-overlap-mismatch", WARNING, "a retransmission carried different bytes than the original",
    "TCP reassembly keeps the first bytes seen", "tcp-retransmit.pcap")
TCP_CAP = rule(
    "tcp-cap", INFO, "a reassembly bound was hit (out-of-order buffer or connection table)",
    "bounded resources: the oldest state is given up and reported; a fact about the "
    "capture and this reader, not about the cluster", "violations-garbage.pcap")
TCP_SEQ_JUMP = rule(
    "tcp-seq-jump", WARNING, "a TCP sequence number jumped farther than any window",
    "TCP reassembly: no window exceeds 2^30 bytes; the stream continues at the new number",
    "hostile-seq-jump.pcap")
FINDINGS_CAPPED = rule(
    "findings-capped", INFO, "more findings of one rule than are kept; the rest are counted",
    "bounded resources: at most MAX_FINDINGS_PER_RULE findings of each rule are kept per "
    "capture", "hostile-findings-flood.pcap")
TLS_CONNECTION = rule(
    "tls-connection", INFO, "a TLS connection: encrypted, not decoded",
    "a TLS record header (0x16 0x03 0x0X) starts a direction, or the connection is on the "
    "TLS port 11207: its MCBP cannot be read without the session keys (give a key log with "
    "--tls-keylog; off 11207, the DCP ports and --port, also when the key log lacks its "
    "secrets)", "ports-heuristic.pcap")
CONNECTIONS_NOT_MCBP = rule(
    "connections-not-mcbp", INFO,
    "TCP connections whose bytes are not MCBP: not decoded, counted by server port",
    "--any-port judges every connection off the DCP ports and --port as Wireshark's "
    "heuristic dissectors do: MCBP only when plausible headers (legal magic, known opcode, "
    "sane lengths) chain, a header right after the previous frame, in every direction "
    "that carries bytes, or when a request meets its answer; a connection whose start "
    "was not captured shows its chain within its first 64 KiB. Reported once per capture, "
    "never as a framing error: such bytes never were MCBP", "ports-heuristic.pcap",
    options=("--any-port",))

RULES = (
    CAPTURE_GAP, LOST_PDU, UNCAPTURED_NOT_JUDGED, RESYNC_AFTER_GARBAGE, UNKNOWN_MAGIC,
    FRAME_TOO_LARGE, MID_STREAM_START, TCP_OVERLAP_MISMATCH, TCP_CAP, TCP_SEQ_JUMP,
    FINDINGS_CAPPED, TLS_CONNECTION, CONNECTIONS_NOT_MCBP,
)
