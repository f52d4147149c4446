//! The blocking pipeline: an input queue (frames and commands, in push order), one or two
//! worker threads, and an output queue of results in push order.

use std::collections::{HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use edgetam_tracker::{
    EdgeTam, Frame, FrameResult, ImageEmbedding, ObjectPrompt, Tracker, TrackerOptions,
};

use crate::error::{Error, Result};
use crate::stats::{StageTimings, Stats, StatsCollector};

/// Id of a pushed frame: 0, 1, 2, ... over every frame [`Pipeline::push`] accepted, dropped
/// ones included (it does not restart on [`Pipeline::reset`]).
pub type FrameId = u64;

/// What [`Pipeline::push`] does when the input queue already holds `queue_capacity` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DropPolicy {
    /// Wait for room (files, offline processing). The default.
    #[default]
    Block,
    /// Drop the oldest queued frame and queue the new one (live cameras: track the freshest).
    DropOldest,
    /// Drop the new frame.
    DropNewest,
}

/// What the pipeline does with a frame whose size differs from the previous frame's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResolutionChange {
    /// Reset tracking before the frame (every object forgotten, frame numbering restarted),
    /// with a `tracing::warn!`; commands queued before the frame apply after the reset. The
    /// default: a camera that changes mode is a new scene.
    #[default]
    Reset,
    /// Keep tracking, as a serially driven [`Tracker`] does (its memory does not depend on the
    /// frame size; prompts are checked against the new size).
    Continue,
}

/// What became of one frame.
#[derive(Debug)]
pub enum Outcome {
    /// The tracker's result.
    Tracked(FrameResult),
    /// Dropped by the [`DropPolicy`]; the tracker never saw it.
    Dropped,
    /// The tracker failed on this frame (for instance a queued prompt outside the frame); the
    /// tracker's state is as after a failed [`Tracker::track`] and the stream goes on.
    Failed(Error),
}

/// The result of one pushed frame. Results come out in push order, one per accepted frame.
#[derive(Debug)]
pub struct FrameOutput {
    pub id: FrameId,
    /// The frame's timestamp, as pushed.
    pub timestamp: Option<Duration>,
    pub outcome: Outcome,
    /// The frame's size differs from the previous frame's (since the last reset). With
    /// [`ResolutionChange::Reset`] (the default) tracking was reset before it (every object
    /// forgotten, frame numbering restarted), then the commands queued before it were applied.
    pub resolution_changed: bool,
    /// Commands queued before this frame that the tracker rejected when they were applied
    /// (for instance a prompt outside the current frame).
    pub command_errors: Vec<Error>,
    pub timings: StageTimings,
}

impl FrameOutput {
    /// The tracker's result, if the frame was tracked.
    pub fn result(&self) -> Option<&FrameResult> {
        match &self.outcome {
            Outcome::Tracked(r) => Some(r),
            _ => None,
        }
    }

    pub fn is_dropped(&self) -> bool {
        matches!(self.outcome, Outcome::Dropped)
    }
}

/// Called on the tracking thread with each frame's id before the frame is tracked (tests use
/// it to hold the worker or inject a panic).
#[doc(hidden)]
pub type TrackHook = Arc<dyn Fn(FrameId) + Send + Sync>;

/// Settings of a [`Pipeline`].
pub struct PipelineBuilder {
    model: Arc<EdgeTam>,
    capacity: usize,
    policy: DropPolicy,
    encoder_ahead: bool,
    threads: Option<usize>,
    tracker_options: TrackerOptions,
    resolution_change: ResolutionChange,
    hook: Option<TrackHook>,
}

impl PipelineBuilder {
    /// What a change of frame size mid-stream does (default [`ResolutionChange::Reset`]).
    pub fn resolution_change(mut self, on_change: ResolutionChange) -> Self {
        self.resolution_change = on_change;
        self
    }

    /// Frames the input queue holds before the [`DropPolicy`] applies (at least 1; default 4).
    /// Commands do not count and are never dropped.
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.capacity = n;
        self
    }

    pub fn drop_policy(mut self, policy: DropPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Run the image encoder of the next frame on a producer thread while the tracking thread
    /// runs memory attention, the decoder and the memory encoder of the current one (default
    /// off). Results are byte-identical either way.
    pub fn encoder_ahead(mut self, on: bool) -> Self {
        self.encoder_ahead = on;
        self
    }

    /// Each worker thread runs its model calls inside its own rayon pool of `n` threads, which
    /// bounds candle's matrix products (gemm). The tracker's own scoped-thread kernels size
    /// themselves from `available_parallelism` and are not affected. Default: rayon's global
    /// pool.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    pub fn tracker_options(mut self, options: TrackerOptions) -> Self {
        self.tracker_options = options;
        self
    }

    #[doc(hidden)]
    pub fn track_hook(mut self, hook: TrackHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Starts the worker threads.
    pub fn build(self) -> Result<Pipeline> {
        if self.capacity == 0 {
            return Err(Error::Config("queue_capacity must be at least 1".into()));
        }
        if self.threads == Some(0) {
            return Err(Error::Config("threads must be at least 1".into()));
        }
        let shared = Arc::new(Shared::new(self.capacity, self.policy));
        let (out_tx, out_rx) = crossbeam_channel::unbounded();
        let tracker = Tracker::with_options(self.model.clone(), self.tracker_options);
        let stage = TrackStage {
            tracker,
            pending: Vec::new(),
            last_size: None,
            on_resize: self.resolution_change,
            hook: self.hook,
            pool: make_pool(self.threads)?,
        };
        let mut threads = Vec::new();
        if self.encoder_ahead {
            let (tx, rx) = crossbeam_channel::bounded::<Stage2>(1);
            let producer = Producer {
                model: self.model.clone(),
                pool: make_pool(self.threads)?,
                objects: HashSet::new(),
            };
            let (sh, out) = (shared.clone(), out_tx.clone());
            threads.push(spawn(
                "edgetam-encoder",
                shared.clone(),
                out_tx.clone(),
                move || producer.run(&sh, tx, &out),
            )?);
            let (sh, out) = (shared.clone(), out_tx.clone());
            let spawned = spawn("edgetam-tracker", shared.clone(), out_tx, move || {
                stage.run_stage2(&sh, rx, &out)
            });
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    shared.cancel();
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        } else {
            let (sh, out) = (shared.clone(), out_tx.clone());
            threads.push(spawn(
                "edgetam-tracker",
                shared.clone(),
                out_tx,
                move || stage.run_serial(&sh, &out),
            )?);
        }
        Ok(Pipeline {
            shared,
            results: out_rx,
            threads,
        })
    }
}

fn make_pool(threads: Option<usize>) -> Result<Option<rayon::ThreadPool>> {
    threads
        .map(|n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| Error::Config(format!("thread pool: {e}")))
        })
        .transpose()
}

fn install<R: Send>(pool: &Option<rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

type Msg = Result<FrameOutput>;

/// Spawns a worker whose panic becomes an error on the output queue and stops the pipeline.
fn spawn(
    name: &str,
    shared: Arc<Shared>,
    out: Sender<Msg>,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "worker panicked".into());
                tracing::error!(%msg, "pipeline worker panicked");
                shared.fail(msg.clone());
                let _ = out.send(Err(Error::WorkerFailed(format!("panic: {msg}"))));
            }
            drop(out);
            shared.notify_results();
        })
        .map_err(|e| Error::Config(format!("cannot start a worker thread: {e}")))
}

#[derive(Debug)]
pub(crate) enum Command {
    AddPrompt(u32, ObjectPrompt),
    Remove(u32),
    Reset,
}

enum Item {
    Frame {
        id: FrameId,
        frame: Frame<'static>,
        pushed: Instant,
    },
    Dropped {
        id: FrameId,
        timestamp: Option<Duration>,
    },
    Command(Command),
}

struct QueueState {
    items: VecDeque<Item>,
    /// Real frames in `items` (not commands or dropped markers).
    frames: usize,
    next_id: FrameId,
    finished: bool,
    cancelled: bool,
    failed: Option<String>,
}

pub(crate) struct Shared {
    state: Mutex<QueueState>,
    not_empty: Condvar,
    not_full: Condvar,
    stats: Mutex<StatsCollector>,
    capacity: usize,
    policy: DropPolicy,
    #[cfg(feature = "tokio")]
    pub(crate) space: tokio::sync::Notify,
    #[cfg(feature = "tokio")]
    pub(crate) results: tokio::sync::Notify,
}

pub(crate) enum PushError {
    /// `Block` policy, queue full, and the caller does not want to wait: the frame back.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Full(Frame<'static>),
    Failed(Error),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn new(capacity: usize, policy: DropPolicy) -> Self {
        Self {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                frames: 0,
                next_id: 0,
                finished: false,
                cancelled: false,
                failed: None,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            stats: Mutex::new(StatsCollector::default()),
            capacity,
            policy,
            #[cfg(feature = "tokio")]
            space: tokio::sync::Notify::new(),
            #[cfg(feature = "tokio")]
            results: tokio::sync::Notify::new(),
        }
    }

    fn closed(s: &QueueState) -> Option<Error> {
        if let Some(m) = &s.failed {
            Some(Error::WorkerFailed(m.clone()))
        } else if s.cancelled || s.finished {
            Some(Error::Closed)
        } else {
            None
        }
    }

    fn wake_all(&self) {
        self.not_empty.notify_all();
        self.not_full.notify_all();
        #[cfg(feature = "tokio")]
        self.space.notify_waiters();
    }

    pub(crate) fn notify_results(&self) {
        #[cfg(feature = "tokio")]
        self.results.notify_waiters();
    }

    fn cancel(&self) {
        lock(&self.state).cancelled = true;
        self.wake_all();
    }

    fn finish(&self) {
        lock(&self.state).finished = true;
        self.wake_all();
    }

    fn fail(&self, msg: String) {
        lock(&self.state).failed.get_or_insert(msg);
        self.wake_all();
    }

    fn is_cancelled(&self) -> bool {
        lock(&self.state).cancelled
    }

    pub(crate) fn enqueue_frame(
        &self,
        frame: Frame<'static>,
        block: bool,
    ) -> std::result::Result<FrameId, PushError> {
        let mut s = lock(&self.state);
        loop {
            if let Some(e) = Self::closed(&s) {
                return Err(PushError::Failed(e));
            }
            if s.frames < self.capacity {
                break;
            }
            match self.policy {
                DropPolicy::Block if block => {
                    s = self
                        .not_full
                        .wait(s)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                DropPolicy::Block => return Err(PushError::Full(frame)),
                DropPolicy::DropOldest => {
                    let oldest = s.items.iter_mut().find(|i| matches!(i, Item::Frame { .. }));
                    if let Some(item) = oldest {
                        if let Item::Frame { id, frame, .. } = item {
                            let marker = Item::Dropped {
                                id: *id,
                                timestamp: frame.timestamp(),
                            };
                            *item = marker;
                        }
                        s.frames -= 1;
                        lock(&self.stats).frames_dropped += 1;
                    }
                    break;
                }
                DropPolicy::DropNewest => {
                    let id = s.next_id;
                    s.next_id += 1;
                    s.items.push_back(Item::Dropped {
                        id,
                        timestamp: frame.timestamp(),
                    });
                    {
                        let mut st = lock(&self.stats);
                        st.pushed(Instant::now());
                        st.frames_dropped += 1;
                    }
                    drop(s);
                    self.not_empty.notify_all();
                    return Ok(id);
                }
            }
        }
        let id = s.next_id;
        s.next_id += 1;
        let pushed = Instant::now();
        lock(&self.stats).pushed(pushed);
        s.items.push_back(Item::Frame { id, frame, pushed });
        s.frames += 1;
        drop(s);
        self.not_empty.notify_all();
        Ok(id)
    }

    pub(crate) fn enqueue_command(&self, c: Command) -> Result<()> {
        let mut s = lock(&self.state);
        if let Some(e) = Self::closed(&s) {
            return Err(e);
        }
        s.items.push_back(Item::Command(c));
        drop(s);
        self.not_empty.notify_all();
        Ok(())
    }

    /// The next item for the first worker; `None` when the pipeline stops or the input is
    /// finished and drained.
    fn pop(&self) -> Option<Item> {
        let mut s = lock(&self.state);
        loop {
            if s.cancelled || s.failed.is_some() {
                return None;
            }
            if let Some(item) = s.items.pop_front() {
                if matches!(item, Item::Frame { .. }) {
                    s.frames -= 1;
                    drop(s);
                    self.not_full.notify_all();
                    #[cfg(feature = "tokio")]
                    self.space.notify_waiters();
                }
                return Some(item);
            }
            if s.finished {
                return None;
            }
            s = self
                .not_empty
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn emit(&self, out: &Sender<Msg>, o: FrameOutput) -> bool {
        if !o.is_dropped() {
            lock(&self.stats).processed(&o.timings, matches!(o.outcome, Outcome::Failed(_)));
        }
        let ok = out.send(Ok(o)).is_ok();
        self.notify_results();
        ok
    }
}

fn dropped_output(id: FrameId, timestamp: Option<Duration>) -> FrameOutput {
    FrameOutput {
        id,
        timestamp,
        outcome: Outcome::Dropped,
        resolution_changed: false,
        command_errors: Vec::new(),
        timings: StageTimings::default(),
    }
}

/// A frame converted (and maybe encoded) on its way to the tracking stage.
struct Prepared {
    id: FrameId,
    timestamp: Option<Duration>,
    pushed: Instant,
    timings: StageTimings,
    /// The frame on its way to the model: converted to packed RGB8 on the host, or (when the
    /// model is on a GPU) as pushed, converted on the device with the preprocessing.
    image: std::result::Result<(Frame<'static>, usize, usize), Error>,
    /// The encoder's output when the producer ran it.
    embedding: Option<Result<ImageEmbedding>>,
}

/// `on_device`: the model runs on a GPU, which converts the frame itself (one upload of the
/// frame's bytes, no host conversion).
fn prepare(id: FrameId, frame: Frame<'static>, pushed: Instant, on_device: bool) -> Prepared {
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

enum Stage2 {
    Frame(Box<Prepared>),
    Dropped(FrameId, Option<Duration>),
    Command(Command),
}

/// The encoder-ahead producer: converts frames and runs the image encoder.
struct Producer {
    model: Arc<EdgeTam>,
    pool: Option<rayon::ThreadPool>,
    /// Objects the tracker may hold (a superset: it also drops objects on its own); with none,
    /// the tracker skips the encoder, so the producer does too.
    objects: HashSet<u32>,
}

impl Producer {
    fn run(mut self, shared: &Shared, tx: Sender<Stage2>, _out: &Sender<Msg>) {
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

/// The tracking stage: holds the tracker, applies commands, tracks frames.
struct TrackStage {
    tracker: Tracker,
    /// Commands received since the last frame; applied right before the next one.
    pending: Vec<Command>,
    last_size: Option<(usize, usize)>,
    on_resize: ResolutionChange,
    hook: Option<TrackHook>,
    pool: Option<rayon::ThreadPool>,
}

impl TrackStage {
    fn run_serial(mut self, shared: &Shared, out: &Sender<Msg>) {
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

    fn run_stage2(mut self, shared: &Shared, rx: Receiver<Stage2>, out: &Sender<Msg>) {
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

    fn process(&mut self, p: Prepared) -> FrameOutput {
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
                let e = install(&self.pool, || model.encode_frame(frame));
                timings.encode = t.elapsed();
                e?
            }
        };
        let t = Instant::now();
        let _span = tracing::info_span!("track", frame = id).entered();
        let r = install(&self.pool, || tracker.track_embedding(image));
        timings.track = t.elapsed();
        Ok(r?)
    }
}

/// A running pipeline. `push`, the commands and the `recv` family take `&self`: share it
/// (e.g. in an [`Arc`]) between a camera thread and a consumer thread.
///
/// Results wait in an unbounded queue until read (the input queue is what is bounded), so a
/// caller that pushes and never reads holds every result in memory.
///
/// Dropping it (or [`Self::close`]) stops the workers after the frame they are on and joins
/// them; queued frames are discarded. To process every queued frame, call [`Self::finish`] and
/// read results until the iterator ends.
pub struct Pipeline {
    pub(crate) shared: Arc<Shared>,
    results: Receiver<Msg>,
    threads: Vec<JoinHandle<()>>,
}

impl Pipeline {
    pub fn builder(model: Arc<EdgeTam>) -> PipelineBuilder {
        PipelineBuilder {
            model,
            capacity: 4,
            policy: DropPolicy::Block,
            encoder_ahead: false,
            threads: None,
            tracker_options: TrackerOptions::default(),
            resolution_change: ResolutionChange::default(),
            hook: None,
        }
    }

    /// Queues a frame and returns its id. A frame whose layout does not match its format is
    /// rejected here with [`Error::InvalidFrame`] (it gets no id; the stream is unaffected).
    /// Borrowed pixels are copied once; conversion to RGB happens on the worker.
    ///
    /// With [`DropPolicy::Block`] this waits while the queue is full; the drop policies never
    /// wait. A dropped frame still gets an id and a result marked [`Outcome::Dropped`].
    pub fn push(&self, frame: Frame<'_>) -> Result<FrameId> {
        frame.validate()?;
        match self.shared.enqueue_frame(frame.into_owned(), true) {
            Ok(id) => Ok(id),
            Err(PushError::Failed(e)) => Err(e),
            Err(PushError::Full(_)) => Err(Error::Closed),
        }
    }

    /// Adds a box / points / mask prompt for object `obj` (new or existing). It applies to the
    /// next frame pushed after this call, exactly as [`Tracker::add_prompt`] on the tracker's
    /// next frame. Errors found when it is applied come back in that frame's
    /// [`FrameOutput::command_errors`].
    pub fn add_prompt(&self, obj: u32, prompt: impl Into<ObjectPrompt>) -> Result<()> {
        let prompt = check_prompt(obj, prompt.into())?;
        self.shared.enqueue_command(Command::AddPrompt(obj, prompt))
    }

    /// Removes an object from the next frame on.
    pub fn remove_object(&self, obj: u32) -> Result<()> {
        self.shared.enqueue_command(Command::Remove(obj))
    }

    /// Forgets every object and restarts the tracker's frame numbering from the next frame on
    /// (frame ids keep counting).
    pub fn reset(&self) -> Result<()> {
        self.shared.enqueue_command(Command::Reset)
    }

    /// Ends the input: queued frames are still processed, then the result queue ends.
    pub fn finish(&self) {
        self.shared.finish();
    }

    /// The next result, waiting for it. [`Error::Closed`] once every result has been read after
    /// [`Self::finish`]; [`Error::WorkerFailed`] if a worker failed.
    pub fn recv(&self) -> Result<FrameOutput> {
        self.results.recv().map_err(|_| Error::Closed)?
    }

    /// The next result if one is ready.
    pub fn try_recv(&self) -> Result<Option<FrameOutput>> {
        match self.results.try_recv() {
            Ok(m) => m.map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Error::Closed),
        }
    }

    /// The next result, waiting at most `timeout` ([`Error::Timeout`]).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<FrameOutput> {
        match self.results.recv_timeout(timeout) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Closed),
        }
    }

    /// Results as they come, until the pipeline is finished and drained (or a worker failed:
    /// that error is the last item).
    pub fn results(&self) -> Results<'_> {
        Results { pipeline: self }
    }

    pub fn stats(&self) -> Stats {
        lock(&self.shared.stats).snapshot()
    }

    /// Stops the workers (after their current frame), joins them and returns the final stats.
    pub fn close(mut self) -> Stats {
        self.stop();
        self.stats()
    }

    /// Stops the workers without joining them.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn shared_cancel(&self) {
        self.shared.cancel();
    }

    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn try_recv_msg(&self) -> std::result::Result<Msg, TryRecvError> {
        self.results.try_recv()
    }

    fn stop(&mut self) {
        self.shared.cancel();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Rejects prompts the tracker would reject whatever the frame.
pub(crate) fn check_prompt(obj: u32, prompt: ObjectPrompt) -> Result<ObjectPrompt> {
    match &prompt {
        ObjectPrompt::Points(p) if p.bbox.is_none() && p.points.is_empty() => {
            Err(Error::InvalidCommand(format!(
                "object {obj}: a prompt needs a box, points or a mask"
            )))
        }
        ObjectPrompt::Mask(m)
            if m.width == 0 || m.height == 0 || m.data.len() != m.width * m.height =>
        {
            Err(Error::InvalidCommand(format!(
                "object {obj}: a {}x{} mask needs {} values, got {}",
                m.width,
                m.height,
                m.width.saturating_mul(m.height),
                m.data.len()
            )))
        }
        _ => Ok(prompt),
    }
}

/// Iterator over a pipeline's results (see [`Pipeline::results`]).
pub struct Results<'a> {
    pipeline: &'a Pipeline,
}

impl Iterator for Results<'_> {
    type Item = Result<FrameOutput>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.pipeline.recv() {
            Err(Error::Closed) => None,
            r => Some(r),
        }
    }
}
