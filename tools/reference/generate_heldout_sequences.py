#!/usr/bin/env python3
"""Write seeded tracking sequences for checking a fast mode's tolerance on data nobody tuned on.

    python tools/reference/generate_heldout_sequences.py --out DIR --first-seed 100 --count 12

Each sequence `DIR/seed_NNNN/` holds what the Rust `SequenceFixture` replays (`config.json`,
`events.json`, `sequence.safetensors` with the frames and mask prompts) and no reference outputs:
the check is our fast mode against our exact f32 path on the same frames and prompts
(`cargo test --release -p edgetam-tracker --test bf16_mode heldout -- --ignored --nocapture` with
`EDGETAM_HELDOUT=DIR`). Everything is drawn from the seed: the model input size (256, 512, 768 or
1024), the frame size, the length, 1-3 objects, each object's prompt kind (box, points with
negatives, mask) and first frame (objects after the first may join mid-stream), an occluder sweep
(objects absent for a stretch) and a later re-prompt. The video is `render_video` of the sequence
fixture generator; the model weights are `fixtures/model` at the drawn input size.

`fixtures/tolerance_*` are three of these committed for the test suite (seeds 100-102); the
others are generated and checked only at the end of a change, never tuned on.
"""

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import make_config  # noqa: E402
from generate_sequence_fixtures import background_point, box_of, inner_point, render_video  # noqa: E402

SIZES = [256, 512, 768, 1024]
FRAME_SIZES = [(320, 240), (480, 270), (256, 256), (360, 240), (240, 320)]


def frames_for(size: int, rnd: random.Random) -> int:
    # The 1024 reference-size sequences are kept short: each frame costs ~16x a 256 one.
    return {256: rnd.randint(10, 18), 512: rnd.randint(8, 14), 768: rnd.randint(7, 11), 1024: rnd.randint(5, 8)}[size]


def prompt_for(kind: str, k: int, f: int, vis: torch.Tensor, g: torch.Generator, masks: dict, obj: int):
    """An event dict for object `obj` (shape `k`) on frame `f`; falls back to a box when the shape
    is too small for points or a mask."""
    visible = vis > 0.5
    region = visible[f, k]
    if int(region.sum()) < 80:
        return None
    if kind == "points":
        try:
            pts = [inner_point(region, g) + [1]]
            if int(torch.randint(2, (1,), generator=g)):
                pts.append(background_point(vis[f], g) + [0])
            return {"type": "prompt", "frame": f, "obj": obj, "points": pts}
        except AssertionError:
            kind = "box"
    if kind == "mask":
        key = f"prompt.f{f:06d}.o{obj}.mask"
        masks[key] = region.to(torch.uint8).contiguous()
        return {"type": "prompt", "frame": f, "obj": obj, "mask": key}
    return {"type": "prompt", "frame": f, "obj": obj, "box": box_of(region, g)}


def build(seed: int, out: Path, frames: tuple[int, int] | None = None, sizes: list[int] | None = None,
          defaults: bool = False) -> dict:
    rnd = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    size = rnd.choice(SIZES)
    w, h = rnd.choice(FRAME_SIZES)
    n = frames_for(size, rnd)
    # Long sequences (--frames) and a narrower size draw (--sizes) are drawn from their own
    # stream, so the default sequences of every seed stay what they were.
    long = random.Random(seed * 7919 + 1)
    if sizes:
        size = long.choice(sizes)
    if frames:
        n = long.randint(*frames)
    occlude = None
    if rnd.random() < 0.7:
        start = rnd.uniform(0.3, 0.6)
        occlude = (start, start + rnd.uniform(0.2, 0.35))
    frames, vis = render_video(seed, n, h, w, occlude)
    num_objects = rnd.randint(1, 3)
    kinds = [rnd.choice(["box", "points", "mask"]) for _ in range(num_objects)]
    starts = [0] + [rnd.choice([0, 0, rnd.randint(1, max(1, n // 2))]) for _ in range(num_objects - 1)]
    reprompt = rnd.random() < 0.4
    reprompt_frame = rnd.randint(n // 2, n - 1) if reprompt and n > 3 else None
    events: list[dict] = []
    masks: dict[str, torch.Tensor] = {}
    summary = {"seed": seed, "image_size": size, "width": w, "height": h, "num_frames": n,
               "objects": [], "occlude": occlude, "reprompt_frame": reprompt_frame}
    objects_started = set()
    for f in range(n):
        for k in range(num_objects):
            obj = k + 1
            if starts[k] == f or (starts[k] < f and obj not in objects_started):
                e = prompt_for(kinds[k], k, f, vis, g, masks, obj)
                if e is not None:
                    events.append(e)
                    objects_started.add(obj)
                    summary["objects"].append({"obj": obj, "kind": next(x for x in ("box", "points", "mask") if x in e), "frame": f})
        if reprompt_frame == f and objects_started:
            obj = min(objects_started)
            e = prompt_for("points", obj - 1, f, vis, g, masks, obj)
            already = any(x["type"] == "prompt" and x["frame"] == f and x["obj"] == obj for x in events)
            if e is not None and not already:
                events.append(e)
        events.append({"type": "track", "frame": f})
    r = 0
    for e in events:
        if e["type"] == "track":
            e["out"] = r
            r += 1
    out.mkdir(parents=True, exist_ok=True)
    config = make_config(size)
    if defaults:
        # transformers' default switches: temporal encodings of the object pointers and the
        # occlusion embedding, with the two tensors they add (those of sequence_256_defaults).
        config.enable_temporal_pos_encoding_for_object_pointers = True
        config.enable_occlusion_spatial_embedding = True
        extra = Path(__file__).resolve().parents[2] / "fixtures/sequence_256_defaults/extra_weights.safetensors"
        shutil.copyfile(extra, out / "extra_weights.safetensors")
        summary["defaults"] = True
    config.to_json_file(out / "config.json")
    t = {"frames": frames.contiguous()} | masks
    save_file(t, out / "sequence.safetensors", metadata={"sequence": f"heldout seed {seed}"})
    (out / "events.json").write_text(json.dumps({"width": w, "height": h, "num_frames": n, "events": events}, indent=1) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--frames", type=str, default=None,
                    help="MIN-MAX frames per sequence (default: drawn per input size, 5-18); "
                         "long sequences (30-40) run past the memory and pointer rings")
    ap.add_argument("--sizes", type=str, default=None,
                    help="comma-separated input sizes to draw from (default 256,512,768,1024)")
    ap.add_argument("--defaults", action="store_true",
                    help="transformers' default switches (temporal pointer encodings, occlusion "
                         "embedding) instead of the released EdgeTAM's")
    args = ap.parse_args()
    frames = tuple(int(x) for x in args.frames.split("-")) if args.frames else None
    if frames is not None and (len(frames) != 2 or not 1 <= frames[0] <= frames[1]):
        ap.error("--frames takes MIN-MAX, e.g. 30-40")
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else None
    if sizes is not None and any(x not in SIZES for x in sizes):
        ap.error(f"--sizes must be among {SIZES}")
    for seed in range(args.first_seed, args.first_seed + args.count):
        s = build(seed, args.out / f"seed_{seed:04d}", frames, sizes, args.defaults)
        print(json.dumps(s))


if __name__ == "__main__":
    main()
