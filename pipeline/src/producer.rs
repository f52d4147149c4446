//! Frames on their way to the tracking stage: conversion (to RGB8 on the host, or kept as
//! pushed for a GPU) and, with encoder-ahead, the image encoder on the producer thread.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use edgetam_tracker::{EdgeTam, Frame, ImageEmbedding};

use crate::error::{Error, Result};
use crate::queue::{Command, Item, Msg, Shared};
use crate::stats::StageTimings;
use crate::types::FrameId;
use crate::workers::{install, Pool};

/// A frame converted (and maybe encoded) on its way to the tracking stage.
pub(crate) struct Prepared {
    pub(crate) id: FrameId,
    pub(crate) timestamp: Option<Duration>,
    pub(crate) pushed: Instant,
    pub(crate) timings: StageTimings,
    /// The frame on its way to the model: converted to packed RGB8 on the host, or (when the
    /// model is on a GPU) as pushed, converted on the device with the preprocessing.
    pub(crate) image: std::result::Result<(Frame<'static>, usize, usize), Error>,
    /// The encoder's output when the producer ran it.
    pub(crate) embedding: Option<Result<ImageEmbedding>>,
}

/// `on_device`: the model runs on a GPU, which converts the frame itself (one upload of the
/// frame's bytes, no host conversion).
pub(crate) fn prepare(
    id: FrameId,
    frame: Frame<'static>,
    pushed: Instant,
    on_device: bool,
) -> Prepared {
    let mut timings = StageTimings {
        queue: pushed.elapsed(),
        ..StageTimings::default()
    };
    let t = Instant::now();
    let (w, h, timestamp) = (frame.width(), frame.height(), frame.timestamp());
    let image = {
        let _span = tracing::info_span!("convert", frame = id).entered();
        if on_device {
            frame.validate().map(|_| (frame, w, h)).map_err(Error::from)
        } else {
            frame
                .into_rgb8()
                .map(|rgb| (Frame::rgb8(rgb, w, h), w, h))
                .map_err(Error::from)
        }
    };
    timings.convert = t.elapsed();
    Prepared {
        id,
        timestamp,
        pushed,
        timings,
        image,
        embedding: None,
    }
}

pub(crate) enum Stage2 {
    Frame(Box<Prepared>),
    Dropped(FrameId, Option<Duration>),
    Command(Command),
}

/// The encoder-ahead producer: converts frames and runs the image encoder.
pub(crate) struct Producer {
    model: Arc<EdgeTam>,
    pool: Pool,
    /// Objects the tracker may hold (a superset: it also drops objects on its own); with none,
    /// the tracker skips the encoder, so the producer does too.
    objects: HashSet<u32>,
}

impl Producer {
    pub(crate) fn new(model: Arc<EdgeTam>, pool: Pool) -> Self {
        Self {
            model,
            pool,
            objects: HashSet::new(),
        }
    }

    pub(crate) fn run(mut self, shared: &Shared, tx: Sender<Stage2>, _out: &Sender<Msg>) {
        while let Some(item) = shared.pop() {
            let next = match item {
                Item::Command(c) => {
                    match &c {
                        Command::AddPrompt(o, _) => {
                            self.objects.insert(*o);
                        }
                        Command::Remove(o) => {
                            self.objects.remove(o);
                        }
                        Command::Reset => self.objects.clear(),
                    }
                    Stage2::Command(c)
                }
                Item::Dropped { id, timestamp } => Stage2::Dropped(id, timestamp),
                Item::Frame { id, frame, pushed } => {
                    let on_device = !self.model.device().is_cpu();
                    let mut p = prepare(id, frame, pushed, on_device);
                    if !self.objects.is_empty() {
                        if let Ok((pixels, _, _)) = &p.image {
                            let t = Instant::now();
                            let _span = tracing::info_span!("encode", frame = id).entered();
                            let model = &self.model;
                            let e = install(&self.pool, || model.encode_frame(pixels));
                            p.embedding = Some(e.map_err(Error::from));
                            p.timings.encode = t.elapsed();
                        }
                    }
                    Stage2::Frame(Box::new(p))
                }
            };
            if tx.send(next).is_err() {
                break;
            }
        }
    }
}
