"""Info findings that repeat (one per TLS connection on another port, ...) fold into one
row of the table and the Markdown after their first three; jsonl and ``--rule`` keep each."""

import json
import subprocess
import sys

from scapy.all import TCP, rdpcap, wrpcap

HTTPS = 8443        # the TLS connection of samples/ports-heuristic.pcap
# Its 50 frames hold TLS connections whose first records are frames 16 and 21; a copy of the
# 10 frames of the 8443 connection is appended per extra connection, its first record 4th.
FIRST_TWO = [16, 21]


def _with_tls_connections(samples_dir, path, copies: int) -> None:
    """ports-heuristic.pcap (MCBP on port 12000, HTTP, two TLS connections) with its
    connection to port 8443 repeated ``copies`` more times from other client ports, each
    copy after the original in time."""
    packets = list(rdpcap(str(samples_dir / "ports-heuristic.pcap")))
    tls = [p for p in packets if TCP in p and HTTPS in (p[TCP].sport, p[TCP].dport)]
    end = float(packets[-1].time)
    for n in range(1, copies + 1):
        for p in tls:
            q = p.copy()
            if q[TCP].dport == HTTPS:
                q[TCP].sport = 53000 + n
            else:
                q[TCP].dport = 53000 + n
            del q[TCP].chksum
            q.time = end + n + float(p.time) - float(tls[0].time)
            packets.append(q)
    wrpcap(str(path), packets)


def _run(path, *args) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "analyze", str(path),
                           "--fail-on", "never", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout


def _rows(out: str, rule: str) -> list[str]:
    """The finding rows (they start with a frame number) of ``rule``."""
    return [line for line in out.splitlines()
            if line.split()[:1] and line.split()[0].isdigit() and f"  {rule}  " in line]


def test_eight_tls_connections_give_three_rows_and_one_folded(samples_dir, tmp_path):
    path = tmp_path / "tls8.pcap"
    _with_tls_connections(samples_dir, path, 6)      # 2 TLS connections + 6 copies = 8
    rc, out = _run(path)
    rows = _rows(out, "tls-connection")
    assert rc == 0 and len(rows) == 4, out
    assert out.splitlines()[3].split()[:3] == ["tls-connection", "info", "8"]   # all counted
    assert [r.split()[0] for r in rows[:3]] == ["16", "21", "54"]
    assert ("5 more tls-connection findings, frames 64–104: --rule tls-connection or "
            "--format jsonl lists each") in rows[3], rows[3]
    live = subprocess.run([sys.executable, "-m", "dcpdissect", "analyze", "-"],
                          stdin=open(path, "rb"), capture_output=True, text=True).stdout
    assert len(_rows(live, "tls-connection")) == 4 and "5 more tls-connection" in live
    _, asked = _run(path, "--rule", "tls-connection")
    assert len(_rows(asked, "tls-connection")) == 8 and "more" not in asked
    _, jsonl = _run(path, "--format", "jsonl")
    tls = [r for r in map(json.loads, jsonl.splitlines()) if r.get("rule") == "tls-connection"]
    assert [r["frame"] for r in tls] == FIRST_TWO + [50 + 10 * n + 4 for n in range(6)]
    _, markdown = _run(path, "--format", "markdown")
    assert "5 more at frames: 64, 74, 84, 94, 104" in markdown
    assert markdown.count("### frame") == 3 + 1               # 3 TLS + the MCBP finding
    _, html = _run(path, "--format", "html")
    assert html.count("<td><code>tls-connection</code></td>") == 3
    assert ('5 more findings of <a href="#rule-tls-connection"><code>tls-connection</code>'
            "</a> are not listed") in html
    _, html = _run(path, "--format", "html", "--rule", "tls-connection")
    assert html.count("<td><code>tls-connection</code></td>") == 8 and "more findings" not in html
    _, markdown = _run(path, "--format", "markdown", "--rule", "tls-connection")
    assert markdown.count("### frame") == 8


def test_four_tls_connections_stay_a_row_each(samples_dir, tmp_path):
    """Folding one finding into a row would hide it for nothing: four rows stay four."""
    path = tmp_path / "tls4.pcap"
    _with_tls_connections(samples_dir, path, 2)
    _, out = _run(path)
    assert [r.split()[0] for r in _rows(out, "tls-connection")] == ["16", "21", "54", "64"]
    assert "more" not in out
