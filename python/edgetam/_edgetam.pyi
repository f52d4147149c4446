"""Type stubs of the compiled module `edgetam._edgetam` (re-exported by `edgetam`)."""

from os import PathLike
from types import ModuleType
from typing import Any, Iterator, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

Box = Tuple[float, float, float, float]
"""(x0, y0, x1, y1) in frame pixels."""

PointArg = Union[Tuple[float, float], Tuple[float, float, int]]
"""(x, y) or (x, y, label): label 1 (default) on the object, 0 on the background."""

FrameFormat = Literal["rgb", "bgr", "rgba", "rgbx", "bgra", "bgrx", "gray", "grey"]
Frame = npt.NDArray[Any]
"""uint8 (H, W, 3) RGB/BGR, (H, W, 4) RGBA/BGRA or (H, W) gray; pixels contiguous within a row.
Typed as any ndarray (what OpenCV's stubs return): the dtype is checked when called
(InvalidFrameError)."""

MaskArg = Union[npt.NDArray[np.bool_], npt.NDArray[np.uint8]]

Numbers = Union[Sequence[float], npt.NDArray[np.floating], npt.NDArray[np.integer]]
"""Numbers as SAM 2 takes them: a list, a tuple or a numpy array."""

PointsArg = Union[Sequence[Sequence[float]], npt.NDArray[np.floating], npt.NDArray[np.integer]]
"""SAM 2's `points=`: (N, 2) pixels, one (x, y) per point."""

LabelsArg = Union[Sequence[int], npt.NDArray[np.integer]]
"""SAM 2's `labels=`: N ints, 1 on the object, 0 on the background."""

def backend() -> str:
    """The CPU kernels' instruction-set path: "cpu avx512", "cpu avx2", "cpu neon" or
    "cpu portable" (the widest this CPU runs, or the one EDGETAM_ISA names; InvalidInputError
    when EDGETAM_ISA names one that is unknown or beyond this CPU)."""

class Error(Exception):
    """Base class of every error edgetam raises."""

class InvalidInputError(Error, ValueError):
    """An argument edgetam cannot use (also a ValueError)."""

class InvalidFrameError(InvalidInputError):
    """A frame with the wrong dtype, shape, layout or size."""

class InvalidPromptError(InvalidInputError):
    """A prompt outside the frame, empty or malformed, or an unknown object."""

class ModelFileError(Error, OSError):
    """A model file missing, unreadable or malformed, or a failed hub download."""

class PipelineError(Error, RuntimeError):
    """A pipeline that is closed or whose worker failed."""

class ObjectResult:
    """One object on one frame (what Model.segment returns, with id 0)."""

    @property
    def id(self) -> int: ...
    @property
    def score(self) -> float:
        """Object-score logit: present when > 0."""
    @property
    def visible(self) -> bool: ...
    @property
    def box(self) -> Optional[Tuple[int, int, int, int]]:
        """The mask's tight box (x0, y0, x1, y1), inclusive pixels; None when empty."""
    @property
    def area(self) -> int: ...
    @property
    def iou(self) -> float:
        """The decoder's predicted IoU of the chosen mask."""
    @property
    def mask(self) -> npt.NDArray[np.bool_]:
        """(H, W) bool, the frame's size."""

class FrameResult:
    """Every object's result on one frame, in the tracker's object order."""

    @property
    def frame_index(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def objects(self) -> list[ObjectResult]: ...
    def get(self, id: int) -> Optional[ObjectResult]:
        """The result of object `id`, or None if it is not tracked."""
    def __len__(self) -> int: ...

class Tracker:
    """One video stream's objects, prompts and memories (Model.tracker()).

    Prompts go on the next frame (`next_frame`) or the current one. Calls on one tracker from
    several threads take turns; trackers of one model run in parallel.
    """

    def add_box(self, obj: int, frame: int, box: Box) -> None: ...
    def add_points(
        self, obj: int, frame: int, points: Sequence[PointArg], box: Optional[Box] = None
    ) -> None: ...
    def add_mask(self, obj: int, frame: int, mask: MaskArg) -> None: ...
    def add_prompt(
        self,
        *,
        obj_id: int,
        frame_idx: Optional[int] = None,
        points: Optional[PointsArg] = None,
        labels: Optional[LabelsArg] = None,
        box: Optional[Numbers] = None,
        mask: Optional[MaskArg] = None,
    ) -> None:
        """SAM 2's keyword prompt (add_new_points_or_box / add_new_mask) on frame `frame_idx`
        (default: the next frame): points + labels (labels default to 1), a box, both
        together, or a mask alone."""
    def remove(self, obj: int) -> None:
        """Stops tracking `obj`; InvalidPromptError if it is not tracked."""
    def reset(self) -> None:
        """Forgets every object and restarts frame numbering at 0."""
    def track(self, frame: Frame, format: Optional[FrameFormat] = None) -> FrameResult:
        """Tracks every object on the next frame (borrowed, not copied; the GIL released)."""
    @property
    def objects(self) -> list[int]: ...
    @property
    def next_frame(self) -> int: ...
    @property
    def model(self) -> Model: ...

class PipelineOutput:
    """What became of one pushed frame."""

    @property
    def id(self) -> int: ...
    @property
    def timestamp(self) -> Optional[float]: ...
    @property
    def outcome(self) -> Literal["tracked", "dropped", "failed"]: ...
    @property
    def dropped(self) -> bool: ...
    @property
    def result(self) -> Optional[FrameResult]: ...
    @property
    def error(self) -> Optional[Error]: ...
    @property
    def command_errors(self) -> list[Error]: ...
    @property
    def resolution_changed(self) -> bool: ...

class Pipeline:
    """Frame queue with drop policies and encoder-ahead; results in push order."""

    def push(
        self, frame: Frame, format: Optional[FrameFormat] = None, timestamp: Optional[float] = None
    ) -> int: ...
    def add_box(self, obj: int, box: Box) -> None: ...
    def add_points(
        self, obj: int, points: Sequence[PointArg], box: Optional[Box] = None
    ) -> None: ...
    def add_mask(self, obj: int, mask: MaskArg) -> None: ...
    def add_prompt(
        self,
        *,
        obj_id: int,
        points: Optional[PointsArg] = None,
        labels: Optional[LabelsArg] = None,
        box: Optional[Numbers] = None,
        mask: Optional[MaskArg] = None,
    ) -> None:
        """SAM 2's keyword prompt from the next pushed frame on (as Tracker.add_prompt)."""
    def remove(self, obj: int) -> None: ...
    def reset(self) -> None: ...
    def finish(self) -> None:
        """Ends the input: queued frames are still tracked, then iteration stops."""
    def recv(self, timeout: Optional[float] = None) -> Optional[PipelineOutput]:
        """The next result (TimeoutError after `timeout` s); None once finished and drained."""
    def try_recv(self) -> Optional[PipelineOutput]: ...
    def __iter__(self) -> Iterator[PipelineOutput]: ...
    def __next__(self) -> PipelineOutput: ...
    def close(self) -> None: ...
    def __enter__(self) -> Pipeline: ...
    def __exit__(self, *args: object) -> bool: ...
    @property
    def model(self) -> Model: ...

class Model:
    """A loaded EdgeTAM model, shared by its trackers and pipelines."""

    @staticmethod
    def load(
        path_or_hub_id: Union[str, PathLike[str]],
        device: str = "cpu",
        precision: Literal["f32", "bf16"] = "f32",
        input_size: Optional[int] = None,
    ) -> Model:
        """Loads a folder, an edgetam.pt or a hub repository id. precision="bf16" needs a CPU
        with AVX512-BF16 and the avx512 kernels: elsewhere InvalidInputError says why (never
        f32 in its place). ModelFileError for a missing or unreadable model."""
    @property
    def backend(self) -> str:
        """Where the model runs: "cpu avx512" (etc., as backend()) or "cuda:N"."""
    @property
    def input_size(self) -> int: ...
    @property
    def precision(self) -> Literal["f32", "bf16"]:
        """The precision the model runs: what load asked for (it never falls back)."""
    def tracker(self) -> Tracker: ...
    def pipeline(
        self,
        queue: int = 4,
        drop: Literal["block", "oldest", "newest"] = "block",
        encoder_ahead: bool = False,
        threads: Optional[int] = None,
    ) -> Pipeline: ...
    def segment(
        self,
        image: Frame,
        *,
        box: Optional[Box] = None,
        points: Optional[Sequence[PointArg]] = None,
        format: Optional[FrameFormat] = None,
    ) -> ObjectResult: ...

class _TestingModule(ModuleType):
    """`edgetam._edgetam._testing`: hooks for the test suite and examples/overhead.py; not API."""

    def rust_track_times(
        self, model: Model, frames: npt.NDArray[np.uint8], box: Optional[Box] = None
    ) -> list[float]: ...
    def result_conversion_times(
        self, width: int, height: int, objects: int, calls: int
    ) -> list[float]: ...
    def panic_for_test(self) -> None: ...

_testing: _TestingModule
