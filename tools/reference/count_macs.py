#!/usr/bin/env python3
"""Count the reference's multiply-adds per stage with `torch.utils.flop_counter.FlopCounterMode`.

    python tools/reference/count_macs.py --size 1024 --frames 17 [--objects 1] [--json out.json]

Runs transformers' streaming `EdgeTamVideoModel` on the synthetic stream of `time_reference.py`
(box prompts on frame 0) and prints, per frame, the multiply-adds (FlopCounterMode's flops / 2:
it counts 2 per multiply-add of mm/bmm/addmm/conv/SDPA and nothing else) of each module the
benchmark times. With one prompt on frame 0, frame t >= 16 reads the steady-state memory: 7 spatial
memories (the prompt's + 6 tracked) and 16 object pointers. These numbers are the constants of
`tracker/src/instrument/macs.rs`'s tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import make_model, make_processor  # noqa: E402
from time_reference import box_prompt, synthetic_frame  # noqa: E402

# Module paths (below the model) whose counts are reported; FlopCounterMode attributes an op to
# every module on the call stack, so a parent's count includes its children.
PARTS = {
    "backbone": ["vision_encoder.backbone"],
    "fpn": ["vision_encoder.neck"],
    "high_res_convs": ["mask_decoder.conv_s0", "mask_decoder.conv_s1"],
    "memory_attention": ["memory_attention"],
    "prompt_encoder": ["prompt_encoder"],
    "mask_decoder": ["mask_decoder"],
    "memory_encoder": ["memory_encoder"],
    "spatial_perceiver": ["spatial_perceiver"],
}


def module_macs(counts: dict, root: str, path: str) -> int:
    return sum(counts.get(f"{root}.{path}", {}).values()) // 2


@torch.no_grad()
def count(size: int, frames: int, objects: int) -> list[dict]:
    model = make_model(size).requires_grad_(False)  # FlopCounterMode's module tracker trips on grad hooks
    proc = make_processor(size)
    root = type(model).__name__
    session = proc.init_video_session(inference_device="cpu", dtype=torch.float32)
    rows = []
    for t in range(frames):
        inp = proc(images=synthetic_frame(t, objects).numpy(), return_tensors="pt")
        if t == 0:
            proc.add_inputs_to_inference_session(
                session, frame_idx=0, obj_ids=list(range(1, objects + 1)),
                input_boxes=[[box_prompt(k) for k in range(objects)]],
                original_size=inp.original_sizes[0])
        with FlopCounterMode(display=False) as fc:
            model(inference_session=session, frame=inp.pixel_values[0])
        counts = fc.get_flop_counts()
        row = {"frame": t, "total": fc.get_total_flops() // 2}
        for part, paths in PARTS.items():
            row[part] = sum(module_macs(counts, root, p) for p in paths)
        # `mask_decoder` above includes conv_s0/conv_s1 only if they ran inside its forward; they
        # run in get_image_features, so its count is the decoder proper.
        row["image_encoder"] = row["backbone"] + row["fpn"] + row["high_res_convs"]
        row["decoder"] = row["prompt_encoder"] + row["mask_decoder"]
        row["memory"] = row["memory_encoder"] + row["spatial_perceiver"]
        row["other"] = row["total"] - row["image_encoder"] - row["memory_attention"] - row["decoder"] - row["memory"]
        if t == 0:
            row["modules"] = {k: sum(v.values()) // 2 for k, v in counts.items()}
        rows.append(row)
        cols = ("image_encoder", "backbone", "fpn", "high_res_convs", "memory_attention", "decoder", "memory", "other", "total")
        print(f"{size} frame {t:2d}: " + " ".join(f"{c} {row[c]}" for c in cols), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--frames", type=int, default=17)
    ap.add_argument("--objects", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = count(a.size, a.frames, a.objects)
    if a.json:
        a.json.write_text(json.dumps({"size": a.size, "objects": a.objects, "frames": rows}, indent=1))


if __name__ == "__main__":
    main()
