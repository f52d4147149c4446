//! One kernel source for every vector width: a kernel is written once against [`F32s`] (a
//! vector of f32 lanes) as a [`Kernel`], and [`dispatch`] runs it compiled for the instruction
//! set in effect ([`cpu::in_effect`], the one probe): AVX-512F (16 lanes, 32 registers), AVX2 +
//! FMA (8 lanes, 16 registers), NEON (4 lanes, 32 registers) or portable Rust (8 lanes of plain
//! floats). Each kernel picks its register tile from the vector's [`F32s::LANES`] and
//! [`F32s::REGISTERS`]; the rest of its source is shared.
//!
//! Why our own small trait and not `pulp`: the probe and the `EDGETAM_ISA` cap stay in
//! [`cpu`] (pulp probes on its own, and its AVX-512 token also needs BW/DQ/VL), the portable
//! fallback multiplies and adds unfused instead of calling libm's `fmaf`, and the kernels need
//! only the dozen operations below.
//!
//! [`F32s::mul_add`] is fused on every SIMD path, so kernels that sum in the same order give the
//! same bits on AVX-512, AVX2 and NEON; only the portable path (no FMA assumed) rounds twice.
//!
//! Everything a [`Kernel::run`] reaches must be `#[inline(always)]` (as the methods here are):
//! it is then compiled inside the entry function that enables the instruction set.

use super::cpu::{self, Isa};

/// A vector of f32 lanes in registers.
///
/// # Safety
/// The methods may only run where the CPU has the vector's instruction set: inside a
/// [`Kernel::run`] reached through [`dispatch`] / [`dispatch_at`]. Pointers must address
/// `LANES` readable (loads) or writable (stores) floats, or `n` for the partial forms.
pub(crate) trait F32s: Copy {
    /// f32 values per vector.
    const LANES: usize;
    /// Vector registers the ISA has (a tile's accumulators plus its loads must fit).
    const REGISTERS: usize;
    /// The instruction set this vector belongs to.
    const ISA: Isa;

    unsafe fn zero() -> Self;
    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    unsafe fn add(self, o: Self) -> Self;
    unsafe fn mul(self, o: Self) -> Self;
    unsafe fn div(self, o: Self) -> Self;
    unsafe fn max(self, o: Self) -> Self;
    unsafe fn min(self, o: Self) -> Self;
    /// `self * b + c`, rounded once on the SIMD paths (twice on the portable one).
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;

    /// The first `n < LANES` floats at `p`, the other lanes zero.
    #[inline(always)]
    unsafe fn load_partial(p: *const f32, n: usize) -> Self {
        let mut buf = [0f32; 16];
        // SAFETY: the caller says `p` holds `n` floats; `n < LANES <= 16`.
        unsafe {
            std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
            Self::load(buf.as_ptr())
        }
    }

    /// Writes the first `n < LANES` lanes to `p`.
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut f32, n: usize) {
        let mut buf = [0f32; 16];
        // SAFETY: `buf` holds `LANES <= 16` floats; the caller says `p` has room for `n`.
        unsafe {
            self.store(buf.as_mut_ptr());
            std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
        }
    }
}

/// A kernel written once for every [`F32s`]: [`dispatch`] calls `run` with the vector type of
/// the instruction set in effect.
pub(crate) trait Kernel {
    type Output;
    /// The kernel's body; `#[inline(always)]`, like everything it calls.
    fn run<V: F32s>(self) -> Self::Output;
}

/// Runs `kernel` at the instruction set in effect (the probe's widest, or `EDGETAM_ISA`'s).
#[inline(always)]
pub(crate) fn dispatch<K: Kernel>(kernel: K) -> K::Output {
    dispatch_at(cpu::in_effect(), kernel)
}

/// Runs `kernel` at `isa`, or at the portable path when this CPU cannot run `isa` (tests walk
/// every ISA with [`cpu::available_isas`]).
#[inline(always)]
pub(crate) fn dispatch_at<K: Kernel>(isa: Isa, kernel: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx512 && cpu::runs(Isa::Avx512) {
            #[target_feature(enable = "avx512f")]
            unsafe fn run<K: Kernel>(kernel: K) -> K::Output {
                kernel.run::<x86::Avx512>()
            }
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { run(kernel) };
        }
        if isa == Isa::Avx2 && cpu::runs(Isa::Avx2) {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn run<K: Kernel>(kernel: K) -> K::Output {
                kernel.run::<x86::Avx2>()
            }
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { run(kernel) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // NEON is part of every aarch64 target: no feature to enable.
        return kernel.run::<neon::Neon>();
    }
    let _ = isa;
    kernel.run::<Portable>()
}

/// Eight plain floats: the path without vector instructions (the compiler still vectorizes
/// its loops at the target's baseline width). Unfused multiply-add: without hardware FMA a
/// fused one is a slow library call. (The scalar helpers every path shares, `exp_neg` and
/// `gelu_scalar`, stay fused: [`crate::kernels::threads::with_scalar_fma`] runs them.)
#[derive(Clone, Copy)]
pub(crate) struct Portable([f32; 8]);

impl Portable {
    #[inline(always)]
    fn map2(self, o: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        Self(std::array::from_fn(|i| f(self.0[i], o.0[i])))
    }
}

impl F32s for Portable {
    const LANES: usize = 8;
    const REGISTERS: usize = 16;
    const ISA: Isa = Isa::Portable;

    #[inline(always)]
    unsafe fn zero() -> Self {
        Self([0.0; 8])
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Self([x; 8])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller says `p` holds 8 floats.
        Self(unsafe { p.cast::<[f32; 8]>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller says `p` has room for 8 floats.
        unsafe { p.cast::<[f32; 8]>().write_unaligned(self.0) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        self.map2(o, |a, b| a + b)
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        self.map2(o, |a, b| a * b)
    }
    #[inline(always)]
    unsafe fn div(self, o: Self) -> Self {
        self.map2(o, |a, b| a / b)
    }
    #[inline(always)]
    unsafe fn max(self, o: Self) -> Self {
        self.map2(o, f32::max)
    }
    #[inline(always)]
    unsafe fn min(self, o: Self) -> Self {
        self.map2(o, f32::min)
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i] * b.0[i] + c.0[i]))
    }
}

/// An [`F32s`] impl whose every method is one intrinsic of its instruction set (the x86 and
/// NEON vectors differ only in the intrinsics' names): `splat` (also `zero`) takes the lane
/// value, `store` the pointer first, `mul_add` computes `a * b + c` with one rounding, then the
/// lane-wise binary operations. Extra methods (the partial loads and stores where the ISA masks
/// them) follow.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! intrinsic_f32s {
    (
        $vector:ident: $lanes:literal lanes, $registers:literal registers, $isa:expr;
        splat $splat:path, load $load:path, store $store:path, mul_add $fma:expr;
        $($binary:ident $intrinsic:path),+;
        $($extra:tt)*
    ) => {
        // SAFETY (every method below): one intrinsic of the vector's instruction set, which the
        // trait's contract says the CPU has; pointers are the caller's, per the trait's contract.
        impl F32s for $vector {
            const LANES: usize = $lanes;
            const REGISTERS: usize = $registers;
            const ISA: Isa = $isa;

            #[inline(always)]
            unsafe fn zero() -> Self {
                Self(unsafe { $splat(0.0) })
            }
            #[inline(always)]
            unsafe fn splat(x: f32) -> Self {
                Self(unsafe { $splat(x) })
            }
            #[inline(always)]
            unsafe fn load(p: *const f32) -> Self {
                Self(unsafe { $load(p) })
            }
            #[inline(always)]
            unsafe fn store(self, p: *mut f32) {
                unsafe { $store(p, self.0) }
            }
            $(
                #[inline(always)]
                unsafe fn $binary(self, o: Self) -> Self {
                    Self(unsafe { $intrinsic(self.0, o.0) })
                }
            )+
            #[inline(always)]
            unsafe fn mul_add(self, b: Self, c: Self) -> Self {
                Self(unsafe { ($fma)(self.0, b.0, c.0) })
            }
            $($extra)*
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! The x86-64 vectors. Each method is one intrinsic; they inline into the entry function
    //! [`super::dispatch_at`] compiles with the instruction set enabled.
    use super::{F32s, Isa};
    use std::arch::x86_64::*;

    /// 16 lanes in a zmm register (AVX-512F).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512(__m512);

    /// 8 lanes in a ymm register (AVX2 + FMA).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2(__m256);

    intrinsic_f32s! {
        Avx512: 16 lanes, 32 registers, Isa::Avx512;
        splat _mm512_set1_ps, load _mm512_loadu_ps, store _mm512_storeu_ps, mul_add _mm512_fmadd_ps;
        add _mm512_add_ps, mul _mm512_mul_ps, div _mm512_div_ps, max _mm512_max_ps, min _mm512_min_ps;
        #[inline(always)]
        unsafe fn load_partial(p: *const f32, n: usize) -> Self {
            Self(unsafe { _mm512_maskz_loadu_ps(lanes_mask(n), p) })
        }
        #[inline(always)]
        unsafe fn store_partial(self, p: *mut f32, n: usize) {
            unsafe { _mm512_mask_storeu_ps(p, lanes_mask(n), self.0) }
        }
    }

    /// The mask of the first `n < 16` lanes.
    #[inline(always)]
    fn lanes_mask(n: usize) -> __mmask16 {
        ((1u32 << n.min(16)) - 1) as __mmask16
    }

    intrinsic_f32s! {
        Avx2: 8 lanes, 16 registers, Isa::Avx2;
        splat _mm256_set1_ps, load _mm256_loadu_ps, store _mm256_storeu_ps, mul_add _mm256_fmadd_ps;
        add _mm256_add_ps, mul _mm256_mul_ps, div _mm256_div_ps, max _mm256_max_ps, min _mm256_min_ps;
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    //! The ARM64 vector: NEON is baseline on aarch64, so its intrinsics need no entry function.
    use super::{F32s, Isa};
    use std::arch::aarch64::*;

    /// 4 lanes in a q register.
    #[derive(Clone, Copy)]
    pub(crate) struct Neon(float32x4_t);

    // NEON is baseline on aarch64.
    intrinsic_f32s! {
        Neon: 4 lanes, 32 registers, Isa::Neon;
        // vfmaq_f32(c, a, b) = c + a * b, one rounding.
        splat vdupq_n_f32, load vld1q_f32, store vst1q_f32, mul_add |a, b, c| vfmaq_f32(c, a, b);
        add vaddq_f32, mul vmulq_f32, div vdivq_f32, max vmaxq_f32, min vminq_f32;
    }
}
