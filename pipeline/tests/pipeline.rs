//! The pipeline on the 256 fixture weights: ordering, drop policies, commands, serial ==
//! encoder-ahead == a serially driven `Tracker`, bad frames, resolution change, faults and
//! shutdown.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{fingerprint, frame, frame_sized, model, within, H, W};
use edgetam_pipeline::{
    DropPolicy, Error, Frame, Outcome, Pipeline, PixelFormat, ResolutionChange,
};
use edgetam_tracker::{Mask, ObjectPrompt, Point, PointLabel, Prompt, Tracker};

/// What happens before frame `t` of the scripted sequence.
enum Cmd {
    Add(u32, ObjectPrompt),
    Remove(u32),
    Reset,
}

fn script(t: usize) -> Vec<Cmd> {
    match t {
        // Frame 0 has no object (the tracker skips the encoder).
        1 => vec![Cmd::Add(1, Prompt::from_box(18.0, 20.0, 44.0, 40.0).into())],
        2 => {
            let mut m = vec![0u8; W * H];
            m[10 * W + 10..10 * W + 30].fill(1);
            m[11 * W + 10..11 * W + 30].fill(1);
            vec![
                Cmd::Add(2, Mask::new(W, H, m).expect("mask").into()),
                Cmd::Add(
                    3,
                    Prompt::from_points(vec![Point {
                        x: 70.0,
                        y: 20.0,
                        label: PointLabel::Positive,
                    }])
                    .into(),
                ),
            ]
        }
        3 => vec![Cmd::Add(1, Prompt::from_box(20.0, 18.0, 48.0, 42.0).into())],
        4 => vec![Cmd::Remove(3)],
        5 => vec![
            Cmd::Reset,
            Cmd::Add(7, Prompt::from_box(30.0, 20.0, 60.0, 44.0).into()),
        ],
        _ => vec![],
    }
}

const FRAMES: usize = 8;

fn run_tracker() -> Vec<Vec<u8>> {
    let mut tr = Tracker::new(model());
    (0..FRAMES)
        .map(|t| {
            for c in script(t) {
                match c {
                    Cmd::Add(o, p) => {
                        let f = tr.next_frame_index();
                        tr.add_prompt(o, f, p).expect("prompt");
                    }
                    Cmd::Remove(o) => {
                        tr.remove_object(o);
                    }
                    Cmd::Reset => tr.reset(),
                }
            }
            fingerprint(&tr.track(&frame(t), W, H).expect("track"))
        })
        .collect()
}

fn run_pipeline(encoder_ahead: bool) -> Vec<Vec<u8>> {
    let mut b = Pipeline::builder(model())
        .encoder_ahead(encoder_ahead)
        .queue_capacity(2);
    if encoder_ahead {
        // Own rayon pools for both workers: results must not change.
        b = b.threads(1);
    }
    let p = b.build().expect("pipeline");
    let mut out = Vec::new();
    let mut ids = Vec::new();
    std::thread::scope(|s| {
        let reader = s.spawn(|| p.results().collect::<Vec<_>>());
        for t in 0..FRAMES {
            for c in script(t) {
                match c {
                    Cmd::Add(o, pr) => p.add_prompt(o, pr).expect("prompt"),
                    Cmd::Remove(o) => p.remove_object(o).expect("remove"),
                    Cmd::Reset => p.reset().expect("reset"),
                }
            }
            let f = Frame::rgb8(frame(t), W, H).with_timestamp(Duration::from_millis(t as u64));
            ids.push(p.push(f).expect("push"));
        }
        p.finish();
        for (i, r) in reader.join().expect("reader").into_iter().enumerate() {
            let r = r.expect("result");
            assert_eq!(r.id, i as u64);
            assert_eq!(r.timestamp, Some(Duration::from_millis(i as u64)));
            assert!(r.command_errors.is_empty(), "{:?}", r.command_errors);
            assert!(!r.resolution_changed);
            match r.outcome {
                Outcome::Tracked(fr) => out.push(fingerprint(&fr)),
                o => panic!("frame {i}: {o:?}"),
            }
        }
    });
    assert_eq!(ids, (0..FRAMES as u64).collect::<Vec<_>>());
    let stats = p.close();
    assert_eq!(stats.frames_in, FRAMES as u64);
    assert_eq!(stats.frames_out, FRAMES as u64);
    assert_eq!(stats.frames_dropped, 0);
    assert_eq!(stats.end_to_end.count, FRAMES as u64);
    assert!(stats.end_to_end.max >= stats.end_to_end.p95);
    assert!(stats.end_to_end.p95 >= stats.end_to_end.p50);
    assert!(stats.throughput_fps > 0.0);
    out
}

#[test]
fn serial_and_encoder_ahead_match_the_tracker_byte_for_byte() {
    let want = run_tracker();
    // The script exercised prompts, a mask, a re-prompt, a removal and a reset.
    assert_eq!(want.len(), FRAMES);
    let serial = run_pipeline(false);
    let ahead = run_pipeline(true);
    for t in 0..FRAMES {
        assert!(
            serial[t] == want[t],
            "serial differs from the tracker at frame {t}"
        );
        assert!(
            ahead[t] == want[t],
            "encoder-ahead differs from the tracker at frame {t}"
        );
    }
}

/// A pipeline whose worker stops before frame 0 until the test lets it go.
struct Gated {
    p: Pipeline,
    entered: crossbeam_channel::Receiver<u64>,
    release: crossbeam_channel::Sender<()>,
}

fn gated(policy: DropPolicy, capacity: usize) -> Gated {
    let (entered_tx, entered) = crossbeam_channel::unbounded();
    let (release, release_rx) = crossbeam_channel::unbounded::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    let p = Pipeline::builder(model())
        .queue_capacity(capacity)
        .drop_policy(policy)
        .track_hook(Arc::new(move |id| {
            let _ = entered_tx.lock().expect("lock").send(id);
            if id == 0 {
                let _ = release_rx.lock().expect("lock").recv();
            }
        }))
        .build()
        .expect("pipeline");
    Gated {
        p,
        entered,
        release,
    }
}

fn push(p: &Pipeline, t: usize) -> u64 {
    p.push(Frame::rgb8(frame(t), W, H)).expect("push")
}

fn drain(p: &Pipeline) -> Vec<edgetam_pipeline::FrameOutput> {
    p.finish();
    p.results().map(|r| r.expect("result")).collect()
}

#[test]
fn drop_oldest_drops_the_oldest_and_keeps_commands() {
    within(120, || {
        let g = gated(DropPolicy::DropOldest, 2);
        assert_eq!(push(&g.p, 0), 0);
        assert_eq!(g.entered.recv().expect("worker"), 0);
        push(&g.p, 1);
        push(&g.p, 2);
        g.p.add_prompt(1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
            .expect("prompt");
        for t in 3..6 {
            assert_eq!(push(&g.p, t), t as u64);
        }
        g.release.send(()).expect("release");
        let out = drain(&g.p);
        let ids: Vec<u64> = out.iter().map(|o| o.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4, 5]);
        let dropped: Vec<u64> = out
            .iter()
            .filter(|o| o.is_dropped())
            .map(|o| o.id)
            .collect();
        assert_eq!(dropped, vec![1, 2, 3]);
        // The prompt queued between frames 2 and 3 applies to the next tracked frame, 4.
        let r4 = out[4].result().expect("frame 4");
        assert_eq!(r4.frame_index, 1);
        assert!(r4.objects.len() == 1 && r4.objects[0].prompted);
        let r5 = out[5].result().expect("frame 5");
        assert!(r5.objects.len() == 1 && !r5.objects[0].prompted);
        let s = g.p.stats();
        assert_eq!((s.frames_in, s.frames_out, s.frames_dropped), (6, 3, 3));
    });
}

#[test]
fn drop_newest_drops_the_new_frames() {
    within(120, || {
        let g = gated(DropPolicy::DropNewest, 2);
        push(&g.p, 0);
        assert_eq!(g.entered.recv().expect("worker"), 0);
        for t in 1..7 {
            assert_eq!(push(&g.p, t), t as u64);
        }
        g.release.send(()).expect("release");
        let out = drain(&g.p);
        assert_eq!(out.len(), 7);
        let kept: Vec<u64> = out
            .iter()
            .filter(|o| !o.is_dropped())
            .map(|o| o.id)
            .collect();
        assert_eq!(kept, vec![0, 1, 2]);
        let s = g.p.stats();
        assert_eq!((s.frames_in, s.frames_out, s.frames_dropped), (7, 3, 4));
    });
}

#[test]
fn block_waits_for_room_and_drops_nothing() {
    within(120, || {
        let g = Arc::new(gated(DropPolicy::Block, 2));
        push(&g.p, 0);
        assert_eq!(g.entered.recv().expect("worker"), 0);
        push(&g.p, 1);
        push(&g.p, 2);
        let (done_tx, done) = std::sync::mpsc::channel();
        let g2 = g.clone();
        let pusher = std::thread::spawn(move || {
            let id = push(&g2.p, 3);
            let _ = done_tx.send(id);
        });
        assert!(
            done.recv_timeout(Duration::from_millis(300)).is_err(),
            "push returned while the queue was full"
        );
        g.release.send(()).expect("release");
        assert_eq!(done.recv_timeout(Duration::from_secs(60)).expect("push"), 3);
        pusher.join().expect("pusher");
        let out = drain(&g.p);
        assert_eq!(
            out.iter().map(|o| o.id).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert!(out.iter().all(|o| o.result().is_some()));
        let s = g.p.stats();
        assert_eq!((s.frames_in, s.frames_out, s.frames_dropped), (4, 4, 0));
    });
}

#[test]
fn bad_frames_and_bad_prompts_do_not_kill_the_stream() {
    within(120, || {
        let p = Pipeline::builder(model()).build().expect("pipeline");
        let rgb = frame(0);
        assert!(matches!(
            p.push(Frame::rgb8(&rgb[..10], W, H)),
            Err(Error::InvalidFrame(_))
        ));
        assert!(matches!(
            p.push(Frame::new(&rgb[..], W + 1, H, PixelFormat::Nv12)),
            Err(Error::InvalidFrame(_))
        ));
        assert!(matches!(
            p.add_prompt(1, Prompt::from_points(vec![])),
            Err(Error::InvalidCommand(_))
        ));
        // A box outside the frame: the frame it is queued for fails, the tracker drops it.
        p.add_prompt(1, Prompt::from_box(500.0, 500.0, 600.0, 600.0))
            .expect("queued");
        assert_eq!(p.push(Frame::rgb8(&rgb[..], W, H)).expect("push"), 0);
        p.add_prompt(2, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
            .expect("prompt");
        assert_eq!(p.push(Frame::rgb8(frame(1), W, H)).expect("push"), 1);
        // Once a frame is tracked, a bad prompt is rejected when applied: a command error.
        p.add_prompt(3, Prompt::from_box(500.0, 500.0, 600.0, 600.0))
            .expect("queued");
        assert_eq!(p.push(Frame::rgb8(frame(2), W, H)).expect("push"), 2);
        let out = drain(&p);
        assert!(matches!(out[0].outcome, Outcome::Failed(Error::Tracker(_))));
        let r1 = out[1].result().expect("frame 1 tracked");
        assert_eq!(r1.frame_index, 0);
        assert_eq!(r1.objects.iter().map(|o| o.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(out[2].command_errors.len(), 1);
        let r2 = out[2].result().expect("frame 2 tracked");
        assert_eq!(r2.objects.iter().map(|o| o.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(p.stats().frames_failed, 1);
    });
}

#[test]
fn resolution_change_resets_tracking() {
    within(120, || {
        let p = Pipeline::builder(model()).build().expect("pipeline");
        p.add_prompt(1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
            .expect("prompt");
        p.push(Frame::rgb8(frame(0), W, H)).expect("push");
        p.push(Frame::rgb8(frame(1), W, H)).expect("push");
        // Smaller frames; the prompt queued before the first of them survives the reset.
        p.add_prompt(5, Prompt::from_box(4.0, 4.0, 30.0, 30.0))
            .expect("prompt");
        p.push(Frame::rgb8(frame_sized(2, 64, 48), 64, 48))
            .expect("push");
        p.push(Frame::rgb8(frame_sized(3, 64, 48), 64, 48))
            .expect("push");
        let out = drain(&p);
        assert!(!out[1].resolution_changed);
        assert!(out[2].resolution_changed);
        assert!(!out[3].resolution_changed);
        let r2 = out[2].result().expect("tracked");
        assert_eq!((r2.frame_index, r2.width, r2.height), (0, 64, 48));
        assert_eq!(r2.objects.iter().map(|o| o.id).collect::<Vec<_>>(), vec![5]);
        assert_eq!(out[3].result().expect("tracked").frame_index, 1);
    });
}

#[test]
fn resolution_change_can_keep_tracking() {
    within(120, || {
        let p = Pipeline::builder(model())
            .resolution_change(ResolutionChange::Continue)
            .build()
            .expect("pipeline");
        p.add_prompt(1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
            .expect("prompt");
        p.push(Frame::rgb8(frame(0), W, H)).expect("push");
        p.push(Frame::rgb8(frame_sized(1, 64, 48), 64, 48))
            .expect("push");
        let out = drain(&p);
        assert!(out[1].resolution_changed);
        let r = out[1].result().expect("tracked");
        assert_eq!((r.frame_index, r.width, r.height), (1, 64, 48));
        assert!(r.objects.len() == 1 && !r.objects[0].prompted);
    });
}

#[test]
fn other_pixel_formats_are_converted() {
    within(60, || {
        let p = Pipeline::builder(model()).build().expect("pipeline");
        let rgb = frame(0);
        let bgra: Vec<u8> = rgb
            .chunks_exact(3)
            .flat_map(|c| [c[2], c[1], c[0], 255])
            .collect();
        p.push(Frame::new(bgra, W, H, PixelFormat::Bgra8))
            .expect("push");
        p.push(Frame::new(
            vec![128u8; W * H * 3 / 2],
            W,
            H,
            PixelFormat::I420,
        ))
        .expect("push");
        let out = drain(&p);
        assert!(out.iter().all(|o| o.result().is_some()));
    });
}

#[test]
fn a_worker_panic_is_an_error_not_a_hang() {
    within(120, || {
        let p = Pipeline::builder(model())
            .track_hook(Arc::new(|id| {
                if id == 1 {
                    panic!("injected fault");
                }
            }))
            .build()
            .expect("pipeline");
        p.push(Frame::rgb8(frame(0), W, H)).expect("push");
        p.push(Frame::rgb8(frame(1), W, H)).expect("push");
        assert!(p.recv().expect("frame 0").result().is_some());
        match p.recv() {
            Err(Error::WorkerFailed(m)) => assert!(m.contains("injected fault"), "{m}"),
            r => panic!("expected a worker failure, got {r:?}"),
        }
        assert!(matches!(p.recv(), Err(Error::Closed)));
        assert!(matches!(
            p.push(Frame::rgb8(frame(2), W, H)),
            Err(Error::WorkerFailed(_))
        ));
        drop(p);
    });
}

#[test]
fn shutdown_under_load_joins_promptly() {
    for encoder_ahead in [false, true] {
        within(120, move || {
            let p = Pipeline::builder(model())
                .encoder_ahead(encoder_ahead)
                .queue_capacity(3)
                .drop_policy(DropPolicy::DropOldest)
                .build()
                .expect("pipeline");
            p.add_prompt(1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
                .expect("prompt");
            for t in 0..20 {
                p.push(Frame::rgb8(frame(t), W, H)).expect("push");
            }
            // Read one result so the workers are busy, then drop with frames queued.
            let first = p.recv_timeout(Duration::from_secs(60)).expect("result");
            assert_eq!(first.id, 0);
            drop(p);
        });
    }
    // A pusher blocked on a full queue is released by `finish` with `Closed`.
    within(120, || {
        let g = Arc::new(gated(DropPolicy::Block, 1));
        push(&g.p, 0);
        g.entered.recv().expect("worker");
        push(&g.p, 1);
        let g2 = g.clone();
        let pusher = std::thread::spawn(move || g2.p.push(Frame::rgb8(frame(2), W, H)));
        std::thread::sleep(Duration::from_millis(100));
        g.p.finish();
        assert!(matches!(pusher.join().expect("pusher"), Err(Error::Closed)));
        g.release.send(()).expect("release");
        let out: Vec<_> = g.p.results().collect();
        assert_eq!(out.len(), 2);
    });
}

#[test]
fn recv_variants() {
    within(60, || {
        let p = Pipeline::builder(model()).build().expect("pipeline");
        assert!(matches!(p.try_recv(), Ok(None)));
        assert!(matches!(
            p.recv_timeout(Duration::from_millis(10)),
            Err(Error::Timeout(_))
        ));
        p.push(Frame::rgb8(frame(0), W, H)).expect("push");
        assert_eq!(
            p.recv_timeout(Duration::from_secs(30)).expect("result").id,
            0
        );
        p.finish();
        assert!(matches!(p.recv(), Err(Error::Closed)));
        assert!(matches!(p.try_recv(), Err(Error::Closed)));
        assert!(matches!(
            Pipeline::builder(model()).queue_capacity(0).build(),
            Err(Error::Config(_))
        ));
    });
}
