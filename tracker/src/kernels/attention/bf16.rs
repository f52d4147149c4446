//! Fused softmax attention with bf16 products and f32 accumulation (the `bf16` fast mode).
//!
//! Same tiling and online softmax as the exact kernel in [`crate::kernels::attention`]; only the two
//! products change: queries, keys, probabilities and values are rounded to bf16 and multiplied
//! with AVX512-BF16's `vdpbf16ps`, which does two multiply-adds per f32 lane and accumulates in
//! f32, twice the work per instruction of an f32 FMA. Scores, the softmax statistics and the
//! output stay f32. Keys and values are packed once per call into the pair-interleaved layout
//! the instruction reads; queries and probabilities are converted per tile with
//! `vcvtne2ps2bf16` (round to nearest even).
//!
//! Only CPUs with AVX512-BF16 run it ([`cpu::bf16`]); elsewhere callers get the exact f32 kernel.

// The bf16 kernels run on x86_64 only (AVX512-BF16, AMX): elsewhere `set_precision` refuses
// bf16 before they are reached, so parts of their packing go unread there.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use candle_core::{DType, Result, Shape, Tensor};

use crate::kernels::amx::{self, AlignedPairs};
use crate::kernels::attention::{TILE_K, TILE_Q};
use crate::kernels::bf16::bf16_bits;
use crate::kernels::cpu;
use crate::kernels::{run_tasks_with, spread_row_stride, threads, CpuOp3, Op3, Operand};

/// `softmax(q k^T * scale) v` with bf16 products (see the module docs): `q` `[N, H, Lq, D]`,
/// `k`/`v` `[N, H, Lk, D]`. Falls back to the exact kernel where the CPU lacks AVX512-BF16,
/// the tensors are not f32 on the CPU, or `D` is not a multiple of 16.
pub fn scaled_dot_product_bf16(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let cpu_f32 = [q, k, v]
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32);
    let d = q.dims().last().copied().unwrap_or(0);
    if !(cpu_f32 && cpu::bf16() && d > 0 && d.is_multiple_of(16)) {
        return crate::kernels::attention::scaled_dot_product(q, k, v, scale);
    }
    q.contiguous()?.apply_op3_no_bwd(
        &k.contiguous()?,
        &v.contiguous()?,
        &Op3(FusedAttentionBf16 {
            scale: scale as f32,
        }),
    )
}

struct FusedAttentionBf16 {
    scale: f32,
}

/// Keys packed for the score product: blocks of 16 keys, and within a block for each of `pairs`
/// pairs of channels `p` 16 lanes `(k[j][2p], k[j][2p+1])` (lane = key). Keys past `lk` are
/// zero, and so are the missing channel of an odd width's last pair and the pairs past the
/// key's width.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn pack_keys(k: &[f32], lk: usize, d: usize, pairs: usize) -> Vec<u32> {
    let blocks = lk.div_ceil(16);
    let mut out = vec![0u32; blocks * pairs * 16];
    for j in 0..lk {
        let (b, lane) = (j / 16, j % 16);
        let row = &k[j * d..(j + 1) * d];
        for p in 0..d.div_ceil(2) {
            let hi = row.get(2 * p + 1).map_or(0, |&x| bf16_bits(x));
            out[(b * pairs + p) * 16 + lane] = bf16_bits(row[2 * p]) | (hi << 16);
        }
    }
    out
}

/// One group of keys and their values, packed for the bf16 products: `lk` keys of width `d`
/// (any width: an odd one is padded with a zero channel) and values of width `dv` (a multiple
/// of 16).
pub(crate) struct PackedKeys {
    /// On cache-line boundaries, as the blocks and rows in them: unaligned, every 64-byte
    /// load of the products touched two lines.
    keys: AlignedPairs,
    values: AlignedPairs,
    lk: usize,
    d: usize,
    /// Channel pairs per key as packed: `ceil(d/2)`, rounded up to whole AMX tiles (zero
    /// pairs) where AMX runs the score product.
    pairs: usize,
    dv: usize,
    /// Distance between packed value rows (key pairs): [`spread_row_stride`] of `dv`, so the
    /// value product's column blocks stay in L1 across the query rows.
    v_stride: usize,
}

/// Channel pairs of a `d`-wide key as [`PackedKeys`] stores them.
fn packed_pairs(d: usize) -> usize {
    let pairs = d.div_ceil(2);
    if amx::available() {
        amx::round_up(pairs)
    } else {
        pairs
    }
}

/// Keys per packing task (a multiple of 16 and of 2: whole key blocks and key pairs).
const PACK_KEYS_PER_TASK: usize = 256;

impl PackedKeys {
    /// `k` `lk x d`, `v` `lk x dv`; packed on all compute threads, in vectors (the same
    /// layouts and roundings as [`pack_keys`] and [`pack_values`]).
    pub(crate) fn new(k: &[f32], v: &[f32], lk: usize, d: usize, dv: usize) -> Self {
        let pairs = packed_pairs(d);
        let v_stride = spread_row_stride(dv);
        let mut keys = AlignedPairs::zeroed(lk.div_ceil(16) * pairs * 16);
        let mut values = AlignedPairs::zeroed(lk.div_ceil(2) * v_stride);
        let per = PACK_KEYS_PER_TASK;
        let tasks: Vec<(usize, &mut [u32], &mut [u32])> = keys
            .as_mut_slice()
            .chunks_mut(per / 16 * pairs * 16)
            .zip(values.as_mut_slice().chunks_mut(per / 2 * v_stride))
            .enumerate()
            .map(|(t, (kc, vc))| (t * per, kc, vc))
            .collect();
        run_tasks_with(
            tasks,
            threads(),
            || vec![0u32; 16 * pairs],
            |rows, (j0, kc, vc)| {
                let n = per.min(lk - j0);
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `PackedKeys` is built only where `cpu::bf16()`; the slices cover keys
                // `j0..j0 + n` of `k` and `v` and their packed blocks and pairs.
                unsafe {
                    x86::pack_keys_into(&k[j0 * d..(j0 + n) * d], n, d, pairs, rows, kc);
                    x86::pack_values_into(&v[j0 * dv..(j0 + n) * dv], n, dv, v_stride, vc);
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    kc.copy_from_slice(
                        &pack_keys(&k[j0 * d..(j0 + n) * d], n, d, pairs)[..kc.len()],
                    );
                    let packed = pack_values(&v[j0 * dv..(j0 + n) * dv], n, dv, v_stride);
                    vc.copy_from_slice(&packed[..vc.len()]);
                    let _ = rows;
                }
            },
        );
        Self {
            keys,
            values,
            lk,
            d,
            pairs,
            dv,
            v_stride,
        }
    }
}

/// `softmax([q_g k_g^T for each group g] * scale) [v_g]` for one tile of query rows: one online
/// softmax over all groups' keys. Each group brings its queries (`rows x` its key width) and
/// keys; `out` is `rows x dv`, the groups' common value width.
///
/// # Safety
/// The CPU must have AVX512-BF16 ([`cpu::bf16`]); `scratch` must come from [`Scratch::new`] for at
/// least the widest group's key width, `rows <= TILE_Q`, and every group's `dv` equal
/// `out.len() / rows`.
pub(crate) unsafe fn attend_groups(
    groups: &[(&[f32], &PackedKeys)],
    out: &mut [f32],
    scratch: &mut Scratch,
    scale: f32,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: per the caller.
    unsafe {
        x86::attend_groups(groups, out, scratch, scale)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (groups, out, scratch, scale);
}

/// Values packed for the output product: for each pair of keys `jp` (rows `stride` apart) and
/// block of 16 channels, 16 lanes `(v[2jp][c], v[2jp+1][c])` (lane = channel). A missing last
/// key is zero, and so are the `stride - d` entries past each row.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn pack_values(v: &[f32], lk: usize, d: usize, stride: usize) -> Vec<u32> {
    let key_pairs = lk.div_ceil(2);
    let mut out = vec![0u32; key_pairs * stride];
    for jp in 0..key_pairs {
        let a = &v[2 * jp * d..(2 * jp + 1) * d];
        let b = (2 * jp + 1 < lk).then(|| &v[(2 * jp + 1) * d..(2 * jp + 2) * d]);
        for c in 0..d {
            let hi = b.map_or(0, |b| bf16_bits(b[c]));
            // Channel block c / 16, lane c % 16: consecutive, so the index is jp * stride + c.
            out[jp * stride + c] = bf16_bits(a[c]) | (hi << 16);
        }
    }
    out
}

impl CpuOp3 for FusedAttentionBf16 {
    const NAME: &'static str = "fused-attention-bf16";
    const OPERANDS: [&'static str; 3] = ["attention queries", "attention keys", "attention values"];

    fn run(&self, [a1, a2, a3]: [Operand; 3]) -> Result<(Vec<f32>, Shape)> {
        let (q, k, v) = (a1.data, a2.data, a3.data);
        let (l1, l2, l3) = (a1.layout, a2.layout, a3.layout);
        let (n, h, lq, d) = l1.shape().dims4()?;
        let (kn, kh, lk, kd) = l2.shape().dims4()?;
        if (kn, kh, kd) != (n, h, d)
            || l3.shape().dims() != l2.shape().dims()
            || !d.is_multiple_of(16)
        {
            candle_core::bail!(
                "bf16 attention: queries {:?}, keys {:?}, values {:?} (head width a multiple of 16)",
                l1.shape().dims(),
                l2.shape().dims(),
                l3.shape().dims()
            );
        }
        if !cpu::bf16() {
            candle_core::bail!("bf16 attention needs a CPU with AVX512-BF16");
        }
        let shape = Shape::from((n, h, lq, d));
        let mut out = crate::kernels::zeroed(n * h * lq * d);
        if out.is_empty() || lk == 0 {
            return Ok((out, shape));
        }
        let packed: Vec<PackedKeys> = (0..n * h)
            .map(|bh| {
                let kv = bh * lk * d..(bh + 1) * lk * d;
                PackedKeys::new(&k[kv.clone()], &v[kv], lk, d, d)
            })
            .collect();
        let tasks = crate::kernels::row_tiles(&mut out, lq, d, TILE_Q);
        let scale = self.scale;
        run_tasks_with(
            tasks,
            threads(),
            || Scratch::new(d),
            |scratch, (bh, q0, tile)| {
                let rows = tile.len() / d;
                let qt = &q[(bh * lq + q0) * d..][..rows * d];
                // SAFETY: `cpu::bf16()` was checked above; the scratch fits width `d`, the tile
                // has at most TILE_Q rows of the keys' value width `d`.
                unsafe { attend_groups(&[(qt, &packed[bh])], tile, scratch, scale) };
            },
        );
        Ok((out, shape))
    }
}

/// Per-worker buffers.
pub(crate) struct Scratch {
    /// Score / probability tile, `TILE_Q x TILE_K` f32.
    scores: Vec<f32>,
    /// Query tile as bf16 pairs, `TILE_Q x ceil(d/2)`.
    q_pairs: Vec<u32>,
    /// Probabilities as bf16 pairs, `TILE_Q x TILE_K/2`.
    p_pairs: Vec<u32>,
    max: Vec<f32>,
    sum: Vec<f32>,
}

impl Scratch {
    /// Buffers of [`attend_groups`] for key widths up to `d`.
    pub(crate) fn new(d: usize) -> Self {
        Self {
            scores: vec![0.0; TILE_Q * TILE_K],
            q_pairs: vec![0; TILE_Q * packed_pairs(d)],
            p_pairs: vec![0; TILE_Q * TILE_K / 2],
            max: vec![0.0; TILE_Q],
            sum: vec![0.0; TILE_Q],
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{PackedKeys, Scratch, TILE_K};
    use crate::kernels::amx;
    use crate::kernels::attention::{exp_neg, fold_tile_into_row};
    use crate::kernels::bf16::{for_each_tile, interleave_bf16, to_bf16_pairs};

    /// [`exp_neg`] on 16 lanes: the same operations in the same order (so the same bits; the
    /// tests compare the two).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn exp_neg16(x: __m512) -> __m512 {
        const ROUND: f32 = 12_582_912.0;
        let round = _mm512_set1_ps(ROUND);
        // `x.max(-87.0)`: a NaN lane takes -87 there; `vmaxps` returns its second operand
        // when either is NaN.
        let x = _mm512_max_ps(x, _mm512_set1_ps(-87.0));
        let n = _mm512_sub_ps(
            _mm512_fmadd_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E), round),
            round,
        );
        let neg_n = _mm512_sub_ps(_mm512_setzero_ps(), n);
        let r = _mm512_fmadd_ps(
            neg_n,
            _mm512_set1_ps(-2.121_944_4e-4),
            _mm512_fmadd_ps(neg_n, _mm512_set1_ps(0.693_359_4), x),
        );
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            1.666_666_5e-1,
            0.5,
        ] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let p = _mm512_fmadd_ps(
            _mm512_mul_ps(p, r),
            r,
            _mm512_add_ps(r, _mm512_set1_ps(1.0)),
        );
        let biased = _mm512_sub_epi32(
            _mm512_castps_si512(_mm512_add_ps(n, _mm512_set1_ps(ROUND + 127.0))),
            _mm512_castps_si512(round),
        );
        _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(biased)))
    }

    /// `exp(x * scale - m)` of the 16 scores at `x`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn probabilities16(x: *const f32, scale: __m512, m: __m512) -> __m512 {
        exp_neg16(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(x), scale), m))
    }

    /// [`crate::kernels::attention::online_softmax`] followed by the rounding of the
    /// probabilities to bf16 pairs, in two passes over each score row instead of four: the
    /// maximum of the scaled scores (read only), then per 32 scores their exponentials, the
    /// lane sums and the bf16 pairs, without writing the f32 probabilities back. Same
    /// operations in the same order per value (scale, maximum, `exp_neg(x - m)`, 16 lane sums
    /// plus the remainder's, round to nearest even), so the same bits as the two steps.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn softmax_to_pairs(
        s: &mut [f32],
        cols: usize,
        scale: f32,
        (max, sum): (&mut [f32], &mut [f32]),
        out: &mut [f32],
        dv: usize,
        p_pairs: &mut [u32],
    ) {
        let key_pairs = cols.div_ceil(2);
        let vscale = _mm512_set1_ps(scale);
        let full = cols / 16 * 16;
        let paired = cols / 32 * 32;
        for (r, row) in s.chunks_exact_mut(cols).enumerate() {
            let pairs = &mut p_pairs[r * key_pairs..(r + 1) * key_pairs];
            let mut lanes = _mm512_set1_ps(f32::NEG_INFINITY);
            for c in (0..full).step_by(16) {
                let x = _mm512_mul_ps(_mm512_loadu_ps(row.as_ptr().add(c)), vscale);
                lanes = _mm512_max_ps(x, lanes);
            }
            let mut m = max[r];
            for x in &mut row[full..] {
                *x *= scale;
                m = m.max(*x);
            }
            let mut lane_max = [0f32; 16];
            _mm512_storeu_ps(lane_max.as_mut_ptr(), lanes);
            m = lane_max.iter().fold(m, |a, &b| a.max(b));
            let vm = _mm512_set1_ps(m);
            let mut sums = _mm512_setzero_ps();
            for c in (0..paired).step_by(32) {
                let lo = probabilities16(row.as_ptr().add(c), vscale, vm);
                let hi = probabilities16(row.as_ptr().add(c + 16), vscale, vm);
                sums = _mm512_add_ps(sums, lo);
                sums = _mm512_add_ps(sums, hi);
                _mm512_storeu_si512(
                    pairs.as_mut_ptr().add(c / 2).cast(),
                    std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo)),
                );
            }
            if full > paired {
                let lo = probabilities16(row.as_ptr().add(paired), vscale, vm);
                sums = _mm512_add_ps(sums, lo);
                _mm512_storeu_ps(row.as_mut_ptr().add(paired), lo);
            }
            let mut total = 0f32;
            for x in &mut row[full..] {
                *x = exp_neg(*x - m);
                total += *x;
            }
            let mut lane_sums = [0f32; 16];
            _mm512_storeu_ps(lane_sums.as_mut_ptr(), sums);
            total += lane_sums.iter().sum::<f32>();
            // The keys past the last whole 32 (fewer than 32: converted one pair at a time).
            to_bf16_pairs(&row[paired..], &mut pairs[paired / 2..]);
            let out = &mut out[r * dv..(r + 1) * dv];
            fold_tile_into_row(m, total, &mut max[r], &mut sum[r], out);
        }
    }

    /// [`super::pack_values`] of `n` keys into `out` (`ceil(n/2)` rows `stride` apart, the
    /// entries past `dv` left as they are: zero).
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn pack_values_into(
        v: &[f32],
        n: usize,
        dv: usize,
        stride: usize,
        out: &mut [u32],
    ) {
        for (jp, o) in out.chunks_mut(stride).enumerate().take(n.div_ceil(2)) {
            let a = &v[2 * jp * dv..(2 * jp + 1) * dv];
            let b = (2 * jp + 1 < n).then(|| &v[(2 * jp + 1) * dv..(2 * jp + 2) * dv]);
            interleave_bf16(a, b, &mut o[..dv]);
        }
    }

    /// [`super::pack_keys`] of `n` keys into `out` (`ceil(n/16)` blocks); `rows` is
    /// `16 x ceil(d/2)` scratch: each block's rows are converted in vectors, then transposed.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    /// `pairs` (>= `ceil(d/2)`) pairs per key, the ones past the key's channels zero.
    pub(super) unsafe fn pack_keys_into(
        k: &[f32],
        n: usize,
        d: usize,
        pairs: usize,
        rows: &mut [u32],
        out: &mut [u32],
    ) {
        let used = d.div_ceil(2);
        for (b, block) in out.chunks_mut(pairs * 16).enumerate().take(n.div_ceil(16)) {
            let keys = (n - 16 * b).min(16);
            rows.fill(0);
            for lane in 0..keys {
                let j = 16 * b + lane;
                to_bf16_pairs(
                    &k[j * d..(j + 1) * d],
                    &mut rows[lane * pairs..lane * pairs + used],
                );
            }
            for (p, dst) in block.chunks_mut(16).enumerate() {
                for (lane, x) in dst.iter_mut().enumerate() {
                    *x = rows[lane * pairs + p];
                }
            }
        }
    }

    /// Scores of `R` query rows against `C` blocks of 16 keys from `first_block` on, into
    /// `s[r][col0 + c*16 + lane]`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn score_block<const R: usize, const C: usize>(
        q_pairs: &[u32],
        k_packed: &[u32],
        pairs: usize,
        (first_block, col0): (usize, usize),
        s: &mut [f32],
        cols: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for p in 0..pairs {
            let mut b = [_mm512_setzero_si512(); C];
            for (c, bc) in b.iter_mut().enumerate() {
                *bc = _mm512_loadu_si512(
                    k_packed
                        .as_ptr()
                        .add(((first_block + c) * pairs + p) * 16)
                        .cast(),
                );
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let a: __m512bh = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    q_pairs[r * pairs + p] as i32,
                ));
                for (c, x) in row.iter_mut().enumerate() {
                    *x = _mm512_dpbf16_ps(*x, a, std::mem::transmute::<__m512i, __m512bh>(b[c]));
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, x) in row.iter().enumerate() {
                let col = col0 + c * 16;
                let valid = cols.saturating_sub(col).min(16);
                if valid > 0 {
                    let mask: __mmask16 = if valid == 16 {
                        0xffff
                    } else {
                        (1u16 << valid) - 1
                    };
                    _mm512_mask_storeu_ps(s.as_mut_ptr().add(r * cols + col), mask, *x);
                }
            }
        }
    }

    /// The packed values one key tile's value product reads: `key_pairs` rows of pairs from
    /// `first_pair` on, `stride` apart, `width` channels each.
    #[derive(Clone, Copy)]
    struct ValueRows<'a> {
        packed: &'a [u32],
        first_pair: usize,
        key_pairs: usize,
        width: usize,
        stride: usize,
    }

    /// `out[r][c*16 + lane] += sum_jp p[r][jp] . v[jp][block c]` for `R` rows and `C` channel
    /// blocks starting at `block0`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn value_block<const R: usize, const C: usize>(
        p_pairs: &[u32],
        p_stride: usize,
        v: ValueRows,
        block0: usize,
        out: &mut [f32],
    ) {
        let ValueRows {
            packed: v_packed,
            first_pair,
            key_pairs,
            width: d,
            stride: v_stride,
        } = v;
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for (r, row) in acc.iter_mut().enumerate() {
            for (c, x) in row.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(out.as_ptr().add(r * d + (block0 + c) * 16));
            }
        }
        for jp in 0..key_pairs {
            let base = v_packed
                .as_ptr()
                .add((first_pair + jp) * v_stride + block0 * 16);
            let mut b = [_mm512_setzero_si512(); C];
            for (c, bc) in b.iter_mut().enumerate() {
                *bc = _mm512_loadu_si512(base.add(c * 16).cast());
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let a: __m512bh = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    p_pairs[r * p_stride + jp] as i32,
                ));
                for (c, x) in row.iter_mut().enumerate() {
                    *x = _mm512_dpbf16_ps(*x, a, std::mem::transmute::<__m512i, __m512bh>(b[c]));
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, x) in row.iter().enumerate() {
                _mm512_storeu_ps(out.as_mut_ptr().add(r * d + (block0 + c) * 16), *x);
            }
        }
    }

    /// See [`super::attend_groups`].
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn attend_groups(
        groups: &[(&[f32], &PackedKeys)],
        out: &mut [f32],
        scratch: &mut Scratch,
        scale: f32,
    ) {
        let Some(dv) = groups.first().map(|(_, k)| k.dv) else {
            out.fill(0.0);
            return;
        };
        let rows = out.len() / dv;
        let (max, sum) = (&mut scratch.max[..rows], &mut scratch.sum[..rows]);
        max.fill(f32::NEG_INFINITY);
        sum.fill(0.0);
        out.fill(0.0);
        for &(q, keys) in groups {
            attend_group(q, keys, out, scratch, scale);
        }
        let sum = &scratch.sum[..rows];
        for (o, &s) in out.chunks_mut(dv).zip(sum) {
            o.iter_mut().for_each(|v| *v /= s);
        }
    }

    /// One group of keys for the query rows `q` (`rows x keys.d`): scores, the online softmax
    /// step and the value product into `out` (`rows x keys.dv`).
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn attend_group(
        q: &[f32],
        keys: &PackedKeys,
        out: &mut [f32],
        scratch: &mut Scratch,
        scale: f32,
    ) {
        let (lk, d, dv) = (keys.lk, keys.d, keys.dv);
        let (k_packed, v_packed) = (keys.keys.as_slice(), keys.values.as_slice());
        let rows = out.len() / dv;
        let pairs = keys.pairs;
        let blocks_d = dv / 16;
        let q_pairs = &mut scratch.q_pairs[..rows * pairs];
        if d.is_multiple_of(2) && pairs == d / 2 {
            to_bf16_pairs(&q[..rows * d], q_pairs);
        } else {
            // Row by row: an odd width's last pair takes a zero, and so do the pairs the keys
            // were padded with.
            let used = d.div_ceil(2);
            for (src, dst) in q.chunks(d).zip(q_pairs.chunks_mut(pairs)) {
                to_bf16_pairs(src, &mut dst[..used]);
                dst[used..].fill(0);
            }
        }
        let (max, sum) = (&mut scratch.max[..rows], &mut scratch.sum[..rows]);
        // Whole 16-row groups of queries take the tile products where AMX runs them.
        let tiles = amx::available() && rows.is_multiple_of(amx::TILE);
        for k0 in (0..lk).step_by(TILE_K) {
            let cols = TILE_K.min(lk - k0);
            let s = &mut scratch.scores[..rows * cols];
            // Scores: rows in fours, key blocks in fours (16 accumulators).
            let first = k0 / 16;
            let nblocks = cols.div_ceil(16);
            let mut r = 0;
            if tiles && pairs.is_multiple_of(amx::TILE) && cols.is_multiple_of(amx::TILE) {
                s.fill(0.0);
                // SAFETY: `q_pairs` is `rows x pairs`, the key blocks from `first` hold `cols`
                // keys as panels of 16 (`pairs` rows each), `s` is `rows x cols`; AMX runs.
                amx::gemm(
                    q_pairs.as_ptr(),
                    pairs,
                    amx::BMatrix::panels(k_packed.as_ptr().add(first * pairs * 16), pairs * 16),
                    s.as_mut_ptr(),
                    cols,
                    (rows, cols, pairs),
                );
                r = rows;
            }
            // Key blocks outer, query rows inner: a group of four key blocks (`4 x pairs x 16`
            // pairs) stays in L1 while every row passes over it. Each score's sum is unchanged.
            for_each_tile(r..rows, nblocks, |r, four_rows, b, four_blocks| {
                let (qp, sr) = (&q_pairs[r * pairs..], &mut s[r * cols..]);
                let at = (first + b, b * 16);
                match (four_rows, four_blocks) {
                    (true, true) => score_block::<4, 4>(qp, k_packed, pairs, at, sr, cols),
                    (true, false) => score_block::<4, 1>(qp, k_packed, pairs, at, sr, cols),
                    (false, true) => score_block::<1, 4>(qp, k_packed, pairs, at, sr, cols),
                    (false, false) => score_block::<1, 1>(qp, k_packed, pairs, at, sr, cols),
                }
            });
            // The online softmax step, its probabilities written straight as bf16 pairs (an
            // odd last key pairs with a zero).
            let key_pairs = cols.div_ceil(2);
            let p_pairs = &mut scratch.p_pairs[..rows * key_pairs];
            softmax_to_pairs(s, cols, scale, (max, sum), out, dv, p_pairs);
            let first_pair = k0 / 2;
            let mut r = 0;
            if tiles && key_pairs.is_multiple_of(amx::TILE) && dv.is_multiple_of(amx::TILE) {
                // SAFETY: `p_pairs` is `rows x key_pairs`, the values from pair `first_pair`
                // `key_pairs` rows of `dv`, `out` `rows x dv`; AMX runs.
                amx::gemm(
                    p_pairs.as_ptr(),
                    key_pairs,
                    amx::BMatrix::rows(
                        v_packed.as_ptr().add(first_pair * keys.v_stride),
                        keys.v_stride,
                    ),
                    out.as_mut_ptr(),
                    dv,
                    (rows, dv, key_pairs),
                );
                r = rows;
            }
            // Channel blocks outer, rows inner, as for the scores: four channel blocks of the
            // tile's values stay in L1 while every row passes over them.
            let v = ValueRows {
                packed: v_packed,
                first_pair,
                key_pairs,
                width: dv,
                stride: keys.v_stride,
            };
            for_each_tile(r..rows, blocks_d, |r, four_rows, c, four_blocks| {
                let (pp, o) = (&p_pairs[r * key_pairs..], &mut out[r * dv..]);
                match (four_rows, four_blocks) {
                    (true, true) => value_block::<4, 4>(pp, key_pairs, v, c, o),
                    (true, false) => value_block::<4, 1>(pp, key_pairs, v, c, o),
                    (false, true) => value_block::<1, 4>(pp, key_pairs, v, c, o),
                    (false, false) => value_block::<1, 1>(pp, key_pairs, v, c, o),
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
        let diff = (a - b)
            .and_then(|d| d.sqr())
            .and_then(|d| d.sum_all())
            .and_then(|d| d.to_scalar::<f32>())
            .unwrap_or(f32::NAN);
        let norm = b
            .sqr()
            .and_then(|d| d.sum_all())
            .and_then(|d| d.to_scalar::<f32>())
            .unwrap_or(f32::NAN);
        (f64::from(diff) / f64::from(norm)).sqrt()
    }

    /// bf16 products against the exact kernel, on odd sizes that exercise every remainder path
    /// (rows not a multiple of 4, keys not a multiple of 16 nor even, several key tiles).
    #[test]
    fn matches_the_exact_kernel_within_bf16_rounding() -> Result<()> {
        if !cpu::bf16() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return Ok(());
        }
        let dev = Device::Cpu;
        for (lq, lk, d) in [
            (70usize, 531usize, 32usize),
            (64, 256, 256),
            (5, 17, 16),
            (130, 600, 64),
        ] {
            let q = Tensor::randn(0f32, 1.0, (2, 1, lq, d), &dev)?;
            let k = Tensor::randn(0f32, 1.0, (2, 1, lk, d), &dev)?;
            let v = Tensor::randn(0f32, 1.0, (2, 1, lk, d), &dev)?;
            let scale = 1.0 / (d as f64).sqrt();
            let fast = scaled_dot_product_bf16(&q, &k, &v, scale)?;
            let exact = crate::kernels::attention::scaled_dot_product_unfused(&q, &k, &v, scale)?;
            let e = rel_l2(&fast, &exact);
            // bf16 keeps 8 significant bits (relative rounding 2^-9 ~ 2e-3 per operand).
            assert!(e < 1e-2, "({lq}, {lk}, {d}): relative L2 {e:e}");
            assert!(e > 0.0, "bf16 path must differ from f32 at all");
        }
        Ok(())
    }

    /// The fused softmax step with its bf16 rounding gives the same bits as the online softmax
    /// followed by `to_bf16_pairs`: whole and partial 32- and 16-score chunks, an odd count,
    /// and a second tile whose larger scores rescale the first's accumulators.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fused_softmax_step_equals_the_two_steps() {
        if !cpu::bf16() {
            return;
        }
        let rows = 5;
        let dv = 16;
        for cols in [256usize, 64, 48, 33, 17, 1] {
            let key_pairs = cols.div_ceil(2);
            let (mut max_a, mut sum_a) = (vec![f32::NEG_INFINITY; rows], vec![0f32; rows]);
            let (mut max_b, mut sum_b) = (max_a.clone(), sum_a.clone());
            let mut out_a: Vec<f32> = (0..rows * dv).map(|i| (i as f32 * 0.3).cos()).collect();
            let mut out_b = out_a.clone();
            for (tile, amp) in [(0u32, 3.0f32), (1, 9.0)] {
                let scores: Vec<f32> = (0..rows * cols)
                    .map(|i| ((i as f32 + tile as f32 * 7.1) * 0.77).sin() * amp)
                    .collect();
                let mut s_a = scores.clone();
                crate::kernels::attention::online_softmax(
                    &mut s_a, cols, 0.0625, &mut max_a, &mut sum_a, &mut out_a, dv,
                );
                let mut pairs_a = vec![0u32; rows * key_pairs];
                for r in 0..rows {
                    // SAFETY: AVX512-BF16 checked above; both slices hold one row.
                    unsafe {
                        crate::kernels::bf16::to_bf16_pairs(
                            &s_a[r * cols..(r + 1) * cols],
                            &mut pairs_a[r * key_pairs..(r + 1) * key_pairs],
                        )
                    };
                }
                let mut s_b = scores;
                let mut pairs_b = vec![0u32; rows * key_pairs];
                // SAFETY: AVX512-BF16 checked above; `rows x cols` scores, `rows x dv`
                // accumulators and `rows x key_pairs` pairs.
                unsafe {
                    x86::softmax_to_pairs(
                        &mut s_b,
                        cols,
                        0.0625,
                        (&mut max_b, &mut sum_b),
                        &mut out_b,
                        dv,
                        &mut pairs_b,
                    )
                };
                assert_eq!(pairs_a, pairs_b, "{cols} keys, tile {tile}: probabilities");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&max_a), bits(&max_b), "{cols} keys: maxima");
                assert_eq!(bits(&sum_a), bits(&sum_b), "{cols} keys: sums");
                assert_eq!(
                    bits(&out_a),
                    bits(&out_b),
                    "{cols} keys: rescaled accumulators"
                );
            }
        }
        // The 16-lane exponential against the scalar one, bit for bit, over its whole range.
        for i in 0..20_000 {
            let x = [
                -(i as f32) * 0.0047,
                -(i as f32) * 1.3e-6,
                -100.0 - i as f32,
            ];
            for x in x {
                let mut lanes = [0f32; 16];
                // SAFETY: AVX512-BF16 (hence AVX-512F) checked above.
                unsafe {
                    use std::arch::x86_64::*;
                    _mm512_storeu_ps(lanes.as_mut_ptr(), x86::exp_neg16(_mm512_set1_ps(x)));
                }
                let want = crate::kernels::attention::exp_neg(x);
                assert_eq!(lanes[3].to_bits(), want.to_bits(), "exp({x})");
            }
        }
    }

    /// The threaded vector packing equals the scalar definitions, for odd key counts and
    /// widths and more keys than one packing task.
    #[test]
    fn vector_packing_equals_scalar() {
        if !cpu::bf16() {
            return;
        }
        for (lk, d, dv) in [
            (1usize, 4usize, 16usize),
            (37, 65, 64),
            (600, 256, 256),
            (513, 9, 32),
        ] {
            let k: Vec<f32> = (0..lk * d).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
            let v: Vec<f32> = (0..lk * dv).map(|i| (i as f32 * 0.11).cos()).collect();
            let p = PackedKeys::new(&k, &v, lk, d, dv);
            assert_eq!(
                p.keys.as_slice(),
                pack_keys(&k, lk, d, packed_pairs(d)),
                "keys {lk}x{d}"
            );
            let stride = spread_row_stride(dv);
            assert_eq!(
                p.values.as_slice(),
                pack_values(&v, lk, dv, stride),
                "values {lk}x{dv}"
            );
        }
    }

    #[test]
    fn packing_layouts() {
        // Two keys of width 4: block 0, pairs p=0,1; lane = key.
        let k = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let p = pack_keys(&k, 2, 4, 2);
        assert_eq!(p.len(), 2 * 16);
        let pair = |a: f32, b: f32| bf16_bits(a) | (bf16_bits(b) << 16);
        assert_eq!(p[0], pair(1.0, 2.0)); // p=0, key 0
        assert_eq!(p[1], pair(5.0, 6.0)); // p=0, key 1
        assert_eq!(p[2], 0); // key 2 does not exist
        assert_eq!(p[16], pair(3.0, 4.0)); // p=1, key 0
                                           // Three values of width 2 (odd key count): pairs (v0, v1), (v2, 0).
        let v = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let p = pack_values(&v, 3, 2, 2);
        assert_eq!(
            p,
            vec![
                pair(1.0, 3.0),
                pair(2.0, 4.0),
                pair(5.0, 0.0),
                pair(6.0, 0.0)
            ]
        );
    }
}
