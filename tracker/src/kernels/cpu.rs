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
    /// AMX-TILE + AMX-BF16 in the CPU, the tile state granted to this process by the operating
    /// system, and not switched off with `EDGETAM_AMX=0`.
    amx_bf16: bool,
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
                amx_bf16: amx_usable(),
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

/// AMX tiles with bf16 products ([`super::amx`]): the bf16 mode's matrix products, and the
/// f32-accurate split products that let the image encoder join that mode.
pub(crate) fn amx_bf16() -> bool {
    features().amx_bf16
}

/// Whether this CPU has AMX-TILE and AMX-BF16 and Linux lets the process use the tile data
/// (it must be asked for once per process, `ARCH_REQ_XCOMP_PERM`); `EDGETAM_AMX=0` says no, to
/// compare with the AVX-512 kernels.
#[cfg(target_arch = "x86_64")]
fn amx_usable() -> bool {
    if std::env::var("EDGETAM_AMX").is_ok_and(|v| v.trim() == "0") {
        return false;
    }
    // CPUID leaf 7, sub-leaf 0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
    // CPUID exists on every x86_64 CPU; leaf 7 answers zeros where it is not defined.
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    let has = |bit: u32| leaf7.edx & (1 << bit) != 0;
    if !(has(22) && has(24) && is_x86_feature_detected!("avx512f")) {
        return false;
    }
    request_tile_data()
}

#[cfg(not(target_arch = "x86_64"))]
fn amx_usable() -> bool {
    false
}

/// Asks Linux for the AMX tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`);
/// without it the first tile instruction kills the process.
#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
fn request_tile_data() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it only changes this process's
    // permitted extended state.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(all(
    target_arch = "x86_64",
    not(all(target_os = "linux", target_env = "gnu"))
))]
fn request_tile_data() -> bool {
    false
}

/// AVX-512 VNNI (int8 dot products), for the CPU description; no kernel uses it yet.
#[allow(dead_code)]
pub(crate) fn avx512_vnni() -> bool {
    features().avx512vnni
}
