//! Meta's `edgetam.pt` bytes (a zip of a pickle and storages; mutated pickles and entries): a
//! typed error or tensors within `edgetam_tracker::limits` under transformers names (the key
//! map runs too: renames, splits, concatenations, copies).
#![no_main]

use candle_core::Device;
use edgetam_tracker::limits::{MAX_CHECKPOINT_TENSORS, MAX_TENSOR_ELEMENTS, MAX_TENSOR_RANK};
use edgetam_tracker::Weights;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = Weights::from_pt_bytes(data, "fuzz.pt", &Device::Cpu) {
        assert!(w.tensors().len() <= MAX_CHECKPOINT_TENSORS + 1);
        for t in w.tensors().values() {
            assert!(t.rank() <= MAX_TENSOR_RANK && t.elem_count() <= MAX_TENSOR_ELEMENTS);
        }
    }
});
