#!/usr/bin/env bash
# Installs the system packages edgetam-rs needs on Debian 12 (idempotent; run as root or with sudo).
# The Rust toolchain itself (rustc/cargo >= 1.94, the workspace's rust-version) must come from rustup:
# Debian 12's cargo is too old.
set -euo pipefail

# libopencv-dev, clang and libclang-dev: the `opencv` feature (the opencv crate binds with libclang).
# libgstreamer*-dev and the gstreamer1.0-* packages: the `edgetamtrack` element (plugins/) and its
# tests, which run gst-launch-1.0 and gst-inspect-1.0 with the videotestsrc/pngdec elements;
# scripts/demo.sh draws its clip (videotestsrc, compositor, videoflip, videobox) and encodes the
# overlay video with them too (pngdec, vp8enc + webmmux, decoded back with vp8dec).
# gstreamer1.0-opencv + opencv-data: Debian's stock `facedetect` (a detector upstream of the element
# in its tests) and its cascades; opencv-doc: the sample photo with a face those tests use
# (/usr/share/doc/opencv-doc/examples/data/messi5.jpg).
# gstreamer1.0-libav (H.264 and other FFmpeg decoders), gstreamer1.0-plugins-ugly (x264enc: MP4
# output) and gstreamer1.0-plugins-base-apps (gst-discoverer-1.0): `edgetam track --input` of
# MP4 files and `--output-video out.mp4`, and their tests (tests/video.rs); python3-gi and
# gir1.2-gst-rtsp-server-1.0: the loopback RTSP server of those tests (tests/support/rtsp_server.py).
# python3-venv: the venv scripts/test-python.sh tests the Python package in.
# valgrind: the C ABI's programs under memcheck (scripts/test-capi.sh; gcc / g++ and pkg-config
# come with build-essential and pkg-config).
PACKAGES=(build-essential pkg-config ca-certificates valgrind libopencv-dev clang libclang-dev
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev gstreamer1.0-tools
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-opencv opencv-data opencv-doc
  gstreamer1.0-libav gstreamer1.0-plugins-ugly gstreamer1.0-plugins-base-apps
  python3-gi gir1.2-gst-rtsp-server-1.0
  python3-venv)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "system packages already installed"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found. Install Rust >= 1.94 with rustup (https://rustup.rs), then re-run." >&2
  exit 1
fi
# The workspace's rust-version: the oldest toolchain that builds it (CI checks the library crates
# with it; 1.93 stops in candle-core, which calls `__cpuid_count` as a safe function).
need=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../Cargo.toml")
have=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
  echo "error: rustc $have is older than $need; run 'rustup update'." >&2
  exit 1
fi
