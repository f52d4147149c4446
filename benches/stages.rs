//! Criterion benches of the model's stages and of the kernels' shapes inside them, on random
//! weights (what the profiling tests inside the library used to time, `-- --ignored`):
//!
//! ```sh
//! cargo bench --bench stages                        # all, at input side 1024
//! cargo bench --bench stages -- memory_encoder      # one group
//! EDGETAM_PROFILE_SIZE=512 cargo bench --bench stages
//! RAYON_NUM_THREADS=2 cargo bench --bench stages
//! # a quick look: criterion's options after the group
//! EDGETAM_PROFILE_SIZE=256 cargo bench --bench stages -- resize --warm-up-time 0.2 --measurement-time 0.5
//! ```
//!
//! Groups (the shapes derive from the input side `S`; `t = (S/16)^2` frame tokens):
//! - stages: `repvit`, `image_encoder` (backbone, whole neck, the neck's stride-16 level,
//!   `conv_s0` + `conv_s1`, whole), `decoder`, `memory_encoder`, `perceiver` (one object),
//!   `memory_attention`;
//! - the convolutions inside them: `depthwise`, `dense`, `channel_mixer`, `pointwise` (256 ->
//!   256 at `S/16`), `upscales` (the decoder's two fused upscales);
//! - attention: `attention_shapes` (fused vs unfused at the six shapes of a tracked frame),
//!   `attention_bf16` (bf16 vs exact self-attention), `split_key` (memory cross-attention, bf16
//!   vs exact), `decoder_attention` (folded vs unfolded);
//! - the rest: `resize` (CPU op vs tensor path), `layer_norm` (kernel vs tensor ops), `mlp`
//!   (memory attention's layers, exact vs bf16, and its fused bf16 MLP).
//!
//! bf16 and split (AMX) variants run where this CPU has them (they are skipped elsewhere).
//! Kernels at fixed shapes beside the paths they replace are `benches/kernels.rs`; the
//! per-frame view (every stage of a real stream, FPS) is `edgetam bench`.

use candle_core::Device;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use edgetam::tracker::bench_support::{self as bs, AttentionKernel, Call, Products};
use edgetam::tracker::Precision;

/// The input side the shapes derive from (`EDGETAM_PROFILE_SIZE`, default 1024).
fn size() -> usize {
    std::env::var("EDGETAM_PROFILE_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

fn ok<T>(r: edgetam::tracker::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// A group as every bench here wants it: the allocator tuned as the CLI runs it (freed memory
/// kept for reuse) and ten samples (one call takes milliseconds to seconds). A group finishes
/// when it is dropped.
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    edgetam::keep_freed_memory();
    let mut g = c.benchmark_group(name);
    g.sample_size(10);
    g
}

fn time(g: &mut BenchmarkGroup<'_, WallTime>, id: BenchmarkId, call: &Call<'_>) {
    g.bench_function(id, |b| b.iter(|| ok(call())));
}

fn bf16_here() -> bool {
    Precision::Bf16.available_on(&Device::Cpu).is_ok()
}

/// The memory fuser's 7x7 depthwise (256 channels at 1/16) and RepViT's stride-1 3x3 token
/// mixers (memory-bound).
fn depthwise(c: &mut Criterion) {
    let s = size();
    let mut g = group(c, "depthwise");
    for (ch, side, k) in [
        (256usize, s / 16, 7usize),
        (48, s / 4, 3),
        (96, s / 8, 3),
        (192, s / 16, 3),
        (384, s / 32, 3),
    ] {
        let call = ok(bs::depthwise(ch, side, k));
        time(
            &mut g,
            BenchmarkId::new(format!("{k}x{k}"), format!("{ch}x{side}x{side}")),
            &call,
        );
    }
}

/// The stride-2 dense convs: the stem (with GELU) and the mask downsampler.
fn dense(c: &mut Criterion) {
    let s = size();
    let mut g = group(c, "dense");
    for (ch, o, side, gelu) in [
        (3usize, 24usize, s, true),
        (24, 48, s / 2, false),
        (1, 4, s, false),
        (4, 16, s / 2, false),
        (16, 64, s / 4, false),
        (64, 256, s / 8, false),
    ] {
        let call = ok(bs::dense(ch, o, side, gelu));
        time(&mut g, BenchmarkId::new(format!("{ch}to{o}"), side), &call);
    }
    // The memory encoder's mask downsampler as it runs: each conv with its LayerNorm and GELU.
    for (ch, o, side) in [
        (1usize, 4usize, s),
        (4, 16, s / 2),
        (16, 64, s / 4),
        (64, 256, s / 8),
    ] {
        let call = ok(bs::dense_norm_gelu(ch, o, side));
        time(
            &mut g,
            BenchmarkId::new(format!("{ch}to{o} norm gelu"), side),
            &call,
        );
    }
}

/// The fused channel mixer at RepViT-M1's four stage shapes (hidden 2c) and the memory fuser's
/// (hidden 4c), in f32, bf16 and split products.
fn channel_mixer(c: &mut Criterion) {
    let s = size();
    let mut g = group(c, "channel_mixer");
    let shapes = [48usize, 96, 192, 384]
        .into_iter()
        .map(|ch| (ch, s * 12 / ch, 2 * ch))
        .chain([(256, s / 16, 1024)]);
    for (ch, side, hid) in shapes {
        for products in [Products::F32, Products::Bf16, Products::Split] {
            if let Some(call) = ok(bs::channel_mixer(ch, hid, side, products)) {
                let id = BenchmarkId::new(format!("{products:?}"), format!("{ch}x{side}x{side}"));
                time(&mut g, id, &call);
            }
        }
    }
}

/// The RepViT-M1 backbone: exact f32, and with bf16 / split products from stage 2 on; each
/// with the blocks' token mixers in their own pass (the model's choice) and inside the channel
/// mixer's pass (`fused token mixer`).
fn repvit(c: &mut Criterion) {
    let mut g = group(c, "repvit");
    for products in [Products::F32, Products::Bf16, Products::Split] {
        if products != Products::F32 && !bf16_here() {
            continue;
        }
        for fused in [false, true] {
            let call = ok(bs::repvit(size(), products, 2, fused));
            let name = if fused {
                format!("{products:?} fused token mixer")
            } else {
                format!("{products:?}")
            };
            time(&mut g, BenchmarkId::new(name, size()), &call);
        }
    }
}

/// Precisions this CPU runs.
fn precisions() -> Vec<Precision> {
    let mut p = vec![Precision::F32];
    if bf16_here() {
        p.push(Precision::Bf16);
    }
    p
}

/// One mask decoder call of a tracked frame (one object, no prompt).
fn decoder(c: &mut Criterion) {
    let mut g = group(c, "decoder");
    let model = ok(bs::random_model(size(), Precision::F32));
    let call = ok(bs::decoder(&model));
    time(&mut g, BenchmarkId::new("tracked_frame", size()), &call);
}

/// The memory encoder's parts and the spatial perceiver.
fn memory_encoder(c: &mut Criterion) {
    let mut g = group(c, "memory_encoder");
    for precision in precisions() {
        let model = ok(bs::random_model(size(), precision));
        for (name, call) in ok(bs::memory_encoder(&model)) {
            time(&mut g, BenchmarkId::new(name, precision), &call);
        }
    }
}

/// One object's memory attention (7 memories, 16 pointers), as a tracked frame runs it.
fn memory_attention(c: &mut Criterion) {
    let mut g = group(c, "memory_attention");
    for bf16 in [false, true] {
        if bf16 && !bf16_here() {
            continue;
        }
        let call = ok(bs::memory_attention(size(), bf16));
        let name = if bf16 { "bf16" } else { "f32" };
        time(&mut g, BenchmarkId::new(name, size()), &call);
    }
}

/// The image encoder's parts (backbone, whole neck, the neck's stride-16 level alone, the
/// high-resolution convs, the whole encoder) in each precision this CPU runs.
fn image_encoder(c: &mut Criterion) {
    let mut g = group(c, "image_encoder");
    for precision in precisions() {
        let model = ok(bs::random_model(size(), precision));
        for (name, call) in ok(bs::image_encoder(&model)) {
            time(&mut g, BenchmarkId::new(name, precision), &call);
        }
    }
}

/// One object's spatial perceiver call on its `S/16` memory (a standalone target for `perf
/// record`; the `memory_encoder` group also times it after the projection).
fn perceiver(c: &mut Criterion) {
    let mut g = group(c, "perceiver");
    let call = ok(bs::perceiver(size()));
    time(&mut g, BenchmarkId::new("one_object", size()), &call);
}

/// The memory encoder's 256 -> 256 1x1 convs at `S/16` in f32, bf16 and split products.
fn pointwise(c: &mut Criterion) {
    let e = size() / 16;
    let mut g = group(c, "pointwise");
    for products in [Products::F32, Products::Bf16, Products::Split] {
        if let Some(call) = ok(bs::pointwise(256, 256, e, products)) {
            let id = BenchmarkId::new(format!("{products:?}"), format!("256to256x{e}x{e}"));
            time(&mut g, id, &call);
        }
    }
}

/// The mask decoder's cross-attentions (7 tokens to the image tokens and back): folded as the
/// tracker runs them vs every projection applied.
fn decoder_attention(c: &mut Criterion) {
    let mut g = group(c, "decoder_attention");
    for folded in [true, false] {
        let name = if folded { "folded" } else { "unfolded" };
        for (direction, call) in ok(bs::decoder_attention(size(), folded)) {
            time(&mut g, BenchmarkId::new(name, direction), &call);
        }
    }
}

/// The mask decoder's two fused upscales (`S/16` tokens -> `S/8` with the norm -> `S/4`).
fn upscales(c: &mut Criterion) {
    let mut g = group(c, "upscales");
    let call = ok(bs::upscales(size()));
    time(&mut g, BenchmarkId::new("fused_both", size()), &call);
}

/// The attention shapes of a tracked frame (`t = (S/16)^2` frame tokens), fused vs unfused:
/// memory self-attention, memory cross-attention (7 memories + 16 pointers), the perceiver's
/// 256 latents over the memory and its windows, and the decoder's 8-head attentions.
fn attention_shapes(c: &mut Criterion) {
    let e = size() / 16;
    let t = e * e;
    // Tokens of one perceiver window (the memory split into 16 x 16 windows).
    let window = ((e / 16) * (e / 16)).max(1);
    let shapes = [
        (format!("self_{t}x{t}"), (1, 1, t, t, 256)),
        (format!("cross_{t}x3648"), (1, 1, t, 3648, 256)),
        (format!("perceiver_256x{t}_d64"), (1, 1, 256, t, 64)),
        (
            format!("decoder_image_to_token_{t}x8_8heads"),
            (1, 8, t, 8, 16),
        ),
        (
            format!("decoder_token_to_image_8x{t}_8heads"),
            (1, 8, 8, t, 16),
        ),
        (
            format!("perceiver_windows_256x1x{window}_d64"),
            (256, 1, 1, window, 64),
        ),
    ];
    let mut g = group(c, "attention_shapes");
    for (name, shape) in &shapes {
        for kernel in [AttentionKernel::Fused, AttentionKernel::Unfused] {
            if let Some(call) = ok(bs::attention(*shape, kernel)) {
                time(&mut g, BenchmarkId::new(format!("{kernel:?}"), name), &call);
            }
        }
    }
}

/// Memory self-attention (one head of 256 over the `(S/16)^2` frame tokens): bf16 products vs
/// the exact fused kernel (bf16 only where this CPU has AVX512-BF16).
fn attention_bf16(c: &mut Criterion) {
    let t = (size() / 16) * (size() / 16);
    let mut g = group(c, "attention_bf16");
    for kernel in [AttentionKernel::Bf16, AttentionKernel::Fused] {
        if let Some(call) = ok(bs::attention((1, 1, t, t, 256), kernel)) {
            time(
                &mut g,
                BenchmarkId::new(format!("{kernel:?}"), format!("self_{t}x{t}")),
                &call,
            );
        }
    }
}

/// Memory cross-attention's folded split-key pass (7 memories, 16 pointers) for the `(S/16)^2`
/// frame tokens: bf16 products vs exact f32.
fn split_key(c: &mut Criterion) {
    let t = (size() / 16) * (size() / 16);
    let mut g = group(c, "split_key");
    for bf16 in [true, false] {
        if let Some(call) = ok(bs::split_key(t, bf16)) {
            let name = if bf16 { "bf16" } else { "f32" };
            time(
                &mut g,
                BenchmarkId::new(name, format!("{t}_queries")),
                &call,
            );
        }
    }
}

/// The two resizes a tracked frame does per object (the `S/4` low-resolution mask to the model
/// side and to a 640x360 video): the CPU op vs the tensor path.
fn resize(c: &mut Criterion) {
    let low = size() / 4;
    let mut g = group(c, "resize");
    for (h, w) in [(360, 640), (size(), size())] {
        for tensor_path in [false, true] {
            let call = ok(bs::resize(low, (h, w), tensor_path));
            let name = if tensor_path { "tensor_path" } else { "op" };
            time(
                &mut g,
                BenchmarkId::new(name, format!("{low}to{h}x{w}")),
                &call,
            );
        }
    }
}

/// The token LayerNorm (memory attention's `(S/16)^2 x 256`) and the channels-first one (the
/// mask downsampler's first map, 4 channels at `S/2`): the CPU kernel vs the tensor ops.
fn layer_norm(c: &mut Criterion) {
    let (t, h) = ((size() / 16) * (size() / 16), size() / 2);
    let mut g = group(c, "layer_norm");
    let shapes = [
        (format!("tokens_{t}x256"), vec![1, t, 256], 2, 1e-5),
        (
            format!("channels_first_4x{h}x{h}"),
            vec![1, 4, h, h],
            1,
            1e-6,
        ),
    ];
    for (name, shape, dim, eps) in &shapes {
        for ops in [false, true] {
            let call = ok(bs::layer_norm_over(shape, *dim, *eps, ops));
            let id = BenchmarkId::new(if ops { "tensor_ops" } else { "kernel" }, name);
            time(&mut g, id, &call);
        }
    }
}

/// Memory attention's MLP layers on the `(S/16)^2` frame tokens, exact vs bf16 products, and
/// its fused bf16 MLP (256 -> 2048, ReLU, -> 256).
fn mlp(c: &mut Criterion) {
    let t = (size() / 16) * (size() / 16);
    let mut g = group(c, "mlp");
    if let Some(call) = ok(bs::fused_relu_mlp_bf16(t, 256, 2048)) {
        time(
            &mut g,
            BenchmarkId::new("fused_bf16", format!("{t}x256to2048to256")),
            &call,
        );
    }
    for (inp, out) in [(256usize, 2048usize), (2048, 256), (256, 256)] {
        for bf16 in [false, true] {
            if let Some(call) = ok(bs::linear(t, inp, out, bf16)) {
                let name = if bf16 { "bf16" } else { "f32" };
                time(
                    &mut g,
                    BenchmarkId::new(name, format!("{t}x{inp}to{out}")),
                    &call,
                );
            }
        }
    }
}

criterion_group!(
    benches,
    depthwise,
    dense,
    channel_mixer,
    repvit,
    decoder,
    memory_encoder,
    memory_attention,
    image_encoder,
    perceiver,
    pointwise,
    decoder_attention,
    upscales,
    attention_shapes,
    attention_bf16,
    split_key,
    resize,
    layer_norm,
    mlp
);
criterion_main!(benches);
