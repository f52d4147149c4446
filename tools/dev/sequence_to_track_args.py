#!/usr/bin/env python3
"""Writes a sequence fixture (fixtures/sequence_*) as `edgetam track` inputs: frames/ as PNGs,
mask prompts as PNGs, and prompts.txt with one --prompt SPEC per line.

Used to compare `edgetam track --dump-logits` of two builds byte for byte
(scripts/compare-dump-logits.sh). Needs numpy, pillow and safetensors (no torch).
"""
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from safetensors.numpy import load_file


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: sequence_to_track_args.py FIXTURE_DIR OUT_DIR")
    fixture, out = Path(sys.argv[1]), Path(sys.argv[2])
    events = json.loads((fixture / "events.json").read_text())
    tensors = load_file(str(fixture / "sequence.safetensors"))
    (out / "frames").mkdir(parents=True, exist_ok=True)
    for i, frame in enumerate(tensors["frames"]):
        Image.fromarray(np.ascontiguousarray(frame)).save(out / "frames" / f"{i:06}.png")
    specs = []
    seen = set()
    for e in events["events"]:
        if e["type"] != "prompt":
            continue
        key = (e["obj"], e["frame"])
        if key in seen:  # the CLI takes one prompt per object and frame
            continue
        seen.add(key)
        spec = f"obj={e['obj']};frame={e['frame']}"
        if "box" in e:
            spec += ";box=" + ",".join(str(v) for v in e["box"])
        for p in e.get("points", []):
            spec += ";point=" + ",".join(str(v) for v in p)
        if "mask" in e:
            path = out / f"mask_f{e['frame']}_o{e['obj']}.png"
            Image.fromarray((tensors[e["mask"]] > 0).astype(np.uint8) * 255).save(path)
            spec += f";mask={path}"
        specs.append(spec)
    (out / "prompts.txt").write_text("\n".join(specs) + "\n")


if __name__ == "__main__":
    main()
