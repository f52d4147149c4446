//! The image encoder on a batch `[N, 3, S, S]` ([`EdgeTam::encode_frames`]) against N lone calls
//! ([`EdgeTam::encode_frame`]): every tensor of every image's embedding, bit for bit, for frames of
//! different sizes and pixel formats, in each precision this machine runs.

use candle_core::{DType, Device, Tensor};

use crate::frame::{Frame, PixelFormat};
use crate::model::config::EdgeTamConfig;
use crate::model::edgetam::{EdgeTam, ImageEmbedding};
use crate::Precision;

fn bits(t: &Tensor) -> (Vec<usize>, Vec<u32>) {
    let v = t
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("tensor values");
    (t.dims().to_vec(), v.iter().map(|x| x.to_bits()).collect())
}

fn tensors(e: &ImageEmbedding) -> [(&'static str, &Tensor); 5] {
    [
        ("level2", &e.features.level2),
        ("level2_pos", &e.features.level2_pos),
        ("feat_s0", &e.features.feat_s0),
        ("feat_s1", &e.features.feat_s1),
        ("embed", &e.embed),
    ]
}

/// A `w x h` RGB frame that differs with `seed`.
fn rgb(w: usize, h: usize, seed: usize) -> Vec<u8> {
    (0..w * h * 3)
        .map(|i| ((i * 31 + seed * 17 + (i / (w * 3)) * 7) % 251) as u8)
        .collect()
}

#[test]
fn batched_encoder_matches_lone_calls_bit_for_bit() -> crate::error::Result<()> {
    let dev = Device::Cpu;
    let cfg = EdgeTamConfig::with_image_size(256)?;
    let mut model = EdgeTam::random(cfg, 11, &dev)?;
    let (a, b, c) = (rgb(96, 64, 1), rgb(160, 120, 2), rgb(64, 64, 3));
    let nv12: Vec<u8> = (0..80 * 48 * 3 / 2).map(|i| (i * 13 % 256) as u8).collect();
    let frames = [
        Frame::rgb8(&a[..], 96, 64),
        Frame::rgb8(&b[..], 160, 120),
        Frame::rgb8(&c[..], 64, 64),
        Frame::new(&nv12[..], 80, 48, PixelFormat::Nv12),
    ];
    let mut precisions = vec![Precision::F32];
    if Precision::Bf16.available_on(&dev).is_ok() {
        precisions.push(Precision::Bf16);
    }
    for precision in precisions {
        model.try_set_precision(precision)?;
        let refs: Vec<&Frame> = frames.iter().collect();
        let batch = model.encode_frames(&refs)?;
        assert_eq!(batch.len(), frames.len());
        for (i, (frame, got)) in frames.iter().zip(&batch).enumerate() {
            let want = model.encode_frame(frame)?;
            assert_eq!(got.original_size, want.original_size);
            for ((name, g), (_, w)) in tensors(got).into_iter().zip(tensors(&want)) {
                assert!(
                    bits(g) == bits(w),
                    "{precision}: image {i}'s {name} differs between the batch and a lone call"
                );
            }
        }
        // A batch of two: the split works at every batch size, not just one.
        let two = model.encode_frames(&[&frames[1], &frames[0]])?;
        let want = model.encode_frame(&frames[0])?;
        assert!(
            bits(&two[1].embed) == bits(&want.embed),
            "{precision}: batch of two"
        );
        assert!(model.encode_frames(&[])?.is_empty());
    }
    Ok(())
}
