//! `edgetamtrack`'s throughput with one buffer in flight (serial) against two in flight with
//! the encoder ahead, alternating rounds in one run: each round pushes `FRAMES` buffers of a
//! non-live stream through the element in a `gst_check::Harness`, then EOS, and times it.
//!
//! ```sh
//! cargo run --release -p gst-plugin-edgetam --example throughput -- [MODEL] [FRAMES] [ROUNDS] [WxH]
//! ```
//!
//! MODEL defaults to `fixtures/model` (random weights, the released 1024 config). Frames:
//! synthetic RGB (a block drifting right), one box prompt on buffer 0.

use std::time::Instant;

use gst::prelude::*;
use gst_check::Harness;

mod common;

/// Seconds to push `frames` buffers through an element with `props` and drain it.
fn round(model: &str, frames: &[Vec<u8>], (w, h): (usize, usize), props: &[(&str, &str)]) -> f64 {
    let el = gst::ElementFactory::make("edgetamtrack")
        .property("model", model)
        .property(
            "prompts",
            format!(
                "obj=1;frame=0;box={},{},{},{}",
                w / 4,
                h / 3,
                w / 2,
                2 * h / 3
            ),
        )
        .build()
        .expect("element");
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
    let mut harness = Harness::with_element(&el, Some("sink"), Some("src"));
    harness.set_src_caps_str(&format!(
        "video/x-raw,format=RGB,width={w},height={h},framerate=30/1"
    ));
    let t = Instant::now();
    for (i, f) in frames.iter().enumerate() {
        let mut b = gst::Buffer::from_slice(f.clone());
        b.get_mut()
            .expect("writable")
            .set_pts(gst::ClockTime::from_mseconds(33 * i as u64));
        harness.push(b).expect("push");
    }
    assert!(harness.push_event(gst::event::Eos::new()));
    let secs = t.elapsed().as_secs_f64();
    let mut out = 0;
    while harness.try_pull().is_some() {
        out += 1;
    }
    assert_eq!(out, frames.len(), "every buffer comes out");
    secs
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    edgetam_tracker::pin_default_threads();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let model = args
        .first()
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| repo.join("fixtures/model").display().to_string());
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(12);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let (w, h) = common::size_arg(args.get(3), (640, 360));
    gst::init().expect("gst");
    gstedgetam::plugin_register_static().expect("plugin");
    let frames: Vec<Vec<u8>> = (0..n).map(|t| common::frame(t, w, h)).collect();
    let configs: [(&str, &[(&str, &str)]); 2] = [
        ("serial (1 in flight)", &[]),
        (
            "encoder-ahead, 2 in flight",
            &[("encoder-ahead", "true"), ("max-in-flight", "2")],
        ),
    ];
    // A warm-up round (page faults, the allocator's first frames).
    round(&model, &frames[..2.min(n)], (w, h), &[]);
    let mut times = vec![Vec::new(); configs.len()];
    for r in 0..rounds {
        for (i, (name, props)) in configs.iter().enumerate() {
            let s = round(&model, &frames, (w, h), props);
            println!(
                "round {r}: {name}: {n} buffers in {s:.2} s, {:.2} fps",
                n as f64 / s
            );
            times[i].push(s);
        }
    }
    for ((name, _), t) in configs.iter().zip(times) {
        let m = median(t);
        println!(
            "median {name}: {:.2} fps ({:.0} ms per buffer)",
            n as f64 / m,
            m * 1e3 / n as f64
        );
    }
}
