//! `edgetam track`: tracks objects through a folder of frames with the frame-queue pipeline (a
//! streaming `Tracker` on a worker thread, optionally with the image encoder ahead on another).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use clap::Args;
use edgetam::pipeline::{DropPolicy, Frame, Outcome, Pipeline, PromptSpec, ResolutionChange};
use edgetam::tracker::{FrameResult, Mask, ObjectPrompt};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use edgetam::draw;
use edgetam::natural_cmp;

use crate::{image_size, load_model, read_rgb, save_mask_png, InputSizeArg, ModelArgs};

/// File extensions (any case) taken as frames.
const FRAME_EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// Extra `--help` text of `edgetam track`.
pub const AFTER_HELP: &str = "\
Frames are the .png, .jpg and .jpeg files (any case) in --frames, in natural name order (frame2 \
before frame10); other files are ignored. Frame indices (frame= in a SPEC, names of the outputs) \
count from 0 in that order.

Outputs in --out: masks/{frame:06}_obj{O}.png (8-bit gray, 255 inside) for every frame and object \
tracked on it (from the object's first prompt on); results.jsonl, one JSON object per frame and \
object: {\"frame\",\"file\",\"object\",\"score\",\"visible\",\"box\" ([x0,y0,x1,y1] or null),\"area\",\
\"prompted\"}; overlay/{frame:06}.png with --overlay.

A frame file that cannot be read is reported and skipped, and the stream goes on (the tracker sees \
the next readable frame as the next one); the exit status is then still 0, as long as at least one \
frame was tracked. A prompt on a frame that cannot be read is an error. Errors exit with status 2.";

#[derive(Args)]
pub struct TrackArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    input_size: InputSizeArg,
    /// Folder of frames: PNG/JPEG files, tracked in natural name order.
    #[arg(long, value_name = "DIR")]
    frames: PathBuf,
    /// One object's prompt (repeatable, one object and frame per flag), coordinates in frame
    /// pixels: `obj=1;frame=0;box=x0,y0,x1,y1`, `obj=2;frame=0;point=x,y,1;point=x,y,0` (label 1
    /// = object, 0 = background; a box and points can be combined) or `obj=3;frame=5;mask=PATH`
    /// (a PNG the frame's size, nonzero = inside). `frame=` defaults to 0. Quote it in a shell.
    #[arg(long = "prompt", value_name = "SPEC", required = true, value_parser = PromptSpec::parse)]
    prompts: Vec<PromptSpec>,
    /// Output folder (created): masks/, results.jsonl and, with --overlay, overlay/.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Also write overlay/{frame:06}.png: each object tinted its own color, its box outlined.
    #[arg(long)]
    overlay: bool,
    /// Write every frame's decoder outputs to a safetensors file: `f{F:06}/o{O}/lowres` (f32
    /// [h,w], the selected low-res mask logits), `f{F:06}/o{O}/score` (f32 [1], the object-score
    /// logit), `f{F:06}/o{O}/mask` (u8 [H,W], 0/1 at the frame's resolution). They are kept in
    /// memory until the end: about (size/4)^2 * 4 + H * W bytes per frame and object.
    #[arg(long, value_name = "FILE")]
    dump_logits: Option<PathBuf>,
    /// Run the image encoder of the next frame on its own thread while the current one is
    /// tracked. Outputs are byte-identical either way; it pays only with spare cores.
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = parse_on_off,
          action = clap::ArgAction::Set)]
    encoder_ahead: bool,
    /// Frames read ahead into the pipeline's queue (reading waits when it is full).
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

/// A frame pushed into the pipeline, waiting for its result.
struct InFlight {
    f: usize,
    name: String,
    img: image::RgbImage,
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

fn prepare_prompts(specs: &[PromptSpec], frames: &[PathBuf]) -> Result<FramePrompts> {
    let mut by_frame = FramePrompts::new();
    for spec in specs {
        let (o, f) = (spec.obj, spec.frame);
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
        let prompt = match &spec.mask {
            Some(m) => ObjectPrompt::Mask(
                read_mask(m, w, h).with_context(|| format!("object {o} on frame {f} ({name})"))?,
            ),
            None => {
                let p = spec.points_prompt().unwrap_or_default();
                p.validate(w, h).with_context(|| {
                    format!("the prompt for object {o} does not fit frame {f} ({name}, {w}x{h})")
                })?;
                ObjectPrompt::Points(p)
            }
        };
        on_frame.push((o, prompt));
    }
    Ok(by_frame)
}

/// One line of results.jsonl.
#[derive(Serialize)]
struct Record<'a> {
    frame: usize,
    file: &'a str,
    object: u32,
    score: f32,
    visible: bool,
    #[serde(rename = "box")]
    bbox: Option<[usize; 4]>,
    area: usize,
    prompted: bool,
}

/// Where a frame's results go.
struct Outputs {
    masks: PathBuf,
    overlay: Option<PathBuf>,
    results: BufWriter<File>,
    dump: Option<HashMap<String, Tensor>>,
}

impl Outputs {
    fn create(args: &TrackArgs) -> Result<Self> {
        let masks = args.out.join("masks");
        let overlay = args.overlay.then(|| args.out.join("overlay"));
        for dir in std::iter::once(&masks).chain(&overlay) {
            fs::create_dir_all(dir)
                .with_context(|| format!("cannot create folder {}", dir.display()))?;
        }
        if let Some(parent) = args.dump_logits.as_deref().and_then(Path::parent) {
            if !parent.as_os_str().is_empty() && !parent.is_dir() {
                bail!("--dump-logits: folder {} does not exist", parent.display());
            }
        }
        let path = args.out.join("results.jsonl");
        let file =
            File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self {
            masks,
            overlay,
            results: BufWriter::new(file),
            dump: args.dump_logits.as_ref().map(|_| HashMap::new()),
        })
    }

    fn write(
        &mut self,
        f: usize,
        name: &str,
        img: &image::RgbImage,
        r: &FrameResult,
    ) -> Result<()> {
        for o in &r.objects {
            let mask = &o.mask;
            let path = self.masks.join(format!("{f:06}_obj{}.png", o.id));
            save_mask_png(&path, mask.width, mask.height, &mask.data)?;
            let record = Record {
                frame: f,
                file: name,
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
        if let Some(dir) = &self.overlay {
            let mut out = img.clone();
            draw::objects(&mut out, &r.objects);
            let path = dir.join(format!("{f:06}.png"));
            out.save(&path)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
fn progress_bar(frames: usize) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let pb = ProgressBar::with_draw_target(Some(frames as u64), target);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {msg}") {
        pb.set_style(style);
    }
    pb
}

/// `frame 12/300  3.4 fps  obj1 ✓ obj2 ✗`
fn progress_message(
    f: usize,
    frames: usize,
    recent: &VecDeque<Duration>,
    r: &FrameResult,
) -> String {
    let secs: f64 = recent.iter().map(Duration::as_secs_f64).sum();
    let fps = if secs > 0.0 {
        recent.len() as f64 / secs
    } else {
        0.0
    };
    let mut msg = format!("frame {}/{frames}  {fps:.1} fps ", f + 1);
    for o in &r.objects {
        msg.push_str(&format!(
            " obj{} {}",
            o.id,
            if o.visible { '✓' } else { '✗' }
        ));
    }
    msg
}

pub fn track(args: TrackArgs) -> Result<()> {
    let frames = list_frames(&args.frames)?;
    let prompts = prepare_prompts(&args.prompts, &frames)?;
    let mut outputs = Outputs::create(&args)?;
    let model = Arc::new(load_model(
        &args.model,
        args.input_size.input_size,
        args.dtype,
    )?);
    let pipeline = Pipeline::builder(model)
        .queue_capacity(usize::try_from(args.queue).unwrap_or(usize::MAX))
        .drop_policy(DropPolicy::Block)
        .encoder_ahead(args.encoder_ahead)
        // Frames of another size go on being tracked, as by a serially driven tracker.
        .resolution_change(ResolutionChange::Continue)
        .build()?;

    let pb = progress_bar(frames.len());
    let mut recent: VecDeque<Duration> = VecDeque::with_capacity(10);
    let (mut tracked, mut skipped) = (0usize, Vec::new());
    let mut in_tracker = Duration::ZERO;
    let mut objects = 0;
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut last_done = Instant::now();
    let start = last_done;
    let mut handle = |r: edgetam::pipeline::FrameOutput,
                      in_flight: &mut VecDeque<InFlight>|
     -> Result<()> {
        let Some(job) = in_flight.pop_front() else {
            bail!("the pipeline returned a result for no frame");
        };
        let (f, name) = (job.f, &job.name);
        if let Some(e) = r.command_errors.into_iter().next() {
            return Err(anyhow::Error::new(e).context(format!("a prompt on frame {f} ({name})")));
        }
        let result = match r.outcome {
            Outcome::Tracked(result) => result,
            Outcome::Failed(e) => {
                return Err(anyhow::Error::new(e).context(format!("tracking frame {f} ({name})")))
            }
            Outcome::Dropped => bail!("frame {f} ({name}) was dropped"),
        };
        in_tracker += r.timings.encode + r.timings.track;
        outputs.write(f, name, &job.img, &result)?;
        tracked += 1;
        objects = result.objects.len();
        let now = Instant::now();
        if recent.len() == 10 {
            recent.pop_front();
        }
        recent.push_back(now - last_done);
        last_done = now;
        pb.set_message(progress_message(f, frames.len(), &recent, &result));
        pb.inc(1);
        Ok(())
    };
    for (f, path) in frames.iter().enumerate() {
        let name = file_name(path);
        let img = match read_rgb(path) {
            Ok(img) => img,
            Err(e) if !prompts.contains_key(&f) => {
                pb.suspend(|| eprintln!("warning: skipping frame {f} ({name}): {e:#}"));
                skipped.push(name);
                pb.inc(1);
                continue;
            }
            Err(e) => return Err(e.context(format!("frame {f} ({name}) carries a prompt"))),
        };
        let (w, h) = (img.width() as usize, img.height() as usize);
        for (obj, prompt) in prompts.get(&f).into_iter().flatten() {
            pipeline
                .add_prompt(*obj, prompt.clone())
                .with_context(|| format!("object {obj} on frame {f} ({name})"))?;
        }
        pipeline
            .push(Frame::rgb8(img.as_raw(), w, h))
            .with_context(|| format!("frame {f} ({name})"))?;
        in_flight.push_back(InFlight { f, name, img });
        while let Some(r) = pipeline.try_recv()? {
            handle(r, &mut in_flight)?;
        }
    }
    pipeline.finish();
    for r in pipeline.results() {
        handle(r?, &mut in_flight)?;
    }
    pb.finish_and_clear();
    if tracked == 0 {
        bail!("no frame of {} could be read", args.frames.display());
    }
    if let (Some(path), Some(dump)) = (&args.dump_logits, &outputs.dump) {
        candle_core::safetensors::save(dump, path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / tracked as f64;
    println!(
        "tracked {tracked} frames, {objects} object(s): mean {ms:.1} ms/frame ({:.1} ms in the \
         tracker), {:.2} fps; wrote {}{}",
        in_tracker.as_secs_f64() * 1e3 / tracked as f64,
        1e3 / ms,
        args.out.display(),
        args.dump_logits
            .as_ref()
            .map(|p| format!(" and {}", p.display()))
            .unwrap_or_default(),
    );
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
}
