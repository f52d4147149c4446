//! A robot-style loop on the frame-queue pipeline: a simulated camera thread pushes NV12 frames
//! at 30 fps and never blocks (`DropOldest`, queue of 1); the control loop takes results under
//! a deadline and prints each frame's latency, then the pipeline's stats.
//!
//!     cargo run --release --example robot_loop -- (MODEL_DIR | --random) [SECONDS] [--encoder-ahead]
//!
//! With random weights the masks are meaningless but the timings are real.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use candle_core::Device;
use edgetam::pipeline::{DropPolicy, Error, Frame, Outcome, Pipeline, PixelFormat};
use edgetam::tracker::Prompt;

mod common;

const W: usize = 640;
const H: usize = 480;
const FPS: u64 = 30;

/// An NV12 frame with a bright square drifting right by 3 px per frame.
fn camera_frame(t: usize) -> Vec<u8> {
    let mut f = vec![128u8; W * H * 3 / 2];
    for (i, y) in f[..W * H].iter_mut().enumerate() {
        let (x, row) = (i % W, i / W);
        let inside = x.abs_diff(160 + 3 * t) < 40 && row.abs_diff(240) < 40;
        *y = if inside { 220 } else { 40 + (x / 8) as u8 };
    }
    f
}

fn main() -> Result<()> {
    // Compute-thread settings and heap reuse (`pin_default_threads`, `keep_freed_memory`), before
    // any thread exists (see docs/src/tuning.md, "Threads").
    edgetam::tracker::process_setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(model_arg) = args.first() else {
        bail!("usage: robot_loop (MODEL_DIR | --random) [SECONDS] [--encoder-ahead]");
    };
    let seconds: u64 = match args.get(1).filter(|a| !a.starts_with("--")) {
        Some(s) => s.parse()?,
        None => 5,
    };
    let encoder_ahead = args.iter().any(|a| a == "--encoder-ahead");
    let model = common::load_model(model_arg, &Device::Cpu)?;
    let pipeline = Arc::new(
        Pipeline::builder(Arc::new(model))
            .queue_capacity(1)
            .drop_policy(DropPolicy::DropOldest)
            .encoder_ahead(encoder_ahead)
            .build()?,
    );
    pipeline.add_prompt(1, Prompt::from_box(120.0, 200.0, 200.0, 280.0))?;

    // The camera: one frame every 33 ms, timestamped with its capture time.
    let start = Instant::now();
    let camera = {
        let p = pipeline.clone();
        std::thread::spawn(move || -> Result<()> {
            let period = Duration::from_millis(1000 / FPS);
            for t in 0..(seconds * FPS) as usize {
                let due = start + period * t as u32;
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                let frame = Frame::new(camera_frame(t), W, H, PixelFormat::Nv12)
                    .with_timestamp(start.elapsed());
                p.push(frame)?;
            }
            p.finish();
            Ok(())
        })
    };

    // The control loop: wait at most 2 s for each result (a watchdog, not a frame budget).
    loop {
        match pipeline.recv_timeout(Duration::from_secs(2)) {
            Ok(out) => match &out.outcome {
                Outcome::Dropped => {}
                Outcome::Tracked(r) => {
                    let age = out
                        .timestamp
                        .map(|ts| start.elapsed().saturating_sub(ts))
                        .unwrap_or_default();
                    let o = r.objects.first();
                    println!(
                        "frame {:4}  latency {:7.1} ms (queue {:6.1}, encode {:6.1}, track {:6.1})  {}",
                        out.id,
                        age.as_secs_f64() * 1e3,
                        out.timings.queue.as_secs_f64() * 1e3,
                        out.timings.encode.as_secs_f64() * 1e3,
                        out.timings.track.as_secs_f64() * 1e3,
                        o.map(|o| format!("score {:+.2} box {:?}", o.score, o.bbox))
                            .unwrap_or_default(),
                    );
                }
                Outcome::Failed(e) => println!("frame {:4}  failed: {e}", out.id),
            },
            Err(Error::Timeout(_)) => println!("no result for 2 s"),
            Err(Error::Closed) => break,
            Err(e) => return Err(e.into()),
        }
    }
    match camera.join() {
        Ok(r) => r?,
        Err(_) => bail!("camera thread panicked"),
    }
    let s = pipeline.stats();
    println!(
        "frames in {} out {} dropped {}; end-to-end p50 {:.1} ms p95 {:.1} ms max {:.1} ms; {:.2} fps",
        s.frames_in,
        s.frames_out,
        s.frames_dropped,
        s.end_to_end.p50.as_secs_f64() * 1e3,
        s.end_to_end.p95.as_secs_f64() * 1e3,
        s.end_to_end.max.as_secs_f64() * 1e3,
        s.throughput_fps
    );
    Ok(())
}
