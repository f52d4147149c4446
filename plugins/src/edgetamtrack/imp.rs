//! Implementation of `edgetamtrack` (see the module docs of [`super`]).

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use edgetam_pipeline::{Outcome, Pipeline, PromptSpec};
use edgetam_tracker::{parse_device, EdgeTam, FrameResult, Mask, ObjectPrompt, Prompt};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::prelude::*;
use gst_video::subclass::prelude::*;

use super::Overlay;
use crate::{convert, overlay, results};

static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "edgetamtrack",
        gst::DebugColorFlags::empty(),
        Some("EdgeTAM video object tracker"),
    )
});

const DEFAULT_DEVICE: &str = "cpu";
const DEFAULT_ENCODER_AHEAD: bool = false;
const DEFAULT_PRECISION: &str = "f32";
const DEFAULT_OVERLAY_ALPHA: f64 = 0.5;
const DEFAULT_MAX_OBJECTS: u32 = 16;
const DEFAULT_LIVE_MODE: bool = false;
const DEFAULT_POST_MESSAGES: bool = false;
/// Tracked buffers the `fps` and `latency` statistics look back on.
const FPS_WINDOW: usize = 30;
const LATENCY_WINDOW: usize = 16;

#[derive(Debug, Clone)]
struct Settings {
    model: Option<PathBuf>,
    device: String,
    prompts: Option<String>,
    encoder_ahead: bool,
    precision: String,
    overlay: Overlay,
    overlay_alpha: f64,
    max_objects: u32,
    live_mode: bool,
    post_messages: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            model: None,
            device: DEFAULT_DEVICE.into(),
            prompts: None,
            encoder_ahead: DEFAULT_ENCODER_AHEAD,
            precision: DEFAULT_PRECISION.into(),
            overlay: Overlay::empty(),
            overlay_alpha: DEFAULT_OVERLAY_ALPHA,
            max_objects: DEFAULT_MAX_OBJECTS,
            live_mode: DEFAULT_LIVE_MODE,
            post_messages: DEFAULT_POST_MESSAGES,
        }
    }
}

/// A runtime command from a signal or an event.
#[derive(Debug, Clone)]
enum Command {
    Add(u32, ObjectPrompt),
    Remove(u32),
    Reset,
}

/// Everything that lives between `start` and `stop`.
struct State {
    pipeline: Arc<Pipeline>,
    info: Option<gst_video::VideoInfo>,
    /// Buffers seen since `start` (the index `frame=` of the `prompts` property refers to).
    buffers: u64,
    /// `prompts` entries waiting for their buffer index.
    scheduled: Vec<(u64, u32, ObjectPrompt)>,
    /// Objects the element has asked the tracker for (for `max-objects`).
    objects: BTreeSet<u32>,
}

#[derive(Debug, Default)]
struct Stats {
    /// Processing times of the last tracked buffers.
    times: VecDeque<Duration>,
    /// The processing latency answered to LATENCY queries.
    latency: gst::ClockTime,
    skipped: u64,
}

/// The last QoS event from downstream: buffers whose running time is before `earliest` will
/// be late.
#[derive(Debug, Default, Clone, Copy)]
struct Qos {
    earliest: Option<gst::ClockTime>,
}

#[derive(Default)]
pub struct EdgeTamTrack {
    settings: Mutex<Settings>,
    state: Mutex<Option<State>>,
    /// Commands sent before `start`, applied when it runs.
    early: Mutex<Vec<Command>>,
    stats: Mutex<Stats>,
    qos: Mutex<Qos>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why the element cannot start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("no model: set the `model` property to a folder with config.json + model.safetensors or an edgetam.pt")]
    NoModel,
    #[error("model {path} does not exist")]
    MissingModel { path: PathBuf },
    #[error("cannot load model {path}: {source}")]
    Model {
        path: PathBuf,
        source: edgetam_tracker::Error,
    },
    #[error("bad `device`: {0}")]
    Device(edgetam_tracker::Error),
    #[error("bad `precision`: {0}")]
    Precision(String),
    #[error("bad `prompts`: {0}")]
    Prompts(#[from] edgetam_pipeline::PromptSpecError),
    #[error("`prompts`: object {obj}: {message}")]
    MaskFile { obj: u32, message: String },
    #[error("cannot start the tracking pipeline: {0}")]
    Pipeline(edgetam_pipeline::Error),
}

/// A mask prompt from a PNG (nonzero = inside); its size is checked against the frame when
/// it is applied.
fn read_mask(path: &Path) -> Result<Mask, String> {
    let img = image::open(path)
        .map_err(|e| format!("cannot read mask {}: {e}", path.display()))?
        .to_luma8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    let mask = Mask::new(w, h, img.into_raw()).map_err(|e| e.to_string())?;
    if mask.area() == 0 {
        return Err(format!(
            "mask {} is empty (no nonzero pixel)",
            path.display()
        ));
    }
    Ok(mask)
}

fn spec_prompt(spec: &PromptSpec) -> Result<ObjectPrompt, StartError> {
    match (&spec.mask, spec.points_prompt()) {
        (Some(path), _) => {
            read_mask(path)
                .map(ObjectPrompt::Mask)
                .map_err(|message| StartError::MaskFile {
                    obj: spec.obj,
                    message,
                })
        }
        (None, Some(p)) => Ok(ObjectPrompt::Points(p)),
        (None, None) => Ok(ObjectPrompt::Points(Prompt::default())),
    }
}

/// Queues `cmd` into the running pipeline; the reason when refused.
fn apply(state: &mut State, cmd: Command, max: usize) -> Result<(), String> {
    let r = match cmd {
        Command::Add(obj, prompt) => {
            if !state.objects.contains(&obj) && state.objects.len() >= max {
                return Err(format!(
                    "max-objects ({max}) reached: the prompt for object {obj} is refused"
                ));
            }
            let r = state.pipeline.add_prompt(obj, prompt);
            if r.is_ok() {
                state.objects.insert(obj);
            }
            r
        }
        Command::Remove(obj) => {
            state.objects.remove(&obj);
            state.pipeline.remove_object(obj)
        }
        Command::Reset => {
            state.objects.clear();
            state.pipeline.reset()
        }
    };
    r.map_err(|e| e.to_string())
}

fn clock_time(d: Duration) -> gst::ClockTime {
    gst::ClockTime::from_nseconds(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl EdgeTamTrack {
    fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    fn load(&self, settings: &Settings) -> Result<State, StartError> {
        let spec = settings.model.clone().ok_or(StartError::NoModel)?;
        // A hub repository id (owner/name) is fetched into the Hugging Face cache (or found there).
        let path = edgetam_tracker::ModelSource::parse(&spec)
            .resolve()
            .map_err(|source| StartError::Model { path: spec, source })?;
        if !path.exists() {
            return Err(StartError::MissingModel { path });
        }
        let device = parse_device(&settings.device).map_err(StartError::Device)?;
        let precision: edgetam_tracker::Precision =
            settings.precision.parse().map_err(StartError::Precision)?;
        let specs = PromptSpec::parse_list(settings.prompts.as_deref().unwrap_or(""))?;
        let mut scheduled = Vec::new();
        for spec in &specs {
            scheduled.push((spec.frame as u64, spec.obj, spec_prompt(spec)?));
        }
        let t = Instant::now();
        let mut model = EdgeTam::load(&path, &device).map_err(|source| StartError::Model {
            path: path.clone(),
            source,
        })?;
        if model.set_precision(precision) != precision {
            return Err(StartError::Precision(format!(
                "{precision} is not available here (the bf16 mode needs a CPU with AVX512-BF16)"
            )));
        }
        gst::info!(
            CAT,
            imp = self,
            "loaded {} in {:.2} s",
            path.display(),
            t.elapsed().as_secs_f64()
        );
        let pipeline = Pipeline::builder(Arc::new(model))
            .queue_capacity(1)
            .encoder_ahead(settings.encoder_ahead)
            .build()
            .map_err(StartError::Pipeline)?;
        Ok(State {
            pipeline: Arc::new(pipeline),
            info: None,
            buffers: 0,
            scheduled,
            objects: BTreeSet::new(),
        })
    }

    /// Queues a command (or keeps it for `start`); false when refused.
    fn command(&self, cmd: Command) -> bool {
        let max = lock(&self.settings).max_objects as usize;
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            let mut early = lock(&self.early);
            if let Command::Add(obj, _) = &cmd {
                let mut known = BTreeSet::new();
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
        let r = apply(state, cmd, max);
        drop(guard);
        self.warn_refused(r)
    }

    /// Posts the warning of a refused command (never while holding the state lock: a
    /// synchronous bus handler may call back into the element).
    fn warn_refused(&self, r: Result<(), String>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) => {
                gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{e}"));
                false
            }
        }
    }

    fn add_spec(&self, spec: &str) -> bool {
        let parsed = PromptSpec::parse(spec)
            .map_err(StartError::from)
            .and_then(|s| spec_prompt(&s).map(|p| (s.obj, p)));
        match parsed {
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

    fn add_points(&self, obj: u32, points: &str) -> bool {
        let parsed: Result<Vec<_>, String> = points
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| edgetam_pipeline::parse_point(p, "point"))
            .collect();
        match parsed {
            Ok(p) if !p.is_empty() => self.command(Command::Add(
                obj,
                ObjectPrompt::Points(Prompt::from_points(p)),
            )),
            Ok(_) => {
                gst::element_imp_warning!(
                    self,
                    gst::LibraryError::Settings,
                    ("add-points for object {obj}: no point given (expected `x,y,label;...`)")
                );
                false
            }
            Err(e) => {
                gst::element_imp_warning!(
                    self,
                    gst::LibraryError::Settings,
                    ("add-points for object {obj}: {e}")
                );
                false
            }
        }
    }

    /// Handles a custom prompt event; true when it was one (it is consumed).
    fn prompt_event(&self, event: &gst::Event) -> bool {
        let Some(s) = event.structure() else {
            return false;
        };
        if s.name() != results::PROMPT_EVENT {
            return false;
        }
        match s.get::<&str>(results::PROMPT_EVENT_SPEC) {
            Ok(spec) => {
                gst::debug!(CAT, imp = self, "prompt event: {spec}");
                self.add_spec(spec);
            }
            Err(e) => gst::element_imp_warning!(
                self,
                gst::LibraryError::Settings,
                (
                    "{} event without a string field `{}`: {e}",
                    results::PROMPT_EVENT,
                    results::PROMPT_EVENT_SPEC
                )
            ),
        }
        true
    }

    /// Whether, in live mode, this buffer is too late to be worth tracking.
    fn is_late(&self, buf: &gst::BufferRef, info: &gst_video::VideoInfo) -> bool {
        let obj = self.obj();
        let Some(rt) = self.running_time(buf) else {
            return false;
        };
        let duration = buf.duration().or_else(|| {
            let fps = info.fps();
            (fps.numer() > 0).then(|| {
                gst::ClockTime::SECOND
                    .mul_div_floor(fps.denom() as u64, fps.numer() as u64)
                    .unwrap_or(gst::ClockTime::ZERO)
            })
        });
        let earliest = lock(&self.qos).earliest;
        if let Some(earliest) = earliest {
            let ours = lock(&self.stats).latency;
            if rt + ours < earliest {
                gst::debug!(CAT, imp = self, "late by QoS: {rt} before {earliest}");
                return true;
            }
        }
        let (Some(clock), Some(base), Some(duration)) = (obj.clock(), obj.base_time(), duration)
        else {
            return false;
        };
        let now = clock.time().checked_sub(base);
        match now {
            Some(now) if now > rt + duration => {
                gst::debug!(CAT, imp = self, "late: {rt} arrives at {now}");
                true
            }
            _ => false,
        }
    }

    fn running_time(&self, buf: &gst::BufferRef) -> Option<gst::ClockTime> {
        let pts = buf.pts()?;
        let segment = self.obj().segment();
        segment
            .downcast_ref::<gst::ClockTime>()
            .and_then(|s| s.to_running_time(pts))
    }

    /// Records one tracked buffer's processing time; posts a LATENCY message when the
    /// reported latency must grow (or first becomes known).
    fn record(&self, elapsed: Duration) {
        let post = {
            let mut st = lock(&self.stats);
            st.times.push_back(elapsed);
            while st.times.len() > FPS_WINDOW {
                st.times.pop_front();
            }
            let recent = st
                .times
                .iter()
                .rev()
                .take(LATENCY_WINDOW)
                .max()
                .copied()
                .unwrap_or_default();
            let recent = clock_time(recent);
            let old = st.latency;
            if old.is_zero() || recent > old + old / 5 || recent < old / 2 {
                st.latency = recent;
                true
            } else {
                false
            }
        };
        if post {
            gst::debug!(
                CAT,
                imp = self,
                "processing latency now {}",
                lock(&self.stats).latency
            );
            let _ = self
                .obj()
                .post_message(gst::message::Latency::builder().src(&*self.obj()).build());
        }
    }

    fn fps(&self) -> f64 {
        let st = lock(&self.stats);
        let total: f64 = st.times.iter().map(Duration::as_secs_f64).sum();
        if total > 0.0 {
            st.times.len() as f64 / total
        } else {
            0.0
        }
    }

    fn attach(&self, buf: &mut gst::BufferRef, r: &FrameResult) {
        for o in &r.objects {
            let Some([x0, y0, x1, y1]) = o.bbox else {
                continue;
            };
            if !o.visible {
                continue;
            }
            let rect = (
                x0 as u32,
                y0 as u32,
                (x1 - x0 + 1) as u32,
                (y1 - y0 + 1) as u32,
            );
            let mask = gst::Buffer::from_slice(o.mask.data.clone());
            let param = gst::Structure::builder(results::PARAM_NAME)
                .field("id", o.id)
                .field("score", o.score)
                .field("visible", o.visible)
                .field("area", o.area as u64)
                .field("mask", mask)
                .field("mask-width", o.mask.width as u32)
                .field("mask-height", o.mask.height as u32)
                .field("frame", r.frame_index)
                .build();
            let mut meta = gst_video::VideoRegionOfInterestMeta::add(buf, results::ROI_TYPE, rect);
            meta.set_id(i32::try_from(o.id).unwrap_or(i32::MAX));
            meta.add_param(param);
        }
        #[cfg(feature = "v1_24")]
        analytics::add(buf, &r.objects);
    }

    fn message(
        &self,
        buf: &gst::BufferRef,
        index: u64,
        r: &FrameResult,
        elapsed: Duration,
    ) -> gst::Message {
        let objects: Vec<glib::SendValue> = r
            .objects
            .iter()
            .map(|o| {
                let [x0, y0, x1, y1] = o.bbox.unwrap_or_default();
                let (w, h) = match o.bbox {
                    Some(_) => ((x1 - x0 + 1) as u32, (y1 - y0 + 1) as u32),
                    None => (0, 0),
                };
                gst::Structure::builder(results::OBJECT_NAME)
                    .field("id", o.id)
                    .field("score", o.score)
                    .field("visible", o.visible)
                    .field("area", o.area as u64)
                    .field("x", x0 as u32)
                    .field("y", y0 as u32)
                    .field("width", w)
                    .field("height", h)
                    .build()
                    .to_send_value()
            })
            .collect();
        let none = u64::MAX;
        let s = gst::Structure::builder(results::MESSAGE_NAME)
            .field(
                "running-time",
                self.running_time(buf).map_or(none, |t| t.nseconds()),
            )
            .field("pts", buf.pts().map_or(none, |t| t.nseconds()))
            .field("frame", index)
            .field("tracker-frame", r.frame_index)
            .field("processing-time", clock_time(elapsed).nseconds())
            .field("objects", gst::Array::from_values(objects))
            .build();
        gst::message::Element::builder(s).src(&*self.obj()).build()
    }
}

#[cfg(feature = "v1_24")]
mod analytics {
    //! Analytics relation meta (GStreamer >= 1.24): per visible object one object-detection
    //! Mtd (type `edgetam`, the box, confidence = sigmoid of the object score) and one
    //! tracking Mtd (tracking id = object id; first-seen is not tracked: 0), related to each
    //! other with `RELATE_TO`.
    use gst_analytics::prelude::*;
    use gst_analytics::{AnalyticsRelationMeta, RelTypes};

    pub(super) fn add(buf: &mut gst::BufferRef, objects: &[edgetam_tracker::ObjectResult]) {
        let visible: Vec<_> = objects
            .iter()
            .filter(|o| o.visible)
            .filter_map(|o| Some((o, o.bbox?)))
            .collect();
        if visible.is_empty() {
            return;
        }
        let mut meta = AnalyticsRelationMeta::add(buf);
        let quark = gst::glib::Quark::from_str(crate::results::ROI_TYPE);
        for (o, [x0, y0, x1, y1]) in visible {
            let conf = 1.0 / (1.0 + (-o.score).exp());
            let (w, h) = ((x1 - x0 + 1) as i32, (y1 - y0 + 1) as i32);
            let od = match meta.add_od_mtd(quark, x0 as i32, y0 as i32, w, h, conf) {
                Ok(m) => m.id(),
                Err(_) => continue,
            };
            let trk = match meta.add_tracking_mtd(u64::from(o.id), gst::ClockTime::ZERO) {
                Ok(m) => m.id(),
                Err(_) => continue,
            };
            let _ = meta.set_relation(RelTypes::RELATE_TO, od, trk);
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
        // `GstVideoFilter` turns QoS on; dropping buffers is opt-in here (`qos` or `live-mode`).
        self.obj().set_qos(false);
    }

    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(|| {
            vec![
                glib::ParamSpecString::builder("model")
                    .nick("Model")
                    .blurb("EdgeTAM model, loaded when the element starts: a folder with config.json + model.safetensors, an edgetam.pt, or a Hugging Face hub repository id such as yonigozlan/EdgeTAM-hf (fetched once into the Hugging Face cache, HF_HOME; HF_HUB_OFFLINE=1 reads only the cache)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("device")
                    .nick("Device")
                    .blurb("Compute device: cpu or cuda:N")
                    .default_value(Some(DEFAULT_DEVICE))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("prompts")
                    .nick("Prompts")
                    .blurb("Initial objects, as the CLI's --prompt, several separated by |: obj=1;frame=0;box=x0,y0,x1,y1 | obj=2;point=x,y,1;point=x,y,0 | obj=3;frame=5;mask=PATH (frame = buffer index since start)")
                    .mutable_ready()
                    .build(),
                glib::ParamSpecBoolean::builder("encoder-ahead")
                    .nick("Encoder ahead")
                    .blurb("Run the image encoder on its own thread (one buffer in flight: no overlap between frames; identical results)")
                    .default_value(DEFAULT_ENCODER_AHEAD)
                    .mutable_ready()
                    .build(),
                glib::ParamSpecString::builder("precision")
                    .nick("Precision")
                    .blurb("f32 (exact) or bf16 (fast mode: the heaviest products in bf16 with f32 accumulation, masks within IoU 0.99 of f32; CPUs with AVX512-BF16)")
                    .default_value(Some(DEFAULT_PRECISION))
                    .mutable_ready()
                    .build(),
                glib::ParamSpecFlags::builder::<Overlay>("overlay")
                    .nick("Overlay")
                    .blurb("What to draw into the frames: none, or mask, contour and box combined with +")
                    .default_value(Overlay::empty())
                    .mutable_playing()
                    .build(),
                glib::ParamSpecDouble::builder("overlay-alpha")
                    .nick("Overlay alpha")
                    .blurb("Weight of the object color in the mask tint (0 = invisible, 1 = opaque)")
                    .minimum(0.0)
                    .maximum(1.0)
                    .default_value(DEFAULT_OVERLAY_ALPHA)
                    .mutable_playing()
                    .build(),
                glib::ParamSpecUInt::builder("max-objects")
                    .nick("Maximum objects")
                    .blurb("Most objects tracked at once; prompts for further new objects are refused with a warning")
                    .minimum(1)
                    .maximum(1024)
                    .default_value(DEFAULT_MAX_OBJECTS)
                    .mutable_playing()
                    .build(),
                glib::ParamSpecBoolean::builder("live-mode")
                    .nick("Live mode")
                    .blurb("Skip tracking buffers that arrive more than one frame late (pipeline clock) or that downstream QoS reports late, instead of adding latency; skipped buffers pass without metas")
                    .default_value(DEFAULT_LIVE_MODE)
                    .mutable_playing()
                    .build(),
                glib::ParamSpecBoolean::builder("post-messages")
                    .nick("Post messages")
                    .blurb("Post an edgetam-tracking element message (running time, objects) for every tracked buffer")
                    .default_value(DEFAULT_POST_MESSAGES)
                    .mutable_playing()
                    .build(),
                glib::ParamSpecDouble::builder("fps")
                    .nick("FPS")
                    .blurb("Frames tracked per second of processing time, over the last 30 tracked buffers")
                    .minimum(0.0)
                    .default_value(0.0)
                    .read_only()
                    .build(),
                glib::ParamSpecUInt64::builder("latency")
                    .nick("Latency")
                    .blurb("Processing latency in nanoseconds that the element adds in LATENCY queries (longest of the last 16 tracked buffers)")
                    .default_value(0)
                    .read_only()
                    .build(),
            ]
        });
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let mut s = lock(&self.settings);
        match pspec.name() {
            "model" => {
                s.model = value
                    .get::<Option<String>>()
                    .ok()
                    .flatten()
                    .map(PathBuf::from)
            }
            "device" => {
                s.device = value
                    .get::<Option<String>>()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| DEFAULT_DEVICE.into())
            }
            "prompts" => {
                let p: Option<String> = value.get().ok().flatten();
                if let Some(text) = &p {
                    if let Err(e) = PromptSpec::parse_list(text) {
                        gst::error!(
                            CAT,
                            imp = self,
                            "bad prompts `{text}`: {e} (the element will not start)"
                        );
                    }
                }
                s.prompts = p;
            }
            "encoder-ahead" => s.encoder_ahead = value.get().unwrap_or(DEFAULT_ENCODER_AHEAD),
            "precision" => {
                s.precision = value
                    .get::<Option<String>>()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| DEFAULT_PRECISION.into())
            }
            "overlay" => s.overlay = value.get().unwrap_or(Overlay::empty()),
            "overlay-alpha" => s.overlay_alpha = value.get().unwrap_or(DEFAULT_OVERLAY_ALPHA),
            "max-objects" => s.max_objects = value.get().unwrap_or(DEFAULT_MAX_OBJECTS),
            "live-mode" => s.live_mode = value.get().unwrap_or(DEFAULT_LIVE_MODE),
            "post-messages" => s.post_messages = value.get().unwrap_or(DEFAULT_POST_MESSAGES),
            other => gst::warning!(CAT, imp = self, "no writable property {other}"),
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        match pspec.name() {
            "fps" => return self.fps().to_value(),
            "latency" => return lock(&self.stats).latency.nseconds().to_value(),
            _ => {}
        }
        let s = lock(&self.settings);
        match pspec.name() {
            "model" => s.model.as_ref().map(|p| p.display().to_string()).to_value(),
            "device" => s.device.to_value(),
            "prompts" => s.prompts.to_value(),
            "encoder-ahead" => s.encoder_ahead.to_value(),
            "precision" => s.precision.to_value(),
            "overlay" => s.overlay.to_value(),
            "overlay-alpha" => s.overlay_alpha.to_value(),
            "max-objects" => s.max_objects.to_value(),
            "live-mode" => s.live_mode.to_value(),
            "post-messages" => s.post_messages.to_value(),
            _ => pspec.default_value().clone(),
        }
    }

    fn signals() -> &'static [glib::subclass::Signal] {
        use glib::subclass::Signal;
        static SIGNALS: LazyLock<Vec<Signal>> = LazyLock::new(|| {
            vec![
                Signal::builder("add-box")
                    .param_types([
                        u32::static_type(),
                        f64::static_type(),
                        f64::static_type(),
                        f64::static_type(),
                        f64::static_type(),
                    ])
                    .return_type::<bool>()
                    .action()
                    .class_handler(|args| {
                        let ok = (|| {
                            let el = this(args)?;
                            let obj = args.get(1)?.get::<u32>().ok()?;
                            let c: Vec<f32> = args[2..]
                                .iter()
                                .map(|v| v.get::<f64>().map(|v| v as f32))
                                .collect::<Result<_, _>>()
                                .ok()?;
                            let (x0, y0, x1, y1) = (c[0], c[1], c[2], c[3]);
                            let prompt = Prompt::from_box(x0, y0, x1, y1);
                            Some(
                                el.imp()
                                    .command(Command::Add(obj, ObjectPrompt::Points(prompt))),
                            )
                        })();
                        Some(ok.unwrap_or(false).to_value())
                    })
                    .build(),
                Signal::builder("add-points")
                    .param_types([u32::static_type(), String::static_type()])
                    .return_type::<bool>()
                    .action()
                    .class_handler(|args| {
                        let ok = (|| {
                            let el = this(args)?;
                            let obj = args.get(1)?.get::<u32>().ok()?;
                            let points = args
                                .get(2)?
                                .get::<Option<String>>()
                                .ok()?
                                .unwrap_or_default();
                            Some(el.imp().add_points(obj, &points))
                        })();
                        Some(ok.unwrap_or(false).to_value())
                    })
                    .build(),
                Signal::builder("add-prompt")
                    .param_types([String::static_type()])
                    .return_type::<bool>()
                    .action()
                    .class_handler(|args| {
                        let ok = (|| {
                            let el = this(args)?;
                            let spec = args
                                .get(1)?
                                .get::<Option<String>>()
                                .ok()?
                                .unwrap_or_default();
                            Some(el.imp().add_spec(&spec))
                        })();
                        Some(ok.unwrap_or(false).to_value())
                    })
                    .build(),
                Signal::builder("remove-object")
                    .param_types([u32::static_type()])
                    .return_type::<bool>()
                    .action()
                    .class_handler(|args| {
                        let ok = (|| {
                            let el = this(args)?;
                            let obj = args.get(1)?.get::<u32>().ok()?;
                            Some(el.imp().command(Command::Remove(obj)))
                        })();
                        Some(ok.unwrap_or(false).to_value())
                    })
                    .build(),
                Signal::builder("reset")
                    .return_type::<bool>()
                    .action()
                    .class_handler(|args| {
                        let ok = this(args).map(|el| el.imp().command(Command::Reset));
                        Some(ok.unwrap_or(false).to_value())
                    })
                    .build(),
            ]
        });
        SIGNALS.as_ref()
    }
}

impl GstObjectImpl for EdgeTamTrack {}

impl ElementImpl for EdgeTamTrack {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "EdgeTAM object tracker",
                "Filter/Analyzer/Video",
                "Tracks prompted objects with EdgeTAM; results as region-of-interest metas with masks, bus messages and optional overlays",
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
}

impl BaseTransformImpl for EdgeTamTrack {
    const MODE: gst_base::subclass::BaseTransformMode =
        gst_base::subclass::BaseTransformMode::AlwaysInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = false;
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        // Reuse freed activation buffers instead of re-faulting them every frame (glibc).
        edgetam_tracker::keep_freed_memory();
        let settings = self.settings();
        let mut state = self.load(&settings).map_err(|e| {
            let kind = match e {
                StartError::NoModel | StartError::Device(_) | StartError::Prompts(_) => {
                    gst::ResourceError::Settings
                }
                StartError::MissingModel { .. } => gst::ResourceError::NotFound,
                _ => gst::ResourceError::OpenRead,
            };
            gst::error_msg!(kind, ("{e}"))
        })?;
        let early: Vec<Command> = std::mem::take(&mut *lock(&self.early));
        let refused: Vec<_> = early
            .into_iter()
            .map(|c| apply(&mut state, c, settings.max_objects as usize))
            .collect();
        *lock(&self.stats) = Stats::default();
        *lock(&self.qos) = Qos::default();
        *lock(&self.state) = Some(state);
        for r in refused {
            self.warn_refused(r);
        }
        gst::info!(CAT, imp = self, "started");
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        // Dropping the pipeline stops and joins its threads.
        let state = lock(&self.state).take();
        drop(state);
        gst::info!(CAT, imp = self, "stopped");
        Ok(())
    }

    fn sink_event(&self, event: gst::Event) -> bool {
        if matches!(
            event.type_(),
            gst::EventType::CustomDownstream
                | gst::EventType::CustomDownstreamOob
                | gst::EventType::CustomBoth
                | gst::EventType::CustomBothOob
        ) && self.prompt_event(&event)
        {
            return true;
        }
        if let gst::EventView::FlushStop(_) = event.view() {
            *lock(&self.qos) = Qos::default();
        }
        self.parent_sink_event(event)
    }

    fn src_event(&self, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::CustomUpstream(_) | gst::EventView::CustomBoth(_)
                if self.prompt_event(&event) =>
            {
                return true;
            }
            gst::EventView::Qos(q) => {
                let (_type, _proportion, diff, timestamp) = q.get();
                let earliest = timestamp.map(|ts| {
                    if diff > 0 {
                        ts + gst::ClockTime::from_nseconds(diff as u64)
                    } else {
                        ts
                    }
                });
                lock(&self.qos).earliest = earliest;
            }
            _ => {}
        }
        self.parent_src_event(event)
    }

    fn query(&self, direction: gst::PadDirection, query: &mut gst::QueryRef) -> bool {
        if direction == gst::PadDirection::Src {
            if let gst::QueryViewMut::Latency(_) = query.view_mut() {
                let ok = BaseTransformImplExt::parent_query(self, direction, query);
                if !ok {
                    return false;
                }
                if let gst::QueryViewMut::Latency(q) = query.view_mut() {
                    let ours = lock(&self.stats).latency;
                    let (live, min, max) = q.result();
                    q.set(live, min + ours, max.map(|m| m + ours));
                    gst::debug!(CAT, imp = self, "latency: upstream {min}, ours {ours}");
                }
                return true;
            }
        }
        BaseTransformImplExt::parent_query(self, direction, query)
    }

    fn transform_ip(&self, buf: &mut gst::BufferRef) -> Result<gst::FlowSuccess, gst::FlowError> {
        let settings = self.settings();
        let mut refused = Vec::new();
        let (pipeline, info, index) = {
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
            for (_, obj, prompt) in due {
                let max = settings.max_objects as usize;
                refused.push(apply(state, Command::Add(obj, prompt), max));
            }
            (state.pipeline.clone(), info, index)
        };
        for r in refused {
            self.warn_refused(r);
        }
        if settings.live_mode && self.is_late(buf, &info) {
            lock(&self.stats).skipped += 1;
            return Ok(gst::FlowSuccess::Ok);
        }
        let t = Instant::now();
        {
            let vframe =
                gst_video::VideoFrameRef::from_buffer_ref_readable(&*buf, &info).map_err(|e| {
                    gst::element_imp_error!(
                        self,
                        gst::CoreError::Failed,
                        ("cannot map the buffer: {e}")
                    );
                    gst::FlowError::Error
                })?;
            let mut frame = convert::to_frame(&vframe).map_err(|e| {
                gst::element_imp_error!(self, gst::StreamError::Format, ("{e}"));
                gst::FlowError::Error
            })?;
            if let Some(pts) = buf.pts() {
                frame = frame.with_timestamp(Duration::from_nanos(pts.nseconds()));
            }
            pipeline.push(frame).map_err(|e| {
                gst::element_imp_error!(self, gst::StreamError::Failed, ("tracking pipeline: {e}"));
                gst::FlowError::Error
            })?;
        }
        let out = pipeline.recv().map_err(|e| {
            gst::element_imp_error!(self, gst::StreamError::Failed, ("tracking pipeline: {e}"));
            gst::FlowError::Error
        })?;
        for e in &out.command_errors {
            gst::element_imp_warning!(
                self,
                gst::LibraryError::Settings,
                ("prompt refused on buffer {index}: {e}")
            );
        }
        let result = match out.outcome {
            Outcome::Tracked(r) => r,
            Outcome::Failed(e) => {
                gst::element_imp_warning!(
                    self,
                    gst::StreamError::Failed,
                    ("buffer {index} not tracked: {e}")
                );
                return Ok(gst::FlowSuccess::Ok);
            }
            Outcome::Dropped => return Ok(gst::FlowSuccess::Ok),
        };
        {
            // Keep the element's object set in step with the tracker's (it may drop objects).
            let mut guard = lock(&self.state);
            if let Some(state) = guard.as_mut() {
                state.objects = result.objects.iter().map(|o| o.id).collect();
            }
        }
        let style = overlay::Style {
            mask: settings.overlay.contains(Overlay::MASK),
            contour: settings.overlay.contains(Overlay::CONTOUR),
            boxes: settings.overlay.contains(Overlay::BOX),
            alpha: settings.overlay_alpha as f32,
        };
        if !style.is_empty() && !result.objects.is_empty() {
            match gst_video::VideoFrameRef::from_buffer_ref_writable(&mut *buf, &info) {
                Ok(mut vf) => overlay::draw(&mut vf, &result.objects, style),
                Err(e) => gst::warning!(CAT, imp = self, "cannot map the buffer for drawing: {e}"),
            }
        }
        self.attach(buf, &result);
        let elapsed = t.elapsed();
        if settings.post_messages {
            let msg = self.message(buf, index, &result, elapsed);
            let _ = self.obj().post_message(msg);
        }
        self.record(elapsed);
        gst::trace!(
            CAT,
            imp = self,
            "buffer {index}: {} objects in {:?}",
            result.objects.len(),
            elapsed
        );
        Ok(gst::FlowSuccess::Ok)
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
        if let Some(old) = &state.info {
            if (old.width(), old.height()) != (in_info.width(), in_info.height()) {
                let msg = format!(
                    "resolution changed from {}x{} to {}x{}: tracking reset (every object forgotten)",
                    old.width(),
                    old.height(),
                    in_info.width(),
                    in_info.height()
                );
                state.objects.clear();
                state.scheduled.clear();
                if let Err(e) = state.pipeline.reset() {
                    gst::warning!(CAT, imp = self, "reset failed: {e}");
                }
                drop(guard);
                gst::element_imp_warning!(self, gst::StreamError::Format, ("{msg}"));
                guard = lock(&self.state);
            }
        }
        if let Some(state) = guard.as_mut() {
            state.info = Some(in_info.clone());
        }
        drop(guard);
        gst::debug!(CAT, imp = self, "caps {incaps} -> {outcaps}");
        self.parent_set_info(incaps, in_info, outcaps, out_info)
    }
}
