//! Layout kernels: image-sized sums, axis swaps, maps to tokens and the 2x2 interleave of the
//! transposed convs, each beside the candle op it replaces (bit-identical: they only rearrange
//! values, and add).
//!
//! candle's strided copies walk one element at a time with a generic index iterator; these move
//! the same data in cache-friendly blocks on all cores.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor};

use super::{f32_slice, output_in_chunks, run_tasks_with, threads};

fn f32_cpu(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == DType::F32
}

/// Below this many output values [`add`] leaves the sum to candle, which adds small tensors
/// on the calling thread (its own pool starts at 64 Ki values).
const ADD_MIN_PARALLEL: usize = 1 << 16;
/// Output values per task of [`add`] (128 KiB: two inputs and the output stay in L2).
const ADD_CHUNK: usize = 1 << 15;

/// `a + b` with broadcasting, as `a.broadcast_add(b)`, bit for bit. Large f32 sums on the CPU
/// run on the kernels' workers when each operand is contiguous, or, for `[N, C, H, W]`, holds
/// whole `H x W` planes or one value per plane (a batch-1 map against `B` rows, a per-channel
/// embedding). candle runs elementwise ops of 64 Ki values and more on a thread pool of its
/// own, whose thread must be woken and scheduled beside the kernels' workers for every op: with
/// as many threads as cores that serialised the mask decoder's image-sized sums (BENCHMARKS.md, "Kernel notes").
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let shape = a.shape().broadcast_shape_binary_op(b.shape(), "add")?;
    let (wide_a, wide_b) = (a.broadcast_as(&shape)?, b.broadcast_as(&shape)?);
    if add_on_workers(&wide_a, &wide_b) {
        return wide_a.apply_op2_no_bwd(&wide_b, &Add);
    }
    a.broadcast_add(b)
}

/// Whether [`add`] sums these two operands (of one shape) on the kernels' workers.
fn add_on_workers(a: &Tensor, b: &Tensor) -> bool {
    f32_cpu(a)
        && f32_cpu(b)
        && a.elem_count() >= ADD_MIN_PARALLEL
        && ((a.is_contiguous() && b.is_contiguous())
            || (PlaneOperand::of(a.layout()).is_some() && PlaneOperand::of(b.layout()).is_some()))
}

/// One operand of a planar [`add`]: per `(n, c)` plane, a whole contiguous `H x W` plane or a
/// single value.
#[derive(Debug, Clone, Copy)]
struct PlaneOperand {
    start: usize,
    batch_stride: usize,
    channel_stride: usize,
    /// `H x W` values per plane (`false`: one value broadcast over the plane).
    whole_plane: bool,
}

impl PlaneOperand {
    fn of(layout: &Layout) -> Option<Self> {
        let (dims, strides) = (layout.dims(), layout.stride());
        let (&[_, _, _, w], &[sn, sc, sh, sw]) = (dims, strides) else {
            return None;
        };
        let whole_plane = match (sh, sw) {
            (0, 0) => false,
            (row, 1) if row == w => true,
            _ => return None,
        };
        Some(Self {
            start: layout.start_offset(),
            batch_stride: sn,
            channel_stride: sc,
            whole_plane,
        })
    }
}

struct Add;

impl CustomOp2 for Add {
    fn name(&self) -> &'static str {
        "add"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let shape = l1.shape().clone();
        if l2.shape() != &shape {
            candle_core::bail!("add: shapes {:?} and {:?} differ", l1.dims(), l2.dims());
        }
        let len = shape.elem_count();
        let mut out: Vec<f32> = Vec::with_capacity(len);
        if let (Ok(a), Ok(b)) = (f32_slice(s1, l1, "add"), f32_slice(s2, l2, "add")) {
            let tasks: Vec<_> = out.spare_capacity_mut()[..len]
                .chunks_mut(ADD_CHUNK)
                .enumerate()
                .collect();
            run_tasks_with(
                tasks,
                threads(),
                || (),
                |_, (i, o)| {
                    let at = i * ADD_CHUNK;
                    for ((o, x), y) in o.iter_mut().zip(&a[at..]).zip(&b[at..]) {
                        o.write(x + y);
                    }
                },
            );
        } else {
            let (CpuStorage::F32(a), CpuStorage::F32(b)) = (s1, s2) else {
                candle_core::bail!("add: operands must be f32");
            };
            let (Some(pa), Some(pb)) = (PlaneOperand::of(l1), PlaneOperand::of(l2)) else {
                candle_core::bail!("add: operands must be contiguous or planar");
            };
            let (_, c, h, w) = shape.dims4()?;
            let plane = h * w;
            let per_task = (ADD_CHUNK / plane.max(1)).max(1);
            let tasks: Vec<_> = out.spare_capacity_mut()[..len]
                .chunks_mut(per_task * plane.max(1))
                .enumerate()
                .collect();
            run_tasks_with(
                tasks,
                threads(),
                || (),
                |_, (t, o)| {
                    for (j, o) in o.chunks_mut(plane.max(1)).enumerate() {
                        let p = t * per_task + j;
                        let (n, ch) = (p / c, p % c);
                        let at = |op: &PlaneOperand| {
                            op.start + n * op.batch_stride + ch * op.channel_stride
                        };
                        let (ia, ib) = (at(&pa), at(&pb));
                        match (pa.whole_plane, pb.whole_plane) {
                            (true, true) => {
                                for ((o, x), y) in o.iter_mut().zip(&a[ia..]).zip(&b[ib..]) {
                                    o.write(x + y);
                                }
                            }
                            (true, false) => {
                                let y = b[ib];
                                for (o, x) in o.iter_mut().zip(&a[ia..]) {
                                    o.write(x + y);
                                }
                            }
                            (false, true) => {
                                let x = a[ia];
                                for (o, y) in o.iter_mut().zip(&b[ib..]) {
                                    o.write(x + y);
                                }
                            }
                            (false, false) => o.fill(std::mem::MaybeUninit::new(a[ia] + b[ib])),
                        }
                    }
                },
            );
        }
        // SAFETY: the tasks cover `0..len` and wrote every element; `run_tasks_with` returns
        // only after every task ran (a panicking task propagates before this line).
        unsafe { out.set_len(len) };
        Ok((CpuStorage::F32(out), shape))
    }
}

/// `[N, A, B, D]` -> contiguous `[N, B, A, D]`: the attention head split (`A` tokens, `B`
/// heads) and merge (`A` heads, `B` tokens). candle's strided copy moves one element at a time;
/// here whole `D`-float rows move at once, on all cores. Values are only moved, so the result is bit-identical.
pub fn swap_axes_1_2(x: &Tensor) -> Result<Tensor> {
    let (n, a, b, d) = x.dims4()?;
    if f32_cpu(x) && a > 1 && b > 1 {
        return x.contiguous()?.apply_op1_no_bwd(&SwapAxes12);
    }
    x.transpose(1, 2)?
        .contiguous()
        .and_then(|t| t.reshape((n, b, a, d)))
}

struct SwapAxes12;

impl CustomOp1 for SwapAxes12 {
    fn name(&self) -> &'static str {
        "swap-axes-1-2"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, "axis swap input")?;
        let (n, a, b, d) = layout.shape().dims4()?;
        let shape = Shape::from((n, b, a, d));
        // One task per (batch, output row block of `b`): it writes `out[n, j, .., ..]`.
        let out = output_in_chunks(x.len(), a * d, |nj, o| {
            let (bn, j) = (nj / b, nj % b);
            let src = &x[bn * a * b * d..(bn + 1) * a * b * d];
            for (i, row) in o.chunks_exact_mut(d).enumerate() {
                row.copy_from_slice(&src[(i * b + j) * d..][..d]);
            }
        });
        Ok((CpuStorage::F32(out), shape))
    }
}

/// `[N, C, H, W]` -> contiguous token layout `[N, H * W, C]`.
pub fn nchw_to_tokens(x: &Tensor) -> Result<Tensor> {
    if f32_cpu(x) && x.rank() == 4 {
        return x.contiguous()?.apply_op1_no_bwd(&ToTokens);
    }
    x.flatten_from(2)?.transpose(1, 2)?.contiguous()
}

struct ToTokens;

impl CustomOp1 for ToTokens {
    fn name(&self) -> &'static str {
        "nchw-to-tokens"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, "nchw-to-tokens input")?;
        let (n, c, h, w) = layout.shape().dims4()?;
        let hw = h * w;
        if x.is_empty() {
            return Ok((CpuStorage::F32(Vec::new()), Shape::from((n, hw, c))));
        }
        // 16 x 16 tiles: each tile's source and destination lines stay in L1.
        const TILE: usize = 16;
        let rows = n * hw; // output rows of `c` values
        let per = rows.div_ceil(threads()).div_ceil(TILE).max(1) * TILE;
        let out = output_in_chunks(x.len(), per * c, |t, o| {
            let r0 = t * per;
            let r1 = r0 + o.len() / c;
            let mut r = r0;
            while r < r1 {
                let (b, p0) = (r / hw, r % hw);
                let np = TILE.min(hw - p0).min(r1 - r);
                let src = &x[b * c * hw..(b + 1) * c * hw];
                let o = &mut o[(r - r0) * c..];
                for c0 in (0..c).step_by(TILE) {
                    for ch in c0..TILE.min(c - c0) + c0 {
                        let s = &src[ch * hw + p0..][..np];
                        for (k, &v) in s.iter().enumerate() {
                            o[k * c + ch] = v;
                        }
                    }
                }
                r += np;
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((n, hw, c))))
    }
}

/// Interleaves the `2 x 2` taps of a stride-2 transposed convolution and adds its bias:
/// `y` `[N, 4 * C, h * w]` (channel-major taps `c, ki, kj`), `bias` `[C]` ->
/// `[N, C, 2h, 2w]` with `out[n, c, 2i + ki, 2j + kj] = y[n, 4c + 2ki + kj, i * w + j] + bias[c]`.
pub fn interleave_2x2(y: &Tensor, bias: &Tensor, h: usize, w: usize) -> Result<Tensor> {
    let (n, c4, _) = y.dims3()?;
    let c = c4 / 4;
    if f32_cpu(y) && f32_cpu(bias) {
        return y
            .contiguous()?
            .apply_op2_no_bwd(&bias.contiguous()?, &Interleave { h, w });
    }
    y.reshape((n, c, 2, 2, h, w))?
        .permute((0, 1, 4, 2, 5, 3))?
        .broadcast_add(&bias.reshape((1, c, 1, 1, 1, 1))?)?
        .reshape((n, c, 2 * h, 2 * w))
}

struct Interleave {
    h: usize,
    w: usize,
}

impl CustomOp2 for Interleave {
    fn name(&self) -> &'static str {
        "interleave-2x2"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let y = f32_slice(s1, l1, "interleave input")?;
        let bias = f32_slice(s2, l2, "interleave bias")?;
        let (n, c4, hw) = l1.shape().dims3()?;
        let (h, w) = (self.h, self.w);
        let c = c4 / 4;
        if c4 != 4 * c || hw != h * w || bias.len() != c {
            candle_core::bail!(
                "interleave-2x2: input {:?} with bias {} for {h}x{w}",
                l1.shape().dims(),
                bias.len()
            );
        }
        let plane = 4 * hw; // one output channel
        let shape = Shape::from((n, c, 2 * h, 2 * w));
        if y.is_empty() {
            return Ok((CpuStorage::F32(Vec::new()), shape));
        }
        let planes = n * c;
        let per = planes.div_ceil(threads()).max(1);
        let out = output_in_chunks(y.len(), per * plane, |t, o| {
            for (k, o) in o.chunks_mut(plane).enumerate() {
                let q = t * per + k; // n * C + c
                let b = bias[q % c];
                let taps = &y[q * plane..(q + 1) * plane];
                for (r, row) in o.chunks_mut(2 * w).enumerate() {
                    let (i, ki) = (r / 2, r % 2);
                    let t0 = &taps[(2 * ki) * hw + i * w..][..w];
                    let t1 = &taps[(2 * ki + 1) * hw + i * w..][..w];
                    for ((pair, &a), &bb) in row.chunks_exact_mut(2).zip(t0).zip(t1) {
                        pair[0] = a + b;
                        pair[1] = bb + b;
                    }
                }
            }
        });
        Ok((CpuStorage::F32(out), shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Every path of [`add`] (contiguous, planar with whole and one-value planes, candle's for
    /// other layouts and small sums) against `broadcast_add`, bit for bit.
    #[test]
    fn add_matches_broadcast_add() -> Result<()> {
        let dev = Device::Cpu;
        let r = |d: &[usize]| Tensor::randn(0f32, 1.0, d, &dev);
        let image = r(&[1, 256, 64, 64])?;
        let rows = r(&[3, 256, 64, 64])?;
        let channel = r(&[256])?.reshape((1, 256, 1, 1))?;
        let cases = [
            (r(&[1, 4096, 256])?, r(&[1, 4096, 256])?),
            (image.clone(), r(&[1, 256, 64, 64])?),
            (image.clone(), rows.clone()),
            (rows.clone(), image.clone()),
            (image.clone(), channel.broadcast_as((3, 256, 64, 64))?),
            (channel.clone(), rows.clone()),
            (rows.narrow(1, 3, 200)?, r(&[3, 200, 64, 64])?),
            (image.transpose(2, 3)?, image.clone()),
            (r(&[2, 300, 7])?, r(&[1, 300, 7])?),
            (r(&[4, 100])?, r(&[4, 100])?),
        ];
        for (i, (a, b)) in cases.iter().enumerate() {
            // The first seven take the workers' paths, the rest candle's.
            let shape = a.shape().broadcast_shape_binary_op(b.shape(), "add")?;
            let on_workers = add_on_workers(&a.broadcast_as(&shape)?, &b.broadcast_as(&shape)?);
            assert_eq!(on_workers, i < 7, "case {i}");
            let ours = add(a, b)?;
            let theirs = a.broadcast_add(b)?;
            assert_eq!(ours.dims(), theirs.dims(), "case {i}");
            let (x, y) = (
                ours.flatten_all()?.to_vec1::<f32>()?,
                theirs.flatten_all()?.to_vec1::<f32>()?,
            );
            assert!(
                x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()),
                "case {i}"
            );
        }
        assert!(add(&r(&[2, 3])?, &r(&[4, 3])?).is_err());
        Ok(())
    }

    #[test]
    fn axis_swap_matches_transpose() -> Result<()> {
        let dev = Device::Cpu;
        for dims in [
            (2usize, 5usize, 3usize, 4usize),
            (1, 4096, 8, 16),
            (1, 1, 3, 2),
            (2, 3, 1, 2),
        ] {
            let x = Tensor::randn(0f32, 1.0, dims, &dev)?;
            let want = x.transpose(1, 2)?.contiguous()?;
            let got = swap_axes_1_2(&x)?;
            assert_eq!(got.dims(), want.dims());
            let diff = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "{dims:?}");
        }
        Ok(())
    }

    fn ramp(shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        Tensor::arange(0u32, n as u32, &Device::Cpu)?
            .to_dtype(DType::F32)?
            .reshape(shape)
    }

    fn same(a: &Tensor, b: &Tensor) -> Result<bool> {
        Ok(a.dims() == b.dims()
            && a.flatten_all()?.to_vec1::<f32>()? == b.flatten_all()?.to_vec1::<f32>()?)
    }

    #[test]
    fn tokens_match_transpose() -> Result<()> {
        for shape in [[1, 256, 64, 64], [2, 40, 7, 9], [1, 3, 1, 1]] {
            let x = ramp(&shape)?;
            let reference = x.flatten_from(2)?.transpose(1, 2)?.contiguous()?;
            assert!(same(&nchw_to_tokens(&x)?, &reference)?, "{shape:?}");
        }
        Ok(())
    }

    #[test]
    fn interleave_matches_permute() -> Result<()> {
        for (n, c, h, w) in [(1, 32, 16, 16), (2, 3, 5, 7), (3, 1, 1, 1)] {
            let y = ramp(&[n, 4 * c, h * w])?;
            let bias = (ramp(&[c])? * 0.5)?;
            let reference = y
                .reshape((n, c, 2, 2, h, w))?
                .permute((0, 1, 4, 2, 5, 3))?
                .broadcast_add(&bias.reshape((1, c, 1, 1, 1, 1))?)?
                .reshape((n, c, 2 * h, 2 * w))?;
            assert!(
                same(&interleave_2x2(&y, &bias, h, w)?, &reference)?,
                "{n} {c} {h} {w}"
            );
        }
        Ok(())
    }
}
