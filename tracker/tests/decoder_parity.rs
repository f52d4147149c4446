//! Parity of the prompt encoder, mask decoder and post-processing with transformers'
//! EdgeTamVideoModel, plus unit tests of the dynamic multimask rule and the resize.

#[path = "common/parity.rs"]
mod parity;

use candle_core::{DType, Device, Tensor};
use edgetam_tracker::checks::compare::compare;
use edgetam_tracker::checks::decoder::{self, DecoderModules};
use edgetam_tracker::checks::fixture::Fixture;
use edgetam_tracker::checks::{StageReport, STAGE_REL_L2};
use edgetam_tracker::internals::{binarize, resize_logits};
use edgetam_tracker::internals::{
    select_single_mask, stability_scores, DecoderInputs, MaskDecoder,
};
use edgetam_tracker::Weights;
use parity::assert_all_pass;

fn load(name: &str) -> (Fixture, Weights) {
    parity::load(name).expect("fixture and weights")
}

/// `f` on the decoder inputs made of the fixture's image features and the prompt embeddings
/// `sparse` and `dense`.
fn with_inputs<R>(
    fx: &Fixture,
    sparse: &Tensor,
    dense: &Tensor,
    f: impl FnOnce(&DecoderInputs) -> R,
) -> R {
    let get = |n: &str| fx.get(n).expect(n);
    f(&DecoderInputs {
        image_embed: get("image.embed"),
        image_pe: get("image.dense_pe"),
        sparse,
        dense,
        feat_s0: get("image.feat_s0"),
        feat_s1: get("image.feat_s1"),
    })
}

/// `shape`'s values `0, 1, 2, ...` (f32).
fn ramp(shape: (usize, usize, usize, usize)) -> Tensor {
    let n = shape.0 * shape.1 * shape.2 * shape.3;
    Tensor::arange(0f32, n as f32, &Device::Cpu)
        .unwrap()
        .reshape(shape)
        .unwrap()
}

/// Every value of `t` (f32), flattened.
fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

#[test]
fn decoder_parity_image_256() {
    let (fx, w) = load("image_256");
    assert!(fx.is_full());
    let reports = decoder::run(&fx, &w).expect("checks run");
    // 5 cases x (sparse, dense, 2 x (masks, iou, score, tokens)) + pe + post for 4 cases.
    assert!(
        reports.len() >= 1 + 5 * 10 + 4 * 2,
        "{} reports",
        reports.len()
    );
    assert_all_pass(&reports, "image_256");
}

#[test]
fn decoder_parity_image_1024_prompt_and_post() {
    let (fx, w) = load("image_1024");
    assert!(!fx.is_full());
    let reports = decoder::run(&fx, &w).expect("checks run");
    // pe + 3 cases (point1, box, box_points) x (sparse, dense, post mask).
    assert_eq!(reports.len(), 1 + 3 * 3, "unexpected report count");
    assert_all_pass(&reports, "image_1024");
}

/// Several prompt rows at once: B = 2 (one image shared by both rows) and P = 2 must give each
/// row what it gets alone (the reference batches the same way).
#[test]
fn decoder_batches_prompt_rows() {
    let (fx, w) = load("image_256");
    let m = DecoderModules::load(&fx, &w).expect("modules");
    let get = |n: &str| fx.get(n).expect(n).clone();
    // "points" and "box" both have 3 sparse tokens and no mask prompt.
    let cases = ["points", "box"];
    let sparse: Vec<Tensor> = cases
        .iter()
        .map(|c| get(&format!("prompt.{c}.sparse")))
        .collect();
    let dense: Vec<Tensor> = cases
        .iter()
        .map(|c| get(&format!("prompt.{c}.dense")))
        .collect();
    let run = |sparse: &Tensor, dense: &Tensor, mm: bool| {
        with_inputs(&fx, sparse, dense, |inputs| {
            m.mask_decoder.forward(inputs, mm).expect("decoder")
        })
    };
    for mm in [true, false] {
        let single: Vec<_> = (0..2).map(|i| run(&sparse[i], &dense[i], mm)).collect();
        for stack_dim in [0usize, 1] {
            let dense_b = if stack_dim == 0 {
                Tensor::cat(&dense, 0).unwrap()
            } else {
                dense[0].clone()
            };
            let out = run(&Tensor::cat(&sparse, stack_dim).unwrap(), &dense_b, mm);
            let mut reports = Vec::new();
            for (i, c) in cases.iter().enumerate() {
                let row = |t: &Tensor| t.narrow(stack_dim, i, 1).unwrap();
                let name = format!("batch(dim {stack_dim}).{c}.mm{}", u8::from(mm));
                let pairs = [
                    ("masks", &out.masks, &single[i].masks),
                    ("iou", &out.iou, &single[i].iou),
                    ("tokens", &out.sam_tokens, &single[i].sam_tokens),
                    ("object_score", &out.object_score, &single[i].object_score),
                ];
                for (field, batched, alone) in pairs {
                    reports.push(StageReport::rel_l2(
                        format!("{name}.{field}"),
                        compare(&row(batched), alone).unwrap(),
                        BATCH_REL_L2,
                    ));
                }
            }
            assert_all_pass(&reports, "batched rows");
        }
    }
}

/// Batched rows run through the same kernels with a different row count; they may differ from a
/// lone row only by float rounding (amplified by the decoder, see the parity test).
const BATCH_REL_L2: f64 = 1e-5;

/// Forces the dynamic fallback (threshold above any stability) and checks that the single-mask
/// output is then the multimask output with the best IoU, with token 0's token; the choice must
/// agree with the reference's multimask IoUs.
#[test]
fn dynamic_multimask_fallback_picks_best_multimask_output() {
    let (mut fx, w) = load("image_256");
    let dev = Device::Cpu;
    let vb = w.var_builder(&dev);
    let normal = MaskDecoder::new(&fx.config, vb.pp("mask_decoder")).unwrap();
    fx.config
        .mask_decoder_config
        .dynamic_multimask_stability_thresh = 1.5;
    let forced = MaskDecoder::new(&fx.config, vb.pp("mask_decoder")).unwrap();
    let get = |n: &str| fx.get(n).expect(n).clone();
    let argmax = |t: &Tensor| {
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
    };
    for case in decoder::CASES {
        let (sparse, dense) = (
            get(&format!("prompt.{case}.sparse")),
            get(&format!("prompt.{case}.dense")),
        );
        let run = |dec: &MaskDecoder, mm: bool| {
            with_inputs(&fx, &sparse, &dense, |inputs| {
                dec.forward(inputs, mm).unwrap()
            })
        };
        let multi = run(&normal, true);
        let single = run(&normal, false);
        let fallback = run(&forced, false);
        let best = argmax(&multi.iou);
        assert_eq!(
            best,
            argmax(&get(&format!("decoder.{case}.mm1.iou"))),
            "{case}: best multimask output differs from the reference's"
        );
        let same = |a: &Tensor, b: &Tensor, what: &str| {
            let c = compare(a, b).unwrap();
            assert_eq!(c.max_abs, 0.0, "{case} {what}: {c:?}");
        };
        same(
            &fallback.masks,
            &multi.masks.narrow(2, best, 1).unwrap(),
            "masks",
        );
        same(&fallback.iou, &multi.iou.narrow(2, best, 1).unwrap(), "iou");
        same(&fallback.sam_tokens, &single.sam_tokens, "token 0");
        same(&fallback.object_score, &single.object_score, "object score");
    }
}

#[test]
fn stability_rule() {
    // Token 0 stable: kept regardless of IoU.
    assert_eq!(select_single_mask(0.98, &[0.1, 0.9, 0.8, 0.7], 0.98), 0);
    // Unstable: best multimask output, first maximum on ties, token 0's IoU ignored.
    assert_eq!(select_single_mask(0.97, &[0.99, 0.2, 0.9, 0.5], 0.98), 2);
    assert_eq!(select_single_mask(0.5, &[0.0, 0.7, 0.7, 0.1], 0.98), 1);
    assert_eq!(select_single_mask(0.5, &[0.0, 0.1, 0.2, 0.3], 0.98), 3);

    let dev = Device::Cpu;
    // Row 0: 2 of 4 pixels > 0.05, 3 > -0.05 -> 2/3. Row 1: nothing > -0.05 -> 1.
    let logits = Tensor::new(
        &[
            [[0.5f32, 0.06], [0.0, -1.0]],
            [[-0.05, -2.0], [-3.0, -0.06]],
        ],
        &dev,
    )
    .unwrap();
    let s = stability_scores(&logits, 0.05).unwrap();
    assert_eq!(s.len(), 2);
    assert!((s[0] - 2.0 / 3.0).abs() < 1e-7, "{s:?}");
    assert_eq!(s[1], 1.0);
}

#[test]
fn resize_identity_size_is_exact() {
    let x = ramp((1, 1, 3, 4));
    let y = resize_logits(&x, 3, 4).unwrap();
    assert_eq!(values(&y), values(&x));
}

#[test]
fn resize_one_pixel_broadcasts() {
    let dev = Device::Cpu;
    let x = Tensor::new(&[[[[-2.5f32]]], [[[7.0]]]], &dev).unwrap();
    let y = resize_logits(&x, 5, 3).unwrap();
    assert_eq!(y.dims(), &[2, 1, 5, 3]);
    let v = values(&y);
    assert!(v[..15].iter().all(|&a| a == -2.5));
    assert!(v[15..].iter().all(|&a| a == 7.0));
    let b = binarize(&y).unwrap();
    assert_eq!(b.dtype(), DType::U8);
    assert_eq!(b.sum_all().unwrap().to_scalar::<u8>().unwrap(), 15);
}

/// 2 -> 4 upscale and 4 -> 2 downscale against values computed by hand from torch's formula
/// (`F.interpolate(x, size, mode="bilinear", align_corners=False)`).
#[test]
fn resize_matches_torch_values() {
    let dev = Device::Cpu;
    let x = Tensor::new(&[[[[0f32, 4.0], [8.0, 12.0]]]], &dev).unwrap();
    let y = resize_logits(&x, 2, 4).unwrap();
    // Columns: src -0.25->0 (0), 0.25 (1), 0.75 (3), 1.25->i0=1 (4).
    assert_eq!(values(&y), [0.0, 1.0, 3.0, 4.0, 8.0, 9.0, 11.0, 12.0]);
    let d = resize_logits(&ramp((1, 1, 4, 4)), 2, 2).unwrap();
    // Averages of 2x2 blocks' corners at src 0.5, 2.5: (0+1+4+5)/4 = 2.5, ...
    assert_eq!(values(&d), [2.5, 4.5, 10.5, 12.5]);
}

#[test]
fn resize_rejects_bad_input() {
    let dev = Device::Cpu;
    let x = Tensor::zeros((4, 4), DType::F32, &dev).unwrap();
    assert!(resize_logits(&x, 8, 8).is_err());
    let x = Tensor::zeros((1, 1, 4, 4), DType::F32, &dev).unwrap();
    assert!(resize_logits(&x, 0, 8).is_err());
}

/// Without points the encoder uses the reference's empty prompt: one "not a point" token (plus
/// the padding point), which is what the fixture's mask case passes explicitly.
#[test]
fn empty_point_prompt_is_not_a_point() {
    let (fx, w) = load("image_256");
    let m = DecoderModules::load(&fx, &w).expect("modules");
    let mask = fx.get("prompt.mask.mask_input").unwrap();
    let (sparse, dense) = m.prompt_encoder.embed(None, Some(mask)).unwrap();
    let reports = [
        StageReport::rel_l2(
            "empty.sparse",
            compare(&sparse, fx.get("prompt.mask.sparse").unwrap()).unwrap(),
            STAGE_REL_L2,
        ),
        StageReport::rel_l2(
            "empty.dense",
            compare(&dense, fx.get("prompt.mask.dense").unwrap()).unwrap(),
            STAGE_REL_L2,
        ),
    ];
    assert_all_pass(&reports, "empty point prompt");
    // A label beyond the point embeddings is a typed prompt error, not a panic.
    let pts = fx.get("prompt.point1.points").unwrap();
    let bad = Tensor::new(&[[[7i64]]], &Device::Cpu).unwrap();
    assert!(m.prompt_encoder.embed(Some((pts, &bad)), None).is_err());
}
