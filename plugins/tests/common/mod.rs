#![allow(dead_code)]
//! Shared helpers: the 256 fixture model as a model folder, the fixture sequence's frames and
//! prompts, and the library pipeline's results on them.

pub mod launch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once, OnceLock};

use candle_core::Device;
use edgetam_pipeline::{Frame, Pipeline, PromptSpec};
use edgetam_tracker::{EdgeTam, FrameResult, ObjectPrompt};

pub const W: usize = 240;
pub const H: usize = 160;
/// Object 1: a box; object 2: a positive and a negative point (both visible on frames 0-8).
pub const PROMPTS: &str =
    "obj=1;frame=0;box=35,57,93,108|obj=2;frame=0;point=65,50,1;point=125,119,0";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        gst::init().expect("gst init");
        gstedgetam::plugin_register_static().expect("register the plugin");
    });
}

/// A scratch folder for this test process.
pub fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("edgetam-gst-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

/// A model folder at image size 256: the 256 fixture config + the fixture weights (linked).
pub fn model_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tmp("model256");
        std::fs::copy(
            repo().join("fixtures/image_256/config.json"),
            dir.join("config.json"),
        )
        .expect("config");
        let weights = dir.join("model.safetensors");
        if !weights.exists() {
            let src = repo().join("fixtures/model/model.safetensors");
            let src = src.canonicalize().expect("fixture weights");
            std::os::unix::fs::symlink(src, &weights).expect("link weights");
        }
        dir
    })
    .clone()
}

pub fn model() -> Arc<EdgeTam> {
    static MODEL: OnceLock<Arc<EdgeTam>> = OnceLock::new();
    MODEL
        .get_or_init(|| Arc::new(EdgeTam::load(model_dir(), &Device::Cpu).expect("model")))
        .clone()
}

/// The first `n` frames of `fixtures/sequence_256` (RGB8, 240x160).
pub fn frames(n: usize) -> Vec<Vec<u8>> {
    let path = repo().join("fixtures/sequence_256/sequence.safetensors");
    let tensors = candle_core::safetensors::load(path, &Device::Cpu).expect("sequence");
    let frames = tensors["frames"]
        .to_dtype(candle_core::DType::U8)
        .expect("u8");
    (0..n)
        .map(|i| {
            frames
                .get(i)
                .and_then(|f| f.flatten_all())
                .and_then(|f| f.to_vec1::<u8>())
                .expect("frame")
        })
        .collect()
}

/// The library pipeline's results on `frames` with `prompts` (frame = index), pushed as RGB.
pub fn library(frames: &[Vec<u8>], prompts: &str) -> Vec<FrameResult> {
    let specs = PromptSpec::parse_list(prompts).expect("prompts");
    let p = Pipeline::builder(model()).build().expect("pipeline");
    let mut out = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        for s in specs.iter().filter(|s| s.frame == i) {
            let prompt = s.points_prompt().expect("box/points prompt");
            p.add_prompt(s.obj, ObjectPrompt::Points(prompt))
                .expect("prompt");
        }
        p.push(Frame::rgb8(&f[..], W, H)).expect("push");
        out.push(p.recv().expect("recv").result().expect("tracked").clone());
    }
    out
}

/// The first `n` fixture frames as PNGs in the scratch folder `name` (`000.png`, `001.png`,
/// ... for a `multifilesrc location=DIR/%03d.png`), and the library pipeline's results on them
/// with [`PROMPTS`].
pub fn pngs_and_library(n: usize, name: &str) -> (PathBuf, Vec<FrameResult>) {
    let frames = frames(n);
    let dir = tmp(name);
    write_pngs(&frames, &dir);
    (dir, library(&frames, PROMPTS))
}

/// The properties of an element prompted by upstream detections (`source`: `roi-meta` or
/// `analytics`) of faces and persons of confidence 0.5 and more, posting its messages.
pub fn detector_props(source: &str) -> [(&str, &str); 4] {
    [
        ("prompt-source", source),
        ("prompt-roi-types", "face,person"),
        ("min-confidence", "0.5"),
        ("post-messages", "true"),
    ]
}

/// Writes the frames as `dir/000.png`, `001.png`, ...
pub fn write_pngs(frames: &[Vec<u8>], dir: &Path) {
    for (i, f) in frames.iter().enumerate() {
        let img = image::RgbImage::from_raw(W as u32, H as u32, f.clone()).expect("image");
        img.save(dir.join(format!("{i:03}.png"))).expect("png");
    }
}

/// The `detections` of a tracking message: `(decision, object)`.
pub fn decisions(s: &gst::Structure) -> Vec<(String, u32)> {
    s.get::<gst::Array>("detections")
        .expect("detections")
        .iter()
        .map(|v| {
            let d = v.get::<gst::Structure>().expect("detection");
            (
                d.get::<String>("decision").expect("decision"),
                d.get::<u32>("object").expect("object"),
            )
        })
        .collect()
}

/// The objects of a tracking message.
pub fn objects(s: &gst::Structure) -> Vec<gst::Structure> {
    s.get::<gst::Array>("objects")
        .expect("objects")
        .iter()
        .map(|v| v.get::<gst::Structure>().expect("object"))
        .collect()
}

/// Checks the log of a process run with GStreamer's leaks tracer (`GST_TRACERS=leaks`,
/// `GST_DEBUG=GST_TRACER:7`): the tracer ran, and no GstObject or mini object was alive at exit.
pub fn assert_nothing_alive(log: &str) {
    let tail = || log.lines().rev().take(60).collect::<Vec<_>>().join("\n");
    assert!(
        log.contains("object-alive.class"),
        "the leaks tracer did not run; log tail:\n{}",
        tail()
    );
    let alive: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("object-alive, type-name=") && !l.contains("format string"))
        .collect();
    assert!(alive.is_empty(), "alive at exit: {alive:#?}");
}

/// Buffer `i` of a 10 fps stream (PTS `100 * i` ms, 100 ms long) holding `data`.
pub fn buffer(data: &[u8], i: u64) -> gst::Buffer {
    let mut b = gst::Buffer::from_slice(data.to_vec());
    {
        let b = b.get_mut().expect("writable");
        b.set_pts(gst::ClockTime::from_mseconds(100 * i));
        b.set_duration(gst::ClockTime::from_mseconds(100));
    }
    b
}
