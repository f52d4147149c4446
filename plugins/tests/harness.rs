//! `edgetamtrack` in a `gst_check::Harness`: caps, metas (masks equal to the library API's),
//! signals, events, flush/EOS, renegotiation, latency, live mode, start errors.

mod common;

use common::{frames, init, library, model_dir, tmp, H, PROMPTS, W};
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

/// Same with `before` (a launch fragment, e.g. `videoconvert ! video/x-raw,format=NV12 !`)
/// in front of the element.
fn harness_with(props: &[(&str, &str)], before: &str) -> (Harness, gst::Bus) {
    init();
    let mut desc = format!(
        "{before} edgetamtrack name=track model=\"{}\"",
        model_dir().display()
    );
    for (k, v) in props {
        desc.push_str(&format!(" {k}=\"{v}\""));
    }
    let h = if before.is_empty() {
        let el = gst::ElementFactory::make("edgetamtrack")
            .property("model", model_dir().display().to_string())
            .build()
            .expect("element");
        for (k, v) in props {
            el.set_property_from_str(k, v);
        }
        Harness::with_element(&el, Some("sink"), Some("src"))
    } else {
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

fn buffer(data: &[u8], i: u64) -> gst::Buffer {
    let mut b = gst::Buffer::from_slice(data.to_vec());
    {
        let b = b.get_mut().expect("writable");
        b.set_pts(gst::ClockTime::from_mseconds(100 * i));
        b.set_duration(gst::ClockTime::from_mseconds(100));
    }
    b
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
    s.get::<gst::Array>("objects")
        .expect("objects")
        .iter()
        .map(|v| {
            v.get::<gst::Structure>()
                .expect("object")
                .get::<u32>("id")
                .expect("id")
        })
        .collect()
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
    let (mut h, bus) = harness(&[("prompts", PROMPTS), ("post-messages", "true")]);
    h.set_src_caps_str(&caps("RGB", W, H));
    for (i, (f, want)) in frames.iter().zip(&expected).enumerate() {
        let out = h.push_and_pull(buffer(f, i as u64)).expect("buffer out");
        // overlay=none: pixels untouched.
        assert_eq!(&*out.map_readable().expect("map"), &f[..]);
        let got = rois(&out);
        let visible: Vec<_> = want
            .objects
            .iter()
            .filter(|o| o.visible && o.bbox.is_some())
            .collect();
        assert!(
            !visible.is_empty(),
            "frame {i}: the fixture must show an object"
        );
        assert_eq!(
            got.len(),
            visible.len(),
            "frame {i}: one ROI per visible object"
        );
        for ((id, rect, p), o) in got.iter().zip(&visible) {
            assert_eq!(*id as u32, o.id);
            let [x0, y0, x1, y1] = o.bbox.expect("box");
            assert_eq!(
                *rect,
                (
                    x0 as u32,
                    y0 as u32,
                    (x1 - x0 + 1) as u32,
                    (y1 - y0 + 1) as u32
                )
            );
            assert_eq!(p.get::<u32>("id").expect("id"), o.id);
            assert_eq!(p.get::<f32>("score").expect("score"), o.score);
            assert!(p.get::<bool>("visible").expect("visible"));
            assert_eq!(p.get::<u64>("area").expect("area"), o.area as u64);
            assert_eq!(p.get::<u32>("mask-width").expect("mw"), W as u32);
            assert_eq!(p.get::<u32>("mask-height").expect("mh"), H as u32);
            let mask = p.get::<gst::Buffer>("mask").expect("mask");
            assert_eq!(
                &*mask.map_readable().expect("map"),
                &o.mask.data[..],
                "frame {i} object {}: mask differs from the library's",
                o.id
            );
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
            let visible = msgs[0]
                .get::<gst::Array>("objects")
                .expect("objects")
                .iter()
                .filter(|v| {
                    v.get::<gst::Structure>()
                        .expect("s")
                        .get::<bool>("visible")
                        .expect("v")
                })
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
    assert!(el.emit_by_name::<bool>("add-box", &[&1u32, &35f64, &57f64, &93f64, &108f64]));
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
    let got: Vec<Vec<u32>> = tracking_messages(&bus).iter().map(ids).collect();
    assert_eq!(got, [vec![1], vec![1, 2], vec![2], vec![2, 3], vec![]]);
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
    assert!(el.emit_by_name::<bool>("add-box", &[&1u32, &35f64, &57f64, &93f64, &108f64]));
    assert!(!el.emit_by_name::<bool>("add-box", &[&2u32, &5f64, &5f64, &50f64, &50f64]));
    // Refining an existing object is fine.
    assert!(el.emit_by_name::<bool>("add-box", &[&1u32, &30f64, &50f64, &90f64, &100f64]));
    h.set_src_caps_str(&caps("RGB", W, H));
    h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    let got: Vec<Vec<u32>> = tracking_messages(&bus).iter().map(ids).collect();
    assert_eq!(got, [vec![1]]);
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
    let got: Vec<Vec<u32>> = tracking_messages(&bus).iter().map(ids).collect();
    assert_eq!(got, [vec![], vec![1], vec![1, 2]]);
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
    let (mut h, bus) = harness(&[("prompts", PROMPTS), ("post-messages", "true")]);
    h.set_src_caps_str(&caps("RGB", W, H));
    h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    h.push_and_pull(buffer(&frames[1], 1)).expect("out");
    assert!(h.push_event(gst::event::FlushStart::new()));
    assert!(h.push_event(gst::event::FlushStop::new(true)));
    let segment = gst::FormattedSegment::<gst::ClockTime>::new();
    assert!(h.push_event(gst::event::Segment::new(&segment)));
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
    let (mut h, bus) = harness(&[("prompts", PROMPTS), ("post-messages", "true")]);
    h.set_src_caps_str(&caps("RGB", W, H));
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

#[test]
fn live_mode_skips_buffers_qos_reports_late() {
    let frames = frames(3);
    let (mut h, bus) = harness(&[
        ("prompts", PROMPTS),
        ("post-messages", "true"),
        ("live-mode", "true"),
    ]);
    h.set_src_caps_str(&caps("RGB", W, H));
    let out = h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    assert!(!rois(&out).is_empty());
    // Downstream says: everything before 10 s is late.
    let qos = gst::event::Qos::new(
        gst::QOSType::Underflow,
        2.0,
        9_000_000_000,
        gst::ClockTime::from_seconds(1),
    );
    assert!(h.push_upstream_event(qos));
    let out = h.push_and_pull(buffer(&frames[1], 1)).expect("out");
    assert!(rois(&out).is_empty(), "a late buffer passes without metas");
    assert_eq!(tracking_messages(&bus).len(), 1);
}

fn start_error(props: &[(&str, &str)]) -> String {
    init();
    let el = gst::ElementFactory::make("edgetamtrack")
        .build()
        .expect("element");
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
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
    let e = start_error(&[("model", dir.to_str().expect("utf-8")), ("precision", "f8")]);
    assert!(e.contains("precision") && e.contains("f8"), "{e}");
}

#[test]
fn live_mode_skips_buffers_that_arrive_late_on_the_clock() {
    let frames = frames(2);
    let (mut h, bus) = harness(&[
        ("prompts", PROMPTS),
        ("post-messages", "true"),
        ("live-mode", "true"),
    ]);
    h.set_src_caps_str(&caps("RGB", W, H));
    // The harness's test clock stands at 0: buffer 0 (running time 0) is on time.
    let out = h.push_and_pull(buffer(&frames[0], 0)).expect("out");
    assert!(!rois(&out).is_empty());
    // 10 s later, buffer 1 (running time 0.1 s, 0.1 s long) is far more than a frame late.
    h.set_time(gst::ClockTime::from_seconds(10))
        .expect("set time");
    let out = h.push_and_pull(buffer(&frames[1], 1)).expect("out");
    assert!(rois(&out).is_empty(), "a late buffer passes without metas");
    assert_eq!(tracking_messages(&bus).len(), 1);
}
