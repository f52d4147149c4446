"""Writes a small test clip (moving shapes) for the examples: make_clip.py OUT.mp4 [frames].

    python python/examples/make_clip.py /tmp/shapes.mp4 60
"""

from __future__ import annotations

import sys

import cv2
import numpy as np


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "shapes.mp4"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    w, h, fps = 320, 240, 30
    writer = cv2.VideoWriter(out, cv2.VideoWriter.fourcc(*"mp4v"), fps, (w, h))
    if not writer.isOpened():
        sys.exit(f"cannot write {out}")
    for i in range(n):
        frame = np.full((h, w, 3), (40, 90, 60), np.uint8)
        cv2.circle(frame, (60 + 3 * i, 120), 30, (30, 30, 220), -1)  # a red disc moving right
        cv2.rectangle(frame, (200, 40 + i), (260, 90 + i), (220, 160, 40), -1)  # a box moving down
        writer.write(frame)  # BGR, as OpenCV reads it back
    writer.release()
    print(f"wrote {out}: {n} frames {w}x{h} at {fps} fps")


if __name__ == "__main__":
    main()
