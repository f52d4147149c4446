//! What the CPU preprocessing (`preprocess.rs`) and its CUDA kernels
//! (`kernels/cuda/preprocess.rs`) share: torch's antialiased bilinear taps, in int16 fixed
//! point, and the ImageNet normalisation constants. Below both, so neither imports the other.

/// ImageNet mean and std as f32, as transformers stores them (`IMAGENET_DEFAULT_*`).
pub(crate) const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub(crate) const STD: [f32; 3] = [0.229, 0.224, 0.225];

/// One axis of torch's antialiased bilinear resample: per output sample, the first source index
/// and the int16 taps (stored as i32), all scaled by `2^precision`.
pub(crate) struct Axis {
    pub(crate) first: Vec<usize>,
    pub(crate) taps: Vec<Vec<i32>>,
    pub(crate) precision: u32,
}

/// `HelperInterpBase::_compute_index_ranges_weights` (antialias, triangle filter) followed by
/// `_compute_index_ranges_int16_weights` from ATen's `UpSampleKernel.cpp`, operation for operation:
/// weights in f64, normalized per output sample, then rounded to int16 at the largest precision
/// for which the axis's largest weight still fits.
pub(crate) fn axis(input: usize, output: usize) -> Axis {
    // align_corners=False and no explicit scale factor: scale = in / out.
    let scale = input as f64 / output as f64;
    // interp_size = 2 for bilinear.
    let support = if scale >= 1.0 { scale } else { 1.0 };
    let max_taps = support.ceil() as i64 * 2 + 1;
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let filter = |x: f64| {
        let x = x.abs();
        if x < 1.0 {
            1.0 - x
        } else {
            0.0
        }
    };
    let mut first = Vec::with_capacity(output);
    let mut real = Vec::with_capacity(output);
    let mut wt_max = 0.0f64;
    for i in 0..output {
        let center = scale * (i as f64 + 0.5);
        // `static_cast<int64_t>` truncates toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xsize = (((center + support + 0.5) as i64).min(input as i64) - xmin).clamp(0, max_taps);
        let mut w: Vec<f64> = (0..xsize)
            .map(|j| filter((j as f64 + xmin as f64 - center + 0.5) * invscale))
            .collect();
        let mut total = 0.0f64;
        for v in &w {
            total += v;
        }
        if total != 0.0 {
            for v in w.iter_mut() {
                *v /= total;
                wt_max = wt_max.max(*v);
            }
        }
        first.push(xmin as usize);
        real.push(w);
    }
    let mut precision = 0u32;
    while precision < 22 {
        let next = (0.5 + wt_max * (1i64 << (precision + 1)) as f64) as i64;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    let unit = (1i64 << precision) as f64;
    let taps = real
        .into_iter()
        .map(|w| {
            w.into_iter()
                .map(|v| {
                    let v = v * unit;
                    // Rounded half away from zero, then truncated to int16 as torch does.
                    (if v < 0.0 {
                        (-0.5 + v) as i32
                    } else {
                        (0.5 + v) as i32
                    }) as i16 as i32
                })
                .collect()
        })
        .collect();
    Axis {
        first,
        taps,
        precision,
    }
}

impl Axis {
    /// The accumulator's start: half an LSB, so the final shift rounds.
    #[inline]
    pub(crate) fn round(&self) -> i32 {
        if self.precision > 0 {
            1 << (self.precision - 1)
        } else {
            0
        }
    }

    /// Arithmetic shift and clamp to u8 (the AVX kernel saturates through `packs_epi32` /
    /// `packus_epi16`).
    #[inline]
    pub(crate) fn finish(&self, acc: i32) -> u8 {
        (acc >> self.precision).clamp(0, 255) as u8
    }
}
