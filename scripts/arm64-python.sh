#!/usr/bin/env bash
# An arm64 CPython (Debian 12's python3.11 and the libraries it links, nothing else) unpacked into
# a folder, to run the aarch64 wheel under qemu-user on an x86_64 machine:
#
#   root=$(bash scripts/arm64-python.sh)
#   qemu-aarch64-static -L "$root" "$root/usr/bin/python3.11" -c 'import platform; print(platform.machine())'
#
# The packages are fetched with apt's own resolver but a private state folder (arm64 package
# lists, no dpkg database): the machine's architectures and installed packages stay untouched.
# Kept in the CI cache (scripts/ci-lib.sh); remade when this script changes. Prints the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
dir="$(ci_cache_dir)/arm64-python"
key=$(sha256sum "$0" | cut -c1-16)
if [ -f "$dir/root/.ready-$key" ]; then
  echo "$dir/root"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/debs" "$dir/root"
apt_opts=(
  -o Dir::Etc::SourceParts=/etc/apt/sources.list.d -o Dir::Etc::SourceList=/etc/apt/sources.list
  -o Dir::State::Lists="$dir/apt/lists" -o Dir::Cache="$dir/apt/cache"
  -o Dir::State::status=/dev/null -o Debug::NoLocking=1
  -o APT::Architecture=arm64 -o APT::Architectures::=arm64
  -o APT::Sandbox::User=root
)
apt-get "${apt_opts[@]}" -qq update >&2
# python3.11 and libstdc++ (numpy's and OpenCV's wheels need it), every dependency but the
# package tools (dpkg, perl, tar) a Python interpreter never runs.
mapfile -t pkgs < <(apt-cache "${apt_opts[@]}" depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances python3.11 libstdc++6 \
  | grep -v '^ \|<' | sort -u \
  | grep -vxE 'dpkg|install-info|tar|perl|perl-base|perl-modules-.*|libperl.*|readline-common|mime-support|mailcap|libselinux1|libacl1|libpcre2-8-0')
(cd "$dir/debs" && apt-get "${apt_opts[@]}" -qq download "${pkgs[@]}" >&2)
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
touch "$dir/root/.ready-$key"
echo "arm64 python: ${#pkgs[@]} packages unpacked into $dir/root" >&2
echo "$dir/root"
