//! RepViT's channel mixer `x + conv2(gelu(conv1(x)))` (two folded 1x1 convs, `c -> 2c -> c`) as
//! one CPU pass over blocks of pixels.
//!
//! Run as two fused 1x1 convs, the `2c x H x W` hidden activation (25 MiB per block at the
//! 1024 input's first stage) goes to memory three times: written by the first product, read and
//! rewritten by the GELU, read again (packed) by the second product. Here each task takes
//! [`COLS`] pixels: it packs their `c` input values, computes the `2c x COLS` hidden block, applies
//! the GELU and packs it while it sits in L2, and writes `x + b2 + W2 h` straight into the
//! output. Same products, same GELU (`gelu_slice`), same f32 accumulation; only the summation
//! order inside the products can differ from the two-op path, which is float noise.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape};

use super::gelu::gelu_slice;
use crate::gemm_f32::{packed_unchecked, PackedB};
use crate::kernels::{f32_slice, run_tasks_with, threads};

/// Pixels per task: the hidden block (`2c x COLS`, 384 KiB at `c = 384`) stays in L2.
const COLS: usize = 128;

/// The op: `conv1` `[2c, c]` + bias, GELU, `conv2` `[c, 2c]` + bias, residual.
pub(super) struct ChannelMixer<'a> {
    pub w1: &'a [f32],
    pub b1: &'a [f32],
    pub w2: &'a [f32],
    pub b2: &'a [f32],
}

/// Per-worker scratch.
struct Scratch {
    x: PackedB,
    hidden: Vec<f32>,
    h: PackedB,
}

impl CustomOp1 for ChannelMixer<'_> {
    fn name(&self) -> &'static str {
        "repvit-channel-mixer"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, height, width) = layout.shape().dims4()?;
        let hid = self.b1.len();
        if self.w1.len() != hid * c || self.w2.len() != c * hid || self.b2.len() != c {
            candle_core::bail!(
                "channel mixer: weights {}/{} and biases {}/{} do not fit {c} channels",
                self.w1.len(),
                self.w2.len(),
                hid,
                self.b2.len()
            );
        }
        let x = f32_slice(storage, layout, "channel mixer input")?;
        let hw = height * width;
        let mut out = vec![0f32; n * c * hw];
        let shape = Shape::from((n, c, height, width));
        if hw == 0 || c == 0 {
            return Ok((CpuStorage::F32(out), shape));
        }
        let chunks = hw.div_ceil(COLS);
        let tasks: Vec<usize> = (0..n * chunks).collect();
        // Tasks write disjoint pixel columns of `out`; its address travels as an integer.
        let out_addr = out.as_mut_ptr() as usize;
        run_tasks_with(
            tasks,
            threads(),
            || Scratch {
                x: PackedB::zeroed(c, COLS),
                hidden: vec![0f32; hid * COLS],
                h: PackedB::zeroed(hid, COLS),
            },
            |s, task| {
                let (b, j0) = (task / chunks, (task % chunks) * COLS);
                let w = COLS.min(hw - j0);
                let img = &x[b * c * hw..(b + 1) * c * hw];
                s.x.fill_columns_from_rows(&img[j0..], hw, w);
                let hidden = &mut s.hidden[..hid * w];
                for (row, &bias) in hidden.chunks_mut(w).zip(self.b1) {
                    row.fill(bias);
                }
                // SAFETY: `w1` is `hid x c`, the packed block `c x w`, `hidden` `hid x w`
                // (row stride `w`), all checked or sized above.
                unsafe {
                    packed_unchecked(
                        hid,
                        self.w1,
                        c,
                        &s.x,
                        0..c,
                        0..w,
                        hidden.as_mut_ptr(),
                        w,
                        true,
                    );
                }
                gelu_slice(hidden);
                s.h.fill_columns_from_rows(hidden, w, w);
                let dst = (out_addr as *mut f32).wrapping_add(b * c * hw + j0);
                // SAFETY: `dst` addresses pixels `j0..j0 + w` of image `b`'s `c x hw` output
                // block (row stride `hw`), which no other task touches; `w2` is `c x hid` and
                // the packed hidden block `hid x w`.
                unsafe {
                    for (o, &bias) in self.b2.iter().enumerate() {
                        let row = std::slice::from_raw_parts_mut(dst.add(o * hw), w);
                        for (v, r) in row.iter_mut().zip(&img[o * hw + j0..][..w]) {
                            *v = r + bias;
                        }
                    }
                    packed_unchecked(c, self.w2, hid, &s.h, 0..hid, 0..w, dst, hw, true);
                }
            },
        );
        Ok((CpuStorage::F32(out), shape))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::super::conv::Pointwise;

    #[test]
    fn matches_the_two_convs() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        // Odd sizes: a last block narrower than COLS, a batch of 2, widths not multiples of 8.
        for (n, c, h, w) in [(1usize, 48usize, 20usize, 13usize), (2, 12, 7, 40)] {
            let conv1 = Pointwise::new(
                &Tensor::randn(0f32, 0.2, (2 * c, c, 1, 1), &dev)?,
                &Tensor::randn(0f32, 0.5, 2 * c, &dev)?,
            )?;
            let conv2 = Pointwise::new(
                &Tensor::randn(0f32, 0.2, (c, 2 * c, 1, 1), &dev)?,
                &Tensor::randn(0f32, 0.5, c, &dev)?,
            )?;
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let want = conv2.forward_add(&conv1.forward_gelu(&x)?, &x)?;
            let Some(got) = conv1.channel_mixer(&conv2, &x)? else {
                panic!("the fused path applies to CPU f32");
            };
            let err = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err <= 1e-6 * scale.max(1.0), "{n}x{c}x{h}x{w}: {err}");
        }
        Ok(())
    }
}
