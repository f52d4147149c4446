//! Track one object through a video file or a camera with OpenCV (feature `opencv`): frames come
//! from `videoio::VideoCapture` as BGR `Mat`s, go into the pipeline without a copy
//! (`Frame::from_mat`), and an overlay video (mask tinted, box outlined) is written with
//! `videoio::VideoWriter`. Prints each frame's latency.
//!
//!     cargo run --release --features opencv --example track_video -- \
//!         (MODEL_DIR | --random) (VIDEO_FILE | CAMERA_INDEX) OUT_VIDEO x0,y0,x1,y1 [MAX_FRAMES]
//!
//! The box prompts object 1 on frame 0. OUT_VIDEO ending in `.avi` is written as Motion JPEG,
//! anything else as MPEG-4 (`mp4v`). A camera (a number, e.g. `0`) stops after MAX_FRAMES
//! (default 300); a file at its end or after MAX_FRAMES.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use edgetam::draw;
use edgetam::pipeline::{Frame, Outcome, Pipeline};
use image::RgbImage;
use opencv::core::{Mat, Size, Vec3b};
use opencv::prelude::*;
use opencv::videoio::{self, VideoCapture, VideoWriter};

/// Frames read ahead of the one whose result is awaited.
const AHEAD: usize = 2;

mod common;

/// The overlay of one frame as a BGR `Mat` for the writer.
fn overlay(mat: &Mat, objects: &[edgetam::tracker::ObjectResult]) -> Result<Mat> {
    let frame = Frame::from_mat(mat)?;
    let (w, h) = (frame.width(), frame.height());
    let mut img = RgbImage::from_raw(w as u32, h as u32, frame.to_rgb8()?).context("size")?;
    draw::objects(&mut img, objects);
    let mut bgr = img.into_raw();
    for px in bgr.chunks_exact_mut(3) {
        px.swap(0, 2);
    }
    let view = Mat::new_rows_cols_with_bytes::<Vec3b>(h as i32, w as i32, &bgr)?;
    Ok(view.try_clone()?)
}

fn main() -> Result<()> {
    // Compute-thread settings and heap reuse (`pin_default_threads`, `keep_freed_memory`), before
    // any thread exists (see docs/src/tuning.md, "Threads").
    edgetam::tracker::process_setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model_arg, source, out_path, bbox) = match args.as_slice() {
        [m, s, o, b] | [m, s, o, b, _] => (m, s, o, b),
        _ => bail!(
            "usage: track_video (MODEL_DIR | --random) (VIDEO_FILE | CAMERA_INDEX) OUT_VIDEO \
             x0,y0,x1,y1 [MAX_FRAMES]"
        ),
    };
    let max_frames: usize = args.get(4).map_or(Ok(300), |s| s.parse())?;
    let prompt = common::box_prompt(bbox)?;

    let mut cap = match source.parse::<i32>() {
        Ok(index) => VideoCapture::new(index, videoio::CAP_ANY)?,
        Err(_) => VideoCapture::from_file(source, videoio::CAP_ANY)?,
    };
    if !cap.is_opened()? {
        bail!("cannot open {source}");
    }
    let fps = match cap.get(videoio::CAP_PROP_FPS)? {
        f if f > 0.0 => f,
        _ => 30.0,
    };

    let model = common::load_model(model_arg, &Device::Cpu)?;
    let pipeline = Pipeline::builder(Arc::new(model))
        .queue_capacity(AHEAD)
        .build()?;
    pipeline.add_prompt(1, prompt)?;

    let mut writer: Option<VideoWriter> = None;
    let mut pending: VecDeque<Mat> = VecDeque::new();
    let (mut read, mut eof) = (0, false);
    let start = Instant::now();
    loop {
        while pending.len() < AHEAD && !eof {
            let mut mat = Mat::default();
            if read == max_frames || !cap.read(&mut mat)? || mat.empty() {
                eof = true;
                pipeline.finish();
                break;
            }
            // Borrowed: the pipeline converts the Mat's pixels straight to RGB.
            pipeline.push(Frame::from_mat(&mat)?.with_timestamp(start.elapsed()))?;
            pending.push_back(mat);
            read += 1;
        }
        let Some(mat) = pending.pop_front() else {
            break;
        };
        let out = pipeline.recv()?;
        let objects = match &out.outcome {
            Outcome::Tracked(r) => r.objects.as_slice(),
            Outcome::Failed(e) => bail!("frame {}: {e}", out.id),
            Outcome::Dropped => continue, // not with the default (blocking) policy
        };
        let t = &out.timings;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        println!(
            "frame {:4}  latency {:7.1} ms (queue {:6.1}, convert {:5.1}, encode {:6.1}, track {:6.1})  score {}",
            out.id,
            ms(t.end_to_end),
            ms(t.queue),
            ms(t.convert),
            ms(t.encode),
            ms(t.track),
            objects.first().map_or("-".into(), |o| format!("{:.2}", o.score)),
        );
        let frame = overlay(&mat, objects)?;
        let writer = match &mut writer {
            Some(w) => w,
            None => {
                let code = if out_path.to_ascii_lowercase().ends_with(".avi") {
                    VideoWriter::fourcc('M', 'J', 'P', 'G')?
                } else {
                    VideoWriter::fourcc('m', 'p', '4', 'v')?
                };
                let size = Size::new(mat.cols(), mat.rows());
                let w = VideoWriter::new(out_path, code, fps, size, true)?;
                if !w.is_opened()? {
                    bail!("cannot write {out_path}");
                }
                writer.insert(w)
            }
        };
        writer.write(&frame)?;
    }
    if let Some(mut w) = writer {
        w.release()?;
    }
    println!(
        "{read} frames in {:.1} s; {:?}",
        start.elapsed().as_secs_f64(),
        pipeline.stats()
    );
    Ok(())
}
