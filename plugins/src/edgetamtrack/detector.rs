//! Objects from a detector upstream: which detections of a buffer's metas the element uses.
//! Their association with the objects the element tracks is the pipeline crate's
//! ([`edgetam_pipeline::association`]; its rules are the element's); each detection's decision
//! goes into the buffer's `edgetam-tracking` message.

pub use edgetam_pipeline::association::{associate, Decision, Detection, Rules, Tracked};

/// Whether a detection of `label` with `confidence` is used: `types` empty or naming it, and
/// the confidence (where known) at least `min_confidence`. The element's own results (`edgetam`)
/// are never detections.
pub fn accepted(
    label: &str,
    confidence: Option<f64>,
    types: &[String],
    min_confidence: f64,
) -> bool {
    label != crate::results::ROI_TYPE
        && (types.is_empty() || types.iter().any(|t| t == label))
        && confidence.is_none_or(|c| c >= min_confidence)
}

/// `prompt-roi-types`: comma-separated, blanks ignored.
pub fn parse_types(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_apply() {
        let types = parse_types(" face, person ,");
        assert_eq!(types, ["face", "person"]);
        assert!(accepted("face", Some(0.7), &types, 0.5));
        assert!(!accepted("face", Some(0.4), &types, 0.5));
        assert!(!accepted("car", None, &types, 0.0));
        assert!(accepted("car", None, &[], 0.9));
        assert!(!accepted("edgetam", None, &[], 0.0));
    }
}
