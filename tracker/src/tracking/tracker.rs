//! Streaming tracking of several objects through a stream of frames: one [`Tracker`] per
//! stream, holding the model and every object's memory.
//!
//! Semantics are those of transformers' streaming session (`init_video_session` without a
//! video, `add_inputs_to_inference_session`, then `model(inference_session=..., frame=...)`):
//!
//! * A prompt for the **next** frame is queued; when that frame is tracked the object takes the
//!   prompted path (no memory read, "initial conditioning frame"), whether it is new or already
//!   tracked. Its output becomes a conditioning memory, read by every later frame.
//! * A prompt for the **current** (already tracked) frame takes effect with
//!   [`Tracker::refresh`] (transformers: `model(inference_session, frame_idx=current)`): an object
//!   that was tracked on it is re-decoded from its memory *with* the prompt and its memory of
//!   that frame replaced; an object first prompted there takes the prompted path. Unrefreshed
//!   current-frame prompts are applied before the next frame is tracked.
//! * Every other object with a memory is tracked: memory attention over its conditioning frames,
//!   its 6 most recent frames and up to 16 object pointers, then the decoder in multimask mode.
//!   Objects that read the same memory layout run as one batch.
//! * An object whose score logit is `<= 0` is absent: its logits are -1024, its pointer the
//!   learned no-object pointer, and it keeps being tracked.

use std::sync::Arc;
use std::time::Instant;

use candle_core::{DType, Tensor};
use edgetam_memory_bank::{BankLayout, FrameKind, ObjectMemory};

use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::instrument::timings::{timed, StageTimes};
use crate::model::edgetam::{mask_area_and_box_host, EdgeTam, ImageEmbedding, Segmentation};
use crate::tracking::object_step::{GatheredMemory, MemoryInput};
use crate::tracking::prompts::{Mask, ObjectPrompt};
use crate::tracking::results::{FrameResult, ObjectResult};

/// Options of a [`Tracker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackerOptions {
    /// Prompted frames remembered per object (the reference keeps all; beyond this the oldest is
    /// dropped, the only departure from it, and only for objects prompted that often).
    pub conditioning_capacity: usize,
}

impl Default for TrackerOptions {
    fn default() -> Self {
        Self {
            conditioning_capacity: BankLayout::DEFAULT_CONDITIONING_CAPACITY,
        }
    }
}

/// Replaces the memory-encoder input of a prompted (binarised) step: `(object id, frame index)`
/// -> a `[1, 1, S, S]` 0/1 mask. For parity tests, which feed the reference's own binarised
/// masks because float noise flips pixels whose logit is ~0.
#[doc(hidden)]
pub type MemoryMaskOverride = Box<dyn FnMut(u32, u64) -> Option<Tensor> + Send>;

struct PendingPrompt {
    frame: u64,
    prompt: ObjectPrompt,
}

struct TrackedObject {
    id: u32,
    memory: ObjectMemory,
    pending: Option<PendingPrompt>,
    /// Whether the current frame was a tracked (not initial-conditioning) frame for it.
    tracked_on_current: bool,
    /// The object's result on the current frame.
    last: Option<ObjectResult>,
}

struct CurrentFrame {
    index: u64,
    image: ImageEmbedding,
}

/// The model plus one stream's tracking state. Not shared between streams; build one per
/// camera (the model is shared through an [`Arc`]).
///
/// Threads: called from outside any rayon pool, the tracking calls run on a worker of rayon's
/// global pool (sized by `RAYON_NUM_THREADS`) while the caller waits; called inside a pool
/// (`ThreadPool::install`), on that pool.
pub struct Tracker {
    model: Arc<EdgeTam>,
    options: TrackerOptions,
    objects: Vec<TrackedObject>,
    next_frame: u64,
    current: Option<CurrentFrame>,
    override_mask: Option<MemoryMaskOverride>,
}

impl Tracker {
    /// A tracker with default options.
    pub fn new(model: Arc<EdgeTam>) -> Self {
        Self::with_options(model, TrackerOptions::default())
    }

    pub fn with_options(model: Arc<EdgeTam>, options: TrackerOptions) -> Self {
        Self {
            model,
            options,
            objects: Vec::new(),
            next_frame: 0,
            current: None,
            override_mask: None,
        }
    }

    pub fn model(&self) -> &Arc<EdgeTam> {
        &self.model
    }

    /// Index the next [`Self::track`] call will give its frame.
    pub fn next_frame_index(&self) -> u64 {
        self.next_frame
    }

    /// Index of the last tracked frame, if any.
    pub fn current_frame_index(&self) -> Option<u64> {
        self.current.as_ref().map(|c| c.index)
    }

    /// Memory slots held by all objects (constant per object however long the stream runs).
    pub fn memory_slots(&self) -> usize {
        self.objects.iter().map(|o| o.memory.slot_count()).sum()
    }

    /// Bytes of preallocated memory-bank tensors held by all objects.
    pub fn memory_bytes(&self) -> usize {
        self.objects
            .iter()
            .map(|o| o.memory.allocated_bytes())
            .sum()
    }

    /// Ids of the objects, in output order.
    pub fn object_ids(&self) -> Vec<u32> {
        self.objects.iter().map(|o| o.id).collect()
    }

    /// Adds a prompt for object `obj_id` (new or existing) on `frame`: the next frame (applied
    /// by [`Self::track`]) or the current one (applied by [`Self::refresh`]). A second prompt for
    /// the same object and frame replaces the first, as the reference's `clear_old_inputs`.
    pub fn add_prompt(
        &mut self,
        obj_id: u32,
        frame: u64,
        prompt: impl Into<ObjectPrompt>,
    ) -> Result<()> {
        let prompt = prompt.into();
        self.model.config().check_tracking()?;
        let current = self.current.as_ref().map(|c| c.index);
        if frame != self.next_frame && Some(frame) != current {
            let now = match current {
                Some(c) => format!(
                    "the current frame {c} or the next frame {}",
                    self.next_frame
                ),
                None => format!("the first frame {}", self.next_frame),
            };
            return Err(Error::InvalidPrompt(format!(
                "object {obj_id}: a prompt for frame {frame} cannot be applied; prompts go on {now}"
            )));
        }
        match &prompt {
            ObjectPrompt::Points(p) => {
                if p.bbox.is_none() && p.points.is_empty() {
                    return Err(Error::InvalidPrompt(format!(
                        "object {obj_id}: a prompt needs a box, points or a mask"
                    )));
                }
                crate::limits::check(
                    || {
                        format!(
                            "the number of prompt points of object {obj_id} (a box counts as two)"
                        )
                    },
                    p.num_points(),
                    crate::limits::MAX_PROMPT_POINTS,
                )?;
            }
            ObjectPrompt::Mask(m) => {
                Mask::new(m.width, m.height, m.data.clone())?;
            }
        }
        // Check coordinates against the frame size when it is known.
        if let Some(c) = &self.current {
            let (w, h) = c.image.original_size;
            prompt
                .validate(w, h)
                .map_err(|e| Error::InvalidPrompt(format!("object {obj_id}: {e}")))?;
        }
        let layout = self.layout();
        let idx = match self.objects.iter().position(|o| o.id == obj_id) {
            Some(i) => i,
            None => {
                crate::limits::check(
                    || format!("the number of tracked objects with object {obj_id}"),
                    self.objects.len() + 1,
                    crate::limits::MAX_OBJECTS,
                )?;
                let memory = ObjectMemory::new(layout, DType::F32, self.model.device())?;
                self.objects.push(TrackedObject {
                    id: obj_id,
                    memory,
                    pending: None,
                    tracked_on_current: false,
                    last: None,
                });
                self.objects.len() - 1
            }
        };
        self.objects[idx].pending = Some(PendingPrompt { frame, prompt });
        Ok(())
    }

    /// Removes an object and its memory. Returns whether it existed.
    pub fn remove_object(&mut self, obj_id: u32) -> bool {
        let before = self.objects.len();
        self.objects.retain(|o| o.id != obj_id);
        before != self.objects.len()
    }

    /// Forgets every object and restarts frame numbering at 0.
    pub fn reset(&mut self) {
        self.objects.clear();
        self.next_frame = 0;
        self.current = None;
    }

    /// Installs (or removes) a [`MemoryMaskOverride`].
    #[doc(hidden)]
    #[doc(hidden)]
    pub fn set_memory_mask_override(&mut self, f: Option<MemoryMaskOverride>) {
        self.override_mask = f;
    }

    /// The memory object `obj_id` would read on the next frame (for parity checks).
    #[doc(hidden)]
    #[cfg_attr(not(feature = "checks"), allow(dead_code))]
    pub(crate) fn gather_for_next_frame(&self, obj_id: u32) -> Result<GatheredMemory> {
        let o = self
            .objects
            .iter()
            .find(|o| o.id == obj_id)
            .ok_or_else(|| Error::InvalidPrompt(format!("no object {obj_id}")))?;
        self.model
            .gather_memory(&o.memory, &o.memory.select(self.next_frame))
    }

    /// Tracks every object on the next frame, an RGB8 image (`width * height * 3` bytes).
    pub fn track(&mut self, rgb: &[u8], width: usize, height: usize) -> Result<FrameResult> {
        if self.objects.is_empty() {
            // Nothing to track: skip the encoder, keep counting frames.
            crate::frame::preprocess::check_frame(rgb, width, height)?;
            return Ok(self.advance_empty(width, height));
        }
        // One entry into the compute pool for the whole frame (the calls below run in place).
        crate::kernels::threads::on_compute_pool(|| {
            let image = self.model.encode_image(rgb, width, height)?;
            self.track_embedding(image)
        })
    }

    /// As [`Self::track`] for a frame in any [`crate::PixelFormat`] (RGB/BGR with or without a
    /// fourth byte, gray, NV12, I420, any strides, planes in one buffer or apart). On CUDA only the frame's bytes are uploaded
    /// and converted there; results are identical to converting to RGB8 first.
    pub fn track_frame(&mut self, frame: &Frame) -> Result<FrameResult> {
        if self.objects.is_empty() {
            frame.validate()?;
            return Ok(self.advance_empty(frame.width(), frame.height()));
        }
        crate::kernels::threads::on_compute_pool(|| {
            let image = self.model.encode_frame(frame)?;
            self.track_embedding(image)
        })
    }

    /// As [`Self::track`] for a frame whose image encoder already ran (an encoder-ahead
    /// pipeline).
    pub fn track_embedding(&mut self, image: ImageEmbedding) -> Result<FrameResult> {
        crate::kernels::threads::on_compute_pool(|| self.track_embedding_on_pool(image))
    }

    /// [`Self::track_embedding`]'s work, on the compute pool.
    fn track_embedding_on_pool(&mut self, image: ImageEmbedding) -> Result<FrameResult> {
        let mut times = StageTimes {
            preprocess: image.preprocess_time,
            image_encoder: image.encoder_time,
            ..StageTimes::default()
        };
        if self.current.is_some() && self.has_prompts_for_current() {
            // Work done in this call: counted with this frame.
            times += self.refresh()?.times;
        }
        let t = self.next_frame;
        let (w, h) = image.original_size;
        // A bad queued prompt is dropped and reported; the stream stays usable.
        for o in &mut self.objects {
            if let Some(p) = &o.pending {
                if p.frame == t {
                    if let Err(e) = p.prompt.validate(w, h) {
                        o.pending = None;
                        return Err(Error::InvalidPrompt(format!("object {}: {e}", o.id)));
                    }
                }
            }
        }
        // Objects never prompted successfully have nothing to track from.
        self.objects.retain(|o| {
            o.memory.has_conditioning() || o.pending.as_ref().is_some_and(|p| p.frame == t)
        });
        let mut steps: Vec<Option<(Segmentation, MemoryInput, FrameKind)>> =
            (0..self.objects.len()).map(|_| None).collect();
        // Prompted objects, one by one (their prompts differ).
        for (i, o) in self.objects.iter_mut().enumerate() {
            if let Some(p) = o.pending.take_if(|p| p.frame == t) {
                let (seg, how) = timed(&mut times.mask_decoder, || {
                    prompted_step(&self.model, &image, &p.prompt)
                })?;
                steps[i] = Some((seg, how, FrameKind::Conditioning));
            }
        }
        // Tracked objects, batched by memory layout.
        let tracked: Vec<usize> = (0..self.objects.len())
            .filter(|&i| steps[i].is_none())
            .collect();
        let mut gathered: Vec<(usize, GatheredMemory)> = Vec::with_capacity(tracked.len());
        for &i in &tracked {
            let sel = self.objects[i].memory.select(t);
            let g = timed(&mut times.memory_attention, || {
                self.model.gather_memory(&self.objects[i].memory, &sel)
            })?;
            gathered.push((i, g));
        }
        while !gathered.is_empty() {
            let key = (
                gathered[0].1.num_spatial_memories,
                gathered[0].1.num_pointer_tokens,
            );
            let (group, rest): (Vec<_>, Vec<_>) = gathered
                .into_iter()
                .partition(|(_, g)| (g.num_spatial_memories, g.num_pointer_tokens) == key);
            gathered = rest;
            let (ids, mems): (Vec<usize>, Vec<GatheredMemory>) = group.into_iter().unzip();
            let pix = timed(&mut times.memory_attention, || {
                self.model.condition_on_memory(&image, &mems)
            })?;
            let segs = timed(&mut times.mask_decoder, || {
                self.model.decode_tracked(&image, &pix)
            })?;
            for (i, seg) in ids.into_iter().zip(segs) {
                steps[i] = Some((seg, MemoryInput::Sigmoid, FrameKind::Tracked));
            }
        }
        let steps: Vec<(Segmentation, MemoryInput, FrameKind)> = steps
            .into_iter()
            .map(|s| s.ok_or_else(|| Error::InvalidPrompt("object left without a step".into())))
            .collect::<Result<_>>()?;
        let indices: Vec<usize> = (0..steps.len()).collect();
        let start = Instant::now();
        self.remember(&image, t, &indices, &steps)?;
        times.memory_encoder += start.elapsed();
        let mut objects = Vec::with_capacity(steps.len());
        for (o, (seg, _, kind)) in self.objects.iter_mut().zip(&steps) {
            let r = timed(&mut times.postprocess, || {
                object_result(
                    &self.model,
                    &image,
                    o.id,
                    seg,
                    *kind == FrameKind::Conditioning,
                )
            })?;
            o.tracked_on_current = *kind == FrameKind::Tracked;
            o.last = Some(r.clone());
            objects.push(r);
        }
        self.next_frame = t + 1;
        self.current = Some(CurrentFrame { index: t, image });
        Ok(FrameResult {
            frame_index: t,
            width: w,
            height: h,
            objects,
            times,
        })
    }

    /// Re-runs the current frame for objects prompted on it since it was tracked, and returns
    /// the frame's results (other objects' results are reused).
    pub fn refresh(&mut self) -> Result<FrameResult> {
        let current = self.current.take().ok_or_else(|| {
            Error::InvalidPrompt("no frame has been tracked yet: nothing to refresh".into())
        })?;
        let result = crate::kernels::threads::on_compute_pool(|| self.refresh_on(&current));
        self.current = Some(current);
        result
    }

    fn refresh_on(&mut self, current: &CurrentFrame) -> Result<FrameResult> {
        let t = current.index;
        let image = &current.image;
        let (w, h) = image.original_size;
        let mut times = StageTimes::default();
        let mut idx = Vec::new();
        let mut steps = Vec::new();
        for i in 0..self.objects.len() {
            let Some(p) = self.objects[i].pending.take_if(|p| p.frame == t) else {
                continue;
            };
            if let Err(e) = p.prompt.validate(w, h) {
                return Err(Error::InvalidPrompt(format!(
                    "object {}: {e}",
                    self.objects[i].id
                )));
            }
            let o = &self.objects[i];
            let step = if o.tracked_on_current && o.memory.has_conditioning() {
                // Tracked here already: decode from memory with the prompt; stays a tracked frame.
                let (seg, how) = self.prompted_on_memory(image, i, t, &p.prompt, &mut times)?;
                (seg, how, FrameKind::Tracked)
            } else {
                let (seg, how) = timed(&mut times.mask_decoder, || {
                    prompted_step(&self.model, image, &p.prompt)
                })?;
                (seg, how, FrameKind::Conditioning)
            };
            idx.push(i);
            steps.push(step);
        }
        let start = Instant::now();
        self.remember(image, t, &idx, &steps)?;
        times.memory_encoder += start.elapsed();
        for (&i, (seg, _, kind)) in idx.iter().zip(&steps) {
            let o = &mut self.objects[i];
            let r = timed(&mut times.postprocess, || {
                object_result(
                    &self.model,
                    image,
                    o.id,
                    seg,
                    *kind == FrameKind::Conditioning,
                )
            })?;
            o.last = Some(r);
        }
        Ok(FrameResult {
            frame_index: t,
            width: w,
            height: h,
            objects: self.objects.iter().filter_map(|o| o.last.clone()).collect(),
            times,
        })
    }

    /// A prompt on a frame the object was tracked on: memory-conditioned features, then the
    /// decoder with the prompt (the reference's non-initial conditioning path).
    fn prompted_on_memory(
        &self,
        image: &ImageEmbedding,
        i: usize,
        t: u64,
        prompt: &ObjectPrompt,
        times: &mut StageTimes,
    ) -> Result<(Segmentation, MemoryInput)> {
        let ObjectPrompt::Points(prompt) = prompt else {
            // A mask is taken as the output whatever the memory says.
            return timed(&mut times.mask_decoder, || {
                prompted_step(&self.model, image, prompt)
            });
        };
        let m = &self.model;
        let bank = &self.objects[i].memory;
        let start = Instant::now();
        let g = m.gather_memory(bank, &bank.select(t))?;
        let pix = m.condition_on_memory(image, &[g])?;
        times.memory_attention += start.elapsed();
        let start = Instant::now();
        let (w, h) = image.original_size;
        let (coords, labels) = prompt.to_model_inputs(w, h, m.config().image_size, m.device())?;
        let (sparse, dense) = m.prompt_encoder().embed(Some((&coords, &labels)), None)?;
        let multimask = m.use_multimask_for(false, prompt.num_points());
        let seg = m
            .decode_rows(image, &pix, &sparse, &dense, multimask)?
            .pop()
            .ok_or_else(|| Error::InvalidPrompt("decoder returned no mask".into()))?;
        times.mask_decoder += start.elapsed();
        Ok((seg, MemoryInput::Binarized))
    }

    /// Encodes the steps' memories (one batch) and stores them in the objects' banks.
    fn remember(
        &mut self,
        image: &ImageEmbedding,
        t: u64,
        indices: &[usize],
        steps: &[(Segmentation, MemoryInput, FrameKind)],
    ) -> Result<()> {
        if steps.is_empty() {
            return Ok(());
        }
        let mut forced: Vec<MemoryInput> = Vec::with_capacity(steps.len());
        for (&i, (_, how, _)) in indices.iter().zip(steps) {
            let id = self.objects[i].id;
            let replaced = match (how, self.override_mask.as_mut()) {
                (MemoryInput::Binarized, Some(f)) => f(id, t).map(MemoryInput::Mask),
                _ => None,
            };
            forced.push(replaced.unwrap_or_else(|| how.clone()));
        }
        let batch: Vec<(&Segmentation, &MemoryInput)> =
            steps.iter().map(|(s, _, _)| s).zip(&forced).collect();
        let (memory, pos) = self.model.encode_memories(image, &batch)?;
        for (b, (&i, (seg, _, kind))) in indices.iter().zip(steps).enumerate() {
            self.objects[i].memory.store(
                t,
                *kind,
                &memory.narrow(0, b, 1)?,
                &pos.narrow(0, b, 1)?,
                &seg.object_pointer,
            )?;
        }
        Ok(())
    }

    fn has_prompts_for_current(&self) -> bool {
        let Some(c) = &self.current else {
            return false;
        };
        self.objects
            .iter()
            .any(|o| o.pending.as_ref().is_some_and(|p| p.frame == c.index))
    }

    fn advance_empty(&mut self, width: usize, height: usize) -> FrameResult {
        let t = self.next_frame;
        self.next_frame += 1;
        self.current = None;
        FrameResult {
            frame_index: t,
            width,
            height,
            objects: Vec::new(),
            times: StageTimes::default(),
        }
    }

    fn layout(&self) -> BankLayout {
        let c = self.model.config();
        BankLayout {
            num_maskmem: c.num_maskmem,
            max_object_pointers: c.max_object_pointers_in_encoder,
            max_cond_frame_num: usize::try_from(c.max_cond_frame_num).ok(),
            conditioning_capacity: self.options.conditioning_capacity,
            memory_tokens: c.perceiver_resampler_num_latents + c.perceiver_resampler_num_latents_2d,
            memory_dim: c.memory_encoder_output_channels,
            pointer_dim: c.vision_config.fpn_hidden_size,
        }
    }
}

/// The prompted path of a frame: points/box through the decoder on `level2 +
/// no_memory_embedding`, or a mask taken as the output.
fn prompted_step(
    model: &EdgeTam,
    image: &ImageEmbedding,
    prompt: &ObjectPrompt,
) -> Result<(Segmentation, MemoryInput)> {
    match prompt {
        ObjectPrompt::Points(p) => {
            let (w, h) = image.original_size;
            let (coords, labels) =
                p.to_model_inputs(w, h, model.config().image_size, model.device())?;
            let multimask = model.use_multimask_for(true, p.num_points());
            let seg = model.segment_model_inputs(image, &coords, &labels, multimask)?;
            Ok((seg, MemoryInput::Binarized))
        }
        ObjectPrompt::Mask(m) => {
            let s = model.config().image_size;
            let plane: Vec<f32> = m.data.iter().map(|&v| f32::from(v)).collect();
            let resized = if m.width == s && m.height == s {
                plane
            } else {
                crate::kernels::resize::resize_antialiased(&plane, m.height, m.width, s, s)?
                    .into_iter()
                    .map(|v| if v >= 0.5 { 1.0 } else { 0.0 })
                    .collect()
            };
            let mask = Tensor::from_vec(resized, (1, 1, s, s), model.device())?;
            let seg = model.segment_mask(image, &mask)?;
            Ok((seg, MemoryInput::Mask(mask)))
        }
    }
}

fn object_result(
    model: &EdgeTam,
    image: &ImageEmbedding,
    id: u32,
    seg: &Segmentation,
    prompted: bool,
) -> Result<ObjectResult> {
    let (w, h) = image.original_size;
    // The frame's one download of the mask (area and box from the host copy).
    let data = model.mask_bytes_at_original(image, seg)?;
    let (area, bbox) = mask_area_and_box_host(&data, w, h);
    Ok(ObjectResult {
        id,
        low_res_logits: seg.low_res_logits.clone(),
        mask: Mask {
            width: w,
            height: h,
            data,
        },
        bbox,
        area,
        score: seg.object_score,
        visible: seg.object_score > 0.0,
        iou: seg.iou(),
        chosen_mask: seg.chosen,
        multimask: seg.multimask,
        prompted,
    })
}
