//! GELU (exact, erf form) as a multi-threaded CPU kernel.
//!
//! candle's `gelu_erf` calls scalar `libm::erff` on one thread; in RepViT at 1024 that was a
//! third of the backbone's time. This kernel evaluates erf as `x P(x^2) / Q(x^2)` on
//! `|x| <= 4` (beyond it erf is 1 in f32): a rational minimax fit of ours (degrees 6 and 4 in
//! `x^2`, fitted in f64 by Lawson's iteration to 5.4e-8, 3.5e-7 evaluated in f32). That is as
//! accurate as the Abramowitz-Stegun 7.1.26 form PyTorch's vectorized `erf` uses (which needs an
//! `exp` and a division) at ~2/3 of its operations: GELU is bound by its arithmetic, and it runs
//! on every hidden value of RepViT and the memory fuser. Split over threads. Other devices and
//! dtypes use candle's `gelu_erf`.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};

use crate::kernels::cpu::Isa;
use crate::kernels::simd::{dispatch, F32s, Kernel};
use crate::kernels::{f32_slice, run_tasks_with, threads};

/// `x * 0.5 * (1 + erf(x / sqrt 2))`.
pub(crate) fn gelu(x: &Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == DType::F32 {
        x.contiguous()?.apply_op1_no_bwd(&Gelu)
    } else {
        x.gelu_erf()
    }
}

struct Gelu;

/// erf's numerator `P(t)`, `t = x^2`, lowest degree first (see the module docs).
const ERF_P: [f32; 7] = [
    1.128_378_6,
    0.213_949_96,
    0.052_434_176,
    0.004_293_279_3,
    1.555_423_2e-4,
    -1.990_341_4e-6,
    1.921_705_5e-8,
];
/// erf's denominator `Q(t) = 1 + ...`, from degree 1.
const ERF_Q: [f32; 4] = [0.522_935_87, 0.120_801_81, 0.015_551_547, 0.001_098_093_2];

/// `erf(x)` to 3.5e-7 (see the module docs), with fused multiply-adds in Horner order.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let t = x * x;
    let p = ERF_P[..6]
        .iter()
        .rev()
        .fold(ERF_P[6], |p, &c| p.mul_add(t, c));
    let q = ERF_Q[..3]
        .iter()
        .rev()
        .fold(ERF_Q[3], |q, &c| q.mul_add(t, c));
    (x * p) / q.mul_add(t, 1.0)
}

#[inline(always)]
pub(crate) fn gelu_scalar(x: f32) -> f32 {
    let h = x * 0.5;
    h.mul_add(erf(x * std::f32::consts::FRAC_1_SQRT_2), h)
}

/// GELU over a slice in place, in the vectors of the instruction set in effect. Only the
/// vector width changes (the multiply-adds are fused at every width, as `mul_add` is in the
/// scalar form), so results are bit-identical to [`gelu_scalar`].
pub(crate) fn gelu_slice(data: &mut [f32]) {
    dispatch(GeluSlice(data));
}

/// [`gelu_slice`] as a kernel of every instruction set.
struct GeluSlice<'a>(&'a mut [f32]);

impl Kernel for GeluSlice<'_> {
    type Output = ();

    #[inline(always)]
    fn run<V: F32s>(self) {
        if V::ISA == Isa::Portable {
            // Without vector FMA the scalar form is the fast one (and the reference itself).
            crate::kernels::threads::with_scalar_fma(
                #[inline(always)]
                || {
                    for x in self.0.iter_mut() {
                        *x = gelu_scalar(*x);
                    }
                },
            );
            return;
        }
        let mut chunks = self.0.chunks_exact_mut(V::LANES);
        for c in &mut chunks {
            let p = c.as_mut_ptr();
            // SAFETY: `c` holds LANES floats; `dispatch` runs this where `V`'s ISA is present.
            unsafe { gelu_lanes(V::load(p)).store(p) };
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let (p, n) = (tail.as_mut_ptr(), tail.len());
            // SAFETY: `tail` holds `n < LANES` floats; as above for the ISA.
            unsafe { gelu_lanes(V::load_partial(p, n)).store_partial(p, n) };
        }
    }
}

/// [`gelu_scalar`] on a vector, the same operations in the same order.
///
/// # Safety
/// `V`'s instruction set is present.
#[inline(always)]
unsafe fn gelu_lanes<V: F32s>(x: V) -> V {
    // SAFETY: as the caller guarantees.
    unsafe {
        let s = V::splat;
        let xs = x.mul(s(std::f32::consts::FRAC_1_SQRT_2));
        let xs = xs.max(s(-4.0)).min(s(4.0));
        let t = xs.mul(xs);
        let mut p = s(ERF_P[6]);
        for &c in ERF_P[..6].iter().rev() {
            p = p.mul_add(t, s(c));
        }
        let mut q = s(ERF_Q[3]);
        for &c in ERF_Q[..3].iter().rev() {
            q = q.mul_add(t, s(c));
        }
        let erf = xs.mul(p).div(q.mul_add(t, s(1.0)));
        let h = x.mul(s(0.5));
        h.mul_add(erf, h)
    }
}

/// GELU applied in place, split over threads (the fused 1x1 conv's epilogue).
pub(crate) fn gelu_in_place(data: &mut [f32]) {
    let threads = threads();
    let per = data.len().div_ceil(threads).max(1 << 14);
    let chunks: Vec<&mut [f32]> = data.chunks_mut(per).collect();
    run_tasks_with(chunks, threads, || (), |_, chunk| gelu_slice(chunk));
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu-erf-fast"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let data = f32_slice(storage, layout, "gelu input")?;
        // Small tensors are not worth a thread.
        let per = data.len().div_ceil(threads()).max(1 << 14);
        let out = crate::kernels::output_in_chunks(data.len(), per, |t, o| {
            o.copy_from_slice(&data[t * per..][..o.len()]);
            gelu_slice(o);
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_to_exact_gelu() -> candle_core::Result<()> {
        // Past the clamp (|x| / sqrt 2 > 4) too.
        let xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.006).collect();
        let t = Tensor::new(xs.as_slice(), &candle_core::Device::Cpu)?;
        let ours = gelu(&t)?.to_vec1::<f32>()?;
        for (x, y) in xs.iter().zip(ours) {
            let exact = (*x as f64) * 0.5 * (1.0 + libm_erf(*x as f64 / 2f64.sqrt()));
            assert!(
                (y as f64 - exact).abs() < 2e-7 * (1.0 + x.abs() as f64),
                "{x}: {y} vs {exact}"
            );
        }
        Ok(())
    }

    /// The vector kernels of every instruction set this CPU runs compute the scalar function
    /// bit for bit (tail lanes included).
    #[test]
    fn vector_equals_scalar() {
        let xs: Vec<f32> = (-40_001..=40_001).map(|i| i as f32 * 3.1e-4).collect();
        for isa in crate::kernels::cpu::available_isas() {
            let mut v = xs.clone();
            crate::kernels::simd::dispatch_at(isa, GeluSlice(&mut v));
            for (x, y) in xs.iter().zip(&v) {
                assert_eq!(y.to_bits(), gelu_scalar(*x).to_bits(), "{isa} {x}");
            }
            let mut nan = [f32::NAN, 1.0, f32::INFINITY, f32::NEG_INFINITY];
            crate::kernels::simd::dispatch_at(isa, GeluSlice(&mut nan));
            assert!(nan[0].is_nan() && nan[2] == f32::INFINITY, "{isa} {nan:?}");
        }
    }

    /// erf in f64 through candle's exact unary op.
    fn libm_erf(x: f64) -> f64 {
        Tensor::new(&[x], &candle_core::Device::Cpu)
            .and_then(|t| t.erf())
            .and_then(|t| t.to_vec1::<f64>())
            .map(|v| v[0])
            .unwrap_or(f64::NAN)
    }
}
