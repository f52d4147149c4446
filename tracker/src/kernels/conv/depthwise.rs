//! Depthwise convolution (one filter per channel) as a CPU kernel.
//!
//! candle runs a grouped convolution as one small convolution per group, which for RepViT's
//! 48..384-channel depthwise layers costs more than the rest of the backbone. This kernel walks
//! each channel plane directly (rows as contiguous slices, so the inner loop vectorizes) and
//! splits planes over threads. Other devices fall back to candle's grouped `conv2d`.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};

use crate::kernels::cpu::Isa;
use crate::kernels::f32_slice;
use crate::kernels::simd::{self, dispatch, F32s};

/// Outputs per task worth a hand-out of their own (with `MIN_TASK_MACS`'s wake-up cost): a
/// depthwise output costs a few loads and `k * k` multiply-adds, bound by memory rather than
/// arithmetic.
const PLANE_VALUES_PER_TASK: usize = 1 << 14;

/// A depthwise `k x k` convolution with bias, square stride and zero padding (public for the
/// kernel benchmarks in `benches/`).
pub struct Depthwise {
    /// `[C, 1, k, k]`, used by the fallback path.
    weight: Tensor,
    /// `[1, C, 1, 1]`, used by the fallback path.
    bias: Tensor,
    kernel: Kernel,
}

/// The host copy of the parameters the CPU kernel reads.
struct Kernel {
    weight: Vec<f32>,
    bias: Vec<f32>,
    channels: usize,
    k: usize,
    stride: usize,
    padding: usize,
}

impl Depthwise {
    /// `weight` `[C, 1, k, k]` and `bias` `[C]`, both f32.
    pub fn new(
        weight: Tensor,
        bias: Tensor,
        stride: usize,
        padding: usize,
    ) -> candle_core::Result<Self> {
        let (channels, one, k, k2) = weight.dims4()?;
        if one != 1 || k != k2 || k == 0 || stride == 0 {
            candle_core::bail!(
                "depthwise conv expects a [C, 1, k, k] kernel (k > 0) and stride > 0, got {:?} / stride {stride}",
                weight.dims()
            );
        }
        let kernel = Kernel {
            weight: weight.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?,
            bias: bias.to_dtype(DType::F32)?.to_vec1()?,
            channels,
            k,
            stride,
            padding,
        };
        let bias = bias.reshape((1, channels, 1, 1))?;
        Ok(Self {
            weight,
            bias,
            kernel,
        })
    }

    /// Whether this is a stride-1 "same" convolution, which [`Self::row_segment`] computes
    /// piecewise (RepViT's token mixers, fused into the channel mixer's pixel blocks).
    pub(crate) fn is_same_size(&self) -> bool {
        let k = &self.kernel;
        k.stride == 1 && 2 * k.padding + 1 == k.k
    }

    /// Channels.
    pub(crate) fn channels(&self) -> usize {
        self.kernel.channels
    }

    /// Outputs `ox0 .. ox0 + out.len()` of row `oy` of channel `c` for a stride-1 "same"
    /// convolution of `plane` (`h x w`), with the per-output operation order of the whole-plane
    /// kernel (bias, then every tap inside the image in row-major order), so the values are
    /// bit-identical to [`Self::forward`]'s.
    pub(crate) fn row_segment(
        &self,
        c: usize,
        plane: &[f32],
        hw: (usize, usize),
        at: (usize, usize),
        out: &mut [f32],
    ) {
        // The callers (the channel mixer's tasks) are compiled for baseline x86-64: the
        // widest vectors in effect, the same operations (no FMA contraction), the same bits.
        crate::kernels::wide(
            #[inline(always)]
            || self.row_segment_body(c, plane, hw, at, out),
        );
    }

    #[inline(always)]
    fn row_segment_body(
        &self,
        c: usize,
        plane: &[f32],
        (h, w): (usize, usize),
        (oy, ox0): (usize, usize),
        out: &mut [f32],
    ) {
        let Kernel {
            k,
            padding: p,
            ref weight,
            ref bias,
            ..
        } = self.kernel;
        let wk = &weight[c * k * k..(c + 1) * k * k];
        out.fill(bias[c]);
        let ox1 = ox0 + out.len();
        for ky in 0..k {
            let iy = (oy + ky) as isize - p as isize;
            if iy < 0 || iy >= h as isize {
                continue;
            }
            let irow = &plane[iy as usize * w..(iy as usize + 1) * w];
            for (kx, &wv) in wk[ky * k..(ky + 1) * k].iter().enumerate() {
                // Outputs whose input column `ox + kx - p` lies inside the row.
                let lo = ox0.max(p.saturating_sub(kx));
                let hi = ox1.min((w + p).saturating_sub(kx));
                if lo >= hi {
                    continue;
                }
                let src = &irow[lo + kx - p..hi + kx - p];
                for (o, i) in out[lo - ox0..hi - ox0].iter_mut().zip(src) {
                    *o += wv * i;
                }
            }
        }
    }

    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            x.contiguous()?.apply_op1_no_bwd(&self.kernel)
        } else {
            let k = &self.kernel;
            x.conv2d(&self.weight, k.padding, k.stride, 1, k.channels)?
                .broadcast_add(&self.bias)
        }
    }
}

impl Kernel {
    fn out_size(&self, n: usize) -> usize {
        (n + 2 * self.padding).saturating_sub(self.k) / self.stride + 1
    }

    /// [`Self::plane`] in the vectors of the instruction set in effect (`pad`: the worker's
    /// scratch for the padded plane). Only the vector width changes (no FMA contraction), so
    /// results are bit-identical on every path.
    #[allow(clippy::too_many_arguments)]
    fn plane_dispatch(
        &self,
        c: usize,
        inp: &[f32],
        h: usize,
        w: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
        pad: &mut Vec<f32>,
    ) {
        dispatch(Plane {
            kernel: self,
            c,
            inp,
            hw: (h, w),
            out,
            ohw: (oh, ow),
            pad,
        });
    }

    /// One channel plane: stride 1 and 2 (RepViT's 3x3 token mixers and downsamples, the memory
    /// fuser's 7x7) in register tiles over a zero-padded copy of the plane
    /// ([`Self::plane_padded`]), other strides tap by tap.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn plane<V: F32s>(
        &self,
        c: usize,
        inp: &[f32],
        h: usize,
        w: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
        pad: &mut Vec<f32>,
    ) {
        if (self.stride == 1 || self.stride == 2) && self.padding < self.k {
            // Vectors per row segment: as many as the row fills, up to 4; rows per tile so that
            // the tile holds 8 vectors of sums (independent chains of adds: one chain per
            // vector, 9 dependent adds for a 3x3, would leave the adders waiting).
            let vectors = ow.div_ceil(V::LANES).next_power_of_two();
            let hw = (h, w, oh, ow);
            match vectors {
                0 | 1 => self.plane_padded::<V, 8, 1>(c, inp, hw, out, pad),
                2 => self.plane_padded::<V, 4, 2>(c, inp, hw, out, pad),
                _ => self.plane_padded::<V, 2, 4>(c, inp, hw, out, pad),
            }
        } else {
            self.plane_taps(c, inp, h, w, out, oh, ow);
        }
    }

    /// Stride 1 or 2: the plane copied once into `pad` with its zero border (`p` rows above and
    /// below, `p` columns left, zeros right to whole row segments), each padded row split into
    /// its `s` column phases (padded column `q` at phase `q % s`, index `q / s`: every tap then
    /// reads a contiguous run, as at stride 1), then tiles of `R` output rows x `NV` vectors
    /// accumulate all `k * k` taps in registers. The tap-by-tap form
    /// makes `k * k` passes over every output row with per-tap bookkeeping: for the 7x7 on
    /// 64-wide rows that bookkeeping was most of the time, and on the 3x3's short rows each
    /// tap's run (14-16 values) fell to scalar code. Per output the sum runs in the same order
    /// (bias, then taps row by row, each product rounded before its add); a padding tap adds
    /// `w * 0`, so the values are equal to the tap-by-tap form's.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn plane_padded<V: F32s, const R: usize, const NV: usize>(
        &self,
        c: usize,
        inp: &[f32],
        (h, w, oh, ow): (usize, usize, usize, usize),
        out: &mut [f32],
        pad: &mut Vec<f32>,
    ) {
        let (k, s, p) = (self.k, self.stride, self.padding);
        let wk = &self.weight[c * k * k..(c + 1) * k * k];
        let b = self.bias[c];
        let seg = NV * V::LANES;
        // A phase holds every output segment's columns plus the taps' reach past them, and
        // every input column (`k >= 1`: `Depthwise::new` refuses an empty kernel).
        let phase = (ow.div_ceil(seg) * seg + (k - 1) / s).max((w + p).div_ceil(s));
        let len = s * phase;
        // Padded rows: every output row's taps (`(oh - 1) * s + k`, more than `h + 2p` only when
        // the kernel is larger than the padded plane) and every input row; zero past the input.
        let rows = (h + 2 * p).max(oh.saturating_sub(1) * s + k);
        pad.resize(rows * len, 0.0);
        let pad = &mut pad[..rows * len];
        pad[..p * len].fill(0.0);
        pad[(h + p) * len..].fill(0.0);
        for (prow, irow) in pad[p * len..(h + p) * len]
            .chunks_exact_mut(len)
            .zip(inp.chunks_exact(w))
        {
            if s == 1 {
                prow[..p].fill(0.0);
                prow[p..p + w].copy_from_slice(irow);
                prow[p + w..].fill(0.0);
            } else {
                // Stride 2: padded column `q = ix + p` goes to phase `q % 2`, index `q / 2`; in
                // pairs from the first even `q`, one value to each phase.
                prow.fill(0.0);
                let (even, odd) = prow.split_at_mut(phase);
                let start = p % 2;
                if start == 1 {
                    if let Some(&v) = irow.first() {
                        odd[p / 2] = v;
                    }
                }
                let body = irow.get(start..).unwrap_or_default();
                let base = (start + p) / 2;
                let pairs = body.chunks_exact(2);
                let last = pairs.remainder().first().copied();
                for ((e, o), pair) in even[base..]
                    .iter_mut()
                    .zip(odd[base..].iter_mut())
                    .zip(pairs)
                {
                    *e = pair[0];
                    *o = pair[1];
                }
                if let Some(v) = last {
                    even[(w - 1 + p) / 2] = v;
                }
            }
        }
        let tile = Tile {
            pad,
            len,
            phase,
            stride: s,
            wk,
            k,
            bias: b,
        };
        for x0 in (0..ow).step_by(seg) {
            let n = seg.min(ow - x0);
            let mut oy = 0;
            while oy < oh {
                if oh - oy >= R {
                    // SAFETY: padded rows `oy * s .. (oy + R - 1) * s + k` lie inside `pad`
                    // (`(oh - 1) * s + k <= rows`), each phase's columns `x0 .. x0 + seg + (k -
                    // 1) / s` inside `phase`; the outputs inside `out`; `dispatch` runs this
                    // where `V`'s instruction set is present.
                    unsafe { tile.run::<V, R, NV>((oy, x0), n, out, ow) };
                    oy += R;
                } else {
                    // SAFETY: as above, one row.
                    unsafe { tile.run::<V, 1, NV>((oy, x0), n, out, ow) };
                    oy += 1;
                }
            }
        }
    }

    /// One channel plane, tap by tap: `out` starts at the bias and accumulates each tap as a
    /// row update.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn plane_taps(
        &self,
        c: usize,
        inp: &[f32],
        h: usize,
        w: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
    ) {
        let (k, s, p) = (self.k, self.stride, self.padding);
        let wk = &self.weight[c * k * k..(c + 1) * k * k];
        out.fill(self.bias[c]);
        // Strided: each input row split once into its `s` column phases (row `iy`'s phase `r`
        // at `(iy * s + r) * phase_len`, its value `j` column `j * s + r`), so that every tap
        // reads a contiguous run, as at stride 1, instead of every `s`-th value (which does
        // not vectorise). Same products, same order.
        let phase_len = w.div_ceil(s);
        let mut phases = Vec::new();
        if s > 1 {
            phases = vec![0f32; h * s * phase_len];
            for (irow, prow) in inp
                .chunks_exact(w)
                .zip(phases.chunks_exact_mut(s * phase_len))
            {
                for (j, group) in irow.chunks(s).enumerate() {
                    for (r, &v) in group.iter().enumerate() {
                        prow[r * phase_len + j] = v;
                    }
                }
            }
        }
        for oy in 0..oh {
            let orow = &mut out[oy * ow..(oy + 1) * ow];
            for ky in 0..k {
                let iy = (oy * s + ky) as isize - p as isize;
                if iy < 0 || iy >= h as isize {
                    continue;
                }
                let iy = iy as usize;
                let irow = &inp[iy * w..(iy + 1) * w];
                for kx in 0..k {
                    let wv = wk[ky * k + kx];
                    // Output columns whose input column `ox*s + kx - p` lies inside the row.
                    let lo = if kx >= p { 0 } else { (p - kx).div_ceil(s) };
                    let hi = if w + p > kx {
                        ((w + p - kx - 1) / s + 1).min(ow)
                    } else {
                        0
                    };
                    if lo >= hi {
                        continue;
                    }
                    if s == 1 {
                        let start = lo + kx - p;
                        let src = &irow[start..start + (hi - lo)];
                        for (o, i) in orow[lo..hi].iter_mut().zip(src) {
                            *o += wv * i;
                        }
                    } else {
                        // Column `ox * s + kx - p` is `phases[r][ox + q]`.
                        let d = kx as isize - p as isize;
                        let (r, q) = (d.rem_euclid(s as isize), d.div_euclid(s as isize));
                        let start = (iy * s + r as usize) * phase_len + (lo as isize + q) as usize;
                        let src = &phases[start..start + (hi - lo)];
                        for (o, i) in orow[lo..hi].iter_mut().zip(src) {
                            *o += wv * i;
                        }
                    }
                }
            }
        }
    }
}

impl CustomOp1 for Kernel {
    fn name(&self) -> &'static str {
        "depthwise-conv2d"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, h, w) = layout.shape().dims4()?;
        if c != self.channels {
            candle_core::bail!(
                "depthwise conv has {} channels, input has {c}",
                self.channels
            );
        }
        let data = f32_slice(storage, layout, "depthwise conv input")?;
        let (oh, ow) = (self.out_size(h), self.out_size(w));
        let planes = n * c;
        // Whole planes per task, handed out dynamically (the machine is shared); each task's
        // planes are zeroed by its worker right before the kernel writes them (in cache: one
        // pass over the output instead of a separate zeroing pass). A task's worth: about
        // [`PLANE_VALUES_PER_TASK`] outputs (the 512 input's last stage has 384 planes of 256).
        let plane_len = oh * ow;
        let per_task = crate::kernels::units_per_task(
            planes,
            planes,
            1,
            plane_len.max(1) * crate::kernels::threads::MIN_TASK_MACS / PLANE_VALUES_PER_TASK,
        );
        let out = crate::kernels::output_in_chunks_with(
            planes * plane_len,
            per_task * plane_len,
            Vec::new,
            |pad, task, o| {
                for (i, o) in o.chunks_exact_mut(plane_len.max(1)).enumerate() {
                    let plane = task * per_task + i;
                    let inp = &data[plane * h * w..(plane + 1) * h * w];
                    self.plane_dispatch(plane % c, inp, h, w, o, oh, ow, pad);
                }
            },
        );
        Ok((CpuStorage::F32(out), Shape::from((n, c, oh, ow))))
    }
}

/// One channel plane of a depthwise convolution, as a kernel of every instruction set.
struct Plane<'a> {
    kernel: &'a Kernel,
    c: usize,
    inp: &'a [f32],
    hw: (usize, usize),
    out: &'a mut [f32],
    ohw: (usize, usize),
    pad: &'a mut Vec<f32>,
}

impl simd::Kernel for Plane<'_> {
    type Output = ();

    #[inline(always)]
    fn run<V: F32s>(self) {
        let ((h, w), (oh, ow)) = (self.hw, self.ohw);
        self.kernel
            .plane::<V>(self.c, self.inp, h, w, self.out, oh, ow, self.pad);
    }
}

/// The padded plane and one channel's filter, for the register tiles of
/// [`Kernel::plane_padded`].
struct Tile<'a> {
    pad: &'a [f32],
    /// Row stride of `pad`.
    len: usize,
    /// Values per column phase of a padded row (`len / stride`).
    phase: usize,
    stride: usize,
    wk: &'a [f32],
    k: usize,
    bias: f32,
}

impl Tile<'_> {
    /// Output rows `oy .. oy + R`, columns `x0 .. x0 + n` (`n <= NV * LANES`): `R x NV` vectors
    /// of sums in registers, each starting at the bias and adding every tap in row-major order
    /// (multiply, then add: not fused, the same bits on every path). The portable path runs the
    /// same sums one value at a time.
    ///
    /// # Safety
    /// Padded rows `oy * s .. (oy + R - 1) * s + k` exist and each phase holds at least `x0 +
    /// NV * LANES + (k - 1) / s` values; `out` (row stride `ow`) holds rows `oy .. oy + R`;
    /// `V`'s instruction set is present.
    #[inline(always)]
    unsafe fn run<V: F32s, const R: usize, const NV: usize>(
        &self,
        (oy, x0): (usize, usize),
        n: usize,
        out: &mut [f32],
        ow: usize,
    ) {
        let (k, len, s, phase) = (self.k, self.len, self.stride, self.phase);
        // Tap `kx` of output column `x0 + j` (padded column `(x0 + j) * s + kx`).
        let col = |kx: usize| (kx % s) * phase + x0 + kx / s;
        if V::ISA == Isa::Portable {
            for r in 0..R {
                let orow = &mut out[(oy + r) * ow + x0..][..n];
                for (j, o) in orow.iter_mut().enumerate() {
                    let mut acc = self.bias;
                    for (ky, wrow) in self.wk.chunks_exact(k).enumerate() {
                        let row = &self.pad[((oy + r) * s + ky) * len..][..len];
                        for (kx, &wv) in wrow.iter().enumerate() {
                            acc += wv * row[col(kx) + j];
                        }
                    }
                    *o = acc;
                }
            }
            return;
        }
        // SAFETY: per the caller's bounds; the sums live in `acc`, `R x NV` vectors.
        unsafe {
            let mut acc = [[V::splat(self.bias); NV]; R];
            let base = self.pad.as_ptr().add(oy * s * len);
            for (ky, wrow) in self.wk.chunks_exact(k).enumerate() {
                for (kx, &wv) in wrow.iter().enumerate() {
                    let wv = V::splat(wv);
                    for (r, row) in acc.iter_mut().enumerate() {
                        let src = base.add((r * s + ky) * len + col(kx));
                        for (v, a) in row.iter_mut().enumerate() {
                            *a = a.add(wv.mul(V::load(src.add(v * V::LANES))));
                        }
                    }
                }
            }
            for (r, row) in acc.iter().enumerate() {
                let dst = out.as_mut_ptr().add((oy + r) * ow + x0);
                for (v, a) in row.iter().enumerate() {
                    let at = v * V::LANES;
                    if at >= n {
                        break;
                    }
                    if n - at >= V::LANES {
                        a.store(dst.add(at));
                    } else {
                        a.store_partial(dst.add(at), n - at);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The kernel must agree with candle's grouped convolution for every stride/padding used.
    #[test]
    fn matches_grouped_conv() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (k, s, p, h, w) in [
            (3, 1, 1, 9, 7),
            (3, 2, 1, 9, 8),
            (3, 2, 1, 8, 8),
            (1, 1, 0, 5, 4),
        ] {
            let c = 5;
            let x = Tensor::randn(0f32, 1.0, (2, c, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 1.0, (c, 1, k, k), &dev)?;
            let b = Tensor::randn(0f32, 1.0, c, &dev)?;
            let dw = Depthwise::new(wt.clone(), b.clone(), s, p)?;
            let ours = dw.forward(&x)?;
            let theirs = x
                .conv2d(&wt, p, s, 1, c)?
                .broadcast_add(&b.reshape((1, c, 1, 1))?)?;
            assert_eq!(ours.dims(), theirs.dims());
            let d = (ours - theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(d < 1e-5, "k{k} s{s} p{p} {h}x{w}: {d}");
        }
        Ok(())
    }

    /// One random channel plane `h x w` and a random one-channel `k x k` depthwise conv with
    /// stride `s` and padding `p`: the conv, the plane's values and the output size.
    fn random_plane(
        k: usize,
        s: usize,
        p: usize,
        h: usize,
        w: usize,
    ) -> candle_core::Result<(Depthwise, Vec<f32>, (usize, usize))> {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (1, 1, h, w), &dev)?;
        let dw = Depthwise::new(
            Tensor::randn(0f32, 1.0, (1, 1, k, k), &dev)?,
            Tensor::randn(0f32, 1.0, 1, &dev)?,
            s,
            p,
        )?;
        let out = (dw.kernel.out_size(h), dw.kernel.out_size(w));
        Ok((dw, x.flatten_all()?.to_vec1::<f32>()?, out))
    }

    /// Strided planes read through the row's column phases: equal bit for bit to indexing
    /// every `s`-th input column (the same products added in the same order), for the
    /// encoder's stride-2 downsamples and odd sizes, paddings and strides around them.
    #[test]
    fn strided_taps_equal_indexed_columns() -> candle_core::Result<()> {
        for (k, s, p, h, w) in [
            (3usize, 2usize, 1usize, 9usize, 8usize),
            (3, 2, 1, 8, 9),
            (3, 2, 1, 128, 128),
            (3, 2, 0, 7, 7),
            (3, 3, 1, 10, 11),
            (5, 2, 2, 9, 13),
            (3, 2, 1, 1, 1),
            (3, 2, 1, 2, 3),
        ] {
            let (dw, inp, (oh, ow)) = random_plane(k, s, p, h, w)?;
            let kern = &dw.kernel;
            let mut ours = vec![0f32; oh * ow];
            kern.plane_taps(0, &inp, h, w, &mut ours, oh, ow);
            let wk = &kern.weight[..k * k];
            let mut indexed = vec![kern.bias[0]; oh * ow];
            for oy in 0..oh {
                for ky in 0..k {
                    let Some(iy) = (oy * s + ky).checked_sub(p).filter(|&iy| iy < h) else {
                        continue;
                    };
                    for kx in 0..k {
                        for ox in 0..ow {
                            if let Some(ix) = (ox * s + kx).checked_sub(p).filter(|&ix| ix < w) {
                                indexed[oy * ow + ox] += wk[ky * k + kx] * inp[iy * w + ix];
                            }
                        }
                    }
                }
            }
            assert_eq!(ours, indexed, "k{k} s{s} p{p} {h}x{w}");
        }
        Ok(())
    }

    /// The padded planes against the tap-by-tap form: equal values (same sum order), at
    /// widths around the 16-lane vectors and each group size (1, 2 and 4 vectors): the 7x7,
    /// RepViT's 3x3 at its rows of 16 to 128, and its stride-2 downsamples (with odd sizes,
    /// no padding, and a 5x5).
    #[test]
    fn wide_kernel_equals_tap_by_tap() -> candle_core::Result<()> {
        let same = |k: usize, h: usize, w: usize| (k, 1, k / 2, h, w);
        for (k, s, p, h, w) in [
            same(3, 16, 16),
            same(3, 32, 32),
            same(3, 64, 64),
            same(3, 128, 128),
            same(3, 5, 17),
            same(3, 9, 33),
            same(3, 7, 48),
            same(3, 1, 1),
            same(3, 2, 3),
            same(7, 9, 7),
            same(7, 20, 33),
            same(5, 4, 16),
            same(7, 3, 2),
            same(7, 64, 64),
            same(7, 9, 100),
            same(7, 70, 37),
            (3, 2, 1, 128, 128),
            (3, 2, 1, 64, 64),
            (3, 2, 1, 32, 32),
            (3, 2, 1, 9, 8),
            (3, 2, 1, 8, 9),
            (3, 2, 1, 7, 33),
            (3, 2, 1, 1, 1),
            (3, 2, 1, 2, 3),
            (3, 2, 0, 7, 7),
            (5, 2, 2, 9, 13),
            // Kernels larger than the padded plane (a checkpoint's shapes are not ours to pick).
            (7, 1, 1, 3, 3),
            (5, 2, 0, 2, 2),
        ] {
            let (dw, inp, (oh, ow)) = random_plane(k, s, p, h, w)?;
            let kern = &dw.kernel;
            let mut b = vec![0f32; oh * ow];
            kern.plane_taps(0, &inp, h, w, &mut b, oh, ow);
            // Every instruction set this CPU runs (the portable one is the plain group).
            for isa in crate::kernels::cpu::available_isas() {
                let mut a = vec![0f32; oh * ow];
                simd::dispatch_at(
                    isa,
                    Plane {
                        kernel: kern,
                        c: 0,
                        inp: &inp,
                        hw: (h, w),
                        out: &mut a,
                        ohw: (oh, ow),
                        pad: &mut Vec::new(),
                    },
                );
                assert_eq!(a, b, "k {k} s {s} p {p}, {h}x{w}, {isa}");
            }
        }
        Ok(())
    }
}
