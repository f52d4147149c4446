"""EdgeTAM video object tracking: numpy frames in, masks out.

>>> import edgetam
>>> model = edgetam.Model.load("fixtures/model", input_size=256)
>>> tracker = model.tracker()
>>> tracker.add_box(1, 0, (35, 57, 93, 108))
>>> result = tracker.track(frame)          # uint8 (H, W, 3) RGB; format="bgr" for OpenCV
>>> obj = result.objects[0]
>>> obj.id, obj.score, obj.visible, obj.box, obj.mask.shape

The model runs with the GIL released: other Python threads (a capture loop, a UI) keep
running, and several trackers of one model can track at once from several threads.
"""

from ._edgetam import (
    Error,
    FrameResult,
    InvalidFrameError,
    InvalidInputError,
    InvalidPromptError,
    Model,
    ModelFileError,
    ObjectResult,
    Pipeline,
    PipelineError,
    PipelineOutput,
    Tracker,
    __version__,
    backend,
)

__all__ = [
    "Error",
    "FrameResult",
    "InvalidFrameError",
    "InvalidInputError",
    "InvalidPromptError",
    "Model",
    "ModelFileError",
    "ObjectResult",
    "Pipeline",
    "PipelineError",
    "PipelineOutput",
    "Tracker",
    "__version__",
    "backend",
]
