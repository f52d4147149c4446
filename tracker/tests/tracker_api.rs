//! The streaming API on the fixture weights at 256: prompts, object management, bad input, and
//! that tracking state stays flat over a long stream.

#[path = "common/scene.rs"]
mod scene;

use std::sync::Arc;

use candle_core::Device;
use edgetam_tracker::{EdgeTam, EdgeTamConfig, Error, Mask, Point, PointLabel, Prompt, Tracker};

fn model() -> Arc<EdgeTam> {
    Arc::new(scene::model_256())
}

/// A deterministic 96x64 frame that changes with `t`.
fn frame(t: usize) -> (Vec<u8>, usize, usize) {
    let (w, h) = (96, 64);
    (scene::frame_sized(t, w, h), w, h)
}

#[test]
fn tracks_objects_added_at_any_time() {
    let mut tr = Tracker::new(model());
    tr.add_prompt(1, 0, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
        .unwrap();
    tr.add_prompt(
        2,
        0,
        Prompt::from_points(vec![
            Point {
                x: 70.0,
                y: 20.0,
                label: PointLabel::Positive,
            },
            Point {
                x: 10.0,
                y: 50.0,
                label: PointLabel::Negative,
            },
        ]),
    )
    .unwrap();
    let (f, w, h) = frame(0);
    let r = tr.track(&f, w, h).unwrap();
    assert_eq!(r.frame_index, 0);
    assert_eq!(
        r.objects.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(r
        .objects
        .iter()
        .all(|o| o.prompted && o.mask.data.len() == w * h));
    // Object 3 joins on frame 2 with a mask.
    for t in 1..5 {
        if t == 2 {
            let mut m = vec![0u8; w * h];
            m[10 * w + 10..10 * w + 30].fill(1);
            tr.add_prompt(3, 2, Mask::new(w, h, m).unwrap()).unwrap();
        }
        let (f, w, h) = frame(t);
        let r = tr.track(&f, w, h).unwrap();
        assert_eq!(r.frame_index, t as u64);
        let ids: Vec<u32> = r.objects.iter().map(|o| o.id).collect();
        assert_eq!(ids, if t < 2 { vec![1, 2] } else { vec![1, 2, 3] });
        for o in &r.objects {
            assert_eq!(o.prompted, t == 2 && o.id == 3);
            assert_eq!(o.visible, o.score > 0.0);
            assert_eq!(o.low_res_logits.dims(), &[1, 1, 64, 64]);
            assert_eq!(o.area, o.mask.area());
            if !o.prompted {
                assert!(o.multimask, "tracked frames decode three candidates");
            }
        }
    }
    // A prompt on the current frame is applied by refresh.
    tr.add_prompt(
        1,
        4,
        Prompt::from_points(vec![Point {
            x: 40.0,
            y: 30.0,
            label: PointLabel::Positive,
        }]),
    )
    .unwrap();
    let r = tr.refresh().unwrap();
    assert_eq!(r.frame_index, 4);
    assert_eq!(r.objects.len(), 3);
    assert!(tr.remove_object(2));
    assert!(!tr.remove_object(2));
    let (f, w, h) = frame(5);
    let r = tr.track(&f, w, h).unwrap();
    assert_eq!(
        r.objects.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![1, 3]
    );
    tr.reset();
    assert_eq!(tr.next_frame_index(), 0);
    let r = tr.track(&f, w, h).unwrap();
    assert!(r.objects.is_empty());
}

#[test]
fn bad_prompts_and_frames_are_named_and_the_stream_goes_on() {
    let mut tr = Tracker::new(model());
    let err = tr
        .add_prompt(1, 3, Prompt::from_box(1.0, 1.0, 5.0, 5.0))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidPrompt(_)), "{err}");
    assert!(err.to_string().contains("frame 3"), "{err}");
    assert!(tr.add_prompt(1, 0, Prompt::default()).is_err());
    // Out of the frame: rejected when the frame arrives, and dropped.
    tr.add_prompt(1, 0, Prompt::from_box(10.0, 10.0, 500.0, 20.0))
        .unwrap();
    let (f, w, h) = frame(0);
    let err = tr.track(&f, w, h).unwrap_err();
    assert!(err.to_string().contains("outside"), "{err}");
    // A truncated frame is an error, not a panic.
    tr.add_prompt(1, 0, Prompt::from_box(10.0, 10.0, 50.0, 40.0))
        .unwrap();
    assert!(tr.track(&f[..100], w, h).is_err());
    let r = tr.track(&f, w, h).unwrap();
    assert_eq!(r.objects.len(), 1);
    // Known frame size: checked immediately.
    let err = tr
        .add_prompt(2, 1, Mask::new(10, 10, vec![1; 100]).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("mask prompt is 10x10"), "{err}");
    assert!(Mask::new(4, 4, vec![0; 3]).is_err());
    assert!(tr.refresh().is_ok());
}

#[test]
fn memory_stays_flat_over_a_long_stream() {
    let mut tr = Tracker::new(model());
    tr.add_prompt(1, 0, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
        .unwrap();
    tr.add_prompt(2, 0, Prompt::from_box(50.0, 10.0, 90.0, 60.0))
        .unwrap();
    let (f, w, h) = frame(0);
    tr.track(&f, w, h).unwrap();
    let (slots, bytes) = (tr.memory_slots(), tr.memory_bytes());
    // 2 objects x ((16 prompted + 7 recent) memories + (16 + 16) pointers).
    assert_eq!(slots, 2 * ((16 + 7) + (16 + 16)));
    for t in 1..40 {
        let (f, w, h) = frame(t % 7);
        tr.track(&f, w, h).unwrap();
        assert_eq!(
            (tr.memory_slots(), tr.memory_bytes()),
            (slots, bytes),
            "frame {t}"
        );
    }
}

/// A model input size whose memory grid the perceiver cannot window segments single images but
/// refuses to track, with a message naming the size (not an error from deep inside a frame).
#[test]
fn sizes_that_cannot_track_are_refused_at_the_first_prompt() {
    let cfg = EdgeTamConfig::with_image_size(128).expect("config");
    let model = Arc::new(EdgeTam::random(cfg, 0, &Device::Cpu).expect("model"));
    let mut tracker = Tracker::new(model);
    let err = tracker
        .add_prompt(1, 0, Prompt::from_box(10.0, 10.0, 40.0, 40.0))
        .expect_err("128 cannot track");
    let msg = err.to_string();
    assert!(
        msg.contains("image_size 128 cannot track") && msg.contains("multiple of 256"),
        "{msg}"
    );
}

/// Every frame reports where its time went: the prompted frame runs no memory attention, a
/// tracked frame runs every stage, and an empty frame (no objects) runs none.
#[test]
fn frame_results_carry_stage_times() {
    use std::time::Duration;
    let mut tracker = Tracker::new(model());
    let (rgb, w, h) = frame(0);
    let empty = tracker.track(&rgb, w, h).expect("empty frame");
    assert_eq!(empty.times.total(), Duration::ZERO);
    tracker
        .add_prompt(1, 1, Prompt::from_box(18.0, 20.0, 44.0, 42.0))
        .expect("prompt");
    let (rgb, w, h) = frame(1);
    let prompted = tracker.track(&rgb, w, h).expect("prompted frame");
    let t = prompted.times;
    assert!(t.preprocess > Duration::ZERO && t.image_encoder > Duration::ZERO);
    assert!(t.mask_decoder > Duration::ZERO && t.memory_encoder > Duration::ZERO);
    assert!(t.postprocess > Duration::ZERO);
    assert_eq!(
        t.memory_attention,
        Duration::ZERO,
        "no memory to attend to yet"
    );
    let (rgb, w, h) = frame(2);
    let tracked = tracker.track(&rgb, w, h).expect("tracked frame");
    for (name, d) in edgetam_tracker::StageTimes::NAMES
        .iter()
        .zip(tracked.times.as_array())
    {
        assert!(d > Duration::ZERO, "{name} took no time on a tracked frame");
    }
    assert_eq!(
        tracked.times.total(),
        tracked.times.as_array().iter().sum::<Duration>()
    );
}
