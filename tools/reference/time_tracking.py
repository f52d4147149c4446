#!/usr/bin/env python3
"""Time transformers' EdgeTAM streaming session per tracked frame at 1024 (CPU, float32).

    python tools/reference/time_tracking.py --threads 2 --frames 6 --objects 1

Same synthetic 640x480 frames and box prompts as `cargo run --release --example track_stream`
(random weights: speed does not depend on the values). Prints the median tracked-frame time.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import make_model, make_processor  # noqa: E402

W, H = 640, 480


def frame(t: int, n: int) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    f = torch.stack([(xx // 3), (yy // 2), torch.full_like(xx, 96)], -1).to(torch.uint8)
    for k in range(n):
        cx, cy = 120 + 150 * k + 4 * t, 160 + 60 * k
        inside = ((xx - cx).abs() < 40) & ((yy - cy).abs() < 40)
        f[inside] = torch.tensor([230, 60 * k, 40], dtype=torch.uint8)
    return f


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--objects", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    model = make_model(1024)
    proc = make_processor(1024)
    session = proc.init_video_session(inference_device="cpu", dtype=torch.float32)
    times = []
    for t in range(a.frames):
        inp = proc(images=frame(t, a.objects).numpy(), return_tensors="pt")
        start = time.perf_counter()
        if t == 0:
            for k in range(a.objects):
                cx, cy = 120 + 150 * k, 160 + 60 * k
                proc.add_inputs_to_inference_session(
                    session, frame_idx=0, obj_ids=k + 1,
                    input_boxes=[[[cx - 45.0, cy - 45.0, cx + 45.0, cy + 45.0]]],
                    original_size=inp.original_sizes[0])
                if k == 0:
                    model(inference_session=session, frame=inp.pixel_values[0])
                else:
                    model(inference_session=session, frame_idx=0)
        else:
            model(inference_session=session, frame=inp.pixel_values[0])
        ms = (time.perf_counter() - start) * 1e3
        if t > 0:
            times.append(ms)
        print(f"frame {t:3d} {ms:8.1f} ms", flush=True)
    times.sort()
    print(f"median tracked frame: {times[len(times) // 2]:.1f} ms, {a.objects} object(s), {a.threads} threads")


if __name__ == "__main__":
    main()
