//! The tracking stage: commands applied in push order right before the next frame, resolution
//! changes, and the [`Tracker`] on each frame (with the producer's encoder output when it ran).

use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use edgetam_tracker::{Frame, FrameResult, ImageEmbedding, Tracker};

use crate::error::{Error, Result};
use crate::producer::{prepare, Prepared, Stage2};
use crate::queue::{dropped_output, Command, Item, Msg, Shared};
use crate::stats::StageTimings;
use crate::types::{FrameId, FrameOutput, Outcome, ResolutionChange};
use crate::workers::{install, StagePool, TrackHook};

/// The tracking stage: holds the tracker, applies commands, tracks frames.
pub(crate) struct TrackStage {
    tracker: Tracker,
    /// Commands received since the last frame; applied right before the next one.
    pending: Vec<Command>,
    last_size: Option<(usize, usize)>,
    on_resize: ResolutionChange,
    hook: Option<TrackHook>,
    pool: StagePool,
}

impl TrackStage {
    pub(crate) fn new(
        tracker: Tracker,
        on_resize: ResolutionChange,
        hook: Option<TrackHook>,
        pool: StagePool,
    ) -> Self {
        Self {
            tracker,
            pending: Vec::new(),
            last_size: None,
            on_resize,
            hook,
            pool,
        }
    }

    pub(crate) fn run_serial(mut self, shared: &Shared, out: &Sender<Msg>) {
        while let Some(item) = shared.pop() {
            let o = match item {
                Item::Command(c) => {
                    self.pending.push(c);
                    continue;
                }
                Item::Dropped { id, timestamp } => dropped_output(id, timestamp),
                Item::Frame { id, frame, pushed } => {
                    let on_device = !self.tracker.model().device().is_cpu();
                    self.process(prepare(id, frame, pushed, on_device))
                }
            };
            if !shared.emit(out, o) {
                break;
            }
        }
    }

    pub(crate) fn run_stage2(mut self, shared: &Shared, rx: Receiver<Stage2>, out: &Sender<Msg>) {
        for item in rx {
            if shared.is_cancelled() {
                break;
            }
            let o = match item {
                Stage2::Command(c) => {
                    self.pending.push(c);
                    continue;
                }
                Stage2::Dropped(id, ts) => dropped_output(id, ts),
                Stage2::Frame(p) => self.process(*p),
            };
            if !shared.emit(out, o) {
                break;
            }
        }
    }

    /// A command received since the last frame: applied right before the next one.
    pub(crate) fn queue_command(&mut self, c: Command) {
        self.pending.push(c);
    }

    /// One frame: the commands queued before it, a resolution change, the tracker.
    pub(crate) fn process(&mut self, p: Prepared) -> FrameOutput {
        if let Some(hook) = &self.hook {
            hook(p.id);
        }
        let mut timings = p.timings;
        let mut resolution_changed = false;
        let mut command_errors = Vec::new();
        let outcome = match p.image {
            // The frame never reached the tracker; queued commands wait for the next one.
            Err(e) => Outcome::Failed(e),
            Ok((pixels, w, h)) => {
                let resets = self.pending.iter().any(|c| matches!(c, Command::Reset));
                if !resets && self.last_size.is_some_and(|s| s != (w, h)) {
                    resolution_changed = true;
                    if self.on_resize == ResolutionChange::Reset {
                        let (pw, ph) = self.last_size.unwrap_or_default();
                        tracing::warn!(
                            frame = p.id,
                            "frame size changed from {pw}x{ph} to {w}x{h}: tracking reset"
                        );
                        self.tracker.reset();
                    }
                }
                for c in self.pending.drain(..) {
                    match c {
                        Command::AddPrompt(obj, prompt) => {
                            let frame = self.tracker.next_frame_index();
                            if let Err(e) = self.tracker.add_prompt(obj, frame, prompt) {
                                command_errors.push(Error::Tracker(e));
                            }
                        }
                        Command::Remove(obj) => {
                            self.tracker.remove_object(obj);
                        }
                        Command::Reset => self.tracker.reset(),
                    }
                }
                self.last_size = Some((w, h));
                match self.track(&pixels, p.embedding, &mut timings, p.id) {
                    Ok(r) => Outcome::Tracked(r),
                    Err(e) => Outcome::Failed(e),
                }
            }
        };
        timings.end_to_end = p.pushed.elapsed();
        FrameOutput {
            id: p.id,
            timestamp: p.timestamp,
            outcome,
            resolution_changed,
            command_errors,
            timings,
        }
    }

    /// Exactly [`Tracker::track`], with the encoder output taken from the producer when it ran.
    fn track(
        &mut self,
        frame: &Frame,
        embedding: Option<Result<ImageEmbedding>>,
        timings: &mut StageTimings,
        id: FrameId,
    ) -> Result<FrameResult> {
        let tracker = &mut self.tracker;
        if tracker.object_ids().is_empty() {
            let t = Instant::now();
            let r = tracker.track_frame(frame);
            timings.track = t.elapsed();
            return Ok(r?);
        }
        let image = match embedding {
            Some(e) => e?,
            None => {
                let t = Instant::now();
                let _span = tracing::info_span!("encode", frame = id).entered();
                let model = tracker.model().clone();
                let e = install(&self.pool.pool, || model.encode_frame(frame));
                timings.encode = t.elapsed();
                e?
            }
        };
        let t = Instant::now();
        let _span = tracing::info_span!("track", frame = id).entered();
        let pool = match tracker.object_ids().len() <= self.pool.max_objects {
            true => &self.pool.pool,
            false => &None,
        };
        let r = install(pool, || tracker.track_embedding(image));
        timings.track = t.elapsed();
        Ok(r?)
    }
}
