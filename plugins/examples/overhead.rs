//! Per-frame cost of `edgetamtrack` against the library `Pipeline` on the same frames, in one
//! run (alternating rounds, medians).
//!
//! ```sh
//! cargo run --release -p gst-plugin-edgetam --example overhead -- [MODEL_DIR] [FRAMES] [WxH]
//! ```
//!
//! Without MODEL_DIR it builds a 256-input model folder from the test fixtures (random
//! weights). Frames: synthetic RGB (a block drifting right), one box prompt on frame 0.
//! The element runs in a `gst_check::Harness` (push a buffer, pull it back: conversion to the
//! pipeline's frame, tracking, metas with masks, no bus messages, no overlay).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgetam_pipeline::{Frame, Pipeline};
use edgetam_tracker::{EdgeTam, Prompt};

fn fixture_model() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("edgetam-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    std::fs::copy(
        repo.join("fixtures/image_256/config.json"),
        dir.join("config.json"),
    )
    .expect("config");
    let w = repo
        .join("fixtures/model/model.safetensors")
        .canonicalize()
        .expect("weights");
    let _ = std::os::unix::fs::symlink(w, dir.join("model.safetensors"));
    dir
}

fn frame(t: usize, w: usize, h: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let inside = (x as i64 - (w / 3 + 4 * t) as i64).abs() < (w / 10) as i64
                && (y as i64 - (h / 2) as i64).abs() < (h / 8) as i64;
            let base = ((x * 7 + y * 3 + t * 5) % 64) as u8;
            v.extend_from_slice(&if inside {
                [200, 60 + base, 40]
            } else {
                [base, 90, 120 + base]
            });
        }
    }
    v
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model_dir = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(fixture_model);
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let (w, h) = args
        .get(2)
        .and_then(|s| s.split_once('x'))
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .unwrap_or((640usize, 360usize));
    let frames: Vec<Vec<u8>> = (0..n).map(|t| frame(t, w, h)).collect();
    let bx = [
        w as f32 / 3.0 - w as f32 / 10.0,
        h as f32 * 3.0 / 8.0,
        w as f32 / 3.0 + w as f32 / 10.0,
        h as f32 * 5.0 / 8.0,
    ];
    let spec = format!("obj=1;frame=0;box={},{},{},{}", bx[0], bx[1], bx[2], bx[3]);

    gst::init().expect("gst");
    gstedgetam::plugin_register_static().expect("plugin");
    let model = Arc::new(EdgeTam::load(&model_dir, &candle_core::Device::Cpu).expect("model"));

    let run_library = || -> Vec<Duration> {
        let p = Pipeline::builder(model.clone())
            .queue_capacity(1)
            .build()
            .expect("pipeline");
        p.add_prompt(1, Prompt::from_box(bx[0], bx[1], bx[2], bx[3]))
            .expect("prompt");
        frames
            .iter()
            .map(|f| {
                let t = Instant::now();
                p.push(Frame::rgb8(&f[..], w, h)).expect("push");
                let r = p.recv().expect("recv");
                assert!(r.result().is_some());
                t.elapsed()
            })
            .collect()
    };
    let run_element = || -> Vec<Duration> {
        let el = gst::ElementFactory::make("edgetamtrack")
            .property("model", model_dir.display().to_string())
            .property("prompts", spec.as_str())
            .build()
            .expect("element");
        let mut hn = gst_check::Harness::with_element(&el, Some("sink"), Some("src"));
        hn.set_src_caps_str(&format!(
            "video/x-raw,format=RGB,width={w},height={h},framerate=30/1"
        ));
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut b = gst::Buffer::from_slice(f.clone());
                b.get_mut()
                    .expect("w")
                    .set_pts(gst::ClockTime::from_mseconds(33 * i as u64));
                let t = Instant::now();
                let out = hn.push_and_pull(b).expect("buffer");
                let d = t.elapsed();
                drop(out);
                d
            })
            .collect()
    };
    let (mut lib, mut elem) = (Vec::new(), Vec::new());
    for round in 0..2 {
        // Frame 0 (prompted, model warm-up) is left out of the statistics.
        lib.extend(run_library().into_iter().skip(1));
        elem.extend(run_element().into_iter().skip(1));
        eprintln!("round {round} done");
    }
    let (ml, me) = (median(lib.clone()), median(elem.clone()));
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    println!(
        "{w}x{h}, {} tracked frames per run x 2 rounds, 1 object, model {}",
        n - 1,
        model_dir.display()
    );
    println!(
        "library Pipeline push+recv: median {:.1} ms, mean {:.1} ms",
        ml.as_secs_f64() * 1e3,
        mean(&lib).as_secs_f64() * 1e3
    );
    println!(
        "edgetamtrack push+pull:     median {:.1} ms, mean {:.1} ms",
        me.as_secs_f64() * 1e3,
        mean(&elem).as_secs_f64() * 1e3
    );
    println!(
        "element overhead: median {:+.2} ms/frame ({:+.1} %), mean {:+.2} ms/frame",
        (me.as_secs_f64() - ml.as_secs_f64()) * 1e3,
        (me.as_secs_f64() / ml.as_secs_f64() - 1.0) * 100.0,
        (mean(&elem).as_secs_f64() - mean(&lib).as_secs_f64()) * 1e3
    );
}
