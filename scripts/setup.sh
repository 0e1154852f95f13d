#!/usr/bin/env bash
# Set up a development environment from a clean clone: a virtual environment in .venv with
# dcpdissect (editable, its compiled kernel built in place: dcpdissect/kernel.py) and its test
# dependencies, and tshark (Debian package) for the cross-checks.
# `setup.sh --no-kernel` installs without building the kernel: the Python source runs.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >&2
# The build requirements (pyproject.toml), in the environment itself: the editable install
# uses them, and so does `.venv/bin/python setup.py build_ext --inplace` (rebuilds the kernel
# modules edited since, in seconds).
.venv/bin/python -m pip install --quiet "setuptools>=77" "cython>=3.0" >&2

sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ "${1:-}" = "--no-kernel" ]; then
    DCPDISSECT_NO_KERNEL=1 .venv/bin/python -m pip install --quiet --no-build-isolation \
        -e ".[test,spark]" >&2
else
    if ! command -v cc >/dev/null 2>&1 || ! .venv/bin/python -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
        echo "installing a C compiler and the Python headers (Debian packages)..." >&2
        sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev >&2
    fi
    echo "installing dcpdissect and building its compiled kernel (about 2 minutes)..." >&2
    .venv/bin/python -m pip install --quiet --no-build-isolation -e ".[test,spark]" >&2
    if ! .venv/bin/python -m dcpdissect.kernel > .venv/kernel-status.txt 2>&1; then
        cat .venv/kernel-status.txt >&2
        echo "warning: the compiled kernel is not built (.venv/bin/python setup.py build_ext" \
             "--inplace shows why); dcpdissect runs from its Python source" >&2
    fi
fi

if ! command -v tshark >/dev/null 2>&1; then
    echo "installing tshark (Debian package)..." >&2
    echo "wireshark-common wireshark-common/install-setuid boolean false" | sudo_ debconf-set-selections
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >&2
fi
if ! command -v lua5.2 >/dev/null 2>&1 || ! command -v lua5.4 >/dev/null 2>&1; then
    echo "installing lua5.2 and lua5.4 (Debian packages) for the plugin's Lua tests..." >&2
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.2 lua5.4 >&2
fi
if ! command -v tcpdump >/dev/null 2>&1; then
    echo "installing tcpdump (Debian package) for the live replay captures..." >&2
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >&2
fi
