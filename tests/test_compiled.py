"""The compiled hot modules (dcpdissect.compiled): loaded only when built from the current
source, off with DCPDISSECT_PURE=1, and giving the Python source's outputs on every sample."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dcpdissect import compiled

ROOT = Path(__file__).resolve().parents[1]

# Which hot modules the analyze and dissect commands loaded, and from where.
PROBE = """
import contextlib, io, json, sys
import dcpdissect.cli as cli
with contextlib.redirect_stdout(io.StringIO()):
    for cmd in ("analyze", "dissect"):
        cli.main([cmd, "SAMPLE", "--format", "jsonl"])
mods = {n: m.__file__ for n, m in sys.modules.items()
        if n.startswith("dcpdissect.") and n in set(dcpdissect.compiled.hot_modules())}
print(json.dumps(mods))
""".replace("SAMPLE", str(ROOT / "samples" / "resume-collapsed.pcap"))

# Every sample through analyze, dissect and streams (jsonl), in this process.
RUN_SAMPLES = """
import json, sys
from pathlib import Path
import dcpdissect.cli as cli
out = {}
for pcap in sorted(Path("samples").glob("*.pcap*")) + sorted(Path("samples/tls").glob("*.pcap")):
    extra = ["--tls-keylog", str(pcap.with_suffix(".keylog"))] if pcap.parent.name == "tls" else []
    for cmd in (["analyze", "--format", "jsonl"], ["dissect", "--format", "jsonl"],
                ["streams", "--format", "jsonl"], ["analyze"]):
        real, sys.stdout = sys.stdout, open(sys.argv[1], "w", encoding="utf-8", newline="")
        try:
            rc = cli.main(cmd + [str(pcap)] + extra)
        finally:
            if not sys.stdout.closed:
                sys.stdout.close()
            sys.stdout = real
        out[" ".join(cmd + [pcap.name])] = [rc, Path(sys.argv[1]).read_text(encoding="utf-8")]
out["in_use"] = dcpdissect.compiled.in_use()
json.dump(out, open(sys.argv[2], "w"))
"""


def _python(code: str, *args, cwd=ROOT, pure=False, pythonpath=None):
    env = {k: v for k, v in os.environ.items() if k not in ("DCPDISSECT_PURE", "PYTHONPATH")}
    if pure:
        env["DCPDISSECT_PURE"] = "1"
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", "import dcpdissect.compiled\n" + code, *args],
                          cwd=cwd, env=env, capture_output=True, text=True, check=True)


def test_every_hot_module_is_compiled_from_its_current_source():
    manifest = compiled._manifest()
    states = {n: compiled.state(n, manifest.get(n)) for n in compiled.hot_modules()}
    not_compiled = {n: s for n, s in states.items() if s != "compiled"}
    assert not not_compiled, ("scripts/setup.sh builds them "
                              f"(python -m dcpdissect.compiled build): {not_compiled}")
    assert len(states) >= 40


def test_commands_load_the_compiled_modules_unless_told_not_to():
    loaded = json.loads(_python(PROBE).stdout)
    assert len(loaded) >= 30
    assert all(f.endswith(compiled.SUFFIX) for f in loaded.values()), loaded
    assert "dcpdissect.analysis.engine" in loaded and "dcpdissect.reassembly.framing" in loaded
    pure = json.loads(_python(PROBE, pure=True).stdout)
    assert pure.keys() == loaded.keys()
    assert all(f.endswith(".py") for f in pure.values()), pure


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "dcpdissect", tmp_path / "dcpdissect",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "dcpdissect"


def test_an_edited_module_runs_from_its_source(tmp_path):
    pkg = _copy_package(tmp_path)
    with open(pkg / "reassembly" / "framing.py", "a") as f:
        f.write("\n# edited after the build\n")
    loaded = json.loads(_python(PROBE, cwd=tmp_path, pythonpath=tmp_path).stdout)
    assert loaded["dcpdissect.reassembly.framing"] == str(pkg / "reassembly" / "framing.py")
    assert loaded["dcpdissect.analysis.engine"].endswith(compiled.SUFFIX)
    assert loaded["dcpdissect.analysis.engine"].startswith(str(pkg))


def test_a_build_for_another_interpreter_is_ignored(tmp_path):
    pkg = _copy_package(tmp_path)
    manifest = pkg / "compiled" / "modules" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["suffix"] = ".cpython-399-x86_64-linux-gnu.so"
    manifest.write_text(json.dumps(data))
    loaded = json.loads(_python(PROBE, cwd=tmp_path, pythonpath=tmp_path).stdout)
    assert loaded and all(f.endswith(".py") for f in loaded.values()), loaded


def test_compiled_and_source_give_the_same_outputs_on_every_sample(tmp_path):
    results = {}
    for mode, pure in (("compiled", False), ("source", True)):
        _python(RUN_SAMPLES, str(tmp_path / "stdout"), str(tmp_path / f"{mode}.json"), pure=pure)
        results[mode] = json.loads((tmp_path / f"{mode}.json").read_text())
    assert len(results["compiled"].pop("in_use")) >= 30
    assert results["source"].pop("in_use") == []
    runs = results["source"]
    assert len(runs) >= 4 * 60
    assert sum(1 for rc, text in runs.values() if rc == 1 and '"rule"' in text) >= 25
    differing = [k for k in runs if results["compiled"][k] != runs[k]]
    assert not differing, differing[:5]
