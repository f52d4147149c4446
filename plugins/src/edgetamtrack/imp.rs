//! Implementation of `edgetamtrack` (see the module docs of [`super`]): the element's state,
//! the buffers in flight and their order, live judgement, events and queries.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use edgetam_pipeline::{FrameId, FrameOutput, Outcome, Pipeline};
use edgetam_tracker::util::{lock, panic_message};
use edgetam_tracker::{Backend, ModelSpec, ObjectPrompt, Prompt};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_transform::GenerateOutputSuccess;
use gst_base::subclass::prelude::*;
use gst_video::subclass::prelude::*;

use super::detector::{Decision, Rules};
use super::output::{self, Decisions, LastObjects};
use super::prompts::{self, Command, Objects, SpecError};
use super::settings::{self, Settings};
use super::shared_model::{self, ModelKey};
use super::timing::{LiveCheck, Qos, Stats};
use super::{Overlay, PromptSource, TestFault};
use crate::{convert, overlay};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "edgetamtrack",
        gst::DebugColorFlags::empty(),
        Some("EdgeTAM video object tracker"),
    )
});

/// How long a wait for a result sleeps between checks of the flushing flag.
const WAIT_STEP: Duration = Duration::from_millis(20);

/// A buffer in the element, waiting to leave in input order.
struct Pending {
    buf: gst::Buffer,
    /// Buffers seen before it since `start`.
    index: u64,
    /// Its id in the tracking pipeline when it is tracked.
    id: Option<FrameId>,
    /// Its running time, taken on the streaming thread (the segment is read under the sink
    /// pad's stream lock, which the live output thread must never wait for).
    running_time: Option<gst::ClockTime>,
    decisions: Decisions,
}

/// Everything that lives between `start` and `stop`.
struct State {
    pipeline: Arc<Pipeline>,
    info: Option<gst_video::VideoInfo>,
    /// Buffers seen since `start` (the index `frame=` of the `prompts` property refers to).
    buffers: u64,
    /// `prompts` entries waiting for their buffer index.
    scheduled: Vec<(u64, u32, ObjectPrompt)>,
    objects: Objects,
    pending: VecDeque<Pending>,
    /// Results that came before their buffer reached the front.
    ready: HashMap<FrameId, FrameOutput>,
    /// Tracked buffers pending (their results not taken yet).
    in_flight: usize,
    max_in_flight: usize,
    /// Results of buffers a flush discarded, dropped when they come.
    discard: HashSet<FrameId>,
    /// The last tracked buffer's objects (the stale metas of untracked buffers).
    last: Option<LastObjects>,
    /// EOS or a serialized event waits for every pending buffer to leave.
    draining: bool,
    /// Buffers the live output thread took and is pushing.
    in_transit: usize,
}

/// Something to post once the state lock is released (a synchronous bus handler may call back
/// into the element).
enum Post {
    Message(gst::Message),
    Warning(String),
    Latency,
}

#[derive(Default)]
pub struct EdgeTamTrack {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Commands sent before `start`, applied when it runs.
    early: Mutex<Vec<Command>>,
    stats: Mutex<Stats>,
    qos: Mutex<Qos>,
    /// Upstream's minimum latency, from the last LATENCY query the element answered.
    upstream: Mutex<gst::ClockTime>,
    /// Set by FLUSH_START and the change to READY: waits for results give up.
    flushing: AtomicBool,
    /// Signalled when buffers enter or leave `state.pending` (the live output thread and
    /// drains wait on it).
    changed: Condvar,
    /// The live mode's output thread.
    output: Mutex<Option<OutputThread>>,
    /// Set when the live output thread ended on a failure (a panic or an error already
    /// posted): drains stop waiting for it and new buffers are refused.
    output_failed: AtomicBool,
    /// Set when a call into the element panicked (see [`EdgeTamTrack::guarded`]): until the
    /// next start it refuses buffers, events and queries.
    panicked: AtomicBool,
    /// A fault the tests inject (see [`TestFault`]).
    fault: Mutex<Option<TestFault>>,
}

/// Live mode pushes from a thread of its own: the streaming thread only hands buffers in, so a
/// sink waiting for a buffer's time (on the streaming thread, without a queue in between) never
/// delays the next buffer's arrival, and buffers arrive when they are captured.
struct OutputThread {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// Why the element cannot start.
#[derive(Debug, thiserror::Error)]
enum StartError {
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
    /// `precision=bf16` where it cannot run (the message says why): refused, not run as f32.
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
    fn of_settings(path: &str, e: edgetam_tracker::Error) -> Self {
        match e {
            edgetam_tracker::Error::InvalidDevice(_) => Self::Device(e),
            edgetam_tracker::Error::PrecisionUnavailable { .. } => Self::Precision(e),
            source => Self::Model {
                path: path.to_owned(),
                source,
            },
        }
    }
}

impl EdgeTamTrack {
    pub(super) fn inject_fault(&self, fault: TestFault) {
        *lock(&self.fault) = Some(fault);
    }

    /// Takes the injected fault if it is `f`.
    fn take_fault(&self, f: impl Fn(&TestFault) -> bool) -> Option<TestFault> {
        let mut fault = lock(&self.fault);
        if fault.as_ref().is_some_and(f) {
            return fault.take();
        }
        None
    }

    /// Runs the body of a call into the element, catching its panic here instead of leaving it
    /// to the bindings' guard: once that guard has seen a panic it refuses every later call
    /// without releasing the buffer or event the call owns (a leak per buffer), and refuses
    /// the state changes too, so `stop` never runs and the tracking threads outlive the
    /// stream. Here a panic posts an element error; until the next start the element refuses
    /// buffers, events and queries (`refused`), dropping what they carry, while state changes,
    /// properties and signals keep working.
    fn guarded<R>(&self, what: &str, refused: impl FnOnce() -> R, body: impl FnOnce() -> R) -> R {
        if self.panicked.load(Ordering::SeqCst) {
            gst::debug!(CAT, imp = self, "{what} refused: the element panicked");
            return refused();
        }
        self.contained(what, refused, body)
    }

    /// Catches a panic of `body` (see [`Self::guarded`]) and returns `fallback()` after it,
    /// whether or not the element panicked before: for the calls that must still run after a
    /// panic (state changes, `stop`, properties, signals).
    fn contained<R>(
        &self,
        what: &str,
        fallback: impl FnOnce() -> R,
        body: impl FnOnce() -> R,
    ) -> R {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(r) => r,
            Err(panic) => {
                self.fail_after_panic(
                    &self.panicked,
                    &format!("Panicked in {what}: {}", panic_message(panic.as_ref())),
                );
                fallback()
            }
        }
    }

    /// Sets a failure flag (`panicked`, `output_failed`) and wakes the drains waiting on
    /// pending buffers, which stop waiting once it is set.
    fn mark_failed(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// [`Self::mark_failed`] after a caught panic, posting `text` as the element error.
    fn fail_after_panic(&self, flag: &AtomicBool, text: &str) {
        self.mark_failed(flag);
        gst::element_imp_error!(
            self,
            gst::LibraryError::Failed,
            ("{text}"),
            ["the element refuses buffers until it is restarted (READY -> PAUSED)"]
        );
    }

    fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    fn load(&self, settings: &Settings) -> Result<State, StartError> {
        let name = settings.model.clone().ok_or(StartError::NoModel)?;
        let precision = settings.precision;
        let input_size = (settings.input_size != 0).then_some(settings.input_size as usize);
        let spec = ModelSpec::new(&name)
            .device(settings.device.as_str())
            .precision(precision.into())
            .input_size(input_size);
        // The settings (EDGETAM_ISA, input size, device, precision) are checked before a
        // download or a load, and before another element's model is shared.
        spec.check()
            .map_err(|e| StartError::of_settings(&name, e))?;
        // A hub repository id (owner/name) is fetched into the Hugging Face cache (or found there).
        let spec = spec.resolve().map_err(|source| StartError::Model {
            path: name.clone(),
            source,
        })?;
        let path = spec.path().map(Path::to_path_buf).unwrap_or_default();
        if !path.exists() {
            return Err(StartError::MissingModel {
                path: path.display().to_string(),
            });
        }
        let scheduled = prompts::schedule(
            settings.prompts.as_deref().unwrap_or(""),
            &edgetam_pipeline::read_mask,
        )?;
        if settings.prompt_source == PromptSource::Analytics && !cfg!(feature = "v1_24") {
            return Err(StartError::NoAnalytics);
        }
        let key = ModelKey::new(&path, &settings.device, precision, input_size);
        let t = Instant::now();
        let (model, shared) = shared_model::get_or_load(key, || {
            spec.load()
                .map(|loaded| loaded.model)
                .map_err(|e| StartError::of_settings(&path.display().to_string(), e))
        })?;
        gst::info!(
            CAT,
            imp = self,
            "{} {} in {:.2} s on {}",
            if shared { "shares" } else { "loaded" },
            path.display(),
            t.elapsed().as_secs_f64(),
            Backend::of(model.device()),
        );
        let max_in_flight = settings.in_flight();
        let mut builder = Pipeline::builder(model)
            // Room for the buffers in flight and for those a flush left behind.
            .queue_capacity(2 * max_in_flight)
            .encoder_ahead(settings.encoder_ahead);
        if let Some(TestFault::WorkerPanicAt(at)) =
            self.take_fault(|f| matches!(f, TestFault::WorkerPanicAt(_)))
        {
            builder = builder.track_hook(Arc::new(move |id| {
                if id == at {
                    panic!("injected test fault: the tracking worker panics on frame {id}");
                }
            }));
        }
        let pipeline = builder.build().map_err(StartError::Pipeline)?;
        Ok(State {
            pipeline: Arc::new(pipeline),
            info: None,
            buffers: 0,
            scheduled,
            objects: Objects::default(),
            pending: VecDeque::new(),
            ready: HashMap::new(),
            in_flight: 0,
            max_in_flight,
            discard: HashSet::new(),
            last: None,
            draining: false,
            in_transit: 0,
        })
    }

    /// Queues a command (or keeps it for `start`); false when refused.
    pub(super) fn command(&self, cmd: Command) -> bool {
        let max = lock(&self.settings).max_objects as usize;
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            let mut early = lock(&self.early);
            if let Command::Add(obj, _) = &cmd {
                let mut known = std::collections::BTreeSet::new();
                for c in early.iter() {
                    match c {
                        Command::Add(o, _) => {
                            known.insert(*o);
                        }
                        Command::Remove(o) => {
                            known.remove(o);
                        }
                        Command::Reset => known.clear(),
                    }
                }
                if !known.contains(obj) && known.len() >= max {
                    drop(early);
                    drop(guard);
                    gst::warning!(
                        CAT,
                        imp = self,
                        "max-objects ({max}) reached: object {obj} refused"
                    );
                    return false;
                }
            }
            early.push(cmd);
            return true;
        };
        let since = state.buffers;
        let r = state.objects.apply(&state.pipeline, cmd, max, since);
        drop(guard);
        self.warn_refused(r)
    }

    /// Posts the warning of a refused command (never while holding the state lock).
    fn warn_refused(&self, r: Result<(), String>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) => {
                gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{e}"));
                false
            }
        }
    }

    pub(super) fn add_spec(&self, spec: &str) -> bool {
        match prompts::parse_spec(spec, &edgetam_pipeline::read_mask) {
            Ok((obj, prompt)) => self.command(Command::Add(obj, prompt)),
            Err(e) => {
                gst::element_imp_warning!(
                    self,
                    gst::LibraryError::Settings,
                    ("prompt `{spec}` refused: {e}")
                );
                false
            }
        }
    }

    pub(super) fn add_points(&self, obj: u32, points: &str) -> bool {
        match prompts::parse_points(obj, points) {
            Ok(prompt) => self.command(Command::Add(obj, prompt)),
            Err(e) => {
                gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{e}"));
                false
            }
        }
    }

    /// Handles a custom prompt event; true when it was one (it is consumed).
    fn prompt_event(&self, event: &gst::Event) -> bool {
        let Some(s) = event.structure() else {
            return false;
        };
        match prompts::event_spec(s) {
            None => return false,
            Some(Ok(spec)) => {
                gst::debug!(CAT, imp = self, "prompt event: {spec}");
                self.add_spec(spec);
            }
            Some(Err(e)) => {
                gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{e}"))
            }
        }
        true
    }

    fn running_time(&self, buf: &gst::BufferRef) -> Option<gst::ClockTime> {
        let pts = buf.pts()?;
        let segment = self.obj().segment();
        segment
            .downcast_ref::<gst::ClockTime>()
            .and_then(|s| s.to_running_time(pts))
    }

    /// A buffer's duration, or the caps' frame duration.
    fn frame_duration(buf: &gst::BufferRef, info: &gst_video::VideoInfo) -> gst::ClockTime {
        buf.duration()
            .or_else(|| {
                let fps = info.fps();
                (fps.numer() > 0).then(|| {
                    gst::ClockTime::SECOND
                        .mul_div_floor(fps.denom() as u64, fps.numer() as u64)
                        .unwrap_or(gst::ClockTime::ZERO)
                })
            })
            .unwrap_or(gst::ClockTime::ZERO)
    }

    /// Live mode: whether to track this buffer now (the tracker is free and can have the result
    /// out within the latency budget, and downstream QoS does not report it late).
    fn live_decision(&self, state: &State, running_time: Option<gst::ClockTime>) -> bool {
        // Busy: buffers in the tracker whose results are not in (a result waiting for the
        // output thread to push the buffers before it frees the tracker already).
        let busy = state
            .pending
            .iter()
            .filter(|p| p.id.is_some_and(|id| !state.ready.contains_key(&id)))
            .count();
        if busy >= state.max_in_flight {
            gst::log!(CAT, imp = self, "tracker busy: buffer passes untracked");
            return false;
        }
        let Some(rt) = running_time else {
            return true;
        };
        let (ours, processing) = {
            let st = lock(&self.stats);
            (st.latency, st.processing_estimate())
        };
        if lock(&self.qos).late(rt, ours) {
            gst::debug!(CAT, imp = self, "late by QoS: {rt}");
            return false;
        }
        let obj = self.obj();
        let (Some(clock), Some(base)) = (obj.clock(), obj.base_time()) else {
            return true;
        };
        let Some(now) = clock.time().checked_sub(base) else {
            return true;
        };
        let check = LiveCheck {
            running_time: rt,
            now,
            upstream: *lock(&self.upstream),
            ours,
            processing,
        };
        let ok = check.in_time();
        if !ok {
            gst::debug!(CAT, imp = self, "cannot be in time: {check:?}");
        }
        ok
    }

    /// Takes every result that is ready, without waiting.
    fn collect_ready(&self, state: &mut State) -> Result<(), gst::FlowError> {
        loop {
            match state.pipeline.try_recv() {
                Ok(Some(out)) => self.keep(state, out),
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.pipeline_error(e)),
            }
        }
    }

    fn keep(&self, state: &mut State, out: FrameOutput) {
        if !state.discard.remove(&out.id) {
            state.ready.insert(out.id, out);
        }
    }

    fn pipeline_error(&self, e: edgetam_pipeline::Error) -> gst::FlowError {
        gst::element_imp_error!(self, gst::StreamError::Failed, ("tracking pipeline: {e}"));
        gst::FlowError::Error
    }

    /// Waits for the next result; `None` when the element is flushing.
    fn wait_result(&self, pipeline: &Pipeline) -> Result<Option<FrameOutput>, gst::FlowError> {
        loop {
            if self.flushing.load(Ordering::SeqCst) {
                return Ok(None);
            }
            match pipeline.recv_timeout(WAIT_STEP) {
                Ok(out) => return Ok(Some(out)),
                Err(edgetam_pipeline::Error::Timeout(_)) => continue,
                Err(e) => return Err(self.pipeline_error(e)),
            }
        }
    }

    /// The next buffer to leave, if it may leave now (`wait`: wait for its result when it is
    /// tracked).
    fn next_output(
        &self,
        wait_always: bool,
        transit: bool,
    ) -> Result<Option<gst::Buffer>, gst::FlowError> {
        let settings = self.settings();
        loop {
            let mut guard = lock(&self.state);
            let Some(state) = guard.as_mut() else {
                return Ok(None);
            };
            self.collect_ready(state)?;
            let Some(front) = state.pending.front() else {
                return Ok(None);
            };
            let ready = match front.id {
                None => true,
                Some(id) => state.ready.contains_key(&id),
            };
            if !ready {
                let wait = wait_always
                    || state.draining
                    || (!settings.live_mode && state.in_flight >= state.max_in_flight);
                if !wait {
                    return Ok(None);
                }
                let pipeline = state.pipeline.clone();
                drop(guard);
                match self.wait_result(&pipeline)? {
                    Some(out) => {
                        if let Some(state) = lock(&self.state).as_mut() {
                            self.keep(state, out);
                        }
                        continue;
                    }
                    None => return Err(gst::FlowError::Flushing),
                }
            }
            let Some(p) = state.pending.pop_front() else {
                return Ok(None);
            };
            if transit {
                state.in_transit += 1;
            }
            self.changed.notify_all();
            let mut posts = Vec::new();
            let buf = self.finish(state, p, &settings, &mut posts);
            drop(guard);
            self.post(posts);
            return Ok(Some(buf));
        }
    }

    /// Results, metas, overlay and message of a leaving buffer.
    fn finish(
        &self,
        state: &mut State,
        p: Pending,
        settings: &Settings,
        posts: &mut Vec<Post>,
    ) -> gst::Buffer {
        let mut buf = p.buf;
        let out = p.id.and_then(|id| state.ready.remove(&id));
        if p.id.is_some() {
            state.in_flight = state.in_flight.saturating_sub(1);
        }
        let Some(info) = state.info.clone() else {
            return buf;
        };
        let fresh = match out {
            None => false,
            Some(out) => {
                for e in &out.command_errors {
                    posts.push(Post::Warning(format!(
                        "prompt refused on buffer {}: {e}",
                        p.index
                    )));
                }
                match out.outcome {
                    Outcome::Tracked(r) => {
                        // The analytics Mtds' times: running time (0 for a buffer without one).
                        let time = p.running_time.unwrap_or(gst::ClockTime::ZERO);
                        state.objects.observe(&r, p.index, time);
                        state.last = Some(LastObjects::new(&r, &state.objects.seen, time));
                        let margin = if settings.live_mode {
                            Self::frame_duration(&buf, &info)
                        } else {
                            gst::ClockTime::ZERO
                        };
                        let processing = out.timings.end_to_end;
                        if lock(&self.stats).record(processing, margin) {
                            posts.push(Post::Latency);
                        }
                        if settings.post_messages {
                            posts.push(Post::Message(output::message(
                                self.obj().upcast_ref(),
                                p.running_time,
                                buf.pts(),
                                p.index,
                                &r,
                                processing,
                                &state.objects.labels,
                                &state.objects.seen,
                                &p.decisions,
                            )));
                        }
                        true
                    }
                    Outcome::Failed(e) => {
                        posts.push(Post::Warning(format!(
                            "buffer {} not tracked: {e}",
                            p.index
                        )));
                        return buf;
                    }
                    Outcome::Dropped => return buf,
                }
            }
        };
        let Some(last) = &state.last else {
            return buf;
        };
        let style = overlay::Style {
            mask: settings.overlay.contains(Overlay::MASK),
            contour: settings.overlay.contains(Overlay::CONTOUR),
            boxes: settings.overlay.contains(Overlay::BOX),
            alpha: settings.overlay_alpha as f32,
        };
        // A shallow copy when upstream still holds the buffer: the pixel memory is shared
        // (and copied only if the overlay maps it for writing).
        let b = buf.make_mut();
        if !style.is_empty() && !last.objects.is_empty() {
            match gst_video::VideoFrameRef::from_buffer_ref_writable(&mut *b, &info) {
                Ok(mut vf) => overlay::draw(&mut vf, &last.objects, style),
                Err(e) => gst::warning!(CAT, imp = self, "cannot map the buffer for drawing: {e}"),
            }
        }
        // Upstream detections (analytics Mtds) that prompted or matched an object, on the
        // buffer they came with.
        let sources: Vec<(u32, u32)> = if fresh {
            p.decisions
                .iter()
                .filter_map(|(d, decision)| match decision {
                    Decision::Refused => None,
                    _ => Some((d.mtd_id?, decision.object())),
                })
                .collect()
        } else {
            Vec::new()
        };
        for e in output::attach(b, last, !fresh, &state.objects.labels, &sources) {
            gst::warning!(CAT, imp = self, "{e}");
        }
        buf
    }

    fn post(&self, posts: Vec<Post>) {
        for p in posts {
            match p {
                Post::Message(m) => {
                    let _ = self.obj().post_message(m);
                }
                Post::Warning(w) => {
                    gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{w}"))
                }
                Post::Latency => {
                    gst::debug!(CAT, imp = self, "latency now {}", lock(&self.stats).latency);
                    let _ = self
                        .obj()
                        .post_message(gst::message::Latency::builder().src(&*self.obj()).build());
                }
            }
        }
    }

    /// Pushes every pending buffer downstream, waiting for the tracked ones (before EOS and
    /// other serialized events, which must not overtake them). In live mode the output thread
    /// pushes them; this waits until it has.
    fn drain(&self) {
        if lock(&self.output).is_some() {
            let mut guard = lock(&self.state);
            while guard
                .as_ref()
                .is_some_and(|s| !s.pending.is_empty() || s.in_transit > 0)
                && !self.flushing.load(Ordering::SeqCst)
                && !self.output_failed.load(Ordering::SeqCst)
                && !self.panicked.load(Ordering::SeqCst)
            {
                guard = self
                    .changed
                    .wait_timeout(guard, WAIT_STEP)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            return;
        }
        if let Some(state) = lock(&self.state).as_mut() {
            if state.pending.is_empty() {
                return;
            }
            state.draining = true;
        }
        let src = self.obj().static_pad("src");
        loop {
            match self.next_output(true, false) {
                Ok(Some(buf)) => {
                    if let Some(pad) = &src {
                        if let Err(e) = pad.push(buf) {
                            gst::debug!(CAT, imp = self, "drain: downstream returned {e:?}");
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    gst::debug!(CAT, imp = self, "drain stopped: {e:?}");
                    break;
                }
            }
        }
        if let Some(state) = lock(&self.state).as_mut() {
            state.draining = false;
        }
    }

    /// The live output thread: pushes pending buffers in order as soon as they may leave.
    fn start_output_thread(&self) -> Result<(), gst::ErrorMessage> {
        self.output_failed.store(false, Ordering::SeqCst);
        let stop = Arc::new(AtomicBool::new(false));
        let weak = self.obj().downgrade();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("edgetam-output".into())
            .spawn(move || output_loop(&weak, &flag))
            .map_err(|e| {
                gst::error_msg!(
                    gst::CoreError::Thread,
                    ("cannot start the output thread: {e}")
                )
            })?;
        *lock(&self.output) = Some(OutputThread { stop, handle });
        Ok(())
    }

    fn stop_output_thread(&self) {
        let Some(t) = lock(&self.output).take() else {
            return;
        };
        t.stop.store(true, Ordering::SeqCst);
        self.changed.notify_all();
        if t.handle.join().is_err() {
            gst::warning!(CAT, imp = self, "the output thread panicked");
        }
    }

    /// One round of the output thread; false when it should stop.
    fn output_round(&self, stop: &AtomicBool) -> bool {
        if self
            .take_fault(|f| *f == TestFault::OutputThreadPanic)
            .is_some()
        {
            panic!("injected test fault: the output thread panics");
        }
        match self.next_output(true, true) {
            Ok(Some(buf)) => {
                let r = self
                    .obj()
                    .static_pad("src")
                    .map(|pad| pad.push(buf))
                    .unwrap_or(Err(gst::FlowError::Error));
                if let Some(state) = lock(&self.state).as_mut() {
                    state.in_transit = state.in_transit.saturating_sub(1);
                }
                self.changed.notify_all();
                match r {
                    Ok(_) | Err(gst::FlowError::Flushing) => true,
                    Err(gst::FlowError::Eos) => true,
                    Err(e) => {
                        gst::element_imp_error!(
                            self,
                            gst::StreamError::Failed,
                            ("downstream refused a buffer: {e:?}")
                        );
                        false
                    }
                }
            }
            Ok(None) => {
                let guard = lock(&self.state);
                if !stop.load(Ordering::SeqCst) {
                    let _ = self.changed.wait_timeout(guard, Duration::from_millis(100));
                }
                true
            }
            Err(gst::FlowError::Flushing) => {
                std::thread::sleep(WAIT_STEP);
                true
            }
            Err(_) => false,
        }
    }

    /// A flush: pending buffers are discarded, their results dropped when they come.
    fn discard_pending(&self) {
        if let Some(state) = lock(&self.state).as_mut() {
            for p in state.pending.drain(..) {
                if let Some(id) = p.id {
                    state.discard.insert(id);
                }
            }
            for id in std::mem::take(&mut state.ready).into_keys() {
                // Taken already: nothing to drop later.
                state.discard.remove(&id);
            }
            state.in_flight = 0;
        }
    }

    fn rules(settings: &Settings) -> Rules {
        Rules {
            match_iou: settings.match_iou as f32,
            reseed_after: settings.reseed_after,
            max_objects: settings.max_objects as usize,
        }
    }

    fn detections(settings: &Settings, buf: &gst::BufferRef) -> Vec<super::detector::Detection> {
        let types = super::detector::parse_types(&settings.prompt_roi_types);
        match settings.prompt_source {
            PromptSource::Property => Vec::new(),
            PromptSource::RoiMeta => prompts::roi_detections(buf, &types, settings.min_confidence),
            #[cfg(feature = "v1_24")]
            PromptSource::Analytics => {
                prompts::analytics_detections(buf, &types, settings.min_confidence)
            }
            #[cfg(not(feature = "v1_24"))]
            PromptSource::Analytics => Vec::new(),
        }
    }
}

/// The live output thread's loop. A panic in it (a bug) becomes an element error, and drains
/// and new buffers stop waiting for the thread, instead of a silent stall.
fn output_loop(weak: &glib::WeakRef<super::EdgeTamTrack>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let Some(el) = weak.upgrade() else {
            return;
        };
        let imp = el.imp();
        let round =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| imp.output_round(stop)));
        match round {
            Ok(true) => {}
            Ok(false) => {
                // An error was posted where it happened (or downstream refused a buffer).
                imp.mark_failed(&imp.output_failed);
                return;
            }
            Err(panic) => {
                imp.fail_after_panic(
                    &imp.output_failed,
                    &format!(
                        "the live output thread panicked: {}",
                        panic_message(panic.as_ref())
                    ),
                );
                return;
            }
        }
    }
}

#[glib::object_subclass]
impl ObjectSubclass for EdgeTamTrack {
    const NAME: &'static str = "GstEdgeTamTrack";
    type Type = super::EdgeTamTrack;
    type ParentType = gst_video::VideoFilter;
}

/// The element instance behind a signal's first argument.
fn this(args: &[glib::Value]) -> Option<super::EdgeTamTrack> {
    args.first()?.get::<super::EdgeTamTrack>().ok()
}

impl ObjectImpl for EdgeTamTrack {
    fn constructed(&self) {
        self.parent_constructed();
        // `GstVideoFilter` turns QoS on; dropping buffers is opt-in here (`qos`, `live-mode`).
        self.obj().set_qos(false);
    }

    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(settings::properties);
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        // GLib does not catch a Rust panic in a property vfunc (it would abort the process):
        // a panic becomes an element error and the value is not set.
        self.contained(
            &format!("a write of `{}`", pspec.name()),
            || (),
            || self.set_property_inner(value, pspec),
        );
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        self.contained(
            &format!("a read of `{}`", pspec.name()),
            || pspec.default_value().clone(),
            || self.property_inner(pspec),
        )
    }

    fn signals() -> &'static [glib::subclass::Signal] {
        static SIGNALS: LazyLock<Vec<glib::subclass::Signal>> = LazyLock::new(signals);
        SIGNALS.as_ref()
    }
}

impl EdgeTamTrack {
    fn set_property_inner(&self, value: &glib::Value, pspec: &glib::ParamSpec) {
        if self
            .take_fault(|f| *f == TestFault::PropertyPanic)
            .is_some()
        {
            panic!("injected test fault: a property write panics");
        }
        if pspec.name() == "prompts" {
            if let Ok(Some(text)) = value.get::<Option<String>>() {
                if let Err(e) = edgetam_pipeline::PromptSpec::parse_list(&text) {
                    gst::error!(
                        CAT,
                        imp = self,
                        "bad prompts `{text}`: {e} (the element will not start)"
                    );
                }
            }
        }
        if !lock(&self.settings).set(pspec.name(), value) {
            gst::warning!(CAT, imp = self, "no writable property {}", pspec.name());
        }
    }

    fn property_inner(&self, pspec: &glib::ParamSpec) -> glib::Value {
        if self
            .take_fault(|f| *f == TestFault::PropertyPanic)
            .is_some()
        {
            panic!("injected test fault: a property read panics");
        }
        {
            let st = lock(&self.stats);
            match pspec.name() {
                "fps" => return st.fps().to_value(),
                "latency" => return st.latency.nseconds().to_value(),
                "tracked" => return st.tracked.to_value(),
                "skipped" => return st.skipped.to_value(),
                _ => {}
            }
        }
        lock(&self.settings)
            .get(pspec.name())
            .unwrap_or_else(|| pspec.default_value().clone())
    }
}

/// An action signal returning `TRUE` when `f` queued its command (`f`'s `None`: a missing or
/// mistyped argument, refused as `FALSE`).
fn action<const N: usize>(
    name: &str,
    params: [glib::Type; N],
    f: fn(&EdgeTamTrack, &[glib::Value]) -> Option<bool>,
) -> glib::subclass::Signal {
    let what = format!("the {name} signal");
    glib::subclass::Signal::builder(name)
        .param_types(params)
        .return_type::<bool>()
        .action()
        .class_handler(move |args| {
            // GLib does not catch a Rust panic in a signal handler (it would abort the
            // process): a panic becomes an element error and the signal returns FALSE.
            let ok = this(args).and_then(|el| {
                let imp = el.imp();
                imp.contained(
                    &what,
                    || None,
                    || {
                        if imp.take_fault(|f| *f == TestFault::SignalPanic).is_some() {
                            panic!("injected test fault: a signal handler panics");
                        }
                        f(imp, args)
                    },
                )
            });
            Some(ok.unwrap_or(false).to_value())
        })
        .build()
}

/// Argument `i` of a signal as a string (`NULL`: empty).
fn string_arg(args: &[glib::Value], i: usize) -> Option<String> {
    Some(
        args.get(i)?
            .get::<Option<String>>()
            .ok()?
            .unwrap_or_default(),
    )
}

fn signals() -> Vec<glib::subclass::Signal> {
    let (uint, double, string) = (
        u32::static_type(),
        f64::static_type(),
        String::static_type(),
    );
    vec![
        action(
            "add-box",
            [uint, double, double, double, double],
            |imp, args| {
                let obj = args.get(1)?.get::<u32>().ok()?;
                let c: Vec<f32> = (2..6)
                    .map(|i| args.get(i)?.get::<f64>().ok().map(|v| v as f32))
                    .collect::<Option<_>>()?;
                let prompt = Prompt::from_box(c[0], c[1], c[2], c[3]);
                Some(imp.command(Command::Add(obj, ObjectPrompt::Points(prompt))))
            },
        ),
        action("add-points", [uint, string], |imp, args| {
            Some(imp.add_points(args.get(1)?.get::<u32>().ok()?, &string_arg(args, 2)?))
        }),
        action("add-prompt", [string], |imp, args| {
            Some(imp.add_spec(&string_arg(args, 1)?))
        }),
        action("remove-object", [uint], |imp, args| {
            Some(imp.command(Command::Remove(args.get(1)?.get::<u32>().ok()?)))
        }),
        action("reset", [], |imp, _| Some(imp.command(Command::Reset))),
    ]
}

impl GstObjectImpl for EdgeTamTrack {}

impl ElementImpl for EdgeTamTrack {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "EdgeTAM object tracker",
                "Filter/Analyzer/Video",
                "Tracks prompted or detected objects with EdgeTAM; results as region-of-interest metas with masks, bus messages and optional overlays",
                "edgetam-rs developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            let caps = gst_video::VideoCapsBuilder::new()
                .format_list(convert::FORMATS)
                .build();
            let src = gst::PadTemplate::new(
                "src",
                gst::PadDirection::Src,
                gst::PadPresence::Always,
                &caps,
            );
            let sink = gst::PadTemplate::new(
                "sink",
                gst::PadDirection::Sink,
                gst::PadPresence::Always,
                &caps,
            );
            // The templates are static and valid; a failure here is a programming error.
            [src, sink].into_iter().flatten().collect()
        });
        TEMPLATES.as_ref()
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        // As the bindings do: a state change down never fails, even after a panic.
        let fallback = match transition {
            gst::StateChange::PlayingToPaused
            | gst::StateChange::PausedToReady
            | gst::StateChange::ReadyToNull => Ok(gst::StateChangeSuccess::Success),
            _ => Err(gst::StateChangeError),
        };
        self.contained(
            "a state change",
            || fallback,
            || {
                match transition {
                    // A streaming thread waiting for a result must give up before the pads
                    // stop.
                    gst::StateChange::PausedToReady => self.flushing.store(true, Ordering::SeqCst),
                    gst::StateChange::ReadyToPaused => self.flushing.store(false, Ordering::SeqCst),
                    _ => {}
                }
                self.parent_change_state(transition)
            },
        )
    }
}

impl BaseTransformImpl for EdgeTamTrack {
    const MODE: gst_base::subclass::BaseTransformMode =
        gst_base::subclass::BaseTransformMode::AlwaysInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = false;
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        // A start after a panic begins from fresh state (`stop` dropped the old one).
        self.panicked.store(false, Ordering::SeqCst);
        self.contained(
            "start",
            || {
                Err(gst::error_msg!(
                    gst::CoreError::StateChange,
                    ("the element panicked while starting")
                ))
            },
            || self.start_tracking(),
        )
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        self.contained("stop", || Ok(()), || self.stop_tracking())
    }

    fn sink_event(&self, event: gst::Event) -> bool {
        self.guarded("a sink event", || false, || self.handle_sink_event(event))
    }

    fn src_event(&self, event: gst::Event) -> bool {
        self.guarded("a src event", || false, || self.handle_src_event(event))
    }

    fn query(&self, direction: gst::PadDirection, query: &mut gst::QueryRef) -> bool {
        self.guarded("a query", || false, || self.answer_query(direction, query))
    }

    fn submit_input_buffer(
        &self,
        _is_discont: bool,
        buf: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.guarded(
            "a buffer",
            || Err(gst::FlowError::Error),
            || self.take_buffer(buf),
        )
    }

    fn generate_output(&self) -> Result<GenerateOutputSuccess, gst::FlowError> {
        self.guarded(
            "the output",
            || Err(gst::FlowError::Error),
            || self.next_buffer_out(),
        )
    }
}

impl VideoFilterImpl for EdgeTamTrack {
    fn set_info(
        &self,
        incaps: &gst::Caps,
        in_info: &gst_video::VideoInfo,
        outcaps: &gst::Caps,
        out_info: &gst_video::VideoInfo,
    ) -> Result<(), gst::LoggableError> {
        self.guarded(
            "new caps",
            || Err(gst::loggable_error!(CAT, "the element panicked")),
            || self.apply_caps(incaps, in_info, outcaps, out_info),
        )
    }
}

/// The bodies of the element's calls (each behind [`EdgeTamTrack::guarded`] or
/// [`EdgeTamTrack::contained`]).
impl EdgeTamTrack {
    fn start_tracking(&self) -> Result<(), gst::ErrorMessage> {
        let settings = self.settings();
        let mut state = self.load(&settings).map_err(|e| {
            let kind = match e {
                StartError::NoModel
                | StartError::Device(_)
                | StartError::Precision(_)
                | StartError::Prompts(_)
                | StartError::NoAnalytics => gst::ResourceError::Settings,
                StartError::MissingModel { .. } => gst::ResourceError::NotFound,
                _ => gst::ResourceError::OpenRead,
            };
            gst::error_msg!(kind, ("{e}"))
        })?;
        let early: Vec<Command> = std::mem::take(&mut *lock(&self.early));
        let max = settings.max_objects as usize;
        let refused: Vec<_> = early
            .into_iter()
            .map(|c| state.objects.apply(&state.pipeline, c, max, 0))
            .collect();
        *lock(&self.stats) = Stats::default();
        *lock(&self.qos) = Qos::default();
        *lock(&self.upstream) = gst::ClockTime::ZERO;
        self.flushing.store(false, Ordering::SeqCst);
        *lock(&self.state) = Some(state);
        for r in refused {
            self.warn_refused(r);
        }
        if settings.live_mode {
            self.start_output_thread()?;
        }
        gst::info!(CAT, imp = self, "started");
        Ok(())
    }

    fn stop_tracking(&self) -> Result<(), gst::ErrorMessage> {
        self.flushing.store(true, Ordering::SeqCst);
        self.stop_output_thread();
        // Dropping the pipeline stops and joins its threads.
        let state = lock(&self.state).take();
        drop(state);
        gst::info!(CAT, imp = self, "stopped");
        Ok(())
    }

    fn handle_sink_event(&self, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::CustomDownstream(_)
            | gst::EventView::CustomDownstreamOob(_)
            | gst::EventView::CustomBoth(_)
            | gst::EventView::CustomBothOob(_)
                if self.prompt_event(&event) =>
            {
                return true;
            }
            gst::EventView::FlushStart(_) => {
                self.flushing.store(true, Ordering::SeqCst);
            }
            gst::EventView::FlushStop(_) => {
                self.discard_pending();
                *lock(&self.qos) = Qos::default();
                self.flushing.store(false, Ordering::SeqCst);
            }
            _ if event.is_serialized() => self.drain(),
            _ => {}
        }
        self.parent_sink_event(event)
    }

    fn handle_src_event(&self, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::CustomUpstream(_) | gst::EventView::CustomBoth(_)
                if self.prompt_event(&event) =>
            {
                return true;
            }
            gst::EventView::Qos(q) => {
                let (_type, _proportion, diff, timestamp) = q.get();
                lock(&self.qos).update(diff, timestamp);
            }
            _ => {}
        }
        self.parent_src_event(event)
    }

    fn answer_query(&self, direction: gst::PadDirection, query: &mut gst::QueryRef) -> bool {
        if direction == gst::PadDirection::Src {
            if let gst::QueryViewMut::Latency(_) = query.view_mut() {
                if !BaseTransformImplExt::parent_query(self, direction, query) {
                    return false;
                }
                if let gst::QueryViewMut::Latency(q) = query.view_mut() {
                    let ours = lock(&self.stats).latency;
                    let (live, min, max) = q.result();
                    *lock(&self.upstream) = min;
                    q.set(live, min + ours, max.map(|m| m + ours));
                    gst::debug!(CAT, imp = self, "latency: upstream {min}, ours {ours}");
                }
                return true;
            }
        }
        BaseTransformImplExt::parent_query(self, direction, query)
    }

    fn take_buffer(&self, buf: gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let settings = self.settings();
        let mut refused = Vec::new();
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            drop(guard);
            gst::element_imp_error!(self, gst::CoreError::Failed, ("not started"));
            return Err(gst::FlowError::Error);
        };
        let Some(info) = state.info.clone() else {
            return Err(gst::FlowError::NotNegotiated);
        };
        let index = state.buffers;
        state.buffers += 1;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.scheduled)
            .into_iter()
            .partition(|(f, _, _)| *f == index);
        state.scheduled = later.into_iter().filter(|(f, _, _)| *f > index).collect();
        let max = settings.max_objects as usize;
        for (_, obj, prompt) in due {
            refused.push(state.objects.apply(
                &state.pipeline,
                Command::Add(obj, prompt),
                max,
                index,
            ));
        }
        // `qos=true` (off by default): buffers downstream reports late are dropped entirely.
        if self.obj().is_qos() {
            if let Some(rt) = self.running_time(&buf) {
                if lock(&self.qos).late(rt, lock(&self.stats).latency) {
                    drop(guard);
                    gst::debug!(CAT, imp = self, "buffer {index} dropped (qos)");
                    return Ok(gst::FlowSuccess::Ok);
                }
            }
        }
        let running_time = self.running_time(&buf);
        if settings.live_mode {
            if self.output_failed.load(Ordering::SeqCst) {
                return Err(gst::FlowError::Error);
            }
            if let Err(e) = self.collect_ready(state) {
                drop(guard);
                return Err(e);
            }
        }
        let track = !settings.live_mode || self.live_decision(state, running_time);
        if !track {
            lock(&self.stats).skipped += 1;
            state.pending.push_back(Pending {
                buf,
                index,
                id: None,
                running_time,
                decisions: Vec::new(),
            });
            drop(guard);
            for r in refused {
                self.warn_refused(r);
            }
            return Ok(gst::FlowSuccess::Ok);
        }
        let (decisions, detector_refused) = match settings.prompt_source {
            PromptSource::Property => (Vec::new(), Vec::new()),
            _ => {
                let detections = Self::detections(&settings, &buf);
                let pipeline = state.pipeline.clone();
                state
                    .objects
                    .detections(&pipeline, detections, Self::rules(&settings), index)
            }
        };
        refused.extend(detector_refused.into_iter().map(Err));
        let pushed = {
            let vframe = gst_video::VideoFrameRef::from_buffer_ref_readable(buf.as_ref(), &info)
                .map_err(|e| format!("cannot map the buffer: {e}"));
            vframe.and_then(|vframe| {
                let mut frame = convert::to_frame(&vframe).map_err(|e| e.to_string())?;
                if let Some(pts) = buf.pts() {
                    frame = frame.with_timestamp(Duration::from_nanos(pts.nseconds()));
                }
                state
                    .pipeline
                    .push(frame)
                    .map_err(|e| format!("tracking pipeline: {e}"))
            })
        };
        let id = match pushed {
            Ok(id) => id,
            Err(e) => {
                drop(guard);
                gst::element_imp_error!(self, gst::StreamError::Failed, ("{e}"));
                return Err(gst::FlowError::Error);
            }
        };
        state.in_flight += 1;
        state.pending.push_back(Pending {
            buf,
            index,
            id: Some(id),
            running_time,
            decisions,
        });
        drop(guard);
        for r in refused {
            self.warn_refused(r);
        }
        Ok(gst::FlowSuccess::Ok)
    }

    fn next_buffer_out(&self) -> Result<GenerateOutputSuccess, gst::FlowError> {
        if lock(&self.output).is_some() {
            // Live mode: the output thread pushes.
            self.changed.notify_all();
            return Ok(GenerateOutputSuccess::NoOutput);
        }
        Ok(match self.next_output(false, false)? {
            Some(buf) => GenerateOutputSuccess::Buffer(buf),
            None => GenerateOutputSuccess::NoOutput,
        })
    }

    fn apply_caps(
        &self,
        incaps: &gst::Caps,
        in_info: &gst_video::VideoInfo,
        outcaps: &gst::Caps,
        out_info: &gst_video::VideoInfo,
    ) -> Result<(), gst::LoggableError> {
        if let Err(e) = convert::check_format(in_info.format(), in_info.width(), in_info.height()) {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("{e}: put videoconvert / videoscale in front of edgetamtrack")
            );
            return Err(gst::loggable_error!(CAT, "unsupported caps {incaps}: {e}"));
        }
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return Err(gst::loggable_error!(
                CAT,
                "caps set before the element started"
            ));
        };
        let mut warning = None;
        if let Some(old) = &state.info {
            if (old.width(), old.height()) != (in_info.width(), in_info.height()) {
                warning = Some(format!(
                    "resolution changed from {}x{} to {}x{}: tracking reset (every object forgotten)",
                    old.width(),
                    old.height(),
                    in_info.width(),
                    in_info.height()
                ));
                state.objects.clear();
                state.scheduled.clear();
                state.last = None;
                if let Err(e) = state.pipeline.reset() {
                    gst::warning!(CAT, imp = self, "reset failed: {e}");
                }
            }
        }
        state.info = Some(in_info.clone());
        drop(guard);
        if let Some(msg) = warning {
            gst::element_imp_warning!(self, gst::StreamError::Format, ("{msg}"));
        }
        gst::debug!(CAT, imp = self, "caps {incaps} -> {outcaps}");
        self.parent_set_info(incaps, in_info, outcaps, out_info)
    }
}
