//! GELU (exact, erf form) as a multi-threaded CPU kernel.
//!
//! candle's `gelu_erf` calls scalar `libm::erff` on one thread; in RepViT at 1024 that was a
//! third of the backbone's time. This kernel evaluates erf the way PyTorch's AVX2
//! `Vectorized<float>::erf` does (Abramowitz-Stegun 7.1.26, absolute error < 1.5e-7, the same
//! formula the reference runs, with its fused multiply-adds), with a branch-free `exp` the
//! compiler vectorizes, split over threads. Other devices and dtypes use candle's `gelu_erf`.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};

use crate::kernels::{f32_slice, threads};

/// `x * 0.5 * (1 + erf(x / sqrt 2))`.
pub(crate) fn gelu(x: &Tensor) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == DType::F32 {
        x.contiguous()?.apply_op1_no_bwd(&Gelu)
    } else {
        x.gelu_erf()
    }
}

struct Gelu;

/// `e^x` for `x <= 0` (Cephes `expf`: round to a power of two, degree-6 polynomial on the rest);
/// relative error ~1e-7. Rounding uses the 1.5 * 2^23 trick so it needs no libm call.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let n = x.mul_add(std::f32::consts::LOG2_E, ROUND) - ROUND;
    let r = (-n).mul_add(-2.121_944_4e-4, (-n).mul_add(0.693_359_4, x));
    let p = 1.987_569_1e-4f32;
    let p = p.mul_add(r, 1.398_199_9e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 1.666_666_5e-1);
    let p = p.mul_add(r, 0.5);
    let p = (p * r).mul_add(r, r + 1.0);
    // 2^n without a float->int cast (which does not vectorize): `n + 127` lands in the low
    // mantissa bits of `ROUND + n + 127` (n is integral in [-126, 0]).
    let biased = (n + (ROUND + 127.0))
        .to_bits()
        .wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(biased << 23);
    p * scale
}

/// PyTorch's vectorized float `erf` (see module docs), with its fused multiply-adds.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / 0.327_591_1f32.mul_add(a, 1.0);
    let r = 1.061_405_4f32.mul_add(t, -1.453_152);
    let r = r.mul_add(t, 1.421_413_8);
    let r = r.mul_add(t, -0.284_496_74);
    let r = r.mul_add(t, 0.254_829_6);
    let y = (-(exp_neg(-(x * x)) * t)).mul_add(r, 1.0);
    y.copysign(x)
}

#[inline(always)]
pub(crate) fn gelu_scalar(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU over a slice in place, in the widest vectors the CPU has. Only the vector width
/// changes (the multiply-adds are explicit `mul_add`s, exactly rounded at any width), so results
/// are bit-identical to the scalar loop.
pub(crate) fn gelu_slice(data: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            unsafe { gelu_slice_avx512(data) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            unsafe { gelu_slice_avx2(data) };
            return;
        }
    }
    for x in data.iter_mut() {
        *x = gelu_scalar(*x);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gelu_slice_avx512(data: &mut [f32]) {
    for x in data.iter_mut() {
        *x = gelu_scalar(*x);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_slice_avx2(data: &mut [f32]) {
    for x in data.iter_mut() {
        *x = gelu_scalar(*x);
    }
}

/// GELU applied in place, split over threads (the fused 1x1 conv's epilogue).
pub(crate) fn gelu_in_place(data: &mut [f32]) {
    let threads = threads();
    let per = data.len().div_ceil(threads).max(1 << 14);
    std::thread::scope(|scope| {
        for chunk in data.chunks_mut(per) {
            scope.spawn(move || {
                gelu_slice(chunk);
            });
        }
    });
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

    /// erf in f64 through candle's exact unary op.
    fn libm_erf(x: f64) -> f64 {
        Tensor::new(&[x], &candle_core::Device::Cpu)
            .and_then(|t| t.erf())
            .and_then(|t| t.to_vec1::<f64>())
            .map(|v| v[0])
            .unwrap_or(f64::NAN)
    }

    #[test]
    fn exp_matches_std() {
        for i in 0..2000 {
            let x = -(i as f32) * 0.05;
            let e = (x as f64).exp();
            let ours = exp_neg(x) as f64;
            assert!((ours - e).abs() <= 3e-7 * e + 1e-37, "{x}: {ours} vs {e}");
        }
    }
}

#[cfg(test)]
mod speed {
    /// `cargo test --release -p edgetam-tracker --lib repvit::gelu::speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn ns_per_element() {
        let mut v: Vec<f32> = (0..1 << 16).map(|i| (i as f32 / 8192.0) - 4.0).collect();
        let t = std::time::Instant::now();
        for _ in 0..200 {
            super::gelu_slice(&mut v);
            v.iter_mut().for_each(|x| *x -= 0.5);
        }
        println!(
            "gelu_slice: {:.3} ns per element",
            t.elapsed().as_secs_f64() * 1e9 / (200.0 * v.len() as f64)
        );
    }
}
