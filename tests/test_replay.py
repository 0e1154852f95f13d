"""Real captures of replayed scripts (samples/real and live replays) against tshark.

Oracles: the scripts themselves (the messages each side sends, in order) and tshark 4.0's
own decoding (Couchbase dissector on 11209/11210, VXLAN on 4789). The committed files were
made by ``python -m dcpdissect.samples.real_samples samples/real``; the live tests replay
again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from dcpdissect.analysis.run import analyze_file
from dcpdissect.samples import (
    realnet, scenarios_basic, scenarios_large, scenarios_moves, scenarios_streams,
)
from dcpdissect.samples.dsl import Script, dcp_open, ok
from dcpdissect.samples.netsynth import Endpoint
from dcpdissect.samples.real_samples import replication_scripts
from dcpdissect.samples.realnet import on_loopback
from dcpdissect.samples.replay import Loopback, Player, timeline

REAL = Path(__file__).resolve().parent.parent / "samples" / "real"
DECODE = ["-d", "tcp.port==11209,couchbase", "-d", "tcp.port==11210,couchbase",
          "-d", "udp.port==4789,vxlan"]
SERVER_PORTS = {11209, 11210}
pytestmark = pytest.mark.tshark


def tshark(path, *args: str) -> list[list[str]]:
    out = subprocess.run(["tshark", "-r", str(path), *DECODE, *args], capture_output=True,
                         text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def tshark_conversations(path) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per TCP connection, the opcodes tshark decodes client->server and server->client."""
    conns: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"c2s": [], "s2c": []})
    for stream, sport, ops in tshark(path, "-Y", "couchbase", "-T", "fields", "-e", "tcp.stream",
                                     "-e", "tcp.srcport", "-e", "couchbase.opcode",
                                     "-E", "occurrence=a"):
        direction = "s2c" if int(sport) in SERVER_PORTS else "c2s"
        conns[stream][direction] += [int(op, 16) for op in ops.split(",")]
    return sorted((tuple(c["c2s"]), tuple(c["s2c"])) for c in conns.values())


def dissect_conversations(path) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The same from ``dcpdissect dissect --format jsonl``."""
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "dissect", "--format", "jsonl",
                           str(path)], capture_output=True, text=True)
    conns: dict[int, dict[str, list[int]]] = defaultdict(lambda: {"c2s": [], "s2c": []})
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        conns[msg["connection"]][msg["direction"]].append(msg["opcode"])
    return sorted((tuple(c["c2s"]), tuple(c["s2c"])) for c in conns.values())


def scripted(scripts: list[Script]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return sorted((tuple(f[1] for d, _, f in s.messages if d == "c2s"),
                   tuple(f[1] for d, _, f in s.messages if d == "s2c")) for s in scripts)


def is_subsequence(part, whole) -> bool:
    it = iter(whole)
    return all(x in it for x in part)


def count(conversations) -> int:
    return sum(len(c) + len(s) for c, s in conversations)


# --- committed samples -----------------------------------------------------------------

FULL = {
    "replication-lo.pcapng": replication_scripts,
    "resume-collapsed-lo.pcapng": scenarios_streams.resume_collapsed,
    "resume-correct-lo.pcapng": scenarios_streams.resume_correct,
    "big-document-lo.pcapng.gz": lambda: [scenarios_large.big_document()],
    "replication-veth.pcapng": replication_scripts,
    "replication-vxlan.pcapng": replication_scripts,
    "replication-vxlan-any.pcap": replication_scripts,
    "two-interfaces.pcapng": replication_scripts,
    "move-node-collapsed-lo.pcapng": lambda: scenarios_moves.moved(True),
    "move-node-correct-lo.pcapng": lambda: scenarios_moves.moved(False),
    "restart-rollback-legal-lo.pcapng": lambda: scenarios_moves.restarted(10),
}
FULL_COUNTS = {"replication-lo.pcapng": 77, "resume-collapsed-lo.pcapng": 16,
               "resume-correct-lo.pcapng": 13, "big-document-lo.pcapng.gz": 17,
               "move-node-collapsed-lo.pcapng": 14, "move-node-correct-lo.pcapng": 18,
               "restart-rollback-legal-lo.pcapng": 28}
CUT = {"replication-lo-snap128.pcap": (128, 31), "replication-lo-snap256.pcap": (256, 45),
       "replication-lo-snap512.pcap": (512, 65)}
LOSS = {"big-document-lost-value.pcapng.gz": 16, "big-document-lost-headers.pcapng.gz": 12}


def test_every_committed_sample_is_listed_and_documented():
    files = {p.name for p in REAL.iterdir() if p.name != "README.md"}
    assert files == set(FULL) | set(CUT) | set(LOSS)
    readme = (REAL / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in files)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FULL))
def test_tshark_decodes_every_scripted_message(name):
    """Full snaplen: per connection and direction, tshark's opcodes are the script's."""
    theirs = tshark_conversations(REAL / name)
    assert theirs == scripted(FULL[name]())
    if name in FULL_COUNTS:
        assert count(theirs) == FULL_COUNTS[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(FULL) - {"replication-vxlan.pcapng"}))
def test_dissect_decodes_what_tshark_decodes(name):
    assert dissect_conversations(REAL / name) == tshark_conversations(REAL / name)


@pytest.mark.parametrize("name", ["replication-vxlan.pcapng", "replication-vxlan-any.pcap"])
def test_dissect_decodes_the_vxlan_underlay(name):
    """Through the real kernel VXLAN tunnel (and with tcpdump -i any, where every segment
    shows twice: on the vxlan device and inside UDP 4789 on the veth): tshark's messages."""
    path = REAL / name
    assert dissect_conversations(path) == tshark_conversations(path)
    found, _ = analyze_file(str(path))
    assert [f.rule for f in found if f.severity != "info"] == []


@pytest.mark.parametrize("name", sorted(CUT))
def test_snaplen_cut_samples(name):
    """Frames are really cut at the snaplen; tshark decodes the recorded number of
    messages, all of them scripted ones in order (what dissect makes of cut frames is
    not asserted here)."""
    snaplen, decoded = CUT[name]
    lengths = [(int(c), int(w)) for c, w in tshark(REAL / name, "-T", "fields", "-e",
                                                     "frame.cap_len", "-e", "frame.len")]
    assert all(c == min(w, snaplen) for c, w in lengths)
    assert any(w > snaplen for _, w in lengths)
    theirs = tshark_conversations(REAL / name)
    assert count(theirs) == decoded
    for (tc, ts), (sc, ss) in zip(theirs, scripted(replication_scripts())):
        assert is_subsequence(tc, sc) and is_subsequence(ts, ss)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOSS))
def test_lost_segment_samples(name):
    """One frame fewer than the full capture; tshark (no resynchronisation) decodes the
    recorded number of messages; dissect reports one gap and decodes at least those: every
    message when only the document's value lost bytes (the document from its captured
    start), fewer when the lost frame held headers."""
    full = realnet.capinfos(REAL / "big-document-lo.pcapng.gz")
    cut = realnet.capinfos(REAL / name)
    assert int(cut["Number of packets"]) == int(full["Number of packets"]) - 1
    theirs = tshark_conversations(REAL / name)
    assert count(theirs) == LOSS[name]
    ours = dissect_conversations(REAL / name)
    for (tc, ts), (oc, os_) in zip(theirs, ours):
        assert is_subsequence(tc, oc) and is_subsequence(ts, os_)
    every = count(scripted([scenarios_large.big_document()]))
    assert count(ours) == every if "lost-value" in name else count(ours) < every
    summary = subprocess.run([sys.executable, "-m", "dcpdissect", "dissect", str(REAL / name)],
                             capture_output=True, text=True).stderr
    assert " 1 gap (" in summary


def test_vxlan_underlay_holds_udp_4789_with_inner_tcp():
    rows = tshark(REAL / "replication-vxlan.pcapng", "-Y", "tcp", "-T", "fields", "-e",
                  "udp.dstport", "-e", "vxlan.vni", "-e", "ip.src", "-e", "tcp.len",
                  "-E", "occurrence=a")
    assert rows
    for dport, vni, sources, _ in rows:
        assert dport == "4789" and vni == "42"
        outer, inner = sources.split(",")
        assert outer.startswith("192.0.2.") and inner.startswith("10.0.0.")
    assert max(int(n) for *_, n in rows) > 1410          # an inner GSO super-segment


def test_any_capture_shows_each_segment_on_both_devices():
    path = REAL / "replication-vxlan-any.pcap"
    assert realnet.capinfos(path)["File encapsulation"] == "linux-sll2"
    copies = Counter()
    for stream, seq, length, vni in tshark(path, "-Y", "tcp.len > 0", "-T", "fields", "-e",
                                            "tcp.stream", "-e", "tcp.seq", "-e", "tcp.len",
                                            "-e", "vxlan.vni"):
        copies[(stream, seq, length, vni == "42")] += 1
    assert copies and set(copies.values()) == {1}
    plain = {k[:3] for k in copies if not k[3]}
    tunnelled = {k[:3] for k in copies if k[3]}
    assert plain == tunnelled


def test_resume_reconnects_after_the_scripted_50_ms():
    """The scripted gap between the two connections is really slept."""
    syns = [float(t) for t, in tshark(REAL / "resume-collapsed-lo.pcapng", "-Y",
                                      "tcp.flags.syn == 1 && tcp.flags.ack == 0", "-T", "fields",
                                      "-e", "frame.time_relative")]
    assert len(syns) == 2 and 0.05 <= syns[1] - syns[0] < 1.0


def test_two_interface_pcapng_is_written_per_interface():
    path = REAL / "two-interfaces.pcapng"
    info = realnet.capinfos(path)
    assert info["Strict time order"] == "False"
    interfaces = Counter(row[0] for row in tshark(path, "-T", "fields", "-e", "frame.interface_id"))
    assert set(interfaces) == {"0", "1"}


# --- live replays ----------------------------------------------------------------------

def follow_bytes(path, stream: int) -> tuple[bytes, bytes]:
    """Both directions of one TCP connection as tshark reassembles them (follow,raw)."""
    out = subprocess.run(["tshark", "-r", str(path), "-q", "-z", f"follow,tcp,raw,{stream}"],
                         capture_output=True, text=True, check=True).stdout
    chunks = [line for line in out.splitlines()
              if line.strip() and not line.startswith(("=", "Follow", "Filter", "Node"))]
    client = b"".join(bytes.fromhex(c) for c in chunks if not c.startswith("\t"))
    server = b"".join(bytes.fromhex(c.strip()) for c in chunks if c.startswith("\t"))
    return client, server


def check_live(path, scripts):
    """Every scripted message once, in order, per direction, and the exact bytes."""
    assert tshark_conversations(path) == scripted(scripts)
    streams = sorted({int(r[0]) for r in tshark(path, "-Y", "tcp", "-T", "fields", "-e",
                                                "tcp.stream")})
    got = sorted(follow_bytes(path, s) for s in streams)
    want = sorted((s.conv.sent("c2s"), s.conv.sent("s2c")) for s in scripts)
    assert got == want


LIVE_SKIP = realnet.missing()
NETNS_SKIP = realnet.missing(namespaces=True)


@pytest.mark.slow
@pytest.mark.skipif(LIVE_SKIP is not None, reason=f"no live capture: {LIVE_SKIP}")
@pytest.mark.parametrize("nodelay", [True, False], ids=["nodelay", "nagle"])
def test_live_loopback_replay(tmp_path, nodelay):
    """add-stream: two interleaved connections and a pause, with and without Nagle; the
    delay hook holds the Add Stream response back a quarter of a second."""
    path = tmp_path / "add-stream.pcapng"

    def hold_response(ev):
        return 0.25 if ev.kind == "send" and ev.direction == "s2c" and ev.frames[0][1] == 0x51 \
            else 0.0

    on_loopback(path, scenarios_basic.add_stream(), {"nodelay": nodelay, "delay": hold_response})
    check_live(path, scenarios_basic.add_stream())
    times = {magic: float(t) for t, magic in tshark(
        path, "-Y", "couchbase.opcode == 0x51", "-T", "fields", "-e", "frame.time_relative",
        "-e", "couchbase.magic")}
    request, response = times["0x80"], times["0x81"]
    assert response - request >= 0.25


@pytest.mark.slow
@pytest.mark.skipif(LIVE_SKIP is not None, reason=f"no live capture: {LIVE_SKIP}")
def test_live_ipv6_on_loopback(tmp_path):
    path = tmp_path / "ipv6.pcapng"
    v6 = [scenarios_basic.replication(client=Endpoint("fd00::2", 50123),
                                      server=Endpoint("fd00::1", 11209))]
    on_loopback(path, v6)
    check_live(path, v6)
    assert {r[0] for r in tshark(path, "-Y", "tcp", "-T", "fields", "-e", "ipv6.src")} == {"::1"}


def small(port: int) -> Script:
    s = Script(Endpoint("10.0.7.2", port), Endpoint("10.0.7.1", 11210))
    s.c2s(dcp_open(f"ending-{port}", 0x1, 1))
    s.s2c(ok(0x50, 1))
    return s


@pytest.mark.slow
@pytest.mark.skipif(LIVE_SKIP is not None, reason=f"no live capture: {LIVE_SKIP}")
def test_live_endings(tmp_path):
    """FIN both ways, RST (SO_LINGER 0), a half-close and no close at all."""
    path = tmp_path / "endings.pcapng"
    endings = {0: "fin", 1: "rst", 2: "half", 3: "open"}
    ports = [51010, 51011, 51012, 51013]
    on_loopback(path, [small(p) for p in ports], {"endings": endings})
    flags = defaultdict(set)
    for sport, dport, fin, rst in tshark(path, "-Y", "tcp.flags.fin==1 || tcp.flags.reset==1",
                                         "-T", "fields", "-e", "tcp.srcport", "-e", "tcp.dstport",
                                         "-e", "tcp.flags.fin", "-e", "tcp.flags.reset"):
        client = int(sport) if int(dport) == 11210 else int(dport)
        side = "client" if int(dport) == 11210 else "server"
        flags[client] |= {f"{side} fin"} if fin in ("1", "True") else set()
        flags[client] |= {f"{side} rst"} if rst in ("1", "True") else set()
    assert flags[51010] == {"client fin", "server fin"}
    assert flags[51011] == {"client rst"}
    assert flags[51012] == {"client fin"}
    assert 51013 not in flags
    assert tshark_conversations(path) == scripted([small(p) for p in ports])


@pytest.mark.slow
@pytest.mark.skipif(NETNS_SKIP is not None, reason=f"no network namespaces: {NETNS_SKIP}")
def test_live_vxlan_between_namespaces(tmp_path):
    path = tmp_path / "vxlan.pcapng"
    scripts = [scenarios_basic.seed_add_stream()]
    sides = {"192.168.1.10": "client", "192.168.1.20": "server"}
    with realnet.Namespaces(vxlan=True) as spaces:
        for ip, side in sides.items():
            spaces.place(ip, side)
        marker = realnet.Marker(realnet.UNDERLAY[1], spaces.ns["client"], spaces.ns["server"])
        try:
            with Player(scripts, realnet.NamespaceNet(spaces, sides)) as player:
                with realnet.Capture(path, [spaces.veth["client"]], ns=spaces.ns["client"],
                                     markers=[marker]):
                    player.play()
        finally:
            marker.close()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert spaces.ns["client"] not in names and spaces.ns["server"] not in names
    check_live(path, [scenarios_basic.seed_add_stream()])
    vnis = {row[0] for row in tshark(path, "-Y", "tcp", "-T", "fields", "-e", "vxlan.vni")}
    assert vnis == {"42"}


@pytest.mark.slow
@pytest.mark.skipif(NETNS_SKIP is not None, reason=f"no network namespaces: {NETNS_SKIP}")
def test_live_replay_through_a_router_namespace(tmp_path):
    """Client and server in two namespaces routed by a third; one dumpcap per router veth
    keeps the packets coming in from its side ('inbound'): each file holds one side's
    packets only, and the two merged hold the whole conversation."""
    scripts = [scenarios_basic.seed_add_stream()]
    client, server = scripts[0].conv.client.ip, scripts[0].conv.server.ip
    files = {"client": tmp_path / "client.pcapng", "server": tmp_path / "server.pcapng"}
    placement = {client: ("client", "link"), server: ("server", "link")}
    with realnet.NamespaceReplay(scripts, placement, router=True) as lab:
        assert set(lab.spaces.ns) == {"client", "server", "router"}
        with lab.capture(files["client"], [lab.spaces.router_veth["client"]], "router",
                         bpf="inbound and ip"), \
                lab.capture(files["server"], [lab.spaces.router_veth["server"]], "router",
                            bpf="inbound and ip"):
            lab.play()
    for side, ip in (("client", client), ("server", server)):
        assert {row[0] for row in tshark(files[side], "-T", "fields", "-e", "ip.src")} == {ip}
    merged = tmp_path / "merged.pcapng"
    subprocess.run(["mergecap", "-w", str(merged), *map(str, files.values())], check=True)
    check_live(merged, [scenarios_basic.seed_add_stream()])


def test_timeline_keeps_global_order_and_groups():
    """The replay order: connections interleaved by their plan times, one event per group
    of coalesced frames, pauses as time gaps, the script's own close."""
    scripts = scenarios_basic.add_stream()
    events = timeline(scripts)
    assert [(e.script, e.kind, e.direction) for e in events[:4]] == [
        (0, "connect", "c2s"), (1, "connect", "c2s"), (0, "send", "c2s"), (1, "send", "c2s")]
    marker_send = next(e for e in events if e.kind == "send" and len(e.frames) == 3)
    assert [f[1] for f in marker_send.frames] == [0x56, 0x57, 0x57]
    add_stream_reply = next(e for e in events if e.script == 0 and e.direction == "s2c"
                            and e.frames[0][1] == 0x51)
    before = [e for e in events if e.script == 0][-3]       # its previous event: the request
    assert before.frames[0][1] == 0x51
    assert add_stream_reply.ts_ns - before.ts_ns >= 200_000       # the scripted pause
    assert [e.how for e in events if e.kind == "close"] == ["fin", "fin"]
    assert sum(len(e.frames) for e in events if e.kind == "send") == sum(
        len(s.messages) for s in scripts)


def test_loopback_addresses_stay_distinct():
    net = Loopback()
    assert net.address("10.0.0.1") == "127.42.0.1"
    assert net.address("10.0.3.2") == "127.42.3.2"
    assert net.address("fd00::1") == "::1"
    with pytest.raises(ValueError, match="both map"):
        net.address("192.168.0.1")
