//! `edgetamtrack` in a `gst_check::Harness`: caps, metas (masks equal to the library API's),
//! signals, events, flush/EOS, renegotiation, latency, live mode, start errors.

mod common;

use common::{
    buffer, decisions, detector_props, frames, init, library, model_dir, objects, tmp, H, PROMPTS,
    W,
};
use edgetam_tracker::{FrameResult, ObjectResult};
use gst::prelude::*;
use gst_check::Harness;
use gstedgetam::results;

fn caps(format: &str, w: usize, h: usize) -> String {
    format!("video/x-raw,format={format},width={w},height={h},framerate=10/1")
}

/// A harness around `edgetamtrack` with the test model and `props`, its own bus attached.
fn harness(props: &[(&str, &str)]) -> (Harness, gst::Bus) {
    harness_with(props, "")
}

/// [`harness`] tracking the fixture's [`PROMPTS`] with `post-messages` and `more`, fed RGB
/// frames of the fixture's size.
fn tracking(more: &[(&str, &str)]) -> (Harness, gst::Bus) {
    let props = [&[("prompts", PROMPTS), ("post-messages", "true")], more].concat();
    let (mut h, bus) = harness(&props);
    h.set_src_caps_str(&caps("RGB", W, H));
    (h, bus)
}

/// A new `edgetamtrack` with `props` set from strings, in order.
fn element(props: &[(&str, &str)]) -> gst::Element {
    init();
    let el = gst::ElementFactory::make("edgetamtrack")
        .build()
        .expect("element");
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
    el
}

/// [`harness`] with `before` (a launch fragment, e.g. `videoconvert ! video/x-raw,format=NV12 !`)
/// in front of the element (nothing: the element alone).
fn harness_with(props: &[(&str, &str)], before: &str) -> (Harness, gst::Bus) {
    let model = model_dir().display().to_string();
    let h = if before.is_empty() {
        let el = element(&[&[("model", model.as_str())], props].concat());
        Harness::with_element(&el, Some("sink"), Some("src"))
    } else {
        let mut desc = format!("{before} edgetamtrack name=track model=\"{model}\"");
        for (k, v) in props {
            desc.push_str(&format!(" {k}=\"{v}\""));
        }
        Harness::new_parse(&desc)
    };
    let bus = gst::Bus::new();
    track_element(&h).set_bus(Some(&bus));
    (h, bus)
}

fn track_element(h: &Harness) -> gst::Element {
    let el = h.element().expect("element");
    match el.downcast_ref::<gst::Bin>() {
        Some(bin) => bin.by_name("track").expect("track element"),
        None => el,
    }
}

/// One `edgetam` ROI meta: id, rect (x, y, w, h), param structure.
type Roi = (i32, (u32, u32, u32, u32), gst::Structure);

/// The `edgetam` ROI metas of a buffer.
fn rois(buf: &gst::BufferRef) -> Vec<Roi> {
    buf.iter_meta::<gst_video::VideoRegionOfInterestMeta>()
        .filter(|m| m.roi_type() == results::ROI_TYPE)
        .map(|m| {
            (
                m.id(),
                m.rect(),
                m.param(results::PARAM_NAME).expect("param").to_owned(),
            )
        })
        .collect()
}

/// Element messages `edgetam-tracking` waiting on the bus, in order (other messages are
/// dropped).
fn tracking_messages(bus: &gst::Bus) -> Vec<gst::Structure> {
    drain(bus).0
}

/// Every message waiting on the bus: the `edgetam-tracking` structures and the warning texts.
fn drain(bus: &gst::Bus) -> (Vec<gst::Structure>, Vec<String>) {
    let (mut tracking, mut warnings) = (Vec::new(), Vec::new());
    while let Some(m) = bus.pop() {
        match m.view() {
            gst::MessageView::Element(e) => {
                if let Some(s) = e.structure() {
                    if s.name() == results::MESSAGE_NAME {
                        tracking.push(s.to_owned());
                    }
                }
            }
            gst::MessageView::Warning(w) => warnings.push(w.error().to_string()),
            _ => {}
        }
    }
    (tracking, warnings)
}

/// Object ids of a tracking message.
fn ids(s: &gst::Structure) -> Vec<u32> {
    objects(s)
        .iter()
        .map(|o| o.get::<u32>("id").expect("id"))
        .collect()
}

/// The object ids of each tracking message waiting on the bus.
fn ids_per_message(bus: &gst::Bus) -> Vec<Vec<u32>> {
    tracking_messages(bus).iter().map(ids).collect()
}

/// The `frame` of each tracking message.
fn frames_of(msgs: &[gst::Structure]) -> Vec<u64> {
    msgs.iter()
        .map(|m| m.get::<u64>("frame").expect("frame"))
        .collect()
}

/// The PTS of each buffer, in ms.
fn pts_ms(bufs: &[gst::Buffer]) -> Vec<u64> {
    bufs.iter()
        .map(|b| b.pts().expect("pts").mseconds())
        .collect()
}

/// The ROIs of `buf` against the library's result `want` on frame `i`: one per visible object
/// with a box, in order, each with that object's id and the library's mask. The pairs, for
/// more checks.
fn rois_match<'a>(
    buf: &gst::BufferRef,
    want: &'a FrameResult,
    i: usize,
) -> Vec<(Roi, &'a ObjectResult)> {
    let got = rois(buf);
    let visible: Vec<&ObjectResult> = want
        .objects
        .iter()
        .filter(|o| o.visible && o.bbox.is_some())
        .collect();
    assert_eq!(
        got.len(),
        visible.len(),
        "frame {i}: one ROI per visible object"
    );
    for ((id, _, p), o) in got.iter().zip(&visible) {
        assert_eq!(*id as u32, o.id, "frame {i}");
        let mask = p.get::<gst::Buffer>("mask").expect("mask");
        assert_eq!(
            &*mask.map_readable().expect("map"),
            &o.mask.data[..],
            "frame {i} object {}: mask differs from the library's",
            o.id
        );
    }
    got.into_iter().zip(visible).collect()
}

/// `add-box` on `el`: object `id`, box `[x0, y0, x1, y1]`; whether it was taken.
fn add_box(el: &gst::Element, id: u32, [x0, y0, x1, y1]: [f64; 4]) -> bool {
    el.emit_by_name::<bool>("add-box", &[&id, &x0, &y0, &x1, &y1])
}

/// A flush (start, stop, new segment) into the harness.
fn flush(h: &mut Harness) {
    assert!(h.push_event(gst::event::FlushStart::new()));
    assert!(h.push_event(gst::event::FlushStop::new(true)));
    let segment = gst::FormattedSegment::<gst::ClockTime>::new();
    assert!(h.push_event(gst::event::Segment::new(&segment)));
}

fn messages_of(bus: &gst::Bus, kind: gst::MessageType) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = bus.pop_filtered(&[kind]) {
        match m.view() {
            gst::MessageView::Warning(w) => out.push(w.error().to_string()),
            gst::MessageView::Error(e) => out.push(format!("{} ({:?})", e.error(), e.debug())),
            _ => {}
        }
    }
    out
}

#[test]
fn metas_and_masks_equal_the_library_api() {
    let frames = frames(4);
    let expected = library(&frames, PROMPTS);
    let (mut h, bus) = tracking(&[]);
    for (i, (f, want)) in frames.iter().zip(&expected).enumerate() {
        let out = h.push_and_pull(buffer(f, i as u64)).expect("buffer out");
        // overlay=none: pixels untouched.
        assert_eq!(&*out.map_readable().expect("map"), &f[..]);
        let matched = rois_match(&out, want, i);
        assert!(
            !matched.is_empty(),
            "frame {i}: the fixture must show an object"
        );
        for ((_, rect, p), o) in &matched {
            let [x0, y0, x1, y1] = o.bbox.expect("box");
            let size = ((x1 - x0 + 1) as u32, (y1 - y0 + 1) as u32);
            assert_eq!(*rect, (x0 as u32, y0 as u32, size.0, size.1));
            assert_eq!(p.get::<u32>("id").expect("id"), o.id);
            assert_eq!(p.get::<f32>("score").expect("score"), o.score);
            assert!(p.get::<bool>("visible").expect("visible"));
            assert_eq!(p.get::<u64>("area").expect("area"), o.area as u64);
            assert_eq!(p.get::<u32>("mask-width").expect("mw"), W as u32);
            assert_eq!(p.get::<u32>("mask-height").expect("mh"), H as u32);
        }
    }
    let msgs = tracking_messages(&bus);
    assert_eq!(msgs.len(), frames.len());
    for (i, (m, want)) in msgs.iter().zip(&expected).enumerate() {
        assert_eq!(m.get::<u64>("frame").expect("frame"), i as u64);
        assert_eq!(m.get::<u64>("pts").expect("pts"), 100_000_000 * i as u64);
        assert_eq!(
            m.get::<u64>("running-time").expect("rt"),
            100_000_000 * i as u64
        );
        assert_eq!(
            ids(m),
            want.objects.iter().map(|o| o.id).collect::<Vec<_>>()
        );
    }
    // Statistics and the LATENCY query.
    let el = track_element(&h);
    assert!(el.property::<f64>("fps") > 0.0);
    let ours = el.property::<u64>("latency");
    assert!(ours > 0);
    let lat = h.query_latency().expect("latency");
    assert!(lat.nseconds() >= ours, "{lat} < {ours}");
}

/// `input-size` runs the 1024 checkpoint (`fixtures/model`, its config untouched) at 256: the
/// same masks as the library with the 256 config of the same weights.
#[test]
fn input_size_property_runs_the_checkpoint_at_that_size() {
    let frames = frames(3);
    let expected = library(&frames, PROMPTS);
    let checkpoint = common::repo().join("fixtures/model");
    let el = element(&[
        ("model", checkpoint.to_str().expect("utf-8")),
        ("input-size", "256"),
        ("prompts", PROMPTS),
    ]);
    let mut h = Harness::with_element(&el, Some("sink"), Some("src"));
    h.set_src_caps_str(&caps("RGB", W, H));
    for (i, (f, want)) in frames.iter().zip(&expected).enumerate() {
        let out = h.push_and_pull(buffer(f, i as u64)).expect("buffer out");
        rois_match(&out, want, i);
    }
    assert_eq!(el.property::<u32>("input-size"), 256);
}

#[test]
fn other_formats_are_tracked() {
    let frames = frames(2);
    for format in ["RGBA", "BGRx", "BGR", "NV12", "I420", "GRAY8"] {
        // The overlay's drawing is exercised in every format too.
        let (mut h, bus) = harness_with(
            &[
                ("prompts", PROMPTS),
                ("post-messages", "true"),
                ("overlay", "mask+contour+box"),
            ],
            &format!("videoconvert ! video/x-raw,format={format} !"),
        );
        h.set_src_caps_str(&caps("RGB", W, H));
        for (i, f) in frames.iter().enumerate() {
            let out = h.push_and_pull(buffer(f, i as u64)).expect("buffer out");
            let msgs = tracking_messages(&bus);
            assert_eq!(msgs.len(), 1, "{format}");
            assert_eq!(ids(&msgs[0]), [1, 2], "{format}");
            let visible = objects(&msgs[0])
                .iter()
                .filter(|o| o.get::<bool>("visible").expect("visible"))
                .count();
            assert_eq!(rois(&out).len(), visible, "{format}");
        }
        assert!(
            messages_of(&bus, gst::MessageType::Error).is_empty(),
            "{format}"
        );
    }
}

#[test]
fn overlay_draws_into_the_frame() {
    let frames = frames(1);
    let (mut h, _bus) = harness(&[("prompts", PROMPTS), ("overlay", "mask+contour+box")]);
    h.set_src_caps_str(&caps("BGRx", W, H));
    let bgrx: Vec<u8> = frames[0]
        .chunks(3)
        .flat_map(|p| [p[2], p[1], p[0], 255])
        .collect();
    let out = h.push_and_pull(buffer(&bgrx, 0)).expect("buffer out");
    let got = out.map_readable().expect("map");
    let changed = got.iter().zip(&bgrx).filter(|(a, b)| a != b).count();
    assert!(changed > 100, "only {changed} bytes changed");
    assert!(!rois(&out).is_empty());
}

#[test]
fn signals_add_remove_and_reset() {
    let frames = frames(5);
    let (mut h, bus) = harness(&[("post-messages", "true")]);
    let el = track_element(&h);
    // Before the first buffer (the element is already started by the harness).
    assert!(add_box(&el, 1, [35.0, 57.0, 93.0, 108.0]));
    h.set_src_caps_str(&caps("RGB", W, H));
    h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    assert!(el.emit_by_name::<bool>("add-points", &[&2u32, &"65,50,1;125,119,0"]));
    h.push_and_pull(buffer(&frames[1], 1)).expect("out");
    assert!(el.emit_by_name::<bool>("remove-object", &[&1u32]));
    h.push_and_pull(buffer(&frames[2], 2)).expect("out");
    assert!(el.emit_by_name::<bool>("add-prompt", &[&"obj=3;box=10,10,60,60"]));
    h.push_and_pull(buffer(&frames[3], 3)).expect("out");
    assert!(el.emit_by_name::<bool>("reset", &[]));
    let out = h.push_and_pull(buffer(&frames[4], 4)).expect("out");
    assert!(rois(&out).is_empty());
    assert_eq!(
        ids_per_message(&bus),
        [vec![1], vec![1, 2], vec![2], vec![2, 3], vec![]]
    );
    // Bad input is refused with a warning, never a panic.
    assert!(!el.emit_by_name::<bool>("add-points", &[&2u32, &"1,2"]));
    assert!(!el.emit_by_name::<bool>("add-prompt", &[&"obj=1;bx=1,2,3,4"]));
    let warnings = messages_of(&bus, gst::MessageType::Warning);
    assert!(
        warnings.iter().any(|w| w.contains("bx=1,2,3,4")),
        "{warnings:?}"
    );
}

#[test]
fn max_objects_refuses_new_objects() {
    let frames = frames(1);
    let (mut h, bus) = harness(&[("max-objects", "1"), ("post-messages", "true")]);
    let el = track_element(&h);
    assert!(add_box(&el, 1, [35.0, 57.0, 93.0, 108.0]));
    assert!(!add_box(&el, 2, [5.0, 5.0, 50.0, 50.0]));
    // Refining an existing object is fine.
    assert!(add_box(&el, 1, [30.0, 50.0, 90.0, 100.0]));
    h.set_src_caps_str(&caps("RGB", W, H));
    h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    assert_eq!(ids_per_message(&bus), [vec![1]]);
}

#[test]
fn custom_events_carry_prompts_both_ways() {
    let frames = frames(3);
    let (mut h, bus) = harness(&[("post-messages", "true")]);
    h.set_src_caps_str(&caps("RGB", W, H));
    h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    assert!(h.push_event(results::prompt_event_downstream("obj=1;box=35,57,93,108")));
    h.push_and_pull(buffer(&frames[1], 1)).expect("out");
    assert!(h.push_upstream_event(results::prompt_event_upstream(
        "obj=2;point=65,50,1;point=125,119,0"
    )));
    h.push_and_pull(buffer(&frames[2], 2)).expect("out");
    assert_eq!(ids_per_message(&bus), [vec![], vec![1], vec![1, 2]]);
    // The element consumes its events: nothing reached the harness's source.
    while let Some(ev) = h.try_pull_upstream_event() {
        assert!(ev
            .structure()
            .is_none_or(|s| s.name() != results::PROMPT_EVENT));
    }
}

#[test]
fn flush_and_eos() {
    let frames = frames(4);
    let (mut h, bus) = tracking(&[]);
    h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    h.push_and_pull(buffer(&frames[1], 1)).expect("out");
    flush(&mut h);
    // Tracking goes on after the flush (the objects are kept).
    let out = h.push_and_pull(buffer(&frames[2], 2)).expect("out");
    assert!(!rois(&out).is_empty());
    h.push(buffer(&frames[3], 3)).expect("push");
    assert!(h.push_event(gst::event::Eos::new()));
    assert_eq!(h.buffers_received(), 4);
    let mut saw_eos = false;
    while let Some(ev) = h.try_pull_event() {
        saw_eos |= ev.type_() == gst::EventType::Eos;
    }
    assert!(saw_eos, "EOS must pass through");
    let msgs = tracking_messages(&bus);
    assert_eq!(msgs.len(), 4);
    assert!(messages_of(&bus, gst::MessageType::Error).is_empty());
}

#[test]
fn new_resolution_resets_tracking_with_a_warning() {
    let frames = frames(2);
    let (mut h, bus) = tracking(&[]);
    h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    h.set_src_caps_str(&caps("RGB", 120, 80));
    let small = vec![90u8; 120 * 80 * 3];
    let out = h.push_and_pull(buffer(&small, 1)).expect("out");
    assert!(rois(&out).is_empty());
    let (tracking, warnings) = drain(&bus);
    let got: Vec<Vec<u32>> = tracking.iter().map(ids).collect();
    assert_eq!(got, [vec![1, 2], vec![]]);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("240x160 to 120x80") && w.contains("reset")),
        "{warnings:?}"
    );
}

fn start_error(props: &[(&str, &str)]) -> String {
    let el = element(props);
    let bus = gst::Bus::new();
    el.set_bus(Some(&bus));
    assert!(
        el.set_state(gst::State::Paused).is_err(),
        "must fail: {props:?}"
    );
    let _ = el.set_state(gst::State::Null);
    let errors = messages_of(&bus, gst::MessageType::Error);
    assert_eq!(errors.len(), 1, "{errors:?}");
    errors[0].clone()
}

#[test]
fn missing_or_bad_model_fails_the_state_change() {
    let e = start_error(&[]);
    assert!(e.contains("no model"), "{e}");
    let e = start_error(&[("model", "/no/such/edgetam")]);
    assert!(
        e.contains("/no/such/edgetam") && e.contains("does not exist"),
        "{e}"
    );
    let bad = tmp("bad_model");
    std::fs::write(bad.join("config.json"), b"{ not json").expect("write");
    std::fs::write(bad.join("model.safetensors"), b"nope").expect("write");
    let e = start_error(&[("model", bad.to_str().expect("utf-8"))]);
    assert!(
        e.contains("cannot load model") && e.contains(bad.to_str().expect("p")),
        "{e}"
    );
    let dir = model_dir();
    let e = start_error(&[
        ("model", dir.to_str().expect("utf-8")),
        ("prompts", "obj=1;box=1,2,3,4|obj=2;bx=1"),
    ]);
    assert!(e.contains("prompts") && e.contains("bx=1"), "{e}");
    let e = start_error(&[("model", dir.to_str().expect("utf-8")), ("device", "tpu")]);
    assert!(e.contains("device") && e.contains("tpu"), "{e}");
    let e = start_error(&[
        ("model", dir.to_str().expect("utf-8")),
        ("input-size", "300"),
    ]);
    assert!(
        e.contains("input size 300 is not supported") && e.contains("multiple of 256"),
        "{e}"
    );
    // `precision` is a registered enum: a bad value is refused by GStreamer when set (see
    // gst_launch.rs), and `bf16` fails to start only where it cannot run (a CPU without
    // AVX512-BF16, or EDGETAM_ISA below avx512: gst_launch.rs checks that refusal).
}

/// Buffers `range` of `frames` (each with the PTS of its index).
fn buffers(frames: &[Vec<u8>], range: std::ops::Range<usize>) -> Vec<gst::Buffer> {
    range.map(|i| buffer(&frames[i], i as u64)).collect()
}

/// Pushes `bufs` in order.
fn push(h: &mut Harness, bufs: Vec<gst::Buffer>) {
    for b in bufs {
        h.push(b).expect("push");
    }
}

/// Pushes `bufs`, then EOS, and pulls every buffer that comes out (in order).
fn push_all_then_eos(h: &mut Harness, bufs: Vec<gst::Buffer>) -> Vec<gst::Buffer> {
    push(h, bufs);
    assert!(h.push_event(gst::event::Eos::new()));
    let mut out = Vec::new();
    while let Some(b) = h.try_pull() {
        out.push(b);
    }
    out
}

/// Whether every `edgetam` meta of a buffer is marked stale (and there is at least one).
fn stale(buf: &gst::BufferRef) -> Option<bool> {
    let r = rois(buf);
    if r.is_empty() {
        return None;
    }
    let flags: Vec<bool> = r
        .iter()
        .map(|(_, _, p)| p.get::<bool>("stale").expect("stale"))
        .collect();
    assert!(flags.iter().all(|&f| f == flags[0]), "{flags:?}");
    Some(flags[0])
}

/// Waits until the tracker has finished what it holds (its processing time is ~0.1 s here).
fn wait_tracker() {
    std::thread::sleep(std::time::Duration::from_millis(1500));
}

/// A live-mode [`tracking`] harness given buffers `first` of `frames`, once its tracker has
/// finished with them (buffer 0 tracked; those that came while it was busy wait behind it).
fn live_after(frames: &[Vec<u8>], first: std::ops::Range<usize>) -> (Harness, gst::Bus) {
    let (mut h, bus) = tracking(&[("live-mode", "true")]);
    push(&mut h, buffers(frames, first));
    wait_tracker();
    (h, bus)
}

#[test]
fn live_mode_tracks_when_free_and_passes_the_rest_in_order() {
    let frames = frames(5);
    // Buffer 0 goes to the tracker; 1-3 arrive while it is busy and wait behind it, untracked.
    let (mut h, bus) = live_after(&frames, 0..4);
    // The tracker is free again: buffer 4 is tracked; 0-3 leave, in order.
    let out = push_all_then_eos(&mut h, buffers(&frames, 4..5));
    assert_eq!(out.len(), 5);
    assert_eq!(pts_ms(&out), [0, 100, 200, 300, 400], "input order");
    let fresh: Vec<Option<bool>> = out.iter().map(|b| stale(b).map(|s| !s)).collect();
    assert_eq!(fresh[0], Some(true));
    assert_eq!(fresh[4], Some(true));
    // Untracked buffers carry the last known objects, marked stale, of tracked frame 0.
    for b in &out[1..4] {
        assert_eq!(stale(b), Some(true));
        for (_, _, p) in rois(b) {
            assert_eq!(p.get::<u64>("frame").expect("frame"), 0);
        }
    }
    assert_eq!(frames_of(&tracking_messages(&bus)), [0, 4]);
    let el = track_element(&h);
    assert_eq!(el.property::<u64>("tracked"), 2);
    assert_eq!(el.property::<u64>("skipped"), 3);
}

#[test]
fn live_mode_passes_buffers_it_cannot_finish_in_time() {
    let frames = frames(4);
    // The test clock stands at 0: buffers 0 and 2 are on time (1 waits behind 0).
    let (mut h, bus) = live_after(&frames, 0..2);
    push(&mut h, buffers(&frames, 2..3));
    wait_tracker();
    // 10 s later, buffer 3 (running time 0.3 s) cannot be out within the element's latency.
    h.set_time(gst::ClockTime::from_seconds(10))
        .expect("set time");
    let out = push_all_then_eos(&mut h, buffers(&frames, 3..4));
    assert_eq!(out.len(), 4);
    assert_eq!(stale(&out[3]), Some(true), "a late buffer passes untracked");
    assert_eq!(frames_of(&tracking_messages(&bus)), [0, 2]);
    // The latency it reports covers a tracked buffer's stay plus a frame.
    let ours = track_element(&h).property::<u64>("latency");
    assert!(ours >= 100_000_000, "{ours}");
}

#[test]
fn live_mode_passes_buffers_qos_reports_late() {
    let frames = frames(3);
    let (mut h, bus) = live_after(&frames, 0..1);
    // Downstream says: everything before 10 s is late.
    let qos = gst::event::Qos::new(
        gst::QOSType::Underflow,
        2.0,
        9_000_000_000,
        gst::ClockTime::from_seconds(1),
    );
    assert!(h.push_upstream_event(qos));
    let out = push_all_then_eos(&mut h, buffers(&frames, 1..2));
    assert_eq!(out.len(), 2);
    assert_eq!(stale(&out[0]), Some(false));
    assert_eq!(stale(&out[1]), Some(true), "a late buffer passes untracked");
    assert_eq!(tracking_messages(&bus).len(), 1);
}

#[test]
fn frames_in_flight_overlap_and_keep_order_and_results() {
    let frames = frames(5);
    let expected = library(&frames, PROMPTS);
    let (mut h, bus) = tracking(&[("encoder-ahead", "true")]);
    // Two buffers in flight (the default with encoder-ahead): buffer 0 leaves once 1 is in.
    h.push(buffer(&frames[0], 0)).expect("push");
    assert_eq!(h.buffers_received(), 0);
    h.push(buffer(&frames[1], 1)).expect("push");
    assert_eq!(h.buffers_received(), 1);
    let out = push_all_then_eos(&mut h, buffers(&frames, 2..5));
    assert_eq!(out.len(), 5);
    assert_eq!(pts_ms(&out), [0, 100, 200, 300, 400]);
    for (i, (b, want)) in out.iter().zip(&expected).enumerate() {
        rois_match(b, want, i);
    }
    assert_eq!(tracking_messages(&bus).len(), 5);
}

#[test]
fn flush_discards_buffers_in_flight() {
    let frames = frames(4);
    let (mut h, bus) = tracking(&[("max-in-flight", "2")]);
    push(&mut h, buffers(&frames, 0..2));
    assert_eq!(h.buffers_received(), 1);
    // Buffer 1 is in flight: the flush discards it.
    flush(&mut h);
    let out = push_all_then_eos(&mut h, buffers(&frames, 2..4));
    let pts = pts_ms(&out);
    // The first buffer was pulled before (harness queue), then 2 and 3 after the flush.
    assert_eq!(pts.last(), Some(&300));
    assert!(!pts.contains(&100), "{pts:?}");
    assert!(out.iter().all(|b| !rois(b).is_empty()));
    assert!(messages_of(&bus, gst::MessageType::Error).is_empty());
}

/// A detector's ROI meta: `(roi_type, x, y, w, h, confidence)`.
type Det<'a> = (&'a str, u32, u32, u32, u32, Option<f64>);

/// A buffer with `edgetam`-foreign ROI metas.
fn with_rois(data: &[u8], i: u64, rois: &[Det]) -> gst::Buffer {
    let mut b = buffer(data, i);
    {
        let b = b.get_mut().expect("writable");
        for &(t, x, y, w, h, conf) in rois {
            let mut m = gst_video::VideoRegionOfInterestMeta::add(b, t, (x, y, w, h));
            if let Some(c) = conf {
                m.add_param(
                    gst::Structure::builder("detection")
                        .field("confidence", c)
                        .build(),
                );
            }
        }
    }
    b
}

#[test]
fn roi_meta_detections_start_and_match_objects() {
    let frames = frames(4);
    let (mut h, bus) =
        harness(&[&detector_props("roi-meta")[..], &[("max-objects", "2")]].concat());
    h.set_src_caps_str(&caps("RGB", W, H));
    // Frame 0: a face (new object 1), a car (not a type asked for), a weak face (below 0.5).
    let b0 = with_rois(
        &frames[0],
        0,
        &[
            ("face", 35, 57, 58, 51, Some(0.9)),
            ("car", 150, 20, 40, 40, None),
            ("face", 180, 100, 30, 30, Some(0.2)),
        ],
    );
    let o0 = h.push_and_pull(b0).expect("out");
    // Where object 1 is now: its tracked mask's box (what detections are matched against).
    let (_, (x, y, w, hh), _) = rois(&o0)
        .into_iter()
        .find(|(id, _, _)| *id == 1)
        .expect("object 1 visible on frame 0");
    // Frame 1: the same face a little further on (matched: no new object) and a person (new 2).
    let b1 = with_rois(
        &frames[1],
        1,
        &[
            ("face", x + 2, y + 1, w, hh, Some(0.8)),
            ("person", 150, 5, 60, 50, Some(0.7)),
        ],
    );
    h.push_and_pull(b1).expect("out");
    // Frame 2: a third, far from both, is refused (max-objects 2).
    let b2 = with_rois(&frames[2], 2, &[("person", 10, 130, 20, 20, None)]);
    h.push_and_pull(b2).expect("out");
    let msgs = tracking_messages(&bus);
    assert_eq!(msgs.len(), 3);
    assert_eq!(decisions(&msgs[0]), [("new".to_string(), 1)]);
    assert_eq!(ids(&msgs[0]), [1]);
    let d1 = decisions(&msgs[1]);
    assert_eq!(d1[0], ("matched".to_string(), 1), "{d1:?}");
    assert_eq!(d1[1], ("new".to_string(), 2), "{d1:?}");
    assert_eq!(ids(&msgs[1]), [1, 2]);
    assert_eq!(decisions(&msgs[2]), [("refused".to_string(), 0)]);
    // Objects carry their detector's class; the detector's own metas stay on the buffer.
    let labels: Vec<String> = objects(&msgs[1])
        .iter()
        .map(|o| o.get::<String>("label").expect("label"))
        .collect();
    assert_eq!(labels, ["face", "person"]);
    let faces = o0
        .iter_meta::<gst_video::VideoRegionOfInterestMeta>()
        .filter(|m| m.roi_type() == "face")
        .count();
    assert_eq!(faces, 2);
}
