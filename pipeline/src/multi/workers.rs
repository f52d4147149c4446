//! The two threads every stream of a [`crate::MultiPipeline`] shares: the encoder thread takes a
//! round of frames (`schedule.rs`), converts them and runs the image encoder once on all of
//! them that need it; the tracking thread then runs each stream's [`TrackStage`] on its frames
//! while the encoder thread already works on the next round (encoder-ahead).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use edgetam_tracker::{EdgeTam, Frame, ImageEmbedding};

use crate::error::{Error, Result};
use crate::multi::schedule::{Entry, MultiMsg, MultiShared, Scheduled};
use crate::producer::{prepare, Stage2};
use crate::queue::{dropped_output, Command, Item};
use crate::track_stage::TrackStage;
use crate::types::StreamId;
use crate::workers::{install, Pool};

/// A round's work, prepared for the tracking thread, in the round's order.
pub(crate) enum Ready {
    Open(StreamId, Box<TrackStage>),
    Item(StreamId, Stage2),
    Close(StreamId),
}

/// The encoder thread: conversion of every frame of a round, one image-encoder call for all.
pub(crate) struct RoundEncoder {
    pub(crate) model: Arc<EdgeTam>,
    pub(crate) pool: Pool,
    /// Frames encoded in one call at most (1: one call per frame).
    pub(crate) max_batch: usize,
    /// Per stream, the objects its tracker may hold (a superset, as `producer.rs` keeps): with
    /// none the tracker skips the encoder, so this thread does too.
    objects: HashMap<StreamId, HashSet<u32>>,
}

impl RoundEncoder {
    pub(crate) fn new(model: Arc<EdgeTam>, pool: Pool, max_batch: usize) -> Self {
        Self {
            model,
            pool,
            max_batch,
            objects: HashMap::new(),
        }
    }

    pub(crate) fn run(mut self, shared: &MultiShared, tx: Sender<Vec<Ready>>) {
        while let Some(round) = shared.next_round(self.max_batch) {
            let mut ready = Vec::new();
            // Positions in `ready` of the frames to encode.
            let mut to_encode = Vec::new();
            for scheduled in round {
                match scheduled {
                    Scheduled::Close(id) => {
                        self.objects.remove(&id);
                        ready.push(Ready::Close(id));
                    }
                    Scheduled::Segment(id, entries) => {
                        for e in entries {
                            if let Some(encode) = self.prepare(id, e, &mut ready) {
                                to_encode.push(encode);
                            }
                        }
                    }
                }
            }
            if self.encode(&mut ready, &to_encode) > 1 {
                shared.batched_calls.fetch_add(1, Ordering::Relaxed);
            }
            if tx.send(ready).is_err() {
                break;
            }
        }
    }

    /// Turns one entry into work for the tracking thread; the frame's position in `ready` if
    /// its encoder should run here.
    fn prepare(&mut self, id: StreamId, e: Entry, ready: &mut Vec<Ready>) -> Option<usize> {
        let item = match e {
            Entry::Open(stage) => {
                self.objects.insert(id, HashSet::new());
                ready.push(Ready::Open(id, stage));
                return None;
            }
            Entry::Item(item) => item,
        };
        let objects = self.objects.entry(id).or_default();
        let (next, encode) = match item {
            Item::Command(c) => {
                match &c {
                    Command::AddPrompt(o, _) => {
                        objects.insert(*o);
                    }
                    Command::Remove(o) => {
                        objects.remove(o);
                    }
                    Command::Reset => objects.clear(),
                }
                (Stage2::Command(c), false)
            }
            Item::Dropped { id, timestamp } => (Stage2::Dropped(id, timestamp), false),
            Item::Frame { id, frame, pushed } => {
                let on_device = !self.model.device().is_cpu();
                let p = prepare(id, frame, pushed, on_device);
                let encode = !objects.is_empty() && p.image.is_ok();
                (Stage2::Frame(Box::new(p)), encode)
            }
        };
        ready.push(Ready::Item(id, next));
        encode.then_some(ready.len() - 1)
    }

    /// Runs the image encoder once on the frames at `at` (each image of the batch gets the
    /// bytes a lone call gives it: `EdgeTam::encode_frames`). If the batch fails, each frame
    /// is encoded alone, so that one frame's failure stays that frame's. Returns how many
    /// frames the batched call encoded (0 if it failed).
    fn encode(&self, ready: &mut [Ready], at: &[usize]) -> usize {
        if at.is_empty() {
            return 0;
        }
        let t = Instant::now();
        let _span = tracing::info_span!("encode", frames = at.len()).entered();
        let (at, frames): (Vec<usize>, Vec<&Frame>) = at
            .iter()
            .filter_map(|&i| pixels(ready, i).map(|f| (i, f)))
            .unzip();
        let model = &self.model;
        let mut batched = 0;
        let embeddings: Vec<Result<ImageEmbedding>> =
            match install(&self.pool, || model.encode_frames(&frames)) {
                Ok(all) if all.len() == frames.len() => {
                    batched = all.len();
                    all.into_iter().map(Ok).collect()
                }
                _ => frames
                    .iter()
                    .map(|f| install(&self.pool, || model.encode_frame(f)).map_err(Error::from))
                    .collect(),
            };
        let elapsed = t.elapsed();
        for (&i, e) in at.iter().zip(embeddings) {
            if let Some(Ready::Item(_, Stage2::Frame(p))) = ready.get_mut(i) {
                p.embedding = Some(e);
                p.timings.encode = elapsed;
            }
        }
        batched
    }
}

/// The converted pixels of the frame at `i` of a round.
fn pixels(ready: &[Ready], i: usize) -> Option<&Frame<'static>> {
    match ready.get(i) {
        Some(Ready::Item(_, Stage2::Frame(p))) => p.image.as_ref().ok().map(|(f, _, _)| f),
        _ => None,
    }
}

/// The tracking thread: each stream's [`TrackStage`], run on that stream's frames in order.
pub(crate) fn run_tracking(shared: &MultiShared, rx: Receiver<Vec<Ready>>, out: &Sender<MultiMsg>) {
    let mut stages: HashMap<StreamId, Box<TrackStage>> = HashMap::new();
    for round in rx {
        for r in round {
            if shared.is_cancelled() {
                return;
            }
            let (id, item) = match r {
                Ready::Open(id, stage) => {
                    stages.insert(id, stage);
                    continue;
                }
                Ready::Close(id) => {
                    stages.remove(&id);
                    continue;
                }
                Ready::Item(id, item) => (id, item),
            };
            let Some(stage) = stages.get_mut(&id) else {
                continue;
            };
            let o = match item {
                Stage2::Command(c) => {
                    stage.queue_command(c);
                    continue;
                }
                Stage2::Dropped(fid, ts) => dropped_output(fid, ts),
                Stage2::Frame(p) => stage.process(*p),
            };
            if !shared.emit(out, id, o) {
                return;
            }
        }
    }
}
