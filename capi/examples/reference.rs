//! Writes a test case for the C and C++ programs (`capi/tests/`) and the Rust library's own
//! results on it, which those programs must reproduce byte for byte.
//!
//! ```text
//! cargo run --release -p edgetam-capi --example reference -- MODEL FIXTURE OUT_DIR
//! ```
//!
//! From a sequence fixture (`fixtures/sequence_256`: frames, box / points / mask prompts, an
//! object added mid-stream, a refresh) plus a tail of our own (an object removed, a reset and
//! a new box prompt) it writes into OUT_DIR:
//! - `frames.rgb`: every frame, packed RGB8, back to back; `mask_<frame>_<obj>.u8`: mask prompts;
//! - `script.txt`: the steps, one per line (`size W H N`, `box T O x0 y0 x1 y1`,
//!   `points T O N x y label ...`, `mask T O FILE`, `track F`, `refresh`, `remove O`, `reset`;
//!   `T` a tracker frame index, `F` an index into `frames.rgb`);
//! - `expected.txt` / `expected.masks`: the Rust `Tracker`'s results in the format the C
//!   programs write (`capi/tests/common/case.h`): a line per output and per object, scores as
//!   f32 bit patterns, and the masks' bytes in the same order.
//!
//! Not part of the library: a test helper, so it fails loudly (`expect`) on a bad fixture.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{Device, IndexOp};
use edgetam_tracker::checks::sequence::{Event, SequenceFixture};
use edgetam_tracker::{
    EdgeTam, FrameResult, LoadOptions, ObjectPrompt, PointLabel, Prompt, Tracker,
};

/// One step of the script (what the C programs replay).
enum Step {
    Prompt(u64, u32, ObjectPrompt),
    Track(usize),
    Refresh,
    Remove(u32),
    Reset,
}

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [model_dir, fixture, out] = args.as_slice() else {
        eprintln!("usage: reference MODEL FIXTURE OUT_DIR");
        std::process::exit(2);
    };
    let fx = SequenceFixture::load(fixture).expect("sequence fixture");
    let input_size = fx.config.image_size;
    fs::create_dir_all(out).expect("create OUT_DIR");

    let frames = fx.get("frames").expect("frames tensor");
    let num_frames = frames.dims()[0];
    let frame = |i: usize| -> Vec<u8> {
        frames
            .i(i)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<u8>())
            .expect("frame bytes")
    };
    let all: Vec<u8> = (0..num_frames).flat_map(frame).collect();
    fs::write(out.join("frames.rgb"), all).expect("frames.rgb");

    // The fixture's steps, then: object 2 removed before the fourth-last frame, a reset after
    // the last one and a fresh box on frame 0 of the new scene, tracked on two frames.
    let mut steps = Vec::new();
    let last_track = fx
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Track { frame, .. } => Some(*frame as usize),
            _ => None,
        })
        .max()
        .expect("tracked frames");
    for e in &fx.events {
        match e {
            Event::Prompt { frame, obj, prompt } => {
                steps.push(Step::Prompt(*frame, *obj, prompt.clone()))
            }
            Event::Track { frame, .. } => {
                if *frame as usize + 3 == last_track {
                    steps.push(Step::Remove(2));
                }
                steps.push(Step::Track(*frame as usize));
            }
            Event::Refresh { .. } => steps.push(Step::Refresh),
        }
    }
    steps.push(Step::Reset);
    steps.push(Step::Prompt(
        0,
        7,
        Prompt::from_box(20.0, 30.0, 120.0, 110.0).into(),
    ));
    steps.push(Step::Track(1));
    steps.push(Step::Track(2));

    let script = write_script(out, &steps, fx.width, fx.height, num_frames);
    fs::write(out.join("script.txt"), script).expect("script.txt");

    let options = LoadOptions::default().input_size(input_size);
    let model = EdgeTam::load_with(model_dir, &Device::Cpu, &options).expect("model");
    let mut tracker = Tracker::new(Arc::new(model));
    let mut text = String::new();
    let mut masks = Vec::new();
    let mut outputs = 0usize;
    for step in steps {
        let result = match step {
            Step::Prompt(t, o, p) => {
                tracker.add_prompt(o, t, p).expect("prompt");
                continue;
            }
            Step::Remove(o) => {
                assert!(tracker.remove_object(o), "object {o} to remove");
                continue;
            }
            Step::Reset => {
                tracker.reset();
                continue;
            }
            Step::Track(f) => tracker
                .track(&frame(f), fx.width, fx.height)
                .expect("track"),
            Step::Refresh => tracker.refresh().expect("refresh"),
        };
        write_result(&mut text, &mut masks, outputs, &result);
        outputs += 1;
    }
    fs::write(out.join("expected.txt"), text).expect("expected.txt");
    fs::write(out.join("expected.masks"), masks).expect("expected.masks");
    println!("reference: {outputs} outputs written to {}", out.display());
}

fn write_script(out: &Path, steps: &[Step], w: usize, h: usize, n: usize) -> String {
    let mut s = format!("size {w} {h} {n}\n");
    for step in steps {
        match step {
            Step::Prompt(t, o, ObjectPrompt::Mask(m)) => {
                let name = format!("mask_{t}_{o}.u8");
                fs::write(out.join(&name), &m.data).expect("mask file");
                let _ = writeln!(s, "mask {t} {o} {name}");
            }
            Step::Prompt(t, o, ObjectPrompt::Points(p)) => match (p.bbox, p.points.is_empty()) {
                (Some([x0, y0, x1, y1]), true) => {
                    let _ = writeln!(s, "box {t} {o} {x0} {y0} {x1} {y1}");
                }
                (None, false) => {
                    let _ = write!(s, "points {t} {o} {}", p.points.len());
                    for q in &p.points {
                        let label = u8::from(q.label == PointLabel::Positive);
                        let _ = write!(s, " {} {} {label}", q.x, q.y);
                    }
                    s.push('\n');
                }
                _ => panic!("the script has no step for a box with points"),
            },
            Step::Track(f) => {
                let _ = writeln!(s, "track {f}");
            }
            Step::Refresh => s.push_str("refresh\n"),
            Step::Remove(o) => {
                let _ = writeln!(s, "remove {o}");
            }
            Step::Reset => s.push_str("reset\n"),
        }
    }
    s
}

/// The format of `capi/tests/common/case.h`'s `case_write_object` (keep the two in step).
fn write_result(text: &mut String, masks: &mut Vec<u8>, k: usize, r: &FrameResult) {
    let _ = writeln!(
        text,
        "out {k} frame {} size {}x{} objects {}",
        r.frame_index,
        r.width,
        r.height,
        r.objects.len()
    );
    for o in &r.objects {
        let [x0, y0, x1, y1] = o.bbox.unwrap_or_default();
        let _ = writeln!(
            text,
            "  obj {} score {:08x} visible {} box {} {x0} {y0} {x1} {y1} area {} iou {:08x} \
             prompted {}",
            o.id,
            o.score.to_bits(),
            u8::from(o.visible),
            u8::from(o.bbox.is_some()),
            o.area,
            o.iou.to_bits(),
            u8::from(o.prompted),
        );
        masks.extend_from_slice(&o.mask.data);
    }
}
