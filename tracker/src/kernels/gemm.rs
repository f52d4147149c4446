//! Exact f32 matrix products with a register-tile kernel and pre-packed right-hand sides,
//! written once for every vector width ([`crate::kernels::simd`]).
//!
//! Why not the `gemm` crate candle ships: on stable Rust it runs its AVX2 16x6 kernel, and it
//! packs both operands on every call. The memory attention multiplies the same keys, values and
//! weights many times per frame (every query tile of the fused attention re-packs its key and
//! value tiles): `perf` put more than half of all cycles there, well below the FMA peak. Here the
//! right-hand side `B` is packed once (per attention call, or once at load for a weight) into
//! panels of [`NR`] columns, the left-hand side is read in place (its elements are broadcast
//! straight from memory), and a tile of `C` stays in registers for a whole `KC` block of the
//! inner dimension.
//!
//! The tile per instruction set ([`TileShape`]): AVX-512 12 rows x 32 columns (24 of 32 zmm),
//! AVX2 6 x 16 (12 of 16 ymm, two tiles per panel), NEON 6 x 16 (24 of 32 q registers), portable
//! 6 x 16. Every `C` element sums its `KC` block in `k` order with fused multiply-adds from
//! zero, then adds what `C` held: the same bits on AVX-512, AVX2 and NEON whatever the tile.
//! The portable path rounds the multiply and the add apart (float noise).

use crate::kernels::amx::Aligned;
use crate::kernels::simd::{F32s, Kernel};

/// Columns per packed panel (two zmm registers).
pub const NR: usize = 32;
/// Rows of `C` per register tile.
const MR: usize = 12;
/// Inner-dimension block: an `MR x KC` slice of `A` stays in L1 while the panels stream from L2.
const KC: usize = 256;
/// Panels swept per row block: `KC x NR x 8` floats (256 KiB) of `B` stay in L2 while every row
/// block of `A` passes over them.
const PANELS_PER_GROUP: usize = 8;
/// Rows per block of a [`PackedA`]: a multiple of every instruction set's tile rows (12 on
/// AVX-512, 6 on AVX2, NEON and the portable path), so that a tile never straddles two blocks.
const A_BLOCK: usize = 12;
/// Columns of a row-major `B` packed per task by [`gemm_rows`].
#[cfg(test)]
const NC: usize = NR * PANELS_PER_GROUP;

/// A right-hand side `B` (`k x n`) packed in panels of [`NR`] columns: panel `p` holds rows
/// `0..k`, each `NR` floats (columns `p*NR..p*NR+NR`, zero-padded past `n`).
///
/// The panels start on a cache line ([`Aligned`]): unaligned, each 64-byte panel load touched
/// two lines.
#[derive(Debug, Clone, Default)]
pub struct PackedB {
    data: Aligned<f32>,
    k: usize,
    n: usize,
    /// Floats between rows of a panel: [`NR`] in the panel layout, the row stride in the
    /// row-major one ([`Self::zeroed_row_major`]).
    row_stride: usize,
    /// Floats between panels: `k * NR` in the panel layout, [`NR`] in the row-major one.
    panel_stride: usize,
}

impl PackedB {
    /// Packs a row-major `k x n` matrix `b` with row stride `ldb`.
    pub fn from_rows(b: &[f32], k: usize, n: usize, ldb: usize) -> Self {
        let mut out = Self::zeroed(k, n);
        out.fill_from_rows(b, ldb);
        out
    }

    /// Packs `B = bt^T` where `bt` is a row-major `n x k` matrix with row stride `ldbt` (the
    /// keys of an attention, or a linear layer's `[out, in]` weight).
    pub fn from_transposed(bt: &[f32], n: usize, k: usize, ldbt: usize) -> Self {
        let mut out = Self::zeroed(k, n);
        out.fill_from_transposed(bt, ldbt);
        out
    }

    /// A zeroed buffer for `k x n`, to be filled in place later (per-worker scratch).
    pub fn zeroed(k: usize, n: usize) -> Self {
        Self {
            data: Aligned::zeroed(n.div_ceil(NR) * k * NR),
            k,
            n,
            row_stride: NR,
            panel_stride: k * NR,
        }
    }

    /// A zeroed row-major `k x n` buffer (row stride `ld`, a multiple of 16 at least `n`
    /// rounded up to whole panels) that the products read in place: its panel `p` is columns
    /// `p * NR ..` of every row. For a right-hand side written once and read once (im2col
    /// columns), where packing would copy it a second time; `ld` not a power of two keeps its
    /// rows out of each other's cache sets.
    pub(crate) fn zeroed_row_major(k: usize, n: usize, ld: usize) -> Self {
        let ld = ld.max(n.div_ceil(NR) * NR).next_multiple_of(16);
        Self {
            data: Aligned::zeroed(k * ld),
            k,
            n,
            row_stride: ld,
            panel_stride: NR,
        }
    }

    /// The rows of a row-major buffer ([`Self::zeroed_row_major`]) for its first `n` columns
    /// (at most what it was made for), to be written in place: `k` rows, [`Self::row_stride`]
    /// apart.
    pub(crate) fn rows_mut(&mut self, n: usize) -> &mut [f32] {
        assert!(
            self.panel_stride == NR && n.div_ceil(NR) * NR <= self.row_stride,
            "PackedB: {n} columns exceed the row-major buffer"
        );
        self.n = n;
        self.data_mut()
    }

    /// Floats between rows (the row-major buffer's row stride; [`NR`] when packed in panels).
    pub(crate) fn row_stride(&self) -> usize {
        self.row_stride
    }

    /// The packed panels.
    fn data(&self) -> &[f32] {
        self.data.as_slice()
    }

    fn data_mut(&mut self) -> &mut [f32] {
        self.data.as_mut_slice()
    }

    /// Packs the first `n` columns of a row-major `k x n` matrix into a buffer made for at
    /// least `n` columns (its `k` rows), in place.
    pub fn fill_columns_from_rows(&mut self, b: &[f32], ldb: usize, n: usize) {
        assert!(
            self.row_stride == NR && n.div_ceil(NR) * self.k * NR <= self.data.len(),
            "PackedB: {n} columns exceed the buffer"
        );
        self.n = n;
        self.fill_from_rows(b, ldb);
    }

    /// The panels of the first `n` columns (`n` at most what the buffer was made for), to be
    /// written in place as `ceil(n / NR)` row-major `k x NR` blocks, one after the other: a
    /// product can write its result straight into the layout the next product reads.
    pub(crate) fn panels_mut(&mut self, n: usize) -> &mut [f32] {
        let len = n.div_ceil(NR) * self.k * NR;
        assert!(
            self.row_stride == NR && len <= self.data.len(),
            "PackedB: {n} columns exceed the buffer"
        );
        self.n = n;
        &mut self.data_mut()[..len]
    }

    /// Re-packs a row-major `k x n` matrix (this buffer's shape) in place (no allocation).
    pub fn fill_from_rows(&mut self, b: &[f32], ldb: usize) {
        assert!(
            self.row_stride == NR,
            "PackedB: filling a row-major buffer as panels"
        );
        let (k, n) = (self.k, self.n);
        for (p, panel) in self
            .data_mut()
            .chunks_mut(k * NR)
            .take(n.div_ceil(NR))
            .enumerate()
        {
            let j0 = p * NR;
            let w = NR.min(n - j0);
            if w == NR {
                // Fixed-size copies compile to two vector moves (no `memcpy` call per row).
                for (kk, row) in panel.chunks_exact_mut(NR).enumerate() {
                    if let (Ok(dst), Ok(src)) = (
                        <&mut [f32; NR]>::try_from(row),
                        <&[f32; NR]>::try_from(&b[kk * ldb + j0..][..NR]),
                    ) {
                        *dst = *src;
                    }
                }
            } else {
                for (kk, row) in panel.chunks_mut(NR).enumerate() {
                    row[..w].copy_from_slice(&b[kk * ldb + j0..][..w]);
                }
            }
        }
    }

    /// Re-packs the first `n` columns from `bt^T` (`bt` row-major `n x k`) into a buffer made
    /// for at least `n` columns (per-worker scratch, like [`Self::fill_columns_from_rows`]).
    pub fn fill_columns_from_transposed(&mut self, bt: &[f32], ldbt: usize, n: usize) {
        assert!(
            self.row_stride == NR && n.div_ceil(NR) * self.k * NR <= self.data.len(),
            "PackedB: {n} columns exceed the buffer"
        );
        self.n = n;
        self.fill_from_transposed(bt, ldbt);
    }

    /// Re-packs `bt^T` (`bt` row-major `n x k`, this buffer's shape) in place.
    pub fn fill_from_transposed(&mut self, bt: &[f32], ldbt: usize) {
        assert!(
            self.row_stride == NR,
            "PackedB: filling a row-major buffer as panels"
        );
        let (k, n) = (self.k, self.n);
        for (p, panel) in self
            .data_mut()
            .chunks_mut(k * NR)
            .take(n.div_ceil(NR))
            .enumerate()
        {
            let j0 = p * NR;
            let w = NR.min(n - j0);
            for j in 0..w {
                let src = &bt[(j0 + j) * ldbt..][..k];
                for (kk, &x) in src.iter().enumerate() {
                    panel[kk * NR + j] = x;
                }
            }
        }
    }

    /// Rows (the inner dimension).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns.
    pub fn n(&self) -> usize {
        self.n
    }
}

/// A left-hand side `A` (`m x k`, a weight) packed once in blocks of [`A_BLOCK`] rows, each
/// block stored column by column (`k` runs of `A_BLOCK` values, zero past `m`): a register
/// tile's broadcasts for one step of `k` read one short contiguous run instead of one value
/// from each of its rows (`k` floats apart), so its operand is one stream the prefetcher
/// follows and a few cache lines instead of a dozen.
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedA {
    data: Aligned<f32>,
    m: usize,
    k: usize,
}

impl PackedA {
    /// Packs a row-major `m x k` matrix `a` (row stride `lda`).
    pub(crate) fn from_rows(a: &[f32], m: usize, k: usize, lda: usize) -> Self {
        let mut data = Aligned::zeroed(m.div_ceil(A_BLOCK) * A_BLOCK * k);
        let out = data.as_mut_slice();
        for (r, row) in a.chunks(lda).take(m).enumerate() {
            let block = &mut out[(r / A_BLOCK) * A_BLOCK * k..][..A_BLOCK * k];
            for (kk, &v) in row[..k].iter().enumerate() {
                block[kk * A_BLOCK + r % A_BLOCK] = v;
            }
        }
        Self { data, m, k }
    }

    /// The row-major `m x k` matrix back (for the one-time packings other kernels make from a
    /// weight: its bf16 pairs).
    pub(crate) fn rows(&self) -> Vec<f32> {
        let (m, k) = (self.m, self.k);
        let data = self.data.as_slice();
        let mut out = vec![0f32; m * k];
        for (r, row) in out.chunks_exact_mut(k.max(1)).take(m).enumerate() {
            let block = &data[(r / A_BLOCK) * A_BLOCK * k..][..A_BLOCK * k];
            for (kk, v) in row.iter_mut().enumerate() {
                *v = block[kk * A_BLOCK + r % A_BLOCK];
            }
        }
        out
    }

    /// Rows.
    pub(crate) fn m(&self) -> usize {
        self.m
    }

    /// Columns (the inner dimension).
    pub(crate) fn k(&self) -> usize {
        self.k
    }
}

/// `C[m x n] (+)= A[m x k] * B[k x n]` for rows `k_range` of `B` (so `A`'s columns are
/// `0..k_range.len()`) and columns `n_range` of `B` (`C`'s columns `0..n_range.len()`).
/// `n_range.start` must be a multiple of [`NR`]. `A` is row-major with stride `lda`, `C` with
/// stride `ldc`; `accumulate` adds to `C` instead of overwriting it.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    k_range: std::ops::Range<usize>,
    n_range: std::ops::Range<usize>,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    let k = k_range.len();
    let n = n_range.len();
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        n_range.start.is_multiple_of(NR) && n_range.end <= b.n && k_range.end <= b.k,
        "gemm_packed: column range {n_range:?} / row range {k_range:?} outside B {}x{}",
        b.k,
        b.n
    );
    assert!(
        (k == 0 || a.len() >= (m - 1) * lda + k) && c.len() >= (m - 1) * ldc + n,
        "gemm_packed: A or C too short"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                c[r * ldc..][..n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: the asserts above bound every access to `a`, `b` and `c`.
    unsafe {
        packed_unchecked(
            m,
            a,
            lda,
            b,
            k_range,
            n_range,
            c.as_mut_ptr(),
            ldc,
            accumulate,
        )
    }
}

/// [`gemm_packed`] without the checks, writing through a pointer (threads that own disjoint
/// column ranges of one `C`).
///
/// # Safety
/// `a` holds `m x k_range.len()` (stride `lda`), `c` addresses `m x n_range.len()` writable
/// floats (stride `ldc`) that nothing else accesses during the call, `n_range.start` is a
/// multiple of [`NR`] and both ranges lie inside `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn packed_unchecked(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    k_range: std::ops::Range<usize>,
    n_range: std::ops::Range<usize>,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    let product = Product {
        m,
        a: a.as_ptr(),
        lda,
        packed_a: false,
        b,
        k_range,
        n_range,
        c,
        ldc,
        accumulate,
    };
    crate::kernels::simd::dispatch_at(product_isa(), product)
}

/// [`packed_unchecked`] with `A` packed ([`PackedA`], all of its rows and columns): the same
/// sums in the same order, so the same bits.
///
/// # Safety
/// `k_range.len()` is `a.k()`; otherwise as [`packed_unchecked`] with `m = a.m()`.
pub(crate) unsafe fn packed_a_unchecked(
    a: &PackedA,
    b: &PackedB,
    k_range: std::ops::Range<usize>,
    n_range: std::ops::Range<usize>,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    debug_assert_eq!(k_range.len(), a.k);
    let product = Product {
        m: a.m,
        a: a.data.as_slice().as_ptr(),
        lda: a.k,
        packed_a: true,
        b,
        k_range,
        n_range,
        c,
        ldc,
        accumulate,
    };
    crate::kernels::simd::dispatch_at(product_isa(), product)
}

/// The instruction set [`packed_unchecked`] runs at: the one in effect, or in tests the one
/// [`PRODUCT_ISA`] names (tests walk every ISA the CPU runs).
#[cfg(not(test))]
fn product_isa() -> crate::kernels::cpu::Isa {
    crate::kernels::cpu::in_effect()
}

#[cfg(test)]
thread_local! {
    static PRODUCT_ISA: std::cell::Cell<Option<crate::kernels::cpu::Isa>> =
        const { std::cell::Cell::new(None) };
}

#[cfg(test)]
fn product_isa() -> crate::kernels::cpu::Isa {
    PRODUCT_ISA
        .with(|isa| isa.get())
        .unwrap_or_else(crate::kernels::cpu::in_effect)
}

/// One product's operands, as the [`Kernel`] every instruction set runs.
struct Product<'a> {
    m: usize,
    /// Row-major (row stride `lda`), or a [`PackedA`]'s blocks (`packed_a`, `lda` its `k`).
    a: *const f32,
    lda: usize,
    packed_a: bool,
    b: &'a PackedB,
    k_range: std::ops::Range<usize>,
    n_range: std::ops::Range<usize>,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
}

/// A register tile: `rows` x `vectors` vectors of `C`.
struct TileShape {
    rows: usize,
    vectors: usize,
}

impl TileShape {
    /// The largest tile whose accumulators, `B` loads and broadcast fit the registers, with
    /// columns dividing [`NR`]: 12 x 2 zmm (AVX-512), 6 x 2 ymm (AVX2), 6 x 4 q (NEON), 6 x 2
    /// (portable: vectors of 8 floats).
    const fn of<V: F32s>() -> Self {
        let vectors = if V::LANES >= 8 { 2 } else { 16 / V::LANES };
        // Accumulators + the B vectors + one broadcast, within the register file.
        let mut rows = (V::REGISTERS - vectors - 1) / vectors;
        if rows > MR {
            rows = MR;
        }
        Self { rows, vectors }
    }
}

impl Kernel for Product<'_> {
    type Output = ();

    #[inline(always)]
    fn run<V: F32s>(self) {
        let shape = TileShape::of::<V>();
        // SAFETY: the caller of `packed_unchecked` bounds the operands; `dispatch` runs this
        // where the CPU has `V`'s instruction set.
        unsafe {
            match (shape.vectors == 2, self.packed_a) {
                (true, false) => product::<V, 2, false>(&self, shape.rows),
                (true, true) => product::<V, 2, true>(&self, shape.rows),
                (false, false) => product::<V, 4, false>(&self, shape.rows),
                (false, true) => product::<V, 4, true>(&self, shape.rows),
            }
        }
    }
}

/// The blocked loops around the tile: `KC` blocks of the inner dimension, groups of
/// [`PANELS_PER_GROUP`] panels, row blocks of `mr` rows, and `NR / (NV * LANES)` tiles per panel.
/// `PA`: `A` is a [`PackedA`].
///
/// # Safety
/// As [`packed_unchecked`]; `V`'s instruction set is present.
#[inline(always)]
unsafe fn product<V: F32s, const NV: usize, const PA: bool>(p: &Product, mr: usize) {
    let cols = NV * V::LANES;
    let k = p.k_range.len();
    let n = p.n_range.len();
    let p0 = p.n_range.start / NR;
    let a = p.a;
    let panels = n.div_ceil(NR);
    for kb in (0..k).step_by(KC) {
        let kc = KC.min(k - kb);
        let acc = p.accumulate || kb > 0;
        for g in (0..panels).step_by(PANELS_PER_GROUP) {
            let mut r = 0;
            while r < p.m {
                let rows = mr.min(p.m - r);
                for pi in g..panels.min(g + PANELS_PER_GROUP) {
                    let j0 = pi * NR;
                    let w = NR.min(n - j0);
                    // SAFETY: panel `p0 + pi`, rows `k_range.start + kb ..` lie inside `B`, and
                    // row block `r` / columns `j0 ..` inside `A` and `C` (the caller's bounds).
                    unsafe {
                        let panel = p.b.data().as_ptr().add(
                            (p0 + pi) * p.b.panel_stride + (p.k_range.start + kb) * p.b.row_stride,
                        );
                        // A packed: block `r / A_BLOCK`, its column `kb`, row `r % A_BLOCK`
                        // (`mr` divides A_BLOCK, so the tile's rows lie in that block).
                        let ap = if PA {
                            a.add((r / A_BLOCK) * A_BLOCK * p.lda + kb * A_BLOCK + r % A_BLOCK)
                        } else {
                            a.add(r * p.lda + kb)
                        };
                        for t in (0..w).step_by(cols) {
                            let cp = p.c.add(r * p.ldc + j0 + t);
                            let tw = cols.min(w - t);
                            rows_tile::<V, NV, PA>(
                                rows,
                                Tile {
                                    kc,
                                    a: ap,
                                    lda: p.lda,
                                    panel: panel.add(t),
                                    ldb: p.b.row_stride,
                                    c: cp,
                                    ldc: p.ldc,
                                    w: tw,
                                    accumulate: acc,
                                },
                            );
                        }
                    }
                }
                r += rows;
            }
        }
    }
}

/// One tile's operands: `C[R x w] (+)= A[R x kc] * panel[kc x w]` (panel rows `ldb` apart:
/// [`NR`] packed, the row stride of a row-major `B`;
/// `A` row-major with stride `lda`, or inside a [`PackedA`] block: column `kk` at `kk *
/// A_BLOCK`).
#[derive(Clone, Copy)]
struct Tile {
    kc: usize,
    a: *const f32,
    lda: usize,
    panel: *const f32,
    /// Floats between the panel's rows.
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    w: usize,
    accumulate: bool,
}

/// [`tile`] with its row count as a constant (the accumulators must be a fixed array to live in
/// registers).
///
/// # Safety
/// As [`tile`].
#[inline(always)]
unsafe fn rows_tile<V: F32s, const NV: usize, const PA: bool>(rows: usize, t: Tile) {
    // SAFETY: as the caller guarantees.
    unsafe {
        match rows {
            12 => tile::<V, 12, NV, PA>(t),
            11 => tile::<V, 11, NV, PA>(t),
            10 => tile::<V, 10, NV, PA>(t),
            9 => tile::<V, 9, NV, PA>(t),
            8 => tile::<V, 8, NV, PA>(t),
            7 => tile::<V, 7, NV, PA>(t),
            6 => tile::<V, 6, NV, PA>(t),
            5 => tile::<V, 5, NV, PA>(t),
            4 => tile::<V, 4, NV, PA>(t),
            3 => tile::<V, 3, NV, PA>(t),
            2 => tile::<V, 2, NV, PA>(t),
            _ => tile::<V, 1, NV, PA>(t),
        }
    }
}

/// `C[R x w] (+)= A[R x kc] * panel[kc x w]` with the `R x NV` vectors of `C` in registers: per
/// step of `k`, `NV` loads of the panel's row and one broadcast per row of `A`.
///
/// # Safety
/// `a` holds `R x kc` (stride `lda`, or a [`PackedA`] block), the panel `kc` rows of `NV * LANES` floats `ldb` apart,
/// `c` `R x w` writable floats (stride `ldc`), `w <= NV * LANES`; `V`'s instruction set is
/// present.
#[inline(always)]
unsafe fn tile<V: F32s, const R: usize, const NV: usize, const PA: bool>(t: Tile) {
    // SAFETY: every pointer below stays inside the ranges the caller guarantees.
    unsafe {
        let mut acc = [[V::zero(); NV]; R];
        let mut bp = t.panel;
        let mut ap = t.a;
        for kk in 0..t.kc {
            let mut b = [V::zero(); NV];
            for (v, bv) in b.iter_mut().enumerate() {
                *bv = V::load(bp.add(v * V::LANES));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let x = V::splat(if PA {
                    *ap.add(i)
                } else {
                    *t.a.add(i * t.lda + kk)
                });
                for (cv, bv) in row.iter_mut().zip(b) {
                    *cv = x.mul_add(bv, *cv);
                }
            }
            bp = bp.add(t.ldb);
            if PA {
                ap = ap.add(A_BLOCK);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            let cp = t.c.add(i * t.ldc);
            for (v, &cv) in row.iter().enumerate() {
                let at = v * V::LANES;
                if at >= t.w {
                    break;
                }
                let p = cp.add(at);
                let lanes = t.w - at;
                if lanes >= V::LANES {
                    let out = if t.accumulate { cv.add(V::load(p)) } else { cv };
                    out.store(p);
                } else {
                    let out = if t.accumulate {
                        cv.add(V::load_partial(p, lanes))
                    } else {
                        cv
                    };
                    out.store_partial(p, lanes);
                }
            }
        }
    }
}

/// `C[m x n] (+)= A[m x k] * B[k x n]` for a row-major `B` (stride `ldb`) that changes every
/// call (an activation): each task packs [`NC`] columns of `B` into a per-worker buffer and
/// multiplies all rows of `A` into them, on up to `workers` threads.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_rows(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    k: usize,
    n: usize,
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    workers: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        (k == 0 || (a.len() >= (m - 1) * lda + k && b.len() >= (k - 1) * ldb + n))
            && c.len() >= (m - 1) * ldc + n,
        "gemm_rows: an operand is too short"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                c[r * ldc..][..n].fill(0.0);
            }
        }
        return;
    }
    let chunks = n.div_ceil(NC);
    let workers = workers.clamp(1, chunks);
    // Tasks write disjoint column ranges of `c`; its address travels as an integer.
    let c_addr = c.as_mut_ptr() as usize;
    let tasks: Vec<usize> = (0..chunks).collect();
    crate::kernels::run_tasks_with(
        tasks,
        workers,
        || PackedB::zeroed(k, NC),
        |packed, chunk| {
            let j0 = chunk * NC;
            let w = NC.min(n - j0);
            packed.fill_columns_from_rows(&b[j0..], ldb, w);
            // SAFETY: this task alone writes columns `j0..j0 + w` of `c` (row stride `ldc`),
            // inside `c` by the assert above; `a` is `m x k` and `packed` is `k x w`.
            unsafe {
                packed_unchecked(
                    m,
                    a,
                    lda,
                    packed,
                    0..k,
                    0..w,
                    (c_addr as *mut f32).add(j0),
                    ldc,
                    accumulate,
                )
            };
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f64;
                for kk in 0..k {
                    s += a[i * k + kk] as f64 * b[kk * n + j] as f64;
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    /// Packed panels and their clones start on a cache line and hold the same values.
    #[test]
    fn panels_start_on_a_cache_line() {
        for (k, n) in [(1usize, 1usize), (48, 64), (256, 4096)] {
            let b = data(k * n, 9);
            let p = PackedB::from_rows(&b, k, n, n);
            let q = p.clone();
            for x in [&p, &q] {
                assert_eq!(x.data().as_ptr() as usize % 64, 0, "{k}x{n}");
            }
            assert_eq!(p.data(), q.data());
        }
    }

    #[test]
    fn matches_naive_on_odd_shapes() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (9, 33, 7),
            (17, 64, 300),
            (64, 256, 256),
            (3, 31, 513),
        ] {
            let a = data(m * k, 1);
            let b = data(k * n, 2);
            let want = naive(m, n, k, &a, &b);
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            for packed in [
                PackedB::from_rows(&b, k, n, n),
                PackedB::from_transposed(&bt, n, k, k),
            ] {
                let mut c = vec![1f32; m * n];
                gemm_packed(m, &a, k, &packed, 0..k, 0..n, &mut c, n, false);
                let err = c
                    .iter()
                    .zip(&want)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                assert!(err < 1e-4 * (k as f32).sqrt(), "{m}x{n}x{k}: {err}");
                // Accumulating adds the product again.
                gemm_packed(m, &a, k, &packed, 0..k, 0..n, &mut c, n, true);
                let err = c
                    .iter()
                    .zip(&want)
                    .map(|(x, y)| (x - 2.0 * y).abs())
                    .fold(0f32, f32::max);
                assert!(err < 2e-4 * (k as f32).sqrt(), "{m}x{n}x{k} acc: {err}");
            }
        }
    }

    #[test]
    fn sub_ranges_of_b() {
        let (m, n, k) = (10, 96, 40);
        let a = data(m * k, 3);
        let b = data(k * n, 4);
        let packed = PackedB::from_rows(&b, k, n, n);
        // Rows 8..40 of B, columns 32..96.
        let sub_b: Vec<f32> = (8..40)
            .flat_map(|kk| b[kk * n + 32..kk * n + 96].to_vec())
            .collect();
        let sub_a: Vec<f32> = (0..m)
            .flat_map(|i| a[i * k + 8..i * k + 40].to_vec())
            .collect();
        let want = naive(m, 64, 32, &sub_a, &sub_b);
        let mut c = vec![0f32; m * 64];
        gemm_packed(m, &sub_a, 32, &packed, 8..40, 32..96, &mut c, 64, false);
        let err = c
            .iter()
            .zip(&want)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(err < 1e-4, "{err}");
    }

    /// Every instruction set this CPU runs: the same bits on the fused paths (AVX-512, AVX2,
    /// NEON; whatever their tiles), and the portable path within float noise of the naive sum.
    #[test]
    fn every_isa_matches_naive() {
        for &(m, n, k) in &[(9, 70, 300), (13, 96, 513), (1, 5, 3), (25, 33, 40)] {
            let a = data(m * k, 7);
            let b = data(k * n, 8);
            let want = naive(m, n, k, &a, &b);
            let packed = PackedB::from_rows(&b, k, n, n);
            let mut fused: Option<Vec<f32>> = None;
            for isa in crate::kernels::cpu::available_isas() {
                for accumulate in [false, true] {
                    let mut c = vec![0.25f32; m * n];
                    PRODUCT_ISA.with(|at| at.set(Some(isa)));
                    gemm_packed(m, &a, k, &packed, 0..k, 0..n, &mut c, n, accumulate);
                    PRODUCT_ISA.with(|at| at.set(None));
                    let base = if accumulate { 0.25 } else { 0.0 };
                    let err = c
                        .iter()
                        .zip(&want)
                        .map(|(x, y)| (x - base - y).abs())
                        .fold(0f32, f32::max);
                    assert!(err < 1e-4 * (k as f32).sqrt(), "{isa} {m}x{n}x{k}: {err}");
                    if isa != crate::kernels::cpu::Isa::Portable && !accumulate {
                        match &fused {
                            None => fused = Some(c),
                            Some(f) => assert!(
                                f.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
                                "{isa} {m}x{n}x{k}: not the bits of the widest fused path"
                            ),
                        }
                    }
                }
            }
        }
    }

    /// `A` packed in row blocks against `A` read in place: the same bits on every instruction
    /// set this CPU runs (the same sums in the same order), with row counts that leave a
    /// partial block and a partial tile, `k` past one `KC` block, and a column sub-range.
    #[test]
    fn packed_a_equals_rows_bit_for_bit() {
        for &(m, n, k) in &[
            (384, 64, 192),
            (13, 70, 300),
            (25, 33, 40),
            (1, 5, 3),
            (7, 96, 513),
        ] {
            let a = data(m * k, 11);
            let b = data(k * n, 12);
            let packed_b = PackedB::from_rows(&b, k, n, n);
            let packed_a = PackedA::from_rows(&a, m, k, k);
            assert_eq!((packed_a.m(), packed_a.k()), (m, k));
            assert_eq!(packed_a.rows(), a, "{m}x{k}: the rows back");
            let cols = if n > NR { NR..n } else { 0..n };
            for isa in crate::kernels::cpu::available_isas() {
                PRODUCT_ISA.with(|at| at.set(Some(isa)));
                for accumulate in [false, true] {
                    let mut want = vec![0.25f32; m * cols.len()];
                    let mut got = want.clone();
                    let ldc = cols.len();
                    // SAFETY: `want` and `got` are `m x cols.len()`, `a` `m x k`, both ranges
                    // inside `B`.
                    unsafe {
                        packed_unchecked(
                            m,
                            &a,
                            k,
                            &packed_b,
                            0..k,
                            cols.clone(),
                            want.as_mut_ptr(),
                            ldc,
                            accumulate,
                        );
                        packed_a_unchecked(
                            &packed_a,
                            &packed_b,
                            0..k,
                            cols.clone(),
                            got.as_mut_ptr(),
                            ldc,
                            accumulate,
                        );
                    }
                    assert!(
                        want.iter()
                            .zip(&got)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{isa} {m}x{n}x{k} accumulate {accumulate}"
                    );
                }
                PRODUCT_ISA.with(|at| at.set(None));
            }
        }
    }

    /// `B` read in place from a row-major buffer against `B` packed in panels: the same bits on
    /// every instruction set this CPU runs, for a partial last panel and a column sub-range.
    #[test]
    fn row_major_b_equals_panels_bit_for_bit() {
        for &(m, n, k) in &[(48, 256, 216), (24, 250, 27), (13, 70, 300), (5, 3, 9)] {
            let a = data(m * k, 13);
            let b = data(k * n, 14);
            let panels = PackedB::from_rows(&b, k, n, n);
            let mut rows = PackedB::zeroed_row_major(k, n, n + 16);
            let ld = rows.row_stride();
            assert!(ld >= n && ld.is_multiple_of(16), "{ld}");
            for (dst, src) in rows.rows_mut(n).chunks_mut(ld).zip(b.chunks(n)) {
                dst[..n].copy_from_slice(src);
            }
            let cols = if n > NR { NR..n } else { 0..n };
            for isa in crate::kernels::cpu::available_isas() {
                PRODUCT_ISA.with(|at| at.set(Some(isa)));
                let mut want = vec![0.5f32; m * cols.len()];
                let mut got = want.clone();
                let ldc = cols.len();
                gemm_packed(m, &a, k, &panels, 0..k, cols.clone(), &mut want, ldc, true);
                gemm_packed(m, &a, k, &rows, 0..k, cols.clone(), &mut got, ldc, true);
                PRODUCT_ISA.with(|at| at.set(None));
                assert!(
                    want.iter()
                        .zip(&got)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{isa} {m}x{n}x{k}"
                );
            }
        }
    }

    #[test]
    fn row_major_b_in_chunks_on_threads() {
        for &(m, n, k, workers) in &[(5, 300, 40, 2), (9, 513, 300, 3), (16, 31, 1, 1)] {
            let a = data(m * k, 5);
            let b = data(k * n, 6);
            let want = naive(m, n, k, &a, &b);
            let mut c = vec![0.5f32; m * n];
            gemm_rows(m, &a, k, &b, k, n, n, &mut c, n, false, workers);
            let err = c
                .iter()
                .zip(&want)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(err < 1e-4 * (k as f32).sqrt(), "{m}x{n}x{k}: {err}");
        }
    }
}
