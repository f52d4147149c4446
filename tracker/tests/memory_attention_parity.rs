//! Memory-attention parity against transformers' EdgeTAM (`fixtures/memory_attention_256`), and
//! unit tests of the axial RoPE it uses.

#[path = "common/parity.rs"]
mod parity;

use std::time::Instant;

use candle_core::{Device, Tensor};
use edgetam_tracker::checks::fixture::Fixture;
use edgetam_tracker::checks::{memory_attention, Result};
use edgetam_tracker::internals::MemoryAttention;
use edgetam_tracker::internals::{rotate_pairwise, AxialRope};
use edgetam_tracker::Weights;
use parity::fixtures;

fn load() -> Result<(Fixture, Weights)> {
    parity::load("memory_attention_256")
}

/// The fixture and the memory attention built from it.
fn load_model() -> Result<(Fixture, MemoryAttention)> {
    let (fx, weights) = load()?;
    let model = memory_attention::build(&fx, &weights)?;
    Ok((fx, model))
}

/// The fixture's tensor `name` token-major (`[tokens, batch, channels]`), as the module takes it.
fn token_major(fx: &Fixture, name: &str) -> Result<Tensor> {
    Ok(fx.get(name)?.transpose(0, 1)?.contiguous()?)
}

#[test]
fn memory_attention_matches_reference() -> Result<()> {
    let (fx, weights) = load()?;
    let t = Instant::now();
    let reports = memory_attention::run(&fx, &weights)?;
    eprintln!("memory attention checks in {:.2?}", t.elapsed());
    parity::assert_all_pass(&reports, "memory attention");
    let names: Vec<_> = reports.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "memattn.layer0",
            "memattn.layer1",
            "memattn.output",
            "memattn.batch2.obj0.output",
            "memattn.batch2.obj1.vs_alone"
        ]
    );
    Ok(())
}

/// The check must be able to fail: without the key RoPE on the memories (all tokens treated as
/// pointers) the output is far from the reference.
#[test]
fn memory_attention_check_detects_missing_key_rope() -> Result<()> {
    let (fx, model) = load_model()?;
    let get = |n: &str| token_major(&fx, n);
    let memory = get("memattn.memory")?;
    let m = memory.dim(1)?;
    let out = model.forward(
        &get("memattn.current")?,
        &get("memattn.current_pos")?,
        &memory,
        &get("memattn.memory_pos")?,
        m,
        0,
    )?;
    let c = edgetam_tracker::checks::compare::compare(&out, fx.get("memattn.output")?)?;
    eprintln!("without key RoPE: rel_l2={:.2e}", c.rel_l2);
    assert!(c.rel_l2 > 1e-2, "key RoPE has no visible effect: {c:?}");
    Ok(())
}

#[test]
fn memory_attention_rejects_bad_layout() -> Result<()> {
    let (fx, model) = load_model()?;
    let get = |n: &str| token_major(&fx, n);
    let (cur, pos) = (get("memattn.current")?, get("memattn.current_pos")?);
    let (mem, mem_pos) = (get("memattn.memory")?, get("memattn.memory_pos")?);
    // 1040 tokens: 16 pointers + 2 x 512. Three memories do not divide 1024 tokens.
    assert!(model.forward(&cur, &pos, &mem, &mem_pos, 16, 3).is_err());
    // More pointer tokens than memory tokens.
    assert!(model.forward(&cur, &pos, &mem, &mem_pos, 2000, 2).is_err());
    // Memory of the wrong width.
    let wide = Tensor::cat(&[&mem, &mem], 2)?;
    assert!(model.forward(&cur, &pos, &wide, &wide, 16, 2).is_err());
    // Query grid mismatch.
    let short = cur.narrow(1, 0, 100)?;
    assert!(model
        .forward(&short, &short, &mem, &mem_pos, 16, 2)
        .is_err());
    Ok(())
}

#[test]
fn rotate_pairwise_rotates_each_pair() -> candle_core::Result<()> {
    let x = Tensor::new(&[[1f32, 2., 3., 4.], [5., 6., 7., 8.]], &Device::Cpu)?;
    let r = rotate_pairwise(&x)?.to_vec2::<f32>()?;
    assert_eq!(r, [[-2., 1., -4., 3.], [-6., 5., -8., 7.]]);
    Ok(())
}

/// Token `t = y * W + x` rotates its first half of pairs by `x * f_j` and its second half by
/// `y * f_j`, `f_j = theta^(-4j / D)`; and query-key products depend only on relative position.
#[test]
fn axial_rope_matches_formula() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let (d, theta, w, h) = (16usize, 100.0f64, 5usize, 3usize);
    let rope = AxialRope::new(d, theta, [w, h], &dev)?;
    assert_eq!(rope.len(), w * h);
    let cos = rope.cos().to_vec2::<f32>()?;
    let sin = rope.sin().to_vec2::<f32>()?;
    for t in 0..w * h {
        let (x, y) = ((t % w) as f64, (t / w) as f64);
        for pair in 0..d / 2 {
            let (pos, j) = if pair < d / 4 {
                (x, pair)
            } else {
                (y, pair - d / 4)
            };
            let angle = pos * theta.powf(-(4.0 * j as f64) / d as f64);
            for ch in [2 * pair, 2 * pair + 1] {
                assert!(
                    (cos[t][ch] as f64 - angle.cos()).abs() < 1e-6,
                    "cos t={t} ch={ch}"
                );
                assert!(
                    (sin[t][ch] as f64 - angle.sin()).abs() < 1e-6,
                    "sin t={t} ch={ch}"
                );
            }
        }
    }
    // Relative-position property: <R(p) q, R(p') k> depends on p - p' only.
    let q = Tensor::randn(0f32, 1., (1, d), &dev)?;
    let k = Tensor::randn(0f32, 1., (1, d), &dev)?;
    let rq = rope.apply(&q.broadcast_as((w * h, d))?.contiguous()?)?;
    let rk = rope.apply(&k.broadcast_as((w * h, d))?.contiguous()?)?;
    let dot = |a: usize, b: usize| -> candle_core::Result<f32> {
        (rq.get(a)? * rk.get(b)?)?.sum_all()?.to_scalar::<f32>()
    };
    // (x, y) = (2, 1) vs (1, 0) and (4, 2) vs (3, 1): same offset (1, 1).
    let (a, b) = (dot(w + 2, 1)?, dot(2 * w + 4, w + 3)?);
    assert!((a - b).abs() < 1e-4 * a.abs().max(1.0), "{a} vs {b}");
    // Different offset: different product.
    let c = dot(w + 2, 0)?;
    assert!((a - c).abs() > 1e-3, "{a} vs {c}");
    // Rotation preserves norms.
    let n0 = q.sqr()?.sum_all()?.to_scalar::<f32>()?;
    let n1 = rq.get(7)?.sqr()?.sum_all()?.to_scalar::<f32>()?;
    assert!((n0 - n1).abs() < 1e-4 * n0);
    Ok(())
}

#[test]
fn axial_rope_rejects_bad_sizes() {
    assert!(AxialRope::new(6, 10_000.0, [4, 4], &Device::Cpu).is_err());
    assert!(AxialRope::new(8, 0.0, [4, 4], &Device::Cpu).is_err());
    let rope = AxialRope::new(8, 10_000.0, [4, 4], &Device::Cpu);
    let x = Tensor::zeros((15, 8), candle_core::DType::F32, &Device::Cpu);
    if let (Ok(rope), Ok(x)) = (rope, x) {
        assert!(rope.apply(&x).is_err());
    } else {
        panic!("setup failed");
    }
}

/// Every `memory_attention.*` tensor of the checkpoint is read, with the default (1024) config
/// too (64x64 query grid).
#[test]
fn memory_attention_reads_all_its_weights() -> Result<()> {
    let dev = Device::Cpu;
    let weights = Weights::load(fixtures().join("model/model.safetensors"), &dev)?;
    let cfg = edgetam_tracker::EdgeTamConfig::from_file(fixtures().join("model/config.json"))?;
    assert_eq!(cfg.memory_attention_rope_feat_sizes, [64, 64]);
    MemoryAttention::new(&cfg, weights.var_builder(&dev).pp("memory_attention"))?;
    let mut others: Vec<String> = weights
        .tensors()
        .keys()
        .filter(|k| !k.starts_with("memory_attention."))
        .map(|k| match k.split_once('.') {
            Some((top, _)) => format!("{top}."),
            None => k.clone(),
        })
        .collect();
    others.sort();
    others.dedup();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    Ok(weights.check_all_used_except(&others)?)
}

/// A config whose query grid does not match its image size is rejected when building.
#[test]
fn memory_attention_rejects_mismatched_grid() -> Result<()> {
    let (fx, weights) = load()?;
    let mut cfg = fx.config.clone();
    cfg.memory_attention_rope_feat_sizes = [64, 64];
    let dev = Device::Cpu;
    let built = MemoryAttention::new(&cfg, weights.var_builder(&dev).pp("memory_attention"));
    assert!(matches!(built, Err(edgetam_tracker::Error::Config { .. })));
    Ok(())
}
