"""The redaction check of one capture, and the sweep over every sample and fuzzed captures
(``python tests/redaction_sweep.py [--fuzz N]``, numbers on stdout).

For one capture: ``analyze --redact --evidence bundle.zip`` reproduces exactly the findings
of the unredacted bundle (its capture gives the same findings, rule, frame and count, as the
unredacted bundle's capture, and its README says every bundled finding is reproduced), and no
document key or value that tshark's built-in dissector decodes in the ORIGINAL capture is in
any output: the archive and each of its members, and the stdout of ``dissect --redact`` and
``analyze --redact`` in every format (test_redaction's oracle and rules for 4 bytes or more).
A key or value of 1 to 3 bytes occurs by chance in any text, so it is checked where it
would be leaked, message by message: in tshark's decoding of the redacted evidence capture
(the document messages of each bundle frame kept whole, against those of its original frame,
in order) and in the ``key`` of the ``dissect --redact --format jsonl`` records (against
tshark's keys of the original frame, in order); there no document message may keep its
short key or value. Frames whose document messages tshark and dcpdissect count differently
are left out of the short check (counted). Kept on purpose, so not searched: a snappy value's leading varint (its
uncompressed length).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import random
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_redaction import CLEAR, PORTS, leaks, run, tshark_documents  # noqa: E402

from dcpdissect.analysis.run import analyze_file  # noqa: E402
from dcpdissect.reassembly.pdus import Options  # noqa: E402
from dcpdissect.reports.evidence import reproduces, select_findings, write_bundle  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
OPTIONS = Options(ports=(12000,))
EXTRA = ("--port", "12000")


@dataclasses.dataclass
class Checked:
    findings: int = 0               # findings of the original capture
    reproduced: bool = True         # exactly, or no findings
    named: list = dataclasses.field(default_factory=list)   # rules of the bundled findings
    # that the unredacted bundle's capture does not give back either (without a key log),
    # which the README names as not reproduced
    refused: bool = False           # analyze refused the input (exit 2): no bundle
    leaks: list = dataclasses.field(default_factory=list)
    short: int = 0                  # short keys and values checked message by message
    skipped_frames: int = 0         # frames left out of the short check


def tshark_messages(capture: Path) -> dict[int, list[tuple[bytes, bytes]]]:
    """Frame -> (key, value) of each document message tshark decodes in it, in order; a
    snappy value without its leading varint (the uncompressed length, a number redaction
    keeps for the xattr rule)."""
    cmd = ["tshark", "-r", str(capture), "-o", "tcp.reassemble_out_of_order:TRUE", "-T", "pdml"]
    for p in PORTS:
        cmd += ["-d", f"tcp.port=={p},couchbase"]
    res = subprocess.run(cmd, capture_output=True, timeout=300)
    out: dict[int, list] = defaultdict(list)
    for packet in ET.fromstring(res.stdout or b"<pdml/>").iter("packet"):
        number = next(int(f.get("show")) for f in packet.iter("field")
                      if f.get("name") == "frame.number")
        for proto in packet.iter("proto"):
            if proto.get("name") != "couchbase":
                continue
            fields = {f.get("name"): f for f in proto.iter("field")}
            magic, opcode = fields.get("couchbase.magic"), fields.get("couchbase.opcode")
            if magic is None or opcode is None or int(magic.get("show"), 0) not in \
                    (0x80, 0x81, 0x08, 0x18) or int(opcode.get("show"), 0) in CLEAR:
                continue
            key, value = [bytes.fromhex((fields[n].get("value") or "") if n in fields else "")
                          for n in ("couchbase.key", "couchbase.value")]
            datatype = fields.get("couchbase.datatype")
            if datatype is not None and int(datatype.get("show"), 0) & 0x02:   # snappy
                value = value[_varint_size(value):]
            out[number].append((key, value))
    return out


def _varint_size(data: bytes) -> int:
    for i, byte in enumerate(data[:5]):
        if not byte & 0x80:
            return i + 1
    return 0


def _short(b: bytes) -> bool:
    return 0 < len(b) < 4


def _frame_map(tsv: str, every: bool = False) -> dict[int, int]:
    """Bundle frame -> original frame for the frames kept whole (frames.tsv); ``every``:
    original -> bundle frame for every frame."""
    rows = [r.split("\t") for r in tsv.splitlines()[1:]]
    if every:
        return {int(old): int(new) for new, old, _cut in rows}
    return {int(new): int(old) for new, old, cut in rows if cut == "0"}


def short_kept(original: dict, bundle: dict, fmap: dict[int, int]) -> tuple[int, list, int]:
    """Short keys and values of the ``original`` capture's document messages that the
    ``bundle`` capture's messages (tshark's decodings, frame -> messages; ``fmap``: bundle
    frame -> original frame) keep at their place: (checked, kept, frames left out)."""
    checked, kept, skipped = 0, [], 0
    for new, msgs in bundle.items():
        was = original.get(fmap.get(new), [])
        if len(was) != len(msgs):
            skipped += new in fmap
            continue
        for (key, value), (k, v) in zip(was, msgs):
            for secret, got, what in ((key, k, "key"), (value, v, "value")):
                if _short(secret):
                    checked += 1
                    if got == secret:
                        kept.append(f"frame {new}: {what} {secret!r}")
    return checked, kept, skipped


def check(capture: Path, work: Path) -> Checked:
    """The check of the module docstring on one capture."""
    work.mkdir(parents=True, exist_ok=True)
    result = Checked()
    outputs = {}
    for fmt in ("table", "jsonl"):
        _, outputs[f"dissect --format {fmt}"] = run("dissect", capture, "--format", fmt,
                                                    "--redact", *EXTRA)
    for fmt in ("table", "jsonl", "markdown", "html"):
        _, outputs[f"analyze --format {fmt}"] = run("analyze", capture, "--format", fmt,
                                                    "--redact", "--fail-on", "never", *EXTRA)
    archive = work / "bundle.zip"
    code, outputs["analyze --evidence"] = run("analyze", capture, "--evidence", archive,
                                              "--redact", "--fail-on", "never", *EXTRA)
    result.refused = code == 2 and not archive.exists()
    members = {}
    if archive.exists():
        outputs["bundle.zip"] = archive.read_bytes()
        with zipfile.ZipFile(archive) as z:
            members = {Path(n).name: z.read(n) for n in z.namelist()}
        outputs.update((n, b) for n, b in members.items() if n != "dcpdissect.lua")
    secrets = tshark_documents(capture)
    result.leaks += [hit for k, v in outputs.items() for hit in leaks(secrets, k, v)]

    original = tshark_messages(capture)
    jsonl = [json.loads(line) for line in outputs["dissect --format jsonl"].splitlines()
             if line.startswith(b"{")]
    by_frame = defaultdict(list)
    for r in jsonl:
        if r.get("opcode") not in CLEAR and r.get("magic") in (0x80, 0x81, 0x08, 0x18):
            by_frame[r["frame"]].append(r.get("key"))
    for frame, msgs in original.items():
        keys = by_frame.get(frame, [])
        if len(keys) != len(msgs):
            result.skipped_frames += 1
            continue
        for (key, _), got in zip(msgs, keys):
            if _short(key):
                result.short += 1
                if (got or "").encode("utf-8", "surrogateescape") == key:
                    result.leaks.append(f"dissect --format jsonl: frame {frame} key {key!r}")

    findings, summary = analyze_file(str(capture), OPTIONS)
    result.findings = len(findings)
    if not findings or result.refused:
        return result
    evidence = next((n for n in members if n.startswith("evidence.pcap")), None)
    if evidence is None:
        result.reproduced = False
        return result
    redacted = work / evidence
    redacted.write_bytes(members[evidence])
    fmap = _frame_map(members["frames.tsv"].decode())
    checked, kept, skipped = short_kept(original, tshark_messages(redacted), fmap)
    result.short += checked
    result.skipped_frames += skipped
    result.leaks += [f"{evidence}: {k}" for k in kept]
    plain = write_bundle(str(capture), findings, summary, work / "plain", options=OPTIONS)
    want = sorted((f.rule, f.frame) for f in analyze_file(str(plain.pcap), OPTIONS)[0])
    got = sorted((f.rule, f.frame) for f in analyze_file(str(redacted), OPTIONS)[0])
    # the unredacted bundle's capture without a key log (a redacted bundle ships none) may
    # not give back every finding (decrypted ones; a trimmed capture of a broken file)
    lost = [f for f in select_findings(findings)
            if not reproduces(f, set(want), _frame_map(members["frames.tsv"].decode(), True))]
    readme = members["README.txt"].decode()
    result.named = [f.rule for f in lost]
    result.reproduced = got == want and (
        "Every bundled finding is reproduced" in readme if not lost else
        all(f"{f.rule} (original frame {f.frame})" in readme for f in lost))
    return result


def every_sample(work: Path):
    """Every capture under samples/ (a gzipped one decompressed into ``work``)."""
    for path in sorted(SAMPLES.rglob("*")):
        if path.name.endswith(".gz"):
            plain = work / path.name[:-3]
            plain.write_bytes(gzip.decompress(path.read_bytes()))
            yield plain
        elif path.suffix in (".pcap", ".pcapng"):
            yield path


def fuzzed(work: Path, count: int):
    """``count`` captures of the fuzzer's stream generator (seeds from 1) and as many
    mutated samples (seeds from 1 over three samples)."""
    from dcpdissect.fuzz.gen import mutate_file, stream_capture
    names = ("clean-replication.pcap", "stream-markers.pcap", "durability-violations.pcap")
    for seed in range(1, count + 1):
        path = work / f"fuzz-{seed}.pcap"
        path.write_bytes(stream_capture(random.Random(seed)))
        yield path
        name = names[seed % len(names)]
        path = work / f"mutated-{seed}-{name}"
        path.write_bytes(mutate_file(random.Random(seed), (SAMPLES / name).read_bytes()))
        yield path


def main(argv: list[str]) -> int:
    count = int(argv[argv.index("--fuzz") + 1]) if "--fuzz" in argv else 20
    totals = defaultdict(int)
    named: Counter = Counter()
    failed = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redaction-sweep-") as tmp:
        work = Path(tmp)
        for kind, captures in (("sample", every_sample(work)), ("fuzzed", fuzzed(work, count))):
            for i, capture in enumerate(captures):
                got = check(capture, work / f"{kind}-{i}")
                totals[f"{kind} captures"] += 1
                bundled = got.findings > 0 and not got.refused
                totals[f"{kind} refused by analyze (exit 2, no bundle)"] += got.refused
                totals[f"{kind} with findings and a bundle"] += bundled
                totals[f"{kind} reproduced exactly"] += bundled and got.reproduced
                totals[f"{kind} findings named not reproduced, as by the unredacted bundle"] \
                    += len(got.named)
                named.update(got.named)
                totals[f"{kind} leaks"] += len(got.leaks)
                totals["short keys and values checked"] += got.short
                totals["frames left out of the short check"] += got.skipped_frames
                if got.leaks or not got.reproduced:
                    failed.append((capture.name, got.reproduced, got.leaks[:3]))
    out = io.StringIO()
    for k, v in totals.items():
        print(f"{k}: {v}", file=out)
    print(f"  by rule: {dict(named.most_common())}", file=out)
    for name, reproduced, found in failed:
        print(f"  {name}: reproduced={reproduced} leaks={found}", file=out)
    print(f"{time.monotonic() - start:.0f} s", file=out)
    sys.stdout.write(out.getvalue())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
