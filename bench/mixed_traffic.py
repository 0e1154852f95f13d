"""Warnings and errors on captures that hold no MCBP at all: the nDPI test captures.

    python bench/mixed_traffic.py [--mirror DIR] [--dir DIR] [--workdir DIR] [--jobs N]
                                  [--mode default,any-port,...] [--all] [--write-reduced DIR]

The corpus is nDPI's ``tests/cfgs/default/pcap/`` (HTTP, TLS, BitTorrent, VPNs, databases:
no MCBP). It is extracted from a bare git mirror of the nDPI repository (``--mirror``,
default /work/.mirror/ntop+nDPI/repo) into ``--workdir``, or read from ``--dir``. Every
capture is analysed (all rules, ``analyze_file``) in each ``--mode``; one row per capture
with warnings or errors or a connection decoded as MCBP (``--all``: every capture) gives
their count by rule, and the last lines the totals per mode. Exits 1 when any mode has a
warning or an error.

``--write-reduced DIR`` (needs the mirror, tshark, editcap and mergecap) writes the reduced
corpus the tests use (tests/ndpi): the captures of :data:`REDUCED` whole, the connections of
:data:`CUTS` taken out of larger ones with tshark, one DCP sample merged into a capture with
mergecap (:data:`MERGE`), nDPI's licence text and a README naming the commit and the files.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dcpdissect.analysis.rules.model import SEVERITY_RANK  # noqa: E402
from dcpdissect.analysis.run import analyze_file  # noqa: E402
from dcpdissect.reassembly.pdus import Options, Summary  # noqa: E402

MIRROR = "/work/.mirror/ntop+nDPI/repo"
CORPUS = "tests/cfgs/default/pcap"
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")
KEYLOG = "CLIENT_RANDOM " + "ab" * 32 + " " + "cd" * 48 + "\n"    # secrets of no connection
MODES = {"default": Options(), "any-port": Options(any_port=True),
         "keylog": Options(tls_keylog=KEYLOG), "any-port+keylog": Options(any_port=True,
                                                                         tls_keylog=KEYLOG)}
ROOT = Path(__file__).resolve().parent.parent

# The reduced corpus: every cause of the warnings and errors --any-port reported when it
# decoded every connection, the heuristic's hard cases, and common protocols.
REDUCED = {
    "fuzz-2006-06-26-2594.pcap": "tcp-overlap-mismatch, unknown-magic; the merge target",
    "heuristic_tcp_ack_payload.pcap": "tcp-overlap-mismatch (51), unknown-magic",
    "whatsapp_voice_and_message.pcap": "tcp-overlap-mismatch, unknown-magic",
    "vnc.pcap": "tcp-cap (out-of-order bound)",
    "sccp_hw_conf_register.pcapng": "frame-too-large; its first header is plausible MCBP",
    "thrift.pcap": "frame-too-large; first byte a legal magic",
    "tls_heur__shadowsocks-tcp.pcapng": "frame-too-large, unknown-magic; Linux SLL",
    "viber.pcap": "frame-too-large, unknown-magic; TLS",
    "tls_multiple_synack_different_seq.pcapng": "tcp-seq-jump (two SYN-ACKs), unknown-magic",
    "google_ssl.pcap": "port 443 without a TLS record header; first byte a legal magic",
    "haproxy.pcap": "port 443, capture starts inside the connection",
    "443-opvn.pcap": "OpenVPN on port 443 (not TLS)",
    "netbios.pcap": "starts inside the connection; first byte a legal magic",
    "websocket.pcap": "WebSocket; starts inside, both directions start with a legal magic",
    "tls_certificate_too_long.pcap": "starts inside; both directions start with a legal magic",
    "fuzz-2006-09-29-28586.pcap": "a gap before the first byte of a direction (searched)",
    "smb_deletefile.pcap": "starts inside; 33 plausible headers in the searched window",
    "s7comm.pcap": "starts inside; plausible headers in both searched windows",
    "encrypted_sni.pcap": "starts inside, with a ClientHello",
    "443-curl.pcap": "TLS on 443",
    "bittorrent.pcap": "BitTorrent",
    "anyconnect-vpn.pcap": "Cisco AnyConnect VPN",
    "openvpn_nohmac_tcp.pcapng": "OpenVPN over TCP",
    "ssh.pcap": "SSH",
    "rdp.pcap": "RDP",
    "ftp.pcap": "FTP",
    "smtp-starttls.pcap": "SMTP with STARTTLS",
    "http2.pcapng": "HTTP/2",
    "ajp.pcap": "AJP",
    "memcached.cap": "memcached text protocol on 11211",
    "mongodb.pcap": "MongoDB",
    "cassandra.pcap": "Cassandra",
    "kafka.pcapng": "Kafka",
    "mssql_tds.pcap": "MS SQL (TDS)",
    "mysql.pcapng": "MySQL",
    "elasticsearch.pcap": "Elasticsearch",
    "smbv1.pcap": "SMBv1",
    "zabbix.pcap": "Zabbix (86 warnings and errors)",
}
# name -> (source capture, tshark display filter, why)
CUTS = {
    "1kxun-443-53406.pcap": ("1kxun.pcap", "tcp.port==53406 && ip.addr==119.235.235.84",
                             "port 443, starts inside: both directions start with a plausible "
                             "MCBP header (magic 0x80, opcode 0x02) that no second one follows"),
    "instagram-80-58216.pcap": ("instagram.pcap", "tcp.port==58216 && ip.addr==31.13.86.52",
                                "a plausible header whose frame ends at a legal magic (the "
                                "corpus's nearest chain)"),
}
# (capture, DCP sample, seconds added to the sample's times, merged capture): the sample
# starts at 1120469635.0, where the capture's frames are densest
MERGE = ("fuzz-2006-06-26-2594.pcap", "samples/resume-collapsed.pcap", 1120469635 - 1700000000,
         "fuzz-2006-06-26-2594+resume-collapsed.pcap")


def extract(mirror: str, workdir: Path) -> Path:
    """The corpus's captures written from the mirror's HEAD into ``workdir`` (kept: a
    second run at the same commit reuses the files); returns their folder."""
    out = workdir / "ndpi-pcap"
    out.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", mirror]
    commit = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    stamp = out / "COMMIT"
    same_commit = stamp.exists() and stamp.read_text().strip() == commit
    listing = subprocess.run(git + ["ls-tree", "HEAD", CORPUS + "/"], check=True,
                             capture_output=True, text=True).stdout
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        name = path.rsplit("/", 1)[-1]
        target = out / name
        if meta.split()[1] != "blob" or not name.endswith(CAPTURE_SUFFIXES) or (
                target.exists() and same_commit):
            continue
        blob = subprocess.run(git + ["cat-file", "blob", meta.split()[2]], capture_output=True)
        if blob.returncode:             # a mirror may leave out its largest files
            print(f"{name}: not in the mirror, left out", file=sys.stderr)
            continue
        target.write_bytes(blob.stdout)
    stamp.write_text(commit + "\n")
    return out


def write_reduced(mirror: str, corpus: Path, out: Path) -> None:
    """The reduced corpus (see the module's docstring) from the extracted ``corpus``."""
    out.mkdir(parents=True, exist_ok=True)
    commit = (corpus / "COMMIT").read_text().strip()
    rows = []
    for name, why in REDUCED.items():
        (out / name).write_bytes((corpus / name).read_bytes())
        rows.append(f"| `{name}` | whole | {why} |")
    for name, (source, display_filter, why) in CUTS.items():
        subprocess.run(["tshark", "-r", str(corpus / source), "-Y", display_filter, "-F", "pcap",
                        "-w", str(out / name)], check=True, capture_output=True)
        rows.append(f"| `{name}` | `{source}`, `tshark -Y '{display_filter}' -F pcap` | {why} |")
    target, sample, shift, merged = MERGE
    shifted = out / (merged + ".tmp")
    subprocess.run(["editcap", "-t", str(shift), str(ROOT / sample), str(shifted)], check=True)
    subprocess.run(["mergecap", "-F", "pcap", "-w", str(out / merged), str(corpus / target),
                    str(shifted)], check=True)
    shifted.unlink()
    rows.append(f"| `{merged}` | `{target}` and this project's `{sample}`: "
                f"`editcap -t {shift}`, then `mergecap -F pcap` | a DCP sample inside mixed "
                f"traffic: its findings must stay exactly the same |")
    licence = subprocess.run(["git", "-C", mirror, "show", "HEAD:COPYING"], check=True,
                             capture_output=True).stdout
    (out / "COPYING").write_bytes(licence)
    (out / "README.md").write_text(README.format(commit=commit, corpus=CORPUS,
                                                 rows="\n".join(rows)))


README = """# Captures from nDPI's test suite

Written by `python bench/mixed_traffic.py --write-reduced tests/ndpi` from
https://github.com/ntop/nDPI at commit {commit}, folder `{corpus}/`.
nDPI and its test captures are licensed under the GNU Lesser General Public License
version 3 (LGPL-3.0): its text is in `COPYING` beside this file.

None of these captures holds MCBP. When `--any-port` decoded every connection as MCBP,
instead of asking a connection off the DCP ports to prove it is, it reported 5,489 warnings
and errors in 283 of the 543 captures of that folder (414 in 28 of the 40 here); with a key
log lacking their secrets, every TLS connection was a `tls-no-key` warning (798 in 124
captures; 26 in 7 here). These files cover every cause of them (the "why" column names what
each gave then), the heuristic's hard cases and common protocols.
`tests/test_mixed_traffic.py` asserts that none of them gives a warning or an error, with
`--any-port` and without, with such a key log and without.

| file | taken as | why |
|---|---|---|
{rows}
"""


def judge(job: tuple[str, str]) -> tuple[str, str, dict, Summary]:
    """(file, mode, {rule: count} of warnings and errors, summary) of one run."""
    path, mode = job
    findings, summary = analyze_file(path, MODES[mode], Summary())
    counts = Counter(f.rule for f in findings if SEVERITY_RANK[f.severity] > 0)
    return path, mode, dict(counts), summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", default=MIRROR, help="bare git mirror of nDPI")
    p.add_argument("--dir", help="read the captures from this folder instead of the mirror")
    p.add_argument("--workdir", default="/tmp/dcp-mixed", help="where the corpus is extracted")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--mode", default=",".join(MODES),
                   help="of " + ", ".join(MODES) + " (keylog: --tls-keylog with a key log "
                        "that has the secrets of no connection)")
    p.add_argument("--all", action="store_true", help="a row for every capture")
    p.add_argument("--write-reduced", metavar="DIR", help="write the reduced corpus there")
    args = p.parse_args(argv)
    modes = [m for m in args.mode.split(",") if m]
    if args.dir:
        folder = Path(args.dir)
    elif os.path.isdir(args.mirror):
        folder = extract(args.mirror, Path(args.workdir))
        print(f"corpus: {args.mirror} at {(folder / 'COMMIT').read_text().strip()}",
              file=sys.stderr)
        if args.write_reduced:
            write_reduced(args.mirror, folder, Path(args.write_reduced))
            return 0
    else:
        print(f"no nDPI mirror at {args.mirror} (give --mirror or --dir)", file=sys.stderr)
        return 2
    files = sorted(str(f) for f in folder.iterdir() if f.name.endswith(CAPTURE_SUFFIXES))
    jobs = [(f, m) for f in files for m in modes]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(judge, jobs, chunksize=4))
    totals = {m: Counter() for m in modes}
    noisy = Counter()
    decoded = Counter()         # connections decoded as MCBP (the corpus has none)
    print("capture\tmode\twarnings+errors\tMCBP connections\tby rule")
    for path, mode, counts, summary in results:
        totals[mode].update(counts)
        decoded[mode] += summary.connections
        if counts:
            noisy[mode] += 1
        if counts or summary.connections or args.all:
            listed = ", ".join(f"{r} {n}" for r, n in sorted(counts.items())) or "-"
            print(f"{os.path.basename(path)}\t{mode}\t{sum(counts.values())}\t"
                  f"{summary.connections}\t{listed}")
    for mode in modes:
        listed = ", ".join(f"{r} {n}" for r, n in totals[mode].most_common())
        print(f"TOTAL {mode}: {sum(totals[mode].values())} warnings and errors in "
              f"{noisy[mode]} of {len(files)} captures" + (f" ({listed})" if listed else "")
              + f"; {decoded[mode]} connections decoded as MCBP")
    return 1 if any(totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
