//! The CPU's vector extensions, probed once per process: every kernel that picks a code path
//! by instruction set asks here (and nowhere else), so one place says which paths exist.

use std::sync::OnceLock;

/// Extensions the kernels have paths for.
#[derive(Debug, Clone, Copy, Default)]
struct Features {
    avx2: bool,
    fma: bool,
    avx512f: bool,
    avx512bw: bool,
    avx512bf16: bool,
    avx512vnni: bool,
}

fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            Features {
                avx2: std::arch::is_x86_feature_detected!("avx2"),
                fma: std::arch::is_x86_feature_detected!("fma"),
                avx512f: std::arch::is_x86_feature_detected!("avx512f"),
                avx512bw: std::arch::is_x86_feature_detected!("avx512bw"),
                avx512bf16: std::arch::is_x86_feature_detected!("avx512bf16"),
                avx512vnni: std::arch::is_x86_feature_detected!("avx512vnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Features::default()
        }
    })
}

/// AVX2 (256-bit integer and float vectors).
pub(crate) fn avx2() -> bool {
    features().avx2
}

/// AVX2 with fused multiply-add.
pub(crate) fn avx2_fma() -> bool {
    let f = features();
    f.avx2 && f.fma
}

/// AVX-512F: the 512-bit f32 paths (gemm tiles, wide elementwise loops).
pub(crate) fn avx512f() -> bool {
    features().avx512f
}

/// AVX-512F + BW + BF16 (`vdpbf16ps`, `vcvtne2ps2bf16`): the bf16 fast mode's products.
pub(crate) fn bf16() -> bool {
    let f = features();
    f.avx512f && f.avx512bw && f.avx512bf16
}

/// AVX-512 VNNI (int8 dot products), for the CPU description; no kernel uses it yet.
#[allow(dead_code)]
pub(crate) fn avx512_vnni() -> bool {
    features().avx512vnni
}
