#!/usr/bin/env bash
# Set up and run the main job: analyze a bundled sample that has findings.
# (analyze exits 1 when it finds errors; that is the expected result here.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-kernel          # no build before the first result
status=0
.venv/bin/dcpdissect analyze samples/resume-collapsed.pcap || status=$?
[ "$status" -le 1 ] || exit "$status"
bash scripts/setup.sh                       # then the compiled kernel, for speed later
