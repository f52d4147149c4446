//! The `edgetam` command-line tool.

// CLI-only module (not part of the `edgetam` library).
mod bench;
mod bench_plot;
mod soak;
mod track;
#[cfg(feature = "video")]
mod video;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use edgetam::draw;
use edgetam::pipeline as prompt_syntax;
use edgetam::tracker::{
    checks, checks::fixture::Fixture, mask_area_and_box, parse_device, Backend, EdgeTam,
    ModelSource, ModelSpec, MultimaskMode, Point, PointLabel, Precision, Prompt, Weights,
};

#[derive(Parser)]
#[command(
    name = "edgetam",
    version,
    about = "EdgeTAM object segmentation and tracking in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Segment one object in one image from a box and/or points.
    Segment(SegmentArgs),
    /// Track objects through a video (file, camera, stream) or a folder of frames: mask PNGs,
    /// results.jsonl, an overlay video; several --input are several streams on one model.
    #[command(after_help = track::AFTER_HELP)]
    Track(track::TrackArgs),
    /// Check every model stage against reference fixtures (exit status 1 on any failure).
    Check(CheckArgs),
    /// Per-frame latency, FPS and stage breakdown of whole tracked frames (image encoder
    /// included) for 1..N objects, serial and encoder-ahead; table, JSON and SVG plot; with
    /// --streams, one multi-stream pipeline against independent ones.
    #[command(after_help = bench::AFTER_HELP)]
    Bench(bench::BenchArgs),
    /// A long run of the frame-queue pipeline with objects added, re-prompted, removed and
    /// the stream reset on a schedule; samples RSS and open file descriptors (CSV, JSON, SVG).
    #[command(after_help = soak::AFTER_HELP)]
    Soak(soak::SoakArgs),
    /// Which vector instruction set the CPU kernels take here (avx512, avx2, neon, portable)
    /// and which this CPU can run; `EDGETAM_ISA=<name>` caps it.
    Cpu,
}

#[derive(Args)]
pub(crate) struct ModelArgs {
    /// Model: a folder with config.json + model.safetensors, an original edgetam.pt, or a
    /// Hugging Face hub repository id (owner/name: yonigozlan/EdgeTAM-hf, facebook/EdgeTAM)
    /// fetched into the Hugging Face cache on first use (HF_HOME, HF_ENDPOINT, HF_TOKEN,
    /// HF_HUB_OFFLINE=1 for the cache only); a path that exists wins over an id.
    #[arg(
        long,
        value_name = "PATH|REPO",
        required_unless_present = "random_weights"
    )]
    pub(crate) model: Option<String>,
    /// Use deterministic random weights instead of a checkpoint (runs end to end; masks are
    /// meaningless).
    #[arg(long, conflicts_with = "model")]
    pub(crate) random_weights: bool,
    /// Compute device: `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub(crate) device: String,
}

/// `--input-size` of `segment` and `track`.
#[derive(Args)]
pub(crate) struct InputSizeArg {
    /// Model input side: a multiple of 256 from 256 to 2048 (default: the checkpoint's own,
    /// 1024 for the released EdgeTAM and for --random-weights). The same weights run at any
    /// such size: 512 is about 4x faster than 1024 and less accurate (the guide:
    /// docs/src/tuning.md, "Input size").
    #[arg(long = "input-size", alias = "size", value_name = "N")]
    pub(crate) input_size: Option<usize>,
}

#[derive(Args)]
struct SegmentArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    input_size: InputSizeArg,
    /// Input image (PNG, JPEG or BMP).
    #[arg(long, value_name = "FILE")]
    image: PathBuf,
    /// Box prompt in image pixels: x0,y0,x1,y1.
    #[arg(long = "box", value_name = "X0,Y0,X1,Y1", value_parser = parse_box)]
    bbox: Option<[f32; 4]>,
    /// Point prompt x,y,label (label 1 = object, 0 = background); repeatable.
    #[arg(long = "point", value_name = "X,Y,LABEL", value_parser = parse_point)]
    points: Vec<Point>,
    /// Ask for three candidate masks and keep the best (default: EdgeTAM's rule, multimask for a
    /// single point only).
    #[arg(long)]
    multimask: bool,
    /// Output mask PNG (white = object) at the image's resolution.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Also write the image with the mask and prompts drawn over it.
    #[arg(long, value_name = "FILE")]
    overlay: Option<PathBuf>,
    /// Run the model this many times and report median stage times (for timing).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
}

#[derive(Args)]
struct CheckArgs {
    /// Fixture directory (config.json + image.safetensors), e.g. fixtures/image_256.
    #[arg(long, value_name = "DIR")]
    fixtures: PathBuf,
    /// Weights the fixtures were made with (default: DIR/../model/model.safetensors).
    #[arg(long, value_name = "FILE")]
    model: Option<PathBuf>,
    /// Compute device: `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn parse_box(s: &str) -> std::result::Result<[f32; 4], String> {
    prompt_syntax::parse_floats::<4>(s, "--box")
}

fn parse_point(s: &str) -> std::result::Result<Point, String> {
    prompt_syntax::parse_point(s, "--point")
}

/// Loads the model `args` name at `input_size` (the checkpoint's own when `None`; 1024 for
/// random weights) in `precision`, through [`ModelSpec`] like every front end.
pub(crate) fn load_model(
    args: &ModelArgs,
    input_size: Option<usize>,
    precision: Precision,
) -> Result<EdgeTam> {
    let spec = if args.random_weights {
        ModelSpec::random(0)
    } else {
        ModelSpec::new(args.model.as_deref().context("--model is required")?)
    };
    load_spec(args, spec.input_size(input_size).precision(precision))
}

/// `EDGETAM_BF16_POLICY` when set: the bf16 runs' per-group precision differs from the
/// compiled table, so `track` and `bench` say so.
pub(crate) fn bf16_policy_overrides() -> Option<String> {
    std::env::var("EDGETAM_BF16_POLICY")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// Loads `spec` on `--device`. Everything but the weights (input size, device, whether the
/// precision runs here, `EDGETAM_ISA`) is checked before anything is read or downloaded; a
/// precision that cannot run is refused, never replaced.
pub(crate) fn load_spec(args: &ModelArgs, spec: ModelSpec) -> Result<EdgeTam> {
    let spec = spec.device(args.device.as_str());
    let precision = spec.requested_precision();
    spec.check().map_err(|e| match e {
        edgetam::tracker::Error::PrecisionUnavailable { .. } => {
            anyhow::Error::new(e).context(format!("--dtype {precision}"))
        }
        e => e.into(),
    })?;
    let name = match spec.source() {
        Some(source) => source.to_string(),
        None => {
            eprintln!(
                "warning: --random-weights: the model runs end to end, but its masks are \
                 meaningless (use --model with real EdgeTAM weights for real masks)"
            );
            String::new()
        }
    };
    let hub = matches!(spec.source(), Some(ModelSource::Hub { .. }));
    let t = Instant::now();
    let loaded = spec
        .load()
        .with_context(|| format!("loading model {name}"))?;
    if let Backend::Cpu(_) = loaded.backend {
        eprintln!("kernels: {}", kernel_path()?);
    }
    if let (Precision::Bf16, Some(overrides)) = (precision, bf16_policy_overrides()) {
        eprintln!("bf16 policy overrides (EDGETAM_BF16_POLICY): {overrides}");
    }
    if let Some(path) = loaded.path.as_deref() {
        let from = if hub {
            format!(" (hub cache: {})", path.display())
        } else {
            String::new()
        };
        eprintln!("loaded {name}{from} in {:.2} s", t.elapsed().as_secs_f64());
    }
    Ok(loaded.model)
}

/// The CPU kernels' instruction set and where it comes from, e.g. `avx2 (EDGETAM_ISA; this CPU
/// runs avx512, avx2, portable)`; an error when `EDGETAM_ISA` names one this CPU cannot run.
pub(crate) fn kernel_path() -> Result<String> {
    let isa = edgetam::tracker::isa()?;
    let runs: Vec<&str> = edgetam::tracker::available_isas()
        .iter()
        .map(|i| i.name())
        .collect();
    let from = if std::env::var_os("EDGETAM_ISA").is_some() {
        "EDGETAM_ISA; "
    } else {
        ""
    };
    Ok(format!("{isa} ({from}this CPU runs {})", runs.join(", ")))
}

/// A reader for the image at `path`, its format guessed from its content; a PNG whose palette
/// would crash the decoder is refused here (`check_png_palette`).
fn open_image(path: &Path) -> Result<image::ImageReader<std::io::BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open image {}", path.display()))?;
    let mut input = std::io::BufReader::new(file);
    let read_error = || format!("cannot read image {}", path.display());
    if let Err(reason) =
        edgetam::pipeline::check_png_palette(&mut input).with_context(read_error)?
    {
        bail!("cannot decode image {}: {reason}", path.display());
    }
    // As `ImageReader::open`: the format from the extension unless the content tells.
    let mut reader = image::ImageReader::new(input);
    if let Ok(format) = image::ImageFormat::from_path(path) {
        reader.set_format(format);
    }
    reader.with_guessed_format().with_context(read_error)
}

/// Width and height of the image at `path`, read from its header.
fn image_size(path: &Path) -> Result<(usize, usize)> {
    let (w, h) = open_image(path)?
        .into_dimensions()
        .with_context(|| format!("cannot decode image {}", path.display()))?;
    Ok((w as usize, h as usize))
}

fn read_rgb(path: &Path) -> Result<image::RgbImage> {
    let img = open_image(path)?.decode().with_context(|| {
        format!(
            "cannot decode image {} (PNG, JPEG or BMP expected)",
            path.display()
        )
    })?;
    Ok(img.to_rgb8())
}

fn segment(args: SegmentArgs) -> Result<()> {
    let img = read_rgb(&args.image)?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let prompt = Prompt {
        bbox: args.bbox,
        points: args.points.clone(),
    };
    if prompt.bbox.is_none() && prompt.points.is_empty() {
        bail!("give a prompt: --box x0,y0,x1,y1 and/or --point x,y,label");
    }
    prompt
        .validate(w, h)
        .with_context(|| format!("prompt does not fit {} ({w}x{h})", args.image.display()))?;
    let model = load_model(&args.model, args.input_size.input_size, Precision::F32)?;

    let mode = if args.multimask {
        MultimaskMode::On
    } else {
        MultimaskMode::Auto
    };
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    let mut result = None;
    for _ in 0..args.repeat {
        let t0 = Instant::now();
        let pixels = model.preprocess(img.as_raw(), w, h)?;
        let t1 = Instant::now();
        let emb = model.encode_pixels(&pixels, (w, h))?;
        let t2 = Instant::now();
        let seg = model.segment(&emb, &prompt, mode)?;
        let (_, mask) = model.mask_at_original(&emb, &seg)?;
        let mask_u8 = mask.flatten_all()?.to_vec1::<u8>()?;
        let t3 = Instant::now();
        for (v, d) in times.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2]) {
            v.push(d.as_secs_f64() * 1e3);
        }
        result = Some((seg, mask, mask_u8));
    }
    let (seg, mask, mask_u8) = result.context("no run")?;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut t_pre, mut t_enc, mut t_dec] = times;

    let (area, bbox) = mask_area_and_box(&mask)?;
    save_mask_png(&args.out, w, h, &mask_u8)?;
    if let Some(path) = &args.overlay {
        draw_overlay(&img, &mask_u8, &prompt)
            .save(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!(
        "object score {:.3} ({}), predicted IoU {:.3}{}, mask area {} px ({:.1}%), box {}",
        seg.object_score,
        if seg.is_present() {
            "present"
        } else {
            "absent"
        },
        seg.iou(),
        if seg.multimask {
            format!(" (best of {})", seg.iou_scores.len())
        } else {
            String::new()
        },
        area,
        100.0 * area as f64 / (w * h) as f64,
        bbox.map(|[a, b, c, d]| format!("{a},{b},{c},{d}"))
            .unwrap_or_else(|| "none".into()),
    );
    println!(
        "{}preprocess {:.1} ms, image encoder {:.1} ms, prompt + decoder + post-process {:.1} ms; wrote {}",
        if args.repeat > 1 {
            format!("median of {} runs: ", args.repeat)
        } else {
            String::new()
        },
        median(&mut t_pre),
        median(&mut t_enc),
        median(&mut t_dec),
        args.out.display()
    );
    Ok(())
}

/// Writes a mask (row-major, nonzero = inside) as an 8-bit gray PNG, 255 inside.
fn save_mask_png(path: &Path, width: usize, height: usize, mask: &[u8]) -> Result<()> {
    let png: Vec<u8> = mask.iter().map(|&m| if m != 0 { 255 } else { 0 }).collect();
    image::GrayImage::from_raw(width as u32, height as u32, png)
        .context("mask buffer size")?
        .save(path)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The image with the mask tinted, the box outlined and the points marked.
fn draw_overlay(img: &image::RgbImage, mask: &[u8], prompt: &Prompt) -> image::RgbImage {
    let mut out = img.clone();
    draw::tint(&mut out, mask, [30, 144, 255]);
    if let Some([x0, y0, x1, y1]) = prompt.bbox {
        draw::rect(
            &mut out,
            [x0 as i64, y0 as i64, x1 as i64, y1 as i64],
            [255, 215, 0],
        );
    }
    for p in &prompt.points {
        let color = match p.label {
            PointLabel::Positive => [0, 220, 0],
            PointLabel::Negative => [230, 0, 0],
        };
        draw::dot(&mut out, p.x as i64, p.y as i64, color);
    }
    out
}

fn check(args: CheckArgs) -> Result<bool> {
    let device = parse_device(&args.device)?;
    let sequence = checks::sequence::is_sequence_fixture(&args.fixtures);
    let model_path = match args.model {
        Some(p) => p,
        None => args
            .fixtures
            .parent()
            .map(|p| p.join("model").join("model.safetensors"))
            .context("cannot find the fixture weights; pass --model")?,
    };
    let weights = Weights::load(&model_path, &device)
        .with_context(|| format!("loading weights {}", model_path.display()))?;
    let t = Instant::now();
    let reports = if sequence {
        // A streaming session: replayed free-running, then with the reference's binarised
        // memory inputs forced (plus the stage checks at its stage frame).
        let fx = checks::sequence::SequenceFixture::load(&args.fixtures)
            .with_context(|| format!("loading the sequence {}", args.fixtures.display()))?;
        print_check_header(
            &args.fixtures,
            fx.config.image_size,
            &model_path,
            &args.device,
        );
        let model = std::sync::Arc::new(fx.model(&weights, &device)?);
        let mut reports =
            checks::sequence::run(&fx, model.clone(), checks::sequence::Mode::FreeRunning)?;
        reports.extend(checks::sequence::run(
            &fx,
            model,
            checks::sequence::Mode::Forced,
        )?);
        reports
    } else {
        let fx = Fixture::load(&args.fixtures, &device)
            .with_context(|| format!("loading fixtures from {}", args.fixtures.display()))?;
        print_check_header(
            &args.fixtures,
            fx.config.image_size,
            &model_path,
            &args.device,
        );
        checks::run_all(&fx, &weights)?
    };
    let failed = reports.iter().filter(|r| !r.passed).count();
    for r in &reports {
        println!("{}", r.line());
    }
    println!(
        "{} passed, {} failed ({:.1} s)",
        reports.len() - failed,
        failed,
        t.elapsed().as_secs_f64()
    );
    Ok(failed == 0)
}

fn print_check_header(fixtures: &Path, image_size: usize, model: &Path, device: &str) {
    println!(
        "checking {} (image size {image_size}) with {} on {device}",
        fixtures.display(),
        model.display(),
    );
}

fn main() -> ExitCode {
    // Before any thread exists (it writes the environment): the process set-up every front end
    // runs (`process_setup`: a fixed compute thread count, candle's spin limit, freed
    // activation buffers reused instead of re-faulted every frame). Loading a model through
    // `ModelSpec` would run it too, once per process.
    edgetam::tracker::process_setup();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Segment(args) => segment(args).map(|_| true),
        Command::Track(args) => track::track(args).map(|_| true),
        Command::Check(args) => check(args),
        Command::Bench(args) => bench::bench(args).map(|_| true),
        Command::Soak(args) => soak::soak(args),
        Command::Cpu => kernel_path().map(|path| {
            println!("cpu kernels: {path}");
            true
        }),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
