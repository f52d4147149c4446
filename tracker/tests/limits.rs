//! Sizes from files and callers are bounded before anything is allocated for them
//! (`edgetam_tracker::limits`): each case below used to reach an allocation, a division by zero
//! or an overflow, and is now a typed error naming the value and the bound.

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::Device;
use edgetam_tracker::limits::{self, LimitError};
use edgetam_tracker::{
    EdgeTam, EdgeTamConfig, Error, Mask, Point, PointLabel, Prompt, Tracker, Weights,
};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("edgetam-limits-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fixture config with `edit` applied to its JSON.
fn config_json(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let text = std::fs::read_to_string(fixtures().join("model/config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut v);
    v.to_string()
}

fn limit(e: Error) -> LimitError {
    match e {
        Error::Limit(l) => l,
        other => panic!("expected a limit error, got: {other}"),
    }
}

/// The issue's reproduction: a checkpoint folder whose config.json says `image_size: 65536`
/// aborted the process ("memory allocation of 274877906944 bytes failed").
#[test]
fn image_size_65536_is_refused_before_allocating() {
    let dir = temp_dir("image-size");
    let json = config_json(|v| {
        v["image_size"] = 65536.into();
        v["prompt_encoder_config"]["image_size"] = 65536.into();
        v["memory_attention_rope_feat_sizes"] = serde_json::json!([4096, 4096]);
        v["vision_config"]["backbone_feature_sizes"] =
            serde_json::json!([[16384, 16384], [8192, 8192], [4096, 4096]]);
    });
    std::fs::write(dir.join("config.json"), json).unwrap();
    std::fs::copy(
        fixtures().join("model/model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    let e = EdgeTam::load(&dir, &Device::Cpu).err().expect("refused");
    let msg = e.to_string();
    let l = limit(e);
    assert_eq!((l.value, l.limit), (65536, limits::MAX_IMAGE_SIZE as u64));
    assert!(
        msg.contains("config.json image_size is 65536, above the limit of 4096"),
        "{msg}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn config_sizes_and_depths_are_bounded() {
    // (JSON pointer, value): each over its bound.
    let over: &[(&str, serde_json::Value)] = &[
        ("/mask_decoder_config/num_hidden_layers", 1_000_000.into()),
        ("/mask_decoder_config/mlp_dim", (1u64 << 40).into()),
        ("/memory_attention_num_layers", 100_000.into()),
        ("/memory_attention_mlp_hidden_size", (1u64 << 33).into()),
        (
            "/memory_attention_rope_k_sizes",
            serde_json::json!([100_000, 16]),
        ),
        ("/perceiver_resampler_num_latents", 1_000_000.into()),
        ("/memory_fuser_kernel_size", 1001.into()),
        ("/num_maskmem", 1_000_000.into()),
        ("/max_object_pointers_in_encoder", 1_000_000.into()),
        ("/max_cond_frame_num", 1_000_000.into()),
        (
            "/vision_config/backbone_channel_list",
            serde_json::json!([1_000_000, 192, 96, 48]),
        ),
    ];
    for (pointer, value) in over {
        let json = config_json(|v| *v.pointer_mut(pointer).unwrap() = value.clone());
        let l = limit(EdgeTamConfig::from_json(&json).expect_err(pointer));
        assert!(l.value > l.limit, "{pointer}: {l}");
        let key = pointer.rsplit('/').next().unwrap();
        assert!(l.what.contains(key), "{pointer}: {l}");
    }
    // Zero where the model divides by the value or needs one of it: a config error, never a
    // division by zero or an underflow.
    for pointer in [
        "/prompt_encoder_config/patch_size",
        "/mask_decoder_config/num_attention_heads",
        "/mask_decoder_config/attention_downsample_rate",
        "/memory_attention_num_attention_heads",
        "/num_maskmem",
        "/mask_downsampler_stride",
        "/perceiver_resampler_num_attention_heads",
    ] {
        let json = config_json(|v| *v.pointer_mut(pointer).unwrap() = 0.into());
        match EdgeTamConfig::from_json(&json) {
            Err(Error::Config { message, .. }) => {
                assert!(
                    message.contains("below the minimum of 1"),
                    "{pointer}: {message}"
                )
            }
            other => panic!("{pointer}: {:?}", other.map(|_| ())),
        }
    }
    // The bounds leave room for real use.
    EdgeTamConfig::with_image_size(4096).expect("4096 is allowed");
    assert!(matches!(
        EdgeTamConfig::with_image_size(4160),
        Err(Error::Limit(_))
    ));
}

#[test]
fn oversized_config_file_is_refused_unread() {
    let dir = temp_dir("big-config");
    let path = dir.join("config.json");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(limits::MAX_CONFIG_BYTES as u64 + 1).unwrap();
    let l = limit(EdgeTamConfig::from_file(&path).unwrap_err());
    assert_eq!(l.limit, limits::MAX_CONFIG_BYTES as u64);
    std::fs::remove_dir_all(dir).ok();
}

/// A safetensors file: header JSON then `data`.
fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

#[test]
fn safetensors_headers_are_bounded() {
    let load = |bytes: &[u8]| Weights::from_safetensors_bytes(bytes, "t.safetensors", &Device::Cpu);
    let ok = safetensors(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        &[0; 8],
    );
    assert_eq!(load(&ok).unwrap().tensors().len(), 1);
    // A header length of 2^63 in the first 8 bytes.
    let mut huge = ok.clone();
    huge[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
    let l = limit(load(&huge).err().unwrap());
    assert_eq!(l.limit, limits::MAX_SAFETENSORS_HEADER_BYTES as u64);
    // A shape of 2^40 elements, rank 9, and offsets past the data.
    let big = safetensors(
        r#"{"a":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,8]}}"#,
        &[0; 8],
    );
    let l = limit(load(&big).err().unwrap());
    assert_eq!(
        (l.value, l.limit),
        (1 << 40, limits::MAX_TENSOR_ELEMENTS as u64)
    );
    assert!(
        l.what
            .contains("tensor `a` ([1048576, 1048576]) element count"),
        "{l}"
    );
    let rank9 = safetensors(
        r#"{"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}}"#,
        &[0; 8],
    );
    assert_eq!(limit(load(&rank9).err().unwrap()).value, 9);
    let past = safetensors(
        r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
        &[0; 8],
    );
    match load(&past) {
        Err(Error::WeightFile { message, .. }) => {
            assert!(message.contains("data offsets 0..16"), "{message}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // The same checks on a file (mapped, not read whole).
    let dir = temp_dir("safetensors");
    let path = dir.join("model.safetensors");
    std::fs::write(&path, &big).unwrap();
    limit(Weights::load(&path, &Device::Cpu).err().unwrap());
    std::fs::remove_dir_all(dir).ok();
}

/// The fixture's `.pt` archive with its `data.pkl` passed through `edit`.
fn patched_pt(edit: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
    use std::io::{Read, Write};
    let file = std::fs::File::open(fixtures().join("original/edgetam.pt")).unwrap();
    let mut zip = zip::ZipArchive::new(file).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut edit = Some(edit);
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let name = f.name().unwrap().into_owned();
        let mut data = Vec::new();
        f.read_to_end(&mut data).unwrap();
        if name.ends_with("/data.pkl") {
            data = (edit.take().unwrap())(&data);
        }
        out.start_file(name, opts).unwrap();
        out.write_all(&data).unwrap();
    }
    out.finish().unwrap().into_inner()
}

#[test]
fn pt_pickles_are_bounded() {
    // The first tensor's size `(7, 1, 1, 64)` (`maskmem_tpos_enc`) rewritten to
    // `(2^31 - 1, 1, 1, 64)`: refused before its storage is read.
    let size = b"\x28\x4b\x07\x4b\x01\x4b\x01\x4b\x40\x74"; // ( K7 K1 K1 K64 t
    let replace = |pkl: &[u8], with: &[u8]| {
        let at = pkl.windows(size.len()).position(|w| w == size).unwrap();
        [&pkl[..at], with, &pkl[at + size.len()..]].concat()
    };
    let huge =
        patched_pt(|pkl| replace(pkl, b"\x28\x4a\xff\xff\xff\x7f\x4b\x01\x4b\x01\x4b\x40\x74"));
    let l = limit(
        Weights::from_pt_bytes(&huge, "edgetam.pt", &Device::Cpu)
            .err()
            .unwrap(),
    );
    assert_eq!(
        (l.value, l.limit),
        (((1u64 << 31) - 1) * 64, limits::MAX_TENSOR_ELEMENTS as u64)
    );
    assert!(l.what.contains("tensor `maskmem_tpos_enc`"), "{l}");
    // A negative dimension, and a view larger than its storage: typed errors.
    let negative =
        patched_pt(|pkl| replace(pkl, b"\x28\x4a\xff\xff\xff\xff\x4b\x01\x4b\x01\x4b\x40\x74"));
    let e = Weights::from_pt_bytes(&negative, "edgetam.pt", &Device::Cpu)
        .err()
        .unwrap();
    assert!(e.to_string().contains("negative dimension -1"), "{e}");
    let larger = patched_pt(|pkl| replace(pkl, b"\x28\x4b\x08\x4b\x01\x4b\x01\x4b\x40\x74"));
    let e = Weights::from_pt_bytes(&larger, "edgetam.pt", &Device::Cpu)
        .err()
        .unwrap();
    assert!(e.to_string().contains("of a storage of 448"), "{e}");
    // Unmodified (rebuilt the same way), the archive loads.
    let same = patched_pt(|pkl| pkl.to_vec());
    let w = Weights::from_pt_bytes(&same, "edgetam.pt", &Device::Cpu).unwrap();
    assert!(w.tensors().len() > 900);
}

#[test]
fn masks_prompts_and_objects_are_bounded() {
    // A mask 20000 pixels wide: refused by its side before `width * height` is computed.
    let l = limit(Mask::new(20_000, 1, vec![1; 20_000]).unwrap_err());
    assert_eq!((l.value, l.limit), (20_000, limits::MAX_FRAME_SIDE as u64));
    // usize::MAX x 2 used to overflow `width * height`.
    limit(Mask::new(usize::MAX, 2, vec![1; 4]).unwrap_err());
    // 65 points.
    let p = Prompt::from_points(
        (0..65)
            .map(|i| Point {
                x: i as f32,
                y: 1.0,
                label: PointLabel::Positive,
            })
            .collect(),
    );
    let l = limit(p.validate(100, 100).unwrap_err());
    assert_eq!((l.value, l.limit), (65, limits::MAX_PROMPT_POINTS as u64));
    // Objects: the 1025th new object of a tracker is refused (its memory ring is never
    // allocated); an existing object can still be re-prompted.
    let config = EdgeTamConfig::with_image_size(256).unwrap();
    let model = Arc::new(EdgeTam::random(config, 0, &Device::Cpu).unwrap());
    let mut tracker = Tracker::new(model);
    for id in 0..limits::MAX_OBJECTS as u32 {
        tracker
            .add_prompt(id, 0, Prompt::from_box(1., 1., 5., 5.))
            .unwrap();
    }
    let l = limit(
        tracker
            .add_prompt(5000, 0, Prompt::from_box(1., 1., 5., 5.))
            .unwrap_err(),
    );
    assert_eq!((l.value, l.limit), (1025, 1024));
    tracker
        .add_prompt(7, 0, Prompt::from_box(1., 1., 6., 6.))
        .expect("re-prompting an existing object");
    let l = limit(tracker.track(&[0; 3], 1, 1 << 20).unwrap_err());
    assert_eq!(l.what, "image height");
}
