//! `edgetam track`: tracks objects through a video (file, camera, URI, GStreamer description:
//! feature `video`) or a folder of frames with the frame-queue pipeline (a streaming `Tracker`
//! on a worker thread, optionally with the image encoder ahead on another); writes masks,
//! results.jsonl and, with `--output-video`, the overlay as a video a person can play.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use clap::Args;
use edgetam::pipeline::{
    DropPolicy, Frame, FrameOutput, Outcome, Pipeline, PromptSpec, ResolutionChange,
};
use edgetam::tracker::{FrameResult, Mask, ObjectPrompt};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use edgetam::draw;
use edgetam::natural_cmp;

use crate::{image_size, load_model, read_rgb, save_mask_png, InputSizeArg, ModelArgs};

/// Several `--input`: one stream each, through one `MultiPipeline`.
mod multi;
/// `--input` of a video file, camera, URI or GStreamer description.
#[cfg(feature = "video")]
mod video;

/// File extensions (any case) taken as frames.
const FRAME_EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// Extra `--help` text of `edgetam track`.
pub const AFTER_HELP: &str = "\
--input takes a video file (whatever the machine's GStreamer decodes: WebM/VP8/VP9, MKV, MP4/H.264 \
with gstreamer1.0-libav, MOV), a camera (/dev/video0), a URI (rtsp://, http://, file://), a \
GStreamer source description (gst:videotestsrc is-live=true ! video/x-raw,width=320; a trailing \
`! appsink` is allowed) or a folder of frames (--frames is an alias). Live sources (cameras, RTSP, \
is-live=true) are tracked until Ctrl-C, --max-frames or --duration; frames that arrive while the \
tracker is busy are dropped (the summary counts them). Ctrl-C ends any run cleanly: the output \
video is finished (playable), a second Ctrl-C aborts.

A folder's frames are the .png, .jpg and .jpeg files (any case) in natural name order (frame2 \
before frame10); other files are ignored. Frame indices (frame= in a SPEC, names of the outputs) \
count from 0 over the frames decoded (or the folder's files). t=SECONDS in a SPEC puts the \
prompt on the first frame whose presentation time is at or after it (a folder of frames needs \
--fps for that).

Outputs in --out: masks/{frame:06}_obj{O}.png (8-bit gray, 255 inside) for every frame and object \
tracked on it (from the object's first prompt on); results.jsonl, one JSON object per frame and \
object: {\"frame\",\"pts\" (seconds; videos, or folders with --fps),\"file\" (folders),\"object\",\
\"score\",\"visible\",\"box\" ([x0,y0,x1,y1] or null),\"area\",\"prompted\"}; overlay/{frame:06}.png \
with --overlay. --output-video FILE: the overlay encoded at the source's size and frame rate, the \
format from the extension: .webm (VP8), .mkv (VP8 in Matroska), .mp4 (H.264: x264enc from \
gstreamer1.0-plugins-ugly, or openh264enc); written under a temporary name and renamed when \
complete, so a failed run leaves no partial file.

A frame file that cannot be read is reported and skipped, and the stream goes on (the tracker sees \
the next readable frame as the next one); the exit status is then still 0, as long as at least one \
frame was tracked. A prompt on a frame that cannot be read is an error. Errors (a missing or \
unreadable input, a codec without a decoder (the message names the Debian package), a camera that \
is not there, a prompt past the end) exit with status 2.

Several inputs: give --input once per stream (numbered from 0 in the order given; files, \
folders, cameras, URIs and gst: descriptions in any mix). One model tracks them all (the image \
encoder runs on a frame of each stream in one call, on its own thread), each input read on its \
own thread. `stream=N;` routes a prompt to input N (default 0), e.g. \
--prompt 'stream=1;obj=1;box=10,10,50,40'; a stream past the last input is an error (status 2). \
Object ids are per stream. Outputs per stream: --out DIR/stream-N/, --output-video \
NAME.streamN.EXT, --dump-logits D.streamN.safetensors (masks, results.jsonl and logits are the \
bytes a one-input run on that input writes); --queue, --max-frames, --duration and --fps apply to every stream; \
--encoder-ahead off is refused (several streams always encode ahead). Progress and summary lines \
start with `stream N:`. With one --input nothing changes.

  edgetam track --model yonigozlan/EdgeTAM-hf --input /dev/video0 --input left/ \\
      --prompt 'obj=1;box=200,120,420,380' --prompt 'stream=1;obj=1;frame=0;box=40,60,200,220' \\
      --out tracked/ --output-video tracked.webm";

#[derive(Args)]
pub struct TrackArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    input_size: InputSizeArg,
    /// What to track: a video file, a camera (/dev/video0), a URI (rtsp://, http://, file://),
    /// `gst:DESCRIPTION` (a GStreamer source) or a folder of PNG/JPEG frames (natural name
    /// order). `--frames` is an alias. Repeatable: several inputs are several streams, numbered
    /// from 0 in the order given, tracked by one model (see "Several inputs" below).
    #[arg(
        long = "input",
        alias = "frames",
        value_name = "SOURCE",
        required = true
    )]
    inputs: Vec<String>,
    /// One object's prompt (repeatable, one object and frame per flag), coordinates in frame
    /// pixels: `obj=1;frame=0;box=x0,y0,x1,y1`, `obj=2;t=2.5;point=x,y,1;point=x,y,0` (label 1
    /// = object, 0 = background; a box and points can be combined) or `obj=3;frame=5;mask=PATH`
    /// (a PNG the frame's size, nonzero = inside). `frame=` defaults to 0; `t=SECONDS` instead
    /// puts it on the first frame at or after that time. With several --input, `stream=N;`
    /// first routes it to input N (default 0): `stream=1;obj=1;box=...`. Quote it in a shell.
    #[arg(long = "prompt", value_name = "SPEC", required = true, value_parser = parse_timed_spec)]
    prompts: Vec<TimedSpec>,
    /// Output folder (created): masks/, results.jsonl and, with --overlay, overlay/. Optional
    /// with --output-video.
    #[arg(long, value_name = "DIR", required_unless_present = "output_video")]
    out: Option<PathBuf>,
    /// Also write overlay/{frame:06}.png into --out: each object tinted its own color, its box
    /// outlined.
    #[arg(long, requires = "out")]
    overlay: bool,
    /// Write the overlay as a video: .webm (VP8), .mkv (VP8 in Matroska) or .mp4 (H.264), at
    /// the source's size and frame rate (a folder of frames: --fps, default 30). With several
    /// --input, one file per stream: NAME.streamN.EXT.
    #[arg(long, value_name = "FILE")]
    output_video: Option<PathBuf>,
    /// Stop after N frames (live sources run until Ctrl-C otherwise).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_frames: Option<u64>,
    /// Stop after S seconds of the source's time.
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    duration: Option<f64>,
    /// Frame rate of a folder of frames: gives them presentation times (results.jsonl `pts`,
    /// `t=` prompts) and the --output-video rate (default 30).
    #[arg(long, value_name = "FPS", value_parser = parse_fps)]
    fps: Option<f64>,
    /// Write every frame's decoder outputs to a safetensors file: `f{F:06}/o{O}/lowres` (f32
    /// [h,w], the selected low-res mask logits), `f{F:06}/o{O}/score` (f32 [1], the object-score
    /// logit), `f{F:06}/o{O}/mask` (u8 [H,W], 0/1 at the frame's resolution). They are kept in
    /// memory until the end: about (size/4)^2 * 4 + H * W bytes per frame and object. With
    /// several --input, one file per stream: D.streamN.safetensors.
    #[arg(long, value_name = "FILE", requires = "out")]
    dump_logits: Option<PathBuf>,
    /// Run the image encoder of the next frame on its own thread while the current one is
    /// tracked (default off). Outputs are byte-identical either way; it pays only with spare
    /// cores. Several --input always run it so (one encoder thread for every stream, frames of
    /// several streams encoded in one call): `off` is refused there.
    #[arg(long, value_name = "on|off", value_parser = parse_on_off,
          action = clap::ArgAction::Set)]
    encoder_ahead: Option<bool>,
    /// Frames read ahead into the pipeline's queue (reading waits when it is full; a live
    /// source drops the oldest instead); with several --input, each stream's queue.
    #[arg(long = "queue", value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..))]
    queue: u64,
    /// `f32` (exact, default) or `bf16`: the fast mode (the heaviest products in bf16 with f32
    /// accumulation, masks within IoU 0.99 of f32; CPUs with AVX512-BF16: elsewhere refused).
    #[arg(long, value_name = "f32|bf16", default_value = "f32")]
    dtype: edgetam::tracker::Precision,
}

fn parse_on_off(s: &str) -> std::result::Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

fn parse_seconds(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected seconds > 0, got {s:?}")),
    }
}

fn parse_fps(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1000.0 => Ok(v),
        _ => Err(format!(
            "expected frames per second in (0, 1000], got {s:?}"
        )),
    }
}

/// A `--prompt`: the pipeline's [`PromptSpec`] plus the CLI's `t=SECONDS` (the first frame at
/// or after that presentation time), which the shared prompt syntax does not have: the token
/// is taken out here and the rest parsed by [`PromptSpec::parse`].
#[derive(Debug, Clone)]
pub struct TimedSpec {
    spec: PromptSpec,
    t: Option<f64>,
    /// The input it is for (`stream=N`, default 0).
    stream: usize,
}

fn parse_timed_spec(s: &str) -> std::result::Result<TimedSpec, String> {
    let (stream, s) = edgetam::pipeline::take_stream(s).map_err(|e| e.to_string())?;
    let (mut t, mut rest, mut frame) = (None, Vec::new(), false);
    for token in s.split(';') {
        let trimmed = token.trim();
        match trimmed.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("t", v)) => {
                let secs = v
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        format!("bad token `{trimmed}`: the time must be seconds >= 0, e.g. t=2.5")
                    })?;
                if t.replace(secs).is_some() {
                    return Err(format!("bad token `{trimmed}`: t= given twice"));
                }
            }
            Some(("frame", _)) => {
                frame = true;
                rest.push(token);
            }
            _ => rest.push(token),
        }
    }
    if frame && t.is_some() {
        return Err("give frame= or t=, not both".into());
    }
    let spec = PromptSpec::parse(&rest.join(";")).map_err(|e| e.to_string())?;
    Ok(TimedSpec {
        spec,
        t,
        stream: stream.unwrap_or(0),
    })
}

/// A frame pushed into the pipeline, waiting for its result.
struct InFlight {
    f: usize,
    /// The frame's file (a folder of frames).
    name: Option<String>,
    pts: Option<Duration>,
    img: image::RgbImage,
}

impl InFlight {
    /// `frame 3 (frame4.png)` / `frame 3 (t=0.100 s)`.
    fn label(&self) -> String {
        match (&self.name, self.pts) {
            (Some(name), _) => format!("frame {} ({name})", self.f),
            (None, Some(pts)) => format!("frame {} (t={:.3} s)", self.f, pts.as_secs_f64()),
            (None, None) => format!("frame {}", self.f),
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The frame files of `dir`, in natural name order.
pub(crate) fn list_frames(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        bail!(
            "frames folder {} {}",
            dir.display(),
            if dir.exists() {
                "is not a folder"
            } else {
                "does not exist"
            }
        );
    }
    let mut frames = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let is_frame = path.extension().is_some_and(|e| {
            FRAME_EXTENSIONS
                .iter()
                .any(|x| e.eq_ignore_ascii_case(std::ffi::OsStr::new(x)))
        });
        if is_frame && path.is_file() {
            frames.push(path);
        }
    }
    if frames.is_empty() {
        bail!(
            "no frames in {}: expected PNG or JPEG files (.{})",
            dir.display(),
            FRAME_EXTENSIONS.join(", .")
        );
    }
    frames.sort_by(|a, b| natural_cmp(&file_name(a), &file_name(b)));
    Ok(frames)
}

/// A mask prompt from a PNG the frame's size; nonzero = inside.
fn read_mask(path: &Path, width: usize, height: usize) -> Result<Mask> {
    let mask = edgetam::pipeline::read_mask(path)?;
    if (mask.width, mask.height) != (width, height) {
        bail!(
            "mask {} is {}x{} but its frame is {width}x{height}",
            path.display(),
            mask.width,
            mask.height
        );
    }
    Ok(mask)
}

/// Prompts by frame index, checked against the frames (range, duplicates, coordinates, mask
/// sizes) before the model is loaded.
type FramePrompts = BTreeMap<usize, Vec<(u32, ObjectPrompt)>>;

/// `spec`'s prompt for a `w`x`h` frame: its mask read (and its size checked) or its box and
/// points checked against the frame. `on` names the frame in messages.
fn object_prompt(spec: &PromptSpec, w: usize, h: usize, on: &str) -> Result<ObjectPrompt> {
    let o = spec.obj;
    Ok(match &spec.mask {
        Some(m) => {
            ObjectPrompt::Mask(read_mask(m, w, h).with_context(|| format!("object {o} on {on}"))?)
        }
        None => {
            let p = spec.points_prompt().unwrap_or_default();
            p.validate(w, h).with_context(|| {
                format!("the prompt for object {o} does not fit {on} ({w}x{h})")
            })?;
            ObjectPrompt::Points(p)
        }
    })
}

/// The frame a folder's prompt is on: `frame=`, or `t=` at `fps` frames per second.
fn folder_frame(s: &TimedSpec, fps: Option<f64>) -> Result<usize> {
    match (s.t, fps) {
        (None, _) => Ok(s.spec.frame),
        (Some(t), Some(fps)) => Ok((t * fps - 1e-9).ceil().max(0.0) as usize),
        (Some(t), None) => bail!(
            "the prompt for object {} is at t={t} s, but a folder of frames has no times: give \
             --fps (its frame rate) or use frame=",
            s.spec.obj
        ),
    }
}

fn prepare_prompts(
    specs: &[TimedSpec],
    frames: &[PathBuf],
    fps: Option<f64>,
) -> Result<FramePrompts> {
    let mut by_frame = FramePrompts::new();
    for s in specs {
        let (o, f) = (s.spec.obj, folder_frame(s, fps)?);
        let Some(path) = frames.get(f) else {
            bail!(
                "the prompt for object {o} is on frame {f}, but the frames folder has {} frames \
                 (0 to {})",
                frames.len(),
                frames.len() - 1
            );
        };
        let on_frame = by_frame.entry(f).or_default();
        if on_frame.iter().any(|(id, _)| *id == o) {
            bail!(
                "object {o} has two prompts on frame {f}: give its box and points in one --prompt"
            );
        }
        let name = file_name(path);
        let (w, h) = image_size(path)
            .with_context(|| format!("frame {f} ({name}) carries the prompt for object {o}"))?;
        let prompt = object_prompt(&s.spec, w, h, &format!("frame {f} ({name})"))?;
        on_frame.push((o, prompt));
    }
    Ok(by_frame)
}

/// One line of results.jsonl.
#[derive(Serialize)]
struct Record<'a> {
    frame: usize,
    /// Presentation time in seconds (videos; folders with --fps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pts: Option<f64>,
    /// The frame's file (folders).
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    object: u32,
    score: f32,
    visible: bool,
    #[serde(rename = "box")]
    bbox: Option<[usize; 4]>,
    area: usize,
    prompted: bool,
}

/// Where one stream's outputs go: --out, --overlay, --dump-logits and --output-video as given
/// (one input), or each with its stream in its name (several).
#[derive(Debug, Clone)]
struct OutPaths {
    out: Option<PathBuf>,
    overlay: bool,
    dump_logits: Option<PathBuf>,
    #[cfg_attr(not(feature = "video"), allow(dead_code))]
    output_video: Option<PathBuf>,
}

impl OutPaths {
    /// One input: the paths as given.
    fn of(args: &TrackArgs) -> Self {
        Self {
            out: args.out.clone(),
            overlay: args.overlay,
            dump_logits: args.dump_logits.clone(),
            output_video: args.output_video.clone(),
        }
    }

    /// Stream `n` of several: `--out DIR/stream-N/`, `NAME.streamN.EXT`, `D.streamN.safetensors`.
    fn for_stream(args: &TrackArgs, n: usize) -> Self {
        Self {
            out: args.out.as_ref().map(|d| d.join(format!("stream-{n}"))),
            overlay: args.overlay,
            dump_logits: args.dump_logits.as_deref().map(|p| stream_file(p, n)),
            output_video: args.output_video.as_deref().map(|p| stream_file(p, n)),
        }
    }
}

/// `NAME.EXT` -> `NAME.streamN.EXT` (`NAME` -> `NAME.streamN`), in the same folder.
fn stream_file(path: &Path, n: usize) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.stream{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}.stream{n}"),
    };
    path.with_file_name(name)
}

/// Where a frame's results go in --out.
struct Outputs {
    masks: PathBuf,
    overlay: Option<PathBuf>,
    results: BufWriter<File>,
    dump: Option<HashMap<String, Tensor>>,
}

impl Outputs {
    fn create(paths: &OutPaths, out: &Path) -> Result<Self> {
        let masks = out.join("masks");
        let overlay = paths.overlay.then(|| out.join("overlay"));
        for dir in std::iter::once(&masks).chain(&overlay) {
            fs::create_dir_all(dir)
                .with_context(|| format!("cannot create folder {}", dir.display()))?;
        }
        if let Some(parent) = paths.dump_logits.as_deref().and_then(Path::parent) {
            if !parent.as_os_str().is_empty() && !parent.is_dir() {
                bail!("--dump-logits: folder {} does not exist", parent.display());
            }
        }
        let path = out.join("results.jsonl");
        let file =
            File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self {
            masks,
            overlay,
            results: BufWriter::new(file),
            dump: paths.dump_logits.as_ref().map(|_| HashMap::new()),
        })
    }

    fn write(&mut self, job: &InFlight, r: &FrameResult) -> Result<()> {
        let f = job.f;
        for o in &r.objects {
            let mask = &o.mask;
            let path = self.masks.join(format!("{f:06}_obj{}.png", o.id));
            save_mask_png(&path, mask.width, mask.height, &mask.data)?;
            let record = Record {
                frame: f,
                pts: job.pts.map(|t| t.as_secs_f64()),
                file: job.name.as_deref(),
                object: o.id,
                score: o.score,
                visible: o.visible,
                bbox: o.bbox,
                area: o.area,
                prompted: o.prompted,
            };
            serde_json::to_writer(&mut self.results, &record)?;
            self.results.write_all(b"\n")?;
            if let Some(dump) = &mut self.dump {
                let key = |what: &str| format!("f{f:06}/o{}/{what}", o.id);
                let lowres = o.low_res_logits.to_device(&Device::Cpu)?;
                let (_, _, h, w) = lowres.dims4()?;
                dump.insert(key("lowres"), lowres.to_dtype(DType::F32)?.reshape((h, w))?);
                dump.insert(key("score"), Tensor::new(&[o.score], &Device::Cpu)?);
                let bin =
                    Tensor::from_vec(mask.data.clone(), (mask.height, mask.width), &Device::Cpu)?;
                dump.insert(key("mask"), bin);
            }
        }
        self.results.flush().context("cannot write results.jsonl")?;
        Ok(())
    }
}

/// A progress bar on stderr, hidden when stderr is not a terminal; `frames` is the length when
/// known.
fn progress_bar(frames: Option<usize>) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let pb = ProgressBar::with_draw_target(frames.map(|n| n as u64), target);
    let template = if frames.is_some() {
        "{bar:30} {msg}"
    } else {
        "{spinner} {msg}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style);
    }
    pb
}

/// `frame 12/300  3.4 fps  obj1 ✓ obj2 ✗`
fn progress_message(
    f: usize,
    frames: Option<usize>,
    recent: &VecDeque<Duration>,
    r: &FrameResult,
) -> String {
    let secs: f64 = recent.iter().map(Duration::as_secs_f64).sum();
    let fps = if secs > 0.0 {
        recent.len() as f64 / secs
    } else {
        0.0
    };
    let of = frames.map(|n| format!("/{n}")).unwrap_or_default();
    let mut msg = format!("frame {}{of}  {fps:.1} fps ", f + 1);
    for o in &r.objects {
        msg.push_str(&format!(
            " obj{} {}",
            o.id,
            if o.visible { '✓' } else { '✗' }
        ));
    }
    msg
}

/// Everything a tracked frame's result goes to: --out, the overlay PNGs, the output video, the
/// progress bar and the summary's counters.
struct Sink {
    outputs: Option<Outputs>,
    #[cfg(feature = "video")]
    encoder: Option<crate::video::encode::Encoder>,
    /// A folder's output video (a stream of several): started at the size of the first frame
    /// tracked, at this rate.
    #[cfg(feature = "video")]
    video_later: Option<(PathBuf, crate::video::encode::Format, (i32, i32))>,
    pb: ProgressBar,
    total: Option<usize>,
    recent: VecDeque<Duration>,
    last_done: Instant,
    start: Instant,
    tracked: usize,
    dropped: usize,
    objects: usize,
    in_tracker: Duration,
    /// `stream N: ` in front of its progress and summary lines (several inputs), else empty.
    prefix: String,
}

impl Sink {
    fn new(outputs: Option<Outputs>, total: Option<usize>) -> Self {
        let now = Instant::now();
        Self {
            outputs,
            #[cfg(feature = "video")]
            encoder: None,
            #[cfg(feature = "video")]
            video_later: None,
            pb: progress_bar(total),
            total,
            recent: VecDeque::with_capacity(10),
            last_done: now,
            start: now,
            tracked: 0,
            dropped: 0,
            objects: 0,
            in_tracker: Duration::ZERO,
            prefix: String::new(),
        }
    }

    fn wants_overlay(&self) -> bool {
        #[cfg(feature = "video")]
        if self.encoder.is_some() {
            return true;
        }
        self.outputs.as_ref().is_some_and(|o| o.overlay.is_some())
    }

    /// One result, with the frame it is for.
    fn handle(&mut self, r: FrameOutput, mut job: InFlight) -> Result<()> {
        if let Some(e) = r.command_errors.into_iter().next() {
            return Err(anyhow::Error::new(e).context(format!("a prompt on {}", job.label())));
        }
        let result = match r.outcome {
            Outcome::Tracked(result) => result,
            Outcome::Failed(e) => {
                return Err(anyhow::Error::new(e).context(format!("tracking {}", job.label())))
            }
            // Live sources only: the frame came while the tracker was busy.
            Outcome::Dropped => {
                self.dropped += 1;
                return Ok(());
            }
        };
        self.in_tracker += r.timings.encode + r.timings.track;
        #[cfg(feature = "video")]
        if let Some((path, format, fps)) = self.video_later.take() {
            let (w, h) = (job.img.width() as usize, job.img.height() as usize);
            self.encoder = Some(crate::video::encode::Encoder::start(
                &path, format, w, h, fps,
            )?);
        }
        if let Some(outputs) = &mut self.outputs {
            outputs.write(&job, &result)?;
        }
        if self.wants_overlay() {
            draw::objects(&mut job.img, &result.objects);
            if let Some(dir) = self.outputs.as_ref().and_then(|o| o.overlay.as_ref()) {
                let path = dir.join(format!("{:06}.png", job.f));
                job.img
                    .save(&path)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            #[cfg(feature = "video")]
            if let Some(encoder) = &mut self.encoder {
                encoder.send(job.img, job.pts)?;
            }
        }
        self.tracked += 1;
        self.objects = result.objects.len();
        let now = Instant::now();
        if self.recent.len() == 10 {
            self.recent.pop_front();
        }
        self.recent.push_back(now - self.last_done);
        self.last_done = now;
        let msg = progress_message(job.f, self.total, &self.recent, &result);
        self.pb.set_message(format!("{}{msg}", self.prefix));
        self.pb.inc(1);
        Ok(())
    }

    /// Finishes the files (the video's EOS, the logits) and prints the summary.
    fn finish(self, paths: &OutPaths, input: &str, stopped: Option<&str>) -> Result<()> {
        self.pb.finish_and_clear();
        let prefix = &self.prefix;
        if self.tracked == 0 {
            match stopped {
                Some(why) => {
                    bail!("{prefix}stopped ({why}) before a frame of {input} was tracked")
                }
                None => bail!("{prefix}no frame of {input} could be read"),
            }
        }
        let mut wrote: Vec<String> = paths.out.iter().map(|p| p.display().to_string()).collect();
        if let (Some(path), Some(dump)) = (
            &paths.dump_logits,
            self.outputs.as_ref().and_then(|o| o.dump.as_ref()),
        ) {
            candle_core::safetensors::save(dump, path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            wrote.push(path.display().to_string());
        }
        #[cfg(feature = "video")]
        if let (Some(encoder), Some(path)) = (self.encoder, &paths.output_video) {
            let codec = encoder.codec();
            let n = encoder.finish()?;
            wrote.push(format!("{} ({codec}, {n} frames)", path.display()));
        }
        let tracked = self.tracked;
        let ms = self.start.elapsed().as_secs_f64() * 1e3 / tracked as f64;
        println!(
            "{prefix}tracked {tracked} frames, {} object(s): mean {ms:.1} ms/frame ({:.1} ms in \
             the tracker), {:.2} fps; wrote {}",
            self.objects,
            self.in_tracker.as_secs_f64() * 1e3 / tracked as f64,
            1e3 / ms,
            wrote.join(" and "),
        );
        if self.dropped > 0 {
            println!(
                "{prefix}dropped {} frame(s) that arrived while the tracker was busy (live \
                 source)",
                self.dropped
            );
        }
        if let Some(why) = stopped {
            println!("{prefix}stopped: {why}");
        }
        Ok(())
    }
}

/// Where a reader puts its frames and prompts: the lone pipeline, or one stream of several.
trait Feed: Sync {
    fn add_prompt(&self, obj: u32, prompt: ObjectPrompt) -> edgetam::pipeline::Result<()>;
    fn push(&self, frame: Frame<'_>) -> edgetam::pipeline::Result<()>;
}

impl Feed for Pipeline {
    fn add_prompt(&self, obj: u32, prompt: ObjectPrompt) -> edgetam::pipeline::Result<()> {
        Pipeline::add_prompt(self, obj, prompt)
    }

    fn push(&self, frame: Frame<'_>) -> edgetam::pipeline::Result<()> {
        Pipeline::push(self, frame).map(|_| ())
    }
}

fn build_pipeline(args: &TrackArgs, live: bool) -> Result<Pipeline> {
    let model = Arc::new(load_model(
        &args.model,
        args.input_size.input_size,
        args.dtype,
    )?);
    Ok(Pipeline::builder(model)
        .queue_capacity(usize::try_from(args.queue).unwrap_or(usize::MAX))
        // Files wait for the tracker; a live source's frames that come while it is busy are
        // dropped, the oldest first, as the GStreamer element's live mode does.
        .drop_policy(if live {
            DropPolicy::DropOldest
        } else {
            DropPolicy::Block
        })
        .encoder_ahead(args.encoder_ahead.unwrap_or(false))
        // Frames of another size go on being tracked, as by a serially driven tracker.
        .resolution_change(ResolutionChange::Continue)
        .build()?)
}

pub fn track(args: TrackArgs) -> Result<()> {
    let inputs = args.inputs.len();
    for s in &args.prompts {
        if s.stream >= inputs {
            let has = match inputs {
                1 => "is 1 input (stream 0)".to_string(),
                n => format!("are {n} inputs (streams 0 to {})", n - 1),
            };
            bail!(
                "the prompt for object {} is on stream {}, but there {has}: give one --input per \
                 stream",
                s.spec.obj,
                s.stream
            );
        }
    }
    if inputs > 1 {
        return multi::track_multi(args);
    }
    if Path::new(&args.inputs[0]).is_dir() {
        return track_folder(args);
    }
    #[cfg(feature = "video")]
    return video::track_video(args);
    #[cfg(not(feature = "video"))]
    not_a_folder(&args.inputs[0])
}

/// An input that is not a folder, in a build without the `video` feature.
#[cfg(not(feature = "video"))]
fn not_a_folder(input: &str) -> Result<()> {
    bail!(
        "{input}: this edgetam was built without the `video` feature, so --input takes a \
         folder of frames only"
    );
}

/// A folder of frames, read on this thread in natural name order.
fn track_folder(args: TrackArgs) -> Result<()> {
    let dir = PathBuf::from(&args.inputs[0]);
    let mut frames = list_frames(&dir)?;
    let fps = args.fps;
    let keep = match (args.max_frames, args.duration) {
        (Some(n), _) => usize::try_from(n).unwrap_or(usize::MAX),
        (None, Some(d)) => (d * fps.unwrap_or(30.0)).ceil() as usize,
        _ => usize::MAX,
    };
    frames.truncate(keep.max(1));
    let prompts = prepare_prompts(&args.prompts, &frames, fps)?;
    #[cfg(feature = "video")]
    let format = args
        .output_video
        .as_deref()
        .map(crate::video::encode::Format::for_path)
        .transpose()?;
    #[cfg(not(feature = "video"))]
    if args.output_video.is_some() {
        bail!("--output-video: this edgetam was built without the `video` feature");
    }
    let paths = OutPaths::of(&args);
    let outputs = args
        .out
        .as_deref()
        .map(|out| Outputs::create(&paths, out))
        .transpose()?;
    let pipeline = build_pipeline(&args, false)?;
    let mut sink = Sink::new(outputs, Some(frames.len()));
    // The output video's rate: the folder's --fps, else 30.
    let rate = fps.unwrap_or(30.0);
    let mut skipped = Vec::new();
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let handle = |r: FrameOutput, in_flight: &mut VecDeque<InFlight>, sink: &mut Sink| {
        let Some(job) = in_flight.pop_front() else {
            bail!("the pipeline returned a result for no frame");
        };
        sink.handle(r, job)
    };
    for (f, path) in frames.iter().enumerate() {
        let name = file_name(path);
        let img = match read_rgb(path) {
            Ok(img) => img,
            Err(e) if !prompts.contains_key(&f) => {
                sink.pb
                    .suspend(|| eprintln!("warning: skipping frame {f} ({name}): {e:#}"));
                skipped.push(name);
                sink.pb.inc(1);
                continue;
            }
            Err(e) => return Err(e.context(format!("frame {f} ({name}) carries a prompt"))),
        };
        let (w, h) = (img.width() as usize, img.height() as usize);
        #[cfg(feature = "video")]
        if let (Some(format), None, Some(path)) = (format, &sink.encoder, &args.output_video) {
            // Encoded at `rate` with millisecond precision (e.g. 29.97 -> 29970/1000).
            let fps = ((rate * 1000.0).round() as i32, 1000);
            sink.encoder = Some(crate::video::encode::Encoder::start(
                path, format, w, h, fps,
            )?);
        }
        for (obj, prompt) in prompts.get(&f).into_iter().flatten() {
            pipeline
                .add_prompt(*obj, prompt.clone())
                .with_context(|| format!("object {obj} on frame {f} ({name})"))?;
        }
        pipeline
            .push(Frame::rgb8(img.as_raw(), w, h))
            .with_context(|| format!("frame {f} ({name})"))?;
        let pts = Duration::from_secs_f64(f as f64 / rate);
        in_flight.push_back(InFlight {
            f,
            name: Some(name),
            pts: fps.map(|_| pts),
            img,
        });
        while let Some(r) = pipeline.try_recv()? {
            handle(r, &mut in_flight, &mut sink)?;
        }
    }
    pipeline.finish();
    for r in pipeline.results() {
        handle(r?, &mut in_flight, &mut sink)?;
    }
    sink.finish(&paths, &dir.display().to_string(), None)?;
    if !skipped.is_empty() {
        println!(
            "skipped {} unreadable frame(s): {}",
            skipped.len(),
            skipped.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_prompt_spec(s: &str) -> std::result::Result<PromptSpec, String> {
        PromptSpec::parse(s).map_err(|e| e.to_string())
    }

    #[test]
    fn prompt_specs() {
        let p = parse_prompt_spec("obj=2;frame=1;point=10,20,1; point=5,6,0").unwrap();
        assert_eq!((p.obj, p.frame, p.points.len(), p.bbox), (2, 1, 2, None));
        let p = parse_prompt_spec("obj=1;box=1,2,30,40").unwrap();
        assert_eq!((p.frame, p.bbox), (0, Some([1., 2., 30., 40.])));
        let e = parse_prompt_spec("obj=1;frame=0;bx=1,2,3,4").unwrap_err();
        assert!(
            e.contains("`bx=1,2,3,4`") && e.contains("unknown key"),
            "{e}"
        );
        let e = parse_prompt_spec("obj=1;box=1,2,x,4").unwrap_err();
        assert!(e.contains("`box=1,2,x,4`"), "{e}");
        let e = parse_prompt_spec("obj=1;point=1,2,5").unwrap_err();
        assert!(e.contains("label"), "{e}");
        assert!(parse_prompt_spec("frame=0;box=1,2,3,4").is_err());
        assert!(parse_prompt_spec("obj=1;mask=m.png;point=1,2,1").is_err());
        assert!(parse_prompt_spec("obj=1;frame=0").is_err());
    }

    #[test]
    fn stream_outputs_are_named_after_the_stream() {
        assert_eq!(
            stream_file(Path::new("out/run.webm"), 1),
            Path::new("out/run.stream1.webm")
        );
        assert_eq!(
            stream_file(Path::new("d.safetensors"), 0),
            Path::new("d.stream0.safetensors")
        );
        assert_eq!(stream_file(Path::new("dump"), 3), Path::new("dump.stream3"));
    }

    #[test]
    fn timed_prompt_specs() {
        let p = parse_timed_spec("obj=2; t=2.5 ;box=1,2,30,40").unwrap();
        assert_eq!((p.spec.obj, p.spec.frame, p.t), (2, 0, Some(2.5)));
        assert_eq!(p.spec.bbox, Some([1., 2., 30., 40.]));
        let p = parse_timed_spec("obj=1;frame=3;point=1,2,1").unwrap();
        assert_eq!((p.spec.frame, p.t), (3, None));
        let e = parse_timed_spec("obj=1;t=-1;box=1,2,3,4").unwrap_err();
        assert!(e.contains("`t=-1`"), "{e}");
        let e = parse_timed_spec("obj=1;t=x;box=1,2,3,4").unwrap_err();
        assert!(e.contains("`t=x`"), "{e}");
        let e = parse_timed_spec("obj=1;t=1;frame=2;box=1,2,3,4").unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let e = parse_timed_spec("obj=1;t=1;t=2;box=1,2,3,4").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(parse_timed_spec("obj=1;t=1").is_err());
        // stream=N routes a prompt to an input (default 0), anywhere in the spec.
        let p = parse_timed_spec("stream=2;obj=1;t=0.5;box=1,2,3,4").unwrap();
        assert_eq!((p.stream, p.spec.obj, p.t), (2, 1, Some(0.5)));
        assert_eq!(parse_timed_spec("obj=1;box=1,2,3,4").unwrap().stream, 0);
        let e = parse_timed_spec("obj=1;stream=-1;box=1,2,3,4").unwrap_err();
        assert!(e.contains("`stream=-1`"), "{e}");
        // A folder's t= needs its rate.
        let p = parse_timed_spec("obj=1;t=0.25;box=1,2,3,4").unwrap();
        assert_eq!(folder_frame(&p, Some(10.0)).unwrap(), 3);
        let p = parse_timed_spec("obj=1;t=0.3;box=1,2,3,4").unwrap();
        assert_eq!(folder_frame(&p, Some(10.0)).unwrap(), 3);
        assert!(folder_frame(&p, None)
            .unwrap_err()
            .to_string()
            .contains("--fps"));
    }
}
