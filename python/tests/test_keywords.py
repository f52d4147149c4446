"""SAM 2's keyword prompts (`add_prompt(obj_id=, frame_idx=, points=, labels=, box=, mask=)`)
on Tracker and Pipeline: the same results, bit for bit, as the positional calls they stand for;
the errors of malformed keywords; the test hooks kept out of the module's names; and import and
load leaving os.environ alone."""

from __future__ import annotations

import subprocess
import sys
from typing import Callable, List

import numpy as np
import numpy.typing as npt
import pytest

import edgetam

from conftest import FIXTURES, INPUT_SIZE

Prompter = Callable[[edgetam.Tracker], None]


def h_w(frames: npt.NDArray[np.uint8]) -> tuple[int, int]:
    return int(frames.shape[1]), int(frames.shape[2])


def track(model: edgetam.Model, frames: npt.NDArray[np.uint8], prompt: Prompter) -> List[edgetam.FrameResult]:
    """Three frames tracked after `prompt` on frame 0."""
    tracker = model.tracker()
    prompt(tracker)
    return [tracker.track(f) for f in frames[:3]]


def same(a: List[edgetam.FrameResult], b: List[edgetam.FrameResult]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert [o.id for o in ra.objects] == [o.id for o in rb.objects]
        for oa, ob in zip(ra.objects, rb.objects):
            assert np.float32(oa.score).tobytes() == np.float32(ob.score).tobytes()
            assert np.array_equal(oa.mask, ob.mask)


@pytest.fixture(scope="module")
def frames(sequence) -> npt.NDArray[np.uint8]:  # type: ignore[no-untyped-def]
    f: npt.NDArray[np.uint8] = sequence.frames
    return f


BOX = (35.0, 57.0, 93.0, 108.0)
POINTS = [(170.0, 50.0), (200.0, 120.0)]
LABELS = [1, 0]


def test_box_keyword_equals_add_box(model: edgetam.Model, frames: npt.NDArray[np.uint8]) -> None:
    positional = track(model, frames, lambda t: t.add_box(1, 0, BOX))
    keyword = track(model, frames, lambda t: t.add_prompt(obj_id=1, frame_idx=0, box=np.array(BOX)))
    default_frame = track(model, frames, lambda t: t.add_prompt(obj_id=1, box=list(BOX)))
    same(positional, keyword)
    same(positional, default_frame)
    assert any(o.area > 0 for r in positional for o in r.objects)


def test_points_and_labels_equal_add_points(model: edgetam.Model, frames: npt.NDArray[np.uint8]) -> None:
    with_labels = [(x, y, label) for (x, y), label in zip(POINTS, LABELS)]
    positional = track(model, frames, lambda t: t.add_points(2, 0, with_labels))
    keyword = track(
        model,
        frames,
        lambda t: t.add_prompt(
            obj_id=2, frame_idx=0, points=np.array(POINTS, dtype=np.float32), labels=np.array(LABELS, dtype=np.int32)
        ),
    )
    same(positional, keyword)
    # labels default to 1 (on the object)
    positives = track(model, frames, lambda t: t.add_points(2, 0, POINTS))
    same(positives, track(model, frames, lambda t: t.add_prompt(obj_id=2, points=POINTS)))


def test_points_and_box_together(model: edgetam.Model, frames: npt.NDArray[np.uint8]) -> None:
    """SAM 2 allows points and a box in one prompt; so does add_points(box=)."""
    positional = track(model, frames, lambda t: t.add_points(1, 0, [(60.0, 80.0, 1)], box=BOX))
    keyword = track(
        model, frames, lambda t: t.add_prompt(obj_id=1, frame_idx=0, points=[[60, 80]], labels=[1], box=BOX)
    )
    same(positional, keyword)
    # Not just the box: the point changes the result.
    box_only = track(model, frames, lambda t: t.add_box(1, 0, BOX))
    assert any(
        not np.array_equal(a.mask, b.mask) or a.score != b.score
        for ra, rb in zip(positional, box_only)
        for a, b in zip(ra.objects, rb.objects)
    )


def test_mask_keyword_equals_add_mask(model: edgetam.Model, frames: npt.NDArray[np.uint8]) -> None:
    h, w = h_w(frames)
    mask = np.zeros((h, w), dtype=bool)
    mask[40:100, 30:90] = True
    same(
        track(model, frames, lambda t: t.add_mask(3, 0, mask)),
        track(model, frames, lambda t: t.add_prompt(obj_id=3, frame_idx=0, mask=mask)),
    )


def test_pipeline_add_prompt(model: edgetam.Model, frames: npt.NDArray[np.uint8]) -> None:
    def run(prompt: Callable[[edgetam.Pipeline], None]) -> List[edgetam.FrameResult]:
        out = []
        with model.pipeline() as p:
            prompt(p)
            for f in frames[:3]:
                p.push(f)
            p.finish()
            for o in p:
                assert o.result is not None
                out.append(o.result)
        return out

    same(
        run(lambda p: p.add_points(1, [(60.0, 80.0, 1)], box=BOX)),
        run(lambda p: p.add_prompt(obj_id=1, points=np.array([[60.0, 80.0]]), labels=np.array([1]), box=BOX)),
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "needs points=, box= or mask="),
        ({"labels": [1]}, "labels= needs points="),
        ({"points": [[1, 2]], "labels": [1, 0]}, "1 point\\(s\\) but 2 label\\(s\\)"),
        ({"points": [[1, 2, 3]]}, "point 0 has 3 numbers"),
        ({"box": [1, 2, 3]}, "box must be 4 numbers"),
        ({"box": "abcd"}, "box must be a sequence of numbers"),
        ({"points": [[1, 2]], "labels": [2]}, "label must be 1 \\(object\\) or 0"),
        ({"points": [[1, 2]], "labels": [0.5]}, "labels must be integers"),
        ({"box": BOX, "mask": np.zeros((4, 4), dtype=bool)}, "mask= is a prompt of its own"),
        ({"box": BOX, "frame_idx": -1}, "frame index -1 is negative"),
    ],
)
def test_keyword_errors(model: edgetam.Model, kwargs: dict[str, object], message: str) -> None:
    tracker = model.tracker()
    with pytest.raises(edgetam.InvalidPromptError, match=message):
        tracker.add_prompt(obj_id=1, **kwargs)  # type: ignore[arg-type]
    assert tracker.objects == []


def test_keywords_only(model: edgetam.Model) -> None:
    """add_prompt takes keywords only (as SAM 2's calls are written)."""
    with pytest.raises(TypeError):
        model.tracker().add_prompt(1, 0, None, None, BOX)  # type: ignore[call-arg]


def test_test_hooks_are_not_module_names() -> None:
    """The test and benchmark hooks live in the private `_testing` submodule."""
    from edgetam import _edgetam
    from edgetam._edgetam import _testing

    names = [n for n in dir(_edgetam) if "test" in n or "times" in n]
    assert names == ["_testing"]
    assert callable(_testing.panic_for_test) and callable(_testing.rust_track_times)
    assert not any("test" in n for n in edgetam.__all__)


def test_import_and_load_leave_os_environ_alone() -> None:
    """Importing edgetam and loading a model set up the process (threads, malloc) through the C
    environment where unset, never through os.environ: a child process compares os.environ
    before and after."""
    code = "\n".join(
        [
            "import os",
            "before = dict(os.environ)",
            "import edgetam",
            "after_import = dict(os.environ)",
            f"edgetam.Model.load({str(FIXTURES / 'model')!r}, input_size={INPUT_SIZE})",
            "after_load = dict(os.environ)",
            "assert before == after_import, set(after_import.items()) ^ set(before.items())",
            "assert before == after_load, set(after_load.items()) ^ set(before.items())",
            "print('environ unchanged', len(before))",
        ]
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}  # neither RAYON_NUM_THREADS nor the rest set
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "environ unchanged" in out.stdout
