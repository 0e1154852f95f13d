"""With the plugin loaded, Wireshark loses nothing of its built-in Couchbase dissector.

Every message that is not DCP (HELLO, SelectBucket, server pushes, opcodes the tables do not
know) is also handed to the built-in dissector: in every frame, tshark shows exactly the
``couchbase.*`` fields of those messages that it shows without the plugin, and the protocol
column says DCP only where a DCP message completes, Couchbase where only others do.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from dcpdissect.protocol import DCP_OPCODES
from dcpdissect.reassembly.framing import Pdu
from dcpdissect.reassembly.pdus import iter_events

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "lua" / "dcpdissect.lua"
# Samples with messages other than DCP: HELLO; SelectBucket; opcodes 0x49 and 0xda with a
# HELLO; an unknown opcode's response.
SAMPLES = ["clean-replication.pcap", "identity-two-buckets-b-complete.pcap",
           "legal-server-behaviour.pcap", "violations-structure.pcap"]
BUILTIN = ["-d", "tcp.port==11209,couchbase", "-d", "tcp.port==11210,couchbase"]
OPTIONS = ["-o", "tcp.reassemble_out_of_order:TRUE"]


def _tshark(sample: Path, *args: str) -> str:
    return subprocess.run(["tshark", "-r", str(sample), *OPTIONS, *args], capture_output=True,
                          text=True, check=True).stdout


DCP_CODES = {f"0x{op.code:02x}" for op in DCP_OPCODES}
CLIENT_MAGICS = {"0x80", "0x81", "0x08", "0x18"}


def couchbase_messages(sample: Path, *args: str, dcp: bool = True) -> dict[int, list]:
    """Frame -> the messages the built-in dissector shows in it, each as its couchbase.*
    fields (name and shown value); without the DCP ones unless ``dcp``."""
    out: dict[int, list] = {}
    for packet in ET.fromstring(_tshark(sample, "-T", "pdml", *args)).iter("packet"):
        number = int(next(f for f in packet.iter("field")
                          if f.get("name") == "frame.number").get("show"))
        messages = []
        for proto in packet.iter("proto"):
            if proto.get("name") != "couchbase":
                continue
            fields = Counter((f.get("name"), f.get("show")) for f in proto.iter("field"))
            is_dcp = (any(("couchbase.magic", m) in fields for m in CLIENT_MAGICS)
                      and any(("couchbase.opcode", c) in fields for c in DCP_CODES))
            if dcp or not is_dcp:
                messages.append(fields)
        out[number] = messages
    return out


def protocol_column(sample: Path, *args: str) -> dict[int, str]:
    text = _tshark(sample, "-T", "fields", "-e", "frame.number", "-e", "_ws.col.Protocol", *args)
    return {int(n): p for n, p in (line.split("\t") for line in text.splitlines())}


def message_frames(sample: Path) -> tuple[set[int], set[int]]:
    """(frames that carry a DCP message, frames that carry any message), from the Python
    reassembly: a message belongs to the frame that completes it."""
    dcp, every = set(), set()
    dcp_codes = {op.code for op in DCP_OPCODES}
    for ev in iter_events(str(sample)):
        if type(ev) is Pdu:
            every.add(ev.frame)
            if ev.data[0] in (0x80, 0x81, 0x08, 0x18) and ev.data[1] in dcp_codes:
                dcp.add(ev.frame)
    return dcp, every


@pytest.mark.tshark
@pytest.mark.parametrize("name", SAMPLES)
def test_every_message_but_dcp_shows_what_the_builtin_dissector_shows(name):
    sample = ROOT / "samples" / name
    builtin = couchbase_messages(sample, *BUILTIN, dcp=False)
    plugged = couchbase_messages(sample, "-X", f"lua_script:{PLUGIN}")
    assert sum(map(len, builtin.values())) > 0, "the sample has messages other than DCP"
    for n in builtin:
        assert plugged[n] == builtin[n], f"frame {n}"


@pytest.mark.tshark
@pytest.mark.parametrize("name", SAMPLES)
def test_the_protocol_column_says_dcp_only_for_dcp(name):
    sample = ROOT / "samples" / name
    column = protocol_column(sample, "-X", f"lua_script:{PLUGIN}")
    dcp, every = message_frames(sample)
    for n in sorted(every):
        # (from Wireshark 4.2 the built-in dissector hands JSON values on: "Couchbase/JSON")
        wanted = "DCP" if n in dcp else "Couchbase"
        assert column[n].split("/")[0] == wanted, f"frame {n}: {column[n]}"
