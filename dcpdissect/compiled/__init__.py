"""Compiled copies of the hot modules, built by Cython from the same Python source.

    python -m dcpdissect.compiled build      # needs Cython and a C compiler
    python -m dcpdissect.compiled status     # which modules run compiled

The Python source stays the reference implementation. A compiled module is loaded instead of
its source only when it was built from exactly that source (SHA-256 in the manifest) for this
interpreter; an edited, missing or foreign build falls back to the source silently, and
``DCPDISSECT_PURE=1`` turns every compiled module off.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(PACKAGE, "compiled", "modules")
MANIFEST = os.path.join(OUT, "manifest.json")
SUFFIX = EXTENSION_SUFFIXES[0]

# The modules every message passes through (paths relative to the package, glob patterns).
HOT = ("capture/*.py", "codec/*.py", "reassembly/*.py", "analysis/*.py", "analysis/streams/*.py",
       "analysis/rules/*.py", "reports/messages.py", "cli/analyze.py", "cli/dissect.py",
       "pipeline/chunks.py", "pipeline/core.py", "pipeline/frames.py", "pipeline/groups.py",
       "pipeline/merge.py")


def module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(PACKAGE))
    return rel[:-3].replace(os.sep, ".")


def source_path(name: str) -> str:
    return os.path.join(os.path.dirname(PACKAGE), *name.split(".")) + ".py"


def digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def hot_modules() -> list[str]:
    paths = sorted({p for pat in HOT for p in glob.glob(os.path.join(PACKAGE, pat))})
    return [module_name(p) for p in paths if not p.endswith("__init__.py")]


def _manifest() -> dict:
    try:
        with open(MANIFEST) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return {}
    return m.get("modules", {}) if m.get("suffix") == SUFFIX else {}


def state(name: str, entry: dict | None) -> str:
    """'compiled', 'stale' (source edited since the build), 'missing' or 'not built'."""
    if entry is None:
        return "not built"
    if not os.path.exists(os.path.join(OUT, entry["file"])):
        return "missing"
    return "compiled" if digest(source_path(name)) == entry["sha256"] else "stale"


class _Finder:
    """A meta path finder that answers only for fresh compiled modules."""

    def __init__(self, modules: dict):
        self.modules = modules

    def find_spec(self, fullname, path=None, target=None):
        entry = self.modules.get(fullname)
        if entry is None or state(fullname, entry) != "compiled":
            return None
        so = os.path.join(OUT, entry["file"])
        spec = ModuleSpec(fullname, ExtensionFileLoader(fullname, so), origin=so)
        spec.has_location = True
        return spec

    def invalidate_caches(self):
        pass


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (called when the package is imported)."""
    if os.environ.get("DCPDISSECT_PURE"):
        return
    modules = _manifest()
    if modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(modules))


def in_use() -> list[str]:
    """Hot modules imported in this process from a compiled file."""
    return sorted(n for n, m in list(sys.modules.items())
                  if n.startswith("dcpdissect.") and (getattr(m, "__file__", "") or "")
                  .endswith(SUFFIX))
