//! Per-frame cost of `edgetamtrack` against the library `Pipeline` on the same frames, in one
//! run (the two in lockstep, frame by frame; medians).
//!
//! ```sh
//! cargo run --release -p gst-plugin-edgetam --example overhead -- [MODEL_DIR|""] [FRAMES] [WxH]
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

mod common;

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

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model_dir = args
        .first()
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(fixture_model);
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let (w, h) = common::size_arg(args.get(2), (640, 360));
    let frames: Vec<Vec<u8>> = (0..n).map(|t| common::frame(t, w, h)).collect();
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

    lockstep(&model, &model_dir, &frames, (w, h), Some(bx), &spec);
    // Without objects the tracker skips the model: what is left is each side's handling of a
    // frame (copy, conversion, queue hand-off; for the element also mapping and caps).
    lockstep(&model, &model_dir, &frames, (w, h), None, &spec);
}

/// Runs the library pipeline and the element in lockstep on the same frames (which one goes
/// first alternates per frame, so the load of a shared machine hits them alike) and prints
/// medians and the median per-frame difference. `bx`: the box prompt on frame 0, or none.
fn lockstep(
    model: &Arc<EdgeTam>,
    model_dir: &std::path::Path,
    frames: &[Vec<u8>],
    (w, h): (usize, usize),
    bx: Option<[f32; 4]>,
    spec: &str,
) {
    let lib_pipeline = Pipeline::builder(model.clone())
        .queue_capacity(1)
        .build()
        .expect("pipeline");
    let mut el = gst::ElementFactory::make("edgetamtrack")
        .property("model", model_dir.display().to_string());
    if let Some(b) = bx {
        lib_pipeline
            .add_prompt(1, Prompt::from_box(b[0], b[1], b[2], b[3]))
            .expect("prompt");
        el = el.property("prompts", spec);
    }
    let el = el.build().expect("element");
    let mut hn = gst_check::Harness::with_element(&el, Some("sink"), Some("src"));
    hn.set_src_caps_str(&format!(
        "video/x-raw,format=RGB,width={w},height={h},framerate=30/1"
    ));
    let run_library = |f: &[u8]| {
        let t = Instant::now();
        lib_pipeline.push(Frame::rgb8(f, w, h)).expect("push");
        let r = lib_pipeline.recv().expect("recv");
        assert!(r.result().is_some());
        t.elapsed()
    };
    let mut run_element = |i: usize, f: &[u8]| {
        let mut b = gst::Buffer::from_slice(f.to_vec());
        b.get_mut()
            .expect("w")
            .set_pts(gst::ClockTime::from_mseconds(33 * i as u64));
        let t = Instant::now();
        let out = hn.push_and_pull(b).expect("buffer");
        let d = t.elapsed();
        drop(out);
        d
    };
    let (mut lib, mut elem) = (Vec::new(), Vec::new());
    for (i, f) in frames.iter().enumerate() {
        let (l, e) = if i % 2 == 0 {
            let l = run_library(f);
            (l, run_element(i, f))
        } else {
            let e = run_element(i, f);
            (run_library(f), e)
        };
        // Frame 0 (prompted; first use of the model) is left out of the statistics.
        if i > 0 {
            lib.push(l);
            elem.push(e);
        }
    }
    let mut diffs: Vec<f64> = lib
        .iter()
        .zip(&elem)
        .map(|(l, e)| e.as_secs_f64() - l.as_secs_f64())
        .collect();
    diffs.sort_by(f64::total_cmp);
    let median_diff = diffs[diffs.len() / 2];
    let (ml, me) = (median(lib.clone()), median(elem.clone()));
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    println!(
        "{w}x{h}, {} frames in lockstep, {} object(s), model {}",
        lib.len(),
        usize::from(bx.is_some()),
        model_dir.display()
    );
    println!(
        "  library Pipeline push+recv: median {:.2} ms, mean {:.2} ms",
        ml.as_secs_f64() * 1e3,
        mean(&lib).as_secs_f64() * 1e3
    );
    println!(
        "  edgetamtrack push+pull:     median {:.2} ms, mean {:.2} ms",
        me.as_secs_f64() * 1e3,
        mean(&elem).as_secs_f64() * 1e3
    );
    println!(
        "  element overhead: median of per-frame differences {:+.2} ms ({:+.1} % of the library's median), difference of means {:+.2} ms",
        median_diff * 1e3,
        median_diff / ml.as_secs_f64() * 100.0,
        (mean(&elem).as_secs_f64() - mean(&lib).as_secs_f64()) * 1e3
    );
}
