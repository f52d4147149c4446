#!/usr/bin/env bash
# Runs the kernel tests and the parity tests again at every narrower instruction set this CPU
# can run (EDGETAM_ISA=avx2, =portable on an AVX-512 machine; =portable on an AVX2 one), so
# one machine checks each path the code has for it. The widest path is what `cargo test` ran.
# The kernel tests also walk every ISA themselves; the parity tests run the whole model on the
# capped path, with the same tolerances. Below avx512 the bf16 kernels never run, so bf16_mode
# checks there that the bf16 mode is refused (Error::PrecisionUnavailable), not run as f32.
#
#   scripts/test-isas.sh                 # after scripts/test.sh's workspace build and tests (CI)
#   ISAS="avx2" scripts/test-isas.sh     # one path only
#
# Prints one "test result" line per test binary and ISA, like cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
# scripts/test.sh's selection, features and profile, so the binaries it built are reused (after
# it, this build finds everything fresh).
FEATURES=${FEATURES:-$CI_FEATURES}
profile=$(ci_cargo_profile)
ci_build_workspace
# "cpu kernels: avx512 (this CPU runs avx512, avx2, portable)"
line=$("$(ci_profile_dir)/edgetam" cpu)
echo "$line"
if [ -z "${ISAS:-}" ]; then
  runs=$(echo "$line" | sed -n 's/.*this CPU runs \(.*\))$/\1/p' | tr -d ',')
  widest=$(echo "$runs" | awk '{print $1}')
  ISAS=$(echo "$runs" | tr ' ' '\n' | grep -vx "$widest" | tr '\n' ' ')
fi
status=0
for isa in $ISAS; do
  start=$SECONDS
  echo "== EDGETAM_ISA=$isa: kernel and parity tests"
  # The workspace with scripts/test.sh's features: the binaries `cargo test` built, reused.
  EDGETAM_ISA=$isa cargo test --profile "$profile" --locked --workspace --features "$FEATURES" \
    --lib kernels:: || status=$?
  EDGETAM_ISA=$isa cargo test --profile "$profile" --locked --workspace --features "$FEATURES" \
    --test vision_parity --test decoder_parity --test memory_parity \
    --test memory_attention_parity --test sequence_parity --test frame_parity \
    --test bf16_mode || status=$?
  echo "EDGETAM_ISA=$isa: $((SECONDS - start)) s"
done
exit "$status"
