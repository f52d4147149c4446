//! `edgetam bench --streams 1,2,4`: for each N, N synthetic streams (one object each) through
//! one [`MultiPipeline`] (one model, one image-encoder thread encoding a frame of each stream in
//! one call, one tracking thread) against N independent [`Pipeline`]s (each with its own
//! encoder-ahead pair of threads) running at the same time on the same weights.
//!
//! Every stream is fed as `edgetam bench --encoder-ahead on` feeds its one stream: at most
//! [`IN_FLIGHT`] frames between push and result, as a live source at the sustainable rate
//! keeps it (an unpaced feeder would fill the queues and the latency would count the wait).

use std::fmt::Write as _;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use edgetam::pipeline::{
    DropPolicy, Frame, FrameOutput, MultiPipeline, Outcome, Pipeline, PixelFormat, StreamOptions,
};
use edgetam::tracker::{EdgeTam, Prompt};
use indicatif::ProgressBar;
use serde::Serialize;

use super::{percentile, SYNTH_H, SYNTH_W};

/// Frames of one stream between push and result, at most.
const IN_FLIGHT: usize = 2;

/// How the N streams run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Mode {
    /// One `MultiPipeline`.
    Multi,
    /// N `Pipeline`s, each with its own threads.
    Independent,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Multi => "multi",
            Self::Independent => "independent",
        }
    }
}

/// One stream's measured frames.
#[derive(Debug, Clone, Serialize)]
pub(super) struct StreamReport {
    stream: usize,
    /// Measured frames over the time from the stream's last warm-up result to its last result.
    fps: f64,
    latency_median_ms: f64,
    latency_p95_ms: f64,
    /// Push-to-result latency of each measured frame.
    latency_ms: Vec<f64>,
}

/// One `--streams` configuration.
#[derive(Debug, Clone, Serialize)]
pub(super) struct StreamsReport {
    pub(super) streams: usize,
    mode: Mode,
    dtype: String,
    threads: usize,
    pub(super) image_size: usize,
    frame_width: usize,
    frame_height: usize,
    warmup: u32,
    /// Measured frames per stream.
    frames: u32,
    /// The sum of the streams' FPS: frames of all streams per second.
    aggregate_fps: f64,
    /// Push-to-result latency of every stream's measured frames together.
    latency_median_ms: f64,
    latency_p95_ms: f64,
    /// The largest of the streams' own p95.
    worst_stream_p95_ms: f64,
    per_stream: Vec<StreamReport>,
}

/// A result as the bench sees it: when it came and its push-to-result latency.
struct Sample {
    at: Instant,
    latency: Duration,
}

/// What one measurement runs on.
pub(super) struct StreamsRun<'a> {
    pub(super) model: &'a Arc<EdgeTam>,
    /// The synthetic clip with one object, warm-up frames first.
    pub(super) frames: &'a [Vec<u8>],
    pub(super) warmup: u32,
    pub(super) progress: &'a ProgressBar,
    pub(super) dtype: String,
    pub(super) threads: usize,
}

/// The object's box on frame 0 (the synthetic square with a margin).
fn prompt() -> Prompt {
    super::object_box(0, 1, SYNTH_W, SYNTH_H, true)
}

fn rgb(frame: &[u8]) -> Frame<'_> {
    Frame::new(frame, SYNTH_W, SYNTH_H, PixelFormat::Rgb8)
}

/// Fails on a frame that was not tracked.
fn tracked(o: &FrameOutput, stream: usize, t: usize) -> Result<()> {
    match &o.outcome {
        Outcome::Tracked(_) => Ok(()),
        Outcome::Failed(e) => bail!("stream {stream}, frame {t} failed: {e}"),
        Outcome::Dropped => bail!("stream {stream}, frame {t} was dropped (blocking queue)"),
    }
}

impl StreamsRun<'_> {
    /// Runs N streams in `mode` and summarizes them.
    pub(super) fn measure(&self, n: usize, mode: Mode) -> Result<StreamsReport> {
        let samples = match mode {
            Mode::Multi => self.multi(n)?,
            Mode::Independent => self.independent(n)?,
        };
        Ok(self.report(n, mode, &samples))
    }

    fn multi(&self, n: usize) -> Result<Vec<Vec<Sample>>> {
        let pipeline = MultiPipeline::builder(Arc::clone(self.model)).build()?;
        let mut ids = Vec::new();
        for _ in 0..n {
            let options = StreamOptions::default()
                .queue_capacity(IN_FLIGHT)
                .drop_policy(DropPolicy::Block);
            let id = pipeline.add_stream(options)?;
            pipeline.add_prompt(id, 1, prompt())?;
            ids.push(id);
        }
        let total = self.frames.len();
        let mut samples: Vec<Vec<Sample>> = (0..n).map(|_| Vec::new()).collect();
        std::thread::scope(|s| -> Result<()> {
            // Owned here, so an early return drops them and the waiting feeders stop.
            let mut credit = Vec::new();
            let mut feeders = Vec::new();
            for &id in &ids {
                let (tx, credits) = mpsc::channel::<()>();
                for _ in 0..IN_FLIGHT {
                    let _ = tx.send(());
                }
                credit.push(tx);
                let (pipeline, frames) = (&pipeline, self.frames);
                feeders.push(s.spawn(move || -> Result<()> {
                    for frame in frames {
                        if credits.recv().is_err() {
                            return Ok(()); // the reader stopped (it reports why)
                        }
                        if let Err(e) = pipeline.push(id, rgb(frame)) {
                            pipeline.finish(); // unblocks `recv` below
                            return Err(e.into());
                        }
                    }
                    Ok(())
                }));
            }
            for _ in 0..n * total {
                let o = pipeline.recv()?;
                let at = Instant::now();
                let k = ids
                    .iter()
                    .position(|id| *id == o.stream)
                    .ok_or_else(|| anyhow!("a result of unknown {}", o.stream))?;
                tracked(&o.output, k, samples[k].len())?;
                samples[k].push(Sample {
                    at,
                    latency: o.output.timings.end_to_end,
                });
                let _ = credit[k].send(());
                self.progress.inc(1);
            }
            for f in feeders {
                f.join()
                    .map_err(|_| anyhow!("frame feeder thread panicked"))??;
            }
            Ok(())
        })?;
        pipeline.close();
        Ok(samples)
    }

    fn independent(&self, n: usize) -> Result<Vec<Vec<Sample>>> {
        let mut pipelines = Vec::new();
        for _ in 0..n {
            let p = Pipeline::builder(Arc::clone(self.model))
                .encoder_ahead(true)
                .queue_capacity(IN_FLIGHT)
                .drop_policy(DropPolicy::Block)
                .build()?;
            p.add_prompt(1, prompt())?;
            pipelines.push(p);
        }
        let samples = std::thread::scope(|s| {
            let lanes: Vec<_> = pipelines
                .iter()
                .enumerate()
                .map(|(k, p)| s.spawn(move || self.lane(p, k)))
                .collect();
            lanes
                .into_iter()
                .map(|l| {
                    l.join()
                        .map_err(|_| anyhow!("a stream's thread panicked"))
                        .and_then(|r| r)
                })
                .collect::<Result<Vec<_>>>()
        })?;
        for p in pipelines {
            p.close();
        }
        Ok(samples)
    }

    /// One independent stream: its frames into `pipeline` from a feeder thread, its results
    /// read here.
    fn lane(&self, pipeline: &Pipeline, k: usize) -> Result<Vec<Sample>> {
        let mut samples = Vec::new();
        std::thread::scope(|s| -> Result<()> {
            let (credit, credits) = mpsc::channel::<()>();
            for _ in 0..IN_FLIGHT {
                let _ = credit.send(());
            }
            let frames = self.frames;
            let feeder = s.spawn(move || -> Result<()> {
                for frame in frames {
                    if credits.recv().is_err() {
                        return Ok(());
                    }
                    if let Err(e) = pipeline.push(rgb(frame)) {
                        pipeline.finish();
                        return Err(e.into());
                    }
                }
                Ok(())
            });
            for t in 0..frames.len() {
                let o = pipeline.recv()?;
                let at = Instant::now();
                tracked(&o, k, t)?;
                samples.push(Sample {
                    at,
                    latency: o.timings.end_to_end,
                });
                let _ = credit.send(());
                self.progress.inc(1);
            }
            feeder
                .join()
                .map_err(|_| anyhow!("frame feeder thread panicked"))??;
            Ok(())
        })?;
        Ok(samples)
    }

    fn report(&self, n: usize, mode: Mode, samples: &[Vec<Sample>]) -> StreamsReport {
        let warmup = self.warmup as usize;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut per_stream = Vec::new();
        let mut all = Vec::new();
        for (k, s) in samples.iter().enumerate() {
            let measured = &s[warmup.min(s.len())..];
            let fps = match (warmup.checked_sub(1).and_then(|i| s.get(i)), s.last()) {
                (Some(first), Some(last)) if last.at > first.at => {
                    measured.len() as f64 / (last.at - first.at).as_secs_f64()
                }
                _ => 0.0,
            };
            let latency_ms: Vec<f64> = measured.iter().map(|x| ms(x.latency)).collect();
            let mut sorted = latency_ms.clone();
            sorted.sort_by(f64::total_cmp);
            all.extend_from_slice(&sorted);
            per_stream.push(StreamReport {
                stream: k,
                fps,
                latency_median_ms: percentile(&sorted, 0.5),
                latency_p95_ms: percentile(&sorted, 0.95),
                latency_ms,
            });
        }
        all.sort_by(f64::total_cmp);
        StreamsReport {
            streams: n,
            mode,
            dtype: self.dtype.clone(),
            threads: self.threads,
            image_size: self.model.config().image_size,
            frame_width: SYNTH_W,
            frame_height: SYNTH_H,
            warmup: self.warmup,
            frames: (self.frames.len() - warmup) as u32,
            aggregate_fps: per_stream.iter().map(|s| s.fps).sum(),
            latency_median_ms: percentile(&all, 0.5),
            latency_p95_ms: percentile(&all, 0.95),
            worst_stream_p95_ms: per_stream
                .iter()
                .map(|s| s.latency_p95_ms)
                .fold(0.0, f64::max),
            per_stream,
        }
    }
}

/// The `--streams` table: a row per stream count and mode.
pub(super) fn render(reports: &[StreamsReport]) -> String {
    let mut s = String::new();
    let Some(first) = reports.first() else {
        return s;
    };
    let _ = writeln!(
        s,
        "\nstreams: {}x{} synthetic frames, one object per stream, {} threads, {} measured \
         frames per stream after {} warm-up; latency = push to result",
        first.frame_width, first.frame_height, first.threads, first.frames, first.warmup
    );
    let _ = writeln!(
        s,
        "{:>5} {:>7} {:<12} {:>6} {:>13} {:>10} {:>10} {:>10} {:>15}",
        "size",
        "streams",
        "mode",
        "dtype",
        "aggregate FPS",
        "FPS/stream",
        "p50 ms",
        "p95 ms",
        "worst p95 ms"
    );
    for r in reports {
        let _ = writeln!(
            s,
            "{:>5} {:>7} {:<12} {:>6} {:>13.2} {:>10.2} {:>10.1} {:>10.1} {:>15.1}",
            r.image_size,
            r.streams,
            r.mode.name(),
            r.dtype,
            r.aggregate_fps,
            r.aggregate_fps / r.streams as f64,
            r.latency_median_ms,
            r.latency_p95_ms,
            r.worst_stream_p95_ms
        );
    }
    s
}

/// Frames `0..total` of the synthetic clip with one object.
pub(super) fn clip(total: usize) -> Vec<Vec<u8>> {
    (0..total).map(|t| super::synthetic_frame(t, 1)).collect()
}
