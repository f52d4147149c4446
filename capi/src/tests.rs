//! Tests of the C functions called as Rust functions (the C and C++ programs of `capi/tests/`
//! test them as C does, through the installed library: `scripts/test-capi.sh`).

use std::ffi::CStr;
use std::path::PathBuf;
use std::ptr;
use std::time::{Duration, Instant};

use candle_core::{Device, IndexOp};
use edgetam_tracker::{Prompt, Tracker};

use super::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next failure on this thread.
    unsafe { CStr::from_ptr(edgetam_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// An `EdgetamObject` to fill, its `size` set as C callers set it.
fn empty_object() -> EdgetamObject {
    EdgetamObject {
        size: std::mem::size_of::<EdgetamObject>(),
        id: 0,
        score: 0.0,
        visible: 0,
        has_box: 0,
        prompted: 0,
        iou: 0.0,
        bbox: [0; 4],
        area: 0,
        mask_width: 0,
        mask_height: 0,
        mask: ptr::null(),
    }
}

#[test]
fn version_and_status_names() {
    // SAFETY: static NUL-terminated strings.
    let version = unsafe { CStr::from_ptr(edgetam_version()) };
    assert_eq!(version.to_str().ok(), Some(env!("CARGO_PKG_VERSION")));
    // SAFETY: as above.
    let name = unsafe { CStr::from_ptr(edgetam_status_name(EdgetamStatus::Limit as i32)) };
    assert_eq!(name.to_str().ok(), Some("EDGETAM_STATUS_LIMIT"));
    let number = edgetam_version_number();
    let parts: Vec<u32> = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse().expect("numeric version"))
        .collect();
    assert_eq!(number, parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2]);
}

/// Versioned structs: a `size` below the struct's (a caller that forgot to set it) is refused
/// with a message naming the struct; a larger one (a newer header) is read when its extra bytes
/// are zero and refused when they set unknown fields; an output struct gets the fields that fit
/// and its `size` set to the bytes written.
#[test]
fn struct_sizes_are_checked() {
    let source = c"/nonexistent-edgetam-model";
    let mut model = ptr::null_mut();
    let mut options = EdgetamModelOptions {
        size: 0,
        device: ptr::null(),
        precision: ptr::null(),
        input_size: 0,
    };
    // SAFETY: valid strings, options and out-pointer.
    let status = unsafe { edgetam_model_load(source.as_ptr(), &options, &mut model) };
    assert_eq!(status, EdgetamStatus::InvalidArgument);
    let expected = format!(
        "options->size is 0: set it to sizeof(EdgetamModelOptions) ({} bytes in edgetam.h {})",
        std::mem::size_of::<EdgetamModelOptions>(),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(last_error(), expected);

    // A newer header's options: this struct followed by one more field.
    #[repr(C)]
    struct Newer {
        options: EdgetamModelOptions,
        extra: u64,
    }
    let size = std::mem::size_of::<Newer>();
    options.size = size;
    let mut newer = Newer { options, extra: 0 };
    // SAFETY: `newer` spans `size` bytes and starts with the options.
    let status = unsafe { edgetam_model_load(source.as_ptr(), &newer.options, &mut model) };
    // Read (the extra field is zero): the load fails on the missing model, not the struct.
    assert_eq!(status, EdgetamStatus::Model, "{}", last_error());
    newer.extra = 1;
    // SAFETY: as above.
    let status = unsafe { edgetam_model_load(source.as_ptr(), &newer.options, &mut model) };
    assert_eq!(status, EdgetamStatus::InvalidArgument);
    assert!(
        last_error().contains("sets fields libedgetam"),
        "{}",
        last_error()
    );
    assert!(model.is_null());
}

#[test]
fn null_handles_are_errors() {
    let mut out = ptr::null_mut();
    // SAFETY: NULL handles and a valid out-pointer: what is under test.
    let status = unsafe { edgetam_tracker_track(ptr::null_mut(), ptr::null(), &mut out) };
    assert_eq!(status, EdgetamStatus::NullPointer);
    assert_eq!(last_error(), "frame is NULL");
    // SAFETY: as above.
    let status = unsafe { edgetam_tracker_remove_object(ptr::null_mut(), 1) };
    assert_eq!(status, EdgetamStatus::NullPointer);
    assert_eq!(last_error(), "tracker is NULL");
}

/// `edgetam_model_load` with `precision` at input 256: the status, and the model's precision
/// string when it loaded.
fn load_with_precision(precision: &CStr) -> (EdgetamStatus, Option<String>) {
    let model_dir = std::ffi::CString::new(fixtures().join("model").to_string_lossy().into_owned())
        .expect("path");
    let options = EdgetamModelOptions {
        size: std::mem::size_of::<EdgetamModelOptions>(),
        device: ptr::null(),
        precision: precision.as_ptr(),
        input_size: 256,
    };
    let mut model = ptr::null_mut();
    // SAFETY: valid strings and out-pointer.
    let status = unsafe { edgetam_model_load(model_dir.as_ptr(), &options, &mut model) };
    if status != EdgetamStatus::Ok {
        assert!(model.is_null());
        return (status, None);
    }
    let mut out = ptr::null();
    // SAFETY: a live handle and a writable out-pointer.
    assert_eq!(
        unsafe { edgetam_model_precision(model, &mut out) },
        EdgetamStatus::Ok
    );
    // SAFETY: a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(out) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: the handle from the load, freed once.
    unsafe { edgetam_model_free(model) };
    (status, Some(name))
}

/// bf16 is loaded as bf16 or refused with its own status: never f32 in its place. (The refusal
/// itself is checked by scripts/test-capi.sh, which runs the C program under EDGETAM_ISA=avx2.)
#[test]
fn precision_is_what_was_asked_or_refused() {
    assert_eq!(
        load_with_precision(c"f32"),
        (EdgetamStatus::Ok, Some("f32".into()))
    );
    match load_with_precision(c"bf16") {
        (EdgetamStatus::Ok, name) => assert_eq!(name.as_deref(), Some("bf16")),
        (EdgetamStatus::PrecisionUnavailable, _) => assert!(
            last_error().starts_with("precision bf16 is not available here: "),
            "{}",
            last_error()
        ),
        (status, _) => panic!("{status:?}: {}", last_error()),
    }
    let mut out = ptr::null();
    // SAFETY: a NULL handle: what is under test.
    let status = unsafe { edgetam_model_precision(ptr::null(), &mut out) };
    assert_eq!(status, EdgetamStatus::NullPointer);
    assert_eq!(last_error(), "model is NULL");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// What one `track` call costs through the C ABI over the Rust call: two trackers on one model
/// and the same frames, called alternately (which goes first alternates too), the sequence
/// replayed `EDGETAM_OVERHEAD_PASSES` times (default 3); reports each side's median and the
/// median of the per-frame differences (each pair ran back to back, so load drifts cancel).
/// Then the fixed cost alone: trackers with no object (the frame is checked, the model does
/// not run), 2000 calls each, result dropped / freed inside the timing. Run with
/// `cargo test --release -p edgetam-capi -- --ignored --nocapture overhead`.
#[test]
#[ignore = "a measurement, not a check"]
fn overhead_of_the_c_abi() {
    let model_dir = std::ffi::CString::new(fixtures().join("model").to_string_lossy().into_owned())
        .expect("path");
    let options = EdgetamModelOptions {
        size: std::mem::size_of::<EdgetamModelOptions>(),
        device: ptr::null(),
        precision: ptr::null(),
        input_size: 256,
    };
    let mut model = ptr::null_mut();
    // SAFETY: valid strings and out-pointer.
    let status = unsafe { edgetam_model_load(model_dir.as_ptr(), &options, &mut model) };
    assert_eq!(status, EdgetamStatus::Ok, "{}", last_error());
    // SAFETY: `model` is a live handle.
    let shared = unsafe { &*model }.model.clone();
    let mut rust = Tracker::new(shared);
    let mut c = ptr::null_mut();
    // SAFETY: live model, valid out-pointer.
    assert_eq!(
        unsafe { edgetam_tracker_new(model, &mut c) },
        EdgetamStatus::Ok
    );

    let seq = candle_core::safetensors::load(
        fixtures().join("sequence_256/sequence.safetensors"),
        &Device::Cpu,
    )
    .expect("sequence fixture");
    let frames = &seq["frames"];
    let (n, h, w, _) = frames.dims4().expect("frames");
    let b = EdgetamBox {
        x0: 35.0,
        y0: 57.0,
        x1: 93.0,
        y1: 108.0,
    };
    rust.add_prompt(1, 0, Prompt::from_box(b.x0, b.y0, b.x1, b.y1))
        .expect("prompt");
    // SAFETY: live tracker.
    assert_eq!(
        unsafe { edgetam_tracker_add_box(c, 1, 0, b) },
        EdgetamStatus::Ok
    );
    let passes: usize = std::env::var("EDGETAM_OVERHEAD_PASSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let (mut t_rust, mut t_c) = (Vec::new(), Vec::new());
    for k in 0..passes * n {
        let i = k % n;
        let rgb = frames
            .i(i)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<u8>())
            .expect("frame");
        let frame = EdgetamFrame {
            size: std::mem::size_of::<EdgetamFrame>(),
            format: EdgetamPixelFormat::Rgb8 as i32,
            width: w as u32,
            height: h as u32,
            planes: [
                EdgetamPlane {
                    data: rgb.as_ptr(),
                    stride: 3 * w,
                },
                EdgetamPlane {
                    data: ptr::null(),
                    stride: 0,
                },
                EdgetamPlane {
                    data: ptr::null(),
                    stride: 0,
                },
            ],
        };
        let mut run_rust = || {
            let start = Instant::now();
            let r = rust.track(&rgb, w, h).expect("rust track");
            t_rust.push(start.elapsed());
            r
        };
        let mut result = ptr::null_mut();
        let mut run_c = || {
            let start = Instant::now();
            // SAFETY: live tracker, a frame over `rgb`, valid out-pointer.
            let status = unsafe { edgetam_tracker_track(c, &frame, &mut result) };
            t_c.push(start.elapsed());
            assert_eq!(status, EdgetamStatus::Ok, "{}", last_error());
        };
        let r = if k % 2 == 0 {
            run_c();
            run_rust()
        } else {
            let r = run_rust();
            run_c();
            r
        };
        let mut o = empty_object();
        // SAFETY: live result, writable out with its size set.
        assert_eq!(
            unsafe { edgetam_result_object(result, 0, &mut o) },
            EdgetamStatus::Ok
        );
        assert_eq!(o.score.to_bits(), r.objects[0].score.to_bits());
        // SAFETY: the mask spans width * height bytes of the live result.
        let mask = unsafe { std::slice::from_raw_parts(o.mask, w * h) };
        assert_eq!(mask, &r.objects[0].mask.data[..]);
        // SAFETY: a result handle, freed once.
        unsafe { edgetam_result_free(result) };
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut diffs: Vec<f64> = t_c
        .iter()
        .zip(&t_rust)
        .map(|(c, r)| ms(*c) - ms(*r))
        .collect();
    diffs.sort_by(f64::total_cmp);
    let paired = diffs[diffs.len() / 2];
    let (mr, mc) = (median(t_rust), median(t_c));
    println!(
        "track at input 256, {} calls each on {n} frames {w}x{h}, median: Rust {:.3} ms, \
         C ABI {:.3} ms; median of the per-frame differences (C - Rust) {paired:+.3} ms \
         ({:+.2} % of the Rust median)",
        passes * n,
        ms(mr),
        ms(mc),
        paired / ms(mr) * 100.0
    );

    // The fixed cost: no object, so only the frame checks and the result hand-over run.
    // SAFETY: `model` is a live handle.
    let mut empty_rust = Tracker::new(unsafe { &*model }.model.clone());
    let mut empty_c = ptr::null_mut();
    // SAFETY: live model, valid out-pointer.
    assert_eq!(
        unsafe { edgetam_tracker_new(model, &mut empty_c) },
        EdgetamStatus::Ok
    );
    let rgb = vec![7u8; 3 * w * h];
    let mut frame_empty = EdgetamFrame {
        size: std::mem::size_of::<EdgetamFrame>(),
        format: EdgetamPixelFormat::Rgb8 as i32,
        width: w as u32,
        height: h as u32,
        planes: [EdgetamPlane {
            data: ptr::null(),
            stride: 0,
        }; 3],
    };
    frame_empty.planes[0] = EdgetamPlane {
        data: rgb.as_ptr(),
        stride: 3 * w,
    };
    let (mut e_rust, mut e_c) = (Vec::new(), Vec::new());
    for k in 0..4000 {
        let start = Instant::now();
        if k % 2 == 0 {
            drop(empty_rust.track(&rgb, w, h).expect("rust track"));
            e_rust.push(start.elapsed());
        } else {
            let mut result = ptr::null_mut();
            // SAFETY: live tracker, a frame over `rgb`, valid out-pointer; the result is freed
            // once.
            unsafe {
                assert_eq!(
                    edgetam_tracker_track(empty_c, &frame_empty, &mut result),
                    EdgetamStatus::Ok
                );
                edgetam_result_free(result);
            }
            e_c.push(start.elapsed());
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "track with no object (fixed cost), 2000 calls each: median Rust {:.2} us, C ABI {:.2} us",
        us(median(e_rust)),
        us(median(e_c))
    );
    // SAFETY: a tracker handle, freed once.
    unsafe { edgetam_tracker_free(empty_c) };
    // SAFETY: handles freed once.
    unsafe {
        edgetam_tracker_free(c);
        edgetam_model_free(model);
    }
}
