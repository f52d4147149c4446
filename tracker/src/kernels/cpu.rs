//! The CPU's vector extensions, probed once per process: every kernel that picks a code path
//! by instruction set asks here (and nowhere else), so one place says which paths exist.
//!
//! The probe finds the widest [`Isa`] the CPU runs; `EDGETAM_ISA` may cap it lower (to test or
//! time the AVX2 and portable paths on an AVX-512 machine). A cap the CPU cannot run is an error
//! ([`isa`]), and the kernels then keep the probe's path: a cap only ever lowers the width.

use std::sync::OnceLock;

/// The vector instruction set the CPU kernels run with: each kernel has one source, and each
/// of these its register tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// No vector extension assumed: plain Rust loops at the target's baseline width.
    Portable,
    /// ARM64 Advanced SIMD (128-bit; baseline on every aarch64 CPU).
    Neon,
    /// x86-64 AVX2 with FMA (256-bit): Intel since Haswell, AMD since Zen.
    Avx2,
    /// x86-64 AVX-512F (512-bit); the bf16 fast mode also needs AVX512-BF16.
    Avx512,
}

impl Isa {
    /// Every value, widest first.
    pub const ALL: [Isa; 4] = [Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Portable];

    /// The name `EDGETAM_ISA` takes and the tools print.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Neon => "neon",
            Isa::Portable => "portable",
        }
    }

    /// Whether this CPU can run the path.
    pub fn runs_here(self) -> bool {
        runs(self)
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = IsaError;

    fn from_str(s: &str) -> Result<Self, IsaError> {
        let s = s.trim().to_ascii_lowercase();
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name() == s)
            .ok_or(IsaError::Unknown { value: s })
    }
}

/// Why `EDGETAM_ISA` cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    /// The value names no instruction set.
    #[error("EDGETAM_ISA={value:?} is not one of avx512, avx2, neon, portable (this CPU runs {})", names(&available_isas()))]
    Unknown { value: String },
    /// The value names an instruction set this CPU lacks.
    #[error("EDGETAM_ISA={requested} cannot run here: this CPU runs {}", names(&available_isas()))]
    NotOnThisCpu { requested: Isa },
}

fn names(isas: &[Isa]) -> String {
    isas.iter().map(|i| i.name()).collect::<Vec<_>>().join(", ")
}

/// The paths this CPU can run, widest first (always ending in [`Isa::Portable`]).
pub fn available_isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|&isa| runs(isa)).collect()
}

/// Whether this CPU can run `isa` (whatever the cap).
pub(crate) fn runs(isa: Isa) -> bool {
    let p = probed();
    match isa {
        Isa::Avx512 => p.avx512f,
        Isa::Avx2 => p.avx2 && p.fma,
        Isa::Neon => cfg!(target_arch = "aarch64"),
        Isa::Portable => true,
    }
}

/// The instruction set the kernels run with: the widest this CPU has, or the one `EDGETAM_ISA`
/// names. Err when `EDGETAM_ISA` names something unknown or beyond this CPU (the kernels then
/// run the widest path; loading a model reports the error).
pub fn isa() -> Result<Isa, IsaError> {
    state().requested.clone()
}

/// Whether the CPU has scalar fused multiply-add (x86 FMA3; elsewhere `f32::mul_add` is an
/// instruction of the target or a library call either way, and nothing asks).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_scalar_fma() -> bool {
    probed().fma
}

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

/// What the CPU has, before any cap.
fn probed() -> Features {
    static PROBED: OnceLock<Features> = OnceLock::new();
    *PROBED.get_or_init(|| {
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

/// The cap read from `EDGETAM_ISA` and what follows from it, read once.
struct State {
    /// The probe lowered to `in_effect`.
    features: Features,
    in_effect: Isa,
    /// What `EDGETAM_ISA` asked for (the widest when unset), or why it cannot be had.
    requested: Result<Isa, IsaError>,
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        let available = available_isas();
        let widest = available.first().copied().unwrap_or(Isa::Portable);
        let requested = match std::env::var("EDGETAM_ISA") {
            Ok(v) if !v.trim().is_empty() => v.parse::<Isa>().and_then(|isa| {
                if available.contains(&isa) {
                    Ok(isa)
                } else {
                    Err(IsaError::NotOnThisCpu { requested: isa })
                }
            }),
            _ => Ok(widest),
        };
        let in_effect = requested.clone().unwrap_or(widest);
        State {
            features: capped(probed(), in_effect),
            in_effect,
            requested,
        }
    })
}

/// `f` without the extensions beyond `isa`.
fn capped(f: Features, isa: Isa) -> Features {
    match isa {
        Isa::Avx512 => f,
        Isa::Avx2 => Features {
            avx2: f.avx2,
            fma: f.fma,
            ..Features::default()
        },
        Isa::Neon | Isa::Portable => Features::default(),
    }
}

/// The ISA the kernels run with (the widest when `EDGETAM_ISA` is invalid: see [`isa`]).
#[inline]
pub(crate) fn in_effect() -> Isa {
    state().in_effect
}

fn features() -> Features {
    state().features
}

/// AVX-512F + BW + BF16 (`vdpbf16ps`, `vcvtne2ps2bf16`): the bf16 fast mode's products.
pub(crate) fn bf16() -> bool {
    let f = features();
    f.avx512f && f.avx512bw && f.avx512bf16
}

/// Why the bf16 fast mode cannot run in this process, or `None` when it can ([`bf16`]). The
/// check reads the features *after* the `EDGETAM_ISA` cap, as every bf16 kernel does: under
/// `EDGETAM_ISA=avx2` or `portable` the AVX-512 bf16 kernels never run, so the mode is
/// unavailable even on a CPU that has AVX512-BF16 (which is how the refusal is tested there).
pub(crate) fn bf16_unavailable() -> Option<String> {
    if bf16() {
        return None;
    }
    let p = probed();
    let runs = names(&available_isas());
    Some(if p.avx512f && p.avx512bw && p.avx512bf16 {
        format!(
            "it needs the avx512 kernels, and EDGETAM_ISA={} caps them (this CPU runs {runs})",
            in_effect()
        )
    } else {
        format!("it needs a CPU with AVX512-BF16 (this CPU runs {runs})")
    })
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
    if !(has(22) && has(24) && std::arch::is_x86_feature_detected!("avx512f")) {
        return false;
    }
    request_tile_data()
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
