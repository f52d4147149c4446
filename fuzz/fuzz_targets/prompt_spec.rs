//! The prompt syntax of `edgetam track --prompt` and the element (`PromptSpec`): any string is
//! an error or a spec that keeps the syntax's rules and reads back the same when written out.
#![no_main]

use edgetam_pipeline::{parse_floats, parse_point, PromptSpec, MAX_SPECS};
use edgetam_tracker::limits::MAX_PROMPT_POINTS;
use edgetam_tracker::PointLabel;
use libfuzzer_sys::fuzz_target;

/// The spec written back in the syntax.
fn write(spec: &PromptSpec) -> String {
    let mut out = format!("obj={};frame={}", spec.obj, spec.frame);
    if let Some([a, b, c, d]) = spec.bbox {
        out += &format!(";box={a},{b},{c},{d}");
    }
    for p in &spec.points {
        let label = u8::from(p.label == PointLabel::Positive);
        out += &format!(";point={},{},{label}", p.x, p.y);
    }
    if let Some(m) = &spec.mask {
        out += &format!(";mask={}", m.display());
    }
    out
}

fuzz_target!(|text: &str| {
    if let Ok(spec) = PromptSpec::parse(text) {
        assert!(spec.mask.is_none() || (spec.bbox.is_none() && spec.points.is_empty()));
        assert!(spec.mask.is_some() || spec.bbox.is_some() || !spec.points.is_empty());
        assert!(spec.bbox.is_none_or(|b| b.iter().all(|v| v.is_finite())));
        assert!(spec
            .points
            .iter()
            .all(|p| p.x.is_finite() && p.y.is_finite()));
        assert!(spec.points.len() + 2 * usize::from(spec.bbox.is_some()) <= MAX_PROMPT_POINTS);
        assert_eq!(spec.points_prompt().is_some(), spec.mask.is_none());
        if let Some(p) = spec.points_prompt() {
            let _ = p.validate(640, 480);
        }
        let again = PromptSpec::parse(&write(&spec)).expect("a written spec parses");
        assert_eq!(again, spec, "`{text}` read back differently");
    }
    if let Ok(list) = PromptSpec::parse_list(text) {
        assert!(list.len() <= MAX_SPECS);
    }
    let _ = parse_floats::<4>(text, "box");
    let _ = parse_point(text, "point");
});
