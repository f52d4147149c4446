//! What tracking returns per frame and object.

use candle_core::Tensor;

use crate::instrument::timings::StageTimes;
use crate::tracking::prompts::Mask;

/// One object's result on one frame.
#[derive(Debug, Clone)]
pub struct ObjectResult {
    /// The caller's object id.
    pub id: u32,
    /// The selected low-resolution mask logits `[1, 1, h, w]` (`h = image_size / 4`), as the
    /// reference returns them (`-1024` everywhere when the object is absent).
    pub low_res_logits: Tensor,
    /// Binary mask at the frame's resolution (`logits > 0` after one bilinear resize).
    pub mask: Mask,
    /// Tight box `[x0, y0, x1, y1]` of the mask (inclusive pixels), `None` when empty.
    pub bbox: Option<[usize; 4]>,
    /// Pixels in the mask.
    pub area: usize,
    /// Object-score logit; the object is visible when it is `> 0`.
    pub score: f32,
    /// `score > 0`.
    pub visible: bool,
    /// Predicted IoU of the chosen mask (1 for a mask prompt).
    pub iou: f32,
    /// Index of the chosen mask among the decoder's candidates (0 without multimask). For a mask
    /// prompt, the decoder token its object pointer came from (the output is the prompt itself).
    pub chosen_mask: usize,
    /// Whether the decoder proposed several masks (for a mask prompt: in the call that made the
    /// object pointer).
    pub multimask: bool,
    /// Whether this frame was a prompted (conditioning) frame for the object.
    pub prompted: bool,
}

/// All objects' results on one frame, in the order objects were first prompted.
#[derive(Debug, Clone)]
pub struct FrameResult {
    /// 0-based index of the frame in the stream (since the last [`crate::Tracker::reset`]).
    pub frame_index: u64,
    pub width: usize,
    pub height: usize,
    pub objects: Vec<ObjectResult>,
    /// Wall time of each model stage on this frame (all objects together).
    pub times: StageTimes,
}

impl ObjectResult {
    /// A result made from a given mask and its logits instead of by the decoder, for the tests
    /// and benchmarks of code that consumes results (id masks, drawing, messages, language
    /// bindings), so that each does not spell out the decoder's fields: one candidate mask
    /// (`chosen_mask` 0, no multimask), IoU 1, not a prompted frame, visible when `score > 0`.
    #[doc(hidden)]
    pub fn from_mask(
        id: u32,
        low_res_logits: Tensor,
        mask: Mask,
        bbox: Option<[usize; 4]>,
        area: usize,
        score: f32,
    ) -> Self {
        Self {
            id,
            low_res_logits,
            mask,
            bbox,
            area,
            score,
            visible: score > 0.0,
            iou: 1.0,
            chosen_mask: 0,
            multimask: false,
            prompted: false,
        }
    }
}

impl FrameResult {
    /// Frame 0 of a stream, `width` x `height`, with `objects` and no stage times: the frame
    /// result that goes with [`ObjectResult::from_mask`].
    #[doc(hidden)]
    pub fn from_objects(width: usize, height: usize, objects: Vec<ObjectResult>) -> Self {
        Self {
            frame_index: 0,
            width,
            height,
            objects,
            times: StageTimes::default(),
        }
    }
}
