//! Segment one object in an image with the library API.
//!
//!     cargo run --release --example segment_image -- MODEL_DIR IMAGE X0 Y0 X1 Y1
//!     cargo run --release --example segment_image -- --random examples/data/shapes.png 150 90 330 260
//!
//! Prints the object score and mask area, and writes `mask.png` beside the current directory.

use anyhow::{bail, Context, Result};
use candle_core::Device;
use edgetam::tracker::{mask_area_and_box, EdgeTam, EdgeTamConfig, MultimaskMode, Prompt};

fn main() -> Result<()> {
    // Compute-thread settings and heap reuse (`pin_default_threads`, `keep_freed_memory`), before
    // any thread exists (see docs/src/tuning.md, "Threads").
    edgetam::tracker::process_setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 6 {
        bail!("usage: segment_image (MODEL_DIR | --random) IMAGE X0 Y0 X1 Y1");
    }
    let device = Device::Cpu;
    let model = if args[0] == "--random" {
        eprintln!("random weights: the mask is meaningless");
        EdgeTam::random(EdgeTamConfig::default(), 0, &device)?
    } else {
        EdgeTam::load(&args[0], &device)?
    };
    let img = image::open(&args[1])
        .with_context(|| format!("reading {}", args[1]))?
        .to_rgb8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    let b: Vec<f32> = args[2..]
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;

    // Encode once; any number of prompts can then be decoded against the same embedding.
    let embedding = model.encode_image(img.as_raw(), w, h)?;
    let seg = model.segment(
        &embedding,
        &Prompt::from_box(b[0], b[1], b[2], b[3]),
        MultimaskMode::Auto,
    )?;
    let (_, mask) = model.mask_at_original(&embedding, &seg)?;
    let (area, bbox) = mask_area_and_box(&mask)?;
    println!(
        "score {:.3}, IoU {:.3}, area {area} px, box {bbox:?}",
        seg.object_score,
        seg.iou()
    );

    let pixels: Vec<u8> = mask
        .flatten_all()?
        .to_vec1::<u8>()?
        .iter()
        .map(|&m| m * 255)
        .collect();
    image::GrayImage::from_raw(w as u32, h as u32, pixels)
        .context("mask size")?
        .save("mask.png")?;
    Ok(())
}
