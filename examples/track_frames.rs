//! A folder of images -> mask PNGs and overlays, through the frame-queue pipeline: a reader
//! thread decodes and pushes frames (blocking when the queue is full), the main thread writes
//! each result as it arrives.
//!
//!     cargo run --release --example track_frames -- (MODEL_DIR | --random) FRAMES_DIR OUT_DIR x0,y0,x1,y1
//!
//! Frames are the PNG/JPEG files of FRAMES_DIR in natural name order (frame2 before frame10);
//! the box prompts object 1 on the first. Writes OUT_DIR/masks/{frame:06}.png (255 inside) and
//! OUT_DIR/overlay/{frame:06}.png. For prompts on later frames, several objects, results.jsonl
//! and logits, use `edgetam track`.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};

use anyhow::{bail, Context, Result};
use candle_core::Device;
use edgetam::pipeline::{Frame, Outcome, Pipeline};
use edgetam::{draw, natural_cmp};

mod common;

fn list_images(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            let ext = p
                .extension()
                .map(|e| e.to_string_lossy().to_ascii_lowercase());
            matches!(ext.as_deref(), Some("png" | "jpg" | "jpeg"))
        })
        .collect();
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    files.sort_by(|a, b| natural_cmp(&name(a).unwrap_or_default(), &name(b).unwrap_or_default()));
    if files.is_empty() {
        bail!("no PNG or JPEG files in {}", dir.display());
    }
    Ok(files)
}

fn main() -> Result<()> {
    // Compute-thread settings and heap reuse (`pin_default_threads`, `keep_freed_memory`), before
    // any thread exists (see docs/src/tuning.md, "Threads").
    edgetam::tracker::process_setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model_arg, frames_dir, out_dir, bbox] = args.as_slice() else {
        bail!("usage: track_frames (MODEL_DIR | --random) FRAMES_DIR OUT_DIR x0,y0,x1,y1");
    };
    let prompt = common::box_prompt(bbox)?;
    let files = list_images(Path::new(frames_dir))?;
    let out = PathBuf::from(out_dir);
    for sub in ["masks", "overlay"] {
        std::fs::create_dir_all(out.join(sub))?;
    }
    let model = common::load_model(model_arg, &Device::Cpu)?;
    let pipeline = Pipeline::builder(Arc::new(model))
        .queue_capacity(2)
        .build()?;
    pipeline.add_prompt(1, prompt)?;

    std::thread::scope(|s| -> Result<()> {
        // The reader hands each decoded image to the writer for its overlay.
        let (images, decoded) = mpsc::channel();
        let (pipeline, files) = (&pipeline, &files);
        let reader = s.spawn(move || -> Result<()> {
            let read_all = || -> Result<()> {
                for path in files {
                    let img = image::open(path)
                        .with_context(|| format!("cannot read {}", path.display()))?
                        .to_rgb8();
                    let (w, h) = (img.width() as usize, img.height() as usize);
                    pipeline.push(Frame::rgb8(img.as_raw().as_slice(), w, h))?;
                    if images.send(img).is_err() {
                        break; // the writer stopped on an error
                    }
                }
                Ok(())
            };
            let read = read_all();
            pipeline.finish(); // ends the writer's loop, also after an error
            read
        });
        for (out_frame, mut img) in pipeline.results().zip(decoded) {
            let out_frame = out_frame?;
            let f = out_frame.id;
            let r = match out_frame.outcome {
                Outcome::Tracked(r) => r,
                Outcome::Failed(e) => bail!("frame {f}: {e}"),
                Outcome::Dropped => continue, // not with the default (blocking) policy
            };
            if let Some(o) = r.objects.first() {
                let png = o.mask.data.iter().map(|&m| if m != 0 { 255 } else { 0 });
                image::GrayImage::from_raw(img.width(), img.height(), png.collect())
                    .context("mask size")?
                    .save(out.join(format!("masks/{f:06}.png")))?;
                println!(
                    "frame {f:4}  {:7.1} ms  score {:6.2}  area {:7}",
                    out_frame.timings.end_to_end.as_secs_f64() * 1e3,
                    o.score,
                    o.area
                );
            }
            draw::objects(&mut img, &r.objects);
            img.save(out.join(format!("overlay/{f:06}.png")))?;
        }
        reader
            .join()
            .map_err(|_| anyhow::anyhow!("reader thread panicked"))?
    })?;
    println!("{:?}", pipeline.stats());
    Ok(())
}
