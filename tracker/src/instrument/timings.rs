//! Wall time of each model stage on one frame.
//!
//! Measured on every frame (a handful of clock reads, nothing per pixel) so that a user's own
//! loop, the pipeline's statistics and `edgetam bench` all see the same breakdown. On the CPU
//! candle runs each op to completion before returning, so a stage's wall time is its compute
//! time; an asynchronous device would need a synchronisation at stage ends to mean the same.

use std::ops::AddAssign;
use std::time::{Duration, Instant};

/// Time spent in each stage of one frame, summed over its objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Frame to normalised `[1, 3, S, S]` input (resize + normalise).
    pub preprocess: Duration,
    /// RepViT backbone, FPN and the decoder's high-resolution convolutions.
    pub image_encoder: Duration,
    /// Gathering each object's memories and the memory-attention transformer.
    pub memory_attention: Duration,
    /// Prompt encoder and mask decoder (prompted and tracked objects).
    pub mask_decoder: Duration,
    /// Memory encoder and spatial perceiver (what the next frames remember).
    pub memory_encoder: Duration,
    /// Masks and boxes at the frame's resolution, copied to the host.
    pub postprocess: Duration,
}

impl StageTimes {
    /// Stage names, in pipeline order (also the benchmark's column and JSON key names).
    pub const NAMES: [&'static str; 6] = [
        "preprocess",
        "image_encoder",
        "memory_attention",
        "mask_decoder",
        "memory_encoder",
        "postprocess",
    ];

    /// The stages in [`Self::NAMES`] order.
    pub fn as_array(&self) -> [Duration; 6] {
        [
            self.preprocess,
            self.image_encoder,
            self.memory_attention,
            self.mask_decoder,
            self.memory_encoder,
            self.postprocess,
        ]
    }

    /// Sum of all stages.
    pub fn total(&self) -> Duration {
        self.as_array().iter().sum()
    }
}

impl AddAssign for StageTimes {
    fn add_assign(&mut self, o: Self) {
        self.preprocess += o.preprocess;
        self.image_encoder += o.image_encoder;
        self.memory_attention += o.memory_attention;
        self.mask_decoder += o.mask_decoder;
        self.memory_encoder += o.memory_encoder;
        self.postprocess += o.postprocess;
    }
}

/// Runs `f` and adds its wall time to `slot`.
pub(crate) fn timed<T>(slot: &mut Duration, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    *slot += start.elapsed();
    out
}
