//! A 1x1-conv MLP with GELU and a residual, `r + s * conv2(gelu(conv1(x)))` (`c -> hid -> c`), as
//! one CPU pass over blocks of pixels: RepViT's channel mixer (`r = x`, no scale) and the memory
//! fuser's ConvNeXt MLP (`x` the normed features, `r` the block input, `s` the layer scale).
//! `conv2` may have fewer outputs than `c` (then `r` has as many): the memory encoder folds its
//! output projection into the last fuser block's `conv2`.
//!
//! Run as two fused 1x1 convs, the `2c x H x W` hidden activation (25 MiB per block at the
//! 1024 input's first stage) goes to memory three times: written by the first product, read and
//! rewritten by the GELU, read again (packed) by the second product. Here each task takes
//! [`COLS`] pixels: it packs their `c` input values, computes the `2c x COLS` hidden block, applies
//! the GELU and packs it while it sits in L2, and writes `x + b2 + W2 h` straight into the
//! output. Same products, same GELU (`gelu_slice`), same f32 accumulation; only the summation
//! order inside the products can differ from the two-op path, which is float noise.
//!
//! In the bf16 fast mode both products take bf16 inputs with f32 accumulation
//! ([`super::pointwise_bf16`]'s block kernel), with the same per-pixel sums as the two bf16
//! convs one after the other: 1.8-2x the exact mixer at the stride-16/32 stages and the memory
//! fuser's shape.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use super::pointwise_bf16::{accumulate_block, BlockScratch, PackedWeight};
use crate::kernels::gelu::gelu_slice;
use crate::kernels::gemm::{packed_a_unchecked, PackedA, PackedB, NR};
use crate::kernels::{f32_slice, run_tasks_with, threads};

/// Pixels per block: the hidden block (`2c x COLS`, 192 KiB at `c = 384`) stays in L2 beside the
/// weights (64 against 128: BENCHMARKS.md, "Kernel notes"). Small maps take one panel (32)
/// per block, so that every worker gets several.
const COLS: usize = 64;

/// The op: `conv1` `[hid, c]` + bias, GELU, `conv2` `[c, hid]` + bias, times an optional
/// per-channel `scale`, plus the residual (the op's second input). The weights are in row
/// blocks for the exact products.
pub(crate) struct ChannelMixer<'a> {
    pub w1: &'a PackedA,
    pub b1: &'a [f32],
    pub w2: &'a PackedA,
    pub b2: &'a [f32],
    pub scale: Option<&'a [f32]>,
    /// What the MLP's input block is made from.
    pub input: MixerInput<'a>,
    /// Both convs' weights as bf16 pairs (the bf16 fast mode): the products take bf16 inputs
    /// with f32 accumulation; the block, GELU, bias, scale and residual stay as above.
    pub bf16: Option<(&'a PackedWeight, &'a PackedWeight)>,
}

/// The MLP's input (and, but for [`MixerInput::Map`], its residual), formed per pixel block:
/// the ops before the mixer then never write their output to memory. Except for `Map`, the op's
/// inputs are the block input (twice).
#[derive(Clone, Copy)]
pub(crate) enum MixerInput<'a> {
    /// The op's first input as it is (the residual is its second input).
    Map,
    /// A stride-1 depthwise conv of the input (RepViT's token mixer of a block without
    /// squeeze-excite).
    TokenMixer(&'a super::depthwise::Depthwise),
    /// `x * gate`, squeeze-excite's product, one gate value per (image, channel).
    Gated(&'a [f32]),
    /// A 1x1 conv of the `c_in`-channel input (weight `[c, c_in]`, bias `[c]`: RepViT's
    /// downsample's `channel_downsample` before its FFN).
    Projected(&'a PackedA, &'a [f32]),
}

/// `residual + scale * conv2(gelu(conv1(x)))` as one pass over pixel blocks (NCHW f32 on the
/// CPU; with an input formed per block, `x` and `residual` are both the block input).
pub(crate) fn channel_mixer(
    x: &Tensor,
    residual: &Tensor,
    op: &ChannelMixer,
) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op2_no_bwd(&residual.contiguous()?, op)
}

/// Per-worker scratch.
struct Scratch {
    x: PackedB,
    hidden: Vec<f32>,
    h: PackedB,
    /// `conv2`'s output block (before the scale, when there is one).
    y: Vec<f32>,
    /// The token mixer's, the gate's or the projection's output block `c x COLS` (only with
    /// one of them).
    t: Vec<f32>,
    /// The projection's packed input block `c_in x COLS` (only with a projection).
    xp: PackedB,
    /// bf16 pairs of a product's input block (only in the bf16 mode).
    pairs: BlockScratch,
}

impl ChannelMixer<'_> {
    /// `out (rows ld_out apart) += W x` for a block of `w` pixels whose `k` input planes lie
    /// `ld_x` apart in `x`; `first` picks `conv1` (`k = c`, else `conv2`, `k = hid`).
    ///
    /// # Safety
    /// `out` must address `rows x w` values (row stride `ld_out`) no other task touches;
    /// `x` must hold `(k - 1) * ld_x + w` values.
    #[allow(clippy::too_many_arguments)]
    unsafe fn product(
        &self,
        first: bool,
        k: usize,
        (packed, pairs): (&mut PackedB, &mut BlockScratch),
        x: &[f32],
        ld_x: usize,
        w: usize,
        out: *mut f32,
        ld_out: usize,
    ) {
        let weight = if first { self.w1 } else { self.w2 };
        match self.bf16 {
            Some((p1, p2)) => {
                let p = if first { p1 } else { p2 };
                // SAFETY: per the caller; `pairs` was sized for the wider of `c` and `hid`.
                unsafe { accumulate_block(p, x, ld_x, w, pairs, out, ld_out) }
            }
            None => {
                packed.fill_columns_from_rows(x, ld_x, w);
                // SAFETY: `weight` is `rows x k`, the packed block `k x w`, `out` per the caller.
                unsafe {
                    packed_a_unchecked(weight, packed, 0..k, 0..w, out, ld_out, true);
                }
            }
        }
    }
}

impl ChannelMixer<'_> {
    /// `out (rows ld_out apart) += W2 h` for the hidden block of `w` pixels: in the exact mode
    /// `h` is already packed (`conv1` wrote into its panels), in the bf16 mode `hidden` holds it
    /// row-major (`hid x w`).
    ///
    /// # Safety
    /// As [`Self::product`], with `hidden` / `h` holding the block's `hid` rows.
    unsafe fn second_product(
        &self,
        (h, pairs): (&mut PackedB, &mut BlockScratch),
        hidden: &[f32],
        w: usize,
        out: *mut f32,
    ) {
        let hid = self.b1.len();
        match self.bf16 {
            Some(_) => unsafe { self.product(false, hid, (h, pairs), hidden, w, w, out, w) },
            None => unsafe { packed_a_unchecked(self.w2, h, 0..hid, 0..w, out, w, true) },
        }
    }
}

impl CustomOp2 for ChannelMixer<'_> {
    fn name(&self) -> &'static str {
        "conv-mlp-residual"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
        res_storage: &CpuStorage,
        res_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c_in, height, width) = layout.shape().dims4()?;
        // The MLP's channels: the input's, or the projection's outputs.
        let c = match self.input {
            MixerInput::Projected(wp, bp) => {
                if (wp.m(), wp.k()) != (bp.len(), c_in) {
                    candle_core::bail!(
                        "channel mixer: a {}x{} projection with {} biases for {c_in} input \
                         channels",
                        wp.m(),
                        wp.k(),
                        bp.len()
                    );
                }
                wp.m()
            }
            _ => c_in,
        };
        let per_block = !matches!(self.input, MixerInput::Map);
        let hid = self.b1.len();
        // Output channels: `c` for RepViT and the fuser; fewer when a projection is folded into
        // `conv2` (the memory encoder's last fuser block).
        let co = self.b2.len();
        // With a projection the residual input is the block input itself (unused).
        let res_ch = if per_block { c_in } else { co };
        if res_layout.shape().dims() != [n, res_ch, height, width] {
            candle_core::bail!(
                "conv MLP: residual {:?} does not fit the input {:?} and {co} output channels",
                res_layout.shape().dims(),
                layout.shape().dims()
            );
        }
        if (self.w1.m(), self.w1.k()) != (hid, c)
            || (self.w2.m(), self.w2.k()) != (co, hid)
            || self.scale.is_some_and(|s| s.len() != co)
        {
            candle_core::bail!(
                "channel mixer: weights {}x{} / {}x{} and biases {}/{} do not fit {c} channels",
                self.w1.m(),
                self.w1.k(),
                self.w2.m(),
                self.w2.k(),
                hid,
                self.b2.len()
            );
        }
        if per_block && co != c {
            candle_core::bail!(
                "channel mixer: a residual formed per block needs {c} outputs, not {co}"
            );
        }
        match self.input {
            MixerInput::TokenMixer(t) if !t.is_same_size() || t.channels() != c => {
                candle_core::bail!(
                    "channel mixer: the fused token mixer must be a {c}-channel same-size conv"
                );
            }
            MixerInput::Gated(g) if g.len() != n * c => {
                candle_core::bail!(
                    "channel mixer: a gate of {} values for {n} image(s) of {c} channels",
                    g.len()
                );
            }
            _ => {}
        }
        let x = f32_slice(storage, layout, "conv MLP input")?;
        let res = f32_slice(res_storage, res_layout, "conv MLP residual")?;
        let hw = height * width;
        // Every element is written by exactly one task before `set_len` below (no zeroing pass:
        // for these multi-MiB outputs it cost ~2.5 % of the backbone).
        let len = n * co * hw;
        let mut out: Vec<f32> = Vec::with_capacity(len);
        let shape = Shape::from((n, co, height, width));
        if len == 0 {
            return Ok((CpuStorage::F32(out), shape));
        }
        let cols = crate::kernels::units_per_task(n * hw, COLS, NR, 2 * c * hid);
        let chunks = hw.div_ceil(cols);
        // Consecutive pixel blocks per task (a few tasks per worker): a worker then walks down
        // rows, and the token mixer's input rows it read for one block are still in its L2 for
        // the next.
        let total = n * chunks;
        let group = (total / (crate::kernels::threads::TASKS_PER_WORKER * threads()).max(1)).max(1);
        let tasks: Vec<std::ops::Range<usize>> = (0..total)
            .step_by(group)
            .map(|t| t..(t + group).min(total))
            .collect();
        // Tasks write disjoint pixel columns of `out`; its address travels as an integer.
        let out_addr = out.as_mut_ptr() as usize;
        run_tasks_with(
            tasks,
            threads(),
            || Scratch {
                // The exact products' packed blocks (the bf16 ones pack into `pairs`).
                x: PackedB::zeroed(if self.bf16.is_some() { 0 } else { c }, COLS),
                // Only the bf16 products read the hidden block row-major.
                hidden: vec![0f32; if self.bf16.is_some() { hid * COLS } else { 0 }],
                h: PackedB::zeroed(if self.bf16.is_some() { 0 } else { hid }, COLS),
                y: vec![0f32; co * COLS],
                t: vec![0f32; if per_block { c * COLS } else { 0 }],
                xp: PackedB::zeroed(
                    if matches!(self.input, MixerInput::Projected(..)) {
                        c_in
                    } else {
                        0
                    },
                    COLS,
                ),
                pairs: if self.bf16.is_some() {
                    BlockScratch::new(c.max(hid), COLS)
                } else {
                    BlockScratch::default()
                },
            },
            |s, group: std::ops::Range<usize>| {
                for task in group {
                    let (b, j0) = (task / chunks, (task % chunks) * cols);
                    let w = cols.min(hw - j0);
                    let img = &x[b * c_in * hw..(b + 1) * c_in * hw];
                    // The MLP input (and residual) block: rows of `res`, `ld` apart, from `r0`.
                    let (res, ld, r0) = match self.input {
                        MixerInput::Projected(wp, bp) => {
                            // As the 1x1 conv's own pass computes it: the bias, then the
                            // product accumulated onto it (the same sums).
                            s.xp.fill_columns_from_rows(&img[j0..], hw, w);
                            let t = &mut s.t[..c * w];
                            for (row, &bias) in t.chunks_exact_mut(w).zip(bp) {
                                row.fill(bias);
                            }
                            // SAFETY: `wp` is `c x c_in` (checked above), the packed block
                            // `c_in x w`, `t` this worker's `c x w` block (row stride `w`).
                            unsafe {
                                packed_a_unchecked(
                                    wp,
                                    &s.xp,
                                    0..c_in,
                                    0..w,
                                    t.as_mut_ptr(),
                                    w,
                                    true,
                                );
                            }
                            (&s.t[..c * w], w, 0)
                        }
                        MixerInput::Gated(gate) => {
                            let t = &mut s.t[..c * w];
                            let gate = &gate[b * c..(b + 1) * c];
                            for ((row, &g), plane) in
                                t.chunks_exact_mut(w).zip(gate).zip(img.chunks_exact(hw))
                            {
                                for (v, &x) in row.iter_mut().zip(&plane[j0..j0 + w]) {
                                    *v = x * g;
                                }
                            }
                            (&s.t[..c * w], w, 0)
                        }
                        MixerInput::TokenMixer(dw) => {
                            let t = &mut s.t[..c * w];
                            // Row segments of the flattened pixel range `j0 .. j0 + w`.
                            let mut j = j0;
                            while j < j0 + w {
                                let (oy, ox0) = (j / width, j % width);
                                let n = (width - ox0).min(j0 + w - j);
                                for (ch, row) in t.chunks_exact_mut(w).enumerate() {
                                    dw.row_segment(
                                        ch,
                                        &img[ch * hw..(ch + 1) * hw],
                                        (height, width),
                                        (oy, ox0),
                                        &mut row[j - j0..j - j0 + n],
                                    );
                                }
                                j += n;
                            }
                            (&s.t[..c * w], w, 0)
                        }
                        MixerInput::Map => (&res[b * co * hw..(b + 1) * co * hw], hw, j0),
                    };
                    let src = if per_block { res } else { &img[j0..] };
                    if self.bf16.is_some() {
                        let hidden = &mut s.hidden[..hid * w];
                        for (row, &bias) in hidden.chunks_mut(w).zip(self.b1) {
                            row.fill(bias);
                        }
                        // SAFETY: `hidden` is this worker's `hid x w` block (row stride `w`);
                        // `src` holds the `c` input planes `ld` apart from the block's first
                        // pixel.
                        unsafe {
                            let out = hidden.as_mut_ptr();
                            self.product(true, c, (&mut s.x, &mut s.pairs), src, ld, w, out, w);
                        }
                        gelu_slice(hidden);
                    } else {
                        // Exact: `conv1` writes each 32-pixel panel of the hidden block straight
                        // into the packed layout `conv2` reads (no row-major block and repack);
                        // the same sums and GELU per value.
                        s.x.fill_columns_from_rows(src, ld, w);
                        let panels = s.h.panels_mut(w);
                        for (p, panel) in panels.chunks_mut(hid * NR).enumerate() {
                            for (row, &bias) in panel.chunks_mut(NR).zip(self.b1) {
                                row.fill(bias);
                            }
                            let cols = p * NR..(p * NR + NR).min(w);
                            // SAFETY: `w1` is `hid x c` (checked above), the packed input
                            // `c x w` with `cols` inside it, `panel` a `hid x NR` block (row
                            // stride `NR`).
                            unsafe {
                                packed_a_unchecked(
                                    self.w1,
                                    &s.x,
                                    0..c,
                                    cols,
                                    panel.as_mut_ptr(),
                                    NR,
                                    true,
                                );
                            }
                        }
                        gelu_slice(panels);
                    }
                    let hidden = &s.hidden[..if self.bf16.is_some() { hid * w } else { 0 }];
                    let dst = (out_addr as *mut f32).wrapping_add(b * co * hw + j0);
                    let r = res;
                    // SAFETY: `dst` addresses pixels `j0..j0 + w` of image `b`'s `co x hw` output
                    // block (row stride `hw`), which no other task touches; `w2` is `co x hid` and
                    // the packed hidden block `hid x w`; `y` is `co x w`.
                    unsafe {
                        match self.scale {
                            None => {
                                // Into the local block, then copied out: in place, the
                                // product's rows would lie `hw` floats apart, a power of two
                                // that maps them all to the same cache sets.
                                let y = &mut s.y[..co * w];
                                for (o, (row, &bias)) in y.chunks_mut(w).zip(self.b2).enumerate() {
                                    for (v, r) in row.iter_mut().zip(&r[o * ld + r0..][..w]) {
                                        *v = r + bias;
                                    }
                                }
                                let out = y.as_mut_ptr();
                                self.second_product((&mut s.h, &mut s.pairs), hidden, w, out);
                                for (o, yr) in y.chunks(w).enumerate() {
                                    let row = crate::kernels::uninit_row(dst.add(o * hw), w);
                                    for (v, &yv) in row.iter_mut().zip(yr) {
                                        v.write(yv);
                                    }
                                }
                            }
                            Some(scale) => {
                                let y = &mut s.y[..co * w];
                                for (row, &bias) in y.chunks_mut(w).zip(self.b2) {
                                    row.fill(bias);
                                }
                                let out = y.as_mut_ptr();
                                self.second_product((&mut s.h, &mut s.pairs), hidden, w, out);
                                for (o, (yr, &g)) in y.chunks(w).zip(scale).enumerate() {
                                    let row = crate::kernels::uninit_row(dst.add(o * hw), w);
                                    let rr = &r[o * ld + r0..][..w];
                                    for ((v, &yv), &rv) in row.iter_mut().zip(yr).zip(rr) {
                                        v.write(rv + yv * g);
                                    }
                                }
                            }
                        }
                    }
                }
            },
        );
        // SAFETY: the tasks cover every (image, pixel block) and each wrote all `co` rows of its
        // block (the residual + bias or scaled rows above, before the product accumulated into
        // them); `run_tasks_with` returns only after every task ran, and a panicking task
        // propagates before this line.
        unsafe { out.set_len(len) };
        Ok((CpuStorage::F32(out), shape))
    }
}
