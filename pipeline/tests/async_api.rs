//! The async handle under a multi-threaded tokio runtime.
#![cfg(feature = "tokio")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{frame, model, H, W};
use edgetam_pipeline::{AsyncPipeline, DropPolicy, Frame, Pipeline};
use edgetam_tracker::Prompt;
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_stream_results() {
    let p = AsyncPipeline::new(
        Pipeline::builder(model())
            .queue_capacity(1)
            .encoder_ahead(true)
            .build()
            .expect("pipeline"),
    );
    p.add_prompt(1, Prompt::from_box(18.0, 20.0, 44.0, 40.0))
        .expect("prompt");
    let reader = tokio::spawn({
        let p = p.clone();
        async move { p.results().collect::<Vec<_>>().await }
    });
    for t in 0..5 {
        let id = p.push(Frame::rgb8(frame(t), W, H)).await.expect("push");
        assert_eq!(id, t as u64);
    }
    p.finish();
    let out = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("results in time")
        .expect("reader");
    assert_eq!(out.len(), 5);
    for (i, r) in out.into_iter().enumerate() {
        let r = r.expect("result");
        assert_eq!(r.id, i as u64);
        let fr = r.result().expect("tracked");
        assert_eq!(fr.objects.len(), 1);
        assert_eq!(fr.objects[0].prompted, i == 0);
    }
    let stats = tokio::time::timeout(Duration::from_secs(60), p.close())
        .await
        .expect("close in time");
    assert_eq!(stats.frames_out, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_push_queues_nothing() {
    let (entered_tx, entered) = crossbeam_channel::unbounded();
    let (release, release_rx) = crossbeam_channel::unbounded::<()>();
    let gate = Mutex::new((entered_tx, release_rx));
    let p = AsyncPipeline::new(
        Pipeline::builder(model())
            .queue_capacity(1)
            .drop_policy(DropPolicy::Block)
            .track_hook(Arc::new(move |id| {
                let g = gate.lock().expect("lock");
                let _ = g.0.send(id);
                if id == 0 {
                    let _ = g.1.recv();
                }
            }))
            .build()
            .expect("pipeline"),
    );
    p.push(Frame::rgb8(frame(0), W, H)).await.expect("push");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while entered.try_recv().is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "worker never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    p.push(Frame::rgb8(frame(1), W, H)).await.expect("push");
    // The queue is full: this push waits, and is cancelled by the timeout.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        p.push(Frame::rgb8(frame(2), W, H)),
    )
    .await;
    assert!(cancelled.is_err(), "push should have waited for room");
    release.send(()).expect("release");
    assert_eq!(
        p.push(Frame::rgb8(frame(3), W, H)).await.expect("push"),
        2,
        "the cancelled push took no id"
    );
    p.finish();
    let ids: Vec<u64> = tokio::time::timeout(
        Duration::from_secs(60),
        p.results()
            .map(|r| r.expect("result").id)
            .collect::<Vec<_>>(),
    )
    .await
    .expect("results in time");
    assert_eq!(ids, vec![0, 1, 2]);
    drop(p);
}
