"""The compiled kernel: Cython builds of the few modules every message passes through.

The Python source of each kernel module is the reference, and it runs wherever no build is.
The package's build (``setup.py``: ``pip install``, ``pip wheel``, ``pip install -e``)
compiles each one, typed by the ``.pxd`` file beside it, into
``<module>.kernel-<digest><EXT_SUFFIX>``: a name the import system never looks for, carrying
the digest of the source it was built from. The subpackage that owns a kernel module imports
it with :func:`load`, which gives it the compiled copy under the module's own name when one
was built from the current source for this interpreter and ``DCPDISSECT_PURE`` is not set,
and the source otherwise. Nothing else changes: no import hook, nothing global.

    python -m dcpdissect.kernel                # which kernel modules run compiled
    python setup.py build_ext --inplace        # rebuild the edited ones (in a checkout)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES

MODULES = (
    "dcpdissect.capture.readers",
    "dcpdissect.capture.packets",
    "dcpdissect.reassembly.tcp",
    "dcpdissect.reassembly.framing",
    "dcpdissect.codec.header",
    "dcpdissect.codec.decode",
)
SWITCH = "DCPDISSECT_PURE"          # set (non-empty): every kernel module runs from its source
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # holds dcpdissect/
SUFFIX = EXTENSION_SUFFIXES[0]

# What a kernel module finds as `cython` where Cython is not installed (it runs from its
# source): the two names the kernel modules use.
compiled = False


def locals(**types):        # noqa: A001 (cython.locals: types for the compiled kernel)
    return lambda function: function

def source_path(name: str, root: str = ROOT) -> str:
    return os.path.join(root, *name.split(".")) + ".py"


def digest(name: str, root: str = ROOT) -> str:
    """The first 16 hex digits of the SHA-256 of the module's source."""
    with open(source_path(name, root), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def compiled_path(name: str, root: str = ROOT, of: str | None = None) -> str:
    """Where the build puts the compiled copy of module ``name`` built from the source
    whose digest is ``of`` (default: the current source), relative to ``root``."""
    return source_path(name, root)[:-3] + f".kernel-{of or digest(name, root)}{SUFFIX}"


def load(package: str, *names: str) -> None:
    """Import the kernel modules ``names`` of ``package`` (in that order): each one
    compiled when built from its current source and ``DCPDISSECT_PURE`` is not set, else
    from its source."""
    pure = bool(os.environ.get(SWITCH))
    for short in names:
        name = f"{package}.{short}"
        if name in sys.modules:
            continue
        try:
            path = None if pure else compiled_path(name)
        except OSError:         # no readable source beside it (e.g. imported from a zip)
            path = None
        if path is None or not os.path.exists(path):
            importlib.import_module(name)
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception:       # e.g. it calls into a kernel module that runs from its source
            del sys.modules[name]
            importlib.import_module(name)       # (the source raises what it has to)
            continue
        except BaseException:
            del sys.modules[name]
            raise
        setattr(sys.modules[package], short, module)


def state(name: str) -> str:
    """'compiled' (built from the current source), 'stale' (built from another version
    of it) or 'not built'."""
    if os.path.exists(compiled_path(name)):
        return "compiled"
    folder, base = os.path.split(source_path(name)[:-3])
    prefix = base + ".kernel-"
    stale = any(f.startswith(prefix) and f.endswith(SUFFIX) for f in os.listdir(folder))
    return "stale" if stale else "not built"


def in_use() -> dict[str, bool]:
    """For each kernel module this process imported: whether it runs compiled."""
    return {n: not sys.modules[n].__file__.endswith(".py") for n in MODULES if n in sys.modules}


def main() -> int:
    """Which kernel modules are built and which run compiled; 1 when some runs from its
    source though ``DCPDISSECT_PURE`` is not set."""
    for name in MODULES:
        importlib.import_module(name)
    used = in_use()
    for name in MODULES:
        print(f"{state(name):9}  {'compiled' if used[name] else 'source':8}  {name}")
    pure = bool(os.environ.get(SWITCH))
    print(f"{sum(used.values())} of {len(MODULES)} kernel modules run compiled"
          f"{f' ({SWITCH} is set)' if pure else ''}", file=sys.stderr)
    return 0 if pure or all(used.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
