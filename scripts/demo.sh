#!/usr/bin/env bash
# Set up and run the main job on a bundled sample.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/dcpdissect dissect samples/clean-replication.pcap
