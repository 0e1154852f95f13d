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
# jq (Debian package) for the jsonl join test
if ! command -v jq >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing jq (Debian package)..." >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >&2
fi
# Wireshark's Qt GUI on a virtual screen (Debian packages) for the plugin's GUI test
if ! command -v wireshark >/dev/null 2>&1 || ! command -v Xvfb >/dev/null 2>&1 \
        || ! command -v xdotool >/dev/null 2>&1 || ! command -v import >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing wireshark-qt, xvfb, xdotool and imagemagick (Debian packages)..." >&2
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wireshark-qt xvfb xdotool \
        imagemagick >&2
fi
.venv/bin/python -m pytest -q "$@"
