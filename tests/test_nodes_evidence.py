"""``dcpdissect nodes --evidence``: a bundle of two trimmed captures, on the real two-point
captures of samples/multinode (see its README). The frames the findings cite are found by
tshark's own decoding in the trimmed captures and mapped back through frames.tsv to the
frames the samples' README names; the bundle's own command compares the trimmed captures
again and gives the finding back at those frames."""

import io
import re
import subprocess
import tarfile
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from dcpdissect.cli import main
from test_redaction import leaks, tshark_documents

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "multinode"
DECODE = ["-d", "tcp.port==11209,couchbase"]
SEQNO = "couchbase.vbucket==1 && couchbase.opcode==0x57 && couchbase.extras.by_seqno=="
ACK = "couchbase.magic==0x81 && couchbase.opcode==0x56"


def nodes(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["nodes", *map(str, argv)])
    return code, out.getvalue()


def bundle_of(name: str, target: Path, *extra) -> int:
    return nodes(f"replica={SAMPLES / f'{name}-replica.pcapng'}",
                 f"active={SAMPLES / f'{name}-active.pcapng'}", "--evidence", target, *extra)[0]


def tshark(path: Path, display_filter: str, field: str = "frame.number") -> list[str]:
    out = subprocess.run(["tshark", "-r", str(path), *DECODE, "-Y", display_filter, "-T",
                          "fields", "-e", field], check=True, capture_output=True,
                         text=True).stdout
    return out.split("\n")[:-1]


def original(folder: Path) -> dict[int, int]:
    """frames.tsv: evidence frame -> original frame."""
    rows = (folder / "frames.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:2] == ["evidence_frame", "original_frame"]
    return {int(r.split("\t")[0]): int(r.split("\t")[1]) for r in rows[1:]}


def rerun(bundle: Path) -> str:
    """The bundle's README command (``dcpdissect nodes ...``), run in the bundle."""
    [command] = [line.strip() for line in (bundle / "README.txt").read_text().splitlines()
                 if line.strip().startswith("dcpdissect nodes ")]
    argv = command.split()[2:]
    code, out = nodes(*[a.replace("=", f"={bundle}/", 1) for a in argv])
    assert code == 1
    return out


# (sample, rule, the point that saw it sent and its filter, the other point and the filters
# of the frames it cites there, the last of them the message after the gap), the frames
# per the samples' README and test_nodes.py
NOOP_REPLY = "couchbase.magic==0x81 && couchbase.opcode==0x5c"
CASES = {
    "dropped": ("message-lost-between-points", "active", SEQNO + "2", "replica",
                [SEQNO + "1", SEQNO + "3"]),
    "ack-dropped": ("snapshot-ack-lost-between-points", "replica", ACK, "active", [
        "couchbase.extras.flags.dcp_snapshot_marker_ack==1",
        "couchbase.magic==0x80 && couchbase.opcode==0x53", NOOP_REPLY]),
}


@pytest.mark.tshark
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_bundle_reproduces_the_finding_at_the_frames_tshark_finds(tmp_path, name):
    rule, sender, sent, receiver, around = CASES[name]
    bundle = tmp_path / "bundle"
    assert bundle_of(name, bundle) == 1
    there, here = bundle / sender, bundle / receiver
    [frame] = map(int, tshark(there / "evidence.pcapng", sent))
    sent_original = tshark(SAMPLES / f"{name}-{sender}.pcapng", sent)
    assert [str(original(there)[frame])] == sent_original
    assert tshark(here / "evidence.pcapng", sent) == []        # never arrived, as originally
    cited = [int(n) for f in around for n in tshark(here / "evidence.pcapng", f)[:1]]
    assert len(cited) == len(around)
    assert [original(here)[n] for n in cited] == [
        int(tshark(SAMPLES / f"{name}-{receiver}.pcapng", f)[0]) for f in around]
    # each capture ends with the message after the gap, as that point saw it
    assert max(original(here).values()) == original(here)[cited[-1]]
    assert max(original(there).values()) == int(
        tshark(SAMPLES / f"{name}-{sender}.pcapng", around[-1])[0])
    [comment] = tshark(there / "evidence.pcapng", f"frame.number=={frame}", "frame.comment")
    assert comment.startswith(f"[{rule}] ")
    listed = {point: {int(n) for n in frames.split(", ")} for point, frames in re.findall(
        r"(\w+) frames? ([\d, ]+\d)", comment.split("in the evidence captures: ")[1])}
    assert frame in listed[sender] and set(cited) == listed[receiver]
    for n in cited:
        [note] = tshark(here / "evidence.pcapng", f"frame.number=={n}", "frame.comment")
        assert note.startswith(f"[{rule}] ")
    again = rerun(bundle)
    assert rule in again and f"{sender} frame {frame} " in again
    assert f"frames {cited[-2]} and {cited[-1]}" in again
    readme = (bundle / "README.txt").read_text()
    assert "Every finding is reproduced by the evidence captures" in readme
    assert "Redaction: none." in readme
    report = (bundle / "report.md").read_text()
    assert f"### {rule} (reproduced by the evidence captures)" in report
    assert f"{frame} ({sent_original[0]})" in report and "## Clock offset" in report


def test_a_clean_pair_writes_a_bundle_that_says_so_and_no_capture(tmp_path):
    bundle = tmp_path / "bundle"
    assert bundle_of("forwarded", bundle) == 0
    assert sorted(p.name for p in bundle.iterdir()) == ["README.txt", "report.md"]
    for text in ((bundle / "README.txt").read_text(), (bundle / "report.md").read_text()):
        assert "No message was lost between replica and active" in text
        assert "no evidence capture was written" in text


@pytest.mark.tshark
def test_the_archive_holds_the_bundle_and_its_command_runs_there(tmp_path):
    archive = tmp_path / "case-17.tar.gz"
    assert bundle_of("dropped", archive) == 1
    with tarfile.open(archive) as t:
        names = sorted(t.getnames())
        t.extractall(tmp_path / "x")
    assert {"case-17/README.txt", "case-17/report.md", "case-17/dcpdissect.lua",
            "case-17/active/evidence.pcapng", "case-17/active/frames.tsv",
            "case-17/replica/evidence.pcapng", "case-17/replica/frames.tsv"} <= set(names)
    assert "message-lost-between-points" in rerun(tmp_path / "x" / "case-17")


@pytest.mark.tshark
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_redacted_bundle_reproduces_and_leaks_no_document(tmp_path, name):
    """One secret for both points: the redacted mutations still match across the points
    (the finding comes back); no key or value tshark decodes in either original capture is
    in any file of the bundle, which the unredacted bundle does hold (the control)."""
    secrets = set()
    for point in ("replica", "active"):
        secrets |= tshark_documents(SAMPLES / f"{name}-{point}.pcapng")
    assert secrets
    plain, redacted = tmp_path / "plain", tmp_path / "redacted"
    assert bundle_of(name, plain) == 1 and bundle_of(name, redacted, "--redact") == 1
    files = [p for p in sorted(redacted.rglob("*")) if p.is_file() and p.name != "dcpdissect.lua"]
    assert len(files) == 6
    found = [hit for p in files for hit in leaks(secrets, p.name, p.read_bytes())]
    assert not found, found[:5]
    assert leaks(secrets, "evidence.pcapng", (plain / "active" / "evidence.pcapng").read_bytes())
    readme = (redacted / "README.txt").read_text()
    assert "Every finding is reproduced" in readme and "Redaction: applied" in readme
    assert CASES[name][0] in rerun(redacted)


def test_an_unusable_target_or_redact_alone_is_one_line_before_reading(tmp_path, capsys):
    occupied = tmp_path / "file"
    occupied.write_text("x")
    assert bundle_of("dropped", occupied) == 2
    assert bundle_of("dropped", occupied / "bundle") == 2
    assert nodes(SAMPLES / "dropped-replica.pcapng", SAMPLES / "dropped-active.pcapng",
                 "--redact")[0] == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"dcpdissect: error: --evidence {occupied}: exists and is not a directory",
                   f"dcpdissect: error: --evidence {occupied / 'bundle'}: cannot create the "
                   "directory (Not a directory)",
                   "dcpdissect nodes: error: --redact redacts the --evidence bundle (the "
                   "report itself shows no document)"]
