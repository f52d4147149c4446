//! The crate's own kernels: CPU passes (and CUDA kernels under `cuda/`) that the model stages
//! compose, each beside the reference form it must match and a test that they agree.
//!
//! One module probes the CPU ([`cpu`]); [`threads`] runs the tasks; [`gemm`] and the linear
//! layers ([`linear`], [`linear_bf16`]) do the products; [`attention`], [`conv`], [`norm`],
//! [`gelu`], [`rope`], [`resize`], [`mask_input`] and [`layout`] fuse what comes around them.
//! Nothing here is public outside the crate.

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
pub(crate) mod threads;

use candle_core::{CpuStorage, Layout, Result, Shape};

pub(crate) use layout::{add, interleave_2x2, nchw_to_tokens, swap_axes_1_2};
pub(crate) use threads::{
    output_in_chunks, output_in_chunks_with, row_tiles, run_tasks_with, threads, uninit_row, wide,
    zeroed,
};
pub use threads::{pin_default_threads, CANDLE_SPIN_LIMIT};

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
