//! Time in the element: the latency it reports, its throughput, downstream QoS, and the live
//! mode's judgement of whether a buffer can be tracked in time.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Tracked buffers the `fps` statistic looks back on.
const FPS_WINDOW: usize = 30;
/// Tracked buffers the reported latency looks back on.
const LATENCY_WINDOW: usize = 16;

pub fn clock_time(d: Duration) -> gst::ClockTime {
    gst::ClockTime::from_nseconds(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What the element measured of its tracked buffers.
#[derive(Debug, Default)]
pub struct Stats {
    /// Per tracked buffer: the time the tracker was busy with it (its processing time, or the
    /// time since the previous result when buffers overlap).
    busy: VecDeque<Duration>,
    /// Per tracked buffer: push into the tracking pipeline -> result.
    processing: VecDeque<Duration>,
    last_result: Option<Instant>,
    /// The latency answered to LATENCY queries.
    pub latency: gst::ClockTime,
    pub tracked: u64,
    pub skipped: u64,
}

fn push(q: &mut VecDeque<Duration>, d: Duration, cap: usize) {
    q.push_back(d);
    while q.len() > cap {
        q.pop_front();
    }
}

impl Stats {
    /// Records a tracked buffer whose result came `processing` after it entered the tracking
    /// pipeline. The reported latency is the longest recent processing time plus `margin` (a
    /// frame in live mode: a buffer waits for the one before it). Time spent blocked downstream
    /// (a sink waiting for a buffer's time) is not the element's and is not counted, or the
    /// latency would feed on itself. Returns whether it changed enough to post a LATENCY
    /// message (it first became known, grew by more than 20 % or halved).
    pub fn record(&mut self, processing: Duration, margin: gst::ClockTime) -> bool {
        let now = Instant::now();
        let busy = self
            .last_result
            .map_or(processing, |t| processing.min(now.duration_since(t)));
        self.last_result = Some(now);
        push(&mut self.busy, busy, FPS_WINDOW);
        push(&mut self.processing, processing, LATENCY_WINDOW);
        self.tracked += 1;
        let longest = self.processing.iter().max().copied().unwrap_or_default();
        let new = clock_time(longest) + margin;
        let old = self.latency;
        let changed = old.is_zero() || new > old + old / 5 || new < old / 2;
        if changed {
            self.latency = new;
        }
        changed
    }

    /// Tracked buffers per second of tracker time.
    pub fn fps(&self) -> f64 {
        let total: f64 = self.busy.iter().map(Duration::as_secs_f64).sum();
        if total > 0.0 {
            self.busy.len() as f64 / total
        } else {
            0.0
        }
    }

    /// The longest recent processing time (push -> result), `None` before the first result.
    pub fn processing_estimate(&self) -> Option<gst::ClockTime> {
        self.processing.iter().max().copied().map(clock_time)
    }
}

/// The last QoS event from downstream: buffers whose running time is before `earliest` will
/// be late.
#[derive(Debug, Default, Clone, Copy)]
pub struct Qos {
    pub earliest: Option<gst::ClockTime>,
}

impl Qos {
    /// From a QoS event's `diff` and `timestamp`.
    pub fn update(&mut self, diff: i64, timestamp: Option<gst::ClockTime>) {
        self.earliest = timestamp.map(|ts| {
            if diff > 0 {
                ts + gst::ClockTime::from_nseconds(diff as u64)
            } else {
                ts
            }
        });
    }

    /// Whether a buffer at `running_time`, leaving `latency` later, will be late downstream.
    pub fn late(&self, running_time: gst::ClockTime, latency: gst::ClockTime) -> bool {
        self.earliest
            .is_some_and(|earliest| running_time + latency < earliest)
    }
}

/// The live mode's question for one buffer, all times on the pipeline clock (running time):
/// can the tracker have its result out in time?
#[derive(Debug, Clone, Copy)]
pub struct LiveCheck {
    /// The buffer's running time.
    pub running_time: gst::ClockTime,
    /// The running time now.
    pub now: gst::ClockTime,
    /// Upstream's minimum latency (what the source adds, e.g. a frame for a camera).
    pub upstream: gst::ClockTime,
    /// The latency the element reports.
    pub ours: gst::ClockTime,
    /// How long tracking takes (the longest recent processing time).
    pub processing: Option<gst::ClockTime>,
}

impl LiveCheck {
    /// The buffer must be out by `running_time + upstream + ours` (when the sinks, which wait
    /// that long, render it); tracking it now would have it out at `now + processing`. Before
    /// the first result (nothing measured) a buffer is always tracked.
    pub fn in_time(&self) -> bool {
        let (Some(processing), false) = (self.processing, self.ours.is_zero()) else {
            return true;
        };
        self.now + processing <= self.running_time + self.upstream + self.ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> gst::ClockTime {
        gst::ClockTime::from_mseconds(v)
    }

    #[test]
    fn a_camera_frame_is_tracked_when_the_tracker_keeps_up() {
        // 30 fps camera: the frame at 1.000 s arrives at 1.033 s (upstream latency one frame);
        // tracking takes 150 ms; the element reports 183 ms.
        let check = LiveCheck {
            running_time: ms(1000),
            now: ms(1033),
            upstream: ms(33),
            ours: ms(183),
            processing: Some(ms(150)),
        };
        assert!(check.in_time());
        // The same frame arriving 100 ms late (upstream stalled) cannot make it.
        let late = LiveCheck {
            now: ms(1133),
            ..check
        };
        assert!(!late.in_time());
        // Nothing measured yet: track.
        let first = LiveCheck {
            processing: None,
            ours: gst::ClockTime::ZERO,
            ..late
        };
        assert!(first.in_time());
    }

    #[test]
    fn reported_latency_follows_the_longest_recent_processing() {
        let mut st = Stats::default();
        assert!(st.record(Duration::from_millis(120), ms(0)));
        assert_eq!(st.latency, ms(120));
        // 10 % more: not worth a LATENCY message.
        assert!(!st.record(Duration::from_millis(132), ms(0)));
        assert_eq!(st.latency, ms(120));
        assert!(st.record(Duration::from_millis(200), ms(33)));
        assert_eq!(st.latency, ms(233));
        assert_eq!(st.tracked, 3);
        assert!(st.fps() > 0.0);
    }

    #[test]
    fn qos_lateness() {
        let mut q = Qos::default();
        assert!(!q.late(ms(0), ms(0)));
        q.update(9_000_000_000, Some(gst::ClockTime::from_seconds(1)));
        assert!(q.late(ms(100), ms(200)));
        assert!(!q.late(gst::ClockTime::from_seconds(10), ms(0)));
    }
}
