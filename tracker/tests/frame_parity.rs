//! End-to-end single-frame parity: raw image + user prompt -> masks, scores and pointer, against
//! transformers' EdgeTamVideoModel (fixtures from tools/reference/generate_fixtures.py).

#[path = "common/parity.rs"]
mod parity;

use edgetam_tracker::checks;

fn run(dir: &str) {
    let (fx, weights) = parity::load(dir).expect("fixture and weights");
    let reports = checks::frame::run(&fx, &weights).expect("single-frame run");
    assert!(reports.len() >= 8, "too few checks ran: {}", reports.len());
    parity::assert_all_pass(&reports, dir);
}

#[test]
fn single_frame_matches_reference_at_256() {
    run("image_256");
}

/// The one end-to-end test on the full default config (1024 input).
#[test]
fn single_frame_matches_reference_at_1024() {
    run("image_1024");
}
