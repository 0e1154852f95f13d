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
.venv/bin/python -m pip install --quiet -e ".[test,spark]" >&2

if ! command -v tshark >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing tshark (Debian package)..." >&2
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >&2
fi

