#!/usr/bin/env bash
# The Python package (python/): builds its abi3 wheel with maturin, installs it into a cached
# venv and runs its pytest suite, which compares it with the Rust library (the `edgetam` CLI,
# built here too) on the committed fixtures. Exits with pytest's status.
#
# The venv (python/requirements-dev.txt, from PyPI) lives outside the clone, under
# /var/cache/edgetam-ci when writable, else ~/.cache/edgetam-ci, and is remade when the
# requirements change. EDGETAM_CLI_FEATURES: cargo features of the CLI build (scripts/test.sh
# passes its own, so the CLI it already built is reused).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
cache=/var/cache/edgetam-ci
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/edgetam-ci
  mkdir -p "$cache"
fi
venv=$cache/python-venv
req=python/requirements-dev.txt
if ! cmp -s "$req" "$venv/requirements-dev.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$venv/requirements-dev.txt"
fi
echo "python venv ($venv): $((SECONDS - start)) s"
# The Rust results the parity tests compare with.
if [ -n "${EDGETAM_CLI_FEATURES:-}" ]; then
  cargo build --release --workspace --bins --features "$EDGETAM_CLI_FEATURES"
else
  cargo build --release --bin edgetam
fi
# The wheel, then a clean install of it (what `pip install ./python` would install).
rm -rf target/wheels/edgetam-*.whl
"$venv/bin/maturin" build --release --manifest-path python/Cargo.toml --out target/wheels \
  --interpreter "$venv/bin/python"
wheel=$(ls target/wheels/edgetam-*.whl)
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "wheel $(basename "$wheel"): $(stat -c %s "$wheel") bytes; build: $((SECONDS - start)) s"
set +e
# Run from outside python/ so `import edgetam` is the installed wheel, not the source folder.
(cd python/tests && "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs .)
status=$?
set -e
echo "python tests: $((SECONDS - start)) s"
exit "$status"
