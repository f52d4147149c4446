//! `edgetam soak`: a long run of the frame-queue `Pipeline` with objects coming and going,
//! sampling the process's memory and open file descriptors, to show they stay flat.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use edgetam::pipeline::{Frame, Outcome, Pipeline, PixelFormat};
use edgetam::tracker::{EdgeTamConfig, Prompt};
use plotters::prelude::*;
use serde::Serialize;

use crate::ModelArgs;

pub const AFTER_HELP: &str = "\
With --random-weights --size below 256 (a multiple of 16) the spatial perceiver gets one 2-D \
latent per memory-grid cell so the model tracks at that size (the released config needs 256 or \
more); --size 64 is the small config of the 100,000-frame soak in BENCHMARKS.md and of CI's \
short soak.


Frames are generated (a gray gradient with one bright square per object, moving), their pixel \
format cycling RGB8, NV12, I420, GRAY8, BGRA8 frame by frame. The schedule, by frame index i: \
every 400 frames a new object is prompted (i % 400 == 10, a fresh id each time) and the oldest of \
more than two is removed (i % 400 == 210); every 100 frames (i % 100 == 60) the newest object is \
re-prompted with a box on its square; every 2000 frames (i % 2000 == 1999) the stream is reset \
(every object forgotten, frame numbering restarts) and object ids continue. Every \
--sample-every frames the process's resident memory (VmRSS), open file descriptors and threads \
are sampled. The slope is a least-squares fit of RSS over the samples after --warmup frames.

Writes DIR/series.csv (one line per sample), DIR/summary.json and DIR/soak.svg (RSS and open \
file descriptors over frames). With --max-rss-growth-mib the exit status is 1 when RSS after \
warm-up rises above its value at the end of warm-up by more than that.";

#[derive(Args)]
pub struct SoakArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Model input size with --random-weights: a multiple of 256 as everywhere, or below 256 a
    /// multiple of 16 with a perceiver grid that fits (see below); with --model, `--input-size`'s
    /// rule (a multiple of 256).
    #[arg(long, alias = "input-size")]
    size: Option<usize>,
    /// Frames to run through the pipeline.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    frames: u64,
    /// Sample RSS, open file descriptors and threads every this many frames.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    sample_every: u64,
    /// Frames before the slope is measured (default: a tenth of --frames).
    #[arg(long)]
    warmup: Option<u64>,
    /// Frame width and height (even: NV12 and I420 are in the cycle).
    #[arg(long, default_value = "160x120", value_parser = parse_size)]
    frame_size: (usize, usize),
    /// The image encoder of the next frame on its own thread (two frames in flight).
    #[arg(long)]
    encoder_ahead: bool,
    /// Fail (exit status 1) when RSS after warm-up exceeds its warm-up value by more than this.
    #[arg(long, value_name = "MIB")]
    max_rss_growth_mib: Option<f64>,
    /// Output folder (series.csv, summary.json, soak.svg).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// The model: `--model`, or random weights at `--size`. Below 256 (where the released spatial
/// perceiver's 16x16 windows do not fit the memory grid) the perceiver gets one 2-D latent per
/// grid cell, so small inputs track too.
fn model(args: &ModelArgs, size: Option<usize>) -> Result<edgetam::tracker::EdgeTam> {
    if let Some(size) = size.filter(|&s| args.random_weights && s < 256 && s % 16 == 0) {
        let mut config = EdgeTamConfig::with_image_size(size)?;
        let grid = size / 16;
        config.perceiver_resampler_num_latents_2d = grid * grid;
        config.memory_attention_rope_k_sizes = [grid, grid];
        return crate::load_spec(
            args,
            edgetam::tracker::ModelSpec::random_with_config(config, 0),
        );
    }
    crate::load_model(args, size, edgetam::tracker::Precision::F32)
}

fn parse_size(s: &str) -> std::result::Result<(usize, usize), String> {
    let (w, h) = s
        .split_once('x')
        .ok_or_else(|| format!("`{s}`: expected WIDTHxHEIGHT"))?;
    let w: usize = w.parse().map_err(|_| format!("`{s}`: bad width"))?;
    let h: usize = h.parse().map_err(|_| format!("`{s}`: bad height"))?;
    if w < 16 || h < 16 || !w.is_multiple_of(2) || !h.is_multiple_of(2) {
        return Err(format!("`{s}`: both sides even and at least 16"));
    }
    Ok((w, h))
}

/// One sample of the process.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub frame: u64,
    pub elapsed_s: f64,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
    pub objects: usize,
}

#[derive(Serialize)]
struct Summary {
    frames: u64,
    tracked: u64,
    failed: u64,
    resets: u64,
    objects_added: u64,
    objects_removed: u64,
    reprompts: u64,
    seconds: f64,
    fps: f64,
    warmup_frames: u64,
    rss_at_warmup_kib: u64,
    rss_end_kib: u64,
    rss_max_after_warmup_kib: u64,
    rss_slope_kib_per_1000_frames: f64,
    fds_min: u64,
    fds_max: u64,
    fds_after_warmup_min: u64,
    fds_after_warmup_max: u64,
    threads_min: u64,
    threads_max: u64,
}

/// VmRSS (KiB), open file descriptors and threads of this process.
fn sample_process() -> Result<(u64, u64, u64)> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("no {name} in /proc/self/status"))
    };
    let fds = fs::read_dir("/proc/self/fd")
        .context("reading /proc/self/fd")?
        .count() as u64;
    Ok((field("VmRSS:")?, fds, field("Threads:")?))
}

const FORMATS: [PixelFormat; 5] = [
    PixelFormat::Rgb8,
    PixelFormat::Nv12,
    PixelFormat::I420,
    PixelFormat::Gray8,
    PixelFormat::Bgra8,
];

/// Object `id`'s square (centre) on frame `t`.
fn centre(id: u32, t: u64, w: usize, h: usize) -> (f32, f32) {
    let span_x = (w - 40) as f32;
    let span_y = (h - 40) as f32;
    let phase = (t as f32 * 2.0 + id as f32 * 37.0) % (2.0 * span_x);
    let x = if phase < span_x {
        phase
    } else {
        2.0 * span_x - phase
    };
    let y = (id as f32 * 23.0) % span_y;
    (20.0 + x, 20.0 + y)
}

/// Frame `t` in `format`: gradient background, one bright 24x24 square per object.
fn frame(t: u64, objects: &[u32], w: usize, h: usize, format: PixelFormat) -> Vec<u8> {
    let mut gray: Vec<u8> = (0..w * h).map(|i| ((i % w) * 200 / w) as u8 + 20).collect();
    for &id in objects {
        let (cx, cy) = centre(id, t, w, h);
        let (x0, y0) = ((cx - 12.0) as usize, (cy - 12.0) as usize);
        for y in y0..(y0 + 24).min(h) {
            gray[y * w + x0..y * w + (x0 + 24).min(w)].fill(235);
        }
    }
    match format {
        PixelFormat::Gray8 => gray,
        PixelFormat::Rgb8 | PixelFormat::Bgr8 => gray.iter().flat_map(|&g| [g, g, g]).collect(),
        PixelFormat::Rgba8 | PixelFormat::Bgra8 => {
            gray.iter().flat_map(|&g| [g, g, g, 255]).collect()
        }
        PixelFormat::Nv12 | PixelFormat::I420 => {
            let mut out = gray;
            out.resize(w * h * 3 / 2, 128);
            out
        }
    }
}

fn box_prompt(id: u32, t: u64, w: usize, h: usize) -> Prompt {
    let (cx, cy) = centre(id, t, w, h);
    Prompt::from_box(
        (cx - 14.0).max(0.0),
        (cy - 14.0).max(0.0),
        (cx + 14.0).min(w as f32),
        (cy + 14.0).min(h as f32),
    )
}

/// Least-squares slope of `y` over `x`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

pub fn soak(args: SoakArgs) -> Result<bool> {
    let (w, h) = args.frame_size;
    let warmup = args.warmup.unwrap_or(args.frames / 10);
    if warmup >= args.frames {
        bail!(
            "--warmup {warmup} leaves no frame to measure of --frames {}",
            args.frames
        );
    }
    fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let model = Arc::new(model(&args.model, args.size)?);
    let pipeline = Pipeline::builder(model)
        .encoder_ahead(args.encoder_ahead)
        .build()?;
    let in_flight = if args.encoder_ahead { 2 } else { 1 };

    let mut objects: Vec<u32> = Vec::new();
    let mut next_id = 1u32;
    let (mut added, mut removed, mut reprompts, mut resets) = (0u64, 0u64, 0u64, 0u64);
    let (mut tracked, mut failed) = (0u64, 0u64);
    let mut samples: Vec<Sample> = Vec::new();
    let mut csv = String::from("frame,elapsed_s,rss_kib,fds,threads,objects\n");
    let start = Instant::now();
    // Frame numbering of the tracker restarts at a reset; squares follow the soak's index.
    let mut pending = 0usize;
    let take = |pipeline: &Pipeline, tracked: &mut u64, failed: &mut u64| -> Result<()> {
        let out = pipeline.recv()?;
        match out.outcome {
            Outcome::Tracked(_) => *tracked += 1,
            Outcome::Failed(e) => {
                *failed += 1;
                if *failed <= 5 {
                    eprintln!("frame {} failed: {e}", out.id);
                }
            }
            Outcome::Dropped => {}
        }
        for e in &out.command_errors {
            eprintln!("frame {}: command refused: {e}", out.id);
        }
        Ok(())
    };
    let mut sample = |frame: u64, objects: usize, samples: &mut Vec<Sample>| -> Result<()> {
        let (rss_kib, fds, threads) = sample_process()?;
        let s = Sample {
            frame,
            elapsed_s: start.elapsed().as_secs_f64(),
            rss_kib,
            fds,
            threads,
            objects,
        };
        writeln!(
            csv,
            "{},{:.1},{},{},{},{}",
            s.frame, s.elapsed_s, s.rss_kib, s.fds, s.threads, s.objects
        )?;
        samples.push(s);
        Ok(())
    };
    sample(0, 0, &mut samples)?;
    for i in 0..args.frames {
        if i % 400 == 10 || objects.is_empty() {
            let id = next_id;
            next_id += 1;
            pipeline.add_prompt(id, box_prompt(id, i, w, h))?;
            objects.push(id);
            added += 1;
        }
        if i % 400 == 210 && objects.len() > 2 {
            let id = objects.remove(0);
            pipeline.remove_object(id)?;
            removed += 1;
        }
        if i % 100 == 60 {
            if let Some(&id) = objects.last() {
                pipeline.add_prompt(id, box_prompt(id, i, w, h))?;
                reprompts += 1;
            }
        }
        let format = FORMATS[(i % FORMATS.len() as u64) as usize];
        let pixels = frame(i, &objects, w, h, format);
        pipeline.push(Frame::new(pixels, w, h, format))?;
        pending += 1;
        if pending >= in_flight {
            take(&pipeline, &mut tracked, &mut failed)?;
            pending -= 1;
        }
        if i % 2000 == 1999 {
            pipeline.reset()?;
            objects.clear();
            resets += 1;
        }
        let done = i + 1;
        if done % args.sample_every == 0 || done == args.frames {
            sample(done, objects.len(), &mut samples)?;
            let s = samples[samples.len() - 1];
            eprintln!(
                "frame {done}/{}: {:.1} fps, RSS {:.1} MiB, {} fds, {} threads, {} objects",
                args.frames,
                done as f64 / s.elapsed_s,
                s.rss_kib as f64 / 1024.0,
                s.fds,
                s.threads,
                s.objects
            );
        }
    }
    while pending > 0 {
        take(&pipeline, &mut tracked, &mut failed)?;
        pending -= 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(pipeline);

    let after: Vec<&Sample> = samples.iter().filter(|s| s.frame >= warmup).collect();
    let at_warmup = after.first().map_or(0, |s| s.rss_kib);
    let points: Vec<(f64, f64)> = after
        .iter()
        .map(|s| (s.frame as f64 / 1000.0, s.rss_kib as f64))
        .collect();
    let minmax = |v: &mut dyn Iterator<Item = u64>| {
        v.fold((u64::MAX, 0), |(lo, hi), x| (lo.min(x), hi.max(x)))
    };
    let (fds_min, fds_max) = minmax(&mut samples.iter().map(|s| s.fds));
    let (fa_min, fa_max) = minmax(&mut after.iter().map(|s| s.fds));
    let (threads_min, threads_max) = minmax(&mut samples.iter().map(|s| s.threads));
    let summary = Summary {
        frames: args.frames,
        tracked,
        failed,
        resets,
        objects_added: added,
        objects_removed: removed,
        reprompts,
        seconds,
        fps: args.frames as f64 / seconds,
        warmup_frames: warmup,
        rss_at_warmup_kib: at_warmup,
        rss_end_kib: samples.last().map_or(0, |s| s.rss_kib),
        rss_max_after_warmup_kib: after.iter().map(|s| s.rss_kib).max().unwrap_or(0),
        rss_slope_kib_per_1000_frames: slope(&points),
        fds_min,
        fds_max,
        fds_after_warmup_min: fa_min,
        fds_after_warmup_max: fa_max,
        threads_min,
        threads_max,
    };
    fs::write(args.out.join("series.csv"), csv)?;
    fs::write(
        args.out.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    draw(&args.out.join("soak.svg"), &samples, warmup, &summary)?;
    println!(
        "soak: {} frames in {:.0} s ({:.1} fps), {} tracked, {} failed; {} objects added, {} \
         removed, {} re-prompts, {} resets",
        summary.frames,
        summary.seconds,
        summary.fps,
        summary.tracked,
        summary.failed,
        added,
        removed,
        reprompts,
        resets
    );
    println!(
        "RSS after warm-up ({warmup} frames): {:.1} MiB -> {:.1} MiB at the end (max {:.1} MiB), \
         slope {:+.2} KiB per 1000 frames; open fds {}..{} after warm-up ({}..{} overall); \
         threads {}..{}",
        at_warmup as f64 / 1024.0,
        summary.rss_end_kib as f64 / 1024.0,
        summary.rss_max_after_warmup_kib as f64 / 1024.0,
        summary.rss_slope_kib_per_1000_frames,
        fa_min,
        fa_max,
        fds_min,
        fds_max,
        threads_min,
        threads_max
    );
    println!(
        "wrote {}/series.csv, summary.json, soak.svg",
        args.out.display()
    );
    let mut ok = failed == 0;
    if failed > 0 {
        eprintln!("soak: {failed} frame(s) failed");
    }
    if let Some(max) = args.max_rss_growth_mib {
        let growth = (summary.rss_max_after_warmup_kib as f64 - at_warmup as f64) / 1024.0;
        if growth > max {
            eprintln!(
                "soak: RSS grew by {growth:.1} MiB after warm-up, more than --max-rss-growth-mib \
                 {max}"
            );
            ok = false;
        }
    }
    if fa_max > fa_min {
        eprintln!("soak: open file descriptors changed after warm-up ({fa_min}..{fa_max})");
        ok = false;
    }
    Ok(ok)
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the plot: {e}")
}

/// RSS (MiB) and open file descriptors over frames, the warm-up shaded.
fn draw(path: &Path, samples: &[Sample], warmup: u64, summary: &Summary) -> Result<()> {
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(400);
    let last = samples.last().map_or(1, |s| s.frame.max(1));
    let rss: Vec<(u64, f64)> = samples
        .iter()
        .map(|s| (s.frame, s.rss_kib as f64 / 1024.0))
        .collect();
    let hi = rss.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1 + 1.0;
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!(
                "edgetam soak: RSS over {} frames ({:.1} fps); slope after warm-up {:+.2} KiB / 1000 frames",
                summary.frames, summary.fps, summary.rss_slope_kib_per_1000_frames
            ),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0..last, 0.0..hi)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("frame")
        .y_desc("RSS (MiB)")
        .draw()
        .map_err(plot_err)?;
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(0, 0.0), (warmup, hi)],
            RGBColor(230, 230, 230).filled(),
        )))
        .map_err(plot_err)?;
    chart
        .draw_series(LineSeries::new(rss, &BLUE))
        .map_err(plot_err)?;
    let fd_hi = samples.iter().map(|s| s.fds).max().unwrap_or(1) as f64 * 1.2 + 1.0;
    let mut chart = ChartBuilder::on(&bottom)
        .caption("open file descriptors", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0..last, 0.0..fd_hi)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("frame")
        .y_desc("fds")
        .draw()
        .map_err(plot_err)?;
    chart
        .draw_series(LineSeries::new(
            samples.iter().map(|s| (s.frame, s.fds as f64)),
            &RED,
        ))
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 * i as f64 + 7.0)).collect();
        assert!((slope(&pts) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 2.0)]), 0.0);
    }

    #[test]
    fn frames_have_their_format_size() {
        for f in FORMATS {
            let n = frame(3, &[1, 2], 32, 16, f).len();
            let frame = Frame::new(frame(3, &[1, 2], 32, 16, f), 32, 16, f);
            assert_eq!(frame.validate().unwrap(), n, "{f:?}");
        }
    }
}
