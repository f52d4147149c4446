"""Bad inputs raise the right exception (an edgetam.Error that is also a ValueError or an
OSError, with the Rust message) and the tracker keeps working afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple, Type

import numpy as np
import numpy.typing as npt
import pytest

import edgetam

from conftest import FIXTURES, Sequence


def test_exception_classes() -> None:
    assert issubclass(edgetam.InvalidFrameError, edgetam.InvalidInputError)
    assert issubclass(edgetam.InvalidPromptError, edgetam.InvalidInputError)
    assert issubclass(edgetam.InvalidInputError, ValueError)
    assert issubclass(edgetam.InvalidInputError, edgetam.Error)
    assert issubclass(edgetam.ModelFileError, OSError)
    assert issubclass(edgetam.ModelFileError, edgetam.Error)
    assert issubclass(edgetam.PipelineError, RuntimeError)
    assert edgetam.Error.__module__ == "edgetam"


@pytest.fixture
def tracker(model: edgetam.Model, sequence: Sequence) -> edgetam.Tracker:
    """A tracker with object 1 tracked on two frames."""
    t = model.tracker()
    t.add_box(1, 0, (35, 57, 93, 108))
    t.track(sequence.frames[0])
    t.track(sequence.frames[1])
    return t


def still_works(
    tracker: edgetam.Tracker, sequence: Sequence, reference: Optional[edgetam.FrameResult] = None
) -> edgetam.FrameResult:
    """Tracks the next frame; the object is still there (and matches `reference` if given)."""
    r = tracker.track(sequence.frames[2])
    assert [o.id for o in r.objects] == [1]
    if reference is not None:
        assert np.array_equal(r.objects[0].mask, reference.objects[0].mask)
        assert r.objects[0].score == reference.objects[0].score
    return r


@pytest.fixture
def reference(model: edgetam.Model, sequence: Sequence) -> edgetam.FrameResult:
    t = model.tracker()
    t.add_box(1, 0, (35, 57, 93, 108))
    for f in range(2):
        t.track(sequence.frames[f])
    return t.track(sequence.frames[2])


BAD_FRAMES: Dict[str, Tuple[Callable[[npt.NDArray[np.uint8]], Any], Type[Exception], str]] = {
    "float32": (lambda f: f.astype(np.float32), edgetam.InvalidFrameError, "uint8"),
    "int16": (lambda f: f.astype(np.int16), edgetam.InvalidFrameError, "uint8"),
    "2 channels": (lambda f: f[..., :2], edgetam.InvalidFrameError, "shape"),
    "4-D": (lambda f: f[None], edgetam.InvalidFrameError, "shape"),
    "1-D": (lambda f: f.reshape(-1), edgetam.InvalidFrameError, "shape"),
    "every other column": (lambda f: f[:, ::2], edgetam.InvalidFrameError, "contiguous"),
    "channels reversed view": (lambda f: f[..., ::-1], edgetam.InvalidFrameError, "contiguous"),
    "flipped rows": (lambda f: f[::-1], edgetam.InvalidFrameError, "contiguous"),
    "transposed": (lambda f: f.transpose(1, 0, 2), edgetam.InvalidFrameError, "contiguous"),
    "Fortran order": (lambda f: np.asfortranarray(f), edgetam.InvalidFrameError, "contiguous"),
    "empty": (lambda f: f[:0], edgetam.InvalidFrameError, "at least one pixel"),
    "list": (lambda f: f.tolist(), TypeError, "numpy.ndarray"),
    "bytes": (lambda f: f.tobytes(), TypeError, "numpy.ndarray"),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
def test_bad_frames(tracker: edgetam.Tracker, sequence: Sequence, reference: edgetam.FrameResult, case: str) -> None:
    make, exc, words = BAD_FRAMES[case]
    with pytest.raises(exc, match=words):
        tracker.track(make(sequence.frames[2]))
    if exc is edgetam.InvalidFrameError:
        with pytest.raises(ValueError):
            tracker.track(make(sequence.frames[2]))
    still_works(tracker, sequence, reference)


def test_bad_format(tracker: edgetam.Tracker, sequence: Sequence, reference: edgetam.FrameResult) -> None:
    with pytest.raises(edgetam.InvalidFrameError, match="unknown format"):
        tracker.track(sequence.frames[2], format="yuv")  # type: ignore[arg-type]  # deliberate
    with pytest.raises(edgetam.InvalidFrameError, match="does not fit"):
        tracker.track(sequence.frames[2], format="rgba")
    still_works(tracker, sequence, reference)


def test_box_outside_frame(tracker: edgetam.Tracker, sequence: Sequence, reference: edgetam.FrameResult) -> None:
    # The frame size is known: refused at once.
    with pytest.raises(edgetam.InvalidPromptError, match="object 2") as e:
        tracker.add_box(2, 2, (10, 10, 1000, 50))
    assert isinstance(e.value, ValueError) and isinstance(e.value, edgetam.Error)
    assert tracker.objects == [1]
    still_works(tracker, sequence, reference)


def test_box_outside_first_frame(model: edgetam.Model, sequence: Sequence) -> None:
    # Before the first frame the size is unknown: the frame that would apply it refuses it,
    # drops the prompt, and the next frame tracks normally.
    t = model.tracker()
    t.add_box(1, 0, (-50, 0, 10, 10))
    with pytest.raises(edgetam.InvalidPromptError, match="object 1"):
        t.track(sequence.frames[0])
    t.add_box(1, 0, (35, 57, 93, 108))
    assert [o.id for o in t.track(sequence.frames[0]).objects] == [1]


BAD_PROMPTS: Dict[str, Tuple[Callable[[edgetam.Tracker], None], str]] = {
    "unknown object": (lambda t: t.remove(7), "object 7 is not tracked"),
    "no points": (lambda t: t.add_points(2, 2, []), "at least one point"),
    "bad label": (lambda t: t.add_points(2, 2, [(5, 5, 3)]), "label"),
    "bad point": (lambda t: t.add_points(2, 2, [(5,)]), r"\(x, y\)"),  # type: ignore[list-item]
    "wrong frame": (lambda t: t.add_box(2, 9, (1, 1, 5, 5)), "frame 9"),
    "mask size": (lambda t: t.add_mask(2, 2, np.ones((10, 10), bool)), "outside|size|10x10"),
    "mask dtype": (lambda t: t.add_mask(2, 2, np.ones((160, 240), np.float32)), "bool or uint8"),  # type: ignore[arg-type]
    "mask 3-D": (lambda t: t.add_mask(2, 2, np.ones((160, 240, 1), bool)), "2-D"),
    "negative object": (lambda t: t.add_box(-1, 2, (1, 1, 5, 5)), "object id -1 is out of range"),
    "object id above u32": (lambda t: t.remove(2**32), "out of range"),
    "negative frame": (lambda t: t.add_points(2, -3, [(5, 5)]), "frame index -3 is negative"),
}


@pytest.mark.parametrize("case", list(BAD_PROMPTS))
def test_bad_prompts(tracker: edgetam.Tracker, sequence: Sequence, reference: edgetam.FrameResult, case: str) -> None:
    call, words = BAD_PROMPTS[case]
    with pytest.raises(edgetam.InvalidPromptError, match=words):
        call(tracker)
    still_works(tracker, sequence, reference)


def test_model_errors() -> None:
    with pytest.raises(edgetam.ModelFileError) as e:
        edgetam.Model.load(FIXTURES / "no-such-model")
    assert isinstance(e.value, OSError) and "no-such-model" in str(e.value)
    with pytest.raises(edgetam.InvalidInputError, match="multiple of 256|input size"):
        edgetam.Model.load(FIXTURES / "model", input_size=300)
    with pytest.raises(edgetam.InvalidInputError, match="f32 or bf16"):
        edgetam.Model.load(FIXTURES / "model", precision="f64")  # type: ignore[arg-type]  # deliberate
    with pytest.raises(edgetam.InvalidInputError, match="device"):
        edgetam.Model.load(FIXTURES / "model", device="tpu")


def test_pipeline_errors(model: edgetam.Model, sequence: Sequence) -> None:
    with pytest.raises(edgetam.InvalidInputError, match="drop"):
        model.pipeline(drop="sometimes")  # type: ignore[arg-type]  # deliberate
    with pytest.raises(edgetam.InvalidInputError, match="queue_capacity"):
        model.pipeline(queue=0)
    p = model.pipeline()
    with pytest.raises(edgetam.InvalidFrameError):
        p.push(sequence.frames[0].astype(np.float32))
    with pytest.raises(edgetam.InvalidPromptError):
        p.add_points(1, [])
    # A prompt outside the frame fails its frame (reported, not raised); the next one works.
    p.add_box(1, (0, 0, 999, 999))
    p.push(sequence.frames[0])
    p.add_box(1, (35, 57, 93, 108))
    p.push(sequence.frames[1])
    p.finish()
    first, second = p.recv(timeout=60), p.recv(timeout=60)
    assert first is not None and second is not None and second.result is not None
    assert first.outcome == "failed" or first.command_errors
    errors = ([first.error] if first.error else []) + first.command_errors
    assert all(isinstance(e, edgetam.InvalidPromptError) for e in errors) and errors
    assert second.outcome == "tracked" and [o.id for o in second.result.objects] == [1]
    assert p.recv(timeout=60) is None
    p.close()
    with pytest.raises(edgetam.PipelineError, match="closed"):
        p.push(sequence.frames[0])
    assert list(p) == []


def test_version_and_backend(model: edgetam.Model) -> None:
    assert edgetam.__version__.count(".") == 2
    assert edgetam.backend() in ("cpu avx512", "cpu avx2", "cpu neon", "cpu portable")
    assert model.backend == edgetam.backend()
    assert model.input_size == 256 and model.precision == "f32"


def test_panic_becomes_edgetam_error(tracker: edgetam.Tracker, sequence: Sequence, reference: edgetam.FrameResult) -> None:
    """A panic in Rust code run by a call is caught: edgetam.Error with its message, not pyo3's
    PanicException (a BaseException that `except Exception` misses); the module keeps working."""
    from edgetam._edgetam import _testing

    with pytest.raises(edgetam.Error, match="internal error \\(panic\\): deliberate panic"):
        _testing.panic_for_test()
    still_works(tracker, sequence, reference)


def test_bad_edgetam_isa() -> None:
    """EDGETAM_ISA naming a path this CPU cannot run: backend() and Model.load raise
    InvalidInputError with the Rust message (read once per process, hence a child process)."""
    code = "\n".join(
        [
            "import edgetam",
            "for call in (edgetam.backend, lambda: edgetam.Model.load(%r, input_size=256)):"
            % str(FIXTURES / "model"),
            "    try:",
            "        call()",
            "    except edgetam.InvalidInputError as e:",
            "        print('raised:', e)",
        ]
    )
    env = {**os.environ, "EDGETAM_ISA": "sse9"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out
    assert all(line.startswith("raised: EDGETAM_ISA=\"sse9\"") for line in lines), lines


def test_bf16_refused_where_it_cannot_run() -> None:
    """precision="bf16" under an EDGETAM_ISA cap below avx512 (the bf16 kernels' path): Model.load
    raises InvalidInputError saying why, never an f32 model in its place (the cap is read once
    per process, hence a child process); f32 still loads there."""
    cpuinfo = Path("/proc/cpuinfo")
    cap = "avx2" if cpuinfo.exists() and " avx2" in cpuinfo.read_text() else "portable"
    model = str(FIXTURES / "model")
    code = "\n".join(
        [
            "import edgetam",
            "try:",
            f"    m = edgetam.Model.load({model!r}, precision='bf16', input_size=256)",
            "    print('loaded:', m.precision)",
            "except edgetam.InvalidInputError as e:",
            "    print('raised:', e)",
            f"m = edgetam.Model.load({model!r}, input_size=256)",
            "print('f32:', m.precision, m.backend)",
        ]
    )
    env = {**os.environ, "EDGETAM_ISA": cap}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith("raised: precision bf16 is not available here: "), lines
    assert lines[1] == f"f32: f32 cpu {cap}", lines


def test_bf16_loads_as_bf16_or_is_refused() -> None:
    """In this process (no cap): bf16 is bf16 where the CPU runs it, else refused."""
    try:
        model = edgetam.Model.load(FIXTURES / "model", precision="bf16", input_size=256)
    except edgetam.InvalidInputError as e:
        assert "precision bf16 is not available here" in str(e)
    else:
        assert model.precision == "bf16"
