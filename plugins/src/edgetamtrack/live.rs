//! Live mode's judgement: whether a buffer can be tracked now and still leave in time (the
//! tracker is free, downstream QoS does not report it late, the latency budget holds).

use edgetam_tracker::util::lock;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;

use super::imp::{EdgeTamTrack, CAT};
use super::state::State;
use super::timing::LiveCheck;

impl EdgeTamTrack {
    pub(super) fn running_time(&self, buf: &gst::BufferRef) -> Option<gst::ClockTime> {
        let pts = buf.pts()?;
        let segment = self.obj().segment();
        segment
            .downcast_ref::<gst::ClockTime>()
            .and_then(|s| s.to_running_time(pts))
    }

    /// A buffer's duration, or the caps' frame duration.
    pub(super) fn frame_duration(
        buf: &gst::BufferRef,
        info: &gst_video::VideoInfo,
    ) -> gst::ClockTime {
        buf.duration()
            .or_else(|| {
                let fps = info.fps();
                (fps.numer() > 0).then(|| {
                    gst::ClockTime::SECOND
                        .mul_div_floor(fps.denom() as u64, fps.numer() as u64)
                        .unwrap_or(gst::ClockTime::ZERO)
                })
            })
            .unwrap_or(gst::ClockTime::ZERO)
    }

    /// Live mode: whether to track this buffer now (the tracker is free and can have the result
    /// out within the latency budget, and downstream QoS does not report it late).
    pub(super) fn live_decision(
        &self,
        state: &State,
        running_time: Option<gst::ClockTime>,
    ) -> bool {
        // Busy: buffers in the tracker whose results are not in (a result waiting for the
        // output thread to push the buffers before it frees the tracker already).
        let busy = state
            .pending
            .iter()
            .filter(|p| p.id.is_some_and(|id| !state.ready.contains_key(&id)))
            .count();
        if busy >= state.max_in_flight {
            gst::log!(CAT, imp = self, "tracker busy: buffer passes untracked");
            return false;
        }
        let Some(rt) = running_time else {
            return true;
        };
        let (ours, processing) = {
            let st = lock(&self.stats);
            (st.latency, st.processing_estimate())
        };
        if lock(&self.qos).late(rt, ours) {
            gst::debug!(CAT, imp = self, "late by QoS: {rt}");
            return false;
        }
        let obj = self.obj();
        let (Some(clock), Some(base)) = (obj.clock(), obj.base_time()) else {
            return true;
        };
        let Some(now) = clock.time().checked_sub(base) else {
            return true;
        };
        let check = LiveCheck {
            running_time: rt,
            now,
            upstream: *lock(&self.upstream),
            ours,
            processing,
        };
        let ok = check.in_time();
        if !ok {
            gst::debug!(CAT, imp = self, "cannot be in time: {check:?}");
        }
        ok
    }
}
