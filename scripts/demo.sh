#!/usr/bin/env bash
# The main job on one command: segments an object in the sample image.
#   scripts/demo.sh                 # random weights: runs end to end, masks are meaningless
#   EDGETAM_MODEL=/path/to/edgetam scripts/demo.sh   # real weights (config.json + model.safetensors, or edgetam.pt)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --bin edgetam
if [ -n "${EDGETAM_MODEL:-}" ]; then
  MODEL=(--model "$EDGETAM_MODEL")
else
  MODEL=(--random-weights)
fi
mkdir -p out
./target/release/edgetam segment "${MODEL[@]}" --image examples/data/shapes.png \
  --box 150,90,330,260 --out out/mask.png --overlay out/overlay.png
echo "wrote out/mask.png and out/overlay.png"
