//! What several examples read from their command line the same way: the model (a model folder,
//! or `--random` for random weights) and a box prompt. Each example takes it with `mod common;`.
#![allow(dead_code)]

use anyhow::{bail, Result};
use candle_core::Device;
use edgetam::tracker::{EdgeTam, EdgeTamConfig, Prompt};

/// The model a `MODEL_DIR | --random` argument names: the checkpoint in the folder, or
/// deterministic random weights in the released config (the masks are meaningless, the timings
/// real: for trying the examples without a checkpoint).
pub fn load_model(arg: &str, device: &Device) -> Result<EdgeTam> {
    if arg == "--random" {
        eprintln!("random weights: masks are meaningless, timings are real");
        Ok(EdgeTam::random(EdgeTamConfig::default(), 0, device)?)
    } else {
        Ok(EdgeTam::load(arg, device)?)
    }
}

/// The box prompt of an `x0,y0,x1,y1` argument (pixels of the frame).
pub fn box_prompt(arg: &str) -> Result<Prompt> {
    let b: Vec<f32> = arg.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let [x0, y0, x1, y1] = b[..] else {
        bail!("the box is x0,y0,x1,y1, got {arg}");
    };
    Ok(Prompt::from_box(x0, y0, x1, y1))
}
