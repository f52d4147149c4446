//! What a user says about an object on a frame: a box and/or points ([`crate::Prompt`]) or a
//! mask.

use crate::error::{Error, Result};
use crate::model::prompt::Prompt;

/// A binary mask (0 or 1 per pixel), row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

impl Mask {
    /// A mask from row-major values; any nonzero value counts as inside.
    pub fn new(width: usize, height: usize, data: Vec<u8>) -> Result<Self> {
        crate::limits::check_image_size("mask", width, height)?;
        if width == 0 || height == 0 || data.len() != width * height {
            return Err(Error::InvalidPrompt(format!(
                "a {width}x{height} mask needs {} values, got {}",
                width * height,
                data.len()
            )));
        }
        Ok(Self {
            width,
            height,
            data: data.into_iter().map(|v| u8::from(v != 0)).collect(),
        })
    }

    /// Number of pixels inside.
    pub fn area(&self) -> usize {
        self.data.iter().filter(|&&v| v != 0).count()
    }
}

/// What the user says about one object on one frame.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectPrompt {
    /// A box and/or labelled points (frame pixels).
    Points(Prompt),
    /// A mask at the frame's resolution; it is taken as the object's mask on that frame.
    Mask(Mask),
}

impl From<Prompt> for ObjectPrompt {
    fn from(p: Prompt) -> Self {
        ObjectPrompt::Points(p)
    }
}

impl From<Mask> for ObjectPrompt {
    fn from(m: Mask) -> Self {
        ObjectPrompt::Mask(m)
    }
}

impl ObjectPrompt {
    pub(crate) fn validate(&self, width: usize, height: usize) -> Result<()> {
        match self {
            ObjectPrompt::Points(p) => p.validate(width, height),
            ObjectPrompt::Mask(m) if m.width != width || m.height != height => {
                Err(Error::InvalidPrompt(format!(
                    "mask prompt is {}x{} but the frame is {width}x{height}",
                    m.width, m.height
                )))
            }
            ObjectPrompt::Mask(_) => Ok(()),
        }
    }
}
