"""Never silently clean: MCBP on any port found by its first bytes, TLS reported,
other TCP left alone, and a capture without MCBP is an error that names --port."""

from __future__ import annotations

import json

import pytest

from dcpdissect.analysis.run import analyze_file
from dcpdissect.cli import main
from dcpdissect.codec import encode
from dcpdissect.reassembly.pdus import (ConnectionOpened, Options, Pdu, Summary, TlsConnection,
                                        direction_verdict, iter_events)
from dcpdissect.samples import netsynth as ns
from dcpdissect.samples.dsl import T0, dcp_open, ok
from dcpdissect.samples.scenarios_ports import CLIENT_HELLO, dcp_on, http, raw, tls


def capture(tmp_path, name, *scripts):
    path = tmp_path / name
    ns.write_pcap(str(path), [s.conv for s in scripts])
    return str(path)


def pdus(path, options=None):
    """(direction, data, frames, frame, ts) of every PDU, and the summary."""
    summary = Summary()
    out = [(e.conn, e.direction, e.data, e.frames, e.frame, e.ts_ns)
           for e in iter_events(path, options, summary) if type(e) is Pdu]
    return out, summary


def rules(findings):
    return [(f.rule, f.frame, f.frames, f.connection, f.message.replace(":12000", ":11210"))
            for f in findings]


def test_dcp_on_port_12000_decodes_as_on_11210(tmp_path):
    on_11210 = capture(tmp_path, "a.pcap", dcp_on(11210))
    on_12000 = capture(tmp_path, "b.pcap", dcp_on(12000))
    want, _ = pdus(on_11210)
    got, summary = pdus(on_12000)
    assert len(want) == 11 and got == want
    assert summary.heuristic_ports == {12000: 1} and summary.connections == 1
    assert rules(analyze_file(on_12000)[0]) == rules(analyze_file(on_11210)[0])
    # --port decodes it without the heuristic, identically
    assert pdus(on_12000, Options(ports=(12000,)))[0] == want


def test_http_beside_it_stays_undecoded_and_silent(tmp_path):
    alone = capture(tmp_path, "dcp.pcap", dcp_on(12000))
    mixed = capture(tmp_path, "mixed.pcap", http(8080), dcp_on(12000, start_ns=T0 + 7))
    got, summary = pdus(mixed)
    assert [p[1:3] for p in got] == [p[1:3] for p in pdus(alone)[0]]
    assert {p[0] for p in got} == {1}            # the HTTP connection takes no number
    assert summary.undecoded_ports == {8080: 1} and summary.heuristic_ports == {12000: 1}
    assert summary.tcp["connections_dropped"] == 1
    findings = analyze_file(mixed)[0]
    assert [f.rule for f in findings] == [f.rule for f in analyze_file(alone)[0]]
    assert all(f.connection == 1 for f in findings)


def test_http_on_a_dcp_port_is_still_decoded_as_mcbp(tmp_path):
    """--port and the default ports are not second-guessed: garbage there is reported."""
    path = capture(tmp_path, "http11210.pcap", http(11210))
    assert analyze_file(path)[0]


@pytest.mark.parametrize("port", [8443, 11207])
def test_tls_connection_is_an_info_finding(tmp_path, port):
    path = capture(tmp_path, "tls.pcap", tls(port, 52000))
    events = list(iter_events(path))
    assert [type(e) for e in events] == [TlsConnection]
    findings, summary = analyze_file(path)
    assert [(f.rule, f.severity, f.frame) for f in findings] == [("tls-connection", "info", 4)]
    assert f"10.0.0.8:52000 → 10.0.0.1:{port}" in findings[0].message
    assert "TLS record" in findings[0].message
    assert summary.tls_connections == 1 and summary.connections == 0


def test_tls_port_without_a_record_header_is_counted_by_port(tmp_path):
    s = raw(ns.Endpoint("10.0.0.8", 52001), ns.Endpoint("10.0.0.1", 11207),
            ("c2s", b"\x17\x03\x03\x00\x20" + bytes(32)))
    findings, summary = analyze_file(capture(tmp_path, "tls.pcap", s))
    assert [f.rule for f in findings] == ["tls-connection"] and "TLS port" in findings[0].message
    assert summary.tls_connections == 1


def test_only_http_exits_2_with_the_hint(tmp_path, capsys):
    path = capture(tmp_path, "http.pcap", http(8080))
    for command in ("analyze", "dissect"):
        assert main([command, path]) == 2
        out, err = capsys.readouterr()
        hint = [line for line in err.splitlines() if "no MCBP" in line]
        assert len(hint) == 1 and "--port" in hint[0] and "8080" in hint[0], err
    # --any-port judges it alike: nothing decoded, no result but the error, still exit 2
    assert main(["analyze", path, "--any-port", "--format", "jsonl"]) == 2
    out, err = capsys.readouterr()
    [record] = map(json.loads, out.splitlines())
    assert record["type"] == "error" and "8080" in record["error"]
    assert err.count("\n") == 1 and "no MCBP" in err


def test_heuristic_ports_named_on_stderr(tmp_path, capsys):
    path = capture(tmp_path, "mixed.pcap", http(8080), dcp_on(12000))
    assert main(["dissect", path, "--format", "jsonl"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 11 and all(json.loads(x)["connection"] == 1 for x in out.splitlines())
    named = [line for line in err.splitlines() if "first bytes" in line]
    assert len(named) == 1 and "12000" in named[0] and "8080" not in named[0]
    assert main(["dissect", path, "--port", "12000"]) == 0
    assert "first bytes" not in capsys.readouterr().err


def test_the_sample(samples_dir):
    findings, summary = analyze_file(str(samples_dir / "ports-heuristic.pcap"))
    tls_found = [f for f in findings if f.rule == "tls-connection"]
    assert len(tls_found) == 2 and summary.tls_connections == 2
    assert summary.heuristic_ports == {12000: 1} and summary.undecoded_ports == {8080: 1}
    assert summary.pdus == 11


# -- the verdict on the first bytes of a direction ------------------------------------------

HELLO = encode(0x1F, key=b"x", opaque=1)
OPEN = dcp_open("n", 1, 2)


def test_direction_verdict():
    assert direction_verdict(b"") is None
    assert direction_verdict(CLIENT_HELLO) == "tls"
    assert direction_verdict(b"\x16\x03") is None
    assert direction_verdict(b"\x16\x03\x09abc") == "no"
    assert direction_verdict(b"GET / HTTP/1.1\r\n") == "no"
    assert direction_verdict(HELLO[:10]) is None
    assert direction_verdict(HELLO[:10], final=True) == "no"
    assert direction_verdict(HELLO + OPEN) == "mcbp"
    assert direction_verdict(HELLO) == "one"                 # waits for the answer or a 2nd
    assert direction_verdict(HELLO + OPEN[:5]) == "one"
    assert direction_verdict(HELLO + b"GET /") == "no"
    assert direction_verdict(HELLO + b"\x80" * 24) == "no"   # second header not plausible
    bad = bytearray(HELLO)
    bad[1] = 0xEE                                            # unknown opcode
    assert direction_verdict(bytes(bad) + OPEN) == "no"


def test_a_request_and_its_answer_confirm_each_other(tmp_path):
    s = raw(ns.Endpoint("10.0.0.2", 40000), ns.Endpoint("10.0.0.1", 9999),
            ("c2s", HELLO), ("s2c", ok(0x1F, 1)))
    got, summary = pdus(capture(tmp_path, "pair.pcap", s))
    assert [p[2] for p in got] == [HELLO, ok(0x1F, 1)]
    assert summary.heuristic_ports == {9999: 1}


def test_a_lone_request_is_not_enough(tmp_path, capsys):
    s = raw(ns.Endpoint("10.0.0.2", 40000), ns.Endpoint("10.0.0.1", 9999), ("c2s", HELLO))
    path = capture(tmp_path, "lone.pcap", s)
    assert pdus(path)[0] == []
    assert main(["analyze", path]) == 2
    assert "--port" in capsys.readouterr().err
    assert [p[2] for p in pdus(path, Options(ports=(9999,)))[0]] == [HELLO]


def test_connection_opened_order_and_numbers(tmp_path):
    """Decided connections are numbered 1, 2, ... in the order they are decided."""
    path = capture(tmp_path, "two.pcap", http(8080), dcp_on(12000, start_ns=T0 + 3),
                   tls(8443, 52000, start_ns=T0 + 5), dcp_on(11210, start_ns=T0 + 9))
    opened = [e for e in iter_events(path) if type(e) is ConnectionOpened]
    assert [e.conn for e in opened] == [1, 2]
    assert sorted(e.server[1] for e in opened) == [11210, 12000]
