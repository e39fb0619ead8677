#!/usr/bin/env bash
# Installs what the tests need and runs every test: the Rust workspace
# (unit, property and in-process cluster tests) and the end-to-end suite
# (real processes, SeaweedFS S3, DuckDB, pyarrow.flight, grpcurl, grpcio-tools).
# This is the README's test command; CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="${BENCHLAKE_VENV:-$HOME/.cache/benchlake-venv}"

echo "== system packages"
# Open MPI for the mpirun launcher tests and the tracer (mpicc, mpi.h: libopenmpi-dev).
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
  else
    echo "mpirun is missing and cannot be installed here (need root and apt-get)" >&2
  fi
fi

# Java for pyspark (the Spark reader test).
if ! command -v java >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "java is missing and cannot be installed here (need root and apt-get)" >&2
  fi
fi

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
