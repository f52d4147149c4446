#!/usr/bin/env python3
"""The bf16 mode's masks against exact f32 through an `edgetam` binary's `track`, per frame kind.

    python tools/dev/bf16_tolerance.py BIN SEQUENCE_DIR [SEQUENCE_DIR ...]

For each sequence (a fixture or a `generate_heldout_sequences.py` folder: `config.json`,
`events.json`, `sequence.safetensors`) it runs `BIN track` twice on the same frames and prompts,
`--dtype f32` and `--dtype bf16`, with the fixture weights at the sequence's input size (a model
folder of its `config.json` and `fixtures/model/model.safetensors`, so binaries without
`--input-size` run it too), and prints the worst mask IoU of each kind of (frame, object):
prompted (a prompt on that frame), tracked, added mid-stream (an object first prompted after
frame 0), plus visibility flips. Works with any build, e.g. an older one for a before/after.
Needs numpy, pillow and safetensors.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def iou(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a > 0, b > 0
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def results(out: Path) -> dict:
    rows = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows[(r["frame"], r["object"])] = r
    return rows


def prepare(seq: Path, work: Path) -> tuple[Path, list[str]]:
    """`work/frames` and `work/prompts.txt` from the sequence, a model folder of its `config.json`
    and the fixture weights; returns that folder and the `--prompt` arguments for `track`."""
    subprocess.run([sys.executable, str(ROOT / "tools/dev/sequence_to_track_args.py"), str(seq), str(work)],
                   check=True)
    model = work / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((seq / "config.json").read_text())
    weights = model / "model.safetensors"
    if not weights.exists():
        weights.symlink_to((ROOT / "fixtures/model/model.safetensors").resolve())
    prompts = []
    for spec in (work / "prompts.txt").read_text().splitlines():
        prompts += ["--prompt", spec]
    return model, prompts


def run(binary: str, seq: Path, work: Path) -> str:
    model, prompts = prepare(seq, work)
    for dtype in ("f32", "bf16"):
        subprocess.run([binary, "track", "--model", str(model), "--frames", str(work / "frames"), *prompts,
                        "--dtype", dtype, "--out", str(work / dtype)], check=True, capture_output=True)
    events = json.loads((seq / "events.json").read_text())["events"]
    prompted = {(e["frame"], e["obj"]) for e in events if e["type"] == "prompt"}
    first = {}
    for e in events:
        if e["type"] == "prompt":
            first.setdefault(e["obj"], e["frame"])
    a, b = results(work / "f32"), results(work / "bf16")
    worst = {"prompted": None, "tracked": None, "added mid-stream": None}
    flips = 0
    for key, ra in a.items():
        f, o = key
        rb = b[key]
        flips += ra["visible"] != rb["visible"]
        ma = np.array(Image.open(work / "f32" / "masks" / f"{f:06}_obj{o}.png"))
        mb = np.array(Image.open(work / "bf16" / "masks" / f"{f:06}_obj{o}.png"))
        v = iou(ma, mb)
        kind = "prompted" if key in prompted else ("added mid-stream" if first.get(o, 0) > 0 else "tracked")
        if worst[kind] is None or v < worst[kind][0]:
            worst[kind] = (v, f"frame {f} obj {o}")
    size = json.loads((seq / "config.json").read_text())["image_size"]
    cells = ", ".join(f"{k} -" if w is None else f"{k} {w[0]:.4f} ({w[1]})" for k, w in worst.items())
    overall = min((w[0] for w in worst.values() if w is not None), default=1.0)
    return f"{seq.name} (input {size}, {len(a)} results): worst {overall:.4f}; {cells}; visibility flips {flips}"


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary = sys.argv[1]
    for seq in sys.argv[2:]:
        with tempfile.TemporaryDirectory() as tmp:
            print(run(binary, Path(seq), Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
