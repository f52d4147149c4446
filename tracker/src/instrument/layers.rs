//! Wall time per layer of the image encoder, to set our encoder beside an engine's own
//! per-layer profile (OpenVINO's performance counters: `tools/reference/engine_profile.py`) and
//! see which layers are behind, rather than the stage total only.
//!
//! Off unless [`set_enabled`] turns it on (`edgetam bench --layers`): a probe that is off costs
//! one relaxed atomic load. CPU only: candle's CPU ops have finished when they return, a GPU's
//! have only been queued.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);
static TIMES: Mutex<Vec<LayerTime>> = Mutex::new(Vec::new());

/// One layer's time summed over the calls since the last [`take`].
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTime {
    /// The checkpoint's module path (`stages_2.blocks.3`) or the part's name (`neck`).
    pub layer: String,
    /// What the timed call computes, for totals per kind (`dw 3x3 + mlp`, `squeeze-excite`).
    pub kind: &'static str,
    pub calls: u64,
    pub total: Duration,
}

/// Turns the probes on or off (for the whole process: the encoder-ahead thread included).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the probes are on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The times recorded since the last call, in the order the layers first ran; clears them.
pub fn take() -> Vec<LayerTime> {
    std::mem::take(&mut *TIMES.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Runs `f`, adding its wall time to `layer` when the probes are on. `layer` is only called
/// then (no name is formatted on the tracking path otherwise).
pub(crate) fn timed<T>(
    layer: impl FnOnce() -> String,
    kind: &'static str,
    f: impl FnOnce() -> T,
) -> T {
    timed_if(layer, kind, f, |_| true)
}

/// As [`timed`], recorded only when `ran(&output)`: for a fused path that may decline the input
/// (returns `Ok(None)`) and leave the layer to its unfused parts.
pub(crate) fn timed_if<T>(
    layer: impl FnOnce() -> String,
    kind: &'static str,
    f: impl FnOnce() -> T,
    ran: impl FnOnce(&T) -> bool,
) -> T {
    if !enabled() {
        return f();
    }
    let start = Instant::now();
    let out = f();
    let elapsed = start.elapsed();
    if ran(&out) {
        record(layer(), kind, elapsed);
    }
    out
}

fn record(layer: String, kind: &'static str, elapsed: Duration) {
    let mut times = TIMES.lock().unwrap_or_else(|e| e.into_inner());
    match times.iter_mut().find(|t| t.layer == layer) {
        Some(t) => {
            t.calls += 1;
            t.total += elapsed;
        }
        None => times.push(LayerTime {
            layer,
            kind,
            calls: 1,
            total: elapsed,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On: each call lands under its layer, in first-run order, and `take` empties the record;
    /// off: nothing is recorded and the name is never built. One test (the switch is global);
    /// other tests of this crate may run the encoder meanwhile, so only this test's layers are
    /// looked at.
    #[test]
    fn records_only_when_on() {
        let ours = |t: Vec<LayerTime>| -> Vec<LayerTime> {
            t.into_iter()
                .filter(|t| t.layer.starts_with("probe test"))
                .collect()
        };
        set_enabled(true);
        assert_eq!(timed(|| "probe test a".into(), "k", || 1 + 1), 2);
        timed(
            || "probe test b".into(),
            "k2",
            || std::thread::sleep(Duration::from_millis(2)),
        );
        timed(|| "probe test a".into(), "k", || ());
        timed_if(
            || "probe test c".into(),
            "k",
            || None::<u8>,
            Option::is_some,
        );
        let t = ours(take());
        assert_eq!(
            t.iter()
                .map(|t| (t.layer.as_str(), t.kind, t.calls))
                .collect::<Vec<_>>(),
            [("probe test a", "k", 2), ("probe test b", "k2", 1)]
        );
        assert!(t[1].total >= Duration::from_millis(2));
        assert!(ours(take()).is_empty());
        set_enabled(false);
        timed(|| unreachable!("no name is built when off"), "k", || ());
        assert!(ours(take()).is_empty());
    }
}
