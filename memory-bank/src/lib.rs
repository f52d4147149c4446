//! Per-object memory of an EdgeTAM stream: a fixed set of preallocated slots that are recycled,
//! never grown, however long the stream runs.
//!
//! EdgeTAM conditions each tracked frame on a few past frames of the same object. What it reads
//! (transformers' `EdgeTamVideoModel._gather_memory_frame_outputs` and `_get_object_pointers`,
//! streaming mode, forward in time):
//!
//! * **spatial memories** (the perceiver's compressed tokens and their position encodings):
//!   every *conditioning* frame (a frame where the object got a prompt; at most
//!   `max_cond_frame_num` of them, the temporally closest, when that is not -1) with temporal
//!   offset 0, then the tracked frames `t-(num_maskmem-1) ..= t-1`, oldest first, with offset
//!   `t - frame`. A conditioning frame left out by `max_cond_frame_num` may stand in for a missing
//!   tracked frame at its offset.
//! * **object pointers**: the pointer of every conditioning frame `<= t` (offset `t - frame`),
//!   then those of tracked frames `t-1 ..= t-(max_object_pointers-1)`, newest first.
//!
//! A tracked frame `f` is read only while `t - f < num_maskmem` (memories) or
//! `t - f < max_object_pointers` (pointers), where `t` is the frame being tracked or the current
//! frame being re-run, so tracked frames live in two rings of those lengths indexed by
//! `frame % ring_len`: a slot is overwritten exactly when its old frame can no longer be read. Conditioning frames come from user prompts and are
//! kept, up to a fixed capacity; when it is full the oldest one is recycled.
//!
//! The bank only stores and selects: the temporal encodings themselves are model weights and are
//! applied by the tracker from the offsets in a [`Selection`]. The `ringbuf` crate does not fit
//! here: slots are addressed by frame number (a re-run of the current frame overwrites its own
//! slot), not pushed and popped in order.

use candle_core::{DType, Device, Tensor};

/// Errors of the memory bank.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor handed to [`ObjectMemory::store`] has the wrong shape.
    #[error("memory bank: {what} must be {expected:?}, got {got:?}")]
    Shape {
        what: &'static str,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// The layout cannot hold what EdgeTAM needs.
    #[error("memory bank: invalid layout: {0}")]
    Layout(String),
    #[error(transparent)]
    Tensor(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Sizes of one object's memory, from the model config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BankLayout {
    /// `num_maskmem`: conditioning frames + this many minus one most recent tracked frames (7).
    pub num_maskmem: usize,
    /// `max_object_pointers_in_encoder` (16).
    pub max_object_pointers: usize,
    /// `max_cond_frame_num`: how many conditioning frames are read as spatial memories (`None`:
    /// all, transformers' -1).
    pub max_cond_frame_num: Option<usize>,
    /// Conditioning frames kept per object. The reference keeps all of them; a bounded stream
    /// needs a bound. Beyond it the oldest is recycled.
    pub conditioning_capacity: usize,
    /// Tokens per spatial memory (perceiver latents, 512).
    pub memory_tokens: usize,
    /// Channels per memory token (`memory_encoder_output_channels`, 64).
    pub memory_dim: usize,
    /// Object pointer width (hidden size, 256).
    pub pointer_dim: usize,
}

impl BankLayout {
    /// Default number of conditioning frames kept per object.
    pub const DEFAULT_CONDITIONING_CAPACITY: usize = 16;

    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::Layout(m.to_string()));
        if self.num_maskmem < 1 {
            return bad("num_maskmem must be at least 1");
        }
        if self.max_object_pointers < 1 {
            return bad("max_object_pointers must be at least 1");
        }
        if self.conditioning_capacity < 1 {
            return bad("conditioning_capacity must be at least 1");
        }
        if self.memory_tokens == 0 || self.memory_dim == 0 || self.pointer_dim == 0 {
            return bad("memory_tokens, memory_dim and pointer_dim must be positive");
        }
        Ok(())
    }

    /// Tracked-frame spatial memory slots: the `num_maskmem - 1` frames a new frame reads,
    /// plus the current frame's own, so that re-running the current frame (a prompt on it) still
    /// finds the oldest of them.
    pub fn tracked_memory_slots(&self) -> usize {
        self.num_maskmem
    }

    /// Tracked-frame pointer slots: `max_object_pointers - 1` read, plus the current frame's.
    pub fn tracked_pointer_slots(&self) -> usize {
        self.max_object_pointers
    }
}

/// Whether a frame's output came from a prompt (conditioning) or from tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// The object was prompted on this frame (transformers' `cond_frame_outputs`).
    Conditioning,
    /// The object was tracked from memory (transformers' `non_cond_frame_outputs`).
    Tracked,
}

/// What to read for one tracked frame: slots in reading order with their temporal offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// `(memory slot, offset)`; offset 0 marks a conditioning frame, `k >= 1` the frame `t-k`.
    pub memories: Vec<(usize, usize)>,
    /// `(pointer slot, offset)`: frame distance `t - frame` (0 for a prompt on `t` itself).
    pub pointers: Vec<(usize, u64)>,
}

impl Selection {
    /// Whether nothing can be read (no conditioning frame yet).
    pub fn is_empty(&self) -> bool {
        self.memories.is_empty() && self.pointers.is_empty()
    }
}

#[derive(Debug, Clone, Copy)]
struct CondEntry {
    frame: u64,
    /// Insertion order: the reference iterates its dict of conditioning frames in this order.
    order: u64,
}

/// One object's memory: preallocated device tensors and the frame tag of every slot.
///
/// Memory slots `0..C` hold conditioning frames, `C..C+num_maskmem-1` tracked frames; pointer
/// slots `0..C` conditioning frames, `C..C+max_object_pointers-1` tracked frames
/// (`C = conditioning_capacity`).
#[derive(Debug)]
pub struct ObjectMemory {
    layout: BankLayout,
    /// `[slots, memory_tokens, memory_dim]`.
    memory: Tensor,
    /// `[slots, memory_tokens, memory_dim]`.
    memory_pos: Tensor,
    /// `[pointer slots, pointer_dim]`.
    pointers: Tensor,
    conditioning: Vec<Option<CondEntry>>,
    tracked_memory: Vec<Option<u64>>,
    tracked_pointer: Vec<Option<u64>>,
    next_order: u64,
}

impl ObjectMemory {
    /// Allocates every slot up front (zeros) on `device`.
    pub fn new(layout: BankLayout, dtype: DType, device: &Device) -> Result<Self> {
        layout.validate()?;
        let c = layout.conditioning_capacity;
        let mem_slots = c + layout.tracked_memory_slots();
        let ptr_slots = c + layout.tracked_pointer_slots();
        let shape = (mem_slots, layout.memory_tokens, layout.memory_dim);
        Ok(Self {
            layout,
            memory: Tensor::zeros(shape, dtype, device)?,
            memory_pos: Tensor::zeros(shape, dtype, device)?,
            pointers: Tensor::zeros((ptr_slots, layout.pointer_dim), dtype, device)?,
            conditioning: vec![None; c],
            tracked_memory: vec![None; layout.tracked_memory_slots()],
            tracked_pointer: vec![None; layout.tracked_pointer_slots()],
            next_order: 0,
        })
    }

    pub fn layout(&self) -> &BankLayout {
        &self.layout
    }

    /// Total slots (spatial memory + pointer); constant for the life of the bank.
    pub fn slot_count(&self) -> usize {
        self.memory.dim(0).unwrap_or(0) + self.pointers.dim(0).unwrap_or(0)
    }

    /// Bytes held by the slot tensors; constant for the life of the bank.
    pub fn allocated_bytes(&self) -> usize {
        [&self.memory, &self.memory_pos, &self.pointers]
            .iter()
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum()
    }

    /// Frames currently held as conditioning frames, in the reference's reading order.
    pub fn conditioning_frames(&self) -> Vec<u64> {
        self.cond_in_order()
            .into_iter()
            .map(|(_, e)| e.frame)
            .collect()
    }

    /// Whether the object has been prompted at least once (anything to read).
    pub fn has_conditioning(&self) -> bool {
        self.conditioning.iter().any(Option::is_some)
    }

    /// Forgets everything (the tensors stay allocated).
    pub fn clear(&mut self) {
        self.conditioning.iter_mut().for_each(|s| *s = None);
        self.tracked_memory.iter_mut().for_each(|s| *s = None);
        self.tracked_pointer.iter_mut().for_each(|s| *s = None);
        self.next_order = 0;
    }

    /// Stores one frame's output: spatial memory `[memory_tokens, memory_dim]`, its position
    /// `[memory_tokens, memory_dim]` and the object pointer `[pointer_dim]` (leading 1-sized
    /// dims are accepted). Storing a frame again overwrites it (a re-run of the current frame).
    pub fn store(
        &mut self,
        frame: u64,
        kind: FrameKind,
        memory: &Tensor,
        memory_pos: &Tensor,
        pointer: &Tensor,
    ) -> Result<()> {
        let l = self.layout;
        let memory = self.expect(memory, "memory", &[l.memory_tokens, l.memory_dim])?;
        let memory_pos = self.expect(
            memory_pos,
            "memory position",
            &[l.memory_tokens, l.memory_dim],
        )?;
        let pointer = self.expect(pointer, "object pointer", &[l.pointer_dim])?;
        let (mem_slot, ptr_slot) = match kind {
            FrameKind::Conditioning => {
                // A frame is either conditioning or tracked for one object: drop a tracked copy.
                self.forget_tracked(frame);
                let slot = self.conditioning_slot_for(frame);
                let order = match self.conditioning[slot] {
                    Some(e) if e.frame == frame => e.order,
                    _ => {
                        self.next_order += 1;
                        self.next_order
                    }
                };
                self.conditioning[slot] = Some(CondEntry { frame, order });
                (slot, slot)
            }
            FrameKind::Tracked => {
                self.forget_conditioning(frame);
                let m = (frame % l.tracked_memory_slots().max(1) as u64) as usize;
                let p = (frame % l.tracked_pointer_slots().max(1) as u64) as usize;
                let c = l.conditioning_capacity;
                let mem_slot = if l.tracked_memory_slots() > 0 {
                    self.tracked_memory[m] = Some(frame);
                    Some(c + m)
                } else {
                    None
                };
                let ptr_slot = if l.tracked_pointer_slots() > 0 {
                    self.tracked_pointer[p] = Some(frame);
                    Some(c + p)
                } else {
                    None
                };
                if let Some(s) = mem_slot {
                    self.write_memory(s, &memory, &memory_pos)?;
                }
                if let Some(s) = ptr_slot {
                    self.pointers.slice_set(&pointer.unsqueeze(0)?, 0, s)?;
                }
                return Ok(());
            }
        };
        self.write_memory(mem_slot, &memory, &memory_pos)?;
        self.pointers
            .slice_set(&pointer.unsqueeze(0)?, 0, ptr_slot)?;
        Ok(())
    }

    /// Which slots tracking frame `t` reads, in the reference's order.
    pub fn select(&self, t: u64) -> Selection {
        let l = self.layout;
        let cond = self.cond_in_order();
        // `_select_closest_cond_frames`.
        let (selected, unselected): (Vec<_>, Vec<_>) = match l.max_cond_frame_num {
            Some(max) if cond.len() > max => {
                let mut chosen: Vec<u64> = Vec::new();
                if let Some(before) = cond.iter().map(|(_, e)| e.frame).filter(|&f| f < t).max() {
                    chosen.push(before);
                }
                if let Some(after) = cond.iter().map(|(_, e)| e.frame).filter(|&f| f >= t).min() {
                    chosen.push(after);
                }
                let mut rest: Vec<u64> = cond
                    .iter()
                    .map(|(_, e)| e.frame)
                    .filter(|f| !chosen.contains(f))
                    .collect();
                // Stable sort by distance, as Python's `sorted` over dict order.
                rest.sort_by_key(|&f| f.abs_diff(t));
                let remain = max.saturating_sub(chosen.len());
                chosen.extend(rest.into_iter().take(remain));
                // Selected entries keep dict order for the before/after picks (inserted first),
                // then the closest ones in distance order.
                let mut sel = Vec::new();
                for f in &chosen {
                    if let Some(&(slot, e)) = cond.iter().find(|(_, e)| e.frame == *f) {
                        sel.push((slot, e));
                    }
                }
                let unsel = cond
                    .iter()
                    .copied()
                    .filter(|(_, e)| !chosen.contains(&e.frame))
                    .collect();
                (sel, unsel)
            }
            _ => (cond.clone(), Vec::new()),
        };
        let mut memories: Vec<(usize, usize)> = selected.iter().map(|&(s, _)| (s, 0)).collect();
        for offset in (1..l.num_maskmem).rev() {
            let Some(frame) = t.checked_sub(offset as u64) else {
                continue;
            };
            if let Some(slot) = self.tracked_memory_slot(frame) {
                memories.push((slot, offset));
            } else if let Some(&(slot, _)) = unselected.iter().find(|(_, e)| e.frame == frame) {
                memories.push((slot, offset));
            }
        }
        let mut pointers: Vec<(usize, u64)> = cond
            .iter()
            .filter(|(_, e)| e.frame <= t)
            .map(|&(s, e)| (s, t - e.frame))
            .collect();
        for d in 1..l.max_object_pointers as u64 {
            let Some(frame) = t.checked_sub(d) else {
                break;
            };
            if let Some(slot) = self.tracked_pointer_slot(frame) {
                pointers.push((slot, d));
            }
        }
        Selection { memories, pointers }
    }

    /// The selected spatial memories `[n, memory_tokens, memory_dim]` and their stored
    /// positions (without temporal encoding), or `None` when nothing is selected.
    pub fn gather_memories(&self, sel: &Selection) -> Result<Option<(Tensor, Tensor)>> {
        if sel.memories.is_empty() {
            return Ok(None);
        }
        let ids = slot_ids(sel.memories.iter().map(|&(s, _)| s), self.memory.device())?;
        Ok(Some((
            self.memory.index_select(&ids, 0)?,
            self.memory_pos.index_select(&ids, 0)?,
        )))
    }

    /// The selected object pointers `[n, pointer_dim]`, or `None` when there are none.
    pub fn gather_pointers(&self, sel: &Selection) -> Result<Option<Tensor>> {
        if sel.pointers.is_empty() {
            return Ok(None);
        }
        let ids = slot_ids(sel.pointers.iter().map(|&(s, _)| s), self.pointers.device())?;
        Ok(Some(self.pointers.index_select(&ids, 0)?))
    }

    fn expect(&self, t: &Tensor, what: &'static str, dims: &[usize]) -> Result<Tensor> {
        let got = t.dims().to_vec();
        let n_lead = got.len().saturating_sub(dims.len());
        let ok = got.len() >= dims.len()
            && got[n_lead..] == *dims
            && got[..n_lead].iter().all(|&d| d == 1);
        if !ok {
            return Err(Error::Shape {
                what,
                expected: dims.to_vec(),
                got,
            });
        }
        Ok(t.reshape(dims)?
            .to_dtype(self.memory.dtype())?
            .to_device(self.memory.device())?
            .contiguous()?)
    }

    fn write_memory(&self, slot: usize, memory: &Tensor, pos: &Tensor) -> Result<()> {
        self.memory.slice_set(&memory.unsqueeze(0)?, 0, slot)?;
        self.memory_pos.slice_set(&pos.unsqueeze(0)?, 0, slot)?;
        Ok(())
    }

    fn cond_in_order(&self) -> Vec<(usize, CondEntry)> {
        let mut v: Vec<(usize, CondEntry)> = self
            .conditioning
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.map(|e| (i, e)))
            .collect();
        v.sort_by_key(|(_, e)| e.order);
        v
    }

    /// The slot for a conditioning frame: its own, a free one, or the oldest frame's.
    fn conditioning_slot_for(&self, frame: u64) -> usize {
        let slots = &self.conditioning;
        if let Some(i) = slots
            .iter()
            .position(|e| e.is_some_and(|e| e.frame == frame))
        {
            return i;
        }
        if let Some(i) = slots.iter().position(Option::is_none) {
            return i;
        }
        slots
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.map_or(0, |e| e.frame))
            .map_or(0, |(i, _)| i)
    }

    fn tracked_memory_slot(&self, frame: u64) -> Option<usize> {
        let n = self.tracked_memory.len();
        if n == 0 {
            return None;
        }
        let i = (frame % n as u64) as usize;
        (self.tracked_memory[i] == Some(frame)).then_some(self.layout.conditioning_capacity + i)
    }

    fn tracked_pointer_slot(&self, frame: u64) -> Option<usize> {
        let n = self.tracked_pointer.len();
        if n == 0 {
            return None;
        }
        let i = (frame % n as u64) as usize;
        (self.tracked_pointer[i] == Some(frame)).then_some(self.layout.conditioning_capacity + i)
    }

    fn forget_tracked(&mut self, frame: u64) {
        for s in self
            .tracked_memory
            .iter_mut()
            .chain(self.tracked_pointer.iter_mut())
        {
            if *s == Some(frame) {
                *s = None;
            }
        }
    }

    fn forget_conditioning(&mut self, frame: u64) {
        for s in self.conditioning.iter_mut() {
            if s.is_some_and(|e| e.frame == frame) {
                *s = None;
            }
        }
    }
}

fn slot_ids(slots: impl Iterator<Item = usize>, device: &Device) -> Result<Tensor> {
    let v: Vec<u32> = slots.map(|s| s as u32).collect();
    let n = v.len();
    Ok(Tensor::from_vec(v, n, device)?)
}
