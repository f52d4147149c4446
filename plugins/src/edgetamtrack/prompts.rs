//! Prompts: the `prompts` property's specs, runtime commands (signals, the prompt event) and
//! detections from upstream metas, all turned into the tracking pipeline's commands for the
//! objects the element knows.

use std::collections::BTreeMap;

use edgetam_pipeline::{Pipeline, PromptSpec, PromptSpecError};
use edgetam_tracker::{FrameResult, Mask, ObjectPrompt, Prompt};

use super::detector::{self, Decision, Detection, Rules, Tracked};
use super::output::{Decisions, Labels, Seen};

/// A runtime command from a signal or an event.
#[derive(Debug, Clone)]
pub enum Command {
    Add(u32, ObjectPrompt),
    Remove(u32),
    Reset,
}

/// Why a prompt spec cannot become a prompt.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Syntax(#[from] PromptSpecError),
    #[error("object {obj}: {message}")]
    MaskFile { obj: u32, message: String },
}

/// Reads a mask file (`edgetam_pipeline::read_mask` in the element; the fuzz targets hand in
/// bytes instead of touching the file system).
pub type MaskReader<'a> =
    &'a dyn Fn(&std::path::Path) -> Result<Mask, edgetam_pipeline::MaskFileError>;

/// The prompt of one parsed spec (a mask file is read here).
pub fn spec_prompt(spec: &PromptSpec, read_mask: MaskReader) -> Result<ObjectPrompt, SpecError> {
    match (&spec.mask, spec.points_prompt()) {
        (Some(path), _) => {
            read_mask(path)
                .map(ObjectPrompt::Mask)
                .map_err(|e| SpecError::MaskFile {
                    obj: spec.obj,
                    message: e.to_string(),
                })
        }
        (None, Some(p)) => Ok(ObjectPrompt::Points(p)),
        (None, None) => Ok(ObjectPrompt::Points(Prompt::default())),
    }
}

/// One spec string (a signal's or event's): object id and prompt.
pub fn parse_spec(spec: &str, read_mask: MaskReader) -> Result<(u32, ObjectPrompt), SpecError> {
    let s = PromptSpec::parse(spec)?;
    Ok((s.obj, spec_prompt(&s, read_mask)?))
}

/// The `prompts` property: `(buffer index, object, prompt)` per spec.
pub fn schedule(
    text: &str,
    read_mask: MaskReader,
) -> Result<Vec<(u64, u32, ObjectPrompt)>, SpecError> {
    PromptSpec::parse_list(text)?
        .iter()
        .map(|s| Ok((s.frame as u64, s.obj, spec_prompt(s, read_mask)?)))
        .collect()
}

/// The `add-points` signal's `x,y,label` triples joined by `;`.
pub fn parse_points(obj: u32, points: &str) -> Result<ObjectPrompt, String> {
    let parsed = points
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| edgetam_pipeline::parse_point(p, "point"))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| format!("add-points for object {obj}: {e}"))?;
    if parsed.is_empty() {
        return Err(format!(
            "add-points for object {obj}: no point given (expected `x,y,label;...`)"
        ));
    }
    edgetam_tracker::limits::check(
        || format!("add-points for object {obj}: the number of points"),
        parsed.len(),
        edgetam_tracker::limits::MAX_PROMPT_POINTS,
    )
    .map_err(|e| e.to_string())?;
    Ok(ObjectPrompt::Points(Prompt::from_points(parsed)))
}

/// The spec string of a prompt event's structure: `None` when the structure is not a prompt
/// event, `Some(Err)` when it is one without a string `spec` field.
pub fn event_spec(s: &gst::StructureRef) -> Option<Result<&str, String>> {
    if s.name() != crate::results::PROMPT_EVENT {
        return None;
    }
    Some(
        s.get::<&str>(crate::results::PROMPT_EVENT_SPEC)
            .map_err(|e| {
                format!(
                    "{} event without a string field `{}`: {e}",
                    crate::results::PROMPT_EVENT,
                    crate::results::PROMPT_EVENT_SPEC
                )
            }),
    )
}

/// The objects the element asked the tracker for, what it knows of each between results
/// (for `max-objects` and the detector association) and the detector labels.
#[derive(Debug, Default)]
pub struct Objects {
    pub known: BTreeMap<u32, Tracked>,
    pub labels: Labels,
    /// When each object the tracker has was first tracked and last seen.
    pub seen: BTreeMap<u32, Seen>,
    /// The id a detection's new object gets.
    pub next_id: u32,
}

impl Objects {
    /// Queues `cmd` into `pipeline` for the buffers from element index `since` on; the reason
    /// when refused.
    pub fn apply(
        &mut self,
        pipeline: &Pipeline,
        cmd: Command,
        max: usize,
        since: u64,
    ) -> Result<(), String> {
        let r = match cmd {
            Command::Add(obj, prompt) => {
                if !self.known.contains_key(&obj) && self.known.len() >= max {
                    return Err(format!(
                        "max-objects ({max}) reached: the prompt for object {obj} is refused"
                    ));
                }
                let bbox = match &prompt {
                    ObjectPrompt::Points(p) => p.bbox,
                    ObjectPrompt::Mask(_) => None,
                };
                let r = pipeline.add_prompt(obj, prompt);
                if r.is_ok() {
                    let t = self.known.entry(obj).or_default();
                    match bbox {
                        Some(b) => t.prompted(b),
                        None => t.absent = 0,
                    }
                    t.since = since;
                    self.next_id = self.next_id.max(obj.saturating_add(1));
                }
                r
            }
            Command::Remove(obj) => {
                self.known.remove(&obj);
                self.labels.remove(&obj);
                self.seen.remove(&obj);
                pipeline.remove_object(obj)
            }
            Command::Reset => {
                self.clear();
                pipeline.reset()
            }
        };
        r.map_err(|e| e.to_string())
    }

    pub fn clear(&mut self) {
        self.known.clear();
        self.labels.clear();
        self.seen.clear();
    }

    /// Records the result of the buffer with element index `index` and running time `time`:
    /// each object's box, absence and seen times; objects the tracker no longer has are
    /// forgotten (not those prompted for later buffers, which this result cannot know yet).
    pub fn observe(&mut self, r: &FrameResult, index: u64, time: gst::ClockTime) {
        let ids: std::collections::BTreeSet<u32> = r.objects.iter().map(|o| o.id).collect();
        self.known
            .retain(|id, t| ids.contains(id) || t.since > index);
        let known = &self.known;
        self.labels.retain(|id, _| known.contains_key(id));
        self.seen.retain(|id, _| ids.contains(id));
        for o in &r.objects {
            self.known
                .entry(o.id)
                .or_default()
                .observe(o.visible, o.bbox);
            let seen = self.seen.entry(o.id).or_insert(Seen {
                first: time,
                last: time,
            });
            if o.visible {
                seen.last = time;
            }
        }
    }

    /// Associates a buffer's detections (see [`detector`]) and queues the prompts that follow
    /// (new objects, re-seeds). Returns each detection's decision and the refused commands'
    /// reasons.
    pub fn detections(
        &mut self,
        pipeline: &Pipeline,
        detections: Vec<Detection>,
        rules: Rules,
        since: u64,
    ) -> (Decisions, Vec<String>) {
        if self.next_id == 0 {
            self.next_id = 1;
        }
        let decisions = detector::associate(&detections, &mut self.known, rules, &mut self.next_id);
        let mut refused = Vec::new();
        for (d, decision) in detections.iter().zip(&decisions) {
            let obj = match decision {
                Decision::New { obj } => {
                    self.labels.insert(*obj, d.label.clone());
                    *obj
                }
                Decision::Reseed { obj } => *obj,
                _ => continue,
            };
            if let Some(t) = self.known.get_mut(&obj) {
                t.since = since;
            }
            let [x0, y0, x1, y1] = d.bbox;
            let prompt = ObjectPrompt::Points(Prompt::from_box(x0, y0, x1, y1));
            if let Err(e) = pipeline.add_prompt(obj, prompt) {
                refused.push(format!("detection prompt for object {obj}: {e}"));
            }
        }
        (detections.into_iter().zip(decisions).collect(), refused)
    }
}

/// The accepted detections of a buffer's `GstVideoRegionOfInterestMeta`s (a `confidence`
/// field of any param structure is the detection's confidence).
pub fn roi_detections(
    buf: &gst::BufferRef,
    types: &[String],
    min_confidence: f64,
) -> Vec<Detection> {
    buf.iter_meta::<gst_video::VideoRegionOfInterestMeta>()
        .filter_map(|m| {
            let label = m.roi_type().to_owned();
            let confidence = m.params().find_map(|p| {
                p.get::<f64>("confidence")
                    .ok()
                    .or_else(|| p.get::<f32>("confidence").ok().map(f64::from))
            });
            if !detector::accepted(&label, confidence, types, min_confidence) {
                return None;
            }
            let (x, y, w, h) = m.rect();
            (w > 0 && h > 0).then(|| Detection {
                bbox: [x as f32, y as f32, (x + w) as f32, (y + h) as f32],
                label,
                confidence,
                source_id: None,
            })
        })
        .collect()
}

/// The accepted object-detection Mtds of a buffer's analytics relation metas (the box in frame
/// pixels, the object type as label, the location confidence). Detections of the first
/// relation meta, where the element adds its own Mtds, keep their Mtd id (see
/// [`Detection::source_id`]).
#[cfg(feature = "v1_24")]
pub fn analytics_detections(
    buf: &gst::BufferRef,
    types: &[String],
    min_confidence: f64,
) -> Vec<Detection> {
    use gst_analytics::{AnalyticsMetaRefExt, AnalyticsODMtd, AnalyticsRelationMeta};
    let mut out = Vec::new();
    for (n, meta) in buf.iter_meta::<AnalyticsRelationMeta>().enumerate() {
        for od in meta.iter::<AnalyticsODMtd>() {
            let label = od
                .obj_type()
                .map_or_else(String::new, |q| q.as_str().to_string());
            let Ok(loc) = od.location() else { continue };
            let confidence = Some(f64::from(loc.loc_conf_lvl));
            if !detector::accepted(&label, confidence, types, min_confidence)
                || loc.w <= 0
                || loc.h <= 0
            {
                continue;
            }
            out.push(Detection {
                bbox: [
                    loc.x as f32,
                    loc.y as f32,
                    (loc.x + loc.w) as f32,
                    (loc.y + loc.h) as f32,
                ],
                label,
                confidence,
                source_id: (n == 0).then(|| od.id()),
            });
        }
    }
    out
}
