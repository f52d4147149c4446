//! Convolution building blocks with BatchNorm folded in at load time.
//!
//! Inference BatchNorm is an affine map per output channel, so it merges into the preceding
//! convolution's weight and bias (computed in f64, stored f32): one op instead of four.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Tensor};
use candle_nn::VarBuilder;

/// BatchNorm eps of every RepViT `ConvNorm` (torch's default).
const BN_EPS: f64 = 1e-5;

/// A `ConvNorm` (`c` conv without bias + `bn`) folded into `(weight, bias)`, f64.
///
/// `w' = w * g / sqrt(var + eps)`, `b' = beta - mean * g / sqrt(var + eps)` (timm's `fuse`).
pub(crate) fn conv_norm(
    vb: &VarBuilder,
    out_ch: usize,
    in_per_group: usize,
    k: usize,
) -> candle_core::Result<(Tensor, Tensor)> {
    let w = vb
        .get((out_ch, in_per_group, k, k), "c.weight")?
        .to_dtype(DType::F64)?;
    let bn = vb.pp("bn");
    let get =
        |name: &str| -> candle_core::Result<Tensor> { bn.get(out_ch, name)?.to_dtype(DType::F64) };
    let (gamma, beta, mean, var) = (
        get("weight")?,
        get("bias")?,
        get("running_mean")?,
        get("running_var")?,
    );
    let s = gamma.broadcast_div(&(var + BN_EPS)?.sqrt()?)?;
    let w = w.broadcast_mul(&s.reshape((out_ch, 1, 1, 1))?)?;
    let b = (beta - mean.mul(&s)?)?;
    Ok((w, b))
}

/// A 1x1 convolution as a matrix product over the flattened spatial axis.
///
/// On CPU (f32) it runs as one fused op: the output starts as the bias (plus an optional
/// residual), `gemm` accumulates `W x` into it, and an optional GELU runs in place; that saves
/// the separate bias-add, residual-add and activation passes (and their allocations) over
/// large activations. Other devices use candle's `matmul` + `broadcast_add`.
pub(crate) struct Pointwise {
    /// `[out, in]`.
    weight: Tensor,
    /// `[out, 1]`.
    bias: Tensor,
    /// Host copies for the CPU op: `[out, in]` row-major and `[out]`.
    host_weight: Vec<f32>,
    host_bias: Vec<f32>,
}

/// What the fused CPU op adds after the product.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Epilogue {
    None,
    Gelu,
}

impl Pointwise {
    /// From a `[out, in, 1, 1]` (or `[out, in]`) weight and `[out]` bias, any float dtype.
    pub(crate) fn new(weight: &Tensor, bias: &Tensor) -> candle_core::Result<Self> {
        let out_ch = weight.dim(0)?;
        let in_ch = weight.elem_count() / out_ch.max(1);
        let weight = weight.reshape((out_ch, in_ch))?.to_dtype(DType::F32)?;
        let bias = bias.reshape((out_ch, 1))?.to_dtype(DType::F32)?;
        let host_weight = weight.flatten_all()?.to_vec1::<f32>()?;
        let host_bias = bias.flatten_all()?.to_vec1::<f32>()?;
        Ok(Self {
            weight,
            bias,
            host_weight,
            host_bias,
        })
    }

    /// A plain `nn.Conv2d(in, out, 1)` with bias, read from `vb` (`weight`, `bias`).
    pub(crate) fn load(vb: &VarBuilder, in_ch: usize, out_ch: usize) -> candle_core::Result<Self> {
        let w = vb.get((out_ch, in_ch, 1, 1), "weight")?;
        let b = vb.get(out_ch, "bias")?;
        Self::new(&w, &b)
    }

    /// A folded `ConvNorm` 1x1.
    pub(crate) fn conv_norm(
        vb: &VarBuilder,
        in_ch: usize,
        out_ch: usize,
    ) -> candle_core::Result<Self> {
        let (w, b) = conv_norm(vb, out_ch, in_ch, 1)?;
        Self::new(&w, &b)
    }

    /// `W x + b`.
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return self.fused(x, None, Epilogue::None);
        }
        self.plain(x)
    }

    /// `gelu(W x + b)`.
    pub(crate) fn forward_gelu(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return self.fused(x, None, Epilogue::Gelu);
        }
        super::gelu::gelu(&self.plain(x)?)
    }

    /// `residual + (W x + b)`; `residual` has the output's shape.
    pub(crate) fn forward_add(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) && fused_ok(residual) {
            return self.fused(x, Some(residual), Epilogue::None);
        }
        residual + self.plain(x)?
    }

    fn plain(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (n, c, h, w) = x.dims4()?;
        let out_ch = self.weight.dim(0)?;
        let x = x.reshape((n, c, h * w))?;
        let y = if n == 1 {
            self.weight.matmul(&x.squeeze(0)?)?.unsqueeze(0)?
        } else {
            self.weight.broadcast_matmul(&x)?
        };
        y.broadcast_add(&self.bias)?.reshape((n, out_ch, h, w))
    }

    fn fused(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        epilogue: Epilogue,
    ) -> candle_core::Result<Tensor> {
        let op = FusedPointwise {
            weight: &self.host_weight,
            bias: &self.host_bias,
            epilogue,
        };
        let x = x.contiguous()?;
        match residual {
            Some(r) => x.apply_op2_no_bwd(&r.contiguous()?, &op),
            None => x.apply_op1_no_bwd(&op),
        }
    }
}

fn fused_ok(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

/// The CPU op behind [`Pointwise`]: `epilogue(residual + b + W x)` per batch entry.
struct FusedPointwise<'a> {
    weight: &'a [f32],
    bias: &'a [f32],
    epilogue: Epilogue,
}

impl FusedPointwise<'_> {
    fn run(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        residual: Option<&[f32]>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, h, w) = xl.shape().dims4()?;
        let out_ch = self.bias.len();
        if self.weight.len() != out_ch * c {
            candle_core::bail!(
                "1x1 conv has a {out_ch}x{} weight, input has {c} channels",
                self.weight.len() / out_ch.max(1)
            );
        }
        let x = match x {
            CpuStorage::F32(v) => v,
            _ => candle_core::bail!("1x1 conv kernel expects f32 input"),
        };
        let x = match xl.contiguous_offsets() {
            Some((a, b)) => &x[a..b],
            None => candle_core::bail!("1x1 conv kernel expects a contiguous input"),
        };
        let hw = h * w;
        let total = n * out_ch * hw;
        if let Some(r) = residual {
            if r.len() != total {
                candle_core::bail!(
                    "1x1 conv residual has {} values, output has {total}",
                    r.len()
                );
            }
        }
        // Start from the bias (plus the residual); the product accumulates on top.
        let mut out: Vec<f32> = Vec::with_capacity(total);
        for i in 0..n * out_ch {
            let b = self.bias[i % out_ch];
            match residual {
                Some(r) => out.extend(r[i * hw..(i + 1) * hw].iter().map(|v| v + b)),
                None => out.extend(std::iter::repeat_n(b, hw)),
            }
        }
        let threads = candle_core::utils::get_num_threads();
        let parallelism = if threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        if hw > 0 && c > 0 && out_ch > 0 {
            for (dst, src) in out.chunks_mut(out_ch * hw).zip(x.chunks(c * hw)) {
                // SAFETY: `dst` is `out_ch x hw`, `weight` is `out_ch x c` and `src` is
                // `c x hw`, all row-major and checked above; the slices outlive the call and
                // `dst` does not alias the inputs.
                unsafe {
                    gemm::gemm(
                        out_ch,
                        hw,
                        c,
                        dst.as_mut_ptr(),
                        1,
                        hw as isize,
                        true,
                        self.weight.as_ptr(),
                        1,
                        c as isize,
                        src.as_ptr(),
                        1,
                        hw as isize,
                        1.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        parallelism,
                    );
                }
            }
        }
        if self.epilogue == Epilogue::Gelu {
            super::gelu::gelu_in_place(&mut out);
        }
        Ok((CpuStorage::F32(out), Shape::from((n, out_ch, h, w))))
    }
}

impl CustomOp1 for FusedPointwise<'_> {
    fn name(&self) -> &'static str {
        "pointwise-conv-fused"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(storage, layout, None)
    }
}

impl CustomOp2 for FusedPointwise<'_> {
    fn name(&self) -> &'static str {
        "pointwise-conv-fused-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let r = match s2 {
            CpuStorage::F32(v) => v,
            _ => candle_core::bail!("1x1 conv residual must be f32"),
        };
        let r = match l2.contiguous_offsets() {
            Some((a, b)) => &r[a..b],
            None => candle_core::bail!("1x1 conv residual must be contiguous"),
        };
        self.run(s1, l1, Some(r))
    }
}

/// A dense `k x k` convolution with bias (the stem), through candle's `conv2d`.
pub(crate) struct Dense {
    weight: Tensor,
    /// `[1, out, 1, 1]`.
    bias: Tensor,
    stride: usize,
    padding: usize,
}

impl Dense {
    /// A folded `ConvNorm` `k x k`, padding `(k-1)/2`.
    pub(crate) fn conv_norm(
        vb: &VarBuilder,
        in_ch: usize,
        out_ch: usize,
        k: usize,
        stride: usize,
    ) -> candle_core::Result<Self> {
        let (w, b) = conv_norm(vb, out_ch, in_ch, k)?;
        Ok(Self {
            weight: w.to_dtype(DType::F32)?,
            bias: b.reshape((1, out_ch, 1, 1))?.to_dtype(DType::F32)?,
            stride,
            padding: (k - 1) / 2,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.conv2d(&self.weight, self.padding, self.stride, 1, 1)?
            .broadcast_add(&self.bias)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The fused CPU op must agree with the candle matmul + bias path (and GELU / residual).
    #[test]
    fn fused_matches_plain() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (n, c, o, h, w) in [(1, 48, 96, 9, 7), (2, 5, 3, 4, 4), (1, 7, 7, 1, 1)] {
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let r = Tensor::randn(0f32, 1.0, (n, o, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 1.0, (o, c, 1, 1), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let pw = Pointwise::new(&wt, &b)?;
            let plain = pw.plain(&x)?;
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
