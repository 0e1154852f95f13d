"""``python -m dcpdissect.regen``: rebuild every generated file of the source tree.

Each is rendered from the protocol tables, the rule registry or the sample scenarios, and a
test fails when the committed copy differs from a fresh one:

* ``samples/*``: the sample captures (:mod:`dcpdissect.samples.builder`);
* ``samples/encap/*``: the encapsulated samples wrapped around the real captures there, and
  their README (:mod:`dcpdissect.samples.encapsulate`);
* ``lua/dcpdissect.lua``: the Wireshark plugin (:mod:`dcpdissect.luagen`);
* ``docs/protocol.md`` and ``docs/rules.md`` (:mod:`dcpdissect.docgen`);
* ``tests/golden/findings.jsonl``: every finding of every sample, the regression net of
  ``tests/test_violations.py`` (:func:`golden_rows`).

It prints each file that changed (for the golden file, how many rows were added, removed
and changed, and in which samples). ``--check`` writes nothing and exits 1 when a file would
change. The real captures (``samples/real``, ``samples/pcapng``, ``samples/tls`` and the
kernel-made ones of ``samples/encap``) are not rebuilt: they need root and live sockets,
and differ from run to run.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from .analysis.run import analyze_file
from .capture.readers import CaptureError
from .docgen import protocol_doc, rules_doc
from .luagen.render import render as render_lua
from .samples import encapsulate
from .samples.builder import all_specs, build

EXIT_OK, EXIT_STALE, EXIT_BAD_INPUT = 0, 1, 2
GOLDEN = "tests/golden/findings.jsonl"


def golden_rows(samples: Path) -> list[dict]:
    """Every finding of every built sample in the directory ``samples``, as the golden file's
    rows (in the builder's order, each sample's findings sorted by frame)."""
    rows = []
    for spec in all_specs():
        findings, _ = analyze_file(str(samples / spec.filename))
        rows += [{"sample": spec.filename, "rule": f.rule, "frame": f.frame,
                  "connection": f.connection, "vbucket": f.vbucket} for f in findings]
    return rows


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def _encap(root: Path, scratch: Path) -> Iterator[tuple[str, bytes]]:
    encap = root / "samples" / "encap"
    for s in encapsulate.SAMPLES:
        if s.layers:
            path = scratch / f"{s.name}.pcap"
            encapsulate.write_wrapped(path, encapsulate.wrap_file(str(encap / s.source),
                                                                  s.layers, s.fragmenting))
            yield f"samples/encap/{s.name}.pcap", path.read_bytes()
    yield "samples/encap/README.md", encapsulate.readme().encode()


def outputs(root: Path, scratch: Path) -> Iterator[tuple[str, bytes]]:
    """(path relative to ``root``, fresh content) of every generated file. The samples are
    also written into ``scratch``, where the golden findings are computed from them."""
    for spec in all_specs():
        data = build(spec).data
        (scratch / spec.filename).write_bytes(data)
        yield f"samples/{spec.filename}", data
    yield from _encap(root, scratch)
    yield "lua/dcpdissect.lua", render_lua().encode()
    yield "docs/protocol.md", protocol_doc.render().encode()
    yield "docs/rules.md", rules_doc.render().encode()
    yield GOLDEN, jsonl(golden_rows(scratch)).encode()


def golden_change(old: bytes, new: bytes) -> str:
    """``rows: N added, N removed, N changed (samples)``: the rows of both files matched in
    order; a row replaced by another counts as changed."""
    a = old.decode().splitlines()
    b = new.decode().splitlines()
    added = removed = changed = 0
    samples: dict[str, None] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        both = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        changed += both
        removed += i2 - i1 - both
        added += j2 - j1 - both
        for line in a[i1:i2] + b[j1:j2]:
            samples[json.loads(line)["sample"]] = None
    return (f"rows: {added} added, {removed} removed, {changed} changed"
            + (f" ({', '.join(samples)})" if samples else ""))


def stale_samples(root: Path) -> list[str]:
    """Files in samples/ that no scenario builds (a renamed or removed sample)."""
    built = {spec.filename for spec in all_specs()}
    return sorted(f"samples/{p.name}" for p in (root / "samples").iterdir()
                  if p.is_file() and p.name not in built)


def regen(root: Path, check: bool = False, out=sys.stdout) -> int:
    """Rebuild (or, with ``check``, compare) every generated file; print each one that
    changes. Returns how many did."""
    changes = 0
    with tempfile.TemporaryDirectory(prefix="dcpdissect-regen-") as scratch:
        for rel, data in outputs(root, Path(scratch)):
            path = root / rel
            old = path.read_bytes() if path.is_file() else None
            if old == data:
                continue
            changes += 1
            if old is None:
                print(f"{rel}: new", file=out)
            elif rel == GOLDEN:
                print(f"{rel}: {golden_change(old, data)}", file=out)
            else:
                print(f"{rel}: changed", file=out)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
    for rel in stale_samples(root):
        changes += 1
        print(f"{rel}: built by no scenario, {'to remove' if check else 'removed'}", file=out)
        if not check:
            (root / rel).unlink()
    return changes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dcpdissect.regen",
                                description="Rebuild every generated file of the source tree.")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when a file would change")
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                   help="the source tree (default: the one this package is in)")
    args = p.parse_args(argv)
    if not (args.root / "samples").is_dir() or not (args.root / "tests").is_dir():
        print(f"regen: error: {args.root}: not a dcpdissect source tree (no samples/ and "
              "tests/; give --root)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        changes = regen(args.root, args.check)
    except (OSError, CaptureError) as exc:
        print(f"regen: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not changes:
        print("regen: every generated file is current", file=sys.stderr)
    elif args.check:
        print(f"regen: {changes} stale; rebuild them with python -m dcpdissect.regen",
              file=sys.stderr)
        return EXIT_STALE
    else:
        print(f"regen: {changes} rewritten", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
