"""The Lua plugin is the same program in Lua 5.2 (Wireshark up to 4.2) and Lua 5.4 (4.4 on).

lua/dcpdissect.lua runs in Debian's ``lua5.2`` and ``lua5.4`` interpreters over the part of
Wireshark's API it uses (tests/lua/wireshark.lua), on every message of the samples, messages
drawn from the protocol tables and bytes that are not MCBP: the tree, the expert infos and the
Info column must be identical in 5.2, in 5.4, and in 5.4 with every number read from the
packet a float (what a Wireshark that pushes lua_Number gives). The stand-in API is checked
against the real thing: for the same messages, tshark 4.0 with the plugin shows the same
expert infos. A static check rejects calls that exist in one Lua only.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from dcpdissect.fuzz.messages import Stream, message
from dcpdissect.reassembly.connections import ConnectionOpened
from dcpdissect.reassembly.framing import Pdu
from dcpdissect.reassembly.pdus import iter_events

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "lua" / "dcpdissect.lua"
RUN = ROOT / "tests" / "lua" / "run.lua"
SAMPLES = sorted(p for p in (ROOT / "samples").glob("*.pcap*") if not p.name.endswith(".gz"))
CLIENT, SERVER = ("10.0.0.2", 50000), ("10.0.0.1", 11210)


def _line(frame, stream, from_client, client, server, completeness, data, reported=None):
    return (f"{frame} {stream} {int(from_client)} {client[0]} {client[1]} {server[0]} {server[1]} "
            f"{completeness} {reported or len(data)} {data.hex()}")


def sample_lines(path: Path) -> list[str]:
    """Every message of a capture, as the Python reassembly frames them."""
    conns, lines = {}, []
    for ev in iter_events(str(path)):
        if type(ev) is ConnectionOpened:
            conns[ev.conn] = ev
        elif type(ev) is Pdu:
            c = conns[ev.conn]
            lines.append(_line(ev.frame, ev.conn - 1, ev.direction == 0, c.client, c.server,
                               "-" if c.mid_stream else 31, ev.data, len(ev.data) + ev.missing))
    return lines


def drawn_lines(seed: int, count: int) -> list[str]:
    """A conversation of messages drawn from the protocol tables, then bytes that are not
    MCBP (an illegal magic, a body beyond the frame limit, a header cut short)."""
    rng, stream, lines = random.Random(seed), None, []
    for n in range(count):
        if n % 50 == 0:
            stream = Stream(rng)
        direction, data = message(rng, stream, rng.randrange(4), rng.randrange(1 << 32))
        lines.append(_line(n + 1, seed, direction == 0, CLIENT, SERVER, 31, data))
    garbage = [bytes([0x42]) + bytes(30), bytes.fromhex("80570000") + bytes(4) + b"\xff" * 4
               + bytes(12), bytes.fromhex("8157")]
    lines += [_line(count + i + 1, seed, i % 2 == 0, CLIENT, SERVER, 31, g)
              for i, g in enumerate(garbage)]
    return lines


def run_plugin(lua: str, pdus: Path, floats: bool = False) -> str:
    env = dict(os.environ, WS_FLOAT_NUMBERS="1" if floats else "0")
    ran = subprocess.run([lua, str(RUN), str(PLUGIN), str(pdus)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert ran.returncode == 0, f"{lua}: {ran.stderr[-2000:]}"
    return ran.stdout


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lua") / "pdus.txt"
    lines = [line for sample in SAMPLES for line in sample_lines(sample)]
    lines += [line for seed in range(4) for line in drawn_lines(seed, 600)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("lua", ["lua5.2", "lua5.4"])
def test_the_interpreters_are_the_debian_ones(lua):
    assert shutil.which(lua), f"{lua} is not installed (scripts/setup.sh installs it)"
    ran = subprocess.run([lua, "-e", "print(_VERSION)"], capture_output=True, text=True)
    assert ran.stdout.strip() == "Lua " + lua[3:]


def test_the_plugin_shows_the_same_in_lua_52_and_54(corpus):
    shown = {"5.2": run_plugin("lua5.2", corpus), "5.4": run_plugin("lua5.4", corpus),
             "5.4, floats": run_plugin("lua5.4", corpus, floats=True)}
    frames = shown["5.2"].count("\nframe ") + 1
    assert frames == len(corpus.read_text().splitlines()) > 5000
    severities = Counter(re.findall(r"^\s*expert severity\.(\w+)", shown["5.2"], re.M))
    assert severities["ERROR"] > 200 and severities["WARN"] > 500, severities
    assert "[dissector error]" not in shown["5.2"]
    for version in ("5.4", "5.4, floats"):
        if shown[version] != shown["5.2"]:
            a, b = shown["5.2"].splitlines(), shown[version].splitlines()
            first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            pytest.fail(f"Lua {version} differs from Lua 5.2 at line {first + 1}:\n"
                        f"  5.2: {a[first]}\n  {version}: {b[first]}")


def _experts_by_frame(text: str) -> Counter:
    found, frame = Counter(), None
    for line in text.splitlines():
        m = re.match(r"frame (\d+):", line)
        if m:
            frame = int(m.group(1))
            continue
        m = re.match(r"\s*expert \S+ \S+ (\[.*)$", line)
        if m:
            found[(frame, m.group(1))] += 1
    return found


@pytest.mark.tshark
@pytest.mark.parametrize("name", ["violations-marker.pcap", "violations-stream-request.pcap",
                                  "violations-structure.pcap", "violations-validator.pcap",
                                  "violations-add-stream.pcap", "hostile-escape-overrun.pcap",
                                  "stream-consumer.pcap"])
def test_the_stand_in_api_agrees_with_tshark(name, tmp_path):
    sample = ROOT / "samples" / name
    pdus = tmp_path / "pdus.txt"
    pdus.write_text("\n".join(sample_lines(sample)) + "\n")
    mine = _experts_by_frame(run_plugin("lua5.2", pdus))
    ran = subprocess.run(["tshark", "-r", str(sample), "-X", f"lua_script:{PLUGIN}",
                          "-o", "tcp.reassemble_out_of_order:TRUE", "-T", "fields",
                          "-e", "frame.number", "-e", "_ws.expert.message",
                          "-E", "occurrence=a", "-E", "aggregator=\x01"],
                         capture_output=True, text=True, check=True)
    theirs = Counter()
    for line in ran.stdout.splitlines():
        frame, _, messages = line.partition("\t")
        for text in messages.split("\x01"):
            if text.startswith("["):
                theirs[(int(frame), text)] += 1
    assert sum(theirs.values()) > 0
    assert mine == theirs


# --- the static check ----------------------------------------------------------------------

VERSION_BOUND = {
    r"\bbit32\.": "bit32 (Lua 5.2 only; use bit)",
    r"(?<![\w.:])unpack\s*\(": "global unpack (Lua 5.1; use table.unpack)",
    r"\bloadstring\b": "loadstring (Lua 5.1)",
    r"\b[sg]etfenv\b": "setfenv/getfenv (Lua 5.1)",
    r"(?<![\w.:])module\s*\(": "module() (Lua 5.1)",
    r"\bmath\.(pow|mod|ldexp|frexp|cosh|sinh|tanh|log10)\b": "math function gone in 5.3/5.4",
    r"\btable\.(getn|setn|maxn|move)\b": "table.getn/setn/maxn (gone) or table.move (5.3+)",
    r"\bstring\.(gfind|pack|unpack|packsize)\b": "string function of one version only",
    r"\bmath\.(type|tointeger|ult|maxinteger|mininteger)\b": "math function of 5.3+ only",
    r"\butf8\.": "utf8 library (5.3+)",
    r"//": "integer division (5.3+)",
    r"<<|>>|&|(?<![=<>~])~(?!=)|(?<![|])\|(?![|])": "bitwise operator (5.3+)",
    r"<(const|close)>": "attribute (5.4)",
}


def code_of(lua: str) -> str:
    """The Lua source without comments and string literals (what the checks read)."""
    out, i, n = [], 0, len(lua)
    while i < n:
        if lua.startswith("--[[", i) or lua.startswith("--[=[", i):
            close = "]]" if lua.startswith("--[[", i) else "]=]"
            i = lua.find(close, i) + len(close)
        elif lua.startswith("--", i):
            i = lua.find("\n", i) if "\n" in lua[i:] else n
        elif lua[i] in "'\"":
            quote, i = lua[i], i + 1
            while i < n and lua[i] != quote:
                i += 2 if lua[i] == "\\" else 1
            i += 1
            out.append('""')
        elif lua.startswith("[[", i):
            i = lua.find("]]", i) + 2
            out.append('""')
        else:
            out.append(lua[i])
            i += 1
    return "".join(out)


def version_bound(lua: str) -> list[str]:
    code = code_of(lua)
    return [f"line {code[:m.start()].count(chr(10)) + 1}: {m.group(0)!r}: {why}"
            for pattern, why in VERSION_BOUND.items() for m in re.finditer(pattern, code)]


def test_the_plugin_calls_nothing_of_one_lua_version_only():
    assert version_bound(PLUGIN.read_text()) == []


@pytest.mark.parametrize("snippet", [
    "local x = bit32.band(a, 1)", "local a, b = unpack(t)", "f = loadstring(s)",
    "setfenv(1, {})", "module('x')", "local p = math.pow(2, 3)", "n = table.getn(t)",
    "local s = string.pack('>I4', 1)", "if math.type(x) then end", "local q = a // 2",
    "local m = a & 0xff", "local s = a << 2", "local y = ~a", "local z = a | b",
    "local c <const> = 1", "for c in utf8.codes(s) do end"])
def test_the_static_check_rejects_each_version_bound_call(snippet):
    assert version_bound(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "local a, b = table.unpack(t)", "if a ~= b then end", "x = a or b -- a | b, bit32.band",
    "s = 'a // b & c'", "y = bit.band(a, bit.bnot(b))", "local z = a / 2",
    "--[[ bit32.bor ]] w = 1", "t = [[ unpack(x) ]]"])
def test_the_static_check_accepts_what_every_version_runs(snippet):
    assert version_bound(snippet) == []
