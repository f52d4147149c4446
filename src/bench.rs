//! `edgetam bench`: per-frame latency, FPS and the per-stage breakdown of whole tracked frames
//! (image encoder included), for several object counts and with or without encoder-ahead.
//!
//! Every measured frame is a steady tracked frame: frame 0 prompts the objects and belongs to
//! the warm-up, so a run of `--warmup K --frames N` tracks `K + N` frames and reports the last
//! `N`. The memory bank fills up over the first 7 frames (16 for object pointers), which is why
//! the default warm-up is 8.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use edgetam::pipeline::{DropPolicy, Frame, Outcome, Pipeline, PixelFormat};
use edgetam::tracker::internals::{layers, LayerTime, StageWork};
use edgetam::tracker::{EdgeTam, Precision, Prompt, StageTimes, Tracker};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::bench_plot::{self, PlotSeries};
use crate::ModelArgs;

/// `--streams`: one multi-stream pipeline against independent ones.
mod streams;

pub const AFTER_HELP: &str = "\
Synthetic input (the default) is 640x360 RGB frames with one moving square per object, the same \
frames and box prompts as tools/reference/time_reference.py, so the two can be compared stage by \
stage (tools/reference/bench_alternating.sh runs both alternately). `--input DIR` tracks a folder \
of frames instead (objects get boxes spread over the first frame; speed does not depend on where \
they are).

Stages: preprocess, image encoder (backbone + FPN + high-res convs), memory attention (memory \
gathering + the transformer), prompt encoder + mask decoder, memory encoder + spatial perceiver, \
post-process (full-resolution masks and boxes). GFLOP/s are 2 x counted multiply-adds / time.

--streams 1,2,4 measures several streams instead of the stage tables: for each N, N synthetic streams (one object each, the frames above) through one multi-stream pipeline (mode `multi`: one model, one image-encoder thread that encodes a frame of each stream in one call, one tracking thread), then N independent single-stream pipelines running at the same time (mode `independent`: each with its own encoder-ahead pair of threads, the same weights). Each stream is fed with at most 2 frames between push and result. Columns: `aggregate FPS` is frames of all streams per second (the sum of the streams' FPS, each its measured frames over the time from its last warm-up result to its last result); `FPS/stream` is that over N; `p50 ms` and `p95 ms` are the push-to-result latency of every stream's measured frames together; `worst p95 ms` is the largest of the streams' own p95. --json writes them under `streams`, with each stream's FPS, median, p95 and per-frame latencies.";

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Model input sides to measure, comma-separated (each a multiple of 256 from 256 to 2048;
    /// default: the checkpoint's own, 1024 for --random-weights): one block per size, the model
    /// reloaded at each.
    #[arg(
        long = "input-size",
        alias = "size",
        value_name = "N,..",
        value_delimiter = ','
    )]
    input_size: Vec<usize>,
    /// `synthetic` (generated 640x360 frames) or a folder of PNG/JPEG frames.
    #[arg(long, value_name = "synthetic|DIR", default_value = "synthetic")]
    input: String,
    /// Stream counts to compare, comma-separated (e.g. 1,2,4): N synthetic streams through one
    /// multi-stream pipeline against N independent pipelines, aggregate FPS and per-stream
    /// latency (median, p95) for both (see below). Replaces the stage tables.
    #[arg(long, value_name = "N,..", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..=64),
          conflicts_with_all = ["objects", "encoder_ahead", "layers", "plot", "input"])]
    streams: Vec<u32>,
    /// Object counts to measure, comma-separated.
    #[arg(long, value_name = "N,..", default_value = "1,3", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..=64))]
    objects: Vec<u32>,
    /// Measured frames per configuration.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..))]
    frames: u32,
    /// Frames tracked before measuring (frame 0, the prompted one, is always a warm-up frame).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    warmup: u32,
    /// Serial, encoder-ahead (the next frame's image encoder on its own thread) or both.
    #[arg(long, value_name = "on|off|both", default_value = "off")]
    encoder_ahead: String,
    /// Compute threads (sets RAYON_NUM_THREADS; default: all cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Precision: `f32` (exact, default), `bf16` (the fast mode: the heaviest products in bf16
    /// with f32 accumulation, on CPUs with AVX512-BF16), or `f32,bf16` for both.
    #[arg(long, value_name = "f32|bf16|f32,bf16", default_value = "f32")]
    dtype: String,
    /// Write every frame's stage times and the summaries as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw latency over frames and the median stage breakdown per configuration (SVG).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Also time each layer of the image encoder (serial runs on the CPU; the measured frames
    /// only) and print where the stage's time goes, layer by layer, per stage and per kind of
    /// layer: the table to set beside an engine's own per-layer profile
    /// (tools/reference/engine_profile.py for OpenVINO). The probes add a little to the stage.
    #[arg(long)]
    layers: bool,
}

/// Synthetic frame size (the reference timing script uses the same).
pub const SYNTH_W: usize = 640;
pub const SYNTH_H: usize = 360;

/// Frame `t` of the synthetic clip: a gradient background and one 80x80 square per object,
/// moving 4 px per frame. Mirrors `frame()` in tools/reference/time_reference.py byte for byte.
pub fn synthetic_frame(t: usize, objects: usize) -> Vec<u8> {
    let mut f = vec![0u8; SYNTH_W * SYNTH_H * 3];
    for y in 0..SYNTH_H {
        for x in 0..SYNTH_W {
            let p = &mut f[(y * SYNTH_W + x) * 3..][..3];
            p[0] = (x / 3) as u8;
            p[1] = (y / 2) as u8;
            p[2] = 96;
        }
    }
    for k in 0..objects {
        let (cx, cy) = synthetic_centre(t, k);
        for y in 0..SYNTH_H {
            for x in 0..SYNTH_W {
                if (x as i64 - cx).abs() < 40 && (y as i64 - cy).abs() < 40 {
                    let p = &mut f[(y * SYNTH_W + x) * 3..][..3];
                    p.copy_from_slice(&[230, (60 * k) as u8, 40]);
                }
            }
        }
    }
    f
}

fn synthetic_centre(t: usize, k: usize) -> (i64, i64) {
    (120 + 150 * k as i64 + 4 * t as i64, 160 + 60 * k as i64)
}

/// Object `k`'s box on frame 0: the synthetic square with a 5 px margin, or for real frames
/// boxes spread over the frame.
fn object_box(k: usize, objects: usize, width: usize, height: usize, synthetic: bool) -> Prompt {
    if synthetic {
        let (cx, cy) = synthetic_centre(0, k);
        let (cx, cy) = (cx as f32, cy as f32);
        return Prompt::from_box(cx - 45.0, cy - 45.0, cx + 45.0, cy + 45.0);
    }
    let cell = width as f32 / objects as f32;
    let (x0, x1) = (
        cell * k as f32 + cell * 0.2,
        cell * (k + 1) as f32 - cell * 0.2,
    );
    let (y0, y1) = (height as f32 * 0.3, height as f32 * 0.7);
    Prompt::from_box(x0, y0, x1, y1)
}

/// The frames a run tracks: generated, or read from a folder (cycled when shorter).
enum Input {
    Synthetic,
    Files(Vec<(Vec<u8>, usize, usize)>),
}

impl Input {
    fn open(spec: &str, needed: usize) -> Result<Self> {
        if spec == "synthetic" {
            return Ok(Self::Synthetic);
        }
        let paths = crate::track::list_frames(Path::new(spec))?;
        let mut frames = Vec::new();
        for p in paths.iter().take(needed) {
            let img =
                crate::read_rgb(p).with_context(|| format!("cannot read frame {}", p.display()))?;
            let (w, h) = (img.width() as usize, img.height() as usize);
            if let Some((_, w0, h0)) = frames.first() {
                if (*w0, *h0) != (w, h) {
                    bail!(
                        "frame {} is {w}x{h}, the first frame is {w0}x{h0}: a benchmark needs \
                         one size",
                        p.display()
                    );
                }
            }
            frames.push((img.into_raw(), w, h));
        }
        Ok(Self::Files(frames))
    }

    fn synthetic(&self) -> bool {
        matches!(self, Self::Synthetic)
    }

    fn size(&self) -> (usize, usize) {
        match self {
            Self::Synthetic => (SYNTH_W, SYNTH_H),
            Self::Files(f) => f.first().map(|(_, w, h)| (*w, *h)).unwrap_or((0, 0)),
        }
    }

    fn frame(&self, t: usize, objects: usize) -> Vec<u8> {
        match self {
            Self::Synthetic => synthetic_frame(t, objects),
            Self::Files(f) => f[t % f.len()].0.clone(),
        }
    }
}

/// One measured frame.
#[derive(Debug, Clone, Serialize)]
struct FrameRecord {
    frame: u64,
    /// Serial: the whole `track` call. Encoder-ahead: the interval between this frame's result
    /// and the previous one's (the steady-state cost of a frame when the two threads overlap).
    end_to_end_ms: f64,
    /// Encoder-ahead only: from handing the frame to the pipeline to its result.
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_ms: Option<f64>,
    preprocess_ms: f64,
    image_encoder_ms: f64,
    memory_attention_ms: f64,
    mask_decoder_ms: f64,
    memory_encoder_ms: f64,
    postprocess_ms: f64,
}

impl FrameRecord {
    fn new(frame: u64, end_to_end: Duration, latency: Option<Duration>, s: &StageTimes) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Self {
            frame,
            end_to_end_ms: ms(end_to_end),
            latency_ms: latency.map(ms),
            preprocess_ms: ms(s.preprocess),
            image_encoder_ms: ms(s.image_encoder),
            memory_attention_ms: ms(s.memory_attention),
            mask_decoder_ms: ms(s.mask_decoder),
            memory_encoder_ms: ms(s.memory_encoder),
            postprocess_ms: ms(s.postprocess),
        }
    }

    /// `(column key, value)` for every reported column, end to end first.
    fn columns(&self) -> [(&'static str, f64); 7] {
        [
            ("end_to_end_ms", self.end_to_end_ms),
            ("preprocess_ms", self.preprocess_ms),
            ("image_encoder_ms", self.image_encoder_ms),
            ("memory_attention_ms", self.memory_attention_ms),
            ("mask_decoder_ms", self.mask_decoder_ms),
            ("memory_encoder_ms", self.memory_encoder_ms),
            ("postprocess_ms", self.postprocess_ms),
        ]
    }
}

const LABELS: [&str; 7] = [
    "frame (end to end)",
    "preprocess",
    "image encoder",
    "memory attention",
    "prompt enc + mask decoder",
    "memory enc + perceiver",
    "post-process",
];

#[derive(Debug, Clone, Serialize)]
struct ConfigReport {
    objects: u32,
    encoder_ahead: bool,
    dtype: String,
    threads: usize,
    image_size: usize,
    frame_width: usize,
    frame_height: usize,
    warmup: u32,
    frames: Vec<FrameRecord>,
    median: serde_json::Map<String, serde_json::Value>,
    p95: serde_json::Map<String, serde_json::Value>,
    max: serde_json::Map<String, serde_json::Value>,
    /// Measured frames / wall time over them.
    fps: f64,
    /// Achieved GFLOP/s per stage (2 x counted multiply-adds / summed stage time).
    gflops: serde_json::Map<String, serde_json::Value>,
    /// Counted multiply-adds of the measured frames, per stage (GMAC per frame, mean).
    gmac_per_frame: serde_json::Map<String, serde_json::Value>,
    /// The same in MACs, keyed by stage name without `_ms` (what `compare_bench.py` reads).
    macs: serde_json::Map<String, serde_json::Value>,
    /// On a GPU: host <-> device traffic per frame, mean over the whole run (warm-up included).
    #[serde(skip_serializing_if = "Option::is_none")]
    transfer_per_frame: Option<TransferPerFrame>,
    /// `--layers`: the image encoder's layers in the order they run, mean per measured frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    layers: Option<Vec<LayerReport>>,
}

/// One image-encoder layer's time (`--layers`).
#[derive(Debug, Clone, Serialize)]
struct LayerReport {
    layer: String,
    kind: &'static str,
    ms_per_frame: f64,
    calls_per_frame: f64,
}

impl LayerReport {
    fn from_probes(times: Vec<LayerTime>, frames: usize) -> Vec<Self> {
        let n = frames.max(1) as f64;
        times
            .into_iter()
            .map(|t| Self {
                layer: t.layer,
                kind: t.kind,
                ms_per_frame: t.total.as_secs_f64() * 1e3 / n,
                calls_per_frame: t.calls as f64 / n,
            })
            .collect()
    }
}

/// Mean host <-> device copies per frame (`edgetam_tracker::transfer`).
#[derive(Debug, Clone, Serialize)]
struct TransferPerFrame {
    uploaded_bytes: f64,
    uploads: f64,
    downloaded_bytes: f64,
    downloads: f64,
}

impl TransferPerFrame {
    fn new(t: edgetam::tracker::internals::transfer::Transfers, frames: usize) -> Self {
        let n = frames.max(1) as f64;
        Self {
            uploaded_bytes: t.uploaded_bytes as f64 / n,
            uploads: t.uploads as f64 / n,
            downloaded_bytes: t.downloaded_bytes as f64 / n,
            downloads: t.downloads as f64 / n,
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summarize(frames: &[FrameRecord], q: f64) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for c in 0..7 {
        let mut v: Vec<f64> = frames.iter().map(|f| f.columns()[c].1).collect();
        v.sort_by(f64::total_cmp);
        let key = frames.first().map(|f| f.columns()[c].0).unwrap_or("");
        out.insert(key.to_string(), serde_json::json!(percentile(&v, q)));
    }
    out
}

fn get(m: &serde_json::Map<String, serde_json::Value>, k: &str) -> f64 {
    m.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN)
}

/// Counted multiply-adds per stage for frame `t` (objects boxed on frame 0) with `objects`
/// tracked objects, in [`FrameRecord::columns`] order (end to end first). Memory attention's
/// layer-0 self-attention runs once per frame for all objects, and is counted once.
fn frame_macs(model: &EdgeTam, t: u64, objects: u32) -> [f64; 7] {
    let cfg = model.config();
    let w = StageWork::box_stream_frame(cfg, t as usize);
    let n = u64::from(objects);
    let mut att = n * w.memory_attention;
    if w.memory_attention > 0 && n > 1 {
        att -= (n - 1) * StageWork::shared_self_attention(cfg);
    }
    let total = w.frame_total(cfg, objects as usize) as f64;
    [
        total,
        0.0,
        w.image_encoder as f64,
        att as f64,
        (n * w.mask_decoder) as f64,
        (n * w.memory_encoder) as f64,
        0.0,
    ]
}

struct Run<'a> {
    model: &'a Arc<EdgeTam>,
    input: &'a Input,
    warmup: u32,
    frames: u32,
    progress: &'a ProgressBar,
    /// `--layers`: the probes' records of the warm-up frames are dropped.
    layers: bool,
}

impl Run<'_> {
    fn prompt(&self, objects: u32) -> Vec<(u32, Prompt)> {
        let (w, h) = self.input.size();
        (0..objects as usize)
            .map(|k| {
                let p = object_box(k, objects as usize, w, h, self.input.synthetic());
                (k as u32 + 1, p)
            })
            .collect()
    }

    fn serial(&self, objects: u32) -> Result<Vec<FrameRecord>> {
        let mut tracker = Tracker::new(Arc::clone(self.model));
        for (id, p) in self.prompt(objects) {
            tracker.add_prompt(id, 0, p)?;
        }
        let (w, h) = self.input.size();
        let mut out = Vec::new();
        for t in 0..(self.warmup + self.frames) as usize {
            let rgb = self.input.frame(t, objects as usize);
            if self.layers && t == self.warmup as usize {
                layers::take();
            }
            let start = Instant::now();
            let r = tracker.track(&rgb, w, h)?;
            let took = start.elapsed();
            if t >= self.warmup as usize {
                out.push(FrameRecord::new(r.frame_index, took, None, &r.times));
            }
            self.progress.inc(1);
        }
        Ok(out)
    }

    fn ahead(&self, objects: u32) -> Result<Vec<FrameRecord>> {
        let pipeline = Pipeline::builder(Arc::clone(self.model))
            .encoder_ahead(true)
            .queue_capacity(2)
            .drop_policy(DropPolicy::Block)
            .build()?;
        for (id, p) in self.prompt(objects) {
            pipeline.add_prompt(id, p)?;
        }
        let (w, h) = self.input.size();
        let total = (self.warmup + self.frames) as usize;
        let mut out = Vec::new();
        let mut last_out: Option<Instant> = None;
        // At most IN_FLIGHT frames between push and result: one in the encoder, one being
        // tracked, as a live source at the sustainable rate would keep it. An unpaced feeder
        // would fill the queue too, and the latency would count the time frames wait in it.
        const IN_FLIGHT: usize = 2;
        let (credit, credits) = std::sync::mpsc::channel::<()>();
        for _ in 0..IN_FLIGHT {
            let _ = credit.send(());
        }
        std::thread::scope(|s| -> Result<()> {
            // Owned here, so an early return drops it and the waiting feeder stops.
            let credit = credit;
            // Frames are generated on their own thread, each once a result made room for it.
            let feed = &pipeline;
            let feeder = s.spawn(move || -> Result<()> {
                for t in 0..total {
                    let rgb = self.input.frame(t, objects as usize);
                    if credits.recv().is_err() {
                        return Ok(()); // the reader stopped (it reports why)
                    }
                    if let Err(e) = feed.push(Frame::new(&rgb[..], w, h, PixelFormat::Rgb8)) {
                        feed.finish(); // unblocks `recv` below
                        return Err(e.into());
                    }
                }
                Ok(())
            });
            for t in 0..total {
                let o = pipeline.recv()?;
                let now = Instant::now();
                let r = match &o.outcome {
                    Outcome::Tracked(r) => r,
                    Outcome::Failed(e) => bail!("frame {t} failed: {e}"),
                    Outcome::Dropped => bail!("frame {t} was dropped (blocking queue)"),
                };
                if t >= self.warmup as usize {
                    let interval = last_out.map_or(Duration::ZERO, |p| now - p);
                    out.push(FrameRecord::new(
                        r.frame_index,
                        interval,
                        Some(o.timings.end_to_end),
                        &r.times,
                    ));
                }
                last_out = Some(now);
                let _ = credit.send(());
                self.progress.inc(1);
            }
            feeder
                .join()
                .map_err(|_| anyhow::anyhow!("frame feeder thread panicked"))??;
            Ok(())
        })?;
        pipeline.close();
        Ok(out)
    }
}

fn parse_modes(s: &str) -> Result<Vec<bool>> {
    Ok(match s {
        "off" => vec![false],
        "on" => vec![true],
        "both" => vec![false, true],
        _ => bail!("--encoder-ahead must be on, off or both, got `{s}`"),
    })
}

pub fn bench(args: BenchArgs) -> Result<()> {
    let dtypes: Vec<Precision> = args
        .dtype
        .split(',')
        .map(|d| {
            d.parse::<Precision>().map_err(|_| {
                anyhow::anyhow!("--dtype must be f32 or bf16 (or both: f32,bf16), got `{d}`")
            })
        })
        .collect::<Result<_>>()?;
    let modes = parse_modes(&args.encoder_ahead)?;
    if let Some(t) = args.threads {
        // Before any pool exists: candle's matmuls, rayon and our kernels all read it.
        std::env::set_var("RAYON_NUM_THREADS", t.to_string());
    }
    let threads = candle_core::utils::get_num_threads();
    let sizes: Vec<Option<usize>> = if args.input_size.is_empty() {
        vec![None]
    } else {
        args.input_size.iter().map(|&n| Some(n)).collect()
    };
    // Every size is checked before the first model loads (a typo fails at once, not after a
    // long run at the sizes before it).
    for &n in args.input_size.iter() {
        edgetam::tracker::EdgeTamConfig::default().at_input_size(n)?;
    }
    let total = (args.warmup + args.frames) as usize;
    if !args.streams.is_empty() {
        return bench_streams(&args, &sizes, &dtypes, threads);
    }
    let input = Input::open(&args.input, total)?;
    let (fw, fh) = input.size();
    let runs = args.objects.len() * modes.len() * dtypes.len();
    let mut cpu = format!(
        "{}\nkernels: {}",
        CpuInfo::read().describe(),
        crate::kernel_path()?
    );
    if let (true, Some(overrides)) = (
        dtypes.contains(&Precision::Bf16),
        crate::bf16_policy_overrides(),
    ) {
        cpu.push_str(&format!(
            "\nbf16 policy overrides (EDGETAM_BF16_POLICY): {overrides}"
        ));
    }
    let mut reports = Vec::new();
    for size in sizes {
        // Loaded in bf16 when it is compared: a CPU that cannot run it refuses before the load.
        let strictest = if dtypes.contains(&Precision::Bf16) {
            Precision::Bf16
        } else {
            Precision::F32
        };
        let mut model = crate::load_model(&args.model, size, strictest)?;
        let image_size = model.config().image_size;
        eprintln!(
            "bench: {image_size} input, {fw}x{fh} {} frames, {threads} threads, {} \
             configuration(s) x ({} warm-up + {} measured frames)\ncpu: {cpu}",
            if input.synthetic() {
                "synthetic"
            } else {
                "file"
            },
            runs,
            args.warmup,
            args.frames,
        );
        let progress = ProgressBar::new((runs * total) as u64);
        progress.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} frames  {msg}  [{elapsed}<{eta}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let first = reports.len();
        // Precisions innermost: compared configurations run back to back (the machine drifts).
        for &objects in &args.objects {
            for &ahead in &modes {
                for &dtype in &dtypes {
                    model
                        .try_set_precision(dtype)
                        .with_context(|| format!("--dtype {dtype}"))?;
                    let shared = Arc::new(model);
                    progress.set_message(format!(
                        "{image_size} input, {objects} object(s), {}, {dtype}",
                        if ahead { "encoder-ahead" } else { "serial" }
                    ));
                    // Per-layer probes on the serial CPU runs only: the encoder-ahead thread would
                    // mix frames across the warm-up boundary, and a GPU's ops return queued.
                    let probe = args.layers && !ahead && shared.device().is_cpu();
                    layers::set_enabled(probe);
                    let run = Run {
                        model: &shared,
                        input: &input,
                        warmup: args.warmup,
                        frames: args.frames,
                        progress: &progress,
                        layers: probe,
                    };
                    let moved_before = edgetam::tracker::internals::transfer::snapshot();
                    let frames = if ahead {
                        run.ahead(objects)?
                    } else {
                        run.serial(objects)?
                    };
                    let moved =
                        edgetam::tracker::internals::transfer::snapshot().since(&moved_before);
                    let measured: f64 = frames.iter().map(|f| f.end_to_end_ms).sum::<f64>() / 1e3;
                    let mut r = report(
                        &shared,
                        objects,
                        ahead,
                        dtype,
                        threads,
                        &args,
                        &frames,
                        measured,
                        (fw, fh),
                    );
                    if !shared.device().is_cpu() {
                        r.transfer_per_frame = Some(TransferPerFrame::new(moved, total));
                    }
                    if probe {
                        layers::set_enabled(false);
                        r.layers = Some(LayerReport::from_probes(layers::take(), frames.len()));
                    }
                    reports.push(r);
                    model = Arc::try_unwrap(shared)
                        .map_err(|_| anyhow::anyhow!("the model is still shared after a run"))?;
                }
            }
        }
        progress.finish_and_clear();
        print!("{}", render_blocks(&reports[first..]));
        print!("{}", render_layers(&reports[first..]));
    }
    print!("{}", render_summary(&reports));
    let peak_rss = peak_rss_mib();
    if let Some(mib) = peak_rss {
        println!("peak RSS {mib:.0} MiB (whole run, model included)");
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "tool": "edgetam bench",
            "version": env!("CARGO_PKG_VERSION"),
            "input": if input.synthetic() { "synthetic".to_string() } else { args.input.clone() },
            "threads": threads,
            // One size: its value (the format compare_bench.py reads); several: a list. Each
            // configuration also carries its own `image_size`.
            "size": match reports_sizes(&reports).as_slice() {
                [one] => serde_json::json!(one),
                all => serde_json::json!(all),
            },
            "machine": machine(),
            "peak_rss_mib": peak_rss,
            "configs": reports,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.plot {
        bench_plot::draw(path, &reports_for_plot(&reports))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// `--streams`: per input size and precision, every stream count in both modes.
fn bench_streams(
    args: &BenchArgs,
    sizes: &[Option<usize>],
    dtypes: &[Precision],
    threads: usize,
) -> Result<()> {
    let total = (args.warmup + args.frames) as usize;
    let clip = streams::clip(total);
    let frames_per_size: usize = args.streams.iter().map(|&n| 2 * n as usize * total).sum();
    let mut reports = Vec::new();
    for &size in sizes {
        let strictest = if dtypes.contains(&Precision::Bf16) {
            Precision::Bf16
        } else {
            Precision::F32
        };
        let mut model = crate::load_model(&args.model, size, strictest)?;
        let image_size = model.config().image_size;
        eprintln!(
            "bench: {image_size} input, {SYNTH_W}x{SYNTH_H} synthetic frames, {threads} threads, \
             streams {:?} x (multi, independent) x ({} warm-up + {} measured frames per \
             stream)\ncpu: {}",
            args.streams,
            args.warmup,
            args.frames,
            CpuInfo::read().describe(),
        );
        let progress = ProgressBar::new((frames_per_size * dtypes.len()) as u64);
        progress.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} frames  {msg}  [{elapsed}<{eta}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let first = reports.len();
        for &n in &args.streams {
            for mode in [streams::Mode::Multi, streams::Mode::Independent] {
                for &dtype in dtypes {
                    model
                        .try_set_precision(dtype)
                        .with_context(|| format!("--dtype {dtype}"))?;
                    let shared = Arc::new(model);
                    progress.set_message(format!("{image_size} input, {n} stream(s), {mode:?}"));
                    let run = streams::StreamsRun {
                        model: &shared,
                        frames: &clip,
                        warmup: args.warmup,
                        progress: &progress,
                        dtype: dtype.to_string(),
                        threads,
                    };
                    reports.push(run.measure(n as usize, mode)?);
                    model = Arc::try_unwrap(shared)
                        .map_err(|_| anyhow::anyhow!("the model is still shared after a run"))?;
                }
            }
        }
        progress.finish_and_clear();
        print!("{}", streams::render(&reports[first..]));
    }
    let peak_rss = peak_rss_mib();
    if let Some(mib) = peak_rss {
        println!("peak RSS {mib:.0} MiB (whole run, model included)");
    }
    if let Some(path) = &args.json {
        let mut sizes: Vec<usize> = reports.iter().map(|r| r.image_size).collect();
        sizes.dedup();
        let doc = serde_json::json!({
            "tool": "edgetam bench",
            "version": env!("CARGO_PKG_VERSION"),
            "input": "synthetic",
            "threads": threads,
            "size": match sizes.as_slice() {
                [one] => serde_json::json!(one),
                all => serde_json::json!(all),
            },
            "machine": machine(),
            "peak_rss_mib": peak_rss,
            "configs": [],
            "streams": reports,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn report(
    model: &EdgeTam,
    objects: u32,
    ahead: bool,
    dtype: Precision,
    threads: usize,
    args: &BenchArgs,
    frames: &[FrameRecord],
    measured_s: f64,
    (fw, fh): (usize, usize),
) -> ConfigReport {
    let mut macs = [0f64; 7];
    for f in frames {
        for (a, m) in macs.iter_mut().zip(frame_macs(model, f.frame, objects)) {
            *a += m;
        }
    }
    let mut gflops = serde_json::Map::new();
    let mut gmac = serde_json::Map::new();
    let mut mac_counts = serde_json::Map::new();
    for (c, &m) in macs.iter().enumerate() {
        let Some(key) = frames.first().map(|f| f.columns()[c].0) else {
            break;
        };
        let secs: f64 = frames.iter().map(|f| f.columns()[c].1).sum::<f64>() / 1e3;
        if m > 0.0 && secs > 0.0 {
            gflops.insert(key.into(), serde_json::json!(2.0 * m / secs / 1e9));
            gmac.insert(key.into(), serde_json::json!(m / frames.len() as f64 / 1e9));
            let name = key.trim_end_matches("_ms");
            mac_counts.insert(name.into(), serde_json::json!(m / frames.len() as f64));
        }
    }
    ConfigReport {
        objects,
        encoder_ahead: ahead,
        dtype: dtype.to_string(),
        threads,
        image_size: model.config().image_size,
        frame_width: fw,
        frame_height: fh,
        warmup: args.warmup,
        frames: frames.to_vec(),
        median: summarize(frames, 0.5),
        p95: summarize(frames, 0.95),
        max: summarize(frames, 1.0),
        fps: if measured_s > 0.0 {
            frames.len() as f64 / measured_s
        } else {
            0.0
        },
        gflops,
        gmac_per_frame: gmac,
        macs: mac_counts,
        transfer_per_frame: None,
        layers: None,
    }
}

/// Peak resident memory of this process so far (MiB; Linux `VmHWM`), `None` elsewhere.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// What a result depends on beyond the model: the CPU (name, x86 family/model, the ISA the fast
/// paths need) and the core count. "AMD EPYC" alone names several microarchitectures whose
/// AVX-512 throughput differs by 2x (Zen 4 splits 512-bit ops in two, Zen 5 does not).
#[derive(Debug, Clone, Default, PartialEq)]
struct CpuInfo {
    name: String,
    vendor: String,
    family: Option<u32>,
    model: Option<u32>,
    /// Of `avx2`, `avx512f`, `avx512_bf16`, `amx_bf16`: the ones the CPU has.
    isa: Vec<&'static str>,
}

impl CpuInfo {
    /// Reads the first processor of a `/proc/cpuinfo` text.
    fn parse(cpuinfo: &str) -> Self {
        let field = |key: &str| {
            cpuinfo
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let flags = field("flags").unwrap_or_default();
        let flags: Vec<&str> = flags.split_whitespace().collect();
        Self {
            name: field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string()),
            vendor: field("vendor_id").unwrap_or_default(),
            family: field("cpu family").and_then(|v| v.parse().ok()),
            model: field("model").and_then(|v| v.parse().ok()),
            isa: ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]
                .into_iter()
                .filter(|f| flags.contains(f))
                .collect(),
        }
    }

    fn read() -> Self {
        std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| Self::parse(&s))
            .unwrap_or_else(|_| Self {
                name: std::env::consts::ARCH.to_string(),
                ..Self::default()
            })
    }

    /// AMD's Zen generation from the family/model numbers (`None` for other CPUs).
    fn microarchitecture(&self) -> Option<&'static str> {
        if self.vendor != "AuthenticAMD" {
            return None;
        }
        match (self.family?, self.model?) {
            (26, _) => Some("Zen 5"),
            (25, 0x10..=0x1f | 0x60..=0xaf) => Some("Zen 4"),
            (25, _) => Some("Zen 3"),
            (23, _) => Some("Zen 1/2"),
            _ => None,
        }
    }

    /// One line for the report header, e.g. `AMD EPYC (Zen 5, family 26 model 2; avx512f ...)`.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(u) = self.microarchitecture() {
            parts.push(u.to_string());
        }
        if let (Some(f), Some(m)) = (self.family, self.model) {
            parts.push(format!("family {f} model {m}"));
        }
        let mut s = self.name.clone();
        if !parts.is_empty() || !self.isa.is_empty() {
            s.push_str(&format!(" ({}; {})", parts.join(", "), self.isa.join(" ")));
        }
        s
    }
}

/// The CPU and core count, for the JSON report.
fn machine() -> serde_json::Value {
    let cpu = CpuInfo::read();
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    serde_json::json!({
        "cpu": cpu.name,
        "cpu_description": cpu.describe(),
        "cpu_family": cpu.family,
        "cpu_model": cpu.model,
        "microarchitecture": cpu.microarchitecture(),
        "isa": cpu.isa,
        "kernel_isa": edgetam::tracker::isa().map(|i| i.name()).unwrap_or("invalid EDGETAM_ISA"),
        "logical_cpus": logical,
        "implementation": "edgetam-rs",
        "bf16_policy_overrides": crate::bf16_policy_overrides(),
    })
}

fn mode_name(ahead: bool) -> &'static str {
    if ahead {
        "encoder-ahead"
    } else {
        "serial"
    }
}

/// The text report: one stage table per configuration, then a summary line per configuration.
/// The distinct input sizes of `reports`, in run order.
fn reports_sizes(reports: &[ConfigReport]) -> Vec<usize> {
    let mut sizes: Vec<usize> = Vec::new();
    for r in reports {
        if !sizes.contains(&r.image_size) {
            sizes.push(r.image_size);
        }
    }
    sizes
}

/// `--layers`: per configuration, the image encoder's layers in the order they run, then the
/// totals per backbone stage and per kind of layer (mean ms per measured frame).
fn render_layers(reports: &[ConfigReport]) -> String {
    let mut s = String::new();
    for r in reports {
        let Some(layers) = &r.layers else { continue };
        let probed: f64 = layers.iter().map(|l| l.ms_per_frame).sum();
        let stage =
            r.frames.iter().map(|f| f.image_encoder_ms).sum::<f64>() / r.frames.len().max(1) as f64;
        let _ = writeln!(
            s,
            "\nimage encoder, layer by layer ({} object(s), {}, {} input): the layers sum to \
             {probed:.2} ms of the stage's mean {stage:.2} ms per frame",
            r.objects, r.dtype, r.image_size
        );
        let share = |ms: f64| {
            if probed > 0.0 {
                100.0 * ms / probed
            } else {
                0.0
            }
        };
        let _ = writeln!(s, "{:>8} {:>6}  {:<32} layer", "ms", "share", "kind");
        for l in layers {
            let _ = writeln!(
                s,
                "{:>8.3} {:>5.1}%  {:<32} {}",
                l.ms_per_frame,
                share(l.ms_per_frame),
                l.kind,
                l.layer
            );
        }
        let mut totals = |title: &str, key: &dyn Fn(&LayerReport) -> String| {
            let mut groups: Vec<(String, f64, usize)> = Vec::new();
            for l in layers {
                let k = key(l);
                match groups.iter_mut().find(|g| g.0 == k) {
                    Some(g) => {
                        g.1 += l.ms_per_frame;
                        g.2 += 1;
                    }
                    None => groups.push((k, l.ms_per_frame, 1)),
                }
            }
            let _ = writeln!(s, "{title}:");
            for (k, ms, n) in groups {
                let _ = writeln!(s, "{ms:>8.3} {:>5.1}%  {n:>3} layer(s)  {k}", share(ms));
            }
        };
        totals("per part", &|l| {
            l.layer.split('.').next().unwrap_or_default().to_string()
        });
        totals("per kind", &|l| l.kind.to_string());
    }
    s
}

/// One stage table per configuration.
fn render_blocks(reports: &[ConfigReport]) -> String {
    let mut s = String::new();
    for r in reports {
        let _ = writeln!(
            s,
            "\n{} object(s), {}, {}, {} threads, {} input, {}x{} frames, {} measured after {} \
             warm-up",
            r.objects,
            mode_name(r.encoder_ahead),
            r.dtype,
            r.threads,
            r.image_size,
            r.frame_width,
            r.frame_height,
            r.frames.len(),
            r.warmup
        );
        let _ = writeln!(
            s,
            "{:<27} {:>9} {:>9} {:>9} {:>7} {:>8} {:>9}",
            "stage", "p50 ms", "p95 ms", "max ms", "share", "GMAC", "GFLOP/s"
        );
        let stage_sum: f64 = StageTimes::NAMES
            .iter()
            .map(|n| get(&r.median, &format!("{n}_ms")))
            .sum();
        for (label, key) in LABELS.iter().zip(
            std::iter::once("end_to_end_ms".to_string())
                .chain(StageTimes::NAMES.iter().map(|n| format!("{n}_ms"))),
        ) {
            let p50 = get(&r.median, &key);
            let share = if key == "end_to_end_ms" || stage_sum <= 0.0 {
                String::new()
            } else {
                format!("{:.1}%", 100.0 * p50 / stage_sum)
            };
            let gmac = r
                .gmac_per_frame
                .get(&key)
                .and_then(|v| v.as_f64())
                .map_or(String::new(), |v| format!("{v:.1}"));
            let gf = r
                .gflops
                .get(&key)
                .and_then(|v| v.as_f64())
                .map_or(String::new(), |v| format!("{v:.1}"));
            let _ = writeln!(
                s,
                "{:<27} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>8} {:>9}",
                label,
                p50,
                get(&r.p95, &key),
                get(&r.max, &key),
                share,
                gmac,
                gf
            );
        }
        if let Some(t) = &r.transfer_per_frame {
            let _ = writeln!(
                s,
                "(host <-> device per frame: {:.0} bytes up in {:.1} copies, {:.0} bytes down in \
                 {:.1} copies)",
                t.uploaded_bytes, t.uploads, t.downloaded_bytes, t.downloads
            );
        }
        if r.encoder_ahead {
            let lat: Vec<f64> = {
                let mut v: Vec<f64> = r.frames.iter().filter_map(|f| f.latency_ms).collect();
                v.sort_by(f64::total_cmp);
                v
            };
            let _ = writeln!(
                s,
                "(encoder-ahead: end to end = interval between results; push-to-result latency \
                 p50 {:.1} ms with at most 2 frames in flight)",
                percentile(&lat, 0.5)
            );
        }
    }
    s
}

/// One line per configuration, every input size.
fn render_summary(reports: &[ConfigReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\nsummary");
    let _ = writeln!(
        s,
        "{:>5} {:>7} {:<14} {:>6} {:>10} {:>10} {:>10} {:>8}",
        "size", "objects", "mode", "dtype", "p50 ms", "p95 ms", "max ms", "FPS"
    );
    for r in reports {
        let _ = writeln!(
            s,
            "{:>5} {:>7} {:<14} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>8.2}",
            r.image_size,
            r.objects,
            mode_name(r.encoder_ahead),
            r.dtype,
            get(&r.median, "end_to_end_ms"),
            get(&r.p95, "end_to_end_ms"),
            get(&r.max, "end_to_end_ms"),
            r.fps
        );
    }
    s
}

fn reports_for_plot(reports: &[ConfigReport]) -> Vec<PlotSeries> {
    reports
        .iter()
        .map(|r| PlotSeries {
            name: format!(
                "{}, {} obj, {}, {}",
                r.image_size,
                r.objects,
                mode_name(r.encoder_ahead),
                r.dtype
            ),
            frame_ms: r
                .frames
                .iter()
                .map(|f| (f.frame, f.end_to_end_ms))
                .collect(),
            stage_medians: StageTimes::NAMES
                .iter()
                .map(|n| get(&r.median, &format!("{n}_ms")))
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_info_reads_the_first_processor() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n\
                    model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n\
                    processor\t: 1\nmodel name\t: other\n";
        let cpu = CpuInfo::parse(text);
        assert_eq!(cpu.name, "AMD EPYC");
        assert_eq!((cpu.family, cpu.model), (Some(26), Some(2)));
        assert_eq!(cpu.isa, ["avx2", "avx512f", "avx512_bf16"]);
        assert_eq!(cpu.microarchitecture(), Some("Zen 5"));
        assert_eq!(
            cpu.describe(),
            "AMD EPYC (Zen 5, family 26 model 2; avx2 avx512f avx512_bf16)"
        );
        let zen4 = CpuInfo::parse("vendor_id : AuthenticAMD\ncpu family : 25\nmodel : 17\n");
        assert_eq!(zen4.microarchitecture(), Some("Zen 4"));
        let intel = CpuInfo::parse("vendor_id : GenuineIntel\ncpu family : 6\nmodel : 143\n");
        assert_eq!(intel.microarchitecture(), None);
        assert_eq!(CpuInfo::parse("").family, None);
    }

    #[test]
    fn synthetic_frames_match_the_reference_formula() {
        let f = synthetic_frame(0, 3);
        // Background (x // 3, y // 2, 96) wrapping as uint8.
        let px = |x: usize, y: usize| &f[(y * SYNTH_W + x) * 3..][..3];
        assert_eq!(px(0, 0), &[0, 0, 96]);
        assert_eq!(px(639, 359), &[(639 / 3) as u8, (359 / 2) as u8, 96]);
        // Object k's square centre.
        assert_eq!(px(120, 160), &[230, 0, 40]);
        assert_eq!(px(270, 220), &[230, 60, 40]);
        assert_eq!(px(420, 280), &[230, 120, 40]);
        // The square is |d| < 40 wide: 80 and 81 px from the centre are background.
        assert_eq!(px(160, 160), &[(160 / 3) as u8, 80, 96]);
        assert_eq!(px(159, 160), &[230, 0, 40]);
        // It moves 4 px per frame.
        let g = synthetic_frame(5, 1);
        assert_eq!(&g[(160 * SYNTH_W + 159 + 20) * 3..][..3], &[230, 0, 40]);
    }

    #[test]
    fn percentiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 1.0), 5.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn encoder_ahead_modes() {
        assert_eq!(parse_modes("both").ok(), Some(vec![false, true]));
        assert!(parse_modes("maybe").is_err());
    }
}
