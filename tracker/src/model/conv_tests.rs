//! Tests of the convolution layers of `conv.rs` (1x1, dense, the channel mixer) on their fast
//! CPU paths (`kernels/conv/`) against the plain forms: here, above both, so that the kernels
//! never import the model.

/// From `kernels/conv/pointwise.rs`.
mod pointwise {
    use crate::kernels::conv::pointwise::*;
    use crate::model::conv::Pointwise;
    use candle_core::{Device, Tensor};

    /// The fused pass against the matrix-product reference (and GELU / residual).
    #[test]
    fn fused_matches_plain() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (n, c, o, h, w) in [(1, 48, 96, 9, 7), (2, 5, 3, 4, 4), (1, 7, 7, 1, 1)] {
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let r = Tensor::randn(0f32, 1.0, (n, o, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 1.0, (o, c, 1, 1), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let pw = Pointwise::new(&wt, &b)?;
            let plain = pointwise_reference(&x, &wt.reshape((o, c))?, &b.reshape((o, 1))?)?;
            let pairs = [
                (pw.forward(&x)?, plain.clone()),
                (pw.forward_gelu(&x)?, plain.gelu_erf()?),
                (pw.forward_add(&x, &r)?, (&r + &plain)?),
            ];
            for (i, (ours, theirs)) in pairs.iter().enumerate() {
                assert_eq!(ours.dims(), theirs.dims());
                let d = (ours - theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert!(d < 1e-4, "case {i} {n}x{c}->{o} {h}x{w}: {d}");
            }
        }
        Ok(())
    }
}

/// From `kernels/conv/pointwise_bf16.rs`.
mod pointwise_bf16 {
    use candle_core::{Device, Tensor};

    use crate::model::conv::Pointwise;

    fn rel(a: &Tensor, b: &Tensor) -> candle_core::Result<f32> {
        let d = (a - b)?.sqr()?.sum_all()?.to_scalar::<f32>()?;
        let n = b.sqr()?.sum_all()?.to_scalar::<f32>()?;
        Ok((d / n).sqrt())
    }

    /// bf16 1x1 convolutions against the exact ones: odd channel counts, pixel counts that are
    /// not multiples of 16 or span several tasks, a batch of 2, residual and GELU epilogues.
    #[test]
    fn matches_the_exact_conv_within_bf16_rounding() -> candle_core::Result<()> {
        if !crate::kernels::cpu::bf16() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return Ok(());
        }
        let dev = Device::Cpu;
        // (Where AMX runs: whole 16x16 tiles on the tile unit, the rest on the AVX-512 blocks;
        // 40 outputs at 13x11 pixels mix both.)
        for (n, ci, co, h, w) in [
            (1usize, 48usize, 96usize, 40usize, 40usize),
            (2, 24, 6, 13, 11),
            (1, 256, 32, 64, 64),
            (1, 48, 40, 13, 11),
        ] {
            let wt = Tensor::randn(0f32, 0.1, (co, ci, 1, 1), &dev)?;
            let b = Tensor::randn(0f32, 1.0, co, &dev)?;
            let exact = Pointwise::new(&wt, &b)?;
            let mut fast = Pointwise::new(&wt, &b)?;
            fast.set_bf16(true);
            let x = Tensor::randn(0f32, 1.0, (n, ci, h, w), &dev)?;
            let r = Tensor::randn(0f32, 1.0, (n, co, h, w), &dev)?;
            for (name, want, got) in [
                ("plain", exact.forward(&x)?, fast.forward(&x)?),
                ("gelu", exact.forward_gelu(&x)?, fast.forward_gelu(&x)?),
                (
                    "residual",
                    exact.forward_add(&x, &r)?,
                    fast.forward_add(&x, &r)?,
                ),
            ] {
                let e = rel(&got, &want)?;
                assert!(
                    e < 1e-2 && e > 0.0,
                    "{name} {n}x{ci}->{co} {h}x{w}: rel {e:e}"
                );
            }
        }
        Ok(())
    }
}

/// From `kernels/conv/pointwise_bf16.rs`.
mod pointwise_bf16_split {
    use candle_core::{Device, Tensor};

    use crate::kernels::conv::pointwise_bf16::Rounding;
    use crate::model::conv::Pointwise;

    /// Split products (AMX only) are f32-accurate: within 1e-5 (relative L2) of the exact
    /// conv, where bf16 is off by ~1e-3; the tile and edge paths both take part.
    #[test]
    fn split_products_match_the_exact_conv_to_f32_accuracy() -> candle_core::Result<()> {
        if !crate::kernels::amx::available() {
            eprintln!("skipped: no AMX here");
            return Ok(());
        }
        let dev = Device::Cpu;
        for (ci, co, h, w) in [(192usize, 384usize, 32usize, 32usize), (48, 40, 13, 11)] {
            let wt = Tensor::randn(0f32, 0.1, (co, ci, 1, 1), &dev)?;
            let b = Tensor::randn(0f32, 1.0, co, &dev)?;
            let exact = Pointwise::new(&wt, &b)?;
            let mut fast = Pointwise::new(&wt, &b)?;
            assert!(fast.set_rounding(Some(Rounding::Split)));
            let x = Tensor::randn(0f32, 1.0, (1, ci, h, w), &dev)?;
            let (want, got) = (exact.forward(&x)?, fast.forward(&x)?);
            let d = (&got - &want)?.sqr()?.sum_all()?.to_scalar::<f32>()?;
            let e = (d / want.sqr()?.sum_all()?.to_scalar::<f32>()?).sqrt();
            assert!(e < 1e-5, "{ci}->{co} at {h}x{w}: relative L2 {e:e}");
        }
        Ok(())
    }
}

/// From `kernels/conv/channel_mixer.rs`.
mod channel_mixer {
    use candle_core::{Device, Tensor};

    use crate::model::conv::Pointwise;

    /// Random `c -> hid -> c` 1x1 convs.
    pub(crate) fn random_mlp(c: usize, hid: usize) -> candle_core::Result<(Pointwise, Pointwise)> {
        let dev = Device::Cpu;
        let conv = |o: usize, i: usize| {
            Pointwise::new(
                &Tensor::randn(0f32, 0.2, (o, i, 1, 1), &dev)?,
                &Tensor::randn(0f32, 0.5, o, &dev)?,
            )
        };
        Ok((conv(hid, c)?, conv(c, hid)?))
    }

    #[test]
    fn matches_the_two_convs() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        // Odd sizes: a last block narrower than COLS, a batch of 2, widths not multiples of 8.
        for (n, c, h, w) in [(1usize, 48usize, 20usize, 13usize), (2, 12, 7, 40)] {
            let (conv1, conv2) = random_mlp(c, 2 * c)?;
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let want = conv2.forward_add(&conv1.forward_gelu(&x)?, &x)?;
            let Some(got) = conv1.channel_mixer(&conv2, &x)? else {
                panic!("the fused path applies to CPU f32");
            };
            let err = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err <= 1e-6 * scale.max(1.0), "{n}x{c}x{h}x{w}: {err}");

            // The memory fuser's form: another residual, a layer scale, hidden width 4c.
            let (conv1, conv2) = random_mlp(c, 4 * c)?;
            let r = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let g = Tensor::randn(0f32, 1.0, c, &dev)?;
            let host_g: Vec<f32> = g.to_vec1()?;
            let y = conv2.forward(&crate::kernels::gelu::gelu(&conv1.forward(&x)?)?)?;
            let want = (&r + y.broadcast_mul(&g.reshape((1, c, 1, 1))?)?)?;
            let Some(got) = conv1.mlp_residual(&conv2, &x, &r, Some(&host_g))? else {
                panic!("the fused path applies to CPU f32");
            };
            let err = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(
                err <= 1e-6 * scale.max(1.0),
                "scaled {n}x{c}x{h}x{w}: {err}"
            );

            // A narrower output (a projection folded into conv2) with its own residual.
            let co = c / 4;
            let (conv1, _) = random_mlp(c, 4 * c)?;
            let (narrow, _) = random_mlp(4 * c, co)?;
            let r = Tensor::randn(0f32, 1.0, (n, co, h, w), &dev)?;
            let want = narrow.forward_add(&crate::kernels::gelu::gelu(&conv1.forward(&x)?)?, &r)?;
            let Some(got) = conv1.mlp_residual(&narrow, &x, &r, None)? else {
                panic!("the fused path applies to CPU f32");
            };
            assert_eq!(got.dims(), &[n, co, h, w]);
            let err = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(
                err <= 1e-6 * scale.max(1.0),
                "narrow {n}x{c}x{h}x{w}: {err}"
            );
            // A residual of the input's width no longer fits: a typed error, not a panic.
            assert!(conv1.mlp_residual(&narrow, &x, &x, None).is_err());
        }
        Ok(())
    }
}

/// From `kernels/conv/channel_mixer.rs`.
mod channel_mixer_bf16 {
    use candle_core::{Device, Tensor};

    use super::channel_mixer::random_mlp;
    use crate::kernels::conv::depthwise::Depthwise;
    use crate::kernels::conv::pointwise_bf16::Rounding;

    /// In the bf16 mode the fused mixer computes exactly what the two bf16 convs compute one
    /// after the other (same roundings, same sums per pixel): the RepViT form, the fuser's
    /// scaled form, a narrower output and the token mixer inside, at odd sizes, with plain and
    /// split products (on AMX the pixel blocks of whole tiles take the tile-epilogue path and
    /// the rest the packed one).
    #[test]
    fn equals_the_two_bf16_convs() -> candle_core::Result<()> {
        if !crate::kernels::cpu::bf16() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return Ok(());
        }
        let dev = Device::Cpu;
        // Split products where AMX runs them (the image encoder's and memory fuser's mode).
        let roundings: &[Rounding] = if crate::kernels::amx::available() {
            &[Rounding::Bf16, Rounding::Split]
        } else {
            &[Rounding::Bf16]
        };
        for &rounding in roundings {
            let bf16 =
                |(mut a, mut b): (crate::model::conv::Pointwise, crate::model::conv::Pointwise)| {
                    // `b` may have an odd input width (the narrow case's unused half) and stay
                    // exact; the fused op exists only when both are bf16 (`fused` below).
                    assert!(a.set_rounding(Some(rounding)));
                    b.set_rounding(Some(rounding));
                    (a, b)
                };
            let fused = |t: Option<Tensor>| {
                t.ok_or_else(|| candle_core::Error::Msg("no fused path".into()))
            };
            for (n, c, h, w) in [
                (1usize, 48usize, 20usize, 13usize),
                (2, 12, 9, 40),
                (1, 32, 16, 16),
            ] {
                let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
                let (conv1, conv2) = bf16(random_mlp(c, 2 * c)?);
                let want = conv2.forward_add(&conv1.forward_gelu(&x)?, &x)?;
                let got = fused(conv1.channel_mixer(&conv2, &x)?)?;
                assert!(
                    crate::checks::compare::same_bits(&got, &want)?,
                    "mixer {n}x{c}x{h}x{w}"
                );

                let dw = Depthwise::new(
                    Tensor::randn(0f32, 0.5, (c, 1, 3, 3), &dev)?,
                    Tensor::randn(0f32, 0.5, c, &dev)?,
                    1,
                    1,
                )?;
                let t = dw.forward(&x)?;
                let want = conv2.forward_add(&conv1.forward_gelu(&t)?, &t)?;
                let got = fused(conv1.channel_mixer_after(&conv2, &dw, &x)?)?;
                assert!(
                    crate::checks::compare::same_bits(&got, &want)?,
                    "token mixer {n}x{c}x{h}x{w}"
                );

                let (conv1, conv2) = bf16(random_mlp(c, 4 * c)?);
                let r = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
                let g = Tensor::randn(0f32, 1.0, c, &dev)?;
                let host_g: Vec<f32> = g.to_vec1()?;
                let y = conv2.forward(&conv1.forward_gelu(&x)?)?;
                let want = (&r + y.broadcast_mul(&g.reshape((1, c, 1, 1))?)?)?;
                let got = fused(conv1.mlp_residual(&conv2, &x, &r, Some(&host_g))?)?;
                assert!(
                    crate::checks::compare::same_bits(&got, &want)?,
                    "scaled {n}x{c}x{h}x{w}"
                );

                let co = c / 4;
                let (conv1, _) = bf16(random_mlp(c, 4 * c)?);
                let (narrow, _) = bf16(random_mlp(4 * c, co)?);
                let r = Tensor::randn(0f32, 1.0, (n, co, h, w), &dev)?;
                let want = narrow.forward_add(&conv1.forward_gelu(&x)?, &r)?;
                let got = fused(conv1.mlp_residual(&narrow, &x, &r, None)?)?;
                assert!(
                    crate::checks::compare::same_bits(&got, &want)?,
                    "narrow {n}x{c}x{h}x{w}"
                );

                // One conv in bf16 and one exact: no fused path (the ops run one by one).
                let (mut a, b) = random_mlp(c, 2 * c)?;
                a.set_bf16(true);
                assert!(a.channel_mixer(&b, &x)?.is_none());
            }
        }
        Ok(())
    }
}

/// From `kernels/conv/channel_mixer.rs`.
mod channel_mixer_fused_token_mixer {
    use candle_core::{Device, Tensor};

    use super::channel_mixer::random_mlp;
    use crate::kernels::conv::depthwise::Depthwise;

    /// Token mixer computed inside the channel mixer's blocks vs the two ops: bit-identical
    /// (same depthwise operation order, same MLP input), for rows wider and narrower than a
    /// block, a batch of 2 and a width that splits blocks mid-row.
    #[test]
    fn equals_depthwise_then_mixer() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (n, c, h, w) in [
            (1usize, 16usize, 9usize, 100usize),
            (2, 8, 7, 20),
            (1, 24, 5, 64),
        ] {
            let (conv1, conv2) = random_mlp(c, 2 * c)?;
            let dw = Depthwise::new(
                Tensor::randn(0f32, 0.5, (c, 1, 3, 3), &dev)?,
                Tensor::randn(0f32, 0.5, c, &dev)?,
                1,
                1,
            )?;
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let t = dw.forward(&x)?;
            let want = conv1
                .channel_mixer(&conv2, &t)?
                .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
            let got = conv1
                .channel_mixer_after(&conv2, &dw, &x)?
                .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
            assert!(
                crate::checks::compare::same_bits(&got, &want)?,
                "{n}x{c}x{h}x{w}"
            );
        }
        Ok(())
    }

    /// A 1x1 projection (RepViT's `channel_downsample`) computed inside the channel mixer's
    /// blocks vs the 1x1 conv's own pass, then the mixer: bit-identical (the same sums), with
    /// exact and split-bf16 mixer products, for a batch of 2 and a width that splits blocks
    /// mid-row; a bf16 projection is left to the ops one by one.
    #[test]
    fn projected_equals_conv_then_mixer() -> candle_core::Result<()> {
        use crate::kernels::conv::pointwise_bf16::Rounding;
        use crate::model::conv::Pointwise;
        let dev = Device::Cpu;
        for (n, c_in, c, h, w) in [
            (1usize, 8usize, 16usize, 9usize, 100usize),
            (2, 12, 8, 7, 20),
            (1, 48, 96, 5, 64),
        ] {
            for rounding in [None, Some(Rounding::Split)] {
                let (mut conv1, mut conv2) = random_mlp(c, 2 * c)?;
                if !(conv1.set_rounding(rounding) && conv2.set_rounding(rounding)) {
                    continue;
                }
                let mut projection = Pointwise::new(
                    &Tensor::randn(0f32, 0.3, (c, c_in, 1, 1), &dev)?,
                    &Tensor::randn(0f32, 0.5, c, &dev)?,
                )?;
                let x = Tensor::randn(0f32, 1.0, (n, c_in, h, w), &dev)?;
                let want = conv1
                    .channel_mixer(&conv2, &projection.forward(&x)?)?
                    .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
                let got = conv1
                    .channel_mixer_after_projection(&conv2, &projection, &x)?
                    .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
                assert_eq!(got.dims(), [n, c, h, w]);
                assert!(
                    crate::checks::compare::same_bits(&got, &want)?,
                    "{n}x{c_in}->{c}x{h}x{w} {rounding:?}"
                );
                if projection.set_rounding(Some(Rounding::Bf16)) {
                    assert!(conv1
                        .channel_mixer_after_projection(&conv2, &projection, &x)?
                        .is_none());
                }
            }
        }
        Ok(())
    }

    /// Squeeze-excite's gate applied inside the channel mixer's blocks vs the gated map first
    /// (`broadcast_mul`, then the mixer): bit-identical (the same products), exact and with
    /// split-bf16 products where the CPU has them, for a batch of 2 with its own gates and a
    /// width that splits blocks mid-row; a gate of the wrong length is an error.
    #[test]
    fn gated_equals_gate_then_mixer() -> candle_core::Result<()> {
        use crate::kernels::conv::pointwise_bf16::Rounding;
        let dev = Device::Cpu;
        for (n, c, h, w) in [
            (1usize, 16usize, 9usize, 100usize),
            (2, 8, 7, 20),
            (1, 24, 5, 64),
        ] {
            for rounding in [None, Some(Rounding::Split)] {
                let (mut conv1, mut conv2) = random_mlp(c, 2 * c)?;
                if !(conv1.set_rounding(rounding) && conv2.set_rounding(rounding)) {
                    continue;
                }
                let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
                let gate = candle_nn::ops::sigmoid(&Tensor::randn(0f32, 2.0, (n, c, 1, 1), &dev)?)?;
                let want = conv1
                    .channel_mixer(&conv2, &x.broadcast_mul(&gate)?)?
                    .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
                let host = gate.flatten_all()?.to_vec1::<f32>()?;
                let got = conv1
                    .channel_mixer_gated(&conv2, &x, &host)?
                    .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
                assert!(
                    crate::checks::compare::same_bits(&got, &want)?,
                    "{n}x{c}x{h}x{w} {rounding:?}"
                );
                assert!(conv1.channel_mixer_gated(&conv2, &x, &host[1..]).is_err());
            }
        }
        Ok(())
    }
}

/// From `kernels/conv/dense.rs`.
mod dense {
    use candle_core::{Device, Tensor};

    use crate::kernels::conv::dense::dense_conv_reference;
    use crate::model::conv::Dense;

    /// The im2col pass against candle's `conv2d` (plain and with GELU).
    #[test]
    fn dense_matches_conv2d() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (n, c, o, k, s, h, w) in [(1, 3, 24, 3, 2, 70, 67), (2, 4, 5, 3, 1, 9, 8)] {
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 1.0, (o, c, k, k), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let d = Dense::new(&wt, &b, s, (k - 1) / 2)?;
            let plain = dense_conv_reference(&x, &wt, &b.reshape((1, o, 1, 1))?, s, (k - 1) / 2)?;
            let pairs = [
                (d.forward(&x)?, plain.clone()),
                (d.forward_gelu(&x)?, plain.gelu_erf()?),
            ];
            for (i, (ours, theirs)) in pairs.iter().enumerate() {
                assert_eq!(ours.dims(), theirs.dims());
                let diff = (ours - theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert!(diff < 1e-4, "case {i} {n}x{c}->{o} s{s} {h}x{w}: {diff}");
            }
        }
        Ok(())
    }

    /// bf16 products in the dense conv: within bf16 rounding of candle's conv (channel counts
    /// whose `in * k * k` is even), exact where it is odd (the kernel does not apply).
    #[test]
    fn dense_bf16_within_rounding() -> candle_core::Result<()> {
        if !crate::kernels::cpu::bf16() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return Ok(());
        }
        let dev = Device::Cpu;
        for (n, c, o, s, h, w, applies) in [
            (1usize, 64usize, 256usize, 2usize, 40usize, 36usize, true),
            (2, 4, 16, 2, 33, 31, true),
            (1, 3, 24, 2, 20, 20, false),
        ] {
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 0.1, (o, c, 3, 3), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let mut d = Dense::new(&wt, &b, s, 1)?;
            let plain = dense_conv_reference(&x, &wt, &b.reshape((1, o, 1, 1))?, s, 1)?;
            d.set_bf16(true);
            assert_eq!(d.is_bf16(), applies);
            let got = d.forward(&x)?;
            let err = crate::checks::compare::compare(&got, &plain)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?
                .rel_l2;
            if applies {
                assert!(err < 1e-2 && err > 0.0, "{c}->{o}: rel {err}");
            } else {
                assert!(err < 1e-6, "{c}->{o} stays exact: rel {err}");
            }
        }
        Ok(())
    }
}
