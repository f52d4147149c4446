//! Memory-attention checks against `fixtures/memory_attention_256` (written by
//! `tools/reference/generate_memory_attention_fixture.py`).
//!
//! The fixture stores the reference's inputs sequence first (`[tokens, B, channels]`, as
//! transformers takes them) and its outputs batch first; each layer's output and the final output
//! are compared. A second case batches the fixture's object with a second, different one and
//! requires the first to still match the reference and the second to match its own batch-of-one
//! run: objects in a batch must not interact.

use candle_core::Tensor;

use super::{StageReport, STAGE_REL_L2};
use crate::checks::compare::compare;
use crate::checks::fixture::Fixture;
use crate::checks::{CheckError, Result};
use crate::model::memory_attention::MemoryAttention;
use crate::model::weights::Weights;
use crate::Error;

/// Fixture tensor names of the inputs, in `MemoryAttention::forward` order.
const INPUTS: [&str; 4] = [
    "memattn.current",
    "memattn.current_pos",
    "memattn.memory",
    "memattn.memory_pos",
];

/// A count stored as a one-element i64 tensor.
fn count(fx: &Fixture, name: &str) -> Result<usize> {
    let v = fx.get(name)?.flatten_all()?.to_vec1::<i64>()?;
    match v.as_slice() {
        [n] if *n >= 0 => Ok(*n as usize),
        _ => Err(CheckError::Fixture(format!(
            "fixture `{name}` is not one non-negative count: {v:?}"
        ))),
    }
}

/// Builds the memory attention from `weights` (typed errors for missing or mis-shaped keys).
pub fn build(fx: &Fixture, weights: &Weights) -> Result<MemoryAttention> {
    let device = fx.get(INPUTS[0])?.device().clone();
    MemoryAttention::new(
        &fx.config,
        weights.var_builder(&device).pp("memory_attention"),
    )
    .map_err(|e| match e {
        Error::Tensor(e) => weights.lift(e).into(),
        other => other.into(),
    })
}

/// Runs the memory-attention checks of fixture `fx` with checkpoint `weights`.
pub fn run(fx: &Fixture, weights: &Weights) -> Result<Vec<StageReport>> {
    let model = build(fx, weights)?;
    // Sequence first -> batch first.
    let inputs = INPUTS
        .iter()
        .map(|name| Ok(fx.get(name)?.transpose(0, 1)?.contiguous()?))
        .collect::<Result<Vec<Tensor>>>()?;
    let [current, current_pos, memory, memory_pos] = inputs.as_slice() else {
        return Err(CheckError::Fixture(
            "memory attention fixture inputs".into(),
        ));
    };
    let n_ptr = count(fx, "memattn.num_object_pointer_tokens")?;
    let n_mem = count(fx, "memattn.num_spatial_memory_tokens")?;
    let trace = model.forward_traced(current, current_pos, memory, memory_pos, n_ptr, n_mem)?;
    let mut reports = Vec::new();
    for (i, ours) in trace.layers.iter().enumerate() {
        let name = format!("memattn.layer{i}");
        reports.push(StageReport::rel_l2(
            &name,
            compare(ours, fx.get(&name)?)?,
            STAGE_REL_L2,
        ));
    }
    let expected = fx.get("memattn.output")?;
    reports.push(StageReport::rel_l2(
        "memattn.output",
        compare(&trace.output, expected)?,
        STAGE_REL_L2,
    ));

    // Batch of two: the fixture's object plus one with half the memory and its position
    // mirrored token-wise (different attention weights, same layout).
    let other_memory = (memory.flip(&[1])? * 0.5)?;
    let other_pos = memory_pos.flip(&[1])?;
    let cat = |a: &Tensor, b: &Tensor| Tensor::cat(&[a, b], 0);
    let batched = model.forward(
        &cat(current, current)?,
        &cat(current_pos, current_pos)?,
        &cat(memory, &other_memory)?,
        &cat(memory_pos, &other_pos)?,
        n_ptr,
        n_mem,
    )?;
    reports.push(StageReport::rel_l2(
        "memattn.batch2.obj0.output",
        compare(&batched.narrow(0, 0, 1)?, expected)?,
        STAGE_REL_L2,
    ));
    let alone = model.forward(
        current,
        current_pos,
        &other_memory,
        &other_pos,
        n_ptr,
        n_mem,
    )?;
    // Same arithmetic per object: only the matmul blocking may differ with the batch size.
    reports.push(StageReport::rel_l2(
        "memattn.batch2.obj1.vs_alone",
        compare(&batched.narrow(0, 1, 1)?, &alone)?,
        1e-6,
    ));
    Ok(reports)
}
