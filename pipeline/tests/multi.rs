//! The multi-stream pipeline on the 256 fixture weights: each stream byte-identical to a lone
//! `Tracker` (two and three streams of different frame sizes, interleaved, with and without a
//! batched image encoder), fairness under a flooding stream, streams added and removed while
//! others run, and bad input confined to its stream.
//!
//! The batched encoder gives each image the bytes a lone call gives it (the tracker's
//! `model/batch_encoder_tests.rs`), so the byte-identity here holds with batches too.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{fingerprint, frame_sized, model, within};
use edgetam_pipeline::{
    DropPolicy, Error, Frame, MultiPipeline, Outcome, PixelFormat, StreamId, StreamOptions,
    StreamOutput,
};
use edgetam_tracker::{ObjectPrompt, Point, PointLabel, Prompt, Tracker};

/// One stream's scene: its frame size and what is done before each of its frames.
#[derive(Clone, Copy)]
struct Scene {
    w: usize,
    h: usize,
    /// Shifts the script and the picture, so that streams differ.
    k: usize,
}

enum Cmd {
    Add(u32, ObjectPrompt),
    Remove(u32),
    Reset,
}

impl Scene {
    fn frame(&self, t: usize) -> Vec<u8> {
        frame_sized(t + 3 * self.k, self.w, self.h)
    }

    fn script(&self, t: usize) -> Vec<Cmd> {
        let (w, h) = (self.w as f32, self.h as f32);
        let k = self.k;
        if t == k {
            vec![Cmd::Add(1, Prompt::from_box(18.0, 20.0, 44.0, 40.0).into())]
        } else if t == k + 1 {
            let p = Point {
                x: w * 0.7,
                y: h * 0.3,
                label: PointLabel::Positive,
            };
            vec![Cmd::Add(2, Prompt::from_points(vec![p]).into())]
        } else if t == k + 3 {
            vec![Cmd::Remove(2)]
        } else if t == 5 && k == 1 {
            vec![
                Cmd::Reset,
                Cmd::Add(4, Prompt::from_box(10.0, 8.0, w - 20.0, h - 10.0).into()),
            ]
        } else {
            vec![]
        }
    }
}

const SCENES: [Scene; 3] = [
    Scene { w: 96, h: 64, k: 0 },
    Scene {
        w: 128,
        h: 80,
        k: 1,
    },
    Scene { w: 64, h: 64, k: 2 },
];
const FRAMES: usize = 6;

/// The scene's frames through a lone `Tracker`.
fn lone(scene: Scene, frames: usize) -> Vec<Vec<u8>> {
    let mut tr = Tracker::new(model());
    (0..frames)
        .map(|t| {
            for c in scene.script(t) {
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
            let rgb = scene.frame(t);
            fingerprint(&tr.track(&rgb, scene.w, scene.h).expect("track"))
        })
        .collect()
}

/// Sends frame `t` of `scene` to `stream`, after its commands.
fn feed(p: &MultiPipeline, stream: StreamId, scene: Scene, t: usize) -> u64 {
    for c in scene.script(t) {
        match c {
            Cmd::Add(o, pr) => p.add_prompt(stream, o, pr).expect("prompt"),
            Cmd::Remove(o) => p.remove_object(stream, o).expect("remove"),
            Cmd::Reset => p.reset(stream).expect("reset"),
        }
    }
    let f = Frame::rgb8(scene.frame(t), scene.w, scene.h)
        .with_timestamp(Duration::from_millis(t as u64));
    p.push(stream, f).expect("push")
}

/// Every output, per stream, in the order they came.
fn by_stream(outputs: Vec<StreamOutput>) -> HashMap<StreamId, Vec<StreamOutput>> {
    let mut m: HashMap<StreamId, Vec<StreamOutput>> = HashMap::new();
    for o in outputs {
        m.entry(o.stream).or_default().push(o);
    }
    m
}

/// Fingerprints of a stream's outputs, checking ids, timestamps and that each was tracked.
fn tracked(outs: &[StreamOutput]) -> Vec<Vec<u8>> {
    outs.iter()
        .enumerate()
        .map(|(i, o)| {
            assert_eq!(o.output.id, i as u64, "{}: results in push order", o.stream);
            assert_eq!(o.output.timestamp, Some(Duration::from_millis(i as u64)));
            assert!(o.output.command_errors.is_empty());
            match &o.output.outcome {
                Outcome::Tracked(r) => fingerprint(r),
                other => panic!("{} frame {i}: {other:?}", o.stream),
            }
        })
        .collect()
}

/// `scenes` fed interleaved (frame t of every stream, then t + 1) to one pipeline.
fn run_interleaved(scenes: &[Scene], max_batch: usize) {
    let p = MultiPipeline::builder(model())
        .max_batch(max_batch)
        .threads(1)
        .build()
        .expect("pipeline");
    let ids: Vec<StreamId> = scenes
        .iter()
        .map(|_| p.add_stream(StreamOptions::default().queue_capacity(2)))
        .collect::<Result<_, _>>()
        .expect("streams");
    let outputs = std::thread::scope(|s| {
        let reader = s.spawn(|| p.results().collect::<Result<Vec<_>, _>>());
        for t in 0..FRAMES {
            for (&id, &scene) in ids.iter().zip(scenes) {
                assert_eq!(feed(&p, id, scene, t), t as u64);
            }
        }
        p.finish();
        reader.join().expect("reader").expect("results")
    });
    let mut per = by_stream(outputs);
    for (id, &scene) in ids.iter().zip(scenes) {
        let outs = per.remove(id).expect("outputs of the stream");
        assert_eq!(outs.len(), FRAMES);
        assert!(
            tracked(&outs) == lone(scene, FRAMES),
            "{id} differs from a lone Tracker (max_batch {max_batch})"
        );
        let stats = p.stats(*id).expect("stats");
        assert_eq!(
            (stats.frames_in, stats.frames_out, stats.frames_dropped),
            (FRAMES as u64, FRAMES as u64, 0)
        );
    }
    assert!(per.is_empty());
    let batched = p.batched_encoder_calls();
    match max_batch {
        1 => assert_eq!(batched, 0),
        // Pushes outrun tracking, so rounds hold frames of several streams.
        _ => assert!(batched > 0, "no encoder call ran on more than one frame"),
    }
}

#[test]
fn two_streams_match_lone_trackers_byte_for_byte() {
    within(600, || run_interleaved(&SCENES[..2], 4));
}

#[test]
fn three_streams_match_lone_trackers_batched_or_not() {
    within(600, || {
        run_interleaved(&SCENES, 4);
        run_interleaved(&SCENES, 1);
    });
}

/// Stream `flood` pushes as fast as it can while stream `slow` pushes its next frame only once
/// its previous result came back. Returns every output in arrival order and, per slow frame,
/// how many frames of the flooded stream were tracked between its push and its result.
fn flood_and_trickle(
    p: &MultiPipeline,
    flood: StreamId,
    slow: StreamId,
    slow_frames: usize,
) -> (Vec<StreamOutput>, Vec<u64>) {
    let scene = SCENES[0];
    let flood_tracked = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (slow_tx, slow_rx) = crossbeam_channel::unbounded::<u64>();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut all = Vec::new();
            for o in p.results() {
                let o = o.expect("result");
                if o.stream == flood && o.output.result().is_some() {
                    flood_tracked.fetch_add(1, Ordering::SeqCst);
                }
                if o.stream == slow {
                    let _ = slow_tx.send(flood_tracked.load(Ordering::SeqCst));
                }
                all.push(o);
            }
            all
        });
        let flooder = s.spawn(|| {
            let mut t = 0;
            while !stop.load(Ordering::SeqCst) {
                let f = Frame::rgb8(scene.frame(t % 8), scene.w, scene.h);
                match p.push(flood, f) {
                    Ok(_) => t += 1,
                    Err(e) => panic!("flood push: {e}"),
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let mut waits = Vec::new();
        for t in 0..slow_frames {
            let before = flood_tracked.load(Ordering::SeqCst);
            let f = Frame::rgb8(SCENES[2].frame(t), SCENES[2].w, SCENES[2].h)
                .with_timestamp(Duration::from_millis(t as u64));
            assert_eq!(p.push(slow, f).expect("slow push"), t as u64);
            let after = slow_rx
                .recv_timeout(Duration::from_secs(120))
                .expect("the slow stream's result (starved?)");
            waits.push(after - before);
        }
        stop.store(true, Ordering::SeqCst);
        flooder.join().expect("flooder");
        p.finish();
        (reader.join().expect("reader"), waits)
    })
}

/// Under the live policy the flooded stream drops (counted on it alone) and the slow stream's
/// every frame is tracked, each within a round or two of flooded frames.
#[test]
fn a_flooded_live_stream_does_not_starve_a_slow_one() {
    within(600, || {
        let p = MultiPipeline::builder(model())
            .threads(1)
            .build()
            .expect("pipeline");
        let flood = p.add_stream(StreamOptions::live()).expect("stream");
        let slow = p.add_stream(StreamOptions::live()).expect("stream");
        p.add_prompt(flood, 1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
            .expect("prompt");
        p.add_prompt(slow, 1, Prompt::from_box(10.0, 10.0, 40.0, 40.0))
            .expect("prompt");
        let (all, waits) = flood_and_trickle(&p, flood, slow, 5);
        let per = by_stream(all);
        let slow_out = &per[&slow];
        assert_eq!(slow_out.len(), 5);
        assert!(slow_out.iter().all(|o| o.output.result().is_some()));
        let flood_out = &per[&flood];
        let dropped = flood_out.iter().filter(|o| o.output.is_dropped()).count() as u64;
        let tracked = flood_out
            .iter()
            .filter(|o| o.output.result().is_some())
            .count();
        assert!(dropped > 0, "the flooded stream dropped nothing");
        assert!(tracked > 0, "the flooded stream was never tracked");
        // Ids of the flooded stream stay in push order, drops included.
        let ids: Vec<u64> = flood_out.iter().map(|o| o.output.id).collect();
        assert_eq!(ids, (0..ids.len() as u64).collect::<Vec<_>>());
        let (fs, ss) = (
            p.stats(flood).expect("stats"),
            p.stats(slow).expect("stats"),
        );
        assert_eq!(fs.frames_dropped, dropped);
        assert_eq!(fs.frames_in, ids.len() as u64);
        assert_eq!((ss.frames_dropped, ss.frames_out), (0, 5));
        eprintln!("flooded frames tracked per slow frame: {waits:?}");
        assert!(
            waits.iter().all(|&w| w <= 4),
            "slow stream waited {waits:?}"
        );
    });
}

/// A flooded stream with a deep blocking queue (12 frames) does not put its backlog in front
/// of another stream: a first-in-first-out queue would make each slow frame wait about 12
/// flooded frames; round-robin makes it wait a few at most.
#[test]
fn a_backlogged_stream_does_not_delay_another() {
    within(600, || {
        let p = MultiPipeline::builder(model())
            .threads(1)
            .build()
            .expect("pipeline");
        let flood = p
            .add_stream(StreamOptions::default().queue_capacity(12))
            .expect("stream");
        let slow = p.add_stream(StreamOptions::live()).expect("stream");
        p.add_prompt(flood, 1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
            .expect("prompt");
        p.add_prompt(slow, 1, Prompt::from_box(10.0, 10.0, 40.0, 40.0))
            .expect("prompt");
        let (all, waits) = flood_and_trickle(&p, flood, slow, 4);
        let per = by_stream(all);
        assert_eq!(per[&slow].len(), 4);
        assert!(per[&flood].iter().all(|o| o.output.result().is_some()));
        assert_eq!(p.stats(flood).expect("stats").frames_dropped, 0);
        eprintln!("flooded frames tracked per slow frame: {waits:?}");
        assert!(
            waits.iter().all(|&w| w <= 5),
            "slow stream waited {waits:?}"
        );
    });
}

/// A stream removed while others run: its queued frames are discarded, nothing of it comes
/// out after the removal returned, its id is refused from then on; a stream added while others
/// run starts from its first frame. The streams that stay match lone trackers throughout.
#[test]
fn streams_come_and_go_while_others_run() {
    within(600, || {
        let p = MultiPipeline::builder(model())
            .threads(1)
            .build()
            .expect("pipeline");
        let a = p.add_stream(StreamOptions::default()).expect("stream");
        let b = p.add_stream(StreamOptions::default()).expect("stream");
        let (sa, sb, sc) = (SCENES[0], SCENES[1], SCENES[2]);
        let (outputs, removed_stats, c) = std::thread::scope(|s| {
            let reader = s.spawn(|| p.results().collect::<Result<Vec<_>, _>>());
            for t in 0..3 {
                feed(&p, a, sa, t);
                feed(&p, b, sb, t);
            }
            let removed_stats = p.remove_stream(b).expect("remove");
            assert!(matches!(
                p.push(b, Frame::rgb8(sb.frame(3), sb.w, sb.h)),
                Err(Error::UnknownStream(n)) if n == b.get()
            ));
            assert!(matches!(p.reset(b), Err(Error::UnknownStream(_))));
            assert!(matches!(p.stats(b), Err(Error::UnknownStream(_))));
            assert!(matches!(p.remove_stream(b), Err(Error::UnknownStream(_))));
            let c = p.add_stream(StreamOptions::default()).expect("stream");
            assert_ne!(c, b, "ids are never reused");
            assert_eq!(p.streams(), vec![a, c]);
            for t in 0..FRAMES {
                if t >= 3 {
                    feed(&p, a, sa, t);
                }
                assert_eq!(feed(&p, c, sc, t), t as u64);
            }
            p.finish();
            let outputs = reader.join().expect("reader").expect("results");
            (outputs, removed_stats, c)
        });
        let mut per = by_stream(outputs);
        assert!(tracked(&per[&a]) == lone(sa, FRAMES), "stream a changed");
        assert!(tracked(&per[&c]) == lone(sc, FRAMES), "the added stream");
        // What came out of b is what its stats counted when it was removed: a prefix of its
        // frames, each as a lone tracker gives it.
        let b_out = per.remove(&b).unwrap_or_default();
        assert_eq!(b_out.len() as u64, removed_stats.frames_out);
        assert_eq!(removed_stats.frames_in, 3);
        let want = lone(sb, b_out.len());
        assert!(tracked(&b_out) == want, "stream b before its removal");
    });
}

/// Bad input on one stream: a frame with a bad layout is refused by `push` (no id, nothing
/// queued), a frame the tracker fails on (a prompt outside it) is a failed outcome of that
/// stream only; the other stream, sharing the failing frame's encoder batch, is untouched.
#[test]
fn bad_input_stays_on_its_stream() {
    within(600, || {
        let p = MultiPipeline::builder(model())
            .threads(1)
            .build()
            .expect("pipeline");
        let good = p.add_stream(StreamOptions::default()).expect("stream");
        let bad = p.add_stream(StreamOptions::default()).expect("stream");
        let (sg, sb) = (SCENES[0], SCENES[0]);
        let rgb = sb.frame(0);
        assert!(matches!(
            p.push(bad, Frame::rgb8(&rgb[..10], sb.w, sb.h)),
            Err(Error::InvalidFrame(_))
        ));
        assert!(matches!(
            p.push(bad, Frame::new(&rgb[..], sb.w + 1, sb.h, PixelFormat::Nv12)),
            Err(Error::InvalidFrame(_))
        ));
        assert!(matches!(
            p.add_prompt(bad, 1, Prompt::from_points(vec![])),
            Err(Error::InvalidCommand(_))
        ));
        let gone = p.add_stream(StreamOptions::default()).expect("stream");
        p.remove_stream(gone).expect("remove");
        assert!(matches!(
            p.push(gone, Frame::rgb8(&rgb[..], sb.w, sb.h)),
            Err(Error::UnknownStream(_))
        ));
        // Frame 0 of `bad` fails (its only prompt is outside it), frame 1 is tracked.
        p.add_prompt(bad, 1, Prompt::from_box(500.0, 500.0, 600.0, 600.0))
            .expect("queued");
        let outputs = std::thread::scope(|s| {
            let reader = s.spawn(|| p.results().collect::<Result<Vec<_>, _>>());
            for t in 0..3 {
                assert_eq!(feed(&p, good, sg, t), t as u64);
                if t == 1 {
                    p.add_prompt(bad, 2, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
                        .expect("prompt");
                }
                if t < 2 {
                    assert_eq!(
                        p.push(bad, Frame::rgb8(sb.frame(t), sb.w, sb.h))
                            .expect("push"),
                        t as u64
                    );
                }
            }
            p.finish();
            reader.join().expect("reader").expect("results")
        });
        let per = by_stream(outputs);
        assert!(tracked(&per[&good]) == lone(sg, 3), "the good stream");
        let b = &per[&bad];
        assert_eq!(b.len(), 2);
        assert!(matches!(
            b[0].output.outcome,
            Outcome::Failed(Error::Tracker(_))
        ));
        let r1 = b[1].output.result().expect("the bad stream goes on");
        assert_eq!(r1.objects.iter().map(|o| o.id).collect::<Vec<_>>(), vec![2]);
        let (gs, bs) = (p.stats(good).expect("stats"), p.stats(bad).expect("stats"));
        assert_eq!((gs.frames_failed, gs.frames_out), (0, 3));
        assert_eq!((bs.frames_in, bs.frames_failed, bs.frames_out), (2, 1, 2));
    });
}

/// Settings refused, and a pipeline dropped with frames queued joins promptly.
#[test]
fn settings_and_shutdown() {
    within(300, || {
        assert!(matches!(
            MultiPipeline::builder(model()).max_batch(0).build(),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            MultiPipeline::builder(model()).threads(0).build(),
            Err(Error::Config(_))
        ));
        let p = MultiPipeline::builder(model()).build().expect("pipeline");
        assert!(matches!(
            p.add_stream(StreamOptions::default().queue_capacity(0)),
            Err(Error::Config(_))
        ));
        let s = p
            .add_stream(
                StreamOptions::default()
                    .drop_policy(DropPolicy::DropNewest)
                    .queue_capacity(1),
            )
            .expect("stream");
        p.add_prompt(s, 1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
            .expect("prompt");
        let rgb = SCENES[0].frame(0);
        for t in 0..6 {
            // The encoder takes one frame, the next waits: the rest are dropped.
            assert_eq!(p.push(s, Frame::rgb8(&rgb[..], 96, 64)).expect("push"), t);
        }
        assert!(p.stats(s).expect("stats").frames_dropped > 0);
        p.close();
    });
}

/// A panic on the tracking thread reaches the caller as `Error::WorkerFailed` and stops every
/// stream; nothing hangs.
#[test]
fn a_worker_panic_is_an_error_not_a_hang() {
    within(120, || {
        let p = MultiPipeline::builder(model())
            .track_hook(std::sync::Arc::new(|id| {
                if id == 1 {
                    panic!("injected fault");
                }
            }))
            .build()
            .expect("pipeline");
        let (a, b) = (
            p.add_stream(StreamOptions::default()).expect("stream"),
            p.add_stream(StreamOptions::default()).expect("stream"),
        );
        let scene = SCENES[0];
        for t in 0..2 {
            p.push(a, Frame::rgb8(scene.frame(t), scene.w, scene.h))
                .expect("push");
        }
        let first = p.recv().expect("frame 0");
        assert_eq!((first.stream, first.output.id), (a, 0));
        match p.recv() {
            Err(Error::WorkerFailed(m)) => assert!(m.contains("injected fault"), "{m}"),
            r => panic!("expected a worker failure, got {r:?}"),
        }
        assert!(matches!(p.recv(), Err(Error::Closed)));
        assert!(matches!(
            p.push(b, Frame::rgb8(scene.frame(0), scene.w, scene.h)),
            Err(Error::WorkerFailed(_))
        ));
        assert!(matches!(
            p.add_stream(StreamOptions::default()),
            Err(Error::WorkerFailed(_))
        ));
    });
}
