//! What the element holds between `start` and `stop` (the state, the buffers in it, the live
//! output thread) and why it may fail to start: plain data, below the files that act on it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use edgetam_pipeline::{FrameId, FrameOutput, Pipeline};
use edgetam_tracker::ObjectPrompt;

use super::output::{Decisions, LastObjects};
use super::prompts::{Objects, SpecError};

/// How long a wait for a result sleeps between checks of the flushing flag.
pub(super) const WAIT_STEP: Duration = Duration::from_millis(20);

/// A buffer in the element, waiting to leave in input order.
pub(super) struct Pending {
    pub(super) buf: gst::Buffer,
    /// Buffers seen before it since `start`.
    pub(super) index: u64,
    /// Its id in the tracking pipeline when it is tracked.
    pub(super) id: Option<FrameId>,
    /// Its running time, taken on the streaming thread (the segment is read under the sink
    /// pad's stream lock, which the live output thread must never wait for).
    pub(super) running_time: Option<gst::ClockTime>,
    pub(super) decisions: Decisions,
}

/// Everything that lives between `start` and `stop`.
pub(super) struct State {
    pub(super) pipeline: Arc<Pipeline>,
    pub(super) info: Option<gst_video::VideoInfo>,
    /// Buffers seen since `start` (the index `frame=` of the `prompts` property refers to).
    pub(super) buffers: u64,
    /// `prompts` entries waiting for their buffer index.
    pub(super) scheduled: Vec<(u64, u32, ObjectPrompt)>,
    pub(super) objects: Objects,
    pub(super) pending: VecDeque<Pending>,
    /// Results that came before their buffer reached the front.
    pub(super) ready: HashMap<FrameId, FrameOutput>,
    /// Tracked buffers pending (their results not taken yet).
    pub(super) in_flight: usize,
    pub(super) max_in_flight: usize,
    /// Results of buffers a flush discarded, dropped when they come.
    pub(super) discard: HashSet<FrameId>,
    /// The last tracked buffer's objects (the stale metas of untracked buffers).
    pub(super) last: Option<LastObjects>,
    /// EOS or a serialized event waits for every pending buffer to leave.
    pub(super) draining: bool,
    /// Buffers the live output thread took and is pushing.
    pub(super) in_transit: usize,
}

/// Why the element cannot start.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    #[error("no model: set the `model` property to a folder with config.json + model.safetensors or an edgetam.pt")]
    NoModel,
    #[error("model {path} does not exist")]
    MissingModel { path: String },
    #[error("cannot load model {path}: {source}")]
    Model {
        path: String,
        source: edgetam_tracker::Error,
    },
    #[error("bad `device`: {0}")]
    Device(edgetam_tracker::Error),
    /// `precision=bf16` where it cannot run (the message says why), or with a malformed
    /// `EDGETAM_BF16_POLICY`: refused, not run as f32.
    #[error("{0}")]
    Precision(edgetam_tracker::Error),
    #[error("bad `prompts`: {0}")]
    Prompts(#[from] SpecError),
    #[error(
        "`prompt-source=analytics` needs the plugin built with GStreamer >= 1.24 (feature v1_24)"
    )]
    NoAnalytics,
    #[error("cannot start the tracking pipeline: {0}")]
    Pipeline(edgetam_pipeline::Error),
}

impl StartError {
    /// A failure of [`ModelSpec::check`] or [`ModelSpec::load`] for the model `path`: the
    /// device and the precision are settings of their own, anything else is the model's.
    pub(super) fn of_settings(path: &str, e: edgetam_tracker::Error) -> Self {
        match e {
            edgetam_tracker::Error::InvalidDevice(_) => Self::Device(e),
            edgetam_tracker::Error::PrecisionUnavailable { .. }
            | edgetam_tracker::Error::Bf16Policy(_) => Self::Precision(e),
            source => Self::Model {
                path: path.to_owned(),
                source,
            },
        }
    }
}

/// Live mode pushes from a thread of its own: the streaming thread only hands buffers in, so a
/// sink waiting for a buffer's time (on the streaming thread, without a queue in between) never
/// delays the next buffer's arrival, and buffers arrive when they are captured.
pub(super) struct OutputThread {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) handle: JoinHandle<()>,
}
