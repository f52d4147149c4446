//! The textual prompt syntax shared by `edgetam track --prompt` and the GStreamer element's
//! `prompts` property: one object's prompt on one frame as `;`-separated `key=value` tokens.
//!
//! ```text
//! obj=1;frame=0;box=x0,y0,x1,y1
//! obj=2;frame=0;point=x,y,1;point=x,y,0     (label 1 = object, 0 = background; repeatable)
//! obj=3;frame=5;mask=PATH                   (a PNG of the frame's size, nonzero = inside)
//! ```
//!
//! The syntax, with examples, is [`PromptSpec`]'s.

use std::path::PathBuf;
use std::str::FromStr;

use edgetam_tracker::{Point, PointLabel, Prompt};

/// Why a prompt spec cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptSpecError {
    /// One `key=value` token is wrong; `token` is the token as written.
    #[error("bad token `{token}`: {reason}")]
    BadToken { token: String, reason: String },
    /// No `obj=` token.
    #[error("missing obj=ID (e.g. `obj=1;frame=0;box=10,10,50,40`)")]
    MissingObject,
    /// `mask=` together with `box=` or `point=`.
    #[error("mask= cannot be combined with box= or point= in one prompt")]
    MaskCombined,
    /// Neither `box=`, `point=` nor `mask=`.
    #[error("object {obj} needs box=, point= or mask=")]
    NoPrompt { obj: u32 },
    /// An empty spec in a `|`-separated list.
    #[error("prompt {index} of the list is empty")]
    Empty { index: usize },
    /// Too many points in one spec, or too many specs in a list (see
    /// [`edgetam_tracker::limits`]).
    #[error(transparent)]
    Limit(#[from] edgetam_tracker::LimitError),
    /// A spec of a `|`-separated list is wrong (`index` counts from 0).
    #[error("prompt {index} (`{spec}`): {source}")]
    InList {
        index: usize,
        spec: String,
        #[source]
        source: Box<PromptSpecError>,
    },
}

/// One object's prompt on one frame, as parsed (a mask file is named, not read):
///
/// ```text
/// obj=1;frame=0;box=x0,y0,x1,y1
/// obj=2;frame=0;point=x,y,1;point=x,y,0     (label 1 = object, 0 = background; repeatable)
/// obj=3;frame=5;mask=PATH                   (a PNG of the frame's size, nonzero = inside)
/// ```
///
/// `obj=ID` is required, `frame=F` defaults to 0, a box and points can be combined, a mask
/// cannot be combined with either. Coordinates are frame pixels; they are checked against the
/// frame only when the prompt is applied. Several specs can be joined with `|`
/// ([`PromptSpec::parse_list`]).
///
/// ```
/// use edgetam_pipeline::PromptSpec;
/// let spec: PromptSpec = "obj=1;frame=0;box=10,20,50,60".parse().unwrap();
/// assert_eq!((spec.obj, spec.frame, spec.bbox), (1, 0, Some([10., 20., 50., 60.])));
/// let err = "obj=1;bx=1,2,3,4".parse::<PromptSpec>().unwrap_err();
/// assert!(err.to_string().contains("unknown key `bx`"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
    /// The object id (`obj=`).
    pub obj: u32,
    /// The frame index (`frame=`, default 0).
    pub frame: usize,
    /// `box=x0,y0,x1,y1`.
    pub bbox: Option<[f32; 4]>,
    /// `point=x,y,label` tokens in order.
    pub points: Vec<Point>,
    /// `mask=PATH`.
    pub mask: Option<PathBuf>,
}

impl PromptSpec {
    /// Parses one spec (the syntax is [`PromptSpec`]'s).
    pub fn parse(s: &str) -> Result<Self, PromptSpecError> {
        let (mut obj, mut frame, mut bbox, mut mask) = (None, None, None, None);
        let mut points = Vec::new();
        for token in s.split(';').map(str::trim).filter(|t| !t.is_empty()) {
            let bad = |reason: String| PromptSpecError::BadToken {
                token: token.to_string(),
                reason,
            };
            let (key, value) = token.split_once('=').ok_or_else(|| {
                bad("expected KEY=VALUE with KEY obj, frame, box, point or mask".into())
            })?;
            let value = value.trim();
            match key.trim() {
                "obj" => {
                    let id = value
                        .parse::<u32>()
                        .map_err(|_| bad("the object id must be a non-negative integer".into()))?;
                    set_once(&mut obj, id, "obj").map_err(bad)?;
                }
                "frame" => {
                    let f = value.parse::<usize>().map_err(|_| {
                        bad("the frame index must be a non-negative integer".into())
                    })?;
                    set_once(&mut frame, f, "frame").map_err(bad)?;
                }
                "box" => {
                    let b = parse_floats::<4>(value, "box").map_err(bad)?;
                    set_once(&mut bbox, b, "box").map_err(bad)?;
                }
                "point" => points.push(parse_point(value, "point").map_err(bad)?),
                "mask" if value.is_empty() => return Err(bad("mask= needs a PNG file".into())),
                "mask" => set_once(&mut mask, PathBuf::from(value), "mask").map_err(bad)?,
                other => {
                    return Err(bad(format!(
                        "unknown key `{other}` (expected obj, frame, box, point or mask)"
                    )))
                }
            }
        }
        let obj = obj.ok_or(PromptSpecError::MissingObject)?;
        edgetam_tracker::limits::check(
            || format!("the number of points of object {obj}'s prompt (a box counts as two)"),
            points.len() + if bbox.is_some() { 2 } else { 0 },
            edgetam_tracker::limits::MAX_PROMPT_POINTS,
        )?;
        if mask.is_some() && (bbox.is_some() || !points.is_empty()) {
            return Err(PromptSpecError::MaskCombined);
        }
        if mask.is_none() && bbox.is_none() && points.is_empty() {
            return Err(PromptSpecError::NoPrompt { obj });
        }
        Ok(Self {
            obj,
            frame: frame.unwrap_or(0),
            bbox,
            points,
            mask,
        })
    }

    /// Parses specs separated by `|` (blank input: none). An error names the spec's index.
    pub fn parse_list(s: &str) -> Result<Vec<Self>, PromptSpecError> {
        if s.trim().is_empty() {
            return Ok(Vec::new());
        }
        edgetam_tracker::limits::check(
            || "the number of prompts in the list".into(),
            s.split('|').count(),
            MAX_SPECS,
        )?;
        s.split('|')
            .enumerate()
            .map(|(index, spec)| {
                if spec.trim().is_empty() {
                    return Err(PromptSpecError::Empty { index });
                }
                Self::parse(spec).map_err(|e| PromptSpecError::InList {
                    index,
                    spec: spec.trim().to_string(),
                    source: Box::new(e),
                })
            })
            .collect()
    }

    /// The box / points prompt, or `None` for a mask prompt (its file is read by the caller).
    pub fn points_prompt(&self) -> Option<Prompt> {
        self.mask.is_none().then(|| Prompt {
            bbox: self.bbox,
            points: self.points.clone(),
        })
    }
}

/// Takes a `stream=N` token out of a spec: the stream (of several, counted from 0) the prompt
/// is for, and the rest of the spec, for [`PromptSpec::parse`]. Front ends that track several
/// streams (`edgetam track` with several `--input`) route a spec with it; conventionally it
/// comes first (`stream=1;obj=1;frame=0;box=10,20,50,60`), but like every key it can be
/// anywhere. `None` when the spec has none (the caller's default stream, 0 for the CLI).
/// [`PromptSpec::parse`] itself does not know the key, so front ends with one stream keep
/// refusing it.
///
/// ```
/// use edgetam_pipeline::{take_stream, PromptSpec};
/// let (stream, rest) = take_stream("stream=2; obj=1;box=10,20,50,60").unwrap();
/// assert_eq!(stream, Some(2));
/// assert_eq!(PromptSpec::parse(&rest).unwrap().obj, 1);
/// assert_eq!(take_stream("obj=1;box=1,2,3,4").unwrap().0, None);
/// assert!(take_stream("stream=x;obj=1;box=1,2,3,4").is_err());
/// ```
pub fn take_stream(s: &str) -> Result<(Option<usize>, String), PromptSpecError> {
    let (mut stream, mut rest) = (None, Vec::new());
    for token in s.split(';') {
        let trimmed = token.trim();
        match trimmed.split_once('=') {
            Some((key, value)) if key.trim() == "stream" => {
                let bad = |reason: &str| PromptSpecError::BadToken {
                    token: trimmed.to_string(),
                    reason: reason.into(),
                };
                let n = value
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| bad("the stream index must be a non-negative integer"))?;
                set_once(&mut stream, n, "stream").map_err(|e| bad(&e))?;
            }
            _ => rest.push(token),
        }
    }
    Ok((stream, rest.join(";")))
}

/// Most specs in one `|`-separated list: every object a tracker can hold
/// ([`edgetam_tracker::limits::MAX_OBJECTS`]) prompted four times.
pub const MAX_SPECS: usize = 4 * edgetam_tracker::limits::MAX_OBJECTS;

impl FromStr for PromptSpec {
    type Err = PromptSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Sets `slot` unless a value is already there.
fn set_once<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), String> {
    if slot.replace(value).is_some() {
        return Err(format!("{key}= is given twice"));
    }
    Ok(())
}

/// `N` comma-separated finite numbers; `what` names the value in errors.
pub fn parse_floats<const N: usize>(s: &str, what: &str) -> Result<[f32; N], String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() != N {
        return Err(format!(
            "{what} needs {N} comma-separated numbers, got `{s}`"
        ));
    }
    let mut out = [0f32; N];
    for (o, p) in out.iter_mut().zip(&parts) {
        *o = p
            .parse::<f32>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("`{p}` in {what} `{s}` is not a number"))?;
    }
    Ok(out)
}

/// `x,y,label` with label 1 (object) or 0 (background); `what` names the value in errors.
pub fn parse_point(s: &str, what: &str) -> Result<Point, String> {
    let [x, y, l] = parse_floats::<3>(s, what)?;
    let label = if l == 1.0 {
        PointLabel::Positive
    } else if l == 0.0 {
        PointLabel::Negative
    } else {
        return Err(format!(
            "point label must be 1 (object) or 0 (background), got `{l}`"
        ));
    };
    Ok(Point { x, y, label })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let p = PromptSpec::parse("obj=2;frame=1;point=10,20,1; point=5,6,0").unwrap();
        assert_eq!((p.obj, p.frame, p.points.len(), p.bbox), (2, 1, 2, None));
        let p = PromptSpec::parse("obj=1;box=1,2,30,40").unwrap();
        assert_eq!((p.frame, p.bbox), (0, Some([1., 2., 30., 40.])));
        assert!(p.points_prompt().is_some());
        let e = PromptSpec::parse("obj=1;frame=0;bx=1,2,3,4").unwrap_err();
        assert!(matches!(&e, PromptSpecError::BadToken { token, .. } if token == "bx=1,2,3,4"));
        let e = PromptSpec::parse("obj=1;point=1,2,5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("label"), "{e}");
        assert_eq!(
            PromptSpec::parse("frame=0;box=1,2,3,4"),
            Err(PromptSpecError::MissingObject)
        );
        assert_eq!(
            PromptSpec::parse("obj=1;mask=m.png;point=1,2,1"),
            Err(PromptSpecError::MaskCombined)
        );
        assert_eq!(
            PromptSpec::parse("obj=4;frame=0"),
            Err(PromptSpecError::NoPrompt { obj: 4 })
        );
        let e = PromptSpec::parse("obj=1;box=1,2,3,4;box=1,2,3,4").unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
    }

    #[test]
    fn stream_tokens() {
        let (n, rest) = take_stream("stream=1;obj=2;frame=3;box=1,2,3,4").unwrap();
        assert_eq!(n, Some(1));
        let p = PromptSpec::parse(&rest).unwrap();
        assert_eq!((p.obj, p.frame), (2, 3));
        let (n, rest) = take_stream("obj=2; stream = 4 ;point=1,2,1").unwrap();
        assert_eq!((n, PromptSpec::parse(&rest).unwrap().obj), (Some(4), 2));
        assert_eq!(take_stream("obj=1;box=1,2,3,4").unwrap().0, None);
        let e = take_stream("stream=-1;obj=1;box=1,2,3,4").unwrap_err();
        assert!(matches!(&e, PromptSpecError::BadToken { token, .. } if token == "stream=-1"));
        let e = take_stream("stream=1;stream=2;obj=1;box=1,2,3,4").unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
        // The spec parser alone still refuses the key (front ends with one stream).
        let e = PromptSpec::parse("stream=1;obj=1;box=1,2,3,4").unwrap_err();
        assert!(e.to_string().contains("unknown key `stream`"), "{e}");
    }

    #[test]
    fn lists() {
        assert!(PromptSpec::parse_list("  ").unwrap().is_empty());
        let l = PromptSpec::parse_list("obj=1;box=1,2,3,4 | obj=2;point=5,6,1").unwrap();
        assert_eq!(l.iter().map(|s| s.obj).collect::<Vec<_>>(), [1, 2]);
        let e = PromptSpec::parse_list("obj=1;box=1,2,3,4|obj=2;box=1,2").unwrap_err();
        assert!(matches!(e, PromptSpecError::InList { index: 1, .. }));
        assert!(e.to_string().contains("prompt 1 (`obj=2;box=1,2`)"), "{e}");
        assert_eq!(
            PromptSpec::parse_list("obj=1;box=1,2,3,4||"),
            Err(PromptSpecError::Empty { index: 1 })
        );
    }

    #[test]
    fn counts_are_bounded() {
        let points = "obj=1".to_string() + &";point=1,1,1".repeat(65);
        match PromptSpec::parse(&points) {
            Err(PromptSpecError::Limit(l)) => assert_eq!((l.value, l.limit), (65, 64)),
            other => panic!("{other:?}"),
        }
        assert!(PromptSpec::parse(&("obj=1".to_string() + &";point=1,1,1".repeat(64))).is_ok());
        let list = vec!["obj=1;box=1,2,3,4"; MAX_SPECS + 1].join("|");
        match PromptSpec::parse_list(&list) {
            Err(PromptSpecError::Limit(l)) => assert_eq!(l.value, MAX_SPECS as u64 + 1),
            other => panic!("{:?}", other.map(|l| l.len())),
        }
    }
}
