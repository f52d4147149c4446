//! Frames as callers hand them over, every pixel format, any sizes, strides and planes (in one
//! buffer or apart): `validate` refuses what does not fit; a frame it accepts converts to RGB8
//! of the right size, converts the same from its planes apart as from one buffer, and
//! preprocesses to a model input. Sizes are bounded by `edgetam_tracker::limits` first.
#![no_main]

use arbitrary::Arbitrary;
use candle_core::Device;
use edgetam_tracker::internals::preprocess_frame;
use edgetam_tracker::{Frame, PixelFormat};
use libfuzzer_sys::fuzz_target;

const FORMATS: [PixelFormat; 7] = [
    PixelFormat::Rgb8,
    PixelFormat::Rgba8,
    PixelFormat::Bgr8,
    PixelFormat::Bgra8,
    PixelFormat::Gray8,
    PixelFormat::Nv12,
    PixelFormat::I420,
];

#[derive(Arbitrary, Debug)]
enum Size {
    Small(u8, u8),
    Any(u32, u32),
}

#[derive(Arbitrary, Debug)]
enum Layout {
    /// One buffer, tight rows or a given plane-0 stride.
    Packed { stride: Option<u16> },
    /// Each plane in its own buffer with its own stride; `lens` cut the data (a plane count
    /// other than the format's is allowed, and refused).
    Planes {
        count: u8,
        strides: [u16; 3],
        lens: [u16; 2],
    },
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    format: u8,
    size: Size,
    layout: Layout,
    data: &'a [u8],
}

fuzz_target!(|input: Input| {
    let format = FORMATS[usize::from(input.format) % FORMATS.len()];
    let (w, h) = match input.size {
        Size::Small(w, h) => (usize::from(w), usize::from(h)),
        Size::Any(w, h) => (w as usize, h as usize),
    };
    let data = input.data;
    let frame = match input.layout {
        Layout::Packed { stride } => {
            let f = Frame::new(data, w, h, format);
            match stride {
                Some(s) => f.with_stride(usize::from(s)),
                None => f,
            }
        }
        Layout::Planes {
            count,
            strides,
            lens,
        } => {
            let mut rest = data;
            let mut planes = Vec::new();
            for i in 0..usize::from(count % 5) {
                let take = match lens.get(i) {
                    Some(&l) => usize::from(l).min(rest.len()),
                    None => rest.len(),
                };
                let (plane, tail) = rest.split_at(take);
                rest = tail;
                planes.push((plane, usize::from(strides.get(i).copied().unwrap_or(0))));
            }
            Frame::from_planes(w, h, format, planes)
        }
    };
    let Ok(_) = frame.validate() else {
        assert!(frame.to_rgb8().is_err(), "an invalid frame converted");
        return;
    };
    let rgb = frame.to_rgb8().expect("a valid frame converts");
    assert_eq!(rgb.len(), w * h * 3);
    // The same planes apart, each with its stride: the same pixels.
    let planes: Vec<_> = (0..format.planes())
        .map(|i| frame.plane(i).expect("a valid frame has its planes"))
        .collect();
    let apart = Frame::from_planes(w, h, format, planes.iter().map(|p| (p.data, p.stride)));
    assert_eq!(apart.to_rgb8().expect("its planes convert"), rgb);
    assert_eq!(frame.clone().into_rgb8().expect("into_rgb8"), rgb);
    // The antialiased resize and normalisation every tracked frame goes through.
    let t = preprocess_frame(&frame, 64, &Device::Cpu).expect("a valid frame preprocesses");
    assert_eq!(t.dims(), [1, 3, 64, 64]);
});
