"""Evidence bundles reproduce their findings: for every rule of the catalogue, `analyze` on
the bundle of the rule's sample reports the rule again at the frames the bundle maps the
original ones to. The expected findings come from tests/golden/findings.jsonl; the frame
mapping from the bundle's frames.tsv; the tshark command from its README.txt, run as
written with the bundled plugin."""

import json
import os
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import RULES
from dcpdissect.analysis.run import analyze_file
from dcpdissect.capture.readers import open_capture
from dcpdissect.reports.evidence import (MAX_PER_RULE, reproduces, select_findings,
                                         write_bundle, write_evidence)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def _golden() -> dict[str, list[tuple[str, int]]]:
    out = defaultdict(list)
    for line in (ROOT / "tests/golden/findings.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[r["sample"]].append((r["rule"], r["frame"]))
    return out


GOLDEN = _golden()
RULES_BY_SAMPLE: dict[str, list[str]] = defaultdict(list)
for _rule in RULES.values():
    if _rule.sample in GOLDEN and not _rule.options:      # bundles of the default options
        RULES_BY_SAMPLE[_rule.sample].append(_rule.id)


def frame_map(bundle: Path) -> dict[int, int]:
    """Original frame -> bundle frame, from frames.tsv."""
    rows = (bundle / "frames.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:2] == ["evidence_frame", "original_frame"]
    return {int(o): int(n) for n, o, *_ in (r.split("\t") for r in rows[1:])}


def cli(*args, stdin=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "dcpdissect", *args], capture_output=True,
                          cwd=cwd, timeout=300, input=stdin,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_every_rule_with_a_sample_is_covered():
    """The parametrisation below covers every rule whose sample the golden file records."""
    covered = {r for rules in RULES_BY_SAMPLE.values() for r in rules}
    assert len(covered) >= 120
    assert {"resume-collapsed-snapshot", "resume-beyond-received", "marker-version",
            "data-duplicate-key", "stream-request-range"} & covered


@pytest.mark.parametrize("sample", sorted(RULES_BY_SAMPLE))
def test_bundle_reproduces_every_rule_of_its_sample(tmp_path, sample):
    path = SAMPLES / sample
    findings, summary = analyze_file(str(path))
    out = write_evidence(str(path), findings, summary, tmp_path)
    fmap = frame_map(out)
    again, _ = analyze_file(str(out / "evidence.pcapng"))
    got = {(f.rule, f.frame) for f in again}
    for rule in RULES_BY_SAMPLE[sample]:
        expected = sorted(frame for r, frame in GOLDEN[sample] if r == rule)[:MAX_PER_RULE]
        assert expected, f"{rule}: no finding in {sample}"
        lost = [n for n in expected if (rule, fmap.get(n)) not in got]
        assert not lost, f"{rule}: original frames {lost} not reproduced by the bundle"


def test_resume_bundle_keeps_the_previous_connection_and_renumbers(tmp_path):
    res = cli("analyze", "samples/resume-collapsed.pcap", "--evidence", str(tmp_path),
              "--fail-on", "never")
    assert res.returncode == 0, res.stderr
    fmap = frame_map(tmp_path)
    assert {12, 28} <= set(fmap)           # the cited frame of connection 1 and the finding
    readme = (tmp_path / "README.txt").read_text()
    command = next(l.strip() for l in readme.splitlines()
                   if l.strip().startswith("dcpdissect analyze "))
    again = cli(*shlex.split(command)[1:], "--format", "jsonl", "--fail-on", "never",
                cwd=tmp_path)
    records = [json.loads(l) for l in again.stdout.decode().splitlines()]
    hit = [r for r in records if r.get("rule") == "resume-collapsed-snapshot"]
    assert len(hit) == 1 and hit[0]["frame"] == fmap[28]
    assert f"(frame {fmap[12]})" in hit[0]["message"]
    report = (tmp_path / "report.md").read_text()
    assert f"### frame {fmap[28]} (original frame 28)" in report
    assert f"inside snapshot [1,4] (frame {fmap[12]})" in report


def test_stdin_is_spooled_into_the_bundle(tmp_path):
    data = (SAMPLES / "resume-collapsed.pcap").read_bytes()
    res = cli("analyze", "-", "--evidence", str(tmp_path), "--fail-on", "never", stdin=data)
    assert res.returncode == 0, res.stderr
    from_file = tmp_path / "from-file"
    cli("analyze", "samples/resume-collapsed.pcap", "--evidence", str(from_file),
        "--fail-on", "never")
    assert (tmp_path / "evidence.pcapng").read_bytes() == (from_file / "evidence.pcapng").read_bytes()
    assert frame_map(tmp_path) == frame_map(from_file) and len(frame_map(tmp_path)) > 20
    assert "(not in this capture)" not in (tmp_path / "report.md").read_text()


def test_no_findings_writes_no_capture(tmp_path):
    (tmp_path / "evidence.pcapng").write_bytes(b"stale")         # from an earlier run
    res = cli("analyze", "samples/resume-correct.pcap", "--evidence", str(tmp_path))
    assert res.returncode == 0
    stderr = res.stderr.decode()
    assert "no findings: no evidence capture written" in stderr
    assert "Traceback" not in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.txt", "report.md"]
    readme = (tmp_path / "README.txt").read_text()
    assert "No findings" in readme and "tshark" not in readme


@pytest.mark.tshark
@pytest.mark.parametrize("sample", ["violations-marker.pcap", "violations-structure.pcap",
                                    "tcp-mid-stream.pcap", "resume-collapsed.pcap",
                                    "ports-heuristic.pcap"])
def test_readme_tshark_command_shows_our_dissector(tmp_path, sample):
    """The command of README.txt, run as written in the bundle's directory, decodes every
    offending frame with the bundled plugin (fields dcp.*) and nothing is malformed."""
    res = cli("analyze", f"samples/{sample}", "--evidence", str(tmp_path), "--fail-on", "never")
    assert res.returncode == 0, res.stderr
    line = next(l.strip() for l in (tmp_path / "README.txt").read_text().splitlines()
                if l.strip().startswith("tshark "))
    assert "-X lua_script:dcpdissect.lua" in line
    frames = [int(n) for n in re.search(r"frame\.number in \{([^}]*)\}", line)[1].split(",")]
    shown = subprocess.run(shlex.split(line), cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    # (an expert info of a structure rule is in Wireshark's "Malformed" group: that is the
    # finding itself; a dissector that failed shows "[Malformed Packet")
    assert "Malformed Packet" not in shown.stdout and "Lua Error" not in shown.stdout
    fields = subprocess.run(shlex.split(line.replace(" -V ", " -T fields -e frame.number "
                                                     "-e frame.protocols -e dcp.opcode ")),
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    rows = {int(n): (protocols.split(":"), opcodes)
            for n, protocols, opcodes in (r.split("\t") for r in fields.stdout.splitlines())}
    assert sorted(rows) == sorted(frames)
    # every offending frame is our dissector's (or TLS, for a tls-connection finding), and
    # our fields are there
    assert all("dcp" in protocols or "tls" in protocols for protocols, _ in rows.values()), rows
    assert any(opcodes for _, opcodes in rows.values())


def test_bundle_keeps_its_frames_bytes_and_order(tmp_path):
    findings, summary = analyze_file(str(SAMPLES / "stream-markers.pcap"))
    out = write_evidence(str(SAMPLES / "stream-markers.pcap"), findings, summary, tmp_path)
    fmap = frame_map(out)
    with open_capture(str(SAMPLES / "stream-markers.pcap")) as r:
        original = {fr.number: fr.data for fr in r}
    with open_capture(str(out / "evidence.pcapng")) as r:
        kept = {fr.number: fr.data for fr in r}
    assert sorted(fmap.values()) == list(range(1, len(kept) + 1))
    for old, new in fmap.items():
        assert kept[new] == original[old]


@pytest.mark.parametrize("sample", ["tls13-resume-collapsed", "tls-problems"])
def test_bundle_of_a_decrypted_capture_reproduces_with_its_key_log(tmp_path, sample):
    """The TLS rules and the findings inside decrypted connections come back when the
    bundle's capture is analysed with the key log lines the bundle ships."""
    original = SAMPLES / "tls" / f"{sample}.pcap"
    keylog = original.with_suffix(".keylog")
    first = cli("analyze", str(original), "--tls-keylog", str(keylog), "--format", "jsonl",
                "--fail-on", "never", "--evidence", str(tmp_path))
    assert first.returncode == 0, first.stderr
    before = [json.loads(line) for line in first.stdout.splitlines()]
    assert before and (tmp_path / "keylog.txt").is_file()
    shipped = (tmp_path / "keylog.txt").read_text().splitlines()
    assert set(shipped) <= set(keylog.read_text().splitlines())
    fmap = frame_map(tmp_path)
    again = cli("analyze", str(tmp_path / "evidence.pcapng"), "--tls-keylog",
                str(tmp_path / "keylog.txt"), "--format", "jsonl", "--fail-on", "never")
    got = {(r["rule"], r["frame"]) for r in map(json.loads, again.stdout.splitlines())}
    lost = [(r["rule"], r["frame"]) for r in before
            if r["frame"] is not None and (r["rule"], fmap.get(r["frame"])) not in got]
    assert not lost, f"not reproduced by the bundle: {lost}"


@pytest.mark.tshark
@pytest.mark.parametrize("redact", [False, True])
def test_bundle_capture_carries_the_findings_as_packet_comments(tmp_path, redact):
    path = SAMPLES / "controls-violations.pcap"
    findings, summary = analyze_file(str(path))
    out = write_evidence(str(path), findings, summary, tmp_path, redact=redact)
    fmap = frame_map(out)
    capture = out / "evidence.pcapng"
    ran = subprocess.run(["tshark", "-r", str(capture), "-X", f"lua_script:{out / 'dcpdissect.lua'}",
                          "-Y", "frame.comment", "-T", "fields", "-e", "frame.number",
                          "-e", "frame.comment", "-e", "dcpfindings.severity",
                          "-E", "occurrence=a", "-E", "aggregator=\x01"],
                         capture_output=True, text=True, check=True, cwd=out)
    shown = defaultdict(list)
    for line in ran.stdout.splitlines():
        number, comments, severities = line.split("\t")
        for comment, severity in zip(comments.split("\x01"), severities.split("\x01")):
            rule = re.match(r"\[([\w-]+)\] ", comment).group(1)
            assert severity == RULES[rule].severity
            shown[int(number)].append(rule)
    # every bundled finding is a comment on each of its frames in the trimmed capture
    bundled = [f for f in findings if f.frame in fmap][:MAX_PER_RULE * len(RULES)]
    assert len(bundled) > 20
    for f in bundled:
        assert f.rule in shown[fmap[f.frame]], (f.rule, f.frame)
    # the report words them as the comments do
    report = (out / "report.md").read_text()
    for f in bundled[:5]:
        assert f.rule in report


# Captures that carry their own TLS key log (pcapng decryption secrets): a redacted bundle
# ships no key log (the decrypted connections' payloads are replaced whole), so the findings
# that need one are named as not reproduced; the unredacted bundle's capture analysed without
# a key log loses the same ones.
NEEDS_THE_KEY_LOG = {"tls-problems-dsb.pcapng", "tls13-half-dsb.pcapng",
                     "tls13-resume-collapsed-dsb.pcapng"}


@pytest.mark.slow
def test_redacted_bundles_give_the_findings_of_the_unredacted_ones(tmp_path):
    """On every sample with findings the redacted bundle's capture gives exactly the
    findings (rule, frame, count) of the unredacted bundle's capture, both analysed without
    a key log, and names as not reproduced exactly what the unredacted capture without a key
    log does not give back: nothing, except on the captures of NEEDS_THE_KEY_LOG."""
    compared, lossy = 0, set()
    from redaction_sweep import every_sample
    for path in every_sample(tmp_path):
        findings, summary = analyze_file(str(path))
        if not findings:
            continue
        plain = write_bundle(str(path), findings, summary, tmp_path / f"{path.name}-plain")
        redacted = write_bundle(str(path), findings, summary, tmp_path / f"{path.name}-red",
                                redact=True)
        fmap = frame_map(plain.path)
        assert frame_map(redacted.path) == fmap, path.name
        want = sorted((f.rule, f.frame) for f in analyze_file(str(plain.pcap))[0])
        got = sorted((f.rule, f.frame) for f in analyze_file(str(redacted.pcap))[0])
        assert got == want, path.name
        lost = [f for f in select_findings(findings) if not reproduces(f, set(want), fmap)]
        assert redacted.unreproduced == lost, path.name
        if lost:
            lossy.add(path.name)
        compared += 1
    assert compared >= 70 and lossy == NEEDS_THE_KEY_LOG


@pytest.mark.parametrize("archive", ["bug-1234.zip", "bug-1234.tar.gz"])
def test_a_bundle_can_be_one_archive_to_attach(tmp_path, archive):
    import tarfile
    import zipfile
    target = tmp_path / "out" / archive
    res = cli("analyze", "samples/resume-collapsed.pcap", "--evidence", str(target), "--redact",
              "--fail-on", "never")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in target.parent.iterdir()) == [archive]    # no leftovers
    unpacked = tmp_path / "unpacked"
    if archive.endswith(".zip"):
        with zipfile.ZipFile(target) as z:
            z.extractall(unpacked)
    else:
        with tarfile.open(target) as t:
            t.extractall(unpacked, filter="data")
    bundle = unpacked / "bug-1234"
    assert {p.name for p in bundle.iterdir()} == {"evidence.pcapng", "report.md", "frames.tsv",
                                                  "README.txt", "dcpdissect.lua"}
    again, _ = analyze_file(str(bundle / "evidence.pcapng"))
    assert [(f.rule, f.frame) for f in again] == [("resume-collapsed-snapshot",
                                                   frame_map(bundle)[28])]
    # a directory where the archive would go is refused before the capture is read
    target.unlink()
    target.mkdir()
    res = cli("analyze", "samples/resume-collapsed.pcap", "--evidence", str(target))
    assert res.returncode == 2 and b"is a directory" in res.stderr
