//! What the facade's per-stage and per-kernel benchmarks (`benches/stages.rs`,
//! `benches/kernels.rs`, run by `cargo bench`) need from inside this crate, and nothing more: each function builds one stage or
//! kernel on random weights at the shapes a bench asks for and returns the call to time. The
//! timing loops, the shapes and the reports live in `benches/`; the kernels and stage types
//! stay crate-private. Not a supported API (hidden from the docs; it may change at any time).

use std::cell::RefCell;
use std::rc::Rc;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::Linear;

use crate::error::Result;
use crate::kernels::attention::bf16::scaled_dot_product_bf16;
use crate::kernels::attention::split_key::{split_key_attention, split_key_attention_bf16};
use crate::kernels::attention::{scaled_dot_product, scaled_dot_product_unfused};
use crate::kernels::conv::depthwise::Depthwise;
use crate::kernels::conv::pointwise_bf16::Rounding;
use crate::kernels::conv::upscale::InputLayout;
use crate::kernels::gemm::{gemm_packed, PackedB};
use crate::kernels::linear_bf16::{FusedReluMlpBf16, SwitchLinear};
use crate::kernels::norm::{layer_norm, layer_norm_ops};
use crate::kernels::resize::{bilinear, bilinear_ops};
use crate::model::conv::{Dense, Pointwise};
use crate::model::decoder::attention::Attention;
use crate::model::decoder::upscale::Upscale2x;
use crate::model::decoder::DecoderInputs;
use crate::model::edgetam::EdgeTam;
use crate::model::image_encoder::repvit::RepVit;
use crate::model::layers::LayerNorm2d;
use crate::model::memory_attention::MemoryAttention;
use crate::model::perceiver::SpatialPerceiver;
use crate::model::position_encoding::sine_position_embedding;
use crate::model::weights::random_var_builder;
use crate::{EdgeTamConfig, Precision};

/// One call to time: it runs the stage or kernel once on the inputs it was built with.
pub type Call<'a> = Box<dyn Fn() -> Result<Tensor> + 'a>;

/// How a bf16-capable product rounds its operands (`None`: exact f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Products {
    F32,
    /// bf16 operands, f32 accumulation.
    Bf16,
    /// bf16 head + tail of each f32 operand (f32-accurate, on AMX).
    Split,
}

impl Products {
    fn rounding(self) -> Option<Rounding> {
        match self {
            Self::F32 => None,
            Self::Bf16 => Some(Rounding::Bf16),
            Self::Split => Some(Rounding::Split),
        }
    }
}

fn randn(shape: &[usize], std: f32) -> Result<Tensor> {
    Ok(Tensor::randn(0f32, std, shape, &Device::Cpu)?)
}

/// A `k x k` depthwise convolution (stride 1, same padding) of `channels` channels on a
/// `side x side` input: the memory fuser's 7x7 and RepViT's 3x3 token mixers.
pub fn depthwise(channels: usize, side: usize, k: usize) -> Result<Call<'static>> {
    let x = randn(&[1, channels, side, side], 1.0)?;
    let dw = Depthwise::new(
        randn(&[channels, 1, k, k], 1.0)?,
        randn(&[channels], 1.0)?,
        1,
        k / 2,
    )?;
    Ok(Box::new(move || Ok(dw.forward(&x)?)))
}

/// A stride-2 3x3 dense convolution `c -> o` on a `side x side` input (the stem with GELU,
/// the mask downsampler without).
pub fn dense(c: usize, o: usize, side: usize, gelu: bool) -> Result<Call<'static>> {
    let x = randn(&[1, c, side, side], 1.0)?;
    let d = Dense::new(&randn(&[o, c, 3, 3], 0.1)?, &randn(&[o], 1.0)?, 2, 1)?;
    Ok(Box::new(move || {
        Ok(if gelu {
            d.forward_gelu(&x)?
        } else {
            d.forward(&x)?
        })
    }))
}

/// [`dense`] with the memory encoder's mask-downsampler epilogue (channels-first LayerNorm,
/// then GELU) fused into its pass.
pub fn dense_norm_gelu(c: usize, o: usize, side: usize) -> Result<Call<'static>> {
    let x = randn(&[1, c, side, side], 1.0)?;
    let d = Dense::new(&randn(&[o, c, 3, 3], 0.1)?, &randn(&[o], 1.0)?, 2, 1)?;
    let norm = crate::kernels::norm::HostNorm {
        weight: vec![1.0; o],
        bias: vec![0.0; o],
        eps: 1e-6,
    };
    Ok(Box::new(move || {
        d.forward_norm_gelu(&x, &norm)?.ok_or_else(|| {
            crate::error::Error::Tensor(candle_core::Error::Msg(
                "the fused dense conv does not run here".into(),
            ))
        })
    }))
}

/// The fused channel mixer (1x1 conv `c -> hid`, GELU, 1x1 conv `hid -> c`, residual) on a
/// `side x side` input; `None` where `products` cannot run on this CPU.
pub fn channel_mixer(
    c: usize,
    hid: usize,
    side: usize,
    products: Products,
) -> Result<Option<Call<'static>>> {
    let conv = |o: usize, i: usize| -> Result<Pointwise> {
        Ok(Pointwise::new(
            &randn(&[o, i, 1, 1], 0.2)?,
            &randn(&[o], 0.5)?,
        )?)
    };
    let (mut conv1, mut conv2) = (conv(hid, c)?, conv(c, hid)?);
    let r = products.rounding();
    if !(conv1.set_rounding(r) && conv2.set_rounding(r)) {
        return Ok(None);
    }
    let x = randn(&[1, c, side, side], 1.0)?;
    Ok(Some(Box::new(move || {
        Ok(conv1
            .channel_mixer(&conv2, &x)?
            .unwrap_or_else(|| x.clone()))
    })))
}

/// The RepViT-M1 backbone on random weights, its products rounded as `products` from stage
/// `first` on, each block's token mixer inside its channel mixer's pass or not (`fused`), on a
/// random `size x size` image: the last stage's features.
pub fn repvit(size: usize, products: Products, first: usize, fused: bool) -> Result<Call<'static>> {
    let mut net = RepVit::new(random_var_builder(0, &Device::Cpu))?;
    net.set_fused_token_mixer(fused);
    if let Some(r) = products.rounding() {
        net.set_rounding_from(Some(r), first);
    }
    let x = randn(&[1, 3, size, size], 1.0)?;
    Ok(Box::new(move || {
        let mut out = net.forward(&x)?;
        Ok(out.pop().unwrap_or_else(|| x.clone()))
    }))
}

/// A model on random weights at input side `size` (`precision`: the bf16 mode or exact f32).
pub fn random_model(size: usize, precision: Precision) -> Result<EdgeTam> {
    let mut model = EdgeTam::random(EdgeTamConfig::with_image_size(size)?, 0, &Device::Cpu)?;
    model.try_set_precision(precision)?;
    Ok(model)
}

/// One mask decoder call of a tracked frame (one object, no prompt) on random inputs.
pub fn decoder(model: &EdgeTam) -> Result<Call<'_>> {
    let e = model.config().image_size / 16;
    let (embed, pe, dense) = (
        randn(&[1, 256, e, e], 1.0)?,
        randn(&[1, 256, e, e], 1.0)?,
        randn(&[1, 256, e, e], 1.0)?,
    );
    let sparse = randn(&[1, 1, 2, 256], 1.0)?;
    let (s0, s1) = (
        randn(&[1, 32, 4 * e, 4 * e], 1.0)?,
        randn(&[1, 64, 2 * e, 2 * e], 1.0)?,
    );
    let dec = model.mask_decoder();
    Ok(Box::new(move || {
        let out = dec.forward(
            &DecoderInputs {
                image_embed: &embed,
                image_pe: &pe,
                sparse: &sparse,
                dense: &dense,
                feat_s0: &s0,
                feat_s1: &s1,
            },
            false,
        )?;
        Ok(out.masks)
    }))
}

/// The memory encoder's parts on a random frame and mask: the mask downsampler, the fuser,
/// the projection, fuser + projection as the tracker runs them (last block folded), and the
/// spatial perceiver on the projected memory.
pub fn memory_encoder(model: &EdgeTam) -> Result<Vec<(&'static str, Call<'_>)>> {
    let enc = &model.video.memory_encoder;
    let s = model.config().image_size;
    let e = s / 16;
    let pix = randn(&[1, 256, e, e], 1.0)?;
    let mask = randn(&[1, 1, s, s], 1.0)?;
    let mf = enc.downsample_mask(&mask)?;
    let fused = enc.fuse(&pix, &mf)?;
    let (feats, pos) = enc.project(&fused)?;
    let (pix2, mf2) = (pix.clone(), mf.clone());
    Ok(vec![
        (
            "downsample_mask",
            Box::new(move || enc.downsample_mask(&mask)),
        ),
        ("fuse", Box::new(move || enc.fuse(&pix, &mf))),
        ("project", Box::new(move || Ok(enc.project(&fused)?.0))),
        (
            "fuse_and_project",
            Box::new(move || enc.fuse_and_project(&pix2, &mf2)),
        ),
        (
            "perceiver",
            Box::new(move || Ok(model.video.spatial_perceiver.forward(&feats, &pos)?.0)),
        ),
    ])
}

/// One object's memory attention at input side `size` (7 memories, 16 pointers) on random
/// weights, as a tracked frame runs it (folded cross-attention); bf16 products with `bf16`.
pub fn memory_attention(size: usize, bf16: bool) -> Result<Call<'static>> {
    let cfg = EdgeTamConfig::with_image_size(size)?;
    let vb = random_var_builder(7, &Device::Cpu);
    let mut att = MemoryAttention::new(&cfg, vb.pp("memory_attention"))?;
    att.set_bf16_products(bf16)?;
    let [fh, fw] = cfg.memory_attention_rope_feat_sizes;
    let (hw, c) = (fh * fw, cfg.memory_attention_hidden_size);
    let memory_dim = cfg.memory_encoder_output_channels;
    let (n_mem, n_ptr) = (7, 16);
    let m = n_mem * 512 + n_ptr * 4;
    let x = randn(&[1, hw, c], 1.0)?;
    let pos = randn(&[1, hw, c], 1.0)?;
    let memory = randn(&[1, m, memory_dim], 1.0)?;
    let memory_pos = randn(&[1, m, memory_dim], 1.0)?;
    Ok(Box::new(move || {
        att.forward(&x, &pos, &memory, &memory_pos, n_ptr * 4, n_mem)
    }))
}

/// The last of `outputs` (a backbone's or neck's deepest level).
fn last(mut outputs: Vec<Tensor>) -> Result<Tensor> {
    Ok(outputs
        .pop()
        .ok_or_else(|| candle_core::Error::Msg("the stage produced no outputs".into()))?)
}

/// The image encoder's parts on a random frame: the backbone, the whole FPN neck (what the
/// checks run), the neck's stride-16 level alone (what the tracker runs), `conv_s0` +
/// `conv_s1` from the backbone stages, and the whole encoder.
pub fn image_encoder(model: &EdgeTam) -> Result<Vec<(&'static str, Call<'_>)>> {
    let enc = &model.image_encoder;
    let s = model.config().image_size;
    let x = randn(&[1, 3, s, s], 1.0)?;
    let stages = Rc::new(enc.backbone().forward(&x)?);
    let (x2, st2, st3) = (x.clone(), stages.clone(), stages.clone());
    Ok(vec![
        (
            "backbone",
            Box::new(move || last(enc.backbone().forward(&x)?)),
        ),
        (
            "neck",
            Box::new(move || last(enc.neck().forward(&stages)?.0)),
        ),
        (
            "neck_stride16_level",
            Box::new(move || Ok(enc.neck().embedding(&st2)?.0)),
        ),
        (
            "conv_s0_s1",
            Box::new(move || {
                let [s0, _] = enc.high_res(&st3)?;
                Ok(s0)
            }),
        ),
        ("whole", Box::new(move || Ok(enc.forward(&x2)?.level2))),
    ])
}

/// One object's spatial perceiver call at input side `size` (its memory `[1, 64, S/16, S/16]`
/// and sine position encoding) on random weights.
pub fn perceiver(size: usize) -> Result<Call<'static>> {
    let cfg = EdgeTamConfig::with_image_size(size)?;
    let p = SpatialPerceiver::new(&cfg, random_var_builder(5, &Device::Cpu))?;
    let (c, e) = (cfg.memory_encoder_output_channels, size / 16);
    let feats = randn(&[1, c, e, e], 1.0)?;
    let pos = sine_position_embedding(c, e, e, &Device::Cpu)?;
    Ok(Box::new(move || Ok(p.forward(&feats, &pos)?.0)))
}

/// A 1x1 convolution `c -> o` (with bias) on a `side x side` input, its products rounded as
/// `products`; `None` where they cannot run on this CPU.
pub fn pointwise(
    c: usize,
    o: usize,
    side: usize,
    products: Products,
) -> Result<Option<Call<'static>>> {
    let mut conv = Pointwise::new(&randn(&[o, c, 1, 1], 0.1)?, &randn(&[o], 1.0)?)?;
    if !conv.set_rounding(products.rounding()) {
        return Ok(None);
    }
    let x = randn(&[1, c, side, side], 1.0)?;
    Ok(Some(Box::new(move || Ok(conv.forward(&x)?))))
}

/// The mask decoder's cross-attentions (256 wide, 8 heads, internal width 128) on random
/// weights at input side `size`: the 7 tokens (2 sparse + 5 output) to the `(S/16)^2` image
/// tokens and back; with `folded`, as the tracker runs them (projections folded where the shape
/// pays), else every projection applied (the reference's order).
pub fn decoder_attention(size: usize, folded: bool) -> Result<Vec<(&'static str, Call<'static>)>> {
    let attn = Rc::new(Attention::new(
        256,
        8,
        2,
        random_var_builder(9, &Device::Cpu),
    )?);
    let e = size / 16;
    let tokens = randn(&[1, 7, 256], 1.0)?;
    let image = randn(&[1, e * e, 256], 1.0)?;
    let run = move |q: Tensor, kv: Tensor| -> Call<'static> {
        let attn = attn.clone();
        Box::new(move || {
            Ok(if folded {
                attn.forward(&q, &kv, &kv)?
            } else {
                attn.forward_unfolded(&q, &kv, &kv)?
            })
        })
    };
    Ok(vec![
        ("token_to_image", run(tokens.clone(), image.clone())),
        ("image_to_token", run(image, tokens)),
    ])
}

/// The mask decoder's two fused upscales at input side `size` on random weights: the
/// `(S/16)^2` image tokens to `S/8` with the residual, norm and GELU, then to `S/4` with the
/// residual and GELU.
pub fn upscales(size: usize) -> Result<Call<'static>> {
    let vb = random_var_builder(7, &Device::Cpu);
    let up1 = Upscale2x::new(256, 64, vb.pp("up1"))?;
    let up2 = Upscale2x::new(64, 32, vb.pp("up2"))?;
    let host = LayerNorm2d::new(64, 1e-6, vb.pp("norm"))?.host()?;
    let e = size / 16;
    let tokens = randn(&[1, e * e, 256], 1.0)?;
    let r1 = randn(&[1, 64, 2 * e, 2 * e], 1.0)?;
    let r2 = randn(&[1, 32, 4 * e, 4 * e], 1.0)?;
    let unfused = || candle_core::Error::Msg("no fused upscale path for this input".into());
    Ok(Box::new(move || {
        let a = up1
            .forward_fused(&tokens, InputLayout::Tokens, (e, e), &r1, Some(&host))?
            .ok_or_else(unfused)?;
        Ok(up2
            .forward_fused(&a, InputLayout::Channels, (2 * e, 2 * e), &r2, None)?
            .ok_or_else(unfused)?)
    }))
}

/// A scaled-dot-product attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// The fused (tiled, online softmax) f32 pass.
    Fused,
    /// Scores, softmax and output as separate tensor ops (the plain form).
    Unfused,
    /// The fused pass with bf16 products (AVX512-BF16).
    Bf16,
}

/// `softmax(q k^T / 16) v` for `q` `[batch, heads, lq, d]`, `k`, `v` `[batch, heads, lk, d]`
/// through `kernel`; `None` for bf16 where this CPU has no AVX512-BF16.
pub fn attention(
    (batch, heads, lq, lk, d): (usize, usize, usize, usize, usize),
    kernel: AttentionKernel,
) -> Result<Option<Call<'static>>> {
    if kernel == AttentionKernel::Bf16 && !crate::kernels::cpu::bf16() {
        return Ok(None);
    }
    let q = randn(&[batch, heads, lq, d], 1.0)?;
    let k = randn(&[batch, heads, lk, d], 1.0)?;
    let v = randn(&[batch, heads, lk, d], 1.0)?;
    let f = match kernel {
        AttentionKernel::Fused => scaled_dot_product,
        AttentionKernel::Unfused => scaled_dot_product_unfused,
        AttentionKernel::Bf16 => scaled_dot_product_bf16,
    };
    Ok(Some(Box::new(move || Ok(f(&q, &k, &v, 0.0625)?))))
}

/// Memory attention's folded cross-attention pass (`split_key_attention`) for `queries` frame
/// tokens against 7 memories and 16 pointers: 7 x 256 rotated keys 256 wide, 7 x 256 + 64
/// unrotated ones 65 wide, values 64 wide; with `bf16`, bf16 products (`None` where this CPU
/// has no AVX512-BF16).
pub fn split_key(queries: usize, bf16: bool) -> Result<Option<Call<'static>>> {
    if bf16 && !crate::kernels::cpu::bf16() {
        return Ok(None);
    }
    let (lr, lu, d, e, dv) = (7 * 256, 7 * 256 + 64, 256, 65, 64);
    let (q, q_low) = (randn(&[1, queries, d], 1.0)?, randn(&[1, queries, e], 1.0)?);
    let (k_rot, k_low) = (randn(&[1, lr, d], 1.0)?, randn(&[1, lu, e], 1.0)?);
    let v = randn(&[1, lr + lu, dv], 1.0)?;
    let f = if bf16 {
        split_key_attention_bf16
    } else {
        split_key_attention
    };
    Ok(Some(Box::new(move || {
        Ok(f(&q, &q_low, &k_rot, &k_low, &v, 0.0625)?)
    })))
}

/// The bilinear resize (no antialias) of a random `side x side` plane to `height x width`:
/// the CPU op, or with `tensor_path` its tensor-op form (index selects, products, sums).
pub fn resize(
    side: usize,
    (height, width): (usize, usize),
    tensor_path: bool,
) -> Result<Call<'static>> {
    let x = randn(&[1, 1, side, side], 3.0)?;
    let f = if tensor_path { bilinear_ops } else { bilinear };
    Ok(Box::new(move || f(&x, height, width)))
}

/// LayerNorm of a random `shape` over `dim` (weight and bias ones): the CPU kernel, or with
/// `ops` the tensor-op form.
pub fn layer_norm_over(shape: &[usize], dim: usize, eps: f64, ops: bool) -> Result<Call<'static>> {
    let c = shape.get(dim).copied().unwrap_or(1);
    let x = randn(shape, 1.0)?;
    let ones = Tensor::ones(c, DType::F32, &Device::Cpu)?;
    let f = if ops { layer_norm_ops } else { layer_norm };
    Ok(Box::new(move || Ok(f(&x, &ones, &ones, dim, eps)?)))
}

/// A linear layer `inp -> out` (with bias) on `[1, tokens, inp]` random inputs, exact f32 or
/// with `bf16` products (`None` where they do not apply on this CPU).
pub fn linear(tokens: usize, inp: usize, out: usize, bf16: bool) -> Result<Option<Call<'static>>> {
    let mut layer = SwitchLinear::new(Linear::new(
        randn(&[out, inp], 0.05)?,
        Some(randn(&[out], 1.0)?),
    ));
    layer.set_bf16(bf16)?;
    if bf16 && layer.bf16().is_none() {
        return Ok(None);
    }
    let x = randn(&[1, tokens, inp], 1.0)?;
    Ok(Some(Box::new(move || Ok(layer.forward(&x)?))))
}

/// Memory attention's MLP (`inp -> hidden`, ReLU, `hidden -> inp`, no biases) on `[1, tokens,
/// inp]` random inputs as one fused pass with bf16 products; `None` where this CPU has no
/// AVX512-BF16.
pub fn fused_relu_mlp_bf16(
    tokens: usize,
    inp: usize,
    hidden: usize,
) -> Result<Option<Call<'static>>> {
    let layer = |i: usize, o: usize| -> Result<SwitchLinear> {
        let mut l = SwitchLinear::new(Linear::new(randn(&[o, i], 0.05)?, None));
        l.set_bf16(true)?;
        Ok(l)
    };
    let (up, down) = (layer(inp, hidden)?, layer(hidden, inp)?);
    if up.bf16().is_none() || down.bf16().is_none() {
        return Ok(None);
    }
    let x = randn(&[1, tokens, inp], 1.0)?;
    Ok(Some(Box::new(move || match (up.bf16(), down.bf16()) {
        (Some(up), Some(down)) => Ok(FusedReluMlpBf16 { up, down }.forward(&x)?),
        _ => Err(candle_core::Error::Msg("bf16 layers not packed".into()).into()),
    })))
}

/// The register-tile f32 product `C (+)= A B` (`m x k` times `k x n`, `B` packed once) on
/// random operands, one thread; with `gemm_crate`, the same product through the `gemm` crate
/// (what candle's matmul runs; it packs both operands on every call). The call returns a
/// placeholder tensor (the product stays in a host buffer).
pub fn gemm(m: usize, n: usize, k: usize, gemm_crate: bool) -> Result<Call<'static>> {
    let host = |len: usize| -> Result<Vec<f32>> { Ok(randn(&[len], 1.0)?.to_vec1::<f32>()?) };
    let (a, b) = (host(m * k)?, host(k * n)?);
    let packed = PackedB::from_rows(&b, k, n, n);
    let c = RefCell::new(vec![0f32; m * n]);
    let placeholder = Tensor::zeros(1, DType::F32, &Device::Cpu)?;
    Ok(Box::new(move || {
        let mut c = c.borrow_mut();
        if gemm_crate {
            // SAFETY: row-major `m x k`, `k x n` and `m x n` buffers of exactly these sizes
            // (strides `k`, `n`, `n`); `c` is a buffer of its own.
            unsafe {
                ::gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    true,
                    a.as_ptr(),
                    1,
                    k as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    1.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    ::gemm::Parallelism::None,
                )
            };
        } else {
            gemm_packed(m, &a, k, &packed, 0..k, 0..n, &mut c, n, true);
        }
        Ok(placeholder.clone())
    }))
}

/// GELU (erf form) of `len` random values: with `one_thread`, the vector kernel on one thread
/// over a copy of the input (what each of the op's tasks runs; the call returns a placeholder
/// tensor), else the multi-threaded op.
pub fn gelu(len: usize, one_thread: bool) -> Result<Call<'static>> {
    let x = randn(&[len], 1.0)?;
    if !one_thread {
        return Ok(Box::new(move || Ok(crate::kernels::gelu::gelu(&x)?)));
    }
    let src = x.to_vec1::<f32>()?;
    let work = RefCell::new(src.clone());
    Ok(Box::new(move || {
        let mut w = work.borrow_mut();
        w.copy_from_slice(&src);
        crate::kernels::gelu::gelu_slice(&mut w);
        Ok(x.clone())
    }))
}
