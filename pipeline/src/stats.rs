//! Counters and latency percentiles.

use std::time::{Duration, Instant};

/// Latency samples kept per stage (the most recent ones).
const WINDOW: usize = 4096;

/// Time spent in each stage by one frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimings {
    /// From `push` until a worker took the frame off the input queue.
    pub queue: Duration,
    /// Conversion to packed RGB8.
    pub convert: Duration,
    /// Image encoder (zero when no object was tracked, which skips it).
    pub encode: Duration,
    /// Memory attention, mask decoder and memory encoder (the tracker's step after the encoder).
    pub track: Duration,
    /// From `push` until the result was handed to the output queue.
    pub end_to_end: Duration,
}

/// p50 / p95 / max of one stage over the most recent frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// Frames measured in total (percentiles use the most recent 4096).
    pub count: u64,
    pub p50: Duration,
    pub p95: Duration,
    pub max: Duration,
}

/// A snapshot of the pipeline's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Frames accepted by `push` (each got an id).
    pub frames_in: u64,
    /// Results handed out for frames that were processed (tracked or failed), not dropped.
    pub frames_out: u64,
    /// Frames dropped by the drop policy.
    pub frames_dropped: u64,
    /// Processed frames whose result is an error.
    pub frames_failed: u64,
    pub queue: LatencySummary,
    pub convert: LatencySummary,
    pub encode: LatencySummary,
    pub track: LatencySummary,
    pub end_to_end: LatencySummary,
    /// `frames_out` per second between the first push and the latest result.
    pub throughput_fps: f64,
}

#[derive(Default)]
struct Samples {
    count: u64,
    max: Duration,
    ring: Vec<Duration>,
    next: usize,
}

impl Samples {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.max = self.max.max(d);
        if self.ring.len() < WINDOW {
            self.ring.push(d);
        } else {
            self.ring[self.next] = d;
            self.next = (self.next + 1) % WINDOW;
        }
    }

    fn summary(&self) -> LatencySummary {
        let mut v = self.ring.clone();
        v.sort_unstable();
        let pct = |p: usize| -> Duration {
            if v.is_empty() {
                Duration::ZERO
            } else {
                v[((v.len() - 1) * p + 50) / 100]
            }
        };
        LatencySummary {
            count: self.count,
            p50: pct(50),
            p95: pct(95),
            max: self.max,
        }
    }
}

#[derive(Default)]
pub(crate) struct StatsCollector {
    pub frames_in: u64,
    pub frames_out: u64,
    pub frames_dropped: u64,
    pub frames_failed: u64,
    first_push: Option<Instant>,
    last_out: Option<Instant>,
    queue: Samples,
    convert: Samples,
    encode: Samples,
    track: Samples,
    end_to_end: Samples,
}

impl StatsCollector {
    pub fn pushed(&mut self, now: Instant) {
        self.frames_in += 1;
        self.first_push.get_or_insert(now);
    }

    pub fn processed(&mut self, t: &StageTimings, failed: bool) {
        self.frames_out += 1;
        self.frames_failed += u64::from(failed);
        self.last_out = Some(Instant::now());
        self.queue.add(t.queue);
        self.convert.add(t.convert);
        self.encode.add(t.encode);
        self.track.add(t.track);
        self.end_to_end.add(t.end_to_end);
    }

    pub fn snapshot(&self) -> Stats {
        let throughput_fps = match (self.first_push, self.last_out) {
            (Some(a), Some(b)) if b > a => self.frames_out as f64 / (b - a).as_secs_f64(),
            _ => 0.0,
        };
        Stats {
            frames_in: self.frames_in,
            frames_out: self.frames_out,
            frames_dropped: self.frames_dropped,
            frames_failed: self.frames_failed,
            queue: self.queue.summary(),
            convert: self.convert.summary(),
            encode: self.encode.summary(),
            track: self.track.summary(),
            end_to_end: self.end_to_end.summary(),
            throughput_fps,
        }
    }
}
