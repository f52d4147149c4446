//! Implementation of `edgetamtrack` (see the module docs of [`super`]): the GObject glue (the
//! instance, its properties, the element and base-transform virtual methods, caps). Each
//! virtual method runs its body behind the panic containment of `containment.rs`; the bodies
//! live beside this file by concern: `state.rs` (what the element holds), `lifecycle.rs`
//! (start, stop), `flow.rs` (buffers in and out, in order), `live.rs` (the live judgement),
//! `output_thread.rs` (live pushing), `signals.rs` (signals, events, queries).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, LazyLock, Mutex};

use edgetam_tracker::util::lock;
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_transform::GenerateOutputSuccess;
use gst_base::subclass::prelude::*;
use gst_video::subclass::prelude::*;

use super::prompts::Command;
use super::settings::{self, Settings};
use super::state::{OutputThread, State};
use super::timing::{Qos, Stats};
use super::TestFault;
use crate::convert;

pub(super) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "edgetamtrack",
        gst::DebugColorFlags::empty(),
        Some("EdgeTAM video object tracker"),
    )
});

/// The element instance: settings, the state between `start` and `stop`, and what the
/// streaming thread, the live output thread and the application share.
#[derive(Default)]
pub struct EdgeTamTrack {
    pub(super) settings: Mutex<Settings>,
    pub(super) state: Mutex<Option<State>>,
    /// Commands sent before `start`, applied when it runs.
    pub(super) early: Mutex<Vec<Command>>,
    pub(super) stats: Mutex<Stats>,
    pub(super) qos: Mutex<Qos>,
    /// Upstream's minimum latency, from the last LATENCY query the element answered.
    pub(super) upstream: Mutex<gst::ClockTime>,
    /// Set by FLUSH_START and the change to READY: waits for results give up.
    pub(super) flushing: AtomicBool,
    /// Signalled when buffers enter or leave `state.pending` (the live output thread and
    /// drains wait on it).
    pub(super) changed: Condvar,
    /// The live mode's output thread.
    pub(super) output: Mutex<Option<OutputThread>>,
    /// Set when the live output thread ended on a failure (a panic or an error already
    /// posted): drains stop waiting for it and new buffers are refused.
    pub(super) output_failed: AtomicBool,
    /// Set when a call into the element panicked (see [`EdgeTamTrack::guarded`]): until the
    /// next start it refuses buffers, events and queries.
    pub(super) panicked: AtomicBool,
    /// A fault the tests inject (see [`TestFault`]).
    pub(super) fault: Mutex<Option<TestFault>>,
}

#[glib::object_subclass]
impl ObjectSubclass for EdgeTamTrack {
    const NAME: &'static str = "GstEdgeTamTrack";
    type Type = super::EdgeTamTrack;
    type ParentType = gst_video::VideoFilter;
}

impl ObjectImpl for EdgeTamTrack {
    fn constructed(&self) {
        self.parent_constructed();
        // `GstVideoFilter` turns QoS on; dropping buffers is opt-in here (`qos`, `live-mode`).
        self.obj().set_qos(false);
    }

    fn properties() -> &'static [glib::ParamSpec] {
        static PROPERTIES: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(settings::properties);
        PROPERTIES.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        // GLib does not catch a Rust panic in a property vfunc (it would abort the process):
        // a panic becomes an element error and the value is not set.
        self.contained(
            &format!("a write of `{}`", pspec.name()),
            || (),
            || self.set_property_inner(value, pspec),
        );
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        self.contained(
            &format!("a read of `{}`", pspec.name()),
            || pspec.default_value().clone(),
            || self.property_inner(pspec),
        )
    }

    fn signals() -> &'static [glib::subclass::Signal] {
        static SIGNALS: LazyLock<Vec<glib::subclass::Signal>> =
            LazyLock::new(super::signals::signals);
        SIGNALS.as_ref()
    }
}

impl EdgeTamTrack {
    fn set_property_inner(&self, value: &glib::Value, pspec: &glib::ParamSpec) {
        if self
            .take_fault(|f| *f == TestFault::PropertyPanic)
            .is_some()
        {
            panic!("injected test fault: a property write panics");
        }
        if pspec.name() == "prompts" {
            if let Ok(Some(text)) = value.get::<Option<String>>() {
                if let Err(e) = edgetam_pipeline::PromptSpec::parse_list(&text) {
                    gst::error!(
                        CAT,
                        imp = self,
                        "bad prompts `{text}`: {e} (the element will not start)"
                    );
                }
            }
        }
        if !lock(&self.settings).set(pspec.name(), value) {
            gst::warning!(CAT, imp = self, "no writable property {}", pspec.name());
        }
    }

    fn property_inner(&self, pspec: &glib::ParamSpec) -> glib::Value {
        if self
            .take_fault(|f| *f == TestFault::PropertyPanic)
            .is_some()
        {
            panic!("injected test fault: a property read panics");
        }
        {
            let st = lock(&self.stats);
            match pspec.name() {
                "fps" => return st.fps().to_value(),
                "latency" => return st.latency.nseconds().to_value(),
                "tracked" => return st.tracked.to_value(),
                "skipped" => return st.skipped.to_value(),
                _ => {}
            }
        }
        lock(&self.settings)
            .get(pspec.name())
            .unwrap_or_else(|| pspec.default_value().clone())
    }
}

impl GstObjectImpl for EdgeTamTrack {}

impl ElementImpl for EdgeTamTrack {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "EdgeTAM object tracker",
                "Filter/Analyzer/Video",
                "Tracks prompted or detected objects with EdgeTAM; results as region-of-interest metas with masks, bus messages and optional overlays",
                "edgetam-rs developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> = LazyLock::new(|| {
            let caps = gst_video::VideoCapsBuilder::new()
                .format_list(convert::FORMATS)
                .build();
            let src = gst::PadTemplate::new(
                "src",
                gst::PadDirection::Src,
                gst::PadPresence::Always,
                &caps,
            );
            let sink = gst::PadTemplate::new(
                "sink",
                gst::PadDirection::Sink,
                gst::PadPresence::Always,
                &caps,
            );
            // The templates are static and valid; a failure here is a programming error.
            [src, sink].into_iter().flatten().collect()
        });
        TEMPLATES.as_ref()
    }

    fn change_state(
        &self,
        transition: gst::StateChange,
    ) -> Result<gst::StateChangeSuccess, gst::StateChangeError> {
        // As the bindings do: a state change down never fails, even after a panic.
        let fallback = match transition {
            gst::StateChange::PlayingToPaused
            | gst::StateChange::PausedToReady
            | gst::StateChange::ReadyToNull => Ok(gst::StateChangeSuccess::Success),
            _ => Err(gst::StateChangeError),
        };
        self.contained(
            "a state change",
            || fallback,
            || {
                match transition {
                    // A streaming thread waiting for a result must give up before the pads
                    // stop.
                    gst::StateChange::PausedToReady => self.flushing.store(true, Ordering::SeqCst),
                    gst::StateChange::ReadyToPaused => self.flushing.store(false, Ordering::SeqCst),
                    _ => {}
                }
                self.parent_change_state(transition)
            },
        )
    }
}

impl BaseTransformImpl for EdgeTamTrack {
    const MODE: gst_base::subclass::BaseTransformMode =
        gst_base::subclass::BaseTransformMode::AlwaysInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = false;
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        // A start after a panic begins from fresh state (`stop` dropped the old one).
        self.panicked.store(false, Ordering::SeqCst);
        self.contained(
            "start",
            || {
                Err(gst::error_msg!(
                    gst::CoreError::StateChange,
                    ("the element panicked while starting")
                ))
            },
            || self.start_tracking(),
        )
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        self.contained("stop", || Ok(()), || self.stop_tracking())
    }

    fn sink_event(&self, event: gst::Event) -> bool {
        self.guarded("a sink event", || false, || self.handle_sink_event(event))
    }

    fn src_event(&self, event: gst::Event) -> bool {
        self.guarded("a src event", || false, || self.handle_src_event(event))
    }

    fn query(&self, direction: gst::PadDirection, query: &mut gst::QueryRef) -> bool {
        self.guarded("a query", || false, || self.answer_query(direction, query))
    }

    fn submit_input_buffer(
        &self,
        _is_discont: bool,
        buf: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        self.guarded(
            "a buffer",
            || Err(gst::FlowError::Error),
            || self.take_buffer(buf),
        )
    }

    fn generate_output(&self) -> Result<GenerateOutputSuccess, gst::FlowError> {
        self.guarded(
            "the output",
            || Err(gst::FlowError::Error),
            || self.next_buffer_out(),
        )
    }
}

impl VideoFilterImpl for EdgeTamTrack {
    fn set_info(
        &self,
        incaps: &gst::Caps,
        in_info: &gst_video::VideoInfo,
        outcaps: &gst::Caps,
        out_info: &gst_video::VideoInfo,
    ) -> Result<(), gst::LoggableError> {
        self.guarded(
            "new caps",
            || Err(gst::loggable_error!(CAT, "the element panicked")),
            || self.apply_caps(incaps, in_info, outcaps, out_info),
        )
    }
}

impl EdgeTamTrack {
    fn apply_caps(
        &self,
        incaps: &gst::Caps,
        in_info: &gst_video::VideoInfo,
        outcaps: &gst::Caps,
        out_info: &gst_video::VideoInfo,
    ) -> Result<(), gst::LoggableError> {
        if let Err(e) = convert::check_format(in_info.format(), in_info.width(), in_info.height()) {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                ("{e}: put videoconvert / videoscale in front of edgetamtrack")
            );
            return Err(gst::loggable_error!(CAT, "unsupported caps {incaps}: {e}"));
        }
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return Err(gst::loggable_error!(
                CAT,
                "caps set before the element started"
            ));
        };
        let mut warning = None;
        if let Some(old) = &state.info {
            if (old.width(), old.height()) != (in_info.width(), in_info.height()) {
                warning = Some(format!(
                    "resolution changed from {}x{} to {}x{}: tracking reset (every object forgotten)",
                    old.width(),
                    old.height(),
                    in_info.width(),
                    in_info.height()
                ));
                state.objects.clear();
                state.scheduled.clear();
                state.last = None;
                if let Err(e) = state.pipeline.reset() {
                    gst::warning!(CAT, imp = self, "reset failed: {e}");
                }
            }
        }
        state.info = Some(in_info.clone());
        drop(guard);
        if let Some(msg) = warning {
            gst::element_imp_warning!(self, gst::StreamError::Format, ("{msg}"));
        }
        gst::debug!(CAT, imp = self, "caps {incaps} -> {outcaps}");
        self.parent_set_info(incaps, in_info, outcaps, out_info)
    }
}
