"""Tracks objects through a video file read with OpenCV and writes an overlay video.

    python python/examples/track_video.py MODEL VIDEO OUT.mp4 --box 30,90,90,150 [--box ...]
        [--input-size 512] [--encoder-ahead]

MODEL is a folder, an edgetam.pt or a hub id (yonigozlan/EdgeTAM-hf); each --box prompts one
object (ids 1, 2, ...) on the first frame. Every frame is tracked (the pipeline's "block"
policy): frames are pushed from a reader thread while results are drawn here, in order.
"""

from __future__ import annotations

import argparse
import threading
import time

import cv2
import numpy as np

import edgetam

COLORS = [(0, 0, 255), (0, 200, 0), (255, 80, 0), (0, 200, 255), (255, 0, 255)]  # BGR


def draw(frame: np.ndarray, result: edgetam.FrameResult) -> np.ndarray:
    """Each visible object tinted its own color, its box outlined."""
    out = frame.copy()
    for o in result.objects:
        color = np.array(COLORS[(o.id - 1) % len(COLORS)], np.float32)
        out[o.mask] = (0.5 * out[o.mask] + 0.5 * color).astype(np.uint8)
        if o.box is not None:
            x0, y0, x1, y1 = o.box
            cv2.rectangle(out, (x0, y0), (x1, y1), tuple(int(c) for c in color), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("video")
    ap.add_argument("out")
    ap.add_argument("--box", action="append", required=True, help="x0,y0,x1,y1 (repeatable)")
    ap.add_argument("--input-size", type=int)
    ap.add_argument("--encoder-ahead", action="store_true")
    args = ap.parse_args()

    model = edgetam.Model.load(args.model, input_size=args.input_size)
    cap = cv2.VideoCapture(args.video)
    if not cap.isOpened():
        raise SystemExit(f"cannot open {args.video}")
    fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
    size = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
    writer = cv2.VideoWriter(args.out, cv2.VideoWriter.fourcc(*"mp4v"), fps, size)

    frames: dict[int, np.ndarray] = {}
    with model.pipeline(queue=4, drop="block", encoder_ahead=args.encoder_ahead) as pipeline:
        for obj, box in enumerate(args.box, start=1):
            x0, y0, x1, y1 = (float(v) for v in box.split(","))
            pipeline.add_box(obj, (x0, y0, x1, y1))

        def read() -> None:
            n = 0
            while True:
                ok, frame = cap.read()  # BGR uint8 (H, W, 3)
                if not ok:
                    break
                frames[n] = frame
                pipeline.push(frame, format="bgr")  # waits while the queue is full
                n += 1
            pipeline.finish()

        reader = threading.Thread(target=read, daemon=True)
        start = time.perf_counter()
        reader.start()
        for out in pipeline:  # in push order, one per frame
            frame = frames.pop(out.id)
            if out.result is None:
                print(f"frame {out.id}: {out.outcome} {out.error or ''}")
                writer.write(frame)
                continue
            writer.write(draw(frame, out.result))
            seen = " ".join(
                f"obj{o.id}={'visible' if o.visible else 'absent'}" for o in out.result.objects
            )
            print(f"frame {out.id}: {seen}")
        reader.join()
        elapsed = time.perf_counter() - start
    writer.release()
    n = out.id + 1 if "out" in locals() else 0
    print(f"{n} frames in {elapsed:.1f} s ({n / elapsed:.1f} fps, {model.backend}) -> {args.out}")


if __name__ == "__main__":
    main()
