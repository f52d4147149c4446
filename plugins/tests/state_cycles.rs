//! Repeated NULL -> PLAYING -> NULL cycles leak nothing: no tracking threads, no element
//! references, no buffers survive a cycle. (Its own test binary, so no other test's threads
//! are counted.)

mod common;

use common::{frames, init, model_dir, H, PROMPTS, W};
use gst::prelude::*;

/// Threads of this process whose name starts with `edgetam-`. (Linux threads inherit their
/// creator's name: the global thread pools that the tracking thread starts on first use,
/// rayon's and gemm's, are counted too; they persist, so the baseline is taken after a first
/// cycle.)
fn edgetam_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| t.ok())
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .filter(|name| name.starts_with("edgetam-"))
                .count()
        })
        .unwrap_or(0)
}

/// [`edgetam_threads`] once it stops changing: a joined thread can still be listed in
/// `/proc/self/task` for a moment (the kernel wakes `pthread_join` before it removes the task),
/// so a count taken right after a state change may include threads that are already gone.
fn settled_edgetam_threads() -> usize {
    let mut last = edgetam_threads();
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let now = edgetam_threads();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

#[test]
fn repeated_state_cycles_leak_nothing() {
    init();
    let frame = frames(1).remove(0);
    let pipeline = gst::parse::launch(&format!(
        "appsrc name=src format=time caps=video/x-raw,format=RGB,width={W},height={H},framerate=10/1 \
         ! edgetamtrack name=track model=\"{}\" prompts=\"{PROMPTS}\" ! fakesink sync=false",
        model_dir().display()
    ))
    .expect("pipeline")
    .downcast::<gst::Pipeline>()
    .expect("a pipeline");
    // appsrc through its action signals (no gstreamer-app dependency).
    let src = pipeline.by_name("src").expect("appsrc");
    let track = pipeline.by_name("track").expect("track");
    let mut baseline = settled_edgetam_threads();
    for cycle in 0..4 {
        pipeline.set_state(gst::State::Playing).expect("playing");
        let mut buf = gst::Buffer::from_slice(frame.clone());
        buf.get_mut()
            .expect("writable")
            .set_pts(gst::ClockTime::ZERO);
        let r: gst::FlowReturn = src.emit_by_name("push-buffer", &[&buf]);
        r.into_result().expect("push");
        let r: gst::FlowReturn = src.emit_by_name("end-of-stream", &[]);
        r.into_result().expect("eos");
        let bus = pipeline.bus().expect("bus");
        let msg = bus
            .timed_pop_filtered(
                gst::ClockTime::from_seconds(60),
                &[gst::MessageType::Eos, gst::MessageType::Error],
            )
            .expect("EOS in time");
        assert_eq!(msg.type_(), gst::MessageType::Eos, "cycle {cycle}: {msg:?}");
        if cycle > 0 {
            let now = edgetam_threads();
            assert!(
                now > baseline,
                "cycle {cycle}: the worker runs ({now} vs {baseline})"
            );
        }
        pipeline.set_state(gst::State::Null).expect("null");
        if cycle == 0 {
            baseline = settled_edgetam_threads();
        }
        assert_eq!(
            settled_edgetam_threads(),
            baseline,
            "cycle {cycle}: threads left behind"
        );
    }
    // Only the pipeline (and our handle) hold the element.
    assert_eq!(track.ref_count(), 2);
}
