"""The real samples: scripted conversations replayed over kernel TCP and captured.

``python -m dcpdissect.samples.real_samples samples/real`` rebuilds every file
and its README.md table. Real captures differ byte for byte from run to run (timestamps,
sequence numbers, MAC addresses, segmenting); the repository keeps one run's files and
this command makes equivalent ones. It needs root, dumpcap, tcpdump, tshark, editcap,
capinfos and ``ip netns``.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..codec.header import peek
from ..protocol.constants import HEADER_SIZE
from . import scenarios_large, scenarios_moves, scenarios_streams
from .dsl import T0, Script
from .realnet import delete_frames, in_namespaces, missing, on_loopback
from .scenarios_basic import replication, stream_id_connector

PORTS = (11209, 11210)
TSHARK_DECODE = [arg for p in PORTS for arg in ("-d", f"tcp.port=={p},couchbase")] + [
    "-d", "udp.port==4789,vxlan"]
REPLICATION_SIDES = {"10.0.0.2": "client", "10.0.0.3": "client", "10.0.0.1": "server"}


@dataclass
class Made:
    """One written sample: its file name, how it was made and what it shows."""
    filename: str
    how: str
    shows: str


def replication_scripts() -> list[Script]:
    """The clean replication sample's scripts: replication on 11209 and the stream-id
    connector on 11210, half a microsecond apart as in ``clean-replication.pcap``."""
    return [replication(), stream_id_connector(start_ns=T0 + 500)]


def gzip_to(src: Path, dst: Path) -> None:
    with open(src, "rb") as f, gzip.GzipFile(dst, "wb", mtime=0) as gz:
        shutil.copyfileobj(f, gz)


def server_segments(path: Path, port: int) -> list[tuple[int, int, int]]:
    """(frame, stream offset, length) of every data segment the server on ``port`` sent,
    as tshark reads them (relative sequence numbers: offset = seq - 1)."""
    out = subprocess.run(["tshark", "-r", str(path), "-Y", f"tcp.srcport=={port} && tcp.len>0",
                          "-T", "fields", "-e", "frame.number", "-e", "tcp.seq", "-e", "tcp.len"],
                         capture_output=True, text=True, check=True).stdout
    rows = (line.split("\t") for line in out.splitlines())
    return [(int(frame), int(seq) - 1, int(length)) for frame, seq, length in rows]


def tshark_opcodes(path: Path) -> list[int]:
    """The opcode of every MCBP message tshark decodes, in frame order."""
    out = subprocess.run(["tshark", "-r", str(path), *TSHARK_DECODE, "-Y", "couchbase", "-T",
                          "fields", "-e", "couchbase.opcode", "-E", "occurrence=a"],
                         capture_output=True, text=True, check=True).stdout
    return [int(op, 16) for line in out.split() for op in line.split(",")]


# --- the samples ---------------------------------------------------------------------------

def replication_on_loopback(out: Path) -> list[Made]:
    made = []
    on_loopback(out / "replication-lo.pcapng", replication_scripts())
    made.append(Made("replication-lo.pcapng", "dumpcap -i lo, full snaplen, pcapng",
                     "the clean replication conversation (11209) and the stream-id connector "
                     "(11210) over real loopback TCP (MSS 65495): one segment per send, "
                     "ACKs delayed and carried by the answers, the two connections "
                     "interleaved"))
    for snaplen in (128, 256, 512):
        name = f"replication-lo-snap{snaplen}.pcap"
        on_loopback(out / name, replication_scripts(), snaplen=snaplen, fmt="pcap")
        made.append(Made(name, f"dumpcap -i lo -s {snaplen} -P (pcap)",
                         f"the same conversation with frames cut at {snaplen} bytes: "
                         "headers of later messages in a segment are not captured"))
    return made


def resume_on_loopback(out: Path) -> list[Made]:
    made = []
    for name, scripts, shows in (
            ("resume-collapsed", scenarios_streams.resume_collapsed,
             "resume {3,3} start 3 after items 2 and 3 of snapshot [1,4]: accepted, data lost"),
            ("resume-correct", scenarios_streams.resume_correct,
             "resume {1,4} start 3 after items 2 and 3 of snapshot [1,4]: rolled back to 1")):
        on_loopback(out / f"{name}-lo.pcapng", scripts())
        made.append(Made(f"{name}-lo.pcapng", "dumpcap -i lo, full snaplen, pcapng; the "
                         "reconnection really 50 ms after the first connection", shows))
    return made


def moves_on_loopback(out: Path) -> list[Made]:
    """A consumer that moves to another node, a node that restarts (scenarios_moves)."""
    made = []
    for name, scripts, shows in (
            ("move-node-collapsed", lambda: scenarios_moves.moved(True),
             "a connector's vbucket moves from node A (no FIN) to node C; the resume on C sends "
             "{3,3} start 3 after items 2, 3 of [1,4] (collapsed)"),
            ("move-node-correct", lambda: scenarios_moves.moved(False),
             "the same move resumed with {1,4} start 3: C rolls back to 1"),
            ("restart-rollback-legal", lambda: scenarios_moves.restarted(10),
             "a node restarted between two connections (branch at 10): ROLLBACK(10) before "
             "the new log, which the next success brings")):
        on_loopback(out / f"{name}-lo.pcapng", scripts())
        made.append(Made(f"{name}-lo.pcapng", "dumpcap -i lo, full snaplen, pcapng; nodes "
                         "A and C are two loopback addresses", shows))
    return made


def big_document(out: Path, work: Path) -> list[Made]:
    """The 12 MB document on loopback, and two copies with one frame deleted."""
    script = scenarios_large.big_document()
    doc_off, doc = next((off, data) for d, off, data in script.messages
                        if d == "s2c" and len(data) > 1 << 20)
    head = peek(doc)
    value_start = doc_off + HEADER_SIZE + head.framing_len + head.extlen + head.keylen
    value_end = doc_off + len(doc)
    raw = work / "big-document-lo.pcapng"
    on_loopback(raw, [script])
    segments = server_segments(raw, 11209)
    inside = [s for s in segments if s[1] >= value_start and s[1] + s[2] <= value_end]
    middle = inside[len(inside) // 2]
    header = next(s for s in segments if s[1] <= doc_off < s[1] + s[2])
    made = [Made("big-document-lo.pcapng.gz", "dumpcap -i lo, full snaplen, pcapng, gzip",
                 f"one producer send: a marker, items 1 and 2, the {len(doc)}-byte JSON "
                 f"document (item {scenarios_large.DOCUMENT_SEQNO}) and item 4, in "
                 f"{sum(1 for s in segments if s[1] < value_end and s[1] + s[2] > doc_off)} "
                 "segments of up to 64 KB")]
    gzip_to(raw, out / made[0].filename)
    for name, (frame, off, length), what in (
            ("big-document-lost-value", middle,
             f"bytes {middle[1] - value_start}..{middle[1] - value_start + middle[2]} of the "
             "document's value only"),
            ("big-document-lost-headers", header,
             f"the marker, items 1 and 2 and the document's header with the first "
             f"{header[1] + header[2] - value_start} bytes of its value")):
        cut = work / f"{name}.pcapng"
        delete_frames(raw, cut, [frame])
        made.append(Made(f"{name}.pcapng.gz", f"big-document-lo with frame {frame} deleted "
                         f"(editcap): server stream bytes {off}..{off + length}",
                         f"a lost segment carrying {what}"))
        gzip_to(cut, out / made[-1].filename)
    return made


def replication_in_namespaces(out: Path) -> list[Made]:
    made = []
    link = {ip: (side, "link") for ip, side in REPLICATION_SIDES.items()}
    in_namespaces(out / "replication-veth.pcapng", replication_scripts(), link,
                  capture_side="client", interfaces=lambda sp: [sp.veth["client"]])
    made.append(Made("replication-veth.pcapng", "client and server in two network namespaces "
                     "joined by a veth pair; dumpcap on the client's veth",
                     "the clean replication over Ethernet (MSS 1460): ARP, and sends longer "
                     "than the MSS captured whole as GSO super-segments"))
    in_namespaces(out / "replication-vxlan.pcapng", replication_scripts(), link,
                  spaces_kw={"vxlan": True}, capture_side="client",
                  interfaces=lambda sp: [sp.veth["client"]])
    made.append(Made("replication-vxlan.pcapng", "the namespaces joined by VXLAN id 42 "
                     "(UDP 4789) over the veth pair; dumpcap on the client's veth (underlay)",
                     "every TCP segment inside UDP 4789 + VXLAN + Ethernet; inner GSO "
                     "super-segments longer than the inner MSS (1410)"))
    in_namespaces(out / "replication-vxlan-any.pcap", replication_scripts(), link,
                  spaces_kw={"vxlan": True}, capture_side="client",
                  interfaces=lambda sp: ["any"], tool="tcpdump", fmt="pcap")
    made.append(Made("replication-vxlan-any.pcap", "the VXLAN namespaces; tcpdump -i any in "
                     "the client's namespace (Linux cooked v2)",
                     "each TCP segment twice: plain on the VXLAN device and encapsulated "
                     "on the veth"))
    both = {"10.0.0.1": ("server", "lo"), "10.0.0.2": ("server", "lo"),
            "10.0.0.3": ("client", "link")}
    in_namespaces(out / "two-interfaces.pcapng", replication_scripts(), both,
                  capture_side="server", interfaces=lambda sp: ["lo", sp.veth["server"]])
    made.append(Made("two-interfaces.pcapng", "dumpcap -i lo -i <veth> in the server's "
                     "namespace: replication inside it over lo, the connector from the other "
                     "namespace over the veth",
                     "one pcapng with two interfaces whose blocks are written per "
                     "interface buffer, not in timestamp order"))
    return made


GROUPS = {
    "replication": lambda out, work: replication_on_loopback(out),
    "resume": lambda out, work: resume_on_loopback(out),
    "moves": lambda out, work: moves_on_loopback(out),
    "big-document": big_document,
    "namespaces": lambda out, work: replication_in_namespaces(out),
}


def build_all(out: Path, only: list[str] | None = None) -> list[Made]:
    """Rebuild every group of samples (or only those named)."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    with tempfile.TemporaryDirectory() as work:
        for name, group in GROUPS.items():
            if only is None or name in only:
                made += group(out, Path(work))
    return made


def readme(out: Path, made: list[Made]) -> str:
    """The README, its table rows in file name order; rows of files not rebuilt now are
    kept from the README there."""
    rows = {}
    old = out / "README.md"
    if old.is_file():
        for line in old.read_text().splitlines():
            if line.startswith("| `"):
                rows[line.split("`")[1]] = line
    for m in made:
        ops = tshark_opcodes(out / m.filename)
        rows[m.filename] = f"| `{m.filename}` | {m.how} | {m.shows} | {len(ops)} |"
    rows = [rows[k] for k in sorted(rows) if (out / k).is_file()]
    return "\n".join([
        "# Real captures",
        "",
        "Scripted DCP conversations (the `Script`s of `dcpdissect/samples/`) played over real",
        "kernel TCP sockets and captured with dumpcap or tcpdump: real segment sizes (GSO",
        "super-segments on loopback, veth and VXLAN), delayed ACKs, snaplen cuts and a real",
        "VXLAN tunnel. Loopback replays use 127.42.c.d for the scripted a.b.c.d;",
        "namespace replays keep the scripted addresses. Rebuild (as root) with",
        "",
        "    python -m dcpdissect.samples.real_samples samples/real",
        "",
        "Each rebuild differs byte for byte (times, sequence numbers, MAC addresses); the",
        "messages are the same. The last column is what tshark 4.0 decodes",
        f"(`tshark {' '.join(TSHARK_DECODE)}`).",
        "",
        "| file | how it was made | what it shows | MCBP messages (tshark) |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpdissect.samples.real_samples",
                                description="rebuild the real samples (needs root)")
    p.add_argument("dir", help="output folder, e.g. samples/real")
    p.add_argument("--only", nargs="+", choices=sorted(GROUPS), help="rebuild these groups")
    args = p.parse_args(argv)
    why = missing(namespaces=True)
    if why:
        print(f"cannot make real captures here: {why}", file=sys.stderr)
        return 2
    out = Path(args.dir)
    made = build_all(out, args.only)
    (out / "README.md").write_text(readme(out, made))
    for m in made:
        print(out / m.filename)
    return 0


if __name__ == "__main__":
    sys.exit(main())
