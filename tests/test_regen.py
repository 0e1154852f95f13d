"""``python -m dcpdissect.regen`` on a copy of the generated files: ``--check`` names what is
stale and writes nothing; a run rewrites exactly that; the golden file's change is counted
by rows."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from dcpdissect.regen import golden_change, main, regen

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("docs/protocol.md", "docs/rules.md", "lua/dcpdissect.lua",
             "tests/golden/findings.jsonl")


def _copy(tmp_path: Path) -> Path:
    """The generated files of the repository and what they are made from (samples/encap's
    real captures), in a scratch tree."""
    tree = tmp_path / "tree"
    (tree / "samples").mkdir(parents=True)
    for p in (ROOT / "samples").iterdir():
        if p.is_file():
            shutil.copy(p, tree / "samples" / p.name)
    shutil.copytree(ROOT / "samples" / "encap", tree / "samples" / "encap")
    for rel in GENERATED:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tree / rel)
    return tree


def _files(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*"))
            if p.is_file()}


def test_check_names_the_stale_files_and_a_run_rewrites_them(tmp_path):
    tree = _copy(tmp_path)
    fresh = _files(tree)
    golden = (tree / GENERATED[3]).read_text().splitlines(keepends=True)
    rows = [json.loads(line) for line in golden]
    moved = dict(rows[5], frame=rows[5]["frame"] + 1)           # one row changed
    golden[5] = json.dumps(moved, sort_keys=True) + "\n"
    del golden[40]                                               # one row gone
    (tree / GENERATED[3]).write_text("".join(golden))
    (tree / "docs" / "rules.md").write_text("# an old catalogue\n")
    (tree / "samples" / "tcp-loss.pcap").write_bytes(b"stale")
    (tree / "samples" / "renamed-long-ago.pcap").write_bytes(b"x")
    stale = _files(tree)

    out = io.StringIO()
    assert regen(tree, check=True, out=out) == 4
    assert out.getvalue().splitlines() == [
        "samples/tcp-loss.pcap: changed",
        "docs/rules.md: changed",
        f"tests/golden/findings.jsonl: rows: 1 added, 0 removed, 1 changed "
        f"({rows[5]['sample']}, {rows[40]['sample']})",
        "samples/renamed-long-ago.pcap: built by no scenario, to remove"]
    assert _files(tree) == stale                                 # --check wrote nothing
    assert main(["--check", "--root", str(tree)]) == 1

    assert main(["--root", str(tree)]) == 0
    assert _files(tree) == fresh
    assert regen(tree, check=True, out=io.StringIO()) == 0
    assert main(["--check", "--root", str(tree)]) == 0


def test_golden_change_counts_rows():
    def lines(*rows):
        return "".join(json.dumps({"sample": s, "frame": f}) + "\n" for s, f in rows).encode()
    old = lines(("a.pcap", 1), ("a.pcap", 2), ("b.pcap", 3), ("c.pcap", 4))
    new = lines(("a.pcap", 1), ("a.pcap", 9), ("c.pcap", 4), ("d.pcap", 5), ("d.pcap", 6))
    assert golden_change(old, new) == \
        "rows: 2 added, 1 removed, 1 changed (a.pcap, b.pcap, d.pcap)"
    assert golden_change(old, old) == "rows: 0 added, 0 removed, 0 changed"


def test_a_tree_without_samples_is_refused(tmp_path, capsys):
    assert main(["--check", "--root", str(tmp_path)]) == 2
    assert "not a dcpdissect source tree" in capsys.readouterr().err
