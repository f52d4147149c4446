//! Resizes of float planes as torch computes them: bilinear without antialias
//! (`F.interpolate(mode="bilinear", align_corners=False)`) as one CPU pass beside its tensor-op
//! form ([`bilinear_ops`], the path on other devices), and the antialiased bilinear resize of
//! host planes ([`resize_antialiased`]).

use candle_core::{CustomOp1, Device, Tensor};

use crate::error::{Error, Result};
use crate::kernels::{f32_slice, output_in_chunks, run_tasks_with};

/// Bilinear resize of f32 `[N, C, h, w]` to `[N, C, height, width]` (sides not zero), torch's
/// arithmetic: separable, a width pass on the input rows, then a height pass, which is the
/// order in which torch's CPU kernel accumulates (`wh0 * (ww0*a + ww1*b) + wh1 * (...)`).
pub(crate) fn bilinear(x: &Tensor, height: usize, width: usize) -> Result<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    if x.device().is_cpu() && (h, w) != (height, width) {
        let op = BilinearResize {
            rows: LinearTaps::new(h, height),
            cols: LinearTaps::new(w, width),
        };
        return Ok(x.contiguous()?.apply_op1_no_bwd(&op)?);
    }
    bilinear_ops(x, height, width)
}

/// [`bilinear`] as tensor ops: per axis two index selects, two products and a sum.
pub(crate) fn bilinear_ops(x: &Tensor, height: usize, width: usize) -> Result<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    let x = resize_axis(x, 3, w, width)?;
    resize_axis(&x, 2, h, height)
}

/// [`bilinear`]'s CPU pass, in place of the tensor path's two index selects, two products and a
/// sum per axis.
/// Same arithmetic in the same order (each product rounded, then the sum; no fused
/// multiply-add), so the result is bit-identical.
struct BilinearResize {
    rows: LinearTaps,
    cols: LinearTaps,
}

impl BilinearResize {
    /// One output row of the width pass: `a * l0 + b * l1` per output column.
    fn width_pass(&self, row: &[f32], out: &mut [f32]) {
        let t = &self.cols;
        if row.len() == out.len() {
            out.copy_from_slice(row);
            return;
        }
        for (o, (((&i0, &i1), &l0), &l1)) in out
            .iter_mut()
            .zip(t.i0.iter().zip(&t.i1).zip(&t.l0).zip(&t.l1))
        {
            *o = row[i0 as usize] * l0 + row[i1 as usize] * l1;
        }
    }
}

impl CustomOp1 for BilinearResize {
    fn name(&self) -> &'static str {
        "bilinear-resize"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let x = f32_slice(storage, layout, "mask logits")?;
        let (n, c, h, w) = layout.shape().dims4()?;
        let (height, width) = (self.rows.i0.len(), self.cols.i0.len());
        let shape = candle_core::Shape::from((n, c, height, width));
        let planes = n * c;
        if planes == 0 {
            return Ok((candle_core::CpuStorage::F32(Vec::new()), shape));
        }
        // Width pass over every input row (an input row feeds several output rows when
        // upscaling), then the height pass in chunks of output rows on all cores.
        let mut tmp = vec![0f32; planes * h * width];
        for (row, out) in x.chunks_exact(w).zip(tmp.chunks_exact_mut(width)) {
            self.width_pass(row, out);
        }
        let same_rows = h == height;
        let r = &self.rows;
        let chunk_rows = 32;
        let out = output_in_chunks(planes * height * width, chunk_rows * width, |k, o| {
            for (j, out_row) in o.chunks_exact_mut(width).enumerate() {
                let g = k * chunk_rows + j; // plane * height + y
                let (p, y) = (g / height, g % height);
                let plane = &tmp[p * h * width..(p + 1) * h * width];
                if same_rows {
                    out_row.copy_from_slice(&plane[y * width..(y + 1) * width]);
                    continue;
                }
                let a = &plane[r.i0[y] as usize * width..][..width];
                let b = &plane[r.i1[y] as usize * width..][..width];
                let (l0, l1) = (r.l0[y], r.l1[y]);
                for ((o, &a), &b) in out_row.iter_mut().zip(a).zip(b) {
                    *o = a * l0 + b * l1;
                }
            }
        });
        Ok((candle_core::CpuStorage::F32(out), shape))
    }
}

/// [`bilinear`] of one `h x w` plane of logits to `height x width`, then `> 0`, as bytes (1
/// inside): the tracker's full-resolution mask without the float plane in memory (written,
/// then read back by the comparison and copied to the host). The same products and sums as
/// [`BilinearResize`] per pixel, so the same mask bit for bit.
pub(crate) fn bilinear_mask(
    plane: &[f32],
    (h, w): (usize, usize),
    (height, width): (usize, usize),
) -> Vec<u8> {
    let mut mask = vec![0u8; height * width];
    if h == 0 || w == 0 || plane.len() < h * w || width == 0 {
        return mask;
    }
    let op = BilinearResize {
        rows: LinearTaps::new(h, height),
        cols: LinearTaps::new(w, width),
    };
    let mut tmp = vec![0f32; h * width];
    for (row, out) in plane.chunks_exact(w).zip(tmp.chunks_exact_mut(width)) {
        op.width_pass(row, out);
    }
    let r = &op.rows;
    const CHUNK_ROWS: usize = 64;
    let tasks: Vec<(usize, &mut [u8])> = mask.chunks_mut(CHUNK_ROWS * width).enumerate().collect();
    run_tasks_with(
        tasks,
        crate::kernels::threads(),
        || (),
        |_, (k, rows)| {
            for (j, out_row) in rows.chunks_exact_mut(width).enumerate() {
                let y = k * CHUNK_ROWS + j;
                if h == height {
                    let a = &tmp[y * width..][..width];
                    for (o, &v) in out_row.iter_mut().zip(a) {
                        *o = u8::from(v > 0.0);
                    }
                    continue;
                }
                let a = &tmp[r.i0[y] as usize * width..][..width];
                let b = &tmp[r.i1[y] as usize * width..][..width];
                let (l0, l1) = (r.l0[y], r.l1[y]);
                for ((o, &a), &b) in out_row.iter_mut().zip(a).zip(b) {
                    *o = u8::from(a * l0 + b * l1 > 0.0);
                }
            }
        },
    );
    mask
}

/// Linear interpolation along one axis of an NCHW tensor (`dim` 2 or 3).
fn resize_axis(x: &Tensor, dim: usize, in_size: usize, out_size: usize) -> Result<Tensor> {
    if in_size == out_size {
        // torch copies (weights 1 and 0) in this case.
        return Ok(x.clone());
    }
    let (i0, i1, l0, l1) = taps_on(dim, in_size, out_size, x.device())?;
    let a = x.index_select(&i0, dim)?;
    let b = x.index_select(&i1, dim)?;
    Ok((a.broadcast_mul(&l0)? + b.broadcast_mul(&l1)?)?)
}

/// [`LinearTaps::tensors`] on `device`; on a GPU made once per size and kept there (they would
/// otherwise be four uploads per axis, object and frame).
fn taps_on(
    dim: usize,
    in_size: usize,
    out_size: usize,
    device: &Device,
) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let make = || -> candle_core::Result<Vec<Tensor>> {
        let (a, b, c, d) = LinearTaps::new(in_size, out_size)
            .tensors(dim, device)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        Ok(vec![a, b, c, d])
    };
    #[cfg(feature = "cuda")]
    let made =
        crate::kernels::cuda::cached_consts(device, ("linear-taps", dim, in_size, out_size), make)?;
    #[cfg(not(feature = "cuda"))]
    let made = make()?;
    match <[Tensor; 4]>::try_from(made) {
        Ok([a, b, c, d]) => Ok((a, b, c, d)),
        Err(_) => Err(Error::InvalidImage(
            "resize taps: internal size mismatch".into(),
        )),
    }
}

/// Source indices and weights of each output position along one axis.
#[derive(Debug, Clone, PartialEq)]
struct LinearTaps {
    i0: Vec<u32>,
    i1: Vec<u32>,
    l0: Vec<f32>,
    l1: Vec<f32>,
}

impl LinearTaps {
    /// torch's `area_pixel_compute_source_index` + `guard_index_and_lambda`, in f32:
    /// `src = max(scale * (i + 0.5) - 0.5, 0)`, `i0 = min(floor(src), in - 1)`,
    /// `i1 = i0 + (i0 < in - 1)`, `l1 = clamp(src - i0, 0, 1)`.
    fn new(in_size: usize, out_size: usize) -> Self {
        let scale = in_size as f32 / out_size as f32;
        let last = in_size - 1;
        let mut taps = Self {
            i0: Vec::with_capacity(out_size),
            i1: Vec::with_capacity(out_size),
            l0: Vec::with_capacity(out_size),
            l1: Vec::with_capacity(out_size),
        };
        for o in 0..out_size {
            let src = (scale * (o as f32 + 0.5) - 0.5).max(0.0);
            let i0 = (src.floor() as usize).min(last);
            let l1 = (src - i0 as f32).clamp(0.0, 1.0);
            let i1 = i0 + usize::from(i0 < last);
            taps.i0.push(i0 as u32);
            taps.i1.push(i1 as u32);
            taps.l0.push(1.0 - l1);
            taps.l1.push(l1);
        }
        taps
    }

    /// Index tensors and weights shaped to broadcast along `dim` of an NCHW tensor.
    fn tensors(&self, dim: usize, device: &Device) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
        let n = self.i0.len();
        let wshape: Vec<usize> = if dim == 2 { vec![n, 1] } else { vec![n] };
        Ok((
            Tensor::new(self.i0.as_slice(), device)?,
            Tensor::new(self.i1.as_slice(), device)?,
            Tensor::new(self.l0.as_slice(), device)?.reshape(wshape.as_slice())?,
            Tensor::new(self.l1.as_slice(), device)?.reshape(wshape.as_slice())?,
        ))
    }
}

/// Torch's antialiased bilinear resize of float data (`F.interpolate(mode="bilinear",
/// align_corners=False, antialias=True)` on the CPU): a triangle filter widened by the scale
/// when shrinking, taps renormalised at the borders; width pass first, then height, in f32.
///
/// The reference uses it to bring a mask prompt to the model size and to shrink a mask prompt
/// to the low-resolution logits.
pub fn resize_antialiased(
    data: &[f32],
    height: usize,
    width: usize,
    out_height: usize,
    out_width: usize,
) -> Result<Vec<f32>> {
    if height == 0 || width == 0 || out_height == 0 || out_width == 0 {
        return Err(Error::InvalidImage(format!(
            "cannot resize {width}x{height} to {out_width}x{out_height}"
        )));
    }
    if data.len() != height * width {
        return Err(Error::InvalidImage(format!(
            "{} values for a {width}x{height} plane",
            data.len()
        )));
    }
    let wx = aa_taps(width, out_width);
    let mut tmp = vec![0f32; height * out_width];
    for y in 0..height {
        let row = &data[y * width..(y + 1) * width];
        for (x, (start, w)) in wx.iter().enumerate() {
            tmp[y * out_width + x] = w
                .iter()
                .enumerate()
                .fold(0f32, |acc, (j, &wj)| acc + row[start + j] * wj);
        }
    }
    let wy = aa_taps(height, out_height);
    let mut out = vec![0f32; out_height * out_width];
    for (y, (start, w)) in wy.iter().enumerate() {
        for x in 0..out_width {
            out[y * out_width + x] = w.iter().enumerate().fold(0f32, |acc, (j, &wj)| {
                acc + tmp[(start + j) * out_width + x] * wj
            });
        }
    }
    Ok(out)
}

/// `_compute_index_ranges_weights` of torch's antialiased kernels (bilinear filter), in f32:
/// per output index, the first input index and the normalised weights.
fn aa_taps(in_size: usize, out_size: usize) -> Vec<(usize, Vec<f32>)> {
    let scale = in_size as f32 / out_size as f32;
    let support = if scale >= 1.0 { scale } else { 1.0 };
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    (0..out_size)
        .map(|i| {
            let center = scale * (i as f32 + 0.5);
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64).max(0) as usize;
            let n = xmax.saturating_sub(xmin);
            let mut w: Vec<f32> = (0..n)
                .map(|j| {
                    let x = ((j + xmin) as f32 - center + 0.5) * invscale;
                    (1.0 - x.abs()).max(0.0)
                })
                .collect();
            let total: f32 = w.iter().sum();
            if total != 0.0 {
                w.iter_mut().for_each(|v| *v /= total);
            }
            (xmin, w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_match_torch_formula_for_upscale_by_two() {
        // 2 -> 4: src = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (i0 = 1 = last, so i1 = 1).
        let t = LinearTaps::new(2, 4);
        assert_eq!(t.i0, vec![0, 0, 0, 1]);
        assert_eq!(t.i1, vec![1, 1, 1, 1]);
        assert_eq!(t.l1, vec![0.0, 0.25, 0.75, 0.25]);
    }

    /// The CPU op against the tensor-op path (per-axis index selects), bit for bit, on
    /// upscales, downscales, mixed and one-axis-only resizes.
    #[test]
    fn cpu_resize_is_bit_identical_to_tensor_path() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 3.0, (2, 3, 17, 23), &dev)?;
        for (hh, ww) in [(64, 92), (5, 7), (40, 11), (17, 50), (9, 23)] {
            let fast = bilinear(&x, hh, ww)?;
            let slow = resize_axis(&resize_axis(&x, 3, 23, ww)?, 2, 17, hh)?;
            assert_eq!(fast.dims(), &[2, 3, hh, ww]);
            assert!(
                crate::checks::compare::same_bits(&fast, &slow)?,
                "{hh}x{ww}"
            );
        }
        Ok(())
    }

    /// The fused mask equals the resized float plane's `> 0`, pixel for pixel, on upscales
    /// (the tracker's case, 128 -> 640x360 and larger than 64 rows per task), downscales,
    /// one-axis and same-size resizes; logits of exactly 0 stay outside.
    #[test]
    fn bilinear_mask_is_the_resized_plane_above_zero() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 3.0, (1, 1, 32, 32), &dev)?;
        let x = x.broadcast_mul(&x.ge(0.5)?.to_dtype(candle_core::DType::F32)?)?;
        let plane: Vec<f32> = x.flatten_all()?.to_vec1()?;
        for (hh, ww) in [(360, 640), (5, 7), (32, 100), (100, 32), (32, 32), (1, 1)] {
            let want: Vec<u8> = bilinear(&x, hh, ww)?.gt(0.0)?.flatten_all()?.to_vec1()?;
            let got = bilinear_mask(&plane, (32, 32), (hh, ww));
            assert_eq!(got, want, "{hh}x{ww}");
        }
        Ok(())
    }

    #[test]
    fn taps_downscale_skip_pixels() {
        // 4 -> 2: src = 0.5, 2.5: plain averages of neighbours, no antialias.
        let t = LinearTaps::new(4, 2);
        assert_eq!(t.i0, vec![0, 2]);
        assert_eq!(t.i1, vec![1, 3]);
        assert_eq!(t.l1, vec![0.5, 0.5]);
    }
}
