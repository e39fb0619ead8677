#!/usr/bin/env bash
# Builds benchlake's container image from a build directory (default: the
# release build) without any registry: the root file system is assembled here
# (binary, tracer library, the shared libraries `ldd` lists, CA certificates,
# a passwd entry for the unprivileged user 10001) and built on `FROM scratch`.
# Usage: deploy/container/build.sh [--from BUILD_DIR] [--tag TAG]
#   BUILD_DIR defaults to $CARGO_TARGET_DIR/release (else target/release);
#   TAG defaults to benchlake:latest. Uses `docker` (DOCKER_HOST is honoured).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
from="${CARGO_TARGET_DIR:-$here/../../target}/release"
tag="benchlake:latest"
while [ $# -gt 0 ]; do
  case "$1" in
    --from) from="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    *) echo "usage: $0 [--from BUILD_DIR] [--tag TAG]" >&2; exit 2 ;;
  esac
done
bin="$from/benchlake"
if [ ! -x "$bin" ]; then
  echo "error: $bin not found: run cargo build --release (or give --from DIR)" >&2
  exit 1
fi
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
install -d "$root/usr/local/bin" "$root/usr/local/lib/benchlake" "$root/etc/ssl/certs" \
  "$root/tmp" "$root/var/lib/benchlake"
chmod 1777 "$root/tmp"
# Debug information is dropped from the copy (the image is for running).
objcopy --strip-debug "$bin" "$root/usr/local/bin/benchlake"
if [ -f "$from/libbenchlake_tracer.so" ]; then
  install -m 0755 "$from/libbenchlake_tracer.so" "$root/usr/local/lib/benchlake/"
fi
# The shared libraries of the binary, at the paths the loader looks for them.
ldd "$bin" | awk '/=> \// {print $3} /^[ \t]*\/lib/ {print $1}' | sort -u | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  install -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
printf 'root:x:0:0:root:/:/usr/local/bin/benchlake\nbenchlake:x:10001:10001:benchlake:/var/lib/benchlake:/usr/local/bin/benchlake\n' > "$root/etc/passwd"
printf 'root:x:0:\nbenchlake:x:10001:\n' > "$root/etc/group"
chown -R 10001:10001 "$root/var/lib/benchlake" 2>/dev/null || true
cp "$here/Dockerfile" "$ctx/Dockerfile"
docker build -q -t "$tag" "$ctx"
echo "built $tag"
