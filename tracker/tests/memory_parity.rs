//! Memory encoder + spatial perceiver parity against transformers' EdgeTamVideoModel
//! (`_encode_new_memory`; fixture from tools/reference/generate_memory_fixtures.py).

#[path = "common/parity.rs"]
mod parity;

use edgetam_tracker::checks;

#[test]
fn memory_encoder_and_perceiver_match_reference_at_256() {
    let (fx, weights) = parity::load("memory_256").expect("fixture and weights");
    let reports = checks::memory::run(&fx, &weights).expect("memory checks");
    assert!(reports.len() >= 20, "too few checks ran: {}", reports.len());
    parity::assert_all_pass(&reports, "memory_256");
}
