//! Image preprocessing, bit-exact with transformers' `Sam2ImageProcessor` (torchvision backend).
//!
//! The reference resizes the uint8 RGB frame to `S x S` (aspect ratio not kept) with torchvision's
//! bilinear, `antialias=True`, **on uint8**: torch's fixed-point separable kernel (PIL-SIMD
//! derived), width pass then height pass, each rounding back to uint8. A float bilinear rounded
//! once differs from it by one level on ~20% of pixels, which shifts every later stage, so it is
//! reproduced here integer for integer. Then `(v - 255*mean) / (255*std)` in f32, in that order.

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};
use crate::frame::taps::{axis, MEAN, STD};
use crate::frame::Frame;

/// Checks that `rgb` holds a `width` x `height` RGB8 image.
pub fn check_frame(rgb: &[u8], width: usize, height: usize) -> Result<()> {
    check_image(rgb, width, height)
}

fn check_image(rgb: &[u8], width: usize, height: usize) -> Result<()> {
    if width == 0 || height == 0 {
        return Err(Error::InvalidImage(format!(
            "image is {width}x{height}: both sides must be at least one pixel"
        )));
    }
    crate::limits::check_image_size("image", width, height)?;
    let expected = width
        .checked_mul(height)
        .and_then(|n| n.checked_mul(3))
        .ok_or_else(|| Error::InvalidImage(format!("image {width}x{height} is too large")))?;
    if rgb.len() != expected {
        return Err(Error::InvalidImage(format!(
            "a {width}x{height} RGB image needs {expected} bytes (row-major, 3 per pixel), got {}",
            rgb.len()
        )));
    }
    Ok(())
}

/// Resizes a packed row-major RGB image (`height x width x 3`) to `out_w x out_h` exactly as
/// `torchvision.transforms.v2.functional.resize(uint8, bilinear, antialias=True)` does on CPU.
pub fn resize_rgb_u8(
    rgb: &[u8],
    width: usize,
    height: usize,
    out_w: usize,
    out_h: usize,
) -> Result<Vec<u8>> {
    check_image(rgb, width, height)?;
    if out_w == 0 || out_h == 0 {
        return Err(Error::InvalidImage(format!(
            "cannot resize to {out_w}x{out_h}: both sides must be at least one pixel"
        )));
    }
    // Torch skips a pass whose size does not change (and so its rounding).
    let horizontal = if out_w != width {
        let ax = axis(width, out_w);
        let mut buf = vec![0u8; height * out_w * 3];
        par_rows(&mut buf, out_w * 3, |y, out| {
            let row = &rgb[y * width * 3..(y + 1) * width * 3];
            for (x, (first, taps)) in ax.first.iter().zip(&ax.taps).enumerate() {
                let src = &row[first * 3..];
                let mut acc = [ax.round(); 3];
                for (k, &w) in taps.iter().enumerate() {
                    for (a, &v) in acc.iter_mut().zip(&src[k * 3..k * 3 + 3]) {
                        *a += i32::from(v) * w;
                    }
                }
                for (o, a) in out[x * 3..x * 3 + 3].iter_mut().zip(acc) {
                    *o = ax.finish(a);
                }
            }
        });
        buf
    } else {
        rgb.to_vec()
    };
    if out_h == height {
        return Ok(horizontal);
    }
    let ax = axis(height, out_h);
    let stride = out_w * 3;
    let mut out = vec![0u8; out_h * stride];
    par_rows(&mut out, stride, |y, dst| {
        // Tap by tap over the whole row (the same integer sums as one dot product per
        // sample, in a loop order that vectorizes).
        let mut acc = vec![ax.round(); stride];
        for (k, &w) in ax.taps[y].iter().enumerate() {
            let src = &horizontal[(ax.first[y] + k) * stride..][..stride];
            for (a, &v) in acc.iter_mut().zip(src) {
                *a += i32::from(v) * w;
            }
        }
        for (d, a) in dst.iter_mut().zip(acc) {
            *d = ax.finish(a);
        }
    });
    Ok(out)
}

/// Runs `f(row_index, row)` over the `row_len`-long rows of `buf`, split over the compute
/// workers (the caller's rayon pool, or its team inside a public call: kept threads, no thread
/// start per frame, and the encoder-ahead stage's own pool when it runs there).
fn par_rows<T: Send>(buf: &mut [T], row_len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let rows = buf.len() / row_len.max(1);
    let threads = crate::kernels::threads();
    let per = rows.div_ceil(threads).max(1);
    let tasks: Vec<(usize, &mut [T])> = buf.chunks_mut(per * row_len.max(1)).enumerate().collect();
    crate::kernels::run_tasks_with(
        tasks,
        threads,
        || (),
        |_, (t, chunk)| {
            for (k, row) in chunk.chunks_mut(row_len.max(1)).enumerate() {
                f(t * per + k, row);
            }
        },
    );
}

/// The model input for one frame in any [`crate::PixelFormat`]: `[1, 3, S, S]` f32 on `device`.
///
/// On CUDA only the frame's bytes go to the device; conversion, resize and normalisation run
/// there (`cuda::preprocess`), bit-identical to the CPU path. Elsewhere the frame is converted to
/// RGB8 on the host (no copy when it already is) and goes through [`preprocess`].
pub fn preprocess_frame(frame: &Frame, image_size: usize, device: &Device) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        return crate::kernels::cuda::preprocess::preprocess(frame, image_size, device);
    }
    let rgb = frame.rgb8_view()?;
    preprocess_host(&rgb, frame.width(), frame.height(), image_size, device)
}

/// The model input for one RGB frame: resized to `image_size` square and normalized,
/// `[1, 3, S, S]` f32 on `device` (on CUDA through the device kernels, see
/// [`preprocess_frame`]).
pub fn preprocess(
    rgb: &[u8],
    width: usize,
    height: usize,
    image_size: usize,
    device: &Device,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        return preprocess_frame(&Frame::rgb8(rgb, width, height), image_size, device);
    }
    preprocess_host(rgb, width, height, image_size, device)
}

/// [`preprocess`] on the host (the tensor is then copied to `device`).
pub fn preprocess_host(
    rgb: &[u8],
    width: usize,
    height: usize,
    image_size: usize,
    device: &Device,
) -> Result<Tensor> {
    let s = image_size;
    let resized = resize_rgb_u8(rgb, width, height, s, s)?;
    // transformers fuses rescale into normalize: mean and std are f32 tensors times 255 (in f32),
    // then `sub_` and `div_` in f32. A u8 input has only 256 values per channel, so the results
    // are tabulated once (same f32 operations, so bit-identical).
    let mut table = [[0f32; 256]; 3];
    for (c, t) in table.iter_mut().enumerate() {
        let (mean, std) = (MEAN[c] * 255.0, STD[c] * 255.0);
        for (v, out) in t.iter_mut().enumerate() {
            *out = (v as f32 - mean) / std;
        }
    }
    let plane = s * s;
    let mut data = vec![0f32; 3 * plane];
    // One "row" = channel `c`'s plane row `y`: rows `0..S` are channel 0, and so on.
    par_rows(&mut data, s, |r, out| {
        let (c, y) = (r / s, r % s);
        let src = &resized[y * s * 3..(y + 1) * s * 3];
        for (o, px) in out.iter_mut().zip(src.chunks_exact(3)) {
            *o = table[c][usize::from(px[c])];
        }
    });
    if !device.is_cpu() {
        crate::instrument::transfer::record_upload(data.len() * 4);
    }
    Ok(Tensor::from_vec(data, (1, 3, s, s), device)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(
            resize_rgb_u8(&[], 0, 4, 8, 8),
            Err(Error::InvalidImage(_))
        ));
        assert!(matches!(
            resize_rgb_u8(&[0; 11], 2, 2, 8, 8),
            Err(Error::InvalidImage(_))
        ));
        assert!(matches!(
            resize_rgb_u8(&[0; 12], 2, 2, 0, 8),
            Err(Error::InvalidImage(_))
        ));
        assert!(matches!(
            preprocess(&[0; 12], 2, 3, 64, &Device::Cpu),
            Err(Error::InvalidImage(_))
        ));
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for (i, o) in [(300, 256), (200, 256), (480, 1024), (7, 3), (1, 5)] {
            let ax = axis(i, o);
            for taps in &ax.taps {
                let sum: i32 = taps.iter().sum();
                let unit = 1i32 << ax.precision;
                assert!(
                    (sum - unit).abs() <= taps.len() as i32,
                    "{i}->{o}: {sum} vs {unit}"
                );
            }
        }
    }

    #[test]
    fn constant_image_stays_constant() -> Result<()> {
        let img = vec![77u8; 13 * 9 * 3];
        let out = resize_rgb_u8(&img, 13, 9, 32, 5)?;
        assert!(out.iter().all(|&v| v == 77));
        Ok(())
    }
}
