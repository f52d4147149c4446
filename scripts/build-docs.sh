#!/usr/bin/env bash
# Builds the guide (docs/, mdBook) and checks its links: every relative link and #anchor in the
# built HTML and in README.md, BENCHMARKS.md and ARCHITECTURE.md must point at a file and a
# heading that exist (scripts/check-links.py; http(s) links are not checked). scripts/test.sh
# runs it; the book lands in docs/book/ (git-ignored).
#
# mdbook comes from crates.io at a pinned version, installed once into a cache outside the clone
# (/var/cache/edgetam-ci/mdbook, else ~/.cache/edgetam-ci/mdbook; MDBOOK_ROOT overrides it) and
# reused while that version is there. Cold: ~1 min on 2 cores (without mdbook's `serve` and
# `watch` features, which the build does not use); warm: a few seconds. `--install-only` stops
# there (CI: its background lane installs it long before the docs step).
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK_VERSION=0.5.4
root=${MDBOOK_ROOT:-}
if [ -z "$root" ]; then
  # shellcheck source=scripts/ci-lib.sh
  source scripts/ci-lib.sh
  root=$(ci_cache_dir)/mdbook
fi
mdbook="$root/bin/mdbook"
if ! { [ -x "$mdbook" ] && "$mdbook" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; }; then
  echo "installing mdbook $MDBOOK_VERSION into $root"
  # Unoptimised: it compiles in half the CPU time of level 1 and still builds the book in
  # seconds, byte for byte the same.
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 cargo install mdbook --locked --version "$MDBOOK_VERSION" \
    --root "$root" --force \
    --no-default-features --features search
fi
"$mdbook" --version
if [ "${1:-}" = --install-only ]; then exit 0; fi
"$mdbook" build docs
python3 scripts/check-links.py --book docs/book README.md BENCHMARKS.md ARCHITECTURE.md
