#!/usr/bin/env bash
# Set up and run the whole test suite (slow tshark/Spark tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q "$@"
