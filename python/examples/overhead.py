"""What one `Tracker.track` call from Python adds over the Rust `Tracker` call, in one process.

    python python/examples/overhead.py [--model fixtures/model] [--input-size 256] [-n 60]

Three measurements, medians:

1. tracked calls, side by side: sequence_256's frames (240x160), one box-prompted object, the
   Rust library's Tracker driven from a loop in Rust (`_testing.rust_track_times`) and
   `tracker.track(frame)` timed with `time.perf_counter`, interleaved in rounds. The model's
   own time varies from call to call by more than the binding costs, so the difference of these
   medians is within noise; the next two isolate the binding's part.
2. the fixed cost of a call: the same, on a tracker with no object (the model does not run;
   the call checks the frame and returns an empty result): argument parsing, the numpy borrow
   and layout checks, the GIL released and taken back, the result object.
3. the per-object cost: a tracked result turned into Python objects (each mask, 1 byte per
   pixel, becomes a numpy.ndarray[bool]) at 240x160, 1280x720 and 1920x1080.

Call overhead = (2) + (3) x objects.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import time
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import numpy.typing as npt

import edgetam
from edgetam._edgetam import _testing

REPO = Path(__file__).resolve().parents[2]


def sequence_frames() -> np.ndarray:
    raw = (REPO / "fixtures/sequence_256/sequence.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    info = json.loads(raw[8 : 8 + n])["frames"]
    start, end = info["data_offsets"]
    data = np.frombuffer(raw[8 + n + start : 8 + n + end], np.uint8)
    return data.reshape(info["shape"])


def python_times(
    model: edgetam.Model, frames: npt.NDArray[np.uint8], box: Optional[Tuple[float, float, float, float]]
) -> list[float]:
    tracker = model.tracker()
    if box is not None:
        tracker.add_box(1, 0, box)
    times = []
    for frame in frames:
        start = time.perf_counter()
        tracker.track(frame)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(REPO / "fixtures/model"))
    ap.add_argument("--input-size", type=int, default=256)
    ap.add_argument("-n", type=int, default=60, help="tracked calls per side")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model = edgetam.Model.load(args.model, input_size=args.input_size)
    frames = np.ascontiguousarray(sequence_frames())
    box = (35.0, 57.0, 93.0, 108.0)
    per_round = max(2, args.n // args.rounds + 1)
    tracked = frames[np.arange(per_round) % len(frames)]
    h, w = frames.shape[1:3]

    def ms(t: float) -> str:
        return f"{t * 1e3:.2f} ms"

    def us(t: float) -> str:
        return f"{t * 1e6:.2f} us"


    # 1. Tracked calls; the first call of each run is the prompted frame, left out.
    rust, python = [], []
    for _ in range(args.rounds):
        rust += _testing.rust_track_times(model, tracked, box)[1:]
        python += python_times(model, tracked, box)[1:]
    r, p = statistics.median(rust), statistics.median(python)
    print(f"{model.backend}, input {args.input_size}, {w}x{h} frames, 1 object")
    print(
        f"  tracked call ({len(rust)} each): Rust {ms(r)}, Python {ms(p)}, "
        f"difference {(p - r) * 1e3:+.2f} ms (model time varies more than that)"
    )

    # 2. The fixed cost of a call: no object, the model does not run.
    empty = frames[np.arange(2000) % len(frames)]
    rust, python = [], []
    for _ in range(args.rounds):
        rust += _testing.rust_track_times(model, empty, None)
        python += python_times(model, empty, None)
    r, p = statistics.median(rust), statistics.median(python)
    fixed = p - r
    print(f"  call without the model ({len(rust)} each): Rust {us(r)}, Python {us(p)}, fixed cost {us(fixed)}")

    # 3. Per object: the result's conversion (mask to numpy bool).
    for cw, ch in ((w, h), (1280, 720), (1920, 1080)):
        conv = statistics.median(_testing.result_conversion_times(cw, ch, 1, 200))
        print(
            f"  result conversion per object at {cw}x{ch}: {us(conv)} "
            f"-> one-object track overhead {us(fixed + conv)}"
        )


if __name__ == "__main__":
    main()
