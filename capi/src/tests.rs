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

#[test]
fn version_and_status_names() {
    // SAFETY: static NUL-terminated strings.
    let version = unsafe { CStr::from_ptr(edgetam_version()) };
    assert_eq!(version.to_str().ok(), Some(env!("CARGO_PKG_VERSION")));
    // SAFETY: as above.
    let name = unsafe { CStr::from_ptr(edgetam_status_name(EdgetamStatus::Limit as i32)) };
    assert_eq!(name.to_str().ok(), Some("EDGETAM_STATUS_LIMIT"));
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

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// What one `track` call costs through the C ABI over the Rust call: two trackers on one model
/// and the same frames, called alternately (which goes first alternates too). Run with
/// `cargo test --release -p edgetam-capi -- --ignored --nocapture overhead`.
#[test]
#[ignore = "a measurement, not a check"]
fn overhead_of_the_c_abi() {
    let model_dir = std::ffi::CString::new(fixtures().join("model").to_string_lossy().into_owned())
        .expect("path");
    let options = EdgetamModelOptions {
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
    let (mut t_rust, mut t_c) = (Vec::new(), Vec::new());
    for i in 0..n {
        let rgb = frames
            .i(i)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<u8>())
            .expect("frame");
        let frame = EdgetamFrame {
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
        let r = if i % 2 == 0 {
            run_c();
            run_rust()
        } else {
            let r = run_rust();
            run_c();
            r
        };
        let mut o = std::mem::MaybeUninit::<EdgetamObject>::uninit();
        // SAFETY: live result, writable out.
        assert_eq!(
            unsafe { edgetam_result_object(result, 0, o.as_mut_ptr()) },
            EdgetamStatus::Ok
        );
        // SAFETY: filled by the successful call above.
        let o = unsafe { o.assume_init() };
        assert_eq!(o.score.to_bits(), r.objects[0].score.to_bits());
        // SAFETY: the mask spans width * height bytes of the live result.
        let mask = unsafe { std::slice::from_raw_parts(o.mask, w * h) };
        assert_eq!(mask, &r.objects[0].mask.data[..]);
        // SAFETY: a result handle, freed once.
        unsafe { edgetam_result_free(result) };
    }
    let (mr, mc) = (median(t_rust), median(t_c));
    println!(
        "track at input 256, {n} frames {w}x{h}, median: Rust {:.3} ms, C ABI {:.3} ms, \
         difference {:+.3} ms ({:+.2} %)",
        mr.as_secs_f64() * 1e3,
        mc.as_secs_f64() * 1e3,
        (mc.as_secs_f64() - mr.as_secs_f64()) * 1e3,
        (mc.as_secs_f64() / mr.as_secs_f64() - 1.0) * 100.0
    );
    // SAFETY: handles freed once.
    unsafe {
        edgetam_tracker_free(c);
        edgetam_model_free(model);
    }
}
