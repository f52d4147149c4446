#!/usr/bin/env python3
"""Time transformers' EdgeTAM streaming session per tracked frame at 1024 (eager PyTorch).

    python tools/reference/time_tracking.py --threads 2 --frames 6 --objects 1
    python tools/reference/time_tracking.py --device cuda --frames 30 --objects 3 --json ref.json

CPU float32 by default. `--device cuda` runs the same session on the GPU (float32 without TF32,
matmuls and cuDNN convolutions alike, so it is the exact path `edgetam bench --dtype f32` is
compared with; `--dtype float16|bfloat16` for the half-precision comparison), synchronising
before each frame's clock stops.

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
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--warmup", type=int, default=0,
                    help="tracked frames after the prompt frame left out of the median")
    ap.add_argument("--json", help="write the per-frame times and the median here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        # The fp32 comparison is exact fp32 on both sides: no TF32 anywhere.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    dtype = getattr(torch, a.dtype)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    model = make_model(1024).to(device=device, dtype=dtype)
    proc = make_processor(1024)
    session = proc.init_video_session(inference_device=device, dtype=dtype)
    times = []
    for t in range(a.frames):
        inp = proc(images=frame(t, a.objects).numpy(), return_tensors="pt")
        pixels = inp.pixel_values[0].to(device=device, dtype=dtype)
        sync()
        start = time.perf_counter()
        if t == 0:
            for k in range(a.objects):
                cx, cy = 120 + 150 * k, 160 + 60 * k
                proc.add_inputs_to_inference_session(
                    session, frame_idx=0, obj_ids=k + 1,
                    input_boxes=[[[cx - 45.0, cy - 45.0, cx + 45.0, cy + 45.0]]],
                    original_size=inp.original_sizes[0])
                if k == 0:
                    model(inference_session=session, frame=pixels)
                else:
                    model(inference_session=session, frame_idx=0)
        else:
            model(inference_session=session, frame=pixels)
        sync()
        ms = (time.perf_counter() - start) * 1e3
        if t > a.warmup:
            times.append(ms)
        print(f"frame {t:3d} {ms:8.1f} ms", flush=True)
    measured = sorted(times)
    median = measured[len(measured) // 2] if measured else float("nan")
    where = f"{a.device} {a.dtype}" if cuda else f"{a.threads} threads"
    print(f"median tracked frame: {median:.1f} ms, {a.objects} object(s), {where}")
    if a.json:
        import json

        with open(a.json, "w") as f:
            json.dump({"device": a.device, "dtype": a.dtype, "objects": a.objects,
                       "threads": a.threads, "warmup": a.warmup, "frame_ms": times,
                       "median_ms": median,
                       "gpu": torch.cuda.get_device_name(device) if cuda else None,
                       "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
