//! Linear layers with bf16 products and f32 accumulation (the `bf16` fast mode).
//!
//! The weight is rounded to bf16 once, when the mode is switched on, and packed in the layout
//! AVX512-BF16's `vdpbf16ps` reads: for each pair of input channels `kp` and block of 16 output
//! channels, 16 lanes `(w[o][2kp], w[o][2kp+1])`. Each call rounds its input rows to bf16 pairs
//! and accumulates `bias + x w^T` in f32, tiles of 4 rows x 64 outputs in registers.
//! [`SwitchLinear`] holds the exact `candle_nn::Linear` beside it and picks per call.

// The bf16 kernels run on x86_64 only (AVX512-BF16, AMX): elsewhere `set_precision` refuses
// bf16 before they are reached, so parts of their packing go unread there.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Module, Shape, Tensor};
use candle_nn::Linear;

use crate::kernels::amx::AlignedPairs;
use crate::kernels::cpu;
use crate::kernels::linear::{mlp_op, MlpWidths, PackedLinear, MLP_ROWS_PER_TASK};
use crate::kernels::{f32_slice, last_axis_map, output_in_chunks_with, spread_row_stride};

/// Rows per task.
const ROWS_PER_TASK: usize = 64;

/// A linear layer's weight and bias, prepared for bf16 products.
#[derive(Debug)]
pub struct Bf16Linear {
    /// `[in/2][out]` pairs (see the module docs), rows `stride` apart, on a cache-line boundary
    /// for the tile loads.
    packed: AlignedPairs,
    /// Distance between the packed rows (input pairs): [`spread_row_stride`] of `outputs`, so
    /// a 4-block weight panel stays in L1 across a task's row groups.
    stride: usize,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

impl Bf16Linear {
    /// Packs `linear`'s weight `[out, in]`; `None` when the shape does not suit the kernel (an
    /// odd input width or an output width that is not a multiple of 16) or the CPU lacks
    /// AVX512-BF16, so the caller keeps the exact layer.
    pub fn new(linear: &Linear) -> candle_core::Result<Option<Self>> {
        let w = linear.weight();
        let (outputs, inputs) = w.dims2()?;
        if !cpu::bf16()
            || !inputs.is_multiple_of(2)
            || !outputs.is_multiple_of(16)
            || !w.device().is_cpu()
        {
            return Ok(None);
        }
        let w: Vec<f32> = w.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let stride = spread_row_stride(outputs);
        let mut packed = AlignedPairs::zeroed(inputs / 2 * stride);
        let pairs = packed.as_mut_slice();
        for o in 0..outputs {
            for kp in 0..inputs / 2 {
                pairs[kp * stride + o] = crate::kernels::bf16::bf16_bits(w[o * inputs + 2 * kp])
                    | (crate::kernels::bf16::bf16_bits(w[o * inputs + 2 * kp + 1]) << 16);
            }
        }
        let bias = match linear.bias() {
            Some(b) => b.to_dtype(DType::F32)?.to_vec1()?,
            None => vec![0.0; outputs],
        };
        Ok(Some(Self {
            packed,
            stride,
            bias,
            inputs,
            outputs,
        }))
    }

    /// `out = bias + x w^T` for the rows of `x` (`n x inputs`; `out` is `n x outputs`, `pairs`
    /// at least `n x inputs / 2` scratch).
    fn rows(&self, x: &[f32], pairs: &mut [u32], out: &mut [f32]) {
        let n = out.len() / self.outputs;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Bf16Linear` exists only where `cpu::bf16()` (AVX-512F + AVX512-BF16); `x` is
        // `n x inputs`, `out` `n x outputs` and `pairs` holds `n x inputs / 2`.
        unsafe {
            x86::rows(self, x, &mut pairs[..n * self.inputs / 2], out);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (x, pairs, n);
    }
}

/// `down(relu(up(x)))` with bf16 products, one block of rows at a time: the 2048-wide hidden
/// activations stay a per-worker L2 buffer (32 MiB per call as a tensor, written to fresh pages
/// and read back: half the unfused MLP's time) and are rounded to bf16 while hot.
pub struct FusedReluMlpBf16<'a> {
    pub up: &'a Bf16Linear,
    pub down: &'a Bf16Linear,
}

impl FusedReluMlpBf16<'_> {
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self)
    }
}

impl CustomOp1 for FusedReluMlpBf16<'_> {
    fn name(&self) -> &'static str {
        "mlp-relu-bf16"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (inputs, hidden, outputs) = (self.up.inputs, self.up.outputs, self.down.outputs);
        let widths = MlpWidths {
            inputs,
            hidden,
            down_inputs: self.down.inputs,
            outputs,
        };
        mlp_op(
            storage,
            layout,
            widths,
            || {
                let width = inputs.max(hidden) / 2;
                (
                    vec![0f32; MLP_ROWS_PER_TASK * hidden],
                    AlignedPairs::zeroed(MLP_ROWS_PER_TASK * width),
                )
            },
            |(h, pairs), xs, o| {
                let n = o.len() / outputs;
                let h = &mut h[..n * hidden];
                self.up.rows(xs, pairs.as_mut_slice(), h);
                h.iter_mut().for_each(|v| *v = v.max(0.0));
                self.down.rows(h, pairs.as_mut_slice(), o);
            },
        )
    }
}

impl CustomOp1 for Bf16Linear {
    fn name(&self) -> &'static str {
        "linear-bf16"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, "linear input")?;
        let (rows, out_shape) = last_axis_map(layout, self.inputs, self.outputs, "bf16 linear")?;
        let mut out = Vec::new();
        if rows > 0 && self.outputs > 0 {
            out = output_in_chunks_with(
                rows * self.outputs,
                ROWS_PER_TASK * self.outputs,
                || AlignedPairs::zeroed(ROWS_PER_TASK * self.inputs / 2),
                |pairs, t, o| {
                    let r0 = t * ROWS_PER_TASK;
                    let n = o.len() / self.outputs;
                    let x = &x[r0 * self.inputs..(r0 + n) * self.inputs];
                    self.rows(x, pairs.as_mut_slice(), o);
                },
            );
        }
        Ok((CpuStorage::F32(out), out_shape))
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Bf16Linear;
    use crate::kernels::amx;
    use crate::kernels::bf16::{for_each_tile, to_bf16_pairs};

    /// `out[r][o] = bias[o] + sum_kp x[r][kp] . w[kp][o]` for `R` rows and `C` blocks of 16
    /// outputs starting at block `b0`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn block<const R: usize, const C: usize>(
        l: &Bf16Linear,
        x_pairs: &[u32],
        b0: usize,
        out: &mut [f32],
    ) {
        let (kpairs, n, stride) = (l.inputs / 2, l.outputs, l.stride);
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for row in acc.iter_mut() {
            for (c, x) in row.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(l.bias.as_ptr().add((b0 + c) * 16));
            }
        }
        for kp in 0..kpairs {
            let base = l.packed.as_slice().as_ptr().add(kp * stride + b0 * 16);
            let mut b = [_mm512_setzero_si512(); C];
            for (c, bc) in b.iter_mut().enumerate() {
                *bc = _mm512_loadu_si512(base.add(c * 16).cast());
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let a: __m512bh = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    x_pairs[r * kpairs + kp] as i32,
                ));
                for (c, x) in row.iter_mut().enumerate() {
                    *x = _mm512_dpbf16_ps(*x, a, std::mem::transmute::<__m512i, __m512bh>(b[c]));
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, x) in row.iter().enumerate() {
                _mm512_storeu_ps(out.as_mut_ptr().add(r * n + (b0 + c) * 16), *x);
            }
        }
    }

    /// All outputs of the rows `x` (`rows x inputs`) into `out` (`rows x outputs`): whole
    /// groups of 16 rows as AMX tile products where the CPU has them, the rest here.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn rows(l: &Bf16Linear, x: &[f32], pairs: &mut [u32], out: &mut [f32]) {
        let rows = out.len() / l.outputs;
        let kpairs = l.inputs / 2;
        to_bf16_pairs(x, pairs);
        let mut first = 0;
        if amx::available() && kpairs.is_multiple_of(amx::TILE) {
            first = rows / amx::TILE * amx::TILE;
            for row in out[..first * l.outputs].chunks_exact_mut(l.outputs) {
                row.copy_from_slice(&l.bias);
            }
            // SAFETY: `pairs` holds `rows x kpairs` (the first `first` rows used), the packed
            // weight `kpairs x outputs` (rows `stride` apart; `outputs` a multiple of 16, see
            // `Bf16Linear::new`),
            // `out` `rows x outputs`; `amx::available()`.
            unsafe {
                amx::gemm(
                    pairs.as_ptr(),
                    kpairs,
                    amx::BMatrix::rows(l.packed.as_slice().as_ptr(), l.stride),
                    out.as_mut_ptr(),
                    l.outputs,
                    (first, l.outputs, kpairs),
                );
            }
        }
        let blocks = l.outputs / 16;
        // Output blocks outermost: a 4-block weight panel stays in cache across the row groups.
        for_each_tile(first..rows, blocks, |r, four_rows, b, four_blocks| {
            let xp = &pairs[r * kpairs..];
            let o = &mut out[r * l.outputs..];
            match (four_rows, four_blocks) {
                (true, true) => block::<4, 4>(l, xp, b, o),
                (true, false) => block::<4, 1>(l, xp, b, o),
                (false, true) => block::<1, 4>(l, xp, b, o),
                (false, false) => block::<1, 1>(l, xp, b, o),
            }
        });
    }
}

/// A linear layer that runs exact f32 or, once switched, bf16 products on the CPU. The exact
/// path is [`PackedLinear`] where the CPU has AVX-512F (weight packed at load), else candle's.
#[derive(Debug, Clone)]
pub struct SwitchLinear {
    exact: Linear,
    packed: Option<Arc<PackedLinear>>,
    bf16: Option<Arc<Bf16Linear>>,
}

impl SwitchLinear {
    pub fn new(exact: Linear) -> Self {
        // Packing only fails where the kernel would not apply; candle's layer runs then.
        let packed = PackedLinear::new(&exact).ok().flatten().map(Arc::new);
        Self {
            exact,
            packed,
            bf16: None,
        }
    }

    /// Switches the bf16 products on (packing the weight once) or off. Stays exact where the
    /// kernel does not apply (see [`Bf16Linear::new`]).
    pub fn set_bf16(&mut self, on: bool) -> candle_core::Result<()> {
        self.bf16 = if on {
            Bf16Linear::new(&self.exact)?.map(Arc::new)
        } else {
            None
        };
        Ok(())
    }
}

impl SwitchLinear {
    /// The exact f32 layer (its weights, for composing with neighbours at load).
    pub fn exact(&self) -> &Linear {
        &self.exact
    }

    /// The packed exact layer, when it is what [`Module::forward`] runs for CPU f32 inputs
    /// (bf16 off, AVX-512F present): callers fuse it with its neighbours.
    pub fn packed_f32(&self) -> Option<&PackedLinear> {
        match self.bf16 {
            Some(_) => None,
            None => self.packed.as_deref(),
        }
    }

    /// The bf16 layer, when switched on: callers fuse it with its neighbours.
    pub fn bf16(&self) -> Option<&Bf16Linear> {
        self.bf16.as_deref()
    }
}

impl Module for SwitchLinear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match &self.bf16 {
            Some(fast) if x.device().is_cpu() && x.dtype() == DType::F32 => {
                x.contiguous()?.apply_op1_no_bwd(fast.as_ref())
            }
            _ => match &self.packed {
                Some(packed) if x.device().is_cpu() && x.dtype() == DType::F32 => packed.forward(x),
                _ => self.exact.forward(x),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_the_exact_layer_within_bf16_rounding() -> candle_core::Result<()> {
        if !cpu::bf16() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return Ok(());
        }
        let dev = Device::Cpu;
        for (rows, inp, out) in [
            (131usize, 256usize, 2048usize),
            (5, 64, 48),
            (64, 2048, 256),
        ] {
            let w = Tensor::randn(0f32, 0.05, (out, inp), &dev)?;
            let b = Tensor::randn(0f32, 1.0, out, &dev)?;
            let exact = Linear::new(w, Some(b));
            let mut fast = SwitchLinear::new(exact.clone());
            let x = Tensor::randn(0f32, 1.0, (1, rows, inp), &dev)?;
            // The switch's exact path (packed f32 where the CPU has AVX-512F).
            let exact_path = fast.forward(&x)?;
            fast.set_bf16(true)?;
            let want = exact.forward(&x)?;
            let got = fast.forward(&x)?;
            assert_eq!(got.dims(), want.dims());
            let rel = ((&got - &want)?.sqr()?.sum_all()?.to_scalar::<f32>()?
                / want.sqr()?.sum_all()?.to_scalar::<f32>()?)
            .sqrt();
            assert!(
                rel < 1e-2 && rel > 0.0,
                "({rows}, {inp}, {out}): rel {rel:e}"
            );
            fast.set_bf16(false)?;
            let back = fast.forward(&x)?;
            let same = (&back - &exact_path)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(same, 0.0, "switching off restores the exact layer");
        }
        Ok(())
    }
}

#[cfg(test)]
mod fused_mlp {
    use super::*;
    use candle_core::Device;

    /// The fused MLP computes exactly what its two layers and a ReLU compute one after the
    /// other (same roundings, same sums), also for a row count that is not a whole task.
    #[test]
    fn equals_the_unfused_layers() -> candle_core::Result<()> {
        if !cpu::bf16() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return Ok(());
        }
        let dev = Device::Cpu;
        let layer = |i: usize, o: usize| -> candle_core::Result<SwitchLinear> {
            let w = Tensor::randn(0f32, 0.05, (o, i), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let mut l = SwitchLinear::new(Linear::new(w, Some(b)));
            l.set_bf16(true)?;
            Ok(l)
        };
        let (up, down) = (layer(256, 2048)?, layer(2048, 256)?);
        let (Some(u), Some(d)) = (up.bf16(), down.bf16()) else {
            candle_core::bail!("bf16 layers not packed");
        };
        for rows in [1usize, 64, 131] {
            let x = Tensor::randn(0f32, 1.0, (1, rows, 256), &dev)?;
            let want = down.forward(&up.forward(&x)?.relu()?)?;
            let got = FusedReluMlpBf16 { up: u, down: d }.forward(&x)?;
            assert_eq!(got.dims(), want.dims());
            let diff = (got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "{rows} rows");
        }
        Ok(())
    }
}
