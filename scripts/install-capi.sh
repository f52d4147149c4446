#!/usr/bin/env bash
# Builds the C ABI (capi/) in release mode and installs it under PREFIX (default /usr/local):
#   PREFIX/lib/libedgetam.so.X.Y.Z (+ the .so.X and .so links), PREFIX/lib/libedgetam.a,
#   PREFIX/include/edgetam.h, PREFIX/include/edgetam.hpp, PREFIX/lib/pkgconfig/edgetam.pc,
#   PREFIX/lib/cmake/edgetam/edgetamConfig.cmake + edgetamConfigVersion.cmake.
# Then `cc app.c $(pkg-config --cflags --libs edgetam)` finds it (set PKG_CONFIG_PATH to
# PREFIX/lib/pkgconfig for a prefix pkg-config does not search, and LD_LIBRARY_PATH or
# ldconfig so the loader finds the library at run time), and so does CMake's
# `find_package(edgetam 0.1 CONFIG REQUIRED)` + `target_link_libraries(app PRIVATE
# edgetam::edgetam)` (CMAKE_PREFIX_PATH=PREFIX for a prefix CMake does not search).
#
#   scripts/install-capi.sh [PREFIX] [-- extra cargo build arguments, e.g. --features cuda]
#
# EDGETAM_CAPI_PREBUILT=1 installs what target/release already holds, without building.
# EDGETAM_CARGO_PROFILE: another cargo profile than release (CI's `ci`), its folder instead.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
shift || true
[ "${1:-}" = "--" ] && shift
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
if [ "${EDGETAM_CAPI_PREBUILT:-0}" != 1 ]; then
  cargo build --profile "${EDGETAM_CARGO_PROFILE:-release}" -p edgetam-capi "$@"
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
target=${CARGO_TARGET_DIR:-target}/${EDGETAM_CARGO_PROFILE:-release}
install -d "$prefix/lib/pkgconfig" "$prefix/include"
# The soname build.rs gave the library: the link the loader follows.
soname=$(readelf -d "$target/libedgetam.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$soname" ] || { echo "$target/libedgetam.so has no soname" >&2; exit 1; }
install -m 755 "$target/libedgetam.so" "$prefix/lib/libedgetam.so.$version"
ln -sf "libedgetam.so.$version" "$prefix/lib/$soname"
ln -sf "$soname" "$prefix/lib/libedgetam.so"
install -m 644 "$target/libedgetam.a" "$prefix/lib/libedgetam.a"
install -m 644 capi/include/edgetam.h capi/include/edgetam.hpp "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" capi/edgetam.pc.in \
  > "$prefix/lib/pkgconfig/edgetam.pc"
# The CMake package (relocatable: its paths are relative to its own place).
install -d "$prefix/lib/cmake/edgetam"
for file in edgetamConfig edgetamConfigVersion; do
  sed -e "s|@VERSION@|$version|g" -e "s|@MAJOR@|$major|g" -e "s|@MINOR@|$minor|g" \
    -e "s|@SONAME@|$soname|g" \
    -e "s|@SIZEOF_VOID_P@|$(($(getconf LONG_BIT) / 8))|g" \
    "capi/cmake/$file.cmake.in" > "$prefix/lib/cmake/edgetam/$file.cmake"
done
echo "installed libedgetam $version under $prefix"
