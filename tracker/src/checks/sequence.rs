//! Streaming parity: replays a reference sequence (`events.json` + `sequence.safetensors`,
//! written by `tools/reference/generate_sequence_fixtures.py`) through a [`Tracker`] and
//! compares every frame's result for every object.
//!
//! Two modes. **Free-running** feeds our own outputs forward, as a user runs it; the bar is
//! what float noise allows once the memory encoder's binarised prompted-frame input flips a
//! pixel (logits within `0.05 x std`, score within 0.01, mask IoU >= 0.995, identical presence and
//! multimask decisions). **Forced** replaces that binarised input by the reference's own
//! (`out.r*.o*.mem_mask`), which removes the flips, so every later frame can be held to the stage
//! bar. Stage checks feed single stages the reference's inputs at one late tracked frame.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, IndexOp, Tensor};

use super::{StageReport, STAGE_REL_L2};
use crate::checks::compare::{compare, mask_iou, Comparison};
use crate::checks::{CheckError, Result};
use crate::model::config::EdgeTamConfig;
use crate::model::decoder::DecoderInputs;
use crate::model::edgetam::EdgeTam;
use crate::model::prompt::{Point, PointLabel, Prompt};
use crate::model::weights::Weights;
use crate::tracking::prompts::{Mask, ObjectPrompt};
use crate::tracking::results::FrameResult;
use crate::tracking::tracker::Tracker;
use crate::Error;

/// Free-running bars (the issue's): low-res logits max |diff| <= 0.05 x std, score within
/// 0.01, mask IoU >= 0.995.
pub const FREE_LOGIT_STD_FRACTION: f64 = 0.05;
pub const FREE_SCORE_ABS: f64 = 0.01;
pub const FREE_MASK_IOU: f64 = 0.995;

/// One step of a recorded session, in the [`Tracker`]'s terms.
#[derive(Debug, Clone)]
pub enum Event {
    Prompt {
        frame: u64,
        obj: u32,
        prompt: ObjectPrompt,
    },
    Track {
        frame: u64,
        out: usize,
    },
    Refresh {
        frame: u64,
        out: usize,
    },
}

/// A loaded sequence fixture.
pub struct SequenceFixture {
    pub dir: PathBuf,
    pub config: EdgeTamConfig,
    pub tensors: HashMap<String, Tensor>,
    pub events: Vec<Event>,
    pub width: usize,
    pub height: usize,
}

/// Whether `dir` holds a sequence fixture.
pub fn is_sequence_fixture(dir: &Path) -> bool {
    dir.join("events.json").is_file() && dir.join("sequence.safetensors").is_file()
}

fn fixture_err(msg: impl Into<String>) -> CheckError {
    CheckError::Fixture(msg.into())
}

impl SequenceFixture {
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let config = EdgeTamConfig::from_file(dir.join("config.json"))?;
        let path = dir.join("sequence.safetensors");
        let tensors = candle_core::safetensors::load(&path, &Device::Cpu)
            .map_err(|e| fixture_err(format!("{}: {e}", path.display())))?;
        let events_path = dir.join("events.json");
        let text = std::fs::read_to_string(&events_path).map_err(|source| Error::Io {
            path: events_path.clone(),
            source,
        })?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| fixture_err(format!("{}: {e}", events_path.display())))?;
        let dim = |k: &str| {
            json.get(k)
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
                .ok_or_else(|| fixture_err(format!("events.json has no `{k}`")))
        };
        let (width, height) = (dim("width")?, dim("height")?);
        let list = json
            .get("events")
            .and_then(|v| v.as_array())
            .ok_or_else(|| fixture_err("events.json has no `events` list"))?;
        let mut events = Vec::with_capacity(list.len());
        for e in list {
            events.push(parse_event(e, &tensors)?);
        }
        Ok(Self {
            dir,
            config,
            tensors,
            events,
            width,
            height,
        })
    }

    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| fixture_err(format!("{}: missing tensor `{name}`", self.dir.display())))
    }

    /// The model the fixture ran: `base` weights plus `extra_weights.safetensors` if present
    /// (tensors only transformers' default switches create).
    pub fn model(&self, base: &Weights, device: &Device) -> Result<EdgeTam> {
        let extra = self.dir.join("extra_weights.safetensors");
        let weights = if extra.is_file() {
            let mut all = base.tensors().clone();
            let more = Weights::load(&extra, device)?;
            all.extend(more.tensors().clone());
            Weights::from_tensors(all, base.path())
        } else {
            Weights::from_tensors(base.tensors().clone(), base.path())
        };
        Ok(EdgeTam::from_weights(
            self.config.clone(),
            &weights,
            device,
        )?)
    }

    fn frame(&self, f: u64) -> Result<Vec<u8>> {
        let frames = self.get("frames")?;
        Ok(frames.i(f as usize)?.flatten_all()?.to_vec1::<u8>()?)
    }
}

fn parse_event(e: &serde_json::Value, tensors: &HashMap<String, Tensor>) -> Result<Event> {
    let kind = e.get("type").and_then(|v| v.as_str()).unwrap_or("");
    let num = |k: &str| {
        e.get(k)
            .and_then(|v| v.as_u64())
            .ok_or_else(|| fixture_err(format!("event {e} lacks `{k}`")))
    };
    let frame = num("frame")?;
    match kind {
        "track" => Ok(Event::Track {
            frame,
            out: num("out")? as usize,
        }),
        "refresh" => Ok(Event::Refresh {
            frame,
            out: num("out")? as usize,
        }),
        "prompt" => {
            let obj = num("obj")? as u32;
            let floats = |v: &serde_json::Value| -> Vec<f32> {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_f64())
                            .map(|x| x as f32)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let prompt = if let Some(name) = e.get("mask").and_then(|v| v.as_str()) {
                let t = tensors
                    .get(name)
                    .ok_or_else(|| fixture_err(format!("mask prompt tensor `{name}` missing")))?;
                let (h, w) = t.dims2()?;
                ObjectPrompt::Mask(Mask::new(w, h, t.flatten_all()?.to_vec1::<u8>()?)?)
            } else {
                let mut p = Prompt::default();
                if let Some(b) = e.get("box") {
                    let b = floats(b);
                    if b.len() != 4 {
                        return Err(fixture_err(format!("bad box in {e}")));
                    }
                    p.bbox = Some([b[0], b[1], b[2], b[3]]);
                }
                if let Some(pts) = e.get("points").and_then(|v| v.as_array()) {
                    for q in pts {
                        let q = floats(q);
                        if q.len() != 3 {
                            return Err(fixture_err(format!("bad point in {e}")));
                        }
                        let label = if q[2] > 0.5 {
                            PointLabel::Positive
                        } else {
                            PointLabel::Negative
                        };
                        p.points.push(Point {
                            x: q[0],
                            y: q[1],
                            label,
                        });
                    }
                }
                ObjectPrompt::Points(p)
            };
            Ok(Event::Prompt { frame, obj, prompt })
        }
        other => Err(fixture_err(format!("unknown event type `{other}`"))),
    }
}

/// How the replay feeds the memory encoder on prompted frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Our own binarised masks (a user's run).
    FreeRunning,
    /// The reference's binarised masks.
    Forced,
}

fn key(out: usize, obj: u32, what: &str) -> String {
    format!("out.r{out:06}.o{obj}.{what}")
}

fn scalar(t: &Tensor) -> Result<f64> {
    Ok(t.to_dtype(DType::F64)?
        .flatten_all()?
        .to_vec1::<f64>()?
        .first()
        .copied()
        .unwrap_or(f64::NAN))
}

fn flag(ok: bool) -> Comparison {
    Comparison {
        rel_l2: if ok { 0.0 } else { 1.0 },
        cosine: if ok { 1.0 } else { 0.0 },
        max_abs: if ok { 0.0 } else { 1.0 },
        expected_std: 0.0,
    }
}

/// Replays the fixture's prompts and frames free-running and returns every result (tracked and
/// refreshed frames, in event order): for comparing two configurations of our own model, such as
/// the bf16 mode against exact f32.
pub fn replay(fx: &SequenceFixture, model: Arc<EdgeTam>) -> Result<Vec<FrameResult>> {
    let mut tracker = Tracker::new(model);
    let mut results = Vec::new();
    for ev in &fx.events {
        match ev {
            Event::Prompt { frame, obj, prompt } => {
                tracker.add_prompt(*obj, *frame, prompt.clone())?;
            }
            Event::Track { frame, .. } => {
                results.push(tracker.track(&fx.frame(*frame)?, fx.width, fx.height)?);
            }
            Event::Refresh { .. } => results.push(tracker.refresh()?),
        }
    }
    Ok(results)
}

/// Replays the fixture and compares every output; one report per check.
pub fn run(fx: &SequenceFixture, model: Arc<EdgeTam>, mode: Mode) -> Result<Vec<StageReport>> {
    let tag = match mode {
        Mode::FreeRunning => "free",
        Mode::Forced => "forced",
    };
    let device = model.device().clone();
    let mut tracker = Tracker::new(model);
    let mut reports = Vec::new();
    for ev in &fx.events {
        let (out, result) = match ev {
            Event::Prompt { frame, obj, prompt } => {
                tracker.add_prompt(*obj, *frame, prompt.clone())?;
                continue;
            }
            Event::Track { frame, out } | Event::Refresh { frame, out } => {
                if mode == Mode::Forced {
                    let mut masks = HashMap::new();
                    for (name, t) in &fx.tensors {
                        let prefix = format!("out.r{out:06}.o");
                        if let Some(rest) = name.strip_prefix(&prefix) {
                            if let Some(id) = rest.strip_suffix(".mem_mask") {
                                let id: u32 = id
                                    .parse()
                                    .map_err(|_| fixture_err(format!("bad tensor name {name}")))?;
                                let s = t.dim(0)?;
                                let m = t
                                    .to_dtype(DType::F32)?
                                    .reshape((1, 1, s, s))?
                                    .to_device(&device)?;
                                masks.insert(id, m);
                            }
                        }
                    }
                    tracker.set_memory_mask_override(Some(Box::new(move |id, _| {
                        masks.get(&id).cloned()
                    })));
                }
                if mode == Mode::Forced && fx.tensors.contains_key("stage.frame") {
                    let stage_frame = scalar(fx.get("stage.frame")?)? as u64;
                    if matches!(ev, Event::Track { .. }) && *frame == stage_frame {
                        reports.extend(stage_checks(fx, &tracker)?);
                    }
                }
                let result = if matches!(ev, Event::Track { .. }) {
                    if tracker.next_frame_index() != *frame {
                        return Err(fixture_err(format!(
                            "event tracks frame {frame} but the tracker is at {}",
                            tracker.next_frame_index()
                        )));
                    }
                    tracker.track(&fx.frame(*frame)?, fx.width, fx.height)?
                } else {
                    tracker.refresh()?
                };
                (*out, result)
            }
        };
        let ids = fx
            .get(&format!("out.r{out:06}.object_ids"))?
            .to_vec1::<i64>()?;
        let ours: Vec<i64> = result.objects.iter().map(|o| o.id as i64).collect();
        let name = |obj: u32, what: &str| format!("{tag} f{} o{obj} {what}", result.frame_index);
        if ours != ids {
            reports.push(StageReport::custom(
                format!("{tag} f{} object ids", result.frame_index),
                flag(false),
                false,
                format!("ids {ours:?} == {ids:?}"),
            ));
            continue;
        }
        for o in &result.objects {
            let lowres = fx.get(&key(out, o.id, "lowres"))?;
            let ours_lr = o
                .low_res_logits
                .to_device(&Device::Cpu)?
                .reshape(lowres.dims())?;
            let c = compare(&ours_lr, lowres)?;
            reports.push(match mode {
                Mode::FreeRunning => {
                    let bar = FREE_LOGIT_STD_FRACTION * c.expected_std;
                    StageReport::custom(
                        name(o.id, "lowres"),
                        c,
                        c.max_abs <= bar,
                        format!("max_abs <= 0.05 x std = {bar:.2e}"),
                    )
                }
                Mode::Forced => StageReport::rel_l2(name(o.id, "lowres"), c, STAGE_REL_L2),
            });
            let score = scalar(fx.get(&key(out, o.id, "score"))?)?;
            let d = (o.score as f64 - score).abs();
            let sc = Comparison {
                rel_l2: d / score.abs().max(1e-12),
                cosine: 1.0,
                max_abs: d,
                expected_std: 0.0,
            };
            let score_bar = match mode {
                Mode::FreeRunning => FREE_SCORE_ABS,
                Mode::Forced => 1e-3,
            };
            reports.push(StageReport::max_abs(name(o.id, "score"), sc, score_bar));
            let mask = fx.get(&key(out, o.id, "mask"))?;
            let ours_mask = Tensor::from_vec(
                o.mask.data.clone(),
                (o.mask.height, o.mask.width),
                &Device::Cpu,
            )?;
            let iou = mask_iou(&ours_mask, mask)?;
            reports.push(StageReport::custom(
                name(o.id, "mask IoU"),
                Comparison {
                    rel_l2: 1.0 - iou,
                    cosine: iou,
                    max_abs: 1.0 - iou,
                    expected_std: 0.0,
                },
                iou >= FREE_MASK_IOU,
                format!("IoU {iou:.6} >= {FREE_MASK_IOU}"),
            ));
            let present = score > 0.0;
            let mm = scalar(fx.get(&key(out, o.id, "multimask"))?)? > 0.5;
            let chosen = scalar(fx.get(&key(out, o.id, "chosen"))?)? as usize;
            let is_cond = scalar(fx.get(&key(out, o.id, "is_cond"))?)? > 0.5;
            let same = o.visible == present
                && o.multimask == mm
                && o.chosen_mask == chosen
                && o.prompted == is_cond;
            reports.push(StageReport::custom(
                name(o.id, "decisions"),
                flag(same),
                same,
                format!(
                    "visible {} == {present}, multimask {} == {mm}, chosen {} == {chosen}, prompted {} == {is_cond}",
                    o.visible, o.multimask, o.chosen_mask, o.prompted
                ),
            ));
        }
    }
    Ok(reports)
}

/// Stages fed the reference's own inputs at the fixture's stage frame (`stage.*`), plus the
/// memory our forced replay gathered for that frame against the reference's.
fn stage_checks(fx: &SequenceFixture, tracker: &Tracker) -> Result<Vec<StageReport>> {
    let model = tracker.model();
    let dev = model.device().clone();
    let get = |n: &str| -> Result<Tensor> { Ok(fx.get(n)?.to_device(&dev)?) };
    let frame = scalar(fx.get("stage.frame")?)? as u64;
    let obj = scalar(fx.get("stage.obj")?)? as u32;
    let name = |what: &str| format!("stage f{frame} o{obj} {what}");
    let mut r = Vec::new();
    let cmp =
        |a: &Tensor, e: &Tensor| compare(&a.to_device(&Device::Cpu)?, &e.to_device(&Device::Cpu)?);

    // The memory our bank gathered (forced replay up to here) vs the reference's.
    let g = tracker.gather_for_next_frame(obj)?;
    let mem = get("stage.memory")?;
    let mem_pos = get("stage.memory_pos")?;
    let nptr = scalar(fx.get("stage.num_object_pointer_tokens")?)? as usize;
    let nsp = scalar(fx.get("stage.num_spatial_memory_tokens")?)? as usize;
    let layout_ok = g.num_pointer_tokens == nptr && g.num_spatial_memories == nsp;
    r.push(StageReport::custom(
        name("gathered layout"),
        flag(layout_ok),
        layout_ok,
        format!(
            "{} memories + {} pointer tokens == {nsp} + {nptr}",
            g.num_spatial_memories, g.num_pointer_tokens
        ),
    ));
    if layout_ok {
        r.push(StageReport::rel_l2(
            name("gathered memory"),
            cmp(&g.memory.unsqueeze(0)?, &mem)?,
            STAGE_REL_L2,
        ));
        r.push(StageReport::rel_l2(
            name("gathered memory position"),
            cmp(&g.memory_pos.unsqueeze(0)?, &mem_pos)?,
            STAGE_REL_L2,
        ));
    }

    // Memory attention on the reference's inputs.
    let current = get("stage.current")?;
    let current_pos = get("stage.current_pos")?;
    let cond = get("stage.conditioned")?;
    let out =
        model
            .video
            .memory_attention
            .forward(&current, &current_pos, &mem, &mem_pos, nptr, nsp)?;
    let (b, c, h, w) = cond.dims4()?;
    let out = out.transpose(1, 2)?.reshape((b, c, h, w))?;
    r.push(StageReport::rel_l2(
        name("memory attention"),
        cmp(&out, &cond)?,
        STAGE_REL_L2,
    ));

    // Decoder on the reference's conditioned features (image features of the frame are ours;
    // the image encoder has its own goldens).
    let rgb = fx.frame(frame)?;
    let image = model.encode_image(&rgb, fx.width, fx.height)?;
    let (sparse, dense) = model.prompt_encoder().embed(None, None)?;
    let image_pe = model
        .image_positional_embedding()
        .image_wide(model.config().embed_size())?;
    let inputs = DecoderInputs {
        image_embed: &cond,
        image_pe: &image_pe,
        sparse: &sparse,
        dense: &dense,
        feat_s0: &image.features.feat_s0,
        feat_s1: &image.features.feat_s1,
    };
    let dec = model
        .mask_decoder()
        .forward(&inputs, model.use_multimask_for(false, 0))?;
    r.push(StageReport::rel_l2(
        name("decoder masks"),
        cmp(&dec.masks, &get("stage.masks")?)?,
        STAGE_REL_L2,
    ));
    r.push(StageReport::max_abs(
        name("decoder IoU"),
        cmp(&dec.iou, &get("stage.iou")?)?,
        1e-4,
    ));
    r.push(StageReport::max_abs(
        name("decoder object score"),
        cmp(
            &dec.object_score.reshape((1, 1))?,
            &get("stage.object_score")?.reshape((1, 1))?,
        )?,
        1e-3,
    ));
    // Object pointer from the reference's chosen token.
    let ptr = model.object_pointer(&get("stage.sam_token")?)?;
    r.push(StageReport::rel_l2(
        name("object pointer"),
        cmp(&ptr, &get("stage.pointer")?)?,
        STAGE_REL_L2,
    ));

    // Memory encoder and perceiver on the reference's inputs.
    let level2 = current.transpose(1, 2)?.reshape((b, c, h, w))?;
    let (feats, pos) = model
        .video
        .memory_encoder
        .forward(&level2, &get("stage.mask_for_mem")?)?;
    r.push(StageReport::rel_l2(
        name("memory encoder"),
        cmp(&feats, &get("stage.maskmem_features")?)?,
        STAGE_REL_L2,
    ));
    let (m, p) = model
        .video
        .spatial_perceiver
        .forward(&get("stage.maskmem_features")?, &pos)?;
    r.push(StageReport::rel_l2(
        name("perceiver memory"),
        cmp(&m, &get("stage.maskmem")?)?,
        STAGE_REL_L2,
    ));
    r.push(StageReport::rel_l2(
        name("perceiver position"),
        cmp(&p, &get("stage.maskmem_pos")?)?,
        STAGE_REL_L2,
    ));
    Ok(r)
}
