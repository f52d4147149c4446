//! The bf16 fast mode's precision per layer group: the one table that says which products of
//! which layers run plain bf16, split bf16 (f32-accurate on AMX) or exact f32.
//!
//! The choice per group comes from its measured sensitivity: `tools/dev/bf16_sensitivity.py`
//! switches one group at a time to plain bf16 and records the worst mask IoU and presence
//! flips against exact f32 on held-out sequences, and its speed; the table keeps the cheapest
//! precision that holds the mode's tolerance. The measurements and the reasoning per row are
//! in the guide (`docs/src/bf16-policy.md`).
//!
//! `EDGETAM_BF16_POLICY=group=precision,...` overrides rows for a run (the sensitivity tool's
//! switch; any front end): e.g. `backbone.stage3=bf16,fpn=f32`, or `*=f32,fpn=bf16` (every
//! group exact but the FPN).

use std::fmt;
use std::str::FromStr;

use crate::kernels::conv::pointwise_bf16::Rounding;

/// How one group's products round their inputs in the fast mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPrecision {
    /// Exact f32.
    F32,
    /// Inputs split into bf16 head + tail, three tile products: f32-accurate, on AMX only
    /// (exact f32 where AMX is absent, as three AVX-512 products would be slower).
    Split,
    /// Plain bf16 inputs, f32 accumulation.
    Bf16,
}

impl GroupPrecision {
    fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Split => "split",
            Self::Bf16 => "bf16",
        }
    }

    /// The convolutions' input rounding (`None`: exact).
    pub(crate) fn rounding(self) -> Option<Rounding> {
        match self {
            Self::F32 => None,
            Self::Split => crate::kernels::amx::available().then_some(Rounding::Split),
            Self::Bf16 => Some(Rounding::Bf16),
        }
    }
}

impl fmt::Display for GroupPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The layer groups the policy sets, in the order a frame meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerGroup {
    /// The backbone stem's second 3x3 conv (its first has 3 input channels: exact always).
    Stem,
    /// RepViT stage `0..4` (stride 4, 8, 16, 32): its downsample and blocks' 1x1 convs.
    Stage(usize),
    /// The FPN's lateral 1x1 convs.
    Fpn,
    /// The decoder's high-resolution projections `conv_s0` / `conv_s1` (composed with their
    /// laterals).
    HighRes,
    /// The memory attention's self-attention projections and products, every layer.
    SelfAttention,
    /// The memory attention's cross-attention to the memories, every layer.
    CrossAttention,
    /// The memory attention's MLPs, every layer.
    Mlp,
    /// The mask decoder's two-way transformer, hypernetworks and heads, and the object-pointer
    /// projection (the upscaling convolutions stay exact).
    Decoder,
    /// The memory encoder: mask downsampler, fuser, projections.
    MemoryEncoder,
}

/// One row of [`BF16_POLICY`].
#[derive(Debug, Clone, Copy)]
pub struct PolicyRow {
    pub group: LayerGroup,
    /// The group's name in `EDGETAM_BF16_POLICY` and in the guide's table.
    pub name: &'static str,
    /// What the fast mode runs.
    pub precision: GroupPrecision,
    /// What the group's kernels can run.
    pub allowed: &'static [GroupPrecision],
}

use GroupPrecision::{Bf16, Split, F32};

const CONVS: &[GroupPrecision] = &[F32, Split, Bf16];
const LINEAR: &[GroupPrecision] = &[F32, Bf16];

/// The fast mode's policy: per group the cheapest precision that, switched on alone, keeps the
/// mode's tolerance on held-out sequences. Plain bf16 in the memory attention; split where
/// plain bf16 alone lost masks (every image-encoder group but the FPN, and the memory
/// encoder, whose output is every later frame's memory); the FPN stays split too, as plain
/// bf16 there saved no measurable time and broke a sequence in combination. The mask decoder
/// stays exact: plain bf16 lost masks there and ran slower (few-token products, no folds).
/// Norms, softmax and elementwise work stay exact f32 in every row's layers.
pub const BF16_POLICY: [PolicyRow; 12] = [
    row(LayerGroup::Stem, "backbone.stem", Split, CONVS),
    row(LayerGroup::Stage(0), "backbone.stage0", Split, CONVS),
    row(LayerGroup::Stage(1), "backbone.stage1", Split, CONVS),
    row(LayerGroup::Stage(2), "backbone.stage2", Split, CONVS),
    row(LayerGroup::Stage(3), "backbone.stage3", Split, CONVS),
    row(LayerGroup::Fpn, "fpn", Split, CONVS),
    row(LayerGroup::HighRes, "high_res", Split, CONVS),
    row(
        LayerGroup::SelfAttention,
        "memory_attention.self_attn",
        Bf16,
        LINEAR,
    ),
    row(
        LayerGroup::CrossAttention,
        "memory_attention.cross_attn",
        Bf16,
        LINEAR,
    ),
    row(LayerGroup::Mlp, "memory_attention.mlp", Bf16, LINEAR),
    row(LayerGroup::Decoder, "mask_decoder", F32, LINEAR),
    row(LayerGroup::MemoryEncoder, "memory_encoder", Split, CONVS),
];

const fn row(
    group: LayerGroup,
    name: &'static str,
    precision: GroupPrecision,
    allowed: &'static [GroupPrecision],
) -> PolicyRow {
    PolicyRow {
        group,
        name,
        precision,
        allowed,
    }
}

/// Why an `EDGETAM_BF16_POLICY` value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("EDGETAM_BF16_POLICY: `{item}` is not `group=precision`")]
    Malformed { item: String },
    #[error(
        "EDGETAM_BF16_POLICY: unknown layer group `{group}` (known: {})",
        group_names()
    )]
    UnknownGroup { group: String },
    #[error("EDGETAM_BF16_POLICY: `{group}` cannot run `{precision}` (it runs {allowed})")]
    Precision {
        group: String,
        precision: String,
        allowed: String,
    },
}

fn group_names() -> String {
    BF16_POLICY.map(|r| r.name).join(", ")
}

/// The precision of every group for one model: [`BF16_POLICY`] with any overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bf16Policy {
    precisions: [GroupPrecision; BF16_POLICY.len()],
}

impl Default for Bf16Policy {
    fn default() -> Self {
        Self {
            precisions: BF16_POLICY.map(|r| r.precision),
        }
    }
}

impl Bf16Policy {
    /// Every group exact f32 (the fast mode off).
    pub fn exact() -> Self {
        Self {
            precisions: [F32; BF16_POLICY.len()],
        }
    }

    /// [`BF16_POLICY`] with the overrides of `EDGETAM_BF16_POLICY` when it is set.
    pub fn from_env() -> Result<Self, PolicyError> {
        match std::env::var("EDGETAM_BF16_POLICY") {
            Ok(spec) => spec.parse(),
            Err(_) => Ok(Self::default()),
        }
    }

    /// The precision of `group`.
    pub fn get(&self, group: LayerGroup) -> GroupPrecision {
        BF16_POLICY
            .iter()
            .position(|r| r.group == group)
            .map_or(F32, |i| self.precisions[i])
    }

    /// The groups and their precisions, in table order.
    pub fn rows(&self) -> impl Iterator<Item = (&'static str, GroupPrecision)> + '_ {
        BF16_POLICY
            .iter()
            .zip(self.precisions)
            .map(|(r, p)| (r.name, p))
    }
}

impl FromStr for Bf16Policy {
    type Err = PolicyError;

    /// [`BF16_POLICY`] with `group=precision` overrides, comma-separated, applied in order
    /// (empty: the table); the group `*` is every group that can run the precision.
    fn from_str(spec: &str) -> Result<Self, PolicyError> {
        let mut policy = Self::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (group, precision) =
                item.split_once('=').ok_or_else(|| PolicyError::Malformed {
                    item: item.to_string(),
                })?;
            let (group, precision) = (group.trim(), precision.trim().to_ascii_lowercase());
            if group == "*" {
                let p = [F32, Split, Bf16]
                    .into_iter()
                    .find(|p| p.name() == precision)
                    .ok_or_else(|| PolicyError::Precision {
                        group: group.to_string(),
                        precision: precision.clone(),
                        allowed: "f32, split, bf16".into(),
                    })?;
                for (r, slot) in BF16_POLICY.iter().zip(&mut policy.precisions) {
                    if r.allowed.contains(&p) {
                        *slot = p;
                    }
                }
                continue;
            }
            let i = BF16_POLICY
                .iter()
                .position(|r| r.name == group)
                .ok_or_else(|| PolicyError::UnknownGroup {
                    group: group.to_string(),
                })?;
            let allowed = BF16_POLICY[i].allowed;
            policy.precisions[i] = allowed
                .iter()
                .copied()
                .find(|p| p.name() == precision)
                .ok_or_else(|| PolicyError::Precision {
                    group: group.to_string(),
                    precision: precision.clone(),
                    allowed: allowed
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
        }
        Ok(policy)
    }
}

impl fmt::Display for Bf16Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: Vec<String> = self.rows().map(|(n, p)| format!("{n}={p}")).collect();
        f.write_str(&rows.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_spec_is_the_table() {
        assert_eq!("".parse::<Bf16Policy>().unwrap(), Bf16Policy::default());
        let p = Bf16Policy::default();
        for r in BF16_POLICY {
            assert_eq!(p.get(r.group), r.precision, "{}", r.name);
            assert!(r.allowed.contains(&r.precision), "{}", r.name);
        }
    }

    #[test]
    fn overrides_set_only_their_rows_and_round_trip() {
        let p: Bf16Policy = " backbone.stage3 = BF16 ,fpn=f32".parse().unwrap();
        assert_eq!(p.get(LayerGroup::Stage(3)), Bf16);
        assert_eq!(p.get(LayerGroup::Fpn), F32);
        assert_eq!(
            p.get(LayerGroup::Stage(2)),
            Bf16Policy::default().get(LayerGroup::Stage(2))
        );
        assert_eq!(p.to_string().parse::<Bf16Policy>().unwrap(), p);
    }

    #[test]
    fn the_wildcard_sets_every_group_that_runs_the_precision_in_order() {
        assert_eq!("*=f32".parse::<Bf16Policy>().unwrap(), Bf16Policy::exact());
        let p: Bf16Policy = "*=f32,fpn=bf16".parse().unwrap();
        for r in BF16_POLICY {
            let want = if r.group == LayerGroup::Fpn {
                Bf16
            } else {
                F32
            };
            assert_eq!(p.get(r.group), want, "{}", r.name);
        }
        // Split where the group's kernels run it; the memory attention's linears keep theirs.
        let p: Bf16Policy = "*=split".parse().unwrap();
        assert_eq!(p.get(LayerGroup::Stage(0)), Split);
        assert_eq!(
            p.get(LayerGroup::Mlp),
            Bf16Policy::default().get(LayerGroup::Mlp)
        );
    }

    #[test]
    fn bad_specs_name_what_is_wrong() {
        let e = "stage3".parse::<Bf16Policy>().unwrap_err();
        assert!(matches!(e, PolicyError::Malformed { .. }), "{e}");
        let e = "decoder=bf16".parse::<Bf16Policy>().unwrap_err();
        assert!(e.to_string().contains("backbone.stage3"), "{e}");
        let e = "memory_attention.mlp=split"
            .parse::<Bf16Policy>()
            .unwrap_err();
        assert!(e.to_string().contains("f32, bf16"), "{e}");
        let e = "*=int8".parse::<Bf16Policy>().unwrap_err();
        assert!(matches!(e, PolicyError::Precision { .. }), "{e}");
        let e = "fpn=int8".parse::<Bf16Policy>().unwrap_err();
        assert!(matches!(e, PolicyError::Precision { .. }), "{e}");
    }
}
