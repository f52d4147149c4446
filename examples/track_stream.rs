//! Track objects through a stream of frames with the library API, and time each frame.
//!
//!     cargo run --release --example track_stream -- (MODEL_DIR | --random) [FRAMES] [OBJECTS]
//!
//! Frames are synthetic 640x480 images with moving squares (a stand-in for a camera callback);
//! object `k` gets a box on frame 0. Prints per frame the time, the process RSS and each object's
//! score, area and box, then the median time per tracked frame.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use candle_core::Device;
use edgetam::tracker::{Prompt, Tracker};

mod common;

const W: usize = 640;
const H: usize = 480;

/// A frame with `n` coloured squares drifting right by 4 px per frame.
fn frame(t: usize, n: usize) -> Vec<u8> {
    let mut rgb = vec![0u8; W * H * 3];
    for (i, px) in rgb.chunks_exact_mut(3).enumerate() {
        let (x, y) = (i % W, i / W);
        px.copy_from_slice(&[(x / 3) as u8, (y / 2) as u8, 96]);
        for k in 0..n {
            let (cx, cy) = (120 + 150 * k + 4 * t, 160 + 60 * k);
            if x.abs_diff(cx) < 40 && y.abs_diff(cy) < 40 {
                px.copy_from_slice(&[230, (60 * k) as u8, 40]);
            }
        }
    }
    rgb
}

/// Resident set size in MB (Linux `/proc/self/status`; 0 elsewhere): flat over a long stream.
fn rss_mb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

fn main() -> Result<()> {
    // Compute-thread settings and heap reuse (`pin_default_threads`, `keep_freed_memory`), before
    // any thread exists (see docs/src/tuning.md, "Threads").
    edgetam::tracker::process_setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(model_arg) = args.first() else {
        bail!("usage: track_stream (MODEL_DIR | --random) [FRAMES] [OBJECTS]");
    };
    let frames: usize = args.get(1).map_or(Ok(10), |s| s.parse())?;
    let objects: usize = args.get(2).map_or(Ok(1), |s| s.parse())?;
    let device = Device::Cpu;
    let model = common::load_model(model_arg, &device)?;
    let mut tracker = Tracker::new(Arc::new(model));
    for k in 0..objects {
        let (cx, cy) = ((120 + 150 * k) as f32, (160 + 60 * k) as f32);
        tracker.add_prompt(
            k as u32 + 1,
            0,
            Prompt::from_box(cx - 45.0, cy - 45.0, cx + 45.0, cy + 45.0),
        )?;
    }
    let mut times = Vec::new();
    for t in 0..frames {
        let rgb = frame(t, objects);
        let start = Instant::now();
        let result = tracker.track(&rgb, W, H)?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if t > 0 {
            times.push(ms);
        }
        let objs: Vec<String> = result
            .objects
            .iter()
            .map(|o| {
                format!(
                    "obj{} score {:+.2} area {} box {:?}",
                    o.id, o.score, o.area, o.bbox
                )
            })
            .collect();
        println!(
            "frame {t:4}  {ms:8.1} ms  rss {:6} MB  {}",
            rss_mb(),
            objs.join(" | ")
        );
    }
    times.sort_by(f64::total_cmp);
    if let Some(m) = times.get(times.len() / 2) {
        println!(
            "median tracked frame: {m:.1} ms ({:.2} fps), {objects} object(s)",
            1e3 / m
        );
    }
    Ok(())
}
