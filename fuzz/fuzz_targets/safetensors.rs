//! transformers `model.safetensors` bytes (mutated headers): a typed error or tensors within
//! `edgetam_tracker::limits`.
#![no_main]

use candle_core::Device;
use edgetam_tracker::limits::{MAX_CHECKPOINT_TENSORS, MAX_TENSOR_ELEMENTS, MAX_TENSOR_RANK};
use edgetam_tracker::Weights;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = Weights::from_safetensors_bytes(data, "fuzz.safetensors", &Device::Cpu) {
        assert!(w.tensors().len() <= MAX_CHECKPOINT_TENSORS);
        for t in w.tensors().values() {
            assert!(t.rank() <= MAX_TENSOR_RANK && t.elem_count() <= MAX_TENSOR_ELEMENTS);
        }
    }
});
