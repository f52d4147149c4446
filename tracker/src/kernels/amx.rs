//! Intel AMX tile products: `C += A B` with bf16 inputs and f32 accumulation (`tdpbf16ps`), for
//! the bf16 fast mode's matrix products on CPUs that have AMX-BF16 (Sapphire Rapids and later).
//!
//! One tile multiply does 16 x 16 x 32 multiply-adds, 16 times the work of an AVX512-BF16
//! `vdpbf16ps`; the products of [`super::linear_bf16`] and [`super::conv::pointwise_bf16`] hand
//! their 16-aligned parts here and keep their AVX-512 kernels for the edges.
//!
//! Operands are in the layouts those kernels already pack: `A` is `m` rows of `kp` bf16 pairs
//! (`(a[i][2k], a[i][2k+1])` as one `u32`), `B` is `kp` rows of `n` pairs (`(b[2k][j],
//! b[2k+1][j])`, the layout the tile multiply reads), `C` is `m` rows of `n` f32. The sums are
//! the same as `vdpbf16ps`'s up to the order of the f32 additions.
//!
//! [`gemm_split`] is the f32-accurate variant ("bf16x3"): each f32 operand is split into a bf16
//! head and a bf16 tail (`x - head`), and `A B ~ Ah Bh + Ah Bt + At Bh` with the tail-times-tail
//! term (relative size 2^-16) left out. Three tile products instead of one, relative error
//! near 1e-5 instead of bf16's 1e-3: for products whose inputs cannot take bf16 rounding (the
//! image encoder's).
//!
//! Tiles are configured per call (`ldtilecfg` and `tilerelease` around each product), so no
//! state crosses calls, tasks or threads.

// The bf16 kernels run on x86_64 only (AVX512-BF16, AMX): elsewhere `set_precision` refuses
// bf16 before they are reached, so parts of their packing go unread there.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

/// Rows of a tile, f32 columns of an accumulator tile and bf16 pairs of an input tile row.
pub(crate) const TILE: usize = 16;

/// Whether the products here run on this CPU (AMX-TILE + AMX-BF16, and the operating system
/// lets this process use the tile state); see [`super::cpu::amx_bf16`].
pub(crate) fn available() -> bool {
    super::cpu::amx_bf16()
}

/// `C[m x n] += A[m x kp] B[kp x n]` (bf16 pairs in, f32 out; layouts in the module docs). `m`,
/// `n` and `kp` must be multiples of [`TILE`]; strides are in elements (`u32` pairs, `f32`).
///
/// # Safety
/// [`available`] must be true; `a` must address `m` rows `lda` apart of `kp` pairs, `b` `kp`
/// rows `ldb` apart of `n` pairs, `c` `m` rows `ldc` apart of `n` values, writable by this
/// caller alone.
pub(crate) unsafe fn gemm(
    a: *const u32,
    lda: usize,
    b: BMatrix,
    c: *mut f32,
    ldc: usize,
    (m, n, kp): (usize, usize, usize),
) {
    // SAFETY: per the caller.
    unsafe { products(Operands::Plain(a), lda, b, c, ldc, (m, n, kp)) }
}

/// The operands of one product: `A B`, or the split `Ah Bh + Ah Bt + At Bh`.
#[derive(Clone, Copy)]
enum Operands {
    /// `A` (with `B` from the [`BMatrix`]).
    Plain(*const u32),
    /// `A`'s head and tail, and `B`'s tail (its head from the [`BMatrix`]).
    Split {
        a_head: *const u32,
        a_tail: *const u32,
        b_tail: *const u32,
    },
}

/// `C += A B` for `operands`, with the tile state configured around it.
///
/// # Safety
/// As [`gemm`], for every operand.
unsafe fn products(
    operands: Operands,
    lda: usize,
    layout: BMatrix,
    c: *mut f32,
    ldc: usize,
    (m, n, kp): (usize, usize, usize),
) {
    debug_assert!(m % TILE == 0 && n % TILE == 0 && kp % TILE == 0);
    // SAFETY: per the caller (the tile state is this thread's until `release`).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        x86::configure();
        x86::blocks(operands, lda, layout, c, ldc, (m, n, kp));
        x86::release();
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (operands, lda, layout, c, ldc, m, n, kp);
}

/// Where `B`'s pairs lie: element `(k, j)` (pair row `k`, column `j`) at
/// `ptr + k * row_step + (j / 16) * tile_step + j % 16`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BMatrix {
    pub(crate) ptr: *const u32,
    row_step: usize,
    tile_step: usize,
}

impl BMatrix {
    /// Rows of pairs `ldb` apart, columns contiguous.
    pub(crate) fn rows(ptr: *const u32, ldb: usize) -> Self {
        Self {
            ptr,
            row_step: ldb,
            tile_step: TILE,
        }
    }

    /// Panels of 16 columns, `panel` pairs apart, each `kp` rows of 16 (the keys of
    /// [`super::attention::bf16`]).
    pub(crate) fn panels(ptr: *const u32, panel: usize) -> Self {
        Self {
            ptr,
            row_step: TILE,
            tile_step: panel,
        }
    }
}

/// [`gemm`] with each operand given as bf16 head and tail (`x ~ head + tail`):
/// `C += Ah Bh + Ah Bt + At Bh`.
///
/// # Safety
/// As [`gemm`], for each of the four operands (`a`'s two share `lda`, `b`'s two the layout).
pub(crate) unsafe fn gemm_split(
    (a_head, a_tail): (*const u32, *const u32),
    lda: usize,
    (b_head, b_tail): (BMatrix, *const u32),
    c: *mut f32,
    ldc: usize,
    (m, n, kp): (usize, usize, usize),
) {
    let operands = Operands::Split {
        a_head,
        a_tail,
        b_tail,
    };
    // SAFETY: per the caller.
    unsafe { products(operands, lda, b_head, c, ldc, (m, n, kp)) }
}

/// A buffer whose first element sits on a 64-byte boundary (a cache line, and a tile row):
/// heap buffers are only 16-byte aligned, and 64-byte loads of unaligned rows touch two lines.
#[derive(Debug, Default)]
pub(crate) struct Aligned<T> {
    buf: Vec<T>,
    offset: usize,
    len: usize,
}

/// bf16 pairs on a cache line (packed weights, keys, values, inputs).
pub(crate) type AlignedPairs = Aligned<u32>;

impl<T: Copy + Default> Clone for Aligned<T> {
    /// A copy on a cache line of its own (a cloned `Vec` lands elsewhere, so the original's
    /// offset would not align it).
    fn clone(&self) -> Self {
        let mut copy = Self::zeroed(self.len);
        copy.as_mut_slice().copy_from_slice(self.as_slice());
        copy
    }
}

impl<T: Copy + Default> Aligned<T> {
    /// `len` zeros (`T::default()`).
    pub(crate) fn zeroed(len: usize) -> Self {
        // One cache line of slack: the first aligned element is at most 64 bytes in.
        let slack = 64 / std::mem::size_of::<T>().max(1);
        let buf = vec![T::default(); len + slack];
        let offset = buf.as_ptr().align_offset(64).min(slack);
        Self { buf, offset, len }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        &self.buf[self.offset..self.offset + self.len]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.buf[self.offset..self.offset + self.len]
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// `x` rounded up to a multiple of [`TILE`].
pub(crate) fn round_up(x: usize) -> usize {
    x.div_ceil(TILE) * TILE
}

/// Splits `x` into bf16 head and tail bits, `(head, tail)`: `head` is `x` rounded to bf16
/// (nearest even), `tail` the rest rounded to bf16, so `head + tail` holds 16 of `x`'s 24
/// significand bits.
pub(crate) fn split_bits(x: f32) -> (u32, u32) {
    let head = half::bf16::from_f32(x);
    let tail = half::bf16::from_f32(x - head.to_f32());
    (u32::from(head.to_bits()), u32::from(tail.to_bits()))
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;

    use super::TILE;

    /// `ldtilecfg`'s operand: palette 1, every one of the 8 tiles 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        bytes_per_row: [u16; 16],
        rows: [u8; 16],
    }

    static CONFIG: TileConfig = TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
        rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
    };

    /// Loads the tile configuration (tiles 0-3: accumulators, 4-5: `A`, 6-7: `B`).
    ///
    /// # Safety
    /// The CPU must have AMX-TILE and the process the permission to use it.
    pub(super) unsafe fn configure() {
        // SAFETY: `CONFIG` is a valid 64-byte palette-1 configuration.
        unsafe {
            asm!("ldtilecfg [{0}]", in(reg) &CONFIG as *const TileConfig, options(nostack, readonly));
        }
    }

    /// Returns the tile state to its initial (unused) form.
    ///
    /// # Safety
    /// As [`configure`].
    pub(super) unsafe fn release() {
        // SAFETY: always valid once the CPU has AMX-TILE.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    /// Loads tile `T` from `rows` rows `stride` bytes apart.
    macro_rules! load {
        ($tile:literal, $ptr:expr, $stride:expr) => {
            asm!(
                concat!("tileloadd tmm", $tile, ", [{p} + {s}*1]"),
                p = in(reg) $ptr,
                s = in(reg) $stride,
                options(nostack, readonly)
            )
        };
    }

    /// Stores tile `T` to rows `stride` bytes apart.
    macro_rules! store {
        ($tile:literal, $ptr:expr, $stride:expr) => {
            asm!(
                concat!("tilestored [{p} + {s}*1], tmm", $tile),
                p = in(reg) $ptr,
                s = in(reg) $stride,
                options(nostack)
            )
        };
    }

    /// `tmm C += tmm A . tmm B`.
    macro_rules! dot {
        ($c:literal, $a:literal, $b:literal) => {
            asm!(
                concat!("tdpbf16ps tmm", $c, ", tmm", $a, ", tmm", $b),
                options(nostack, nomem)
            )
        };
    }

    /// Every 32 x 32 block of `C` (16-row / 16-column halves at the edges) gets the product of
    /// `operands`, all in the shared strides.
    ///
    /// # Safety
    /// Tiles configured; operands as in [`super::gemm`].
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn blocks(
        operands: super::Operands,
        lda: usize,
        layout: super::BMatrix,
        c: *mut f32,
        ldc: usize,
        (m, n, kp): (usize, usize, usize),
    ) {
        let steps = |len: usize| {
            let mut out = Vec::with_capacity(len / TILE);
            let mut x = 0;
            while x < len {
                let two = len - x >= 2 * TILE;
                out.push((x, two));
                x += if two { 2 * TILE } else { TILE };
            }
            out
        };
        let (rows, cols) = (steps(m), steps(n));
        // The smaller operand in the inner loop: its panels are read again for every panel of
        // the larger one, from L1 when it fits there (a conv task's packed pixels, a linear
        // task's rows), while each panel of the larger one is read once.
        if m >= n {
            for &(i, two_rows) in &rows {
                for &(j, two_cols) in &cols {
                    // SAFETY: per the caller.
                    unsafe {
                        block(
                            operands,
                            lda,
                            layout,
                            c,
                            ldc,
                            kp,
                            (i, two_rows),
                            (j, two_cols),
                        )
                    };
                }
            }
        } else {
            for &(j, two_cols) in &cols {
                for &(i, two_rows) in &rows {
                    // SAFETY: per the caller.
                    unsafe {
                        block(
                            operands,
                            lda,
                            layout,
                            c,
                            ldc,
                            kp,
                            (i, two_rows),
                            (j, two_cols),
                        )
                    };
                }
            }
        }
    }

    /// One block of `C`: rows `i..i+16` (`+32` with `two_rows`), columns `j..j+16` (`+32`).
    ///
    /// # Safety
    /// As [`blocks`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn block(
        operands: super::Operands,
        lda: usize,
        layout: super::BMatrix,
        c: *mut f32,
        ldc: usize,
        kp: usize,
        (i, two_rows): (usize, bool),
        (j, two_cols): (usize, bool),
    ) {
        let (sa, sb, sc) = (lda * 4, layout.row_step * 4, ldc * 4);
        let (next_row, next_col) = (TILE * lda, layout.tile_step);
        // SAFETY: rows `i..i+16(32)`, columns `j..j+16(32)` of `C`, per the caller.
        unsafe {
            let c00 = c.add(i * ldc + j);
            let c10 = c00.add(TILE * ldc);
            load!(0, c00, sc);
            if two_cols {
                load!(1, c00.add(TILE), sc);
            }
            if two_rows {
                load!(2, c10, sc);
                if two_cols {
                    load!(3, c10.add(TILE), sc);
                }
            }
            let mut k = 0;
            while k < kp {
                let a_at = i * lda + k;
                let b_at = k * layout.row_step + j / TILE * layout.tile_step;
                match operands {
                    super::Operands::Plain(a) => {
                        let (a0, b0) = (a.add(a_at), layout.ptr.add(b_at));
                        load!(4, a0, sa);
                        load!(6, b0, sb);
                        dot!(0, 4, 6);
                        if two_cols {
                            load!(7, b0.add(next_col), sb);
                            dot!(1, 4, 7);
                        }
                        if two_rows {
                            load!(5, a0.add(next_row), sa);
                            dot!(2, 5, 6);
                            if two_cols {
                                dot!(3, 5, 7);
                            }
                        }
                    }
                    // The three products of one step of `k` share their tile loads (8 loads
                    // for 12 multiplies in a full block, against 12 with one product after
                    // the other): `Ah Bt`, then `Ah Bh` with `Ah` kept, then `At Bh` with
                    // `Bh` kept.
                    super::Operands::Split {
                        a_head,
                        a_tail,
                        b_tail,
                    } => {
                        let (ah, at) = (a_head.add(a_at), a_tail.add(a_at));
                        let (bh, bt) = (layout.ptr.add(b_at), b_tail.add(b_at));
                        load!(4, ah, sa);
                        load!(6, bt, sb);
                        dot!(0, 4, 6);
                        if two_cols {
                            load!(7, bt.add(next_col), sb);
                            dot!(1, 4, 7);
                        }
                        if two_rows {
                            load!(5, ah.add(next_row), sa);
                            dot!(2, 5, 6);
                            if two_cols {
                                dot!(3, 5, 7);
                            }
                        }
                        load!(6, bh, sb);
                        dot!(0, 4, 6);
                        if two_rows {
                            dot!(2, 5, 6);
                        }
                        if two_cols {
                            load!(7, bh.add(next_col), sb);
                            dot!(1, 4, 7);
                            if two_rows {
                                dot!(3, 5, 7);
                            }
                        }
                        load!(4, at, sa);
                        dot!(0, 4, 6);
                        if two_cols {
                            dot!(1, 4, 7);
                        }
                        if two_rows {
                            load!(5, at.add(next_row), sa);
                            dot!(2, 5, 6);
                            if two_cols {
                                dot!(3, 5, 7);
                            }
                        }
                    }
                }
                k += TILE;
            }
            store!(0, c00, sc);
            if two_cols {
                store!(1, c00.add(TILE), sc);
            }
            if two_rows {
                store!(2, c10, sc);
                if two_cols {
                    store!(3, c10.add(TILE), sc);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Aligned buffers and their clones start on a cache line and hold the same values.
    #[test]
    fn aligned_pairs_and_clones_start_on_a_cache_line() {
        for len in [1usize, 17, 1000, 70_000] {
            let mut a = AlignedPairs::zeroed(len);
            a.as_mut_slice()
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = i as u32);
            let b = a.clone();
            for p in [&a, &b] {
                assert_eq!(p.as_slice().as_ptr() as usize % 64, 0, "{len}");
                assert_eq!(p.len(), len);
            }
            assert_eq!(a.as_slice(), b.as_slice());
        }
    }

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// `A` (m x k, row-major f32) as pair rows.
    fn pairs_of_rows(a: &[f32], m: usize, k: usize, bits: impl Fn(f32) -> u32) -> AlignedPairs {
        let mut p = AlignedPairs::zeroed(m * k / 2);
        for i in 0..m {
            for kk in 0..k / 2 {
                p.as_mut_slice()[i * k / 2 + kk] =
                    bits(a[i * k + 2 * kk]) | (bits(a[i * k + 2 * kk + 1]) << 16);
            }
        }
        p
    }

    /// `B` (k x n, row-major f32) in the tile multiply's layout.
    fn pairs_of_columns(b: &[f32], k: usize, n: usize, bits: impl Fn(f32) -> u32) -> AlignedPairs {
        let mut p = AlignedPairs::zeroed(k / 2 * n);
        for kk in 0..k / 2 {
            for j in 0..n {
                p.as_mut_slice()[kk * n + j] =
                    bits(b[2 * kk * n + j]) | (bits(b[(2 * kk + 1) * n + j]) << 16);
            }
        }
        p
    }

    fn bf16_value(bits: u32) -> f64 {
        f64::from(half::bf16::from_bits(bits as u16).to_f32())
    }

    /// The tile product against the same sums in f64 of the bf16-rounded inputs, at every
    /// block shape (two and one tile rows and columns), accumulating onto existing values.
    #[test]
    fn gemm_matches_f64_sums_of_bf16_inputs() {
        if !available() {
            eprintln!("skipped: no AMX-BF16 here");
            return;
        }
        for (m, n, k) in [(16usize, 16usize, 32usize), (48, 80, 64), (64, 32, 256)] {
            let (a, b) = (values(m * k, 1), values(k * n, 2));
            let start = values(m * n, 3);
            let head = |x: f32| split_bits(x).0;
            let (pa, pb) = (
                pairs_of_rows(&a, m, k, head),
                pairs_of_columns(&b, k, n, head),
            );
            let mut c = start.clone();
            // SAFETY: `available()`; the buffers have the stated shapes.
            unsafe {
                gemm(
                    pa.as_slice().as_ptr(),
                    k / 2,
                    BMatrix::rows(pb.as_slice().as_ptr(), n),
                    c.as_mut_ptr(),
                    n,
                    (m, n, k / 2),
                )
            };
            let mut worst = 0f64;
            for i in 0..m {
                for j in 0..n {
                    let mut want = f64::from(start[i * n + j]);
                    for kk in 0..k {
                        want += bf16_value(head(a[i * k + kk])) * bf16_value(head(b[kk * n + j]));
                    }
                    worst = worst.max((f64::from(c[i * n + j]) - want).abs());
                }
            }
            assert!(worst < 1e-4 * k as f64, "{m}x{n}x{k}: worst {worst:e}");
        }
    }

    /// The split product stays within 1e-4 of the f64 product of the f32 inputs (plain bf16
    /// is off by ~1e-2 on these sums).
    #[test]
    fn split_gemm_is_f32_accurate() {
        if !available() {
            eprintln!("skipped: no AMX-BF16 here");
            return;
        }
        // Full 32 x 32 blocks and 16-row / 16-column edges, accumulating onto existing values.
        for (m, n, k) in [(32usize, 48usize, 384usize), (48, 16, 64), (16, 80, 96)] {
            let (a, b) = (values(m * k, 4), values(k * n, 5));
            let start = values(m * n, 6);
            let head = |x: f32| split_bits(x).0;
            let tail = |x: f32| split_bits(x).1;
            let (ah, at) = (pairs_of_rows(&a, m, k, head), pairs_of_rows(&a, m, k, tail));
            let (bh, bt) = (
                pairs_of_columns(&b, k, n, head),
                pairs_of_columns(&b, k, n, tail),
            );
            let mut c = start.clone();
            // SAFETY: `available()`; the buffers have the stated shapes.
            unsafe {
                gemm_split(
                    (ah.as_slice().as_ptr(), at.as_slice().as_ptr()),
                    k / 2,
                    (
                        BMatrix::rows(bh.as_slice().as_ptr(), n),
                        bt.as_slice().as_ptr(),
                    ),
                    c.as_mut_ptr(),
                    n,
                    (m, n, k / 2),
                )
            };
            let mut worst = 0f64;
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = f64::from(start[i * n + j])
                        + (0..k)
                            .map(|kk| f64::from(a[i * k + kk]) * f64::from(b[kk * n + j]))
                            .sum::<f64>();
                    worst = worst.max((f64::from(c[i * n + j]) - want).abs());
                }
            }
            assert!(worst < 1e-4, "{m}x{n}x{k}: worst {worst:e}");
        }
    }
}
