//! The crate's own kernels: CPU passes (and CUDA kernels under `cuda/`) that the model stages
//! compose, each beside the reference form it must match and a test that they agree.
//!
//! One module probes the CPU ([`cpu`]); [`threads`] runs the tasks; [`gemm`] and the linear
//! layers ([`linear`], [`linear_bf16`]) do the products; [`attention`], [`conv`], [`norm`],
//! [`gelu`], [`rope`], [`resize`], [`mask_input`] and [`layout`] fuse what comes around them.
//! Nothing here is public outside the crate.

pub(crate) mod amx;
pub(crate) mod attention;
pub(crate) mod bf16;
pub(crate) mod conv;
pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod gelu;
pub(crate) mod gemm;
pub(crate) mod layout;
pub(crate) mod linear;
pub(crate) mod linear_bf16;
pub(crate) mod mask_input;
pub(crate) mod norm;
pub(crate) mod resize;
pub(crate) mod rope;
pub(crate) mod simd;
pub(crate) mod team;
pub(crate) mod threads;

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape};

pub(crate) use layout::{add, interleave_2x2, nchw_to_tokens, swap_axes_1_2};
pub(crate) use threads::{
    output_in_chunks, output_in_chunks_with, row_tiles, run_tasks_with, threads, uninit_row,
    units_per_task, wide, zeroed,
};
pub use threads::{pin_default_threads, CANDLE_SPIN_LIMIT};

/// Row stride for packed rows of `n` 4-byte values that a kernel reads a line or a few at a
/// time across many rows: `n`, plus 16 values (one cache line) where `n` values would put the
/// rows a multiple of 1 KiB apart. Rows that far apart fall into a few of L1's sets and evict
/// each other before the next row group reads them again.
pub(crate) fn spread_row_stride(n: usize) -> usize {
    if n.is_multiple_of(256) {
        n + 16
    } else {
        n
    }
}

/// Rows and output shape of a layer applied to the last axis (`[.., inputs]` ->
/// `[.., outputs]`), or an error naming `what` when the input does not end in `inputs`.
pub(crate) fn last_axis_map(
    layout: &Layout,
    inputs: usize,
    outputs: usize,
    what: &str,
) -> Result<(usize, Shape)> {
    let dims = layout.shape().dims();
    if dims.last() != Some(&inputs) {
        candle_core::bail!("{what}: input {dims:?} does not end in {inputs} channels");
    }
    let mut out_dims = dims.to_vec();
    if let Some(last) = out_dims.last_mut() {
        *last = outputs;
    }
    Ok((
        layout.shape().elem_count() / inputs.max(1),
        Shape::from(out_dims),
    ))
}

/// Contiguous f32 slice of a storage, or an error naming `what` (shared by every custom op).
pub(crate) fn f32_slice<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    what: &str,
) -> Result<&'a [f32]> {
    let data = match storage {
        CpuStorage::F32(v) => v,
        _ => candle_core::bail!("{what} must be f32"),
    };
    match layout.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("{what} must be contiguous"),
    }
}

/// One contiguous f32 operand of a CPU op: its values and layout.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub data: &'a [f32],
    pub layout: &'a Layout,
}

/// A CPU pass over three contiguous f32 operands; [`Op3`] runs it as a candle `CustomOp3`
/// (the operands' checks and the output storage are its, not each kernel's).
pub(crate) trait CpuOp3 {
    /// The op's name, and each operand's for error messages.
    const NAME: &'static str;
    const OPERANDS: [&'static str; 3];
    /// The output values and shape.
    fn run(&self, operands: [Operand; 3]) -> Result<(Vec<f32>, Shape)>;
}

/// A [`CpuOp3`] as a candle custom op (`a.apply_op3_no_bwd(b, c, &Op3(op))`).
pub(crate) struct Op3<T>(pub T);

impl<T: CpuOp3 + Send + Sync> CustomOp3 for Op3<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let operand = |s, layout, i: usize| -> Result<Operand> {
            Ok(Operand {
                data: f32_slice(s, layout, T::OPERANDS[i])?,
                layout,
            })
        };
        let operands = [
            operand(s1, l1, 0)?,
            operand(s2, l2, 1)?,
            operand(s3, l3, 2)?,
        ];
        let (out, shape) = self.0.run(operands)?;
        Ok((CpuStorage::F32(out), shape))
    }
}
