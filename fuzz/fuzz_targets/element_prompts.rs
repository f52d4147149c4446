//! The `edgetamtrack` element's strings, through the element's own parsing: the `prompts`
//! property, the `add-prompt` signal, the prompt event's structure, the `add-points` signal,
//! `prompt-roi-types` and `device`.
//!
//! Input: one byte choosing which (its value mod 6, in that order), the UTF-8 string up to the
//! first zero byte, then the bytes a `mask=` file holds (never read from the file system). For
//! the prompt event the string is the structure name, a space and the `spec` field, which is
//! a string, an int or missing (the selector byte / 6, mod 3).
#![no_main]

use edgetam_tracker::ObjectPrompt;
use gstedgetam::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        gst::init().expect("GStreamer initialises");
    },
    |data: &[u8]| {
        let Some((&which, rest)) = data.split_first() else {
            return;
        };
        let (text, mask) = match rest.iter().position(|&b| b == 0) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        let Ok(text) = std::str::from_utf8(text) else {
            return;
        };
        match which % 6 {
            0 => {
                let _ = fuzzing::prompts_property(text, mask);
            }
            1 => {
                let _ = fuzzing::prompt_spec(text, mask);
            }
            2 => {
                let (name, spec) = text.split_once(' ').unwrap_or((text, ""));
                // Structure names as GStreamer allows them (an application cannot build others).
                let valid = name.starts_with(|c: char| c.is_ascii_alphabetic())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || "/-_.:+".contains(c));
                if !valid {
                    return;
                }
                let field = match which / 6 % 3 {
                    0 => fuzzing::EventField::Str(spec),
                    1 => fuzzing::EventField::Int(spec.len() as i32),
                    _ => fuzzing::EventField::Missing,
                };
                match fuzzing::prompt_event(name, field) {
                    Some(Ok(spec)) => {
                        let _ = fuzzing::prompt_spec(&spec, mask);
                    }
                    Some(Err(_)) | None => {}
                }
            }
            3 => {
                if let Ok(p) = fuzzing::add_points(u32::from(which), text) {
                    let ObjectPrompt::Points(p) = p else {
                        panic!("add-points made a mask prompt");
                    };
                    assert!(!p.points.is_empty() && p.bbox.is_none());
                }
            }
            4 => {
                let types = fuzzing::roi_types(text);
                assert!(types.iter().all(|t| !t.is_empty() && !t.contains(',')));
            }
            _ => {
                let _ = fuzzing::device(text);
            }
        }
    }
);
