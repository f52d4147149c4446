"""Reference counts and memory stay flat over thousands of calls: frames borrowed, results and
exceptions freed, nothing kept per call."""

from __future__ import annotations

import gc
import sys
import tracemalloc

from typing import Iterator

import numpy as np
import numpy.typing as npt
import pytest

import edgetam

from conftest import Sequence


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def small_frames(n: int) -> Iterator[npt.NDArray[np.uint8]]:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (4, 24, 32, 3), dtype=np.uint8)
    for i in range(n):
        yield base[i % 4]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_thousands_of_frames_flat(model: edgetam.Model) -> None:
    """3000 small frames through `track` (no object: the binding's borrow, validation and
    result path without the model) and 3000 refused ones, then 60 tracked frames with masks:
    the frame's refcount is unchanged, tracemalloc and RSS flat."""
    tracker = model.tracker()
    frame = np.ascontiguousarray(next(small_frames(1)))
    bad = frame.astype(np.float32)
    refs = sys.getrefcount(frame), sys.getrefcount(bad)

    def round_(n: int) -> None:
        for f in small_frames(n):
            tracker.track(f)
            tracker.track(frame)
            try:
                tracker.track(bad)
            except edgetam.InvalidFrameError:
                pass

    round_(200)  # warm-up: caches, interned strings, allocator pools
    gc.collect()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    rss0 = rss_bytes()
    round_(3000)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    rss1 = rss_bytes()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert (sys.getrefcount(frame), sys.getrefcount(bad)) == refs
    print(f"9000 calls: Python heap {grown:+d} B, RSS {(rss1 - rss0) / 1024:+.0f} KiB")
    assert grown < 64 * 1024, grown
    assert rss1 - rss0 < 8 * 1024 * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_tracked_results_freed(model: edgetam.Model, sequence: Sequence) -> None:
    """Masks handed to Python are freed with their results; the tracker's memory is bounded."""
    tracker = model.tracker()
    tracker.add_box(1, 0, (35, 57, 93, 108))
    frame = sequence.frames[0]
    ref = sys.getrefcount(frame)
    for _ in range(20):  # warm-up: the memory ring fills
        tracker.track(frame)
    gc.collect()
    rss0 = rss_bytes()
    masks = 0
    for _ in range(60):
        r = tracker.track(frame)
        mask = r.objects[0].mask
        # The result, its object and this name: nothing else holds the mask.
        assert sys.getrefcount(mask) == 2 + 1
        masks += mask.nbytes
        del r, mask
    gc.collect()
    rss1 = rss_bytes()
    assert sys.getrefcount(frame) == ref
    print(f"60 tracked frames ({masks} mask bytes handed out): RSS {(rss1 - rss0) / 1024:+.0f} KiB")
    assert rss1 - rss0 < masks + 8 * 1024 * 1024
