//! The buffers in flight and their order: a buffer in (prompts due, live judgement, detections
//! associated, the frame pushed into the tracking pipeline), results collected, and buffers out
//! in input order with their metas, overlay and message; drains before serialized events.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::Duration;

use edgetam_pipeline::{FrameOutput, Outcome, Pipeline};
use edgetam_tracker::util::lock;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_transform::GenerateOutputSuccess;

use super::detector::{Decision, Rules};
use super::imp::{EdgeTamTrack, CAT};
use super::output::{self, LastObjects};
use super::prompts::{self, Command};
use super::settings::Settings;
use super::state::{Pending, State, WAIT_STEP};
use super::{Overlay, PromptSource};
use crate::{convert, overlay};

/// Something to post once the state lock is released (a synchronous bus handler may call back
/// into the element).
pub(super) enum Post {
    Message(gst::Message),
    Warning(String),
    Latency,
}

impl EdgeTamTrack {
    pub(super) fn take_buffer(&self, buf: gst::Buffer) -> Result<gst::FlowSuccess, gst::FlowError> {
        let settings = self.settings();
        let mut refused = Vec::new();
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            drop(guard);
            gst::element_imp_error!(self, gst::CoreError::Failed, ("not started"));
            return Err(gst::FlowError::Error);
        };
        let Some(info) = state.info.clone() else {
            return Err(gst::FlowError::NotNegotiated);
        };
        let index = state.buffers;
        state.buffers += 1;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.scheduled)
            .into_iter()
            .partition(|(f, _, _)| *f == index);
        state.scheduled = later.into_iter().filter(|(f, _, _)| *f > index).collect();
        let max = settings.max_objects as usize;
        for (_, obj, prompt) in due {
            refused.push(state.objects.apply(
                &state.pipeline,
                Command::Add(obj, prompt),
                max,
                index,
            ));
        }
        // `qos=true` (off by default): buffers downstream reports late are dropped entirely.
        if self.obj().is_qos() {
            if let Some(rt) = self.running_time(&buf) {
                if lock(&self.qos).late(rt, lock(&self.stats).latency) {
                    drop(guard);
                    gst::debug!(CAT, imp = self, "buffer {index} dropped (qos)");
                    return Ok(gst::FlowSuccess::Ok);
                }
            }
        }
        let running_time = self.running_time(&buf);
        if settings.live_mode {
            if self.output_failed.load(Ordering::SeqCst) {
                return Err(gst::FlowError::Error);
            }
            if let Err(e) = self.collect_ready(state) {
                drop(guard);
                return Err(e);
            }
        }
        let track = !settings.live_mode || self.live_decision(state, running_time);
        if !track {
            lock(&self.stats).skipped += 1;
            state.pending.push_back(Pending {
                buf,
                index,
                id: None,
                running_time,
                decisions: Vec::new(),
            });
            drop(guard);
            for r in refused {
                self.warn_refused(r);
            }
            return Ok(gst::FlowSuccess::Ok);
        }
        let (decisions, detector_refused) = match settings.prompt_source {
            PromptSource::Property => (Vec::new(), Vec::new()),
            _ => {
                let detections = Self::detections(&settings, &buf);
                let pipeline = state.pipeline.clone();
                state
                    .objects
                    .detections(&pipeline, detections, Self::rules(&settings), index)
            }
        };
        refused.extend(detector_refused.into_iter().map(Err));
        let pushed = {
            let vframe = gst_video::VideoFrameRef::from_buffer_ref_readable(buf.as_ref(), &info)
                .map_err(|e| format!("cannot map the buffer: {e}"));
            vframe.and_then(|vframe| {
                let mut frame = convert::to_frame(&vframe).map_err(|e| e.to_string())?;
                if let Some(pts) = buf.pts() {
                    frame = frame.with_timestamp(Duration::from_nanos(pts.nseconds()));
                }
                state
                    .pipeline
                    .push(frame)
                    .map_err(|e| format!("tracking pipeline: {e}"))
            })
        };
        let id = match pushed {
            Ok(id) => id,
            Err(e) => {
                drop(guard);
                gst::element_imp_error!(self, gst::StreamError::Failed, ("{e}"));
                return Err(gst::FlowError::Error);
            }
        };
        state.in_flight += 1;
        state.pending.push_back(Pending {
            buf,
            index,
            id: Some(id),
            running_time,
            decisions,
        });
        drop(guard);
        for r in refused {
            self.warn_refused(r);
        }
        Ok(gst::FlowSuccess::Ok)
    }

    pub(super) fn next_buffer_out(&self) -> Result<GenerateOutputSuccess, gst::FlowError> {
        if lock(&self.output).is_some() {
            // Live mode: the output thread pushes.
            self.changed.notify_all();
            return Ok(GenerateOutputSuccess::NoOutput);
        }
        Ok(match self.next_output(false, false)? {
            Some(buf) => GenerateOutputSuccess::Buffer(buf),
            None => GenerateOutputSuccess::NoOutput,
        })
    }

    /// Takes every result that is ready, without waiting.
    pub(super) fn collect_ready(&self, state: &mut State) -> Result<(), gst::FlowError> {
        loop {
            match state.pipeline.try_recv() {
                Ok(Some(out)) => self.keep(state, out),
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.pipeline_error(e)),
            }
        }
    }

    pub(super) fn keep(&self, state: &mut State, out: FrameOutput) {
        if !state.discard.remove(&out.id) {
            state.ready.insert(out.id, out);
        }
    }

    pub(super) fn pipeline_error(&self, e: edgetam_pipeline::Error) -> gst::FlowError {
        gst::element_imp_error!(self, gst::StreamError::Failed, ("tracking pipeline: {e}"));
        gst::FlowError::Error
    }

    /// Waits for the next result; `None` when the element is flushing.
    pub(super) fn wait_result(
        &self,
        pipeline: &Pipeline,
    ) -> Result<Option<FrameOutput>, gst::FlowError> {
        loop {
            if self.flushing.load(Ordering::SeqCst) {
                return Ok(None);
            }
            match pipeline.recv_timeout(WAIT_STEP) {
                Ok(out) => return Ok(Some(out)),
                Err(edgetam_pipeline::Error::Timeout(_)) => continue,
                Err(e) => return Err(self.pipeline_error(e)),
            }
        }
    }

    /// The next buffer to leave, if it may leave now (`wait`: wait for its result when it is
    /// tracked).
    pub(super) fn next_output(
        &self,
        wait_always: bool,
        transit: bool,
    ) -> Result<Option<gst::Buffer>, gst::FlowError> {
        let settings = self.settings();
        loop {
            let mut guard = lock(&self.state);
            let Some(state) = guard.as_mut() else {
                return Ok(None);
            };
            self.collect_ready(state)?;
            let Some(front) = state.pending.front() else {
                return Ok(None);
            };
            let ready = match front.id {
                None => true,
                Some(id) => state.ready.contains_key(&id),
            };
            if !ready {
                let wait = wait_always
                    || state.draining
                    || (!settings.live_mode && state.in_flight >= state.max_in_flight);
                if !wait {
                    return Ok(None);
                }
                let pipeline = state.pipeline.clone();
                drop(guard);
                match self.wait_result(&pipeline)? {
                    Some(out) => {
                        if let Some(state) = lock(&self.state).as_mut() {
                            self.keep(state, out);
                        }
                        continue;
                    }
                    None => return Err(gst::FlowError::Flushing),
                }
            }
            let Some(p) = state.pending.pop_front() else {
                return Ok(None);
            };
            if transit {
                state.in_transit += 1;
            }
            self.changed.notify_all();
            let mut posts = Vec::new();
            let buf = self.finish(state, p, &settings, &mut posts);
            drop(guard);
            self.post(posts);
            return Ok(Some(buf));
        }
    }

    /// Results, metas, overlay and message of a leaving buffer.
    pub(super) fn finish(
        &self,
        state: &mut State,
        p: Pending,
        settings: &Settings,
        posts: &mut Vec<Post>,
    ) -> gst::Buffer {
        let mut buf = p.buf;
        let out = p.id.and_then(|id| state.ready.remove(&id));
        if p.id.is_some() {
            state.in_flight = state.in_flight.saturating_sub(1);
        }
        let Some(info) = state.info.clone() else {
            return buf;
        };
        let fresh = match out {
            None => false,
            Some(out) => {
                for e in &out.command_errors {
                    posts.push(Post::Warning(format!(
                        "prompt refused on buffer {}: {e}",
                        p.index
                    )));
                }
                match out.outcome {
                    Outcome::Tracked(r) => {
                        // The analytics Mtds' times: running time (0 for a buffer without one).
                        let time = p.running_time.unwrap_or(gst::ClockTime::ZERO);
                        state.objects.observe(&r, p.index, time);
                        state.last = Some(LastObjects::new(&r, &state.objects.seen, time));
                        let margin = if settings.live_mode {
                            Self::frame_duration(&buf, &info)
                        } else {
                            gst::ClockTime::ZERO
                        };
                        let processing = out.timings.end_to_end;
                        if lock(&self.stats).record(processing, margin) {
                            posts.push(Post::Latency);
                        }
                        if settings.post_messages {
                            posts.push(Post::Message(output::message(
                                self.obj().upcast_ref(),
                                p.running_time,
                                buf.pts(),
                                p.index,
                                &r,
                                processing,
                                &state.objects.labels,
                                &state.objects.seen,
                                &p.decisions,
                            )));
                        }
                        true
                    }
                    Outcome::Failed(e) => {
                        posts.push(Post::Warning(format!(
                            "buffer {} not tracked: {e}",
                            p.index
                        )));
                        return buf;
                    }
                    Outcome::Dropped => return buf,
                }
            }
        };
        let Some(last) = &state.last else {
            return buf;
        };
        let style = overlay::Style {
            mask: settings.overlay.contains(Overlay::MASK),
            contour: settings.overlay.contains(Overlay::CONTOUR),
            boxes: settings.overlay.contains(Overlay::BOX),
            alpha: settings.overlay_alpha as f32,
        };
        // A shallow copy when upstream still holds the buffer: the pixel memory is shared
        // (and copied only if the overlay maps it for writing).
        let b = buf.make_mut();
        if !style.is_empty() && !last.objects.is_empty() {
            match gst_video::VideoFrameRef::from_buffer_ref_writable(&mut *b, &info) {
                Ok(mut vf) => overlay::draw(&mut vf, &last.objects, style),
                Err(e) => gst::warning!(CAT, imp = self, "cannot map the buffer for drawing: {e}"),
            }
        }
        // Upstream detections (analytics Mtds) that prompted or matched an object, on the
        // buffer they came with.
        let sources: Vec<(u32, u32)> = if fresh {
            p.decisions
                .iter()
                .filter_map(|(d, decision)| match decision {
                    Decision::Refused => None,
                    _ => Some((d.source_id?, decision.object())),
                })
                .collect()
        } else {
            Vec::new()
        };
        for e in output::attach(b, last, !fresh, &state.objects.labels, &sources) {
            gst::warning!(CAT, imp = self, "{e}");
        }
        buf
    }

    pub(super) fn post(&self, posts: Vec<Post>) {
        for p in posts {
            match p {
                Post::Message(m) => {
                    let _ = self.obj().post_message(m);
                }
                Post::Warning(w) => {
                    gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{w}"))
                }
                Post::Latency => {
                    gst::debug!(CAT, imp = self, "latency now {}", lock(&self.stats).latency);
                    let _ = self
                        .obj()
                        .post_message(gst::message::Latency::builder().src(&*self.obj()).build());
                }
            }
        }
    }

    /// Pushes every pending buffer downstream, waiting for the tracked ones (before EOS and
    /// other serialized events, which must not overtake them). In live mode the output thread
    /// pushes them; this waits until it has.
    pub(super) fn drain(&self) {
        if lock(&self.output).is_some() {
            let mut guard = lock(&self.state);
            while guard
                .as_ref()
                .is_some_and(|s| !s.pending.is_empty() || s.in_transit > 0)
                && !self.flushing.load(Ordering::SeqCst)
                && !self.output_failed.load(Ordering::SeqCst)
                && !self.panicked.load(Ordering::SeqCst)
            {
                guard = self
                    .changed
                    .wait_timeout(guard, WAIT_STEP)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            return;
        }
        if let Some(state) = lock(&self.state).as_mut() {
            if state.pending.is_empty() {
                return;
            }
            state.draining = true;
        }
        let src = self.obj().static_pad("src");
        loop {
            match self.next_output(true, false) {
                Ok(Some(buf)) => {
                    if let Some(pad) = &src {
                        if let Err(e) = pad.push(buf) {
                            gst::debug!(CAT, imp = self, "drain: downstream returned {e:?}");
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    gst::debug!(CAT, imp = self, "drain stopped: {e:?}");
                    break;
                }
            }
        }
        if let Some(state) = lock(&self.state).as_mut() {
            state.draining = false;
        }
    }

    pub(super) fn rules(settings: &Settings) -> Rules {
        Rules {
            match_iou: settings.match_iou as f32,
            reseed_after: settings.reseed_after,
            max_objects: settings.max_objects as usize,
        }
    }

    pub(super) fn detections(
        settings: &Settings,
        buf: &gst::BufferRef,
    ) -> Vec<super::detector::Detection> {
        let types = super::detector::parse_types(&settings.prompt_roi_types);
        match settings.prompt_source {
            PromptSource::Property => Vec::new(),
            PromptSource::RoiMeta => prompts::roi_detections(buf, &types, settings.min_confidence),
            #[cfg(feature = "v1_24")]
            PromptSource::Analytics => {
                prompts::analytics_detections(buf, &types, settings.min_confidence)
            }
            #[cfg(not(feature = "v1_24"))]
            PromptSource::Analytics => Vec::new(),
        }
    }

    /// A flush: pending buffers are discarded, their results dropped when they come.
    pub(super) fn discard_pending(&self) {
        if let Some(state) = lock(&self.state).as_mut() {
            for p in state.pending.drain(..) {
                if let Some(id) = p.id {
                    state.discard.insert(id);
                }
            }
            for id in std::mem::take(&mut state.ready).into_keys() {
                // Taken already: nothing to drop later.
                state.discard.remove(&id);
            }
            state.in_flight = 0;
        }
    }
}
