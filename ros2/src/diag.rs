//! The counters behind `/diagnostics`: frames received, tracked, dropped and refused (per kind),
//! fps and latency (from a frame's receipt to its outputs published).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::msgs::{DiagnosticStatus, KeyValue};

/// Latencies the median and p95 look back on.
const LATENCY_WINDOW: usize = 300;
/// The window fps is measured over.
const FPS_WINDOW: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
pub struct Diag {
    pub frames_received: u64,
    pub frames_tracked: u64,
    pub frames_dropped: u64,
    pub bad_frames: u64,
    pub track_failures: u64,
    pub size_changes: u64,
    pub rejected_prompts: u64,
    /// Refused frames per [`crate::convert::BadInput::kind`].
    pub bad_kinds: BTreeMap<&'static str, u64>,
    /// Objects in the last tracked frame's results.
    pub objects: usize,
    latencies_ms: VecDeque<f64>,
    tracked_at: VecDeque<Instant>,
    /// Kinds of event already logged once.
    logged: BTreeMap<&'static str, ()>,
}

impl Diag {
    /// Counts a refused frame; `true` the first time its kind is seen (log it then).
    pub fn bad(&mut self, kind: &'static str) -> bool {
        self.bad_frames += 1;
        *self.bad_kinds.entry(kind).or_insert(0) += 1;
        self.first(kind)
    }

    /// `true` the first time `kind` is asked about.
    pub fn first(&mut self, kind: &'static str) -> bool {
        self.logged.insert(kind, ()).is_none()
    }

    pub fn tracked(&mut self, latency: Duration, objects: usize, now: Instant) {
        self.frames_tracked += 1;
        self.objects = objects;
        if self.latencies_ms.len() == LATENCY_WINDOW {
            self.latencies_ms.pop_front();
        }
        self.latencies_ms.push_back(latency.as_secs_f64() * 1e3);
        self.tracked_at.push_back(now);
        self.trim(now);
    }

    fn trim(&mut self, now: Instant) {
        while self
            .tracked_at
            .front()
            .is_some_and(|&t| now.duration_since(t) > FPS_WINDOW)
        {
            self.tracked_at.pop_front();
        }
    }

    /// Tracked frames per second over the last two seconds.
    pub fn fps(&mut self, now: Instant) -> f64 {
        self.trim(now);
        self.tracked_at.len() as f64 / FPS_WINDOW.as_secs_f64()
    }

    /// `(median, p95)` of the recent latencies in ms (nearest rank), 0 without any.
    pub fn latency_ms(&self) -> (f64, f64) {
        if self.latencies_ms.is_empty() {
            return (0.0, 0.0);
        }
        let mut v: Vec<f64> = self.latencies_ms.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        (rank(0.5), rank(0.95))
    }

    /// The node's `DiagnosticStatus` (`name` = `<node>: tracker`): OK, WARN once frames were
    /// refused or tracking failed.
    pub fn status(&mut self, node: &str, now: Instant) -> DiagnosticStatus {
        let (median, p95) = self.latency_ms();
        let mut values = vec![
            ("frames_received", self.frames_received.to_string()),
            ("frames_tracked", self.frames_tracked.to_string()),
            ("frames_dropped", self.frames_dropped.to_string()),
            ("bad_frames", self.bad_frames.to_string()),
            ("fps", format!("{:.2}", self.fps(now))),
            ("latency_ms_median", format!("{median:.2}")),
            ("latency_ms_p95", format!("{p95:.2}")),
            ("objects", self.objects.to_string()),
            ("size_changes", self.size_changes.to_string()),
            ("track_failures", self.track_failures.to_string()),
            ("rejected_prompts", self.rejected_prompts.to_string()),
        ];
        for (k, n) in &self.bad_kinds {
            values.push((k, n.to_string()));
        }
        let warn = self.bad_frames > 0 || self.track_failures > 0;
        DiagnosticStatus {
            level: u8::from(warn),
            name: format!("{node}: tracker"),
            message: if warn {
                format!(
                    "tracking; {} bad frames, {} failures",
                    self.bad_frames, self.track_failures
                )
            } else {
                "tracking".into()
            },
            hardware_id: "edgetam".into(),
            values: values
                .into_iter()
                .map(|(k, v)| KeyValue {
                    key: k.to_string(),
                    value: v,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_latency_and_kinds() {
        let mut d = Diag::default();
        let t0 = Instant::now();
        for ms in 1..=100u64 {
            d.tracked(Duration::from_millis(ms), 2, t0);
        }
        assert_eq!(d.latency_ms(), (50.0, 95.0));
        assert!(d.bad("bad_encoding"));
        assert!(!d.bad("bad_encoding"));
        assert!(d.bad("bad_step"));
        d.frames_received = 103;
        let s = d.status("/ns/edgetam", t0);
        assert_eq!(s.name, "/ns/edgetam: tracker");
        assert_eq!(s.level, 1);
        let get = |k: &str| {
            s.values
                .iter()
                .find(|v| v.key == k)
                .map(|v| v.value.clone())
                .unwrap_or_else(|| panic!("no {k}"))
        };
        assert_eq!(get("frames_received"), "103");
        assert_eq!(get("frames_tracked"), "100");
        assert_eq!(get("bad_frames"), "3");
        assert_eq!(get("bad_encoding"), "2");
        assert_eq!(get("bad_step"), "1");
        assert_eq!(get("objects"), "2");
        assert_eq!(get("latency_ms_p95"), "95.00");
        assert_eq!(get("fps"), "50.00");
        // Past the window the rate falls to 0.
        assert_eq!(d.fps(t0 + Duration::from_secs(3)), 0.0);
    }
}
