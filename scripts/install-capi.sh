#!/usr/bin/env bash
# Builds the C ABI (capi/) in release mode and installs it under PREFIX (default /usr/local):
#   PREFIX/lib/libedgetam.so.X.Y.Z (+ the .so.X and .so links), PREFIX/lib/libedgetam.a,
#   PREFIX/include/edgetam.h, PREFIX/include/edgetam.hpp, PREFIX/lib/pkgconfig/edgetam.pc.
# Then `cc app.c $(pkg-config --cflags --libs edgetam)` finds it (set PKG_CONFIG_PATH to
# PREFIX/lib/pkgconfig for a prefix pkg-config does not search, and LD_LIBRARY_PATH or
# ldconfig so the loader finds the library at run time).
#
#   scripts/install-capi.sh [PREFIX] [-- extra cargo build arguments, e.g. --features cuda]
#
# EDGETAM_CAPI_PREBUILT=1 installs what target/release already holds, without building.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
shift || true
[ "${1:-}" = "--" ] && shift
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
if [ "${EDGETAM_CAPI_PREBUILT:-0}" != 1 ]; then
  cargo build --release -p edgetam-capi "$@"
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
major=${version%%.*}
target=${CARGO_TARGET_DIR:-target}/release
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 755 "$target/libedgetam.so" "$prefix/lib/libedgetam.so.$version"
ln -sf "libedgetam.so.$version" "$prefix/lib/libedgetam.so.$major"
ln -sf "libedgetam.so.$major" "$prefix/lib/libedgetam.so"
install -m 644 "$target/libedgetam.a" "$prefix/lib/libedgetam.a"
install -m 644 capi/include/edgetam.h capi/include/edgetam.hpp "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" capi/edgetam.pc.in \
  > "$prefix/lib/pkgconfig/edgetam.pc"
echo "installed libedgetam $version under $prefix"
