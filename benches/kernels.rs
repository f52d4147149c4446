//! Criterion benches of the hot CPU kernels, each beside the plain candle path it replaces, so
//! one run gives the ratio on the same machine state:
//!
//! ```sh
//! cargo bench --bench kernels                  # all
//! cargo bench --bench kernels -- depthwise     # one group
//! cargo bench --bench kernels -- gemm_packed   # our packed f32 product vs the gemm crate
//! cargo bench --bench kernels -- gelu          # our GELU (one thread, threaded op) vs candle's
//! RAYON_NUM_THREADS=2 cargo bench --bench kernels
//! ```
//!
//! The image-encoder benches run the whole RepViT + FPN on random weights at 256 and 1024.

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use edgetam::tracker::bench_support as bs;
use edgetam::tracker::internals::scaled_dot_product_bf16;
use edgetam::tracker::internals::split_key_attention;
use edgetam::tracker::internals::Depthwise;
use edgetam::tracker::internals::{scaled_dot_product, scaled_dot_product_unfused};
use edgetam::tracker::{EdgeTam, EdgeTamConfig};

fn randn(shape: &[usize]) -> Tensor {
    match Tensor::randn(0f32, 1.0, shape, &Device::Cpu) {
        Ok(t) => t,
        Err(e) => panic!("randn {shape:?}: {e}"),
    }
}

fn ok<T>(r: candle_core::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

fn tracker_ok<T>(r: edgetam::tracker::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// RepViT's depthwise 3x3 token mixers at their 1024-input sizes: ours vs candle's grouped
/// `conv2d` (one convolution per channel).
fn depthwise(c: &mut Criterion) {
    let mut g = c.benchmark_group("depthwise3x3");
    g.sample_size(10);
    for (channels, side) in [(48usize, 256usize), (96, 128), (192, 64), (384, 32)] {
        let w = randn(&[channels, 1, 3, 3]);
        let b = randn(&[channels]);
        let x = randn(&[1, channels, side, side]);
        let ours = ok(Depthwise::new(w.clone(), b.clone(), 1, 1));
        let bias = ok(b.reshape((1, channels, 1, 1)));
        let id = format!("{channels}x{side}x{side}");
        g.bench_with_input(BenchmarkId::new("ours", &id), &x, |bch, x| {
            bch.iter(|| ok(ours.forward(x)))
        });
        g.bench_with_input(BenchmarkId::new("candle_grouped", &id), &x, |bch, x| {
            bch.iter(|| {
                ok(x.conv2d(&w, 1, 1, 1, channels)
                    .and_then(|y| y.broadcast_add(&bias)))
            })
        });
    }
    g.finish();
}

/// Memory attention's shapes at 1024: self-attention over the 64x64 tokens and
/// cross-attention to 7 memories (7 x 512 tokens) + 16 pointers (x 4 tokens); one head of 256
/// (the cross-attention also as the folded split-key pass the tracker runs).
fn attention(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention");
    g.sample_size(10);
    for (name, lq, lk) in [
        ("self_4096x4096", 4096usize, 4096usize),
        ("cross_4096x3648", 4096, 3648),
    ] {
        let q = randn(&[1, 1, lq, 256]);
        let k = randn(&[1, 1, lk, 256]);
        let v = randn(&[1, 1, lk, 256]);
        let scale = 1.0 / 16.0;
        g.bench_function(BenchmarkId::new("fused", name), |b| {
            b.iter(|| ok(scaled_dot_product(&q, &k, &v, scale)))
        });
        g.bench_function(BenchmarkId::new("bf16", name), |b| {
            b.iter(|| ok(scaled_dot_product_bf16(&q, &k, &v, scale)))
        });
        g.bench_function(BenchmarkId::new("unfused", name), |b| {
            b.iter(|| ok(scaled_dot_product_unfused(&q, &k, &v, scale)))
        });
    }
    // The cross-attention as the tracker runs it (`split_key_attention`): 7 x 256 rotated keys
    // at 256 wide, 7 x 256 + 64 unrotated ones at 65 wide, values in the memory's 64 channels.
    let (lr, lu) = (7 * 256, 7 * 256 + 64);
    let q = randn(&[1, 4096, 256]);
    let q_low = randn(&[1, 4096, 65]);
    let k_rot = randn(&[1, lr, 256]);
    let k_low = randn(&[1, lu, 65]);
    let v = randn(&[1, lr + lu, 64]);
    g.bench_function(BenchmarkId::new("split_keys", "cross_4096x3648"), |b| {
        b.iter(|| {
            ok(split_key_attention(
                &q,
                &q_low,
                &k_rot,
                &k_low,
                &v,
                1.0 / 16.0,
            ))
        })
    });
    g.finish();
}

/// candle's (gemm crate) fp32 matrix product at 2048^3: our matmul peak, to set the kernels'
/// GFLOP/s against (2 * 2048^3 = 17.2 GFLOP per iteration).
fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul");
    g.sample_size(10);
    let a = randn(&[2048, 2048]);
    let b = randn(&[2048, 2048]);
    g.bench_function("f32_2048", |bch| bch.iter(|| ok(a.matmul(&b))));
    g.finish();
}

/// The whole image encoder (RepViT-M1 + FPN + high-res convs) on random weights.
fn image_encoder(c: &mut Criterion) {
    // As the CLI runs it: freed activations stay in the heap (no page faults per call).
    edgetam::keep_freed_memory();
    let mut g = c.benchmark_group("image_encoder");
    g.sample_size(10);
    for size in [256usize, 1024] {
        let model = ok(EdgeTamConfig::with_image_size(size)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
            .and_then(|cfg| {
                EdgeTam::random(cfg, 0, &Device::Cpu)
                    .map_err(|e| candle_core::Error::Msg(e.to_string()))
            }));
        let pixels = ok(randn(&[1, 3, size, size]).to_dtype(DType::F32));
        g.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter(|| match model.encode_pixels(&pixels, (size, size)) {
                Ok(e) => e,
                Err(e) => panic!("{e}"),
            })
        });
    }
    g.finish();
}

/// The register-tile f32 product (right-hand side packed once) vs the `gemm` crate (what
/// candle's matmul runs; it packs both operands per call), one thread, at the `m x n x k`
/// products inside the attention tiles and RepViT's 1x1 convs.
fn gemm_packed(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm_packed");
    g.sample_size(10);
    for (m, n, k) in [
        (64usize, 256usize, 256usize),
        (96, 128, 48),
        (48, 128, 96),
        (384, 128, 192),
        (192, 128, 384),
        (768, 128, 384),
    ] {
        let id = format!("{m}x{n}x{k}");
        for (name, gemm_crate) in [("ours", false), ("gemm_crate", true)] {
            let call = tracker_ok(bs::gemm(m, n, k, gemm_crate));
            g.bench_function(BenchmarkId::new(name, &id), |b| {
                b.iter(|| tracker_ok(call()))
            });
        }
    }
    g.finish();
}

/// GELU (erf form): our vector kernel on one thread, our multi-threaded op, and candle's
/// `gelu_erf` (scalar `erff`, one thread), on 2^16 values and on RepViT's first hidden map at
/// 1024 (96 x 256 x 256).
fn gelu(c: &mut Criterion) {
    let mut g = c.benchmark_group("gelu");
    g.sample_size(10);
    for len in [1usize << 16, 96 * 256 * 256] {
        for (name, one_thread) in [("ours_one_thread", true), ("ours_op", false)] {
            let call = tracker_ok(bs::gelu(len, one_thread));
            g.bench_function(BenchmarkId::new(name, len), |b| {
                b.iter(|| tracker_ok(call()))
            });
        }
        let x = randn(&[len]);
        g.bench_function(BenchmarkId::new("candle_gelu_erf", len), |b| {
            b.iter(|| ok(x.gelu_erf()))
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    matmul,
    depthwise,
    attention,
    image_encoder,
    gemm_packed,
    gelu
);
criterion_main!(benches);
