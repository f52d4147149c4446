//! Serial vs encoder-ahead throughput of the pipeline: pushes FRAMES synthetic frames (blocking
//! policy, one tracked object) through each mode and prints the wall time per frame and the
//! stage percentiles.
//!
//!     cargo run --release --example pipeline_throughput -- (MODEL_DIR | --random) [FRAMES] [SIZE]
//!
//! `SIZE` (default 640) is the frame's width; height is 3/4 of it.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use candle_core::Device;
use edgetam::pipeline::{Frame, Pipeline, Stats};
use edgetam::tracker::{EdgeTam, Prompt};

mod common;

fn frame(t: usize, w: usize, h: usize) -> Vec<u8> {
    let mut rgb = vec![0u8; w * h * 3];
    for (i, px) in rgb.chunks_exact_mut(3).enumerate() {
        let (x, y) = (i % w, i / w);
        let inside = x.abs_diff(w / 4 + 4 * t) < w / 12 && y.abs_diff(h / 2) < h / 10;
        px.copy_from_slice(&if inside {
            [230, 60, 40]
        } else {
            [(x % 256) as u8, (y % 256) as u8, 96]
        });
    }
    rgb
}

fn run(model: &Arc<EdgeTam>, frames: usize, w: usize, ahead: bool) -> Result<(f64, Stats)> {
    let h = w * 3 / 4;
    let p = Pipeline::builder(model.clone())
        .encoder_ahead(ahead)
        .queue_capacity(2)
        .build()?;
    let (bw, bh) = (w as f32 / 6.0, h as f32 / 10.0);
    let (cx, cy) = (w as f32 / 4.0, h as f32 / 2.0);
    p.add_prompt(1, Prompt::from_box(cx - bw, cy - bh, cx + bw, cy + bh))?;
    let inputs: Vec<Vec<u8>> = (0..frames).map(|t| frame(t, w, h)).collect();
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let reader = s.spawn(|| p.results().count());
        for f in inputs {
            p.push(Frame::rgb8(f, w, h))?;
        }
        p.finish();
        let n = reader
            .join()
            .map_err(|_| anyhow::anyhow!("reader panicked"))?;
        if n != frames {
            bail!("{n} results for {frames} frames");
        }
        Ok(())
    })?;
    let per_frame = start.elapsed().as_secs_f64() * 1e3 / frames as f64;
    Ok((per_frame, p.close()))
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<()> {
    // Compute-thread settings and heap reuse (`pin_default_threads`, `keep_freed_memory`), before
    // any thread exists (see docs/src/tuning.md, "Threads").
    edgetam::tracker::process_setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(model_arg) = args.first() else {
        bail!("usage: pipeline_throughput (MODEL_DIR | --random) [FRAMES] [SIZE]");
    };
    let frames: usize = args.get(1).map_or(Ok(5), |s| s.parse())?;
    let size: usize = args.get(2).map_or(Ok(640), |s| s.parse())?;
    let model = Arc::new(common::load_model(model_arg, &Device::Cpu)?);
    for ahead in [false, true] {
        let (per_frame, s) = run(&model, frames, size, ahead)?;
        println!(
            "{:13}  {per_frame:8.1} ms/frame  encode p50 {:7.1}  track p50 {:7.1}  end-to-end p50 {:7.1} max {:7.1} ms  {:.2} fps",
            if ahead { "encoder-ahead" } else { "serial" },
            ms(s.encode.p50),
            ms(s.track.p50),
            ms(s.end_to_end.p50),
            ms(s.end_to_end.max),
            s.throughput_fps,
        );
    }
    Ok(())
}
