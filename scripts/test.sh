#!/usr/bin/env bash
# Set up and run the whole test suite (slow tshark/Spark tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# chromium (Debian package) for the HTML report's browser test
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing chromium (Debian package)..." >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi
.venv/bin/python -m pytest -q "$@"
