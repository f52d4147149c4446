"""What one `Tracker.track` call from Python adds over the Rust `Tracker` on the same frames,
in one process: the median of N calls each way, interleaved in rounds.

    python python/examples/overhead.py [--model fixtures/model] [--input-size 256] [-n 60]

Both track sequence_256's frames (240x160) with one box-prompted object; the Rust side is the
library's Tracker driven from a loop in Rust (`edgetam._edgetam._rust_track_times`), the
Python side `tracker.track(frame)` timed with `time.perf_counter`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import time
from pathlib import Path

import numpy as np

import edgetam
from edgetam import _edgetam

REPO = Path(__file__).resolve().parents[2]


def sequence_frames() -> np.ndarray:
    raw = (REPO / "fixtures/sequence_256/sequence.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    info = json.loads(raw[8 : 8 + n])["frames"]
    start, end = info["data_offsets"]
    data = np.frombuffer(raw[8 + n + start : 8 + n + end], np.uint8)
    return data.reshape(info["shape"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(REPO / "fixtures/model"))
    ap.add_argument("--input-size", type=int, default=256)
    ap.add_argument("-n", type=int, default=60, help="calls per side (in rounds of 20 frames)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    model = edgetam.Model.load(args.model, input_size=args.input_size)
    frames = np.ascontiguousarray(sequence_frames())
    box = (35.0, 57.0, 93.0, 108.0)
    per_round = max(2, args.n // args.rounds)
    frames = frames[np.arange(per_round) % len(frames)]
    rust, python = [], []
    for _ in range(args.rounds):
        # The first call of each run is the prompted frame; the rest are tracked frames.
        rust += _edgetam._rust_track_times(model, frames, box)[1:]
        tracker = model.tracker()
        tracker.add_box(1, 0, box)
        for i, frame in enumerate(frames):
            start = time.perf_counter()
            tracker.track(frame)
            if i:
                python.append(time.perf_counter() - start)
    r, p = statistics.median(rust), statistics.median(python)
    print(
        f"{model.backend}, input {args.input_size}, {frames.shape[2]}x{frames.shape[1]} frames, "
        f"{len(rust)} tracked calls each: Rust {r * 1e3:.2f} ms, Python {p * 1e3:.2f} ms, "
        f"overhead {(p - r) * 1e6:+.0f} us per call ({(p - r) / r * 100:+.1f}%)"
    )


if __name__ == "__main__":
    main()
