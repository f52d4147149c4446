//! Python prompt arguments (box tuples, point lists, mask arrays) as the tracker's prompts;
//! shared by `Tracker`, `Pipeline` and `Model.segment`.

use edgetam_tracker::{Mask, ObjectPrompt, Point, PointLabel, Prompt};
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::errors::{error, type_error, Kind};
use crate::frame::type_name;

/// An object id from Python: 0 to 2^32 - 1, else `InvalidPromptError` (a `ValueError`, where
/// pyo3's own conversion would raise `OverflowError`).
pub(crate) fn object_id(py: Python<'_>, obj: i64) -> PyResult<u32> {
    u32::try_from(obj).map_err(|_| {
        error(
            py,
            Kind::Prompt,
            format!("object id {obj} is out of range: ids are 0 to {}", u32::MAX),
        )
    })
}

/// A frame index from Python: >= 0, else `InvalidPromptError`.
pub(crate) fn frame_index(py: Python<'_>, frame: i64) -> PyResult<u64> {
    u64::try_from(frame)
        .map_err(|_| error(py, Kind::Prompt, format!("frame index {frame} is negative")))
}

/// A box `(x0, y0, x1, y1)` in frame pixels.
pub(crate) type BoxArg = (f32, f32, f32, f32);

/// A points (and optional box) prompt from `[(x, y), (x, y, label), ...]`; label 1 (the
/// default) marks the object, 0 the background.
pub(crate) fn points_prompt(
    py: Python<'_>,
    points: Option<&Bound<'_, PyAny>>,
    bbox: Option<BoxArg>,
) -> PyResult<Prompt> {
    let mut prompt = Prompt {
        bbox: bbox.map(|(x0, y0, x1, y1)| [x0, y0, x1, y1]),
        points: Vec::new(),
    };
    if let Some(points) = points {
        for item in points.try_iter()? {
            prompt.points.push(point(py, &item?)?);
        }
    }
    if prompt.bbox.is_none() && prompt.points.is_empty() {
        return Err(error(
            py,
            Kind::Prompt,
            "a prompt needs a box or at least one point",
        ));
    }
    Ok(prompt)
}

fn point(py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<Point> {
    let (x, y, label) = if let Ok((x, y, label)) = item.extract::<(f32, f32, i64)>() {
        (x, y, label)
    } else if let Ok((x, y)) = item.extract::<(f32, f32)>() {
        (x, y, 1)
    } else {
        return Err(error(
            py,
            Kind::Prompt,
            format!(
                "a point must be (x, y) or (x, y, label), got {}",
                item.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        ));
    };
    let label = match label {
        1 => PointLabel::Positive,
        0 => PointLabel::Negative,
        other => {
            return Err(error(
                py,
                Kind::Prompt,
                format!("a point's label must be 1 (object) or 0 (background), got {other}"),
            ))
        }
    };
    Ok(Point { x, y, label })
}

/// A mask prompt from a 2-D bool or uint8 array the frame's size (nonzero = inside); copied.
pub(crate) fn mask_prompt(py: Python<'_>, mask: &Bound<'_, PyAny>) -> PyResult<Mask> {
    let untyped = mask.cast::<PyUntypedArray>().map_err(|_| {
        type_error(format!(
            "a mask must be a 2-D numpy.ndarray of bool or uint8, got {}",
            type_name(mask)
        ))
    })?;
    let bad = |msg: String| error(py, Kind::Prompt, msg);
    let &[height, width] = untyped.shape() else {
        return Err(bad(format!(
            "a mask must be 2-D (H, W), got shape {:?}",
            untyped.shape()
        )));
    };
    let data: Vec<u8> = if let Ok(a) = mask.cast::<PyArrayDyn<bool>>() {
        let a = a.try_readonly().map_err(|e| bad(e.to_string()))?;
        // Any strides: the view iterates in row-major order.
        a.as_array().iter().map(|&v| u8::from(v)).collect()
    } else if let Ok(a) = mask.cast::<PyArrayDyn<u8>>() {
        let a = a.try_readonly().map_err(|e| bad(e.to_string()))?;
        a.as_array().iter().copied().collect()
    } else {
        return Err(bad(format!(
            "a mask must be bool or uint8, got dtype {}",
            untyped.dtype()
        )));
    };
    Mask::new(width, height, data).map_err(|e| bad(e.to_string()))
}

/// `len` numbers from any sequence (a tuple, a list, a numpy array): what SAM 2's keyword
/// prompts are given as.
fn numbers(py: Python<'_>, item: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<f64>> {
    let bad = || {
        error(
            py,
            Kind::Prompt,
            format!(
                "{what} must be a sequence of numbers, got {}",
                item.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        )
    };
    let mut out = Vec::new();
    for v in item.try_iter().map_err(|_| bad())? {
        out.push(v?.extract::<f64>().map_err(|_| bad())?);
    }
    Ok(out)
}

/// A prompt from SAM 2's keywords (`add_new_points_or_box(points=, labels=, box=)`,
/// `add_new_mask(mask=)`): `points` an (N, 2) array or sequence of (x, y) pixels, `labels` N
/// ints (1 object, 0 background; all 1 when omitted), `box` 4 numbers `x0, y0, x1, y1`
/// (alone or with points); or `mask` alone (2-D bool/uint8, the frame's size).
pub(crate) fn keyword_prompt(
    py: Python<'_>,
    points: Option<&Bound<'_, PyAny>>,
    labels: Option<&Bound<'_, PyAny>>,
    bbox: Option<&Bound<'_, PyAny>>,
    mask: Option<&Bound<'_, PyAny>>,
) -> PyResult<ObjectPrompt> {
    let bad = |msg: String| error(py, Kind::Prompt, msg);
    if let Some(mask) = mask {
        if points.is_some() || labels.is_some() || bbox.is_some() {
            return Err(bad(
                "mask= is a prompt of its own: give it without points=, labels= or box= \
                 (as SAM 2's add_new_mask)"
                    .into(),
            ));
        }
        return Ok(mask_prompt(py, mask)?.into());
    }
    if labels.is_some() && points.is_none() {
        return Err(bad("labels= needs points= (one label per point)".into()));
    }
    let bbox = match bbox {
        None => None,
        Some(b) => match numbers(py, b, "box")?[..] {
            [x0, y0, x1, y1] => Some([x0 as f32, y0 as f32, x1 as f32, y1 as f32]),
            ref other => {
                return Err(bad(format!(
                    "box must be 4 numbers (x0, y0, x1, y1), got {}",
                    other.len()
                )))
            }
        },
    };
    let mut coords = Vec::new();
    if let Some(points) = points {
        for (i, p) in points.try_iter()?.enumerate() {
            match numbers(py, &p?, "each point")?[..] {
                [x, y] => coords.push((x as f32, y as f32)),
                ref other => {
                    return Err(bad(format!(
                        "point {i} has {} numbers: points= is (N, 2), (x, y) per point",
                        other.len()
                    )))
                }
            }
        }
    }
    let labels: Vec<i64> = match labels {
        None => vec![1; coords.len()],
        Some(l) => {
            let l = numbers(py, l, "labels")?;
            if l.iter().any(|v| v.fract() != 0.0) {
                return Err(bad(
                    "labels must be integers (1 object, 0 background)".into()
                ));
            }
            l.into_iter().map(|v| v as i64).collect()
        }
    };
    if labels.len() != coords.len() {
        return Err(bad(format!(
            "{} point(s) but {} label(s): give one label per point",
            coords.len(),
            labels.len()
        )));
    }
    let mut prompt = Prompt {
        bbox,
        points: Vec::with_capacity(coords.len()),
    };
    for ((x, y), label) in coords.into_iter().zip(labels) {
        let label = match label {
            1 => PointLabel::Positive,
            0 => PointLabel::Negative,
            other => {
                return Err(bad(format!(
                    "a point's label must be 1 (object) or 0 (background), got {other}"
                )))
            }
        };
        prompt.points.push(Point { x, y, label });
    }
    if prompt.bbox.is_none() && prompt.points.is_empty() {
        return Err(bad(
            "a prompt needs points=, box= or mask= (SAM 2's keywords)".into(),
        ));
    }
    Ok(prompt.into())
}
