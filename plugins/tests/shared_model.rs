//! Elements of one process with the same model, device and precision share one loaded model.

mod common;

use common::{init, model_dir};
use gst::prelude::*;

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn element() -> gst::Element {
    gst::ElementFactory::make("edgetamtrack")
        .property("model", model_dir().display().to_string())
        .build()
        .expect("element")
}

#[test]
fn four_elements_hold_one_model() {
    init();
    let before = rss();
    let first = element();
    first.set_state(gst::State::Paused).expect("start");
    let one = rss() - before;
    let others: Vec<gst::Element> = (0..3).map(|_| element()).collect();
    for e in &others {
        e.set_state(gst::State::Paused).expect("start");
    }
    let four = rss() - before;
    eprintln!(
        "RSS: 1 element +{:.1} MiB, 4 elements +{:.1} MiB",
        one as f64 / 1048576.0,
        four as f64 / 1048576.0
    );
    // The model is most of the first element's memory (its weights at 256 input are ~55 MB);
    // three more elements add their tracking state and threads, far less than three copies.
    assert!(
        one > 20 << 20,
        "the first element loaded a model: +{one} bytes"
    );
    assert!(
        four - one < one / 2,
        "3 more elements added {} bytes (one model is {one})",
        four - one
    );
    for e in others.iter().chain([&first]) {
        e.set_state(gst::State::Null).expect("stop");
    }
}
