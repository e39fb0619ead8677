#!/usr/bin/env bash
# The long form of the fault campaign (tests/e2e/test_campaign.py): RUNS runs of
# mixed kinds while coordinator, workers and agents are killed with -9 at random
# moments and restarted; then every run must be SUCCEEDED with one `runs` row, no
# duplicated rows and no staging leftovers. Needs the venv and the build of
# scripts/test.sh.  Usage: bash scripts/fault-campaign.sh [RUNS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="${BENCHLAKE_VENV:-$HOME/.cache/benchlake-venv}"
export PATH="$VENV/bin:$PATH"
export BENCHLAKE_BIN="${BENCHLAKE_BIN:-$CARGO_TARGET_DIR/debug/benchlake}"
export BENCHLAKE_CAMPAIGN_RUNS="${1:-264}"
export BENCHLAKE_CAMPAIGN_SEED="${2:-$RANDOM}"
exec python -m pytest -q -s -p no:cacheprovider tests/e2e/test_campaign.py
