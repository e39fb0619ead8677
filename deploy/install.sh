#!/usr/bin/env bash
# Installs benchlake into PREFIX with the layout the binary expects:
#   PREFIX/bin/benchlake
#   PREFIX/lib/benchlake/libbenchlake_tracer.so   (when the build made it: mpicc present)
#   PREFIX/share/benchlake/{systemd,config,slurm}/ (examples from deploy/)
#   PREFIX/share/doc/benchlake/ (README.md and docs/)
# The tracer library is found relative to the binary (../lib/benchlake), so the
# tree works wherever it is copied. Usage:
#   deploy/install.sh [--from BUILD_DIR] PREFIX
# BUILD_DIR defaults to $CARGO_TARGET_DIR/release (else target/release): build it
# with `cargo build --release` first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
from="${CARGO_TARGET_DIR:-$here/../target}/release"
if [ "${1:-}" = "--from" ]; then
  from="$2"
  shift 2
fi
prefix="${1:?usage: deploy/install.sh [--from BUILD_DIR] PREFIX}"
if [ ! -x "$from/benchlake" ]; then
  echo "error: $from/benchlake not found: run cargo build --release (or give --from DIR)" >&2
  exit 1
fi
install -d "$prefix/bin" "$prefix/lib/benchlake" "$prefix/share/benchlake"
install -m 0755 "$from/benchlake" "$prefix/bin/benchlake"
if [ -f "$from/libbenchlake_tracer.so" ]; then
  install -m 0755 "$from/libbenchlake_tracer.so" "$prefix/lib/benchlake/libbenchlake_tracer.so"
else
  echo "note: no libbenchlake_tracer.so in $from (built without mpicc): traced runs are unavailable" >&2
fi
install -d "$prefix/share/doc/benchlake"
install -m 0644 "$here/../README.md" "$here"/../docs/*.md "$prefix/share/doc/benchlake/"
for d in systemd config slurm; do
  if [ -d "$here/$d" ]; then
    cp -R "$here/$d" "$prefix/share/benchlake/"
  fi
done
echo "installed benchlake into $prefix"
