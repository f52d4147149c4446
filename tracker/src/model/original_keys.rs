//! The one key map between Meta's original EdgeTAM checkpoint (`edgetam.pt`, sam2 key names such
//! as `image_encoder.trunk...`) and transformers' `EdgeTamVideoModel` names used everywhere else.
//!
//! The map is a table of rules in `original_keys.map` (next to this file, printed in full below).
//! This module reads it with `include_str!`; `tools/reference/write_original_checkpoint.py` reads the
//! same file to write `fixtures/original/edgetam.pt`, and checks there that the rules turn the original
//! model's `state_dict()` keys into exactly the transformers keys (names and shapes) and that both
//! models give the same outputs on the mapped weights.
//!
//! # Rules
//!
//! Each rule is `kind original-pattern transformers-pattern...`; patterns are dot-separated segments
//! where `{i}` is one decimal segment (a layer index) and a final `*` is one or more trailing
//! segments, both substituted on the right. The first matching rule wins.
//!
//! | kind     | tensors                                   | used for                                   |
//! |----------|-------------------------------------------|--------------------------------------------|
//! | `rename` | one -> one, same values                   | almost everything                          |
//! | `split`  | one -> two halves along dim 0             | perceiver `to_kv` -> `k_proj`, `v_proj`    |
//! | `concat` | `count` pieces `{i}` -> one along dim 0   | `point_embeddings.{0..3}` -> `point_embed` |
//! | `copy`   | one -> the same tensor under two names    | prompt-encoder Gaussian matrix             |
//!
//! Main renames (prefixes first, then the per-module details of the table):
//!
//! | original                                       | transformers                                      |
//! |------------------------------------------------|---------------------------------------------------|
//! | `image_encoder.trunk.body.*`                   | `vision_encoder.backbone.timm_model.*` (RepViT, timm names unchanged) |
//! | `image_encoder.neck.convs.{i}.conv.*`          | `vision_encoder.neck.convs.{i}.*`                 |
//! | `sam_prompt_encoder.pe_layer.positional_encoding_gaussian_matrix` | `prompt_encoder.shared_embedding.positional_embedding` **and** `shared_image_embedding.positional_embedding` |
//! | `sam_prompt_encoder.point_embeddings.{0..3}.weight` `[1,256]` | `prompt_encoder.point_embed.weight` `[4,256]` |
//! | `sam_prompt_encoder.mask_downscaling.{0,1,3,4,6}` | `prompt_encoder.mask_embed.{conv1,layer_norm1,conv2,layer_norm2,conv3}` |
//! | `sam_mask_decoder.*`, `...out_proj`, `...normN`, `norm_final_attn` | `mask_decoder.*`, `o_proj`, `layer_normN`, `layer_norm_final_attn` |
//! | `...mlp.layers.{0,1}` (two-way transformer)     | `...mlp.{proj_in,proj_out}`                       |
//! | 3-layer MLP heads `layers.{0,1,2}` (hypernetworks, IoU, object score, `obj_ptr_proj`) | `proj_in`, `layers.0`, `proj_out` |
//! | `sam_mask_decoder.output_upscaling.{0,1,3}`    | `mask_decoder.{upscale_conv1,upscale_layer_norm,upscale_conv2}` |
//! | `memory_attention.layers.{i}.{linear1,linear2,norm1..3}`, `memory_attention.norm` | `mlp.up_proj`, `mlp.down_proj`, `layer_norm1..3`, `memory_attention.layer_norm` |
//! | `memory_encoder.mask_downsampler.encoder.{0,1,3,4,6,7,9,10,12}` | `mask_downsampler.layers.{0..3}.{conv,layer_norm}`, `final_conv` |
//! | `memory_encoder.{pix_feat_proj,fuser,out_proj}`, fuser `{gamma,dwconv,norm,pwconv1,pwconv2}` | `{feature_projection,memory_fuser,projection}`, `{scale,depthwise_conv,layer_norm,pointwise_conv1,pointwise_conv2}` |
//! | `spatial_perceiver.latents`, `layers.{i}.attn.{norm_x,norm_latents,to_q,to_kv,to_out}`, `ff.{0,1,3}`, `self_attn.*`, `self_ff.*`, `norm` | `latents_1d`, `layers.{i}.{layer_norm_input,layer_norm_latents}`, `cross_attention.{q,k+v,o}_proj`, `mlp.{layer_norm,up_proj,down_proj}`, `layer_norm_self`, `self_attention.*`, `self_mlp.*`, `layer_norm` |
//! | `obj_ptr_proj`, `maskmem_tpos_enc` `[7,1,1,64]`, `no_mem_embed`, `no_mem_pos_enc`, `no_obj_ptr` | `object_pointer_proj`, `memory_temporal_positional_encoding` (same shape), `no_memory_embedding`, `no_memory_positional_encoding`, `no_object_pointer` |
//!
//! No tensor needs a reshape or transpose: shapes are identical except for the `split` and `concat`
//! rules. Both layouts hold the BatchNorm `num_batches_tracked` counters (int64) under matching names.
//!
//! Layout differences: the original has one tensor, `pe_layer.positional_encoding_gaussian_matrix`,
//! where transformers keeps two (`prompt_encoder.shared_embedding` for points and
//! `shared_image_embedding` for the image-wide encoding); loading an original checkpoint gives both
//! the same values, as transformers' own conversion does. Everything else is one-to-one (982
//! original keys -> 984 transformers keys: +1 copy, +4 split halves, -3 concatenated pieces).
//!
//! An original key that no rule matches is an error naming it, and so is a second original key
//! landing on a transformers name already produced. Prefix rules (`*`) accept unknown leaves below a
//! known module; such names are then caught when the model is built (missing or unexpected weights,
//! see [`crate::model::weights::Weights::check_all_used`]).
//!
//! # The full table (`original_keys.map`)
//!
//! ```text
#![doc = include_str!("original_keys.map")]
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use candle_core::Tensor;

use crate::error::{Error, Result};

/// The rule table shared with `tools/reference/write_original_checkpoint.py`.
pub const MAP: &str = include_str!("original_keys.map");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rename,
    Split,
    Concat(usize),
    Copy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg<'a> {
    Lit(&'a str),
    Index,
    Rest,
}

#[derive(Debug)]
struct Rule {
    kind: Kind,
    original: Vec<Seg<'static>>,
    targets: Vec<&'static str>,
    line: usize,
}

/// What a pattern captured: the `{i}` segment and the `*` tail.
#[derive(Debug, Default)]
struct Captures<'k> {
    index: Option<&'k str>,
    rest: Option<&'k str>,
}

fn parse_pattern(p: &'static str, line: usize) -> std::result::Result<Vec<Seg<'static>>, String> {
    let parts: Vec<&str> = p.split('.').collect();
    let mut segs = Vec::with_capacity(parts.len());
    for (n, s) in parts.iter().enumerate() {
        segs.push(match *s {
            "{i}" => Seg::Index,
            "*" if n + 1 == parts.len() => Seg::Rest,
            "*" => {
                return Err(format!(
                    "line {line}: `*` must be the last segment of `{p}`"
                ))
            }
            "" => return Err(format!("line {line}: empty segment in `{p}`")),
            lit => Seg::Lit(lit),
        });
    }
    Ok(segs)
}

fn parse_map(text: &'static str) -> std::result::Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let body = raw.split('#').next().unwrap_or("").trim();
        if body.is_empty() {
            continue;
        }
        let cols: Vec<&'static str> = body.split_whitespace().collect();
        let (kind, targets) = match (cols[0], cols.len()) {
            ("rename", 3) => (Kind::Rename, &cols[2..3]),
            ("split", 4) => (Kind::Split, &cols[2..4]),
            ("copy", 4) => (Kind::Copy, &cols[2..4]),
            ("concat", 4) => {
                let count = cols[3]
                    .parse::<usize>()
                    .map_err(|e| format!("line {line}: bad concat count `{}`: {e}", cols[3]))?;
                (Kind::Concat(count), &cols[2..3])
            }
            (k, c) => return Err(format!("line {line}: bad rule `{k}` with {c} columns")),
        };
        let original = parse_pattern(cols[1], line)?;
        if matches!(kind, Kind::Concat(_)) && !original.contains(&Seg::Index) {
            return Err(format!(
                "line {line}: a concat pattern needs an `{{i}}` segment"
            ));
        }
        rules.push(Rule {
            kind,
            original,
            targets: targets.to_vec(),
            line,
        });
    }
    Ok(rules)
}

fn rules() -> std::result::Result<&'static [Rule], String> {
    static RULES: OnceLock<std::result::Result<Vec<Rule>, String>> = OnceLock::new();
    match RULES.get_or_init(|| parse_map(MAP)) {
        Ok(r) => Ok(r),
        Err(e) => Err(format!("invalid key map original_keys.map: {e}")),
    }
}

fn match_pattern<'k>(pattern: &[Seg<'_>], key: &'k str) -> Option<Captures<'k>> {
    let mut caps = Captures::default();
    let mut rest = key;
    for (n, seg) in pattern.iter().enumerate() {
        let last = n + 1 == pattern.len();
        if *seg == Seg::Rest {
            if rest.is_empty() {
                return None;
            }
            caps.rest = Some(rest);
            return Some(caps);
        }
        let (head, tail) = match rest.split_once('.') {
            Some((h, t)) => (h, t),
            None => (rest, ""),
        };
        match seg {
            Seg::Lit(lit) if *lit == head => {}
            Seg::Index if !head.is_empty() && head.bytes().all(|b| b.is_ascii_digit()) => {
                caps.index = Some(head);
            }
            _ => return None,
        }
        let consumed_all = !rest.contains('.');
        if last {
            return consumed_all.then_some(caps);
        }
        if consumed_all {
            return None;
        }
        rest = tail;
    }
    None
}

fn fill(pattern: &str, caps: &Captures<'_>) -> String {
    pattern
        .split('.')
        .map(|s| match s {
            "{i}" => caps.index.unwrap_or("{i}"),
            "*" => caps.rest.unwrap_or("*"),
            lit => lit,
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn find_rule(key: &str) -> std::result::Result<Option<(&'static Rule, Captures<'_>)>, String> {
    for rule in rules()? {
        if let Some(caps) = match_pattern(&rule.original, key) {
            return Ok(Some((rule, caps)));
        }
    }
    Ok(None)
}

/// The transformers names an original key maps to (two for `split` and `copy` rules), or `None`
/// if no rule covers it.
pub fn transformers_names(original: &str) -> Option<Vec<String>> {
    let (rule, caps) = find_rule(original).ok()??;
    Some(rule.targets.iter().map(|t| fill(t, &caps)).collect())
}

/// The transformers name of an original key (the first one for `split` and `copy` rules; for the
/// pieces of a `concat` rule, the concatenated tensor), or `None` if no rule covers it.
pub fn transformers_name(original: &str) -> Option<String> {
    transformers_names(original)?.into_iter().next()
}

/// Pieces of one `concat` target, by index.
struct ConcatGroup {
    rule_line: usize,
    pieces: Vec<Option<(String, Tensor)>>,
}

/// Renames (and where needed splits, concatenates or duplicates) the tensors of an original
/// checkpoint to transformers keys.
///
/// Fails with [`Error::WeightFile`] naming `path` and the key when an original key matches no rule,
/// when two original keys produce the same transformers name, or when a `split`/`concat` rule meets
/// a tensor it cannot handle (odd first dimension, missing or out-of-range piece).
pub fn to_transformers(raw: Vec<(String, Tensor)>, path: &Path) -> Result<Vec<(String, Tensor)>> {
    let fail = |message: String| Error::WeightFile {
        path: path.to_owned(),
        message,
    };
    let mut out: Vec<(String, Tensor)> = Vec::with_capacity(raw.len() + 8);
    // transformers name -> the original key it came from (to report collisions).
    let mut source: HashMap<String, String> = HashMap::with_capacity(raw.len() + 8);
    let mut put = |name: String, t: Tensor, from: &str| -> Result<()> {
        if let Some(prev) = source.get(&name) {
            return Err(fail(format!(
                "original keys `{prev}` and `{from}` both map to `{name}`"
            )));
        }
        source.insert(name.clone(), from.to_owned());
        out.push((name, t));
        Ok(())
    };
    let mut groups: HashMap<String, ConcatGroup> = HashMap::new();

    for (key, t) in raw {
        let (rule, caps) = find_rule(&key).map_err(fail)?.ok_or_else(|| {
            fail(format!(
                "unknown original key `{key}`: no rule in the EdgeTAM key map \
                 (is this an EdgeTAM checkpoint?)"
            ))
        })?;
        let names: Vec<String> = rule.targets.iter().map(|p| fill(p, &caps)).collect();
        match rule.kind {
            Kind::Rename => put(names[0].clone(), t, &key)?,
            Kind::Copy => {
                for name in names {
                    put(name, t.clone(), &key)?;
                }
            }
            Kind::Split => {
                let rows = t.dims().first().copied().unwrap_or(0);
                if rows == 0 || !rows.is_multiple_of(2) {
                    return Err(fail(format!(
                        "`{key}` has shape {:?}; expected an even first dimension to split into \
                         `{}` and `{}`",
                        t.dims(),
                        names[0],
                        names[1]
                    )));
                }
                let halves = t.chunk(2, 0)?;
                for (name, half) in names.into_iter().zip(halves) {
                    put(name, half, &key)?;
                }
            }
            Kind::Concat(count) => {
                let index: usize = caps
                    .index
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(usize::MAX);
                if index >= count {
                    return Err(fail(format!(
                        "`{key}`: piece index out of range 0..{count} for `{}`",
                        names[0]
                    )));
                }
                let group = groups
                    .entry(names[0].clone())
                    .or_insert_with(|| ConcatGroup {
                        rule_line: rule.line,
                        pieces: vec![None; count],
                    });
                if let Some((prev, _)) = &group.pieces[index] {
                    return Err(fail(format!(
                        "original keys `{prev}` and `{key}` both map to piece {index} of `{}`",
                        names[0]
                    )));
                }
                group.pieces[index] = Some((key, t));
            }
        }
    }

    let mut groups: Vec<(String, ConcatGroup)> = groups.into_iter().collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, group) in groups {
        let mut tensors = Vec::with_capacity(group.pieces.len());
        let mut first_key = String::new();
        for (i, piece) in group.pieces.into_iter().enumerate() {
            match piece {
                Some((k, t)) => {
                    if first_key.is_empty() {
                        first_key = k;
                    }
                    tensors.push(t);
                }
                None => {
                    return Err(fail(format!(
                        "piece {i} of `{name}` is missing (key map line {})",
                        group.rule_line
                    )))
                }
            }
        }
        let t = Tensor::cat(&tensors, 0)
            .map_err(|e| fail(format!("cannot concatenate the pieces of `{name}`: {e}")))?;
        put(name, t, &first_key)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn map_parses_and_every_rule_has_targets() {
        let rules = rules().expect("the committed key map parses");
        assert!(rules.len() > 50, "only {} rules", rules.len());
        for r in rules {
            let want = match r.kind {
                Kind::Rename | Kind::Concat(_) => 1,
                Kind::Split | Kind::Copy => 2,
            };
            assert_eq!(r.targets.len(), want, "line {}", r.line);
        }
    }

    #[test]
    fn names() {
        let cases = [
            (
                "image_encoder.trunk.body.stages_2.blocks.13.token_mixer.conv.c.weight",
                "vision_encoder.backbone.timm_model.stages_2.blocks.13.token_mixer.conv.c.weight",
            ),
            (
                "image_encoder.neck.convs.3.conv.bias",
                "vision_encoder.neck.convs.3.bias",
            ),
            (
                "sam_mask_decoder.transformer.layers.1.self_attn.out_proj.weight",
                "mask_decoder.transformer.layers.1.self_attn.o_proj.weight",
            ),
            (
                "sam_mask_decoder.transformer.layers.1.self_attn.q_proj.bias",
                "mask_decoder.transformer.layers.1.self_attn.q_proj.bias",
            ),
            (
                "sam_mask_decoder.output_hypernetworks_mlps.2.layers.1.weight",
                "mask_decoder.output_hypernetworks_mlps.2.layers.0.weight",
            ),
            (
                "memory_encoder.mask_downsampler.encoder.10.bias",
                "memory_encoder.mask_downsampler.layers.3.layer_norm.bias",
            ),
            (
                "memory_encoder.fuser.layers.1.gamma",
                "memory_encoder.memory_fuser.layers.1.scale",
            ),
            ("spatial_perceiver.latents", "spatial_perceiver.latents_1d"),
            ("maskmem_tpos_enc", "memory_temporal_positional_encoding"),
            (
                "sam_prompt_encoder.point_embeddings.3.weight",
                "prompt_encoder.point_embed.weight",
            ),
        ];
        for (orig, hf) in cases {
            assert_eq!(transformers_name(orig).as_deref(), Some(hf), "{orig}");
        }
        assert_eq!(
            transformers_names("spatial_perceiver.layers.1.self_attn.to_kv.weight"),
            Some(vec![
                "spatial_perceiver.layers.1.self_attention.k_proj.weight".to_string(),
                "spatial_perceiver.layers.1.self_attention.v_proj.weight".to_string(),
            ])
        );
        for unknown in [
            "",
            "model",
            "image_encoder.trunk.body",
            "maskmem_tpos_enc.extra",
            "image_encoder.neck.convs.x.conv.weight",
            "spatial_perceiver.layers.0.attn.to_kv.bias",
        ] {
            assert_eq!(transformers_name(unknown), None, "{unknown:?}");
        }
    }

    fn zeros(shape: &[usize]) -> Tensor {
        Tensor::zeros(shape, DType::F32, &Device::Cpu).expect("zeros")
    }

    #[test]
    fn split_concat_copy() {
        let kv = Tensor::arange(0f32, 8.0, &Device::Cpu)
            .and_then(|t| t.reshape((4, 2)))
            .expect("kv");
        let mut raw = vec![(
            "spatial_perceiver.layers.0.attn.to_kv.weight".to_string(),
            kv,
        )];
        for i in (0..4).rev() {
            let t = Tensor::full(i as f32, (1, 3), &Device::Cpu).expect("piece");
            raw.push((format!("sam_prompt_encoder.point_embeddings.{i}.weight"), t));
        }
        raw.push((
            "sam_prompt_encoder.pe_layer.positional_encoding_gaussian_matrix".into(),
            zeros(&[2, 128]),
        ));
        let out: HashMap<String, Tensor> = to_transformers(raw, Path::new("x.pt"))
            .expect("maps")
            .into_iter()
            .collect();
        let k = &out["spatial_perceiver.layers.0.cross_attention.k_proj.weight"];
        let v = &out["spatial_perceiver.layers.0.cross_attention.v_proj.weight"];
        assert_eq!(k.to_vec2::<f32>().expect("k"), [[0., 1.], [2., 3.]]);
        assert_eq!(v.to_vec2::<f32>().expect("v"), [[4., 5.], [6., 7.]]);
        let pe = out["prompt_encoder.point_embed.weight"]
            .to_vec2::<f32>()
            .expect("pe");
        assert_eq!(
            pe.iter().map(|r| r[0]).collect::<Vec<_>>(),
            [0., 1., 2., 3.]
        );
        assert!(out.contains_key("shared_image_embedding.positional_embedding"));
        assert!(out.contains_key("prompt_encoder.shared_embedding.positional_embedding"));
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn errors() {
        let p = Path::new("ckpt.pt");
        let msg = |raw: Vec<(String, Tensor)>| match to_transformers(raw, p) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("expected an error"),
        };
        let m = msg(vec![("foo.bar.weight".into(), zeros(&[1]))]);
        assert!(
            m.contains("`foo.bar.weight`") && m.contains("ckpt.pt"),
            "{m}"
        );
        // Two original keys that land on one transformers name.
        let m = msg(vec![
            (
                "sam_mask_decoder.transformer.layers.0.self_attn.out_proj.weight".into(),
                zeros(&[1]),
            ),
            (
                "sam_mask_decoder.transformer.layers.0.self_attn.o_proj.weight".into(),
                zeros(&[1]),
            ),
        ]);
        assert!(
            m.contains("both map to") && m.contains("self_attn.o_proj.weight"),
            "{m}"
        );
        // Odd split, missing and out-of-range concat pieces.
        let m = msg(vec![(
            "spatial_perceiver.layers.0.attn.to_kv.weight".into(),
            zeros(&[3, 2]),
        )]);
        assert!(m.contains("even first dimension"), "{m}");
        let m = msg(vec![(
            "sam_prompt_encoder.point_embeddings.0.weight".into(),
            zeros(&[1, 4]),
        )]);
        assert!(
            m.contains("piece 1 of `prompt_encoder.point_embed.weight` is missing"),
            "{m}"
        );
        let m = msg(vec![(
            "sam_prompt_encoder.point_embeddings.4.weight".into(),
            zeros(&[1, 4]),
        )]);
        assert!(m.contains("out of range"), "{m}");
    }
}
