"""The compiled kernel (dcpdissect/kernel.py): built from the current source, loaded under the
modules' own names unless DCPDISSECT_PURE=1, giving the Python source's outputs on every
sample and on fuzzed captures and frames, and nothing global at ``import dcpdissect``.

The kernel is supposed to be built wherever it can be (scripts/setup.sh installs a C
compiler and the Python headers, then builds it): these tests fail when it could be built
and is not, or is stale; they skip, saying so, where it cannot be (no compiler, or
DCPDISSECT_NO_KERNEL=1)."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from dcpdissect import kernel

ROOT = Path(__file__).resolve().parents[1]
SKIP_BUILD = "DCPDISSECT_NO_KERNEL"

# Which kernel modules the commands ran, from where.
PROBE = """
import contextlib, io, json, sys
import dcpdissect.cli as cli
from dcpdissect import kernel
with contextlib.redirect_stdout(io.StringIO()):
    for cmd in ("analyze", "dissect"):
        cli.main([cmd, "SAMPLE", "--format", "jsonl"])
print(json.dumps({n: sys.modules[n].__file__ for n in kernel.MODULES}))
""".replace("SAMPLE", str(ROOT / "samples" / "resume-collapsed.pcap"))

# Every capture of samples/ through analyze, dissect and streams, in this process.
RUN_SAMPLES = """
import json, sys
from pathlib import Path
import dcpdissect.cli as cli
from dcpdissect import kernel
out = {}
captures = sorted(p for p in Path("samples").rglob("*")
                  if p.name.endswith((".pcap", ".pcapng", ".pcap.gz")))
for pcap in captures:
    keylog = Path(str(pcap).removesuffix(".gz")).with_suffix(".keylog")
    extra = ["--tls-keylog", str(keylog)] if keylog.exists() else []
    for cmd in (["analyze", "--format", "jsonl"], ["dissect", "--format", "jsonl"],
                ["streams", "--format", "jsonl"], ["analyze"]):
        real, sys.stdout = sys.stdout, open(sys.argv[1], "w", encoding="utf-8", newline="")
        try:
            rc = cli.main(cmd + [str(pcap)] + extra)
        finally:
            if not sys.stdout.closed:
                sys.stdout.close()
            sys.stdout = real
        out[" ".join(cmd + [str(pcap)])] = [rc, Path(sys.argv[1]).read_text(encoding="utf-8")]
out["in_use"] = kernel.in_use()
json.dump(out, open(sys.argv[2], "w"))
"""

# Fuzzed inputs (the fuzzer's generators): each capture's events and decoded messages, each
# frame's decoded message, attribute by attribute.
RUN_FUZZ = """
import json, sys, tempfile
from dcpdissect import kernel
from dcpdissect.capture.readers import CaptureError
from dcpdissect.codec import decode
from dcpdissect.fuzz.gen import make_input
from dcpdissect.reassembly.pdus import Pdu, iter_events

FIELDS = ("magic", "opcode", "framing_len", "keylen", "extlen", "datatype", "vbucket", "status",
          "bodylen", "opaque", "cas", "frame_infos", "stream_id", "extras", "key", "value",
          "fields", "layout", "problems", "spec", "is_request", "value_len", "name", "key_range",
          "value_range", "value_cut", "key_cut", "shape")

def message(data):
    try:
        m = decode(data)
    except ValueError as exc:
        return str(exc)
    return repr([(n, bytes(v) if type(v) is memoryview else v)
                 for n, v in ((n, getattr(m, n)) for n in FIELDS)])

out = {}
with tempfile.NamedTemporaryFile(suffix=".pcap") as f:
    for number in range(int(sys.argv[2])):
        inp = make_input(7, number)
        if inp.kind == "pdu":
            out[number] = message(inp.data)
            continue
        f.seek(0)
        f.truncate()
        f.write(inp.data)
        f.flush()
        seen = []
        try:
            for ev in iter_events(f.name):
                seen.append(repr(ev))
                if type(ev) is Pdu:
                    seen.append(message(ev.data))
        except CaptureError as exc:
            seen.append(str(exc).replace(f.name, "fuzz.pcap"))
        out[number] = seen
out["in_use"] = kernel.in_use()
json.dump(out, open(sys.argv[1], "w"))
"""


def _python(code: str, *args, cwd=ROOT, pure=False, pythonpath=None):
    env = {k: v for k, v in os.environ.items() if k not in (kernel.SWITCH, "PYTHONPATH")}
    env["PYTHONHASHSEED"] = "0"         # the same order of sets in the reprs of both runs
    if pure:
        env[kernel.SWITCH] = "1"
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    ran = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                         capture_output=True, text=True)
    assert ran.returncode == 0, f"{'source' if pure else 'kernel'}: {ran.stderr[-3000:]}"
    return ran


def _can_build() -> bool:
    """What the build needs besides Cython: a C compiler and the Python headers."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(cc) is not None and headers.exists()


@pytest.fixture(scope="module")
def built():
    """The kernel built from the current source; a failure where it should be and is not."""
    states = {name: kernel.state(name) for name in kernel.MODULES}
    if all(s == "compiled" for s in states.values()):
        return
    if os.environ.get(SKIP_BUILD) or not _can_build():
        pytest.skip(f"the kernel cannot be built here ({SKIP_BUILD} set or no C compiler): "
                    f"{states}")
    pytest.fail(f"the kernel is not built from the current source: {states}; build it with "
                "scripts/setup.sh, or `python setup.py build_ext --inplace` after an edit")


def test_every_kernel_module_is_built_from_its_current_source(built):
    assert len(kernel.MODULES) >= 4
    for name in kernel.MODULES:
        assert Path(kernel.compiled_path(name)).exists(), name


def test_commands_run_the_kernel_unless_told_not_to(built):
    loaded = json.loads(_python(PROBE).stdout)
    assert loaded.keys() == set(kernel.MODULES)
    for name, path in loaded.items():
        assert path == kernel.compiled_path(name), (name, path)
    pure = json.loads(_python(PROBE, pure=True).stdout)
    for name, path in pure.items():
        assert path == kernel.source_path(name), (name, path)


def test_importing_the_package_changes_nothing_global():
    code = """
import sys
hooks = (list(sys.meta_path), list(sys.path_hooks), list(sys.path))
import dcpdissect
assert (list(sys.meta_path), list(sys.path_hooks), list(sys.path)) == hooks
print(sorted(n for n in sys.modules if n.startswith("dcpdissect")))
"""
    assert _python(code).stdout.split() == ["['dcpdissect']"]


def test_the_package_runs_from_a_zip_of_its_source(tmp_path):
    # What the pipeline ships to a cluster's executors (pipeline/spark.py ship_package).
    from dcpdissect.pipeline.spark import ship_package

    class Context:
        def addPyFile(self, path):
            self.path = path

    spark = type("Session", (), {"sparkContext": Context()})()
    archive = ship_package(spark)
    loaded = json.loads(_python(PROBE, cwd=tmp_path, pythonpath=archive).stdout)
    for name, path in loaded.items():
        assert path == os.path.join(archive, *name.split(".")) + ".py", (name, path)


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "dcpdissect", tmp_path / "dcpdissect",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "dcpdissect"


def test_an_edited_module_runs_from_its_source(tmp_path, built):
    pkg = _copy_package(tmp_path)
    with open(pkg / "reassembly" / "framing.py", "a") as f:
        f.write("\n# edited after the build\n")
    loaded = json.loads(_python(PROBE, cwd=tmp_path, pythonpath=tmp_path).stdout)
    assert loaded["dcpdissect.reassembly.framing"] == str(pkg / "reassembly" / "framing.py")
    assert loaded["dcpdissect.reassembly.tcp"].startswith(str(pkg / "reassembly" / "tcp.kernel-"))
    assert loaded["dcpdissect.codec.decode"].startswith(str(pkg / "codec" / "decode.kernel-"))


def test_a_module_calling_into_an_edited_one_runs_from_its_source(tmp_path, built):
    """decode and framing call codec.header's functions in C: with header.py edited (its
    build stale), they run from their source too."""
    pkg = _copy_package(tmp_path)
    with open(pkg / "codec" / "header.py", "a") as f:
        f.write("\n# edited after the build\n")
    loaded = json.loads(_python(PROBE, cwd=tmp_path, pythonpath=tmp_path).stdout)
    for name in ("codec.header", "codec.decode", "reassembly.framing"):
        assert loaded[f"dcpdissect.{name}"].endswith(".py"), loaded
    assert loaded["dcpdissect.capture.packets"].endswith(kernel.SUFFIX)
    status = _python("from dcpdissect import kernel; kernel.main()", cwd=tmp_path,
                     pythonpath=tmp_path)
    assert "stale      source    dcpdissect.codec.header" in status.stdout
    assert "3 of 6 kernel modules run compiled" in status.stderr


def test_kernel_and_source_give_the_same_outputs_on_every_sample(tmp_path, built):
    results = {}
    for mode, pure in (("kernel", False), ("source", True)):
        _python(RUN_SAMPLES, str(tmp_path / "stdout"), str(tmp_path / f"{mode}.json"), pure=pure)
        results[mode] = json.loads((tmp_path / f"{mode}.json").read_text())
    assert all(results["kernel"].pop("in_use").values())
    assert not any(results["source"].pop("in_use").values())
    runs = results["source"]
    assert len(runs) >= 4 * 100
    assert sum(1 for rc, text in runs.values() if rc == 1 and '"rule"' in text) >= 25
    assert sum(1 for key, (rc, text) in runs.items() if "/encap/" in key and '"frames"' in text) >= 20
    differing = [k for k in runs if results["kernel"][k] != runs[k]]
    assert not differing, differing[:5]


def test_kernel_and_source_decode_fuzzed_captures_and_frames_alike(tmp_path, built):
    results = {}
    for mode, pure in (("kernel", False), ("source", True)):
        _python(RUN_FUZZ, str(tmp_path / f"{mode}.json"), "400", pure=pure)
        results[mode] = json.loads((tmp_path / f"{mode}.json").read_text())
    assert all(results["kernel"].pop("in_use").values())
    assert not any(results["source"].pop("in_use").values())
    runs = results["source"]
    captures = [v for v in runs.values() if isinstance(v, list)]
    assert len(captures) >= 100 and sum(len(v) for v in captures) >= 5000
    differing = [k for k in runs if results["kernel"][k] != runs[k]]
    assert not differing, differing[:5]


# -- packaging: what pip builds and installs ----------------------------------------------

def _wheel(tmp_path: Path, env: dict) -> Path:
    out = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(ROOT)], env=env, check=True, capture_output=True, text=True)
    (wheel,) = out.glob("dcpdissect-*.whl")
    return wheel


@pytest.mark.slow
def test_the_wheel_carries_the_kernel_and_uninstalls_without_a_trace(tmp_path, built):
    wheel = _wheel(tmp_path, {k: v for k, v in os.environ.items() if k != SKIP_BUILD})
    assert not wheel.name.endswith("-none-any.whl"), wheel.name      # a platform wheel
    names = zipfile.ZipFile(wheel).namelist()
    for name in kernel.MODULES:
        rel = Path(kernel.compiled_path(name)).relative_to(ROOT).as_posix()
        assert rel in names, (rel, names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    before = set(os.listdir(site))
    subprocess.run([py, "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True)
    probe = ("import dcpdissect.capture, dcpdissect.codec, dcpdissect.reassembly; "
             "from dcpdissect import kernel; print(sorted(kernel.in_use().values()))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", kernel.SWITCH)}
    ran = subprocess.run([py, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True)
    assert ran.stdout.split() == ["[True,"] + ["True,"] * (len(kernel.MODULES) - 2) + ["True]"]
    subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "dcpdissect"], check=True)
    assert set(os.listdir(site)) == before


@pytest.mark.slow
def test_the_build_can_be_told_to_skip_the_kernel(tmp_path):
    wheel = _wheel(tmp_path, {**os.environ, SKIP_BUILD: "1"})
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if ".kernel-" in n]
