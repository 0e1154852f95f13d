"""``python -m dcpdissect.compiled build|status``: build the compiled modules, or list them."""

from __future__ import annotations

import glob
import json
import os
import sys

from . import MANIFEST, OUT, PACKAGE, SUFFIX, _manifest, digest, hot_modules, module_name, state


def build(jobs: int = 2) -> list[str]:
    """Compile every hot module into ``compiled/modules/``, write the manifest, return the
    names. Each module is compiled from a copy of its source, whose hash the manifest keeps."""
    import shutil
    import tempfile

    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    names = hot_modules()
    with tempfile.TemporaryDirectory(prefix="dcpdissect-build-") as tmp:
        src = os.path.join(tmp, "src")
        hashes = {}
        for path in glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True):
            name = module_name(path)
            if name in names or path.endswith("__init__.py"):
                dest = os.path.join(src, os.path.relpath(path, os.path.dirname(PACKAGE)))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copyfile(path, dest)
                hashes[name] = digest(dest)
        exts = [Extension(n, [os.path.join(src, *n.split(".")) + ".py"]) for n in names]
        exts = cythonize(exts, language_level=3, quiet=True, nthreads=jobs,
                         compiler_directives={"binding": True, "annotation_typing": False})
        cmd = Distribution({"ext_modules": exts}).get_command_obj("build_ext")
        cmd.build_lib, cmd.build_temp = os.path.join(tmp, "lib"), os.path.join(tmp, "tmp")
        cmd.parallel = jobs
        cmd.ensure_finalized()
        cmd.run()
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
        modules = {}
        for n in names:
            file = n + SUFFIX
            shutil.copyfile(cmd.get_ext_fullpath(n), os.path.join(OUT, file))
            modules[n] = {"file": file, "sha256": hashes[n]}
    with open(MANIFEST, "w") as f:
        json.dump({"suffix": SUFFIX, "modules": modules}, f, indent=1, sort_keys=True)
    return names


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m dcpdissect.compiled", description=(
        "Build the compiled copies of the hot modules, or list which ones run compiled."))
    p.add_argument("command", choices=("build", "status"))
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--if-needed", action="store_true",
                   help="build only when a hot module is not compiled from its current source")
    args = p.parse_args(argv)
    modules = _manifest()
    rows = [(n, state(n, modules.get(n))) for n in hot_modules()]
    compiled = sum(s == "compiled" for _, s in rows)
    if args.command == "build" and args.if_needed and compiled == len(rows):
        print(f"all {compiled} hot modules already compiled", file=sys.stderr)
        return 0
    if args.command == "build":
        print(f"compiling {len(rows)} hot modules with Cython (a few minutes)...", file=sys.stderr)
        try:
            names = build(args.jobs)
        except ImportError as e:
            print(f"dcpdissect: error: building needs Cython and setuptools ({e})",
                  file=sys.stderr)
            return 2
        except Exception as e:                  # compiler missing or failing
            print(f"dcpdissect: error: build failed: {e}", file=sys.stderr)
            return 2
        print(f"compiled {len(names)} modules into {OUT}", file=sys.stderr)
        return 0
    for n, s in rows:
        print(f"{s:9}  {n}")
    pure = " (DCPDISSECT_PURE is set: none will be used)" if os.environ.get("DCPDISSECT_PURE") \
        else ""
    print(f"{compiled} of {len(rows)} hot modules compiled{pure}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
