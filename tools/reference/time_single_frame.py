#!/usr/bin/env python3
"""Time single-frame EdgeTAM (image encoder + prompt encoder/decoder) at 1024: ours vs PyTorch.

    cargo build --release --bin edgetam
    python tools/reference/time_single_frame.py [--threads 2] [--rounds 3] [--repeat 5]

Runs our `edgetam segment --repeat N` and the transformers reference alternately, `--rounds` times,
on the same weights (fixtures/model), image and box prompt, with the same thread count, and prints
per-stage medians and the ratios. The machines are shared and noisy: compare numbers of one run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

from common import make_model, make_processor, repo_root


def time_reference(model, proc, img, box, repeat: int) -> dict[str, float]:
    import torch

    h, w = img.shape[:2]
    enc, dec, pre = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        pixels = proc(images=img, return_tensors="pt").pixel_values
        t1 = time.perf_counter()
        feats = model.get_image_features(pixels)
        fpn = feats.fpn_hidden_states
        size = model.backbone_feature_sizes
        maps = [f.permute(1, 2, 0).view(1, -1, *s) for f, s in zip(fpn, size)]
        maps[-1] = maps[-1] + model.no_memory_embedding.reshape(1, -1, 1, 1)
        t2 = time.perf_counter()
        enc_in = proc(input_boxes=[[box]], original_sizes=[[h, w]], return_tensors="pt")
        pts = enc_in["input_boxes"].reshape(1, 1, 2, 2)
        labels = torch.tensor([[[2, 3]]], dtype=torch.int32)
        out = model._single_frame_forward(
            input_points=pts, input_labels=labels, image_embeddings=maps, multimask_output=False
        )
        proc.post_process_masks([out.pred_masks], original_sizes=[[h, w]], binarize=True)
        t3 = time.perf_counter()
        pre.append(t1 - t0)
        enc.append(t2 - t1)
        dec.append(t3 - t2)
    return {
        "preprocess": statistics.median(pre) * 1e3,
        "encoder": statistics.median(enc) * 1e3,
        "decoder": statistics.median(dec) * 1e3,
    }


def time_ours(binary: Path, model_dir: Path, image: Path, box, repeat: int, threads: int) -> dict[str, float]:
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    cmd = [str(binary), "segment", "--model", str(model_dir), "--image", str(image),
           "--box", ",".join(str(v) for v in box), "--out", "/tmp/edgetam_timing_mask.png",
           "--repeat", str(repeat)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    m = re.search(r"preprocess ([\d.]+) ms, image encoder ([\d.]+) ms, prompt \+ decoder \+ post-process ([\d.]+) ms", out)
    if not m:
        raise SystemExit(f"unexpected output from {binary}:\n{out}")
    return {"preprocess": float(m[1]), "encoder": float(m[2]), "decoder": float(m[3])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--image", type=Path, default=repo_root() / "examples/data/shapes.png")
    ap.add_argument("--box", default="150,90,330,260")
    args = ap.parse_args()

    import numpy as np
    import torch
    from PIL import Image
    from safetensors.torch import load_file

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    root = repo_root()
    model_dir = root / "fixtures/model"
    binary = root / "target/release/edgetam"
    if not binary.exists():
        raise SystemExit("build first: cargo build --release --bin edgetam")
    model = make_model(1024)
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in load_file(model_dir / "model.safetensors").items()}
    model.load_state_dict(sd, strict=True)
    proc = make_processor(1024)
    img = np.array(Image.open(args.image).convert("RGB"))
    box = [float(v) for v in args.box.split(",")]

    ours, ref = [], []
    for r in range(args.rounds):
        ours.append(time_ours(binary, model_dir, args.image, box, args.repeat, args.threads))
        ref.append(time_reference(model, proc, img, box, args.repeat))
        print(f"round {r + 1}: ours {ours[-1]}  reference {ref[-1]}")

    print(f"\nmedian over {args.rounds} rounds x {args.repeat} repeats, {args.threads} threads, 1024 input")
    print(f"{'stage':<12}{'ours ms':>10}{'torch ms':>10}{'speed-up':>10}")
    for stage in ("preprocess", "encoder", "decoder"):
        o = statistics.median(x[stage] for x in ours)
        t = statistics.median(x[stage] for x in ref)
        print(f"{stage:<12}{o:>10.1f}{t:>10.1f}{t / o:>9.2f}x")
    o = statistics.median(sum(x.values()) for x in ours)
    t = statistics.median(sum(x.values()) for x in ref)
    print(f"{'total':<12}{o:>10.1f}{t:>10.1f}{t / o:>9.2f}x")


if __name__ == "__main__":
    main()
