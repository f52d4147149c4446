"""A live camera loop that drops the frames it cannot keep up with.

    python python/examples/camera_loop.py MODEL --box 30,90,90,150 [--camera 0 | --camera clip.mp4]
        [--input-size 512] [--seconds 10] [--out overlay.mp4] [--show]

A capture thread reads the camera at its own pace and pushes every frame; the pipeline keeps
at most one waiting (`drop="oldest"`), so the tracker always works on the freshest frame and
the capture thread never waits (the GIL is released while the model runs). A video file as
--camera is paced at its frame rate, as a camera would deliver it.
"""

from __future__ import annotations

import argparse
import threading
import time

import cv2
import numpy as np

import edgetam
from track_video import draw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--camera", default="0", help="device index, URL or video file")
    ap.add_argument("--box", action="append", required=True, help="x0,y0,x1,y1 (repeatable)")
    ap.add_argument("--input-size", type=int)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out", help="write the tracked frames' overlay here")
    ap.add_argument("--show", action="store_true", help="show a window (needs a display)")
    args = ap.parse_args()

    source = int(args.camera) if args.camera.isdigit() else args.camera
    cap = cv2.VideoCapture(source)
    if not cap.isOpened():
        raise SystemExit(f"cannot open camera {args.camera}")
    is_file = not isinstance(source, int) and "://" not in str(source)
    fps = cap.get(cv2.CAP_PROP_FPS) or 30.0
    size = (int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
    writer = cv2.VideoWriter(args.out, cv2.VideoWriter.fourcc(*"mp4v"), fps, size) if args.out else None

    model = edgetam.Model.load(args.model, input_size=args.input_size)
    pipeline = model.pipeline(queue=1, drop="oldest", encoder_ahead=True)
    for obj, box in enumerate(args.box, start=1):
        x0, y0, x1, y1 = (float(v) for v in box.split(","))
        pipeline.add_box(obj, (x0, y0, x1, y1))

    frames: dict[int, np.ndarray] = {}
    stop = threading.Event()

    def capture() -> None:
        n, start = 0, time.perf_counter()
        while not stop.is_set() and time.perf_counter() - start < args.seconds:
            ok, frame = cap.read()
            if not ok:
                break
            if is_file:  # deliver at the clip's frame rate, as a camera does
                time.sleep(max(0.0, start + n / fps - time.perf_counter()))
            frames[n] = frame
            pipeline.push(frame, format="bgr", timestamp=time.perf_counter() - start)  # never waits
            n += 1
        pipeline.finish()

    thread = threading.Thread(target=capture, daemon=True)
    thread.start()
    tracked = dropped = 0
    latencies = []
    start = time.perf_counter()
    try:
        for out in pipeline:
            frame = frames.pop(out.id)
            if out.dropped:
                dropped += 1
                continue
            if out.result is None:
                print(f"frame {out.id} failed: {out.error}")
                continue
            tracked += 1
            assert out.timestamp is not None  # every push above gives one
            latencies.append(time.perf_counter() - start - out.timestamp)
            overlay = draw(frame, out.result)
            if writer is not None:
                writer.write(overlay)
            if args.show:
                cv2.imshow("edgetam", overlay)
                if cv2.waitKey(1) == 27:  # Esc
                    stop.set()
    except KeyboardInterrupt:
        stop.set()
    finally:
        thread.join()
        pipeline.close()
        if writer is not None:
            writer.release()
    total = tracked + dropped
    lat = sorted(latencies)[len(latencies) // 2] * 1e3 if latencies else float("nan")
    print(
        f"{total} frames captured: {tracked} tracked, {dropped} dropped "
        f"(median latency {lat:.0f} ms, {model.backend})"
    )


if __name__ == "__main__":
    main()
