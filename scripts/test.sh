#!/usr/bin/env bash
# Runs the whole test suite as CI does: system packages, formatting, lints, then the tests in
# release mode (the model is far too slow unoptimised).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace
