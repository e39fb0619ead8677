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
# Installs Debian packages, waiting up to 10 minutes for a held dpkg/apt lock
# (another apt run); stops the script with a clear message when apt fails, so
# the suite never carries on without what it needs.
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "error: $* missing and cannot be installed here (need root and apt-get)" >&2
    exit 1
  fi
  local opts=(-o DPkg::Lock::Timeout=600 -qq)
  if ! apt-get "${opts[@]}" update; then
    echo "error: apt-get update failed; cannot install $*" >&2
    exit 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" install -y "$@" >/dev/null; then
    echo "error: apt-get install $* failed" >&2
    exit 1
  fi
}

# Open MPI for the mpirun launcher tests and the tracer (mpicc, mpi.h: libopenmpi-dev).
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
  apt_install openmpi-bin libopenmpi-dev
fi
# gfortran behind Open MPI's mpifort: the tracer's Fortran bindings (mpif.h,
# `use mpi`, `use mpi_f08`) are tested by tracer/tests/fortran.rs.
if ! mpifort --version >/dev/null 2>&1; then
  apt_install gfortran
fi
if ! mpifort --version >/dev/null 2>&1; then
  echo "error: mpifort --version fails after installing gfortran" >&2
  exit 1
fi

# unshare (util-linux): tests/e2e/test_state.py's read-only bind mount in a
# private mount namespace; ip (iproute2): cli/tests/netprobe_cluster.rs's
# network namespaces.
if ! command -v unshare >/dev/null 2>&1; then
  apt_install util-linux
fi
if ! command -v ip >/dev/null 2>&1; then
  apt_install iproute2
fi

# PostgreSQL server binaries (initdb, pg_ctl): the PostgreSQL state backend's
# conformance suite and the coordinator failover tests start their own server.
if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  apt_install postgresql
fi

# systemd-analyze: deploy/'s unit files are verified and their hardening scored
# (tests/e2e/test_deploy.py); the package is only installed, never started.
if ! command -v systemd-analyze >/dev/null 2>&1; then
  apt_install systemd
fi

# The Docker engine: tests/e2e/test_container.py starts its own dockerd (socket
# and data under /tmp, no bridge, no iptables) to build and run deploy/container's
# image; the system's docker service is never started.
if ! command -v dockerd >/dev/null 2>&1; then
  apt_install docker.io
fi

# Java for pyspark (the Spark reader test).
if ! command -v java >/dev/null 2>&1; then
  apt_install openjdk-17-jre-headless
fi

# Prometheus: cli/tests/health.rs scrapes a coordinator with a real one (it
# fails without it when CI is set, and is skipped otherwise).
if ! command -v prometheus >/dev/null 2>&1; then
  apt_install prometheus
fi

# Slurm and munge: cli/tests/slurm_srun.rs starts a three-node cluster (munged,
# slurmctld, slurmd n1..n3) on this host (docs/slurm.md); srun --mpi=pmix needs
# Slurm's PMIx plugin (in slurm-wlm-basic-plugins; libpmix2 with Open MPI).
if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] || [ ! -x /usr/sbin/munged ] \
  || ! command -v srun >/dev/null 2>&1; then
  apt_install slurmctld slurmd slurm-client munge
fi

# Chromium: tests/e2e/test_dashboard.py drives it with Playwright (PyPI) at
# /usr/bin/chromium; Playwright's own browser download is never used.
if [ ! -x /usr/bin/chromium ]; then
  apt_install chromium
fi

# Node.js and the certified OpenID provider `oidc-provider` (npm):
# tests/e2e/test_oidc.py signs in to the dashboard through it. Pinned (8.x is
# the line that supports Debian's Node 20), installed outside the clone; the
# test fails under CI when either is missing.
OIDC_PROVIDER_VERSION=8.8.1
export OIDC_PROVIDER_DIR="${OIDC_PROVIDER_DIR:-$HOME/.cache/benchlake-oidc}"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
have_oidc="$(node -p "require('$OIDC_PROVIDER_DIR/node_modules/oidc-provider/package.json').version" 2>/dev/null || true)"
if [ "$have_oidc" != "$OIDC_PROVIDER_VERSION" ]; then
  echo "== npm: oidc-provider@$OIDC_PROVIDER_VERSION into $OIDC_PROVIDER_DIR"
  mkdir -p "$OIDC_PROVIDER_DIR"
  if ! timeout 600 npm install --prefix "$OIDC_PROVIDER_DIR" --no-audit --no-fund --loglevel=error \
    "oidc-provider@$OIDC_PROVIDER_VERSION"; then
    echo "error: npm install oidc-provider@$OIDC_PROVIDER_VERSION failed" >&2
    exit 1
  fi
fi

echo "== Python tools (venv: $VENV)"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt
export PATH="$VENV/bin:$PATH"

# Every test stage's output is also kept here, so the suite ends with one
# total over all stages (printed on success and on failure alike).
RESULTS="$(mktemp -d)/results.log"
# A Rust test that cannot run what it tests (tests/support/unavailable.rs)
# appends a line here (it fails instead under CI=true): libtest counts it as
# passed, the closing total as skipped.
export BENCHLAKE_SKIP_LOG="$(dirname "$RESULTS")/skipped.log"
: >"$BENCHLAKE_SKIP_LOG"
STARTED=$SECONDS
totals() {
  local rc=$?
  python3 - "$RESULTS" "$rc" "$((SECONDS - STARTED))" "$BENCHLAKE_SKIP_LOG" <<'PY'
import re, sys
path, rc, secs, skip_log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
try:
    text = open(path, errors="replace").read()
except OSError:
    text = ""
try:
    rust_skips = [l for l in open(skip_log, errors="replace").read().splitlines() if l.strip()]
except OSError:
    rust_skips = []
rust = {"passed": 0, "failed": 0, "ignored": 0}
for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", text):
    for k, v in zip(("passed", "failed", "ignored"), m.groups()):
        rust[k] += int(v)
# libtest counts a test that returned after the skip helper as passed: it is
# a skip (ignored tests are skips too).
rust["passed"] = max(rust["passed"] - len(rust_skips), 0)
rust["skipped"] = rust["ignored"] + len(rust_skips)
for l in rust_skips:
    print(l)
e2e = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
for line in text.splitlines():
    if "test result:" not in line and re.search(r"\d+ (passed|failed|error|errors)\b.* in [\d.]+s", line):
        for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", line):
            e2e["errors" if k.startswith("error") else k] += int(n)
failed = rust["failed"] + e2e["failed"] + e2e["errors"]
verdict = "PASSED" if rc == 0 and failed == 0 else f"FAILED (exit {rc})"
print(f"== total: {rust['passed'] + e2e['passed']} passed, {failed} failed, "
      f"{rust['skipped'] + e2e['skipped']} skipped "
      f"(Rust {rust['passed']} passed/{rust['failed']} failed/{rust['skipped']} skipped; "
      f"end-to-end {e2e['passed']} passed/"
      f"{e2e['failed'] + e2e['errors']} failed/{e2e['skipped']} skipped) in {secs // 60} min {secs % 60} s: {verdict}")
PY
  exit "$rc"
}
trap totals EXIT

echo "== build"
cargo build --workspace --all-targets --locked

# Every stage runs even when one before it failed, so one run of the suite
# shows every failure; the suite's exit status is the first failure's.
status=0
stage() {
  # `|| rc=…`: under `set -e` a failing pipeline would end the script here.
  local rc=0
  "$@" 2>&1 | tee -a "$RESULTS" || rc=${PIPESTATUS[0]}
  if [ "$rc" != 0 ] && [ "$status" = 0 ]; then
    status=$rc
  fi
}

echo "== cargo test"
stage cargo test --workspace --locked --no-fail-fast
# Integration tests again with coordinator state on PostgreSQL (all: `-p benchlake --test …` would rebuild ~80 crates with other features).
BENCHLAKE_TEST_STATE=postgres stage cargo test --workspace --locked --no-fail-fast --test '*'

echo "== end-to-end tests"
export BENCHLAKE_BIN="$CARGO_TARGET_DIR/debug/benchlake"
stage python -m pytest -q -p no:cacheprovider tests/e2e
# The end-to-end tests whose clusters keep state, again on PostgreSQL (a server
# per test; restarted coordinators take the lead over after a 1 s lease).
BENCHLAKE_E2E_STATE=postgres stage python -m pytest -q -p no:cacheprovider \
  tests/e2e/test_faults.py tests/e2e/test_campaign.py tests/e2e/test_clients.py \
  tests/e2e/test_replay.py tests/e2e/test_mpirun.py

exit "$status"
