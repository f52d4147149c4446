//! The running node: the DDS participant and its topics, and three threads around an
//! [`edgetam_pipeline::Pipeline`]:
//!
//! * the main thread reads `image`, `image/compressed`, `~/prompt` and `~/prompts` in arrival
//!   order, counts and checks frames, schedules prompts by received-frame index, and hands
//!   frames and commands, in that order, to
//! * the feeder, which applies commands and pushes frames (with `drop_frames=false` the push
//!   waits for room, so this thread, not the DDS reader, holds the backlog), and
//! * the publisher, which reads results in push order and publishes `~/mask`, `~/detections`
//!   and `~/overlay` with each frame's header; a fourth publishes `/diagnostics` every second.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use edgetam_pipeline::association::{associate, Decision, Detection, Rules, Tracked};
use edgetam_pipeline::{DropPolicy, Frame, FrameId, FrameOutput, Outcome, Pipeline};
use edgetam_tracker::{EdgeTam, ModelSpec, ObjectPrompt, Prompt};
use futures::StreamExt;
use log::{debug, error, info, warn};
use ros2_client::{Context, MessageTypeName, Name, NodeName, NodeOptions, Publisher, QosProfile};

use crate::args::{ArgError, NodeArgs, Params};
use crate::convert::{self, BadInput};
use crate::diag::Diag;
use crate::msgs::{
    CompressedImage, Detection2DArray, DiagnosticArray, Header, Image, StringMsg, Time,
};
use crate::outputs;
use crate::prompts::{self, Action, Placed, Schedule, MAX_OBJECT_ID};

/// Why the node stops (exit code 2 for the set-up errors, 1 once running).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Args(#[from] ArgError),
    #[error("cannot load the model `{model}`: {source}")]
    Model {
        model: String,
        #[source]
        source: Box<edgetam_tracker::Error>,
    },
    #[error("parameter `prompts`: {0}")]
    Prompts(prompts::PromptError),
    #[error("cannot start the pipeline: {0}")]
    Pipeline(Box<edgetam_pipeline::Error>),
    #[error("ROS 2 / DDS set-up: {0}")]
    Ros(String),
}

impl NodeError {
    /// 2 for what the user can fix before start (arguments, parameters, the model), 1 else.
    pub fn exit_code(&self) -> i32 {
        match self {
            NodeError::Args(_) | NodeError::Model { .. } | NodeError::Prompts(_) => 2,
            _ => 1,
        }
    }
}

fn ros_err(what: &str) -> impl Fn(ros2_client::CreateError) -> NodeError + '_ {
    move |e| NodeError::Ros(format!("{what}: {e:?}"))
}

/// The resolved topic names.
#[derive(Debug, Clone)]
pub struct Topics {
    pub image: String,
    pub compressed: String,
    pub prompt: String,
    pub prompts: String,
    pub mask: String,
    pub detections: String,
    pub overlay: String,
    pub diagnostics: String,
}

impl Topics {
    pub fn resolve(args: &NodeArgs) -> Result<Self, ArgError> {
        let image = args.resolve("image")?;
        // `image/compressed` follows a remap of `image` (as image_transport does).
        let compressed = match args.resolve("image/compressed")? {
            c if c == args.expand("image/compressed")? => format!("{image}/compressed"),
            c => c,
        };
        Ok(Self {
            image,
            compressed,
            prompt: args.resolve("~/prompt")?,
            prompts: args.resolve("~/prompts")?,
            mask: args.resolve("~/mask")?,
            detections: args.resolve("~/detections")?,
            overlay: args.resolve("~/overlay")?,
            diagnostics: args.resolve("/diagnostics")?,
        })
    }
}

/// `image`'s QoS: sensor data (best effort, keep last 5, volatile).
pub fn sensor_qos() -> QosProfile {
    QosProfile::subscription_default()
        .reliability_best_effort()
        .history(ros2_client::qos::History::KeepLast { depth: 5 })
}

/// Everything else: reliable, keep last 10, volatile.
pub fn reliable_qos() -> QosProfile {
    QosProfile::publisher_default().history(ros2_client::qos::History::KeepLast { depth: 10 })
}

/// The DDS context: `ROS_DOMAIN_ID`, and with `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST` (or
/// `OFF`, or the older `ROS_LOCALHOST_ONLY=1`) a participant that announces and uses only
/// 127.0.0.1 (no multicast: the loopback interface has none, and no other interface is used),
/// finding same-host peers by unicast on the well-known discovery ports.
pub fn context() -> Result<Context, NodeError> {
    let domain = match std::env::var("ROS_DOMAIN_ID") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|d| *d <= 232)
            .ok_or_else(|| {
                NodeError::Args(ArgError::BadValue {
                    name: "ROS_DOMAIN_ID".into(),
                    reason: format!("`{v}` is not a domain id 0..=232"),
                })
            })?,
        _ => 0,
    };
    let range = std::env::var("ROS_AUTOMATIC_DISCOVERY_RANGE")
        .unwrap_or_default()
        .to_ascii_uppercase();
    let localhost = matches!(range.as_str(), "LOCALHOST" | "OFF")
        || std::env::var("ROS_LOCALHOST_ONLY").is_ok_and(|v| v.trim() == "1");
    let mut builder = ros2_client::dds::rustdds::DomainParticipantBuilder::new(domain);
    if localhost {
        builder = builder
            .with_only_networks([std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)])
            .same_host_loopback(true);
    }
    let participant = builder
        .build()
        .map_err(|e| NodeError::Ros(format!("DDS participant (domain {domain}): {e:?}")))?;
    Context::from_domain_participant(participant).map_err(ros_err("context"))
}

/// The feeder's work, in arrival order.
enum Work {
    Actions(Vec<Action>),
    Frame {
        frame: Frame<'static>,
        header: Header,
        received: Instant,
    },
    Detections(Detection2DArray),
}

/// A pushed frame waiting for its result.
struct Pending {
    header: Header,
    received: Instant,
    /// The frame again, for `~/overlay`.
    overlay: Option<Frame<'static>>,
}

/// The detector path's state (`~/prompts`), shared by the feeder (associates, prompts) and the
/// publisher (records each object's result).
struct Assoc {
    known: BTreeMap<u32, Tracked>,
    next_id: u32,
    rules: Rules,
    min_confidence: f64,
}

struct Shared {
    name: String,
    diag: Mutex<Diag>,
    assoc: Mutex<Assoc>,
    pending: Mutex<HashMap<FrameId, Pending>>,
    overlay: bool,
}

/// A poisoned lock still holds consistent counters: keep going.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Loads the model the parameters name (`ModelSpec`, like the other front ends).
pub fn load_model(params: &Params) -> Result<(EdgeTam, String), NodeError> {
    let spec = ModelSpec::new(&params.model)
        .precision(params.precision)
        .input_size(params.input_size);
    let wrap = |source| NodeError::Model {
        model: params.model.clone(),
        source: Box::new(source),
    };
    spec.check().map_err(wrap)?;
    let loaded = spec.load().map_err(wrap)?;
    let path = loaded
        .path
        .as_ref()
        .map_or_else(|| params.model.clone(), |p| p.display().to_string());
    Ok((loaded.model, format!("{path} on {}", loaded.backend)))
}

/// Runs the node until the process is stopped or the tracker fails.
pub fn run(args: &NodeArgs, params: &Params) -> Result<(), NodeError> {
    let topics = Topics::resolve(args)?;
    let fqn = args.fully_qualified_name();
    // Start-up prompts, checked before the model loads.
    let mut schedule = Schedule::default();
    if !params.prompts.trim().is_empty() {
        for cmd in prompts::parse(&params.prompts).map_err(NodeError::Prompts)? {
            schedule.place(cmd, 0);
        }
    }
    let t = Instant::now();
    let (model, what) = load_model(params)?;
    let input_size = model.config().image_size;
    info!(
        "model {what} (precision {:?}, input size {input_size}) loaded in {:.2} s",
        model.precision(),
        t.elapsed().as_secs_f64()
    );
    let mut builder = Pipeline::builder(Arc::new(model)).encoder_ahead(params.encoder_ahead);
    builder = if params.drop_frames {
        builder
            .queue_capacity(1)
            .drop_policy(DropPolicy::DropOldest)
    } else {
        builder.queue_capacity(2).drop_policy(DropPolicy::Block)
    };
    if let Some(n) = params.threads {
        builder = builder.threads(n);
    }
    let pipeline = Arc::new(
        builder
            .build()
            .map_err(|e| NodeError::Pipeline(Box::new(e)))?,
    );

    let context = context()?;
    let node_name = NodeName::new(&args.namespace, &args.node_name)
        .map_err(|e| NodeError::Ros(format!("node name {fqn}: {e:?}")))?;
    let mut node = context
        .new_node(node_name, NodeOptions::new().enable_rosout(false))
        .map_err(|e| NodeError::Ros(format!("node {fqn}: {e:?}")))?;
    let topic =
        |node: &mut ros2_client::Node, name: &str, pkg: &str, ty: &str, qos: &QosProfile| {
            let n =
                Name::parse(name).map_err(|e| NodeError::Ros(format!("topic {name}: {e:?}")))?;
            node.create_topic(&n, MessageTypeName::new(pkg, ty), qos)
                .map_err(|e| NodeError::Ros(format!("topic {name}: {e:?}")))
        };
    let (sensor, reliable) = (sensor_qos(), reliable_qos());
    let t_image = topic(&mut node, &topics.image, "sensor_msgs", "Image", &sensor)?;
    let t_compressed = topic(
        &mut node,
        &topics.compressed,
        "sensor_msgs",
        "CompressedImage",
        &sensor,
    )?;
    let t_prompt = topic(&mut node, &topics.prompt, "std_msgs", "String", &reliable)?;
    let t_prompts = topic(
        &mut node,
        &topics.prompts,
        "vision_msgs",
        "Detection2DArray",
        &reliable,
    )?;
    let t_mask = topic(&mut node, &topics.mask, "sensor_msgs", "Image", &reliable)?;
    let t_detections = topic(
        &mut node,
        &topics.detections,
        "vision_msgs",
        "Detection2DArray",
        &reliable,
    )?;
    let t_diag = topic(
        &mut node,
        &topics.diagnostics,
        "diagnostic_msgs",
        "DiagnosticArray",
        &reliable,
    )?;
    let sub_image = node
        .create_subscription::<Image>(&t_image, Some(sensor.clone()))
        .map_err(ros_err("subscription image"))?;
    let sub_compressed = node
        .create_subscription::<CompressedImage>(&t_compressed, Some(sensor.clone()))
        .map_err(ros_err("subscription image/compressed"))?;
    let sub_prompt = node
        .create_subscription::<StringMsg>(&t_prompt, Some(reliable.clone()))
        .map_err(ros_err("subscription ~/prompt"))?;
    let sub_prompts = node
        .create_subscription::<Detection2DArray>(&t_prompts, Some(reliable.clone()))
        .map_err(ros_err("subscription ~/prompts"))?;
    let pub_mask: Publisher<Image> = node
        .create_publisher(&t_mask, Some(reliable.clone()))
        .map_err(ros_err("publisher ~/mask"))?;
    let pub_detections: Publisher<Detection2DArray> = node
        .create_publisher(&t_detections, Some(reliable.clone()))
        .map_err(ros_err("publisher ~/detections"))?;
    let pub_overlay: Option<Publisher<Image>> = if params.publish_overlay {
        let t = topic(
            &mut node,
            &topics.overlay,
            "sensor_msgs",
            "Image",
            &reliable,
        )?;
        Some(
            node.create_publisher(&t, Some(reliable.clone()))
                .map_err(ros_err("publisher ~/overlay"))?,
        )
    } else {
        None
    };
    let pub_diag: Publisher<DiagnosticArray> = node
        .create_publisher(&t_diag, Some(reliable.clone()))
        .map_err(ros_err("publisher /diagnostics"))?;

    info!(
        "node {fqn} on ROS_DOMAIN_ID {}: image <- {} (and {}), prompts <- {} (String), {} \
         (Detection2DArray); masks -> {}, detections -> {}{}, diagnostics -> {}; drop_frames={}, \
         encoder_ahead={}",
        context.domain_id(),
        topics.image,
        topics.compressed,
        topics.prompt,
        topics.prompts,
        topics.mask,
        topics.detections,
        if params.publish_overlay {
            format!(", overlay -> {}", topics.overlay)
        } else {
            String::new()
        },
        topics.diagnostics,
        params.drop_frames,
        params.encoder_ahead,
    );

    let shared = Arc::new(Shared {
        name: fqn.clone(),
        diag: Mutex::new(Diag::default()),
        assoc: Mutex::new(Assoc {
            known: BTreeMap::new(),
            next_id: 1,
            rules: Rules {
                match_iou: params.match_iou,
                reseed_after: params.reseed_after,
                max_objects: params.max_objects,
            },
            min_confidence: params.min_confidence,
        }),
        pending: Mutex::new(HashMap::new()),
        overlay: params.publish_overlay,
    });
    let (work_tx, work_rx) = crossbeam_channel::unbounded::<Work>();
    {
        let (p, s) = (pipeline.clone(), shared.clone());
        std::thread::Builder::new()
            .name("edgetam-ros2-feed".into())
            .spawn(move || feed(&p, &s, work_rx))
            .map_err(|e| NodeError::Ros(format!("thread: {e}")))?;
    }
    {
        let (p, s) = (pipeline.clone(), shared.clone());
        std::thread::Builder::new()
            .name("edgetam-ros2-publish".into())
            .spawn(move || {
                let outs = Outputs {
                    mask: pub_mask,
                    detections: pub_detections,
                    overlay: pub_overlay,
                };
                if let Err(e) = publish_results(&p, &s, &outs) {
                    // A failed worker is a bug, not an input: stop, whatever the main thread
                    // is waiting for.
                    eprintln!("[FATAL] [{}]: the tracker stopped: {e}", s.name);
                    std::process::exit(1);
                }
            })
            .map_err(|e| NodeError::Ros(format!("thread: {e}")))?;
    }
    {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("edgetam-ros2-diag".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                let status = lock(&s.diag).status(&s.name, Instant::now());
                let msg = DiagnosticArray {
                    header: Header {
                        stamp: Time::now(),
                        frame_id: String::new(),
                    },
                    status: vec![status],
                };
                if let Err(e) = pub_diag.publish(msg) {
                    debug!("/diagnostics not published: {e:?}");
                }
            })
            .map_err(|e| NodeError::Ros(format!("thread: {e}")))?;
    }

    let mut reader = Reader {
        shared: shared.clone(),
        work: work_tx,
        schedule,
        received: 0,
        last_size: None,
    };
    let spinner = node.spinner().map_err(ros_err("spinner"))?;
    let inputs = async {
        let mut streams = futures::stream::select_all([
            sub_image
                .async_stream()
                .map(|r| r.map(|(m, _)| Input::Image(m)))
                .boxed(),
            sub_compressed
                .async_stream()
                .map(|r| r.map(|(m, _)| Input::Compressed(m)))
                .boxed(),
            sub_prompt
                .async_stream()
                .map(|r| r.map(|(m, _)| Input::Prompt(m.data)))
                .boxed(),
            sub_prompts
                .async_stream()
                .map(|r| r.map(|(m, _)| Input::Detections(m)))
                .boxed(),
        ]);
        while let Some(item) = streams.next().await {
            match item {
                Ok(input) => reader.handle(input),
                Err(e) => {
                    // An undecodable sample (wrong type on the topic): counted, logged once.
                    let first = lock(&reader.shared.diag).bad("bad_message");
                    if first {
                        warn!("a message could not be read: {e:?} (further ones are counted on /diagnostics)");
                    }
                }
            }
        }
        Ok(())
    };
    let spin = async {
        if let Err(e) = spinner.spin().await {
            warn!("ROS graph spinner stopped: {e:?}");
        }
        futures::future::pending::<()>().await;
    };
    futures::executor::block_on(async {
        futures::pin_mut!(inputs, spin);
        match futures::future::select(inputs, spin).await {
            futures::future::Either::Left((r, _)) => r,
            futures::future::Either::Right(_) => Ok(()),
        }
    })
}

enum Input {
    Image(Image),
    Compressed(CompressedImage),
    Prompt(String),
    Detections(Detection2DArray),
}

/// The main thread's state: frames received, prompts waiting for their frame.
struct Reader {
    shared: Arc<Shared>,
    work: Sender<Work>,
    schedule: Schedule,
    received: u64,
    last_size: Option<(u32, u32)>,
}

impl Reader {
    fn handle(&mut self, input: Input) {
        match input {
            Input::Image(m) => self.image(Ok(m)),
            Input::Compressed(m) => {
                let r = convert::decode_compressed(&m);
                self.image(r)
            }
            Input::Prompt(text) => self.prompt(&text),
            Input::Detections(d) => {
                let _ = self.work.send(Work::Detections(d));
            }
        }
    }

    fn image(&mut self, msg: Result<Image, BadInput>) {
        let received = Instant::now();
        let index = self.received;
        self.received += 1;
        lock(&self.shared.diag).frames_received += 1;
        let actions = self.schedule.take(index);
        if !actions.is_empty() {
            let _ = self.work.send(Work::Actions(actions));
        }
        let checked = msg.and_then(|m| {
            convert::frame_of(&m)?;
            Ok(m)
        });
        let msg = match checked {
            Ok(m) => m,
            Err(bad) => {
                let first = lock(&self.shared.diag).bad(bad.kind());
                if first {
                    warn!(
                        "frame {index} not tracked: {bad} (the node goes on with the next good \
                         frame; further `{}` frames are counted on /diagnostics, not logged)",
                        bad.kind()
                    );
                }
                return;
            }
        };
        let size = (msg.width, msg.height);
        if let Some(prev) = self.last_size.filter(|p| *p != size) {
            let mut d = lock(&self.shared.diag);
            d.size_changes += 1;
            if d.first("size_change") {
                warn!(
                    "frame {index} is {}x{}, the previous {}x{}: tracking is reset (every object \
                     forgotten; prompts sent for it or later apply); further size changes are \
                     counted on /diagnostics",
                    size.0, size.1, prev.0, prev.1
                );
            }
        }
        self.last_size = Some(size);
        let Some(format) = convert::pixel_format(&msg.encoding) else {
            return; // checked above
        };
        let frame = Frame::new(msg.data, msg.width as usize, msg.height as usize, format)
            .with_stride(msg.step as usize);
        let _ = self.work.send(Work::Frame {
            frame,
            header: msg.header,
            received,
        });
    }

    fn prompt(&mut self, text: &str) {
        match prompts::parse(text) {
            Err(e) => {
                lock(&self.shared.diag).rejected_prompts += 1;
                warn!("prompt `{text}` refused, nothing changed: {e}");
            }
            Ok(cmds) => {
                for cmd in cmds {
                    match self.schedule.place(cmd, self.received) {
                        Placed::Late { asked } => warn!(
                            "prompt for frame {asked} came after it (frame {} is next): applied \
                             to the next frame",
                            self.received
                        ),
                        Placed::Later(f) => debug!("prompt waits for frame {f}"),
                        Placed::Next => {}
                    }
                }
                debug!("prompt `{text}` accepted");
            }
        }
    }
}

/// The feeder thread (see the module docs).
fn feed(pipeline: &Pipeline, shared: &Shared, work: Receiver<Work>) {
    // Ids the pipeline gives accepted frames: 0, 1, 2, ... in push order.
    let mut next_id: FrameId = 0;
    for w in work {
        match w {
            Work::Actions(actions) => {
                for a in actions {
                    apply(pipeline, shared, a, next_id);
                }
            }
            Work::Detections(d) => detections(pipeline, shared, &d, next_id),
            Work::Frame {
                frame,
                header,
                received,
            } => {
                let overlay = shared.overlay.then(|| frame.clone());
                lock(&shared.pending).insert(
                    next_id,
                    Pending {
                        header,
                        received,
                        overlay,
                    },
                );
                match pipeline.push(frame) {
                    Ok(id) => {
                        debug_assert_eq!(id, next_id);
                        next_id += 1;
                    }
                    Err(e) => {
                        lock(&shared.pending).remove(&next_id);
                        let first = lock(&shared.diag).bad("bad_push");
                        if first {
                            warn!("frame refused by the tracker: {e}");
                        }
                    }
                }
            }
        }
    }
}

/// Applies one `~/prompt` action; `since` is the id the next pushed frame will get.
fn apply(pipeline: &Pipeline, shared: &Shared, action: Action, since: FrameId) {
    match action {
        Action::Prompt(spec) => {
            let prompt = match (&spec.mask, spec.points_prompt()) {
                (Some(path), _) => match edgetam_pipeline::read_mask(path) {
                    Ok(m) => ObjectPrompt::Mask(m),
                    Err(e) => {
                        lock(&shared.diag).rejected_prompts += 1;
                        warn!("prompt for object {} refused: {e}", spec.obj);
                        return;
                    }
                },
                (None, Some(p)) => ObjectPrompt::Points(p),
                (None, None) => return,
            };
            match pipeline.add_prompt(spec.obj, prompt) {
                Ok(()) => {
                    let mut a = lock(&shared.assoc);
                    a.next_id = a.next_id.max(spec.obj.saturating_add(1));
                    let t = a.known.entry(spec.obj).or_default();
                    t.since = since;
                    match spec.bbox {
                        Some(b) => t.prompted(b),
                        None => t.absent = 0,
                    }
                }
                Err(e) => {
                    lock(&shared.diag).rejected_prompts += 1;
                    warn!("prompt for object {} refused: {e}", spec.obj);
                }
            }
        }
        Action::Remove(id) => {
            if let Err(e) = pipeline.remove_object(id) {
                warn!("remove={id}: {e}");
            }
            lock(&shared.assoc).known.remove(&id);
        }
        Action::Reset => {
            if let Err(e) = pipeline.reset() {
                warn!("reset: {e}");
            }
            lock(&shared.assoc).known.clear();
        }
    }
}

/// `~/prompts`: the detections associated with the tracked objects, prompts for new and
/// re-seeded ones (applied from the next frame).
fn detections(pipeline: &Pipeline, shared: &Shared, msg: &Detection2DArray, since: FrameId) {
    let mut a = lock(&shared.assoc);
    let min = a.min_confidence;
    let dets: Vec<Detection> = msg
        .detections
        .iter()
        .filter_map(|d| {
            let [x0, y0, x1, y1] = d.bbox.corners();
            let hyp = d.results.first().map(|r| &r.hypothesis);
            let confidence = hyp.map(|h| h.score);
            let ok = x1 > x0 && y1 > y0 && [x0, y0, x1, y1].iter().all(|v| v.is_finite());
            (ok && confidence.is_none_or(|c| c >= min)).then(|| Detection {
                bbox: [x0 as f32, y0 as f32, x1 as f32, y1 as f32],
                label: hyp.map(|h| h.class_id.clone()).unwrap_or_default(),
                confidence,
                source_id: None,
            })
        })
        .collect();
    let Assoc {
        known,
        next_id,
        rules,
        ..
    } = &mut *a;
    let decisions = associate(&dets, known, *rules, next_id);
    // Prompted in object order (the most confident detection's object first), so results
    // list the objects in id order.
    let mut decided: Vec<(&Detection, Decision)> = dets.iter().zip(decisions).collect();
    decided.sort_by_key(|(_, d)| d.object());
    for (d, decision) in decided {
        let obj = match decision {
            Decision::New { obj } | Decision::Reseed { obj } => obj,
            Decision::Matched { .. } | Decision::Refused => continue,
        };
        if obj > MAX_OBJECT_ID {
            known.remove(&obj);
            if lock(&shared.diag).first("id_overflow") {
                warn!("detection not tracked: object ids are used up (~/mask is 16-bit)");
            }
            continue;
        }
        let [x0, y0, x1, y1] = d.bbox;
        match pipeline.add_prompt(obj, Prompt::from_box(x0, y0, x1, y1)) {
            Ok(()) => {
                if let Some(t) = known.get_mut(&obj) {
                    t.since = since;
                }
                debug!("detection {:?} -> {} object {obj}", d.bbox, decision.name());
            }
            Err(e) => {
                known.remove(&obj);
                warn!("detection prompt for object {obj} refused: {e}");
            }
        }
    }
}

struct Outputs {
    mask: Publisher<Image>,
    detections: Publisher<Detection2DArray>,
    overlay: Option<Publisher<Image>>,
}

/// The publisher thread: one result per pushed frame, in push order. Returns when the
/// pipeline fails.
fn publish_results(pipeline: &Pipeline, shared: &Shared, outs: &Outputs) -> Result<(), String> {
    loop {
        let out = match pipeline.recv() {
            Ok(out) => out,
            Err(edgetam_pipeline::Error::Closed) => return Ok(()),
            Err(e) => {
                error!("the tracker failed: {e}");
                return Err(e.to_string());
            }
        };
        publish_one(shared, outs, out);
    }
}

fn publish_one(shared: &Shared, outs: &Outputs, out: FrameOutput) {
    let Some(p) = lock(&shared.pending).remove(&out.id) else {
        return;
    };
    for e in &out.command_errors {
        lock(&shared.diag).rejected_prompts += 1;
        warn!("prompt refused when applied (nothing changed): {e}");
    }
    if out.resolution_changed {
        // The tracker forgot every object prompted before this frame.
        lock(&shared.assoc).known.retain(|_, t| t.since >= out.id);
    }
    match &out.outcome {
        Outcome::Dropped => lock(&shared.diag).frames_dropped += 1,
        Outcome::Failed(e) => {
            let mut d = lock(&shared.diag);
            d.track_failures += 1;
            if d.first("track_failed") {
                warn!("frame not tracked: {e} (further failures are counted on /diagnostics)");
            } else {
                debug!("frame not tracked: {e}");
            }
        }
        Outcome::Tracked(r) => {
            match outputs::mask_message(&p.header, r) {
                Ok(m) => {
                    if let Err(e) = outs.mask.publish(m) {
                        debug!("~/mask not published: {e:?}");
                    }
                }
                Err(e) => {
                    if lock(&shared.diag).first("mask_failed") {
                        warn!("~/mask not published: {e}");
                    }
                }
            }
            if let Err(e) = outs
                .detections
                .publish(outputs::detections_message(&p.header, r))
            {
                debug!("~/detections not published: {e:?}");
            }
            if let (Some(pub_overlay), Some(frame)) = (&outs.overlay, &p.overlay) {
                match frame.to_rgb8() {
                    Ok(rgb) => {
                        if let Err(e) =
                            pub_overlay.publish(outputs::overlay_message(&p.header, r, rgb))
                        {
                            debug!("~/overlay not published: {e:?}");
                        }
                    }
                    Err(e) => debug!("~/overlay: {e}"),
                }
            }
            {
                let mut a = lock(&shared.assoc);
                for (id, t) in a.known.iter_mut().filter(|(_, t)| t.since <= out.id) {
                    match r.objects.iter().find(|o| o.id == *id) {
                        Some(o) => t.observe(o.visible, o.bbox),
                        None => t.observe(false, None),
                    }
                }
            }
            let now = Instant::now();
            lock(&shared.diag).tracked(now.duration_since(p.received), r.objects.len(), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_resolve_with_remaps() {
        let a = NodeArgs::parse(["-r", "__ns:=/r1", "-r", "image:=/cam/image_raw"]).unwrap();
        let t = Topics::resolve(&a).unwrap();
        assert_eq!(t.image, "/cam/image_raw");
        assert_eq!(t.compressed, "/cam/image_raw/compressed");
        assert_eq!(t.prompt, "/r1/edgetam/prompt");
        assert_eq!(t.prompts, "/r1/edgetam/prompts");
        assert_eq!(t.mask, "/r1/edgetam/mask");
        assert_eq!(t.detections, "/r1/edgetam/detections");
        assert_eq!(t.overlay, "/r1/edgetam/overlay");
        assert_eq!(t.diagnostics, "/diagnostics");
        // An explicit remap of the compressed topic wins.
        let b = NodeArgs::parse(["-r", "image/compressed:=/c"]).unwrap();
        assert_eq!(Topics::resolve(&b).unwrap().compressed, "/c");
        assert_eq!(Topics::resolve(&b).unwrap().image, "/image");
    }

    #[test]
    fn qos_profiles() {
        let s = sensor_qos();
        assert_eq!(s.reliability, ros2_client::qos::Reliability::BestEffort);
        assert_eq!(s.history, ros2_client::qos::History::KeepLast { depth: 5 });
        assert_eq!(s.durability, ros2_client::qos::Durability::Volatile);
        let r = reliable_qos();
        assert!(matches!(
            r.reliability,
            ros2_client::qos::Reliability::Reliable { .. }
        ));
        assert_eq!(r.history, ros2_client::qos::History::KeepLast { depth: 10 });
    }

    #[test]
    fn set_up_errors_exit_with_2() {
        assert_eq!(NodeError::Args(ArgError::NoModel).exit_code(), 2);
        let model = Params::from_map(
            &NodeArgs::parse(["-p", "model:=/nonexistent/edgetam"])
                .unwrap()
                .params,
        )
        .unwrap();
        let Err(e) = load_model(&model) else {
            panic!("a missing model loaded")
        };
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("/nonexistent/edgetam"), "{e}");
        assert_eq!(NodeError::Ros("x".into()).exit_code(), 1);
    }
}
