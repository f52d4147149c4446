#!/usr/bin/env bash
# The main job on one command: tracks two moving balls through a 3-second WebM clip (generated
# here with GStreamer's videotestsrc, deterministic) and writes an overlay video a browser plays:
# `edgetam track --input clip.webm --output-video overlay.webm`.
#
#   scripts/demo.sh                                      # random weights: runs end to end, masks are meaningless
#   EDGETAM_MODEL=yonigozlan/EdgeTAM-hf scripts/demo.sh  # real weights by hub id (fetched once into the Hugging Face cache)
#   EDGETAM_MODEL=facebook/EdgeTAM scripts/demo.sh       # Meta's edgetam.pt by hub id
#   EDGETAM_MODEL=/path/to/edgetam scripts/demo.sh       # a folder with config.json + model.safetensors, or an edgetam.pt
#
# Writes to out/demo/ (DEMO_OUT overrides): clip.webm (the input, VP8), overlay.webm (VP8 WebM),
# results.jsonl, masks/, prompts/ (the frame-0 masks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --bin edgetam
BIN="${CARGO_TARGET_DIR:-target}/release/edgetam"
OUT="${DEMO_OUT:-out/demo}"
FRAMES=90   # 3 s at 30 fps
W=320
H=240

rm -rf "$OUT/clip" "$OUT/clip.webm" "$OUT/prompts" "$OUT/masks" "$OUT/overlay" "$OUT/overlay.webm" \
  "$OUT/results.jsonl"
mkdir -p "$OUT/prompts"
start=$SECONDS

# The clip: a blue ball and an orange one (the same wavy path turned 180 degrees and moved 90 px
# right) crossing over a slate background. videotestsrc draws the same frames every run.
RGBA="video/x-raw,format=BGRA,width=$W,height=$H,framerate=30/1"
ball() { # ball COLOR BACKGROUND FRAMES: a videotestsrc ball branch, as gst-launch words
  echo "videotestsrc pattern=ball motion=wavy foreground-color=$1 background-color=$2 num-buffers=$3 ! $RGBA"
}
SECOND="videoflip video-direction=180 ! videobox left=-90 right=90 border-alpha=0"
# Encoded as a VP8 WebM (gstreamer1.0-plugins-good), as a user's clip would come.
# shellcheck disable=SC2046 # word splitting of the pipeline descriptions is intended
gst-launch-1.0 -q compositor name=mix ! "video/x-raw,width=$W,height=$H" ! videoconvert \
  ! video/x-raw,format=I420 ! vp8enc deadline=1 target-bitrate=1500000 keyframe-max-dist=30 \
  ! webmmux ! filesink location="$OUT/clip.webm" \
  videotestsrc pattern=solid-color foreground-color=0xff3c4450 num-buffers=$FRAMES ! "$RGBA" ! mix.sink_0 \
  $(ball 0xff20c0ff 0x00000000 $FRAMES) ! mix.sink_1 \
  $(ball 0xffff8020 0x00000000 $FRAMES) ! $SECOND ! mix.sink_2
# The prompts: each ball alone on frame 0, white on black (a mask prompt: nonzero = the object),
# so the prompt always matches the object.
# shellcheck disable=SC2046
gst-launch-1.0 -q $(ball 0xffffffff 0xff000000 1) ! videoconvert ! video/x-raw,format=RGB \
  ! pngenc ! filesink location="$OUT/prompts/ball1.png"
# shellcheck disable=SC2046
gst-launch-1.0 -q $(ball 0xffffffff 0xff000000 1) ! $SECOND ! videoconvert \
  ! video/x-raw,format=RGB ! pngenc ! filesink location="$OUT/prompts/ball2.png"
echo "clip: $FRAMES frames ${W}x$H in $OUT/clip.webm ($((SECONDS - start)) s)"

if [ -n "${EDGETAM_MODEL:-}" ]; then
  MODEL=(--model "$EDGETAM_MODEL")
else
  # 256 input keeps the demo at about a minute on 2 cores; the released model runs at 1024.
  MODEL=(--random-weights --input-size 256)
fi
# A video in, a video out: decoded, tracked and the overlay encoded (VP8 WebM) in one command.
"$BIN" track "${MODEL[@]}" --input "$OUT/clip.webm" \
  --prompt "obj=1;frame=0;mask=$OUT/prompts/ball1.png" \
  --prompt "obj=2;frame=0;mask=$OUT/prompts/ball2.png" \
  --out "$OUT" --output-video "$OUT/overlay.webm" | tee "$OUT/summary.txt"

# Decode it back: every frame must be there.
decoded=$(gst-launch-1.0 -v filesrc location="$OUT/overlay.webm" ! matroskademux ! vp8dec \
  ! fakesink silent=false 2>&1)
count=$(grep -c "last-message = chain" <<<"$decoded" || true)
size=$(grep -o "width=(int)[0-9]*, height=(int)[0-9]*" <<<"$decoded" | head -n1 \
  | sed 's/width=(int)\([0-9]*\), height=(int)\([0-9]*\)/\1x\2/')
if [ "$count" -ne "$FRAMES" ]; then
  echo "error: $OUT/overlay.webm decodes to $count frames, expected $FRAMES" >&2
  exit 1
fi

echo
echo "wrote $OUT/overlay.webm (VP8, $count frames, $size; open it in a browser or player),"
echo "      $OUT/results.jsonl (one line per frame and object, with its time), $OUT/masks/"
if command -v gst-discoverer-1.0 >/dev/null; then
  gst-discoverer-1.0 "$OUT/overlay.webm" | grep -E "container|video #|Width|Height|Frame rate|Duration" \
    | sed 's/^ */  /'
fi
grep -o "[0-9.]* fps" "$OUT/summary.txt" | sed 's/^/tracking speed: /'
echo "demo took $((SECONDS - start)) s after the build"
if [ -z "${EDGETAM_MODEL:-}" ]; then
  echo
  echo "NOTE: random weights: the model ran end to end, but the masks are meaningless."
  echo "      Real weights: EDGETAM_MODEL=yonigozlan/EdgeTAM-hf scripts/demo.sh (see README, Weights)."
fi
