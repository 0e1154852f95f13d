#!/usr/bin/env bash
# Set up a development environment from a clean clone: a virtual environment in .venv with
# dcpdissect and its test dependencies, and tshark (Debian package) for the cross-checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >&2
.venv/bin/python -m pip install --quiet -e ".[test,spark,compiled]" >&2

if ! command -v tshark >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing tshark (Debian package)..." >&2
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >&2
fi
if ! command -v tcpdump >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing tcpdump (Debian package) for the live replay captures..." >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >&2
fi

# Compiled copies of the hot modules (Cython; without them the Python source runs, slower).
# `setup.sh --no-compile` stops here: the Python source runs (the demo builds them after its
# first result).
if [ "${1:-}" = "--no-compile" ]; then
    exit 0
fi
if ! command -v cc >/dev/null 2>&1 || ! .venv/bin/python -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing a C compiler and the Python headers (Debian packages)..." >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev >&2
fi
echo "building the compiled modules if needed (Cython; a few minutes the first time)..." >&2
if ! .venv/bin/python -m dcpdissect.compiled build --if-needed > .venv/compiled-build.log 2>&1; then
    tail -n 5 .venv/compiled-build.log >&2
    echo "warning: the compiled modules could not be built (.venv/compiled-build.log);" \
         "dcpdissect runs from its Python source" >&2
fi
