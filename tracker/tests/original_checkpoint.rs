//! Meta's original checkpoint layout (`edgetam.pt`) against the transformers layout
//! (`model.safetensors`): the same random weights written both ways must load to identical tensors,
//! and broken files must give typed errors naming the file.
//!
//! `fixtures/original/edgetam.pt` is written by `tools/reference/write_original_checkpoint.py` from
//! `fixtures/model/model.safetensors` through the inverse of `tracker/src/original_keys.map`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use edgetam_tracker::internals::{to_transformers, transformers_name};
use edgetam_tracker::CheckpointFormat;
use edgetam_tracker::{Error, Weights};

/// transformers keys whose value the original layout cannot hold separately: the original shares
/// one Gaussian matrix (`sam_prompt_encoder.pe_layer.positional_encoding_gaussian_matrix`) between
/// point and image-wide encodings, transformers keeps two copies, and the random fixture gave the
/// two copies different values. Loading the `.pt` gives this key the value of `COPY_SOURCE`.
const COPY_TARGET: &str = "shared_image_embedding.positional_embedding";
const COPY_SOURCE: &str = "prompt_encoder.shared_embedding.positional_embedding";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crate lives in the workspace")
        .to_owned()
}

fn safetensors_path() -> PathBuf {
    repo().join("fixtures/model/model.safetensors")
}

fn original_path() -> PathBuf {
    repo().join("fixtures/original/edgetam.pt")
}

/// A tensor's dtype, shape and exact bits (floats by bit pattern, integers by value).
fn bits(t: &Tensor) -> (DType, Vec<usize>, Vec<u64>) {
    let flat = t.flatten_all().expect("flatten");
    let v: Vec<u64> = match t.dtype() {
        DType::F32 => flat
            .to_vec1::<f32>()
            .expect("f32")
            .into_iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::I64 => flat
            .to_vec1::<i64>()
            .expect("i64")
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        other => panic!("unexpected dtype {other:?} after loading"),
    };
    (t.dtype(), t.dims().to_vec(), v)
}

#[test]
fn original_and_transformers_layouts_load_identical_tensors() {
    let dev = Device::Cpu;
    let st = Weights::load(safetensors_path(), &dev).expect("load model.safetensors");
    let pt = Weights::load(original_path(), &dev).expect("load edgetam.pt");
    assert_eq!(st.format(), CheckpointFormat::Safetensors);
    assert_eq!(pt.format(), CheckpointFormat::OriginalPt);

    let st_keys: BTreeSet<&String> = st.tensors().keys().collect();
    let pt_keys: BTreeSet<&String> = pt.tensors().keys().collect();
    let only_st: Vec<_> = st_keys.difference(&pt_keys).collect();
    let only_pt: Vec<_> = pt_keys.difference(&st_keys).collect();
    assert!(
        only_st.is_empty() && only_pt.is_empty(),
        "key sets differ: only in safetensors {only_st:?}, only in .pt {only_pt:?}"
    );
    assert_eq!(st_keys.len(), 984, "the fixture has 984 tensors");
    let ints = pt
        .tensors()
        .values()
        .filter(|t| t.dtype() == DType::I64)
        .count();
    assert_eq!(ints, 106, "BatchNorm num_batches_tracked counters (int64)");

    let mut mismatched = Vec::new();
    for key in &st_keys {
        if key.as_str() == COPY_TARGET {
            continue;
        }
        if bits(&st.tensors()[*key]) != bits(&pt.tensors()[*key]) {
            mismatched.push(key.as_str());
        }
    }
    assert!(
        mismatched.is_empty(),
        "{} tensors differ, e.g. {:?}",
        mismatched.len(),
        &mismatched[..mismatched.len().min(5)]
    );
    // The one shared original tensor lands on both transformers names.
    assert_eq!(
        bits(&pt.tensors()[COPY_TARGET]),
        bits(&pt.tensors()[COPY_SOURCE])
    );
    assert_eq!(
        bits(&pt.tensors()[COPY_SOURCE]),
        bits(&st.tensors()[COPY_SOURCE])
    );
}

#[test]
fn transformers_name_documents_the_map() {
    assert_eq!(
        transformers_name("sam_prompt_encoder.pe_layer.positional_encoding_gaussian_matrix")
            .as_deref(),
        Some(COPY_SOURCE)
    );
    assert_eq!(
        transformers_name("no_obj_ptr").as_deref(),
        Some("no_object_pointer")
    );
    assert_eq!(transformers_name("not.an.edgetam.key"), None);
}

/// A scratch directory under the system temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "edgetam-original-checkpoint-{tag}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).expect("write scratch file");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn assert_load_fails(path: &Path, what: &str) {
    match Weights::load(path, &Device::Cpu) {
        Ok(w) => panic!(
            "{what}: loaded {} tensors from a broken file",
            w.tensors().len()
        ),
        Err(e) => {
            assert!(
                matches!(e, Error::WeightFile { .. } | Error::Io { .. }),
                "{what}: untyped error {e:?}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()),
                "{what}: message does not name the file: {msg}"
            );
        }
    }
}

#[test]
fn broken_files_give_typed_errors_naming_the_path() {
    let scratch = Scratch::new("broken");
    for (src, name) in [
        (safetensors_path(), "model.safetensors"),
        (original_path(), "edgetam.pt"),
    ] {
        let bytes = std::fs::read(&src).expect("read fixture");
        for frac in [0.0, 0.01, 0.5, 0.999] {
            let n = ((bytes.len() as f64) * frac) as usize;
            let p = scratch.write(&format!("trunc-{frac}-{name}"), &bytes[..n]);
            assert_load_fails(&p, &format!("{name} truncated to {n} bytes"));
        }
        // Everything but the last byte.
        let p = scratch.write(&format!("minus1-{name}"), &bytes[..bytes.len() - 1]);
        assert_load_fails(&p, &format!("{name} minus its last byte"));
    }
    let mut garbage = Vec::with_capacity(4096);
    let mut x: u32 = 0x1234_5678;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        garbage.push((x >> 24) as u8);
    }
    let p = scratch.write("garbage.bin", &garbage);
    assert_load_fails(&p, "garbage bytes");
    // Garbage behind a zip signature (looks like a .pt) and behind a plausible safetensors header.
    let mut zipish = b"PK\x03\x04".to_vec();
    zipish.extend_from_slice(&garbage);
    let p = scratch.write("garbage.pt", &zipish);
    assert_load_fails(&p, "garbage after a zip signature");
    let mut stish = 16u64.to_le_bytes().to_vec();
    stish.extend_from_slice(&garbage);
    let p = scratch.write("garbage.safetensors", &stish);
    assert_load_fails(&p, "garbage after a safetensors length");
    let p = scratch.write("empty.pt", b"");
    assert_load_fails(&p, "empty file");
    assert_load_fails(&scratch.0.join("does-not-exist.pt"), "missing file");
}

#[test]
fn unknown_original_key_is_named() {
    let t = Tensor::zeros((2, 2), DType::F32, &Device::Cpu).expect("tensor");
    let raw = vec![
        ("no_obj_ptr".to_string(), t.clone()),
        ("image_encoder.trunk_v2.stem.weight".to_string(), t),
    ];
    let path = Path::new("some/dir/edgetam.pt");
    match to_transformers(raw, path) {
        Ok(_) => panic!("an unknown key was accepted"),
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e, Error::WeightFile { .. }), "{e:?}");
            assert!(
                msg.contains("`image_encoder.trunk_v2.stem.weight`"),
                "message does not name the key: {msg}"
            );
            assert!(msg.contains("some/dir/edgetam.pt"), "{msg}");
        }
    }
}
