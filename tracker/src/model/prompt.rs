//! Point and box prompts in frame pixels, and their conversion to the prompt encoder's inputs
//! as the reference processor makes them.

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};

/// A point prompt's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointLabel {
    /// The point lies on the object (label 1).
    Positive,
    /// The point lies on the background (label 0).
    Negative,
}

/// A point in original-image pixel coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub x: f32,
    pub y: f32,
    pub label: PointLabel,
}

/// A prompt for one object: an optional box and any number of labelled points.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prompt {
    /// `[x0, y0, x1, y1]` in original-image pixels.
    pub bbox: Option<[f32; 4]>,
    pub points: Vec<Point>,
}

impl Prompt {
    /// A box prompt.
    pub fn from_box(x0: f32, y0: f32, x1: f32, y1: f32) -> Self {
        Self {
            bbox: Some([x0, y0, x1, y1]),
            points: Vec::new(),
        }
    }

    /// A points prompt.
    pub fn from_points(points: Vec<Point>) -> Self {
        Self { bbox: None, points }
    }

    /// Number of prompt points as the model counts them (a box is two corner points).
    pub fn num_points(&self) -> usize {
        self.points.len() + if self.bbox.is_some() { 2 } else { 0 }
    }

    /// Checks the prompt against an image of `width` x `height`.
    pub fn validate(&self, width: usize, height: usize) -> Result<()> {
        let (w, h) = (width as f32, height as f32);
        let inside = |x: f32, y: f32| {
            x.is_finite() && y.is_finite() && (0.0..=w).contains(&x) && (0.0..=h).contains(&y)
        };
        if self.bbox.is_none() && self.points.is_empty() {
            return Err(Error::InvalidPrompt(
                "a prompt needs a box or at least one point".into(),
            ));
        }
        crate::limits::check(
            || "the number of prompt points (a box counts as two)".into(),
            self.num_points(),
            crate::limits::MAX_PROMPT_POINTS,
        )?;
        if let Some([x0, y0, x1, y1]) = self.bbox {
            if !inside(x0, y0) || !inside(x1, y1) {
                return Err(Error::InvalidPrompt(format!(
                    "box {x0},{y0},{x1},{y1} lies outside the {width}x{height} image"
                )));
            }
            if x1 <= x0 || y1 <= y0 {
                return Err(Error::InvalidPrompt(format!(
                    "box {x0},{y0},{x1},{y1} is empty: x1 must exceed x0 and y1 must exceed y0"
                )));
            }
        }
        for p in &self.points {
            if !inside(p.x, p.y) {
                return Err(Error::InvalidPrompt(format!(
                    "point {},{} lies outside the {width}x{height} image",
                    p.x, p.y
                )));
            }
        }
        Ok(())
    }

    /// Model-input coordinates `[1,1,N,2]` and labels `[1,1,N]` as the reference processor makes
    /// them: scaled by `S/W`, `S/H` in f32, box corners first with labels 2 and 3.
    pub fn to_model_inputs(
        &self,
        width: usize,
        height: usize,
        image_size: usize,
        device: &Device,
    ) -> Result<(Tensor, Tensor)> {
        self.validate(width, height)?;
        // transformers multiplies a float32 tensor by the Python float `new / old`; torch casts
        // that scalar to f32 first, so do the same to be bit-exact.
        let sx = (image_size as f64 / width as f64) as f32;
        let sy = (image_size as f64 / height as f64) as f32;
        let mut coords = Vec::with_capacity(2 * self.num_points());
        let mut labels = Vec::with_capacity(self.num_points());
        if let Some([x0, y0, x1, y1]) = self.bbox {
            coords.extend_from_slice(&[x0 * sx, y0 * sy, x1 * sx, y1 * sy]);
            labels.extend_from_slice(&[2i64, 3]);
        }
        for p in &self.points {
            coords.extend_from_slice(&[p.x * sx, p.y * sy]);
            labels.push(match p.label {
                PointLabel::Positive => 1,
                PointLabel::Negative => 0,
            });
        }
        let n = labels.len();
        let coords = Tensor::from_vec(coords, (1, 1, n, 2), device)?;
        let labels = Tensor::from_vec(labels, (1, 1, n), device)?;
        Ok((coords, labels))
    }
}
