#!/usr/bin/env bash
# Installs what the tests need and runs every test: the Rust workspace
# (unit, property and in-process cluster tests) and the end-to-end suite
# (real processes, SeaweedFS S3, DuckDB, pyarrow.flight, grpcurl, grpcio-tools).
# This is the README's test command; CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="${BENCHLAKE_VENV:-$HOME/.cache/benchlake-venv}"

echo "== Python tools (venv: $VENV)"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt
export PATH="$VENV/bin:$PATH"

echo "== build"
cargo build --workspace --all-targets --locked

echo "== cargo test"
cargo test --workspace --locked

echo "== end-to-end tests"
export BENCHLAKE_BIN="$CARGO_TARGET_DIR/debug/benchlake"
python -m pytest -q -p no:cacheprovider tests/e2e
