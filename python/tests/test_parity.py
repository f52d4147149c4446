"""The Python bindings give exactly the Rust library's masks and scores on sequence_256: the
`edgetam` CLI writes the Rust results, and every frame and object is compared byte for byte
(masks) and bit for bit (scores), through each way a frame can be handed over."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, Optional, Tuple

import numpy as np
import pytest

import edgetam

from conftest import RustResults, Sequence

if TYPE_CHECKING:
    from edgetam._edgetam import FrameFormat

View = Callable[[np.ndarray], Tuple[np.ndarray, Optional["FrameFormat"]]]


def compare(results: Dict[int, edgetam.FrameResult], rust: RustResults) -> int:
    """Asserts equality with the Rust results; returns how many (frame, object) pairs matched."""
    compared = 0
    for f, r in results.items():
        ids = [o.id for o in r.objects]
        assert ids == [o for (ff, o) in rust.masks if ff == f], f"frame {f}: objects {ids}"
        for o in r.objects:
            key = (f, o.id)
            assert o.mask.dtype == np.bool_ and o.mask.shape == (r.height, r.width)
            assert np.array_equal(o.mask, rust.masks[key]), f"frame {f} object {o.id}: mask"
            # f32 -> Python float is exact: equality here is bit equality of the f32 scores.
            assert o.score == float(rust.scores[key]), f"frame {f} object {o.id}: score"
            record = rust.records[key]
            assert o.visible == record["visible"]
            assert o.area == record["area"] == int(o.mask.sum())
            assert o.box == (tuple(record["box"]) if record["box"] is not None else None)
            compared += 1
    assert set(rust.masks) == {(f, o.id) for f, r in results.items() for o in r.objects}
    return compared


def run_tracker(
    model: edgetam.Model, seq: Sequence, view: View
) -> Dict[int, edgetam.FrameResult]:
    tracker = model.tracker()
    out = {}
    for f, frame in enumerate(seq.frames):
        seq.apply(tracker, f)
        array, fmt = view(frame)
        out[f] = tracker.track(array, format=fmt)
        assert out[f].frame_index == f
    return out


def strided(frame: np.ndarray) -> np.ndarray:
    """The frame as a crop of a larger canvas: rows further apart than its width."""
    h, w, _ = frame.shape
    canvas = np.zeros((h + 7, w + 13, 3), np.uint8)
    canvas[3 : 3 + h, 5 : 5 + w] = frame
    view = canvas[3 : 3 + h, 5 : 5 + w]
    assert not view.flags.c_contiguous
    return view


def bgra_strided(frame: np.ndarray) -> np.ndarray:
    """BGRA with padding bytes at the end of each row (as a decoder's surface)."""
    h, w, _ = frame.shape
    padded = np.zeros((h, w + 9, 4), np.uint8)
    padded[:, :w, :3] = frame[..., ::-1]
    return padded[:, :w]


VIEWS: Dict[str, View] = {
    "rgb": lambda f: (np.ascontiguousarray(f), None),
    "bgr": lambda f: (np.ascontiguousarray(f[..., ::-1]), "bgr"),
    "rgba": lambda f: (np.dstack([f, np.full(f.shape[:2], 7, np.uint8)]), "rgba"),
    "bgra-strided": lambda f: (bgra_strided(f), "bgra"),
    "rgb-strided": lambda f: (strided(f), None),
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_tracker_matches_rust(model: edgetam.Model, sequence: Sequence, rust_results: RustResults, view: str) -> None:
    results = run_tracker(model, sequence, VIEWS[view])
    compared = compare(results, rust_results)
    # 20 frames; 2 objects from frame 0, a third from frame 5.
    assert compared == 55
    print(f"{view}: {compared} (frame, object) masks and scores equal to Rust's")


def test_pipeline_matches_rust(model: edgetam.Model, sequence: Sequence, rust_results: RustResults) -> None:
    """The frame-queue pipeline with encoder-ahead, prompts queued between frames."""
    results: Dict[int, edgetam.FrameResult] = {}
    with model.pipeline(queue=2, encoder_ahead=True) as pipeline:
        for f, frame in enumerate(sequence.frames):
            sequence.apply(pipeline, f, with_frame=False)
            assert pipeline.push(frame, timestamp=f / 30) == f
        pipeline.finish()
        for out in pipeline:
            assert out.outcome == "tracked" and not out.dropped and out.error is None
            assert out.command_errors == []
            assert out.timestamp == pytest.approx(out.id / 30)
            assert out.result is not None
            results[out.id] = out.result
    assert sorted(results) == list(range(len(sequence.frames)))
    assert compare(results, rust_results) == 55


def test_segment_matches_prompted_frame(model: edgetam.Model, sequence: Sequence, rust_results: RustResults) -> None:
    """Model.segment on frame 0 with object 1's box is the tracker's prompted frame-0 output."""
    box = tuple(sequence.prompts[0][0]["box"])
    seg = model.segment(sequence.frames[0], box=box)
    assert seg.id == 0
    assert np.array_equal(seg.mask, rust_results.masks[(0, 1)])
    assert seg.score == float(rust_results.scores[(0, 1)])
    bgr = model.segment(np.ascontiguousarray(sequence.frames[0][..., ::-1]), box=box, format="bgr")
    assert np.array_equal(bgr.mask, seg.mask) and bgr.score == seg.score
