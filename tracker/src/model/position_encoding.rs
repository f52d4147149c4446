//! The sine position encoding of the FPN levels (`EdgeTamSinePositionEmbedding`, DETR style).
//!
//! It depends only on the level's size, so callers compute it once per size and keep it
//! (the image encoder does so at construction). Values follow the reference's f32 operation
//! order: `(i+1) / (n + 1e-6) * 2pi`, divided by `10000^(2*floor(k/2)/F)`, then sin/cos.

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};

/// Normalized sine encoding `[1, channels, height, width]`: the first half of the channels
/// encodes y, the second half x, each alternating sin/cos over frequencies.
pub fn sine_position_embedding(
    channels: usize,
    height: usize,
    width: usize,
    device: &Device,
) -> Result<Tensor> {
    if channels == 0 || !channels.is_multiple_of(4) {
        return Err(Error::InvalidImage(format!(
            "sine position encoding needs a positive multiple of 4 channels, got {channels}"
        )));
    }
    if height == 0 || width == 0 {
        return Err(Error::InvalidImage(format!(
            "sine position encoding of an empty {height}x{width} grid"
        )));
    }
    let feats = channels / 2;
    let scale = 2.0 * std::f32::consts::PI;
    let eps = 1e-6f32;
    let dim_t: Vec<f32> = (0..feats)
        .map(|k| {
            let e = 2.0 * ((k / 2) as f32) / feats as f32;
            10000f32.powf(e)
        })
        .collect();
    // One axis: `[feats, n]` values for positions 1..=n.
    let axis = |n: usize| -> Vec<f32> {
        let denom = n as f32 + eps;
        let mut out = vec![0f32; feats * n];
        for i in 0..n {
            let p = (i + 1) as f32 / denom * scale;
            for (k, d) in dim_t.iter().enumerate() {
                let v = p / d;
                out[k * n + i] = if k % 2 == 0 { v.sin() } else { v.cos() };
            }
        }
        out
    };
    let ys = axis(height);
    let xs = axis(width);
    let plane = height * width;
    let mut data = vec![0f32; channels * plane];
    for k in 0..feats {
        let (y_plane, x_plane) = data[k * plane..].split_at_mut(feats * plane);
        for y in 0..height {
            let vy = ys[k * height + y];
            let vx = &xs[k * width..(k + 1) * width];
            y_plane[y * width..(y + 1) * width].fill(vy);
            x_plane[y * width..(y + 1) * width].copy_from_slice(vx);
        }
    }
    Ok(Tensor::from_vec(
        data,
        (1, channels, height, width),
        device,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_odd_channels_and_empty_grid() {
        assert!(sine_position_embedding(6, 4, 4, &Device::Cpu).is_err());
        assert!(sine_position_embedding(8, 0, 4, &Device::Cpu).is_err());
    }

    #[test]
    fn first_channels_are_sin_cos_of_y() -> Result<()> {
        let pe = sine_position_embedding(8, 2, 3, &Device::Cpu)?;
        let v = pe.flatten_all()?.to_vec1::<f32>()?;
        let y1 = 1.0f32 / (2.0 + 1e-6) * 2.0 * std::f32::consts::PI;
        assert!((v[0] - y1.sin()).abs() < 1e-6);
        assert!((v[6] - y1.cos()).abs() < 1e-6);
        Ok(())
    }
}
