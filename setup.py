"""The build of dcpdissect's compiled kernel (dcpdissect/kernel.py); the rest is pyproject.toml.

Each kernel module is compiled by Cython from its Python source, typed by the .pxd beside
it, into ``<module>.kernel-<digest><EXT_SUFFIX>``. The kernel is optional: without Cython or a
C compiler, or with ``DCPDISSECT_NO_KERNEL=1`` in the environment, the package installs
without it (one warning) and runs from its Python source.

    python setup.py build_ext --inplace        # rebuild the edited kernel modules, in a checkout
"""

import importlib.util
import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = "DCPDISSECT_NO_KERNEL"


def _kernel():
    """dcpdissect/kernel.py, loaded without importing the package."""
    spec = importlib.util.spec_from_file_location("_dcpdissect_kernel",
                                                  os.path.join(HERE, "dcpdissect", "kernel.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _warn(text: str) -> None:
    print(f"warning: {text}; dcpdissect will run from its Python source", file=sys.stderr)


class BuildKernel(build_ext):
    """Names each module's build after the digest of its source (what dcpdissect.kernel
    loads), removes older in-place builds of it, and lets the build fail with a warning."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def get_ext_filename(self, fullname):
        """(setuptools asks with the full name, distutils with the last part)"""
        name = next((n for n in KERNEL.MODULES if fullname in (n, n.rsplit(".", 1)[1])), None)
        if name is None:
            return super().get_ext_filename(fullname)
        path = os.path.relpath(KERNEL.compiled_path(name, HERE), HERE)
        return path if "." in fullname else os.path.basename(path)

    def run(self):
        try:
            super().run()
        except Exception as exc:            # no compiler, no Python headers, a failing build
            _warn(f"the compiled kernel was not built ({exc})")
            return
        if self.inplace:
            for ext in self.extensions:
                self._remove_older(ext.name)

    def _remove_older(self, name: str) -> None:
        current = KERNEL.compiled_path(name, HERE)
        folder, base = os.path.split(KERNEL.source_path(name, HERE)[:-3])
        for f in os.listdir(folder):
            path = os.path.join(folder, f)
            if f.startswith(base + ".kernel-") and path != current:
                os.remove(path)


def _extensions() -> list:
    if os.environ.get(SKIP):
        print(f"{SKIP} is set: the compiled kernel is not built", file=sys.stderr)
        return []
    try:
        from Cython.Build import cythonize
        from setuptools import Extension
    except ImportError:
        _warn("Cython is not installed: the compiled kernel is not built")
        return []
    exts = [Extension(name, [os.path.relpath(KERNEL.source_path(name, HERE), HERE)])
            for name in KERNEL.MODULES]
    try:
        return cythonize(exts, build_dir=os.path.join("build", "cython"), quiet=True,
                         nthreads=os.cpu_count() or 1,
                         compiler_directives={"language_level": 3, "annotation_typing": False})
    except Exception as exc:                # a .pxd that no longer fits its module
        _warn(f"Cython could not compile the kernel ({exc})")
        return []


KERNEL = _kernel()
setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildKernel})
