#!/usr/bin/env python3
"""An engine's masks against the float32 reference on held-out sequences, per frame and object.

    python tools/reference/engine_accuracy.py --engine openvino SEQUENCE_DIR [SEQUENCE_DIR ...] \\
        [--threads 2] [--max-isa avx2] [--json out.json]

Each sequence (`generate_heldout_sequences.py` output or a committed `fixtures/sequence_*` /
`fixtures/tolerance_*` folder: `config.json`, `events.json`, `sequence.safetensors`) is replayed
twice through transformers' `EdgeTamVideoModel` with `fixtures/model` at the sequence's input
size: as it is (PyTorch, float32: the reference), and with its per-frame stages in `--engine`
(`engines.py`: `openvino-f32`, `openvino` at its default precision, `onnxruntime`, or `torch`
as a control, which must give IoU 1 everywhere). Per (frame, object) output it compares the
binarised masks at the frame's size (IoU) and whether the object is present (object score > 0);
it prints the worst IoU, the share of pairs >= 0.99 and the presence flips per sequence and in
all, the same measures as the Rust side's tolerance rule (tools/dev/bf16_tolerance.py), so the
engines' fast modes and ours sit in one table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_isa import from_argv  # noqa: E402

from_argv()

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from engines import ENGINES, use_engine  # noqa: E402
from generate_sequence_fixtures import extra_weights, load_model, run_sequence  # noqa: E402


def load_sequence(folder: Path):
    config = json.loads((folder / "config.json").read_text())
    events = json.loads((folder / "events.json").read_text())["events"]
    tensors = load_file(folder / "sequence.safetensors")
    frames = tensors.pop("frames")
    masks = {k: v for k, v in tensors.items() if not k.startswith(("out.", "stage."))}
    defaults = bool(config.get("enable_occlusion_spatial_embedding")) or \
        (folder / "extra_weights.safetensors").exists()
    spec = {"image_size": int(config["image_size"]), "defaults": defaults}
    return spec, frames, events, masks


def iou(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.bool(), b.bool()
    union = (a | b).sum().item()
    return 1.0 if union == 0 else (a & b).sum().item() / union


def compare(ref: dict, other: dict) -> list[dict]:
    pairs = []
    for r_idx, out in ref["outputs"].items():
        theirs = other["outputs"][r_idx]
        for obj, r in out["objects"].items():
            o = theirs["objects"][obj]
            present_ref = float(r["score"].flatten()[0]) > 0
            present = float(o["score"].flatten()[0]) > 0
            pairs.append({"frame": out["frame"], "obj": obj, "path": r["path"],
                          "iou": iou(r["mask"], o["mask"]), "flip": present_ref != present,
                          "lowres_max_abs": float((r["lowres"] - o["lowres"]).abs().max())})
    return pairs


def summary(pairs: list[dict]) -> dict:
    if not pairs:
        return {"pairs": 0}
    return {"pairs": len(pairs), "worst_iou": min(p["iou"] for p in pairs),
            "share_ge_0_99": sum(p["iou"] >= 0.99 for p in pairs) / len(pairs),
            "presence_flips": sum(p["flip"] for p in pairs),
            "lowres_max_abs": max(p["lowres_max_abs"] for p in pairs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sequences", type=Path, nargs="+")
    ap.add_argument("--engine", choices=ENGINES, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-isa", choices=("avx2", "avx512"))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    results = {"engine": a.engine, "max_isa": a.max_isa, "sequences": {}}
    everything = []
    for folder in a.sequences:
        spec, frames, events, masks = load_sequence(folder)
        extra = extra_weights() if spec["defaults"] else None
        ref = run_sequence(spec, load_model(spec, extra=extra), frames, events, masks, threads=a.threads)
        model = load_model(spec, extra=extra)
        engine = use_engine(model, a.engine, a.threads, spec["image_size"])
        other = run_sequence(spec, model, frames, events, masks, threads=a.threads)
        pairs = compare(ref, other)
        everything += pairs
        s = summary(pairs)
        if engine is not None:
            s["engine_report"] = engine.precision_report()
        results["sequences"][str(folder)] = s | {"image_size": spec["image_size"], "per_pair": pairs}
        print(f"{folder.name} ({spec['image_size']}): {s['pairs']} frame-object pairs, worst IoU "
              f"{s['worst_iou']:.4f}, {100 * s['share_ge_0_99']:.1f} % >= 0.99, "
              f"{s['presence_flips']} presence flip(s), low-res logits max |diff| {s['lowres_max_abs']:.3g}",
              flush=True)
    total = summary(everything)
    results["all"] = total
    print(f"{a.engine} against float32 PyTorch, {len(a.sequences)} sequence(s): {total['pairs']} pairs, "
          f"worst IoU {total['worst_iou']:.4f}, {100 * total['share_ge_0_99']:.1f} % >= 0.99, "
          f"{total['presence_flips']} presence flip(s)")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
