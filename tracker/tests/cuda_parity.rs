//! The CUDA path against the CPU path and the reference fixtures (build with `--features cuda`;
//! on a machine without a GPU every test prints why it skipped and passes).
//!
//! * Device preprocessing (conversion + resize + normalisation kernels) against the CPU
//!   preprocessing, for every pixel layout and a few sizes: within 1e-5 (it is bit-identical by
//!   construction: same integer taps, same two IEEE f32 operations).
//! * The streaming sequences on CUDA against the transformers goldens, with the same checks and
//!   tolerances as `sequence_parity.rs` on the CPU (fp32, no TF32).
#![cfg(feature = "cuda")]

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::{Device, Tensor};
use edgetam_tracker::checks::sequence::{run, Mode, SequenceFixture};
use edgetam_tracker::internals::{preprocess_frame, preprocess_host};
use edgetam_tracker::{parse_device, Frame, PixelFormat, Weights};

fn gpu() -> Option<Device> {
    match parse_device("cuda:0") {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: no usable CUDA device ({e})");
            None
        }
    }
}

/// The fixtures: `$EDGETAM_FIXTURES` when set (a test binary carried to another machine, see
/// scripts/gpu-check.sh), else the repository's.
fn fixtures() -> PathBuf {
    std::env::var_os("EDGETAM_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures"))
}

/// A deterministic frame of `layout` (`w` x `h`, row padding `pad` bytes).
fn frame_bytes(layout: PixelFormat, w: usize, h: usize, pad: usize) -> (Vec<u8>, usize) {
    let mut state = 0x2545_f491_u32 ^ (w * 31 + h) as u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state >> 24) as u8
    };
    let (stride, len) = match layout.bytes_per_pixel() {
        Some(bpp) => (w * bpp + pad, (w * bpp + pad) * h),
        None => {
            // Even stride so I420's chroma stride is whole.
            let s = w + pad + (pad % 2);
            (s, s * h + s * (h / 2))
        }
    };
    ((0..len).map(|_| next()).collect(), stride)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a = a.to_device(&Device::Cpu).and_then(|t| t.flatten_all());
    let b = b.to_device(&Device::Cpu).and_then(|t| t.flatten_all());
    let (a, b) = (
        a.and_then(|t| t.to_vec1::<f32>()).expect("a"),
        b.and_then(|t| t.to_vec1::<f32>()).expect("b"),
    );
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn device_preprocessing_matches_cpu() {
    let Some(dev) = gpu() else { return };
    let layouts = [
        PixelFormat::Rgb8,
        PixelFormat::Rgba8,
        PixelFormat::Bgr8,
        PixelFormat::Bgra8,
        PixelFormat::Gray8,
        PixelFormat::Nv12,
        PixelFormat::I420,
    ];
    // Down, up, one side unchanged (its pass is skipped), both unchanged, odd sizes for the
    // packed layouts.
    let sizes = [
        (1920, 1080, 1024),
        (640, 480, 1024),
        (256, 200, 256),
        (256, 256, 256),
        (300, 256, 256),
        (33, 17, 64),
    ];
    for layout in layouts {
        for &(w, h, s) in &sizes {
            if layout.bytes_per_pixel().is_none() && (w % 2 != 0 || h % 2 != 0) {
                continue;
            }
            for pad in [0, 6] {
                let (data, stride) = frame_bytes(layout, w, h, pad);
                let frame = Frame::new(&data[..], w, h, layout).with_stride(stride);
                let rgb = frame.to_rgb8().expect("host conversion");
                let cpu = preprocess_host(&rgb, w, h, s, &Device::Cpu).expect("cpu");
                let gpu = preprocess_frame(&frame, s, &dev).expect("gpu");
                assert_eq!(gpu.dims(), &[1, 3, s, s]);
                let d = max_abs_diff(&gpu, &cpu);
                assert!(
                    d <= 1e-5,
                    "{layout:?} {w}x{h} (stride {stride}) -> {s}: max |gpu - cpu| = {d}"
                );
                // The same planes handed over apart (as GStreamer maps them): one upload of
                // the planes back to back.
                if layout.planes() > 1 {
                    let planes: Vec<(Vec<u8>, usize)> = (0..layout.planes())
                        .map(|i| {
                            let p = frame.plane(i).expect("plane");
                            (p.data.to_vec(), p.stride)
                        })
                        .collect();
                    let apart = Frame::from_planes(w, h, layout, planes);
                    let gpu = preprocess_frame(&apart, s, &dev).expect("gpu, planes apart");
                    let d = max_abs_diff(&gpu, &cpu);
                    assert!(d <= 1e-5, "{layout:?} planes apart {w}x{h} -> {s}: {d}");
                }
            }
        }
    }
}

#[test]
fn device_preprocessing_rejects_bad_frames() {
    let Some(dev) = gpu() else { return };
    let short = Frame::rgb8(&[0u8; 11][..], 2, 2);
    assert!(preprocess_frame(&short, 64, &dev).is_err());
}

fn check_sequence(dir: &str, mode: Mode) {
    let Some(dev) = gpu() else { return };
    let fx = SequenceFixture::load(fixtures().join(dir)).expect("sequence fixture");
    let base = Weights::load(fixtures().join("model/model.safetensors"), &dev).expect("weights");
    let model = Arc::new(fx.model(&base, &dev).expect("model"));
    let reports = run(&fx, model, mode).expect("replay");
    assert!(reports.len() > 10, "too few checks: {}", reports.len());
    for r in &reports {
        eprintln!("{}", r.line());
    }
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed)
        .map(|r| r.line())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} checks failed on CUDA:\n{}",
        failed.len(),
        reports.len(),
        failed.join("\n")
    );
}

#[test]
fn cuda_sequence_256_free_running() {
    check_sequence("sequence_256", Mode::FreeRunning);
}

#[test]
fn cuda_sequence_256_forced_and_stages() {
    check_sequence("sequence_256", Mode::Forced);
}

#[test]
fn cuda_sequence_256_transformers_defaults_free_running() {
    check_sequence("sequence_256_defaults", Mode::FreeRunning);
}

#[test]
fn cuda_sequence_1024_free_running() {
    check_sequence("sequence_1024", Mode::FreeRunning);
}

#[test]
fn cuda_sequence_1024_forced() {
    check_sequence("sequence_1024", Mode::Forced);
}
