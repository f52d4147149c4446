//! Commands from the application and from upstream: the action signals, the prompt event,
//! other events (flushes, serialized events, QoS) and the latency query.

use std::sync::atomic::Ordering;

use edgetam_tracker::util::lock;
use edgetam_tracker::{ObjectPrompt, Prompt};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;

use super::imp::{EdgeTamTrack, CAT};
use super::prompts::{self, Command};
use super::timing::Qos;
use super::TestFault;

impl EdgeTamTrack {
    /// Queues a command (or keeps it for `start`); false when refused.
    pub(super) fn command(&self, cmd: Command) -> bool {
        let max = lock(&self.settings).max_objects as usize;
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            let mut early = lock(&self.early);
            if let Command::Add(obj, _) = &cmd {
                let mut known = std::collections::BTreeSet::new();
                for c in early.iter() {
                    match c {
                        Command::Add(o, _) => {
                            known.insert(*o);
                        }
                        Command::Remove(o) => {
                            known.remove(o);
                        }
                        Command::Reset => known.clear(),
                    }
                }
                if !known.contains(obj) && known.len() >= max {
                    drop(early);
                    drop(guard);
                    gst::warning!(
                        CAT,
                        imp = self,
                        "max-objects ({max}) reached: object {obj} refused"
                    );
                    return false;
                }
            }
            early.push(cmd);
            return true;
        };
        let since = state.buffers;
        let r = state.objects.apply(&state.pipeline, cmd, max, since);
        drop(guard);
        self.warn_refused(r)
    }

    /// Posts the warning of a refused command (never while holding the state lock).
    pub(super) fn warn_refused(&self, r: Result<(), String>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) => {
                gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{e}"));
                false
            }
        }
    }

    pub(super) fn add_spec(&self, spec: &str) -> bool {
        match prompts::parse_spec(spec, &edgetam_pipeline::read_mask) {
            Ok((obj, prompt)) => self.command(Command::Add(obj, prompt)),
            Err(e) => {
                gst::element_imp_warning!(
                    self,
                    gst::LibraryError::Settings,
                    ("prompt `{spec}` refused: {e}")
                );
                false
            }
        }
    }

    pub(super) fn add_points(&self, obj: u32, points: &str) -> bool {
        match prompts::parse_points(obj, points) {
            Ok(prompt) => self.command(Command::Add(obj, prompt)),
            Err(e) => {
                gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{e}"));
                false
            }
        }
    }

    /// Handles a custom prompt event; true when it was one (it is consumed).
    pub(super) fn prompt_event(&self, event: &gst::Event) -> bool {
        let Some(s) = event.structure() else {
            return false;
        };
        match prompts::event_spec(s) {
            None => return false,
            Some(Ok(spec)) => {
                gst::debug!(CAT, imp = self, "prompt event: {spec}");
                self.add_spec(spec);
            }
            Some(Err(e)) => {
                gst::element_imp_warning!(self, gst::LibraryError::Settings, ("{e}"))
            }
        }
        true
    }

    pub(super) fn handle_sink_event(&self, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::CustomDownstream(_)
            | gst::EventView::CustomDownstreamOob(_)
            | gst::EventView::CustomBoth(_)
            | gst::EventView::CustomBothOob(_)
                if self.prompt_event(&event) =>
            {
                return true;
            }
            gst::EventView::FlushStart(_) => {
                self.flushing.store(true, Ordering::SeqCst);
            }
            gst::EventView::FlushStop(_) => {
                self.discard_pending();
                *lock(&self.qos) = Qos::default();
                self.flushing.store(false, Ordering::SeqCst);
            }
            _ if event.is_serialized() => self.drain(),
            _ => {}
        }
        self.parent_sink_event(event)
    }

    pub(super) fn handle_src_event(&self, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::CustomUpstream(_) | gst::EventView::CustomBoth(_)
                if self.prompt_event(&event) =>
            {
                return true;
            }
            gst::EventView::Qos(q) => {
                let (_type, _proportion, diff, timestamp) = q.get();
                lock(&self.qos).update(diff, timestamp);
            }
            _ => {}
        }
        self.parent_src_event(event)
    }

    pub(super) fn answer_query(
        &self,
        direction: gst::PadDirection,
        query: &mut gst::QueryRef,
    ) -> bool {
        if direction == gst::PadDirection::Src {
            if let gst::QueryViewMut::Latency(_) = query.view_mut() {
                if !BaseTransformImplExt::parent_query(self, direction, query) {
                    return false;
                }
                if let gst::QueryViewMut::Latency(q) = query.view_mut() {
                    let ours = lock(&self.stats).latency;
                    let (live, min, max) = q.result();
                    *lock(&self.upstream) = min;
                    q.set(live, min + ours, max.map(|m| m + ours));
                    gst::debug!(CAT, imp = self, "latency: upstream {min}, ours {ours}");
                }
                return true;
            }
        }
        BaseTransformImplExt::parent_query(self, direction, query)
    }
}

/// The element instance behind a signal's first argument.
pub(super) fn this(args: &[glib::Value]) -> Option<super::EdgeTamTrack> {
    args.first()?.get::<super::EdgeTamTrack>().ok()
}

/// An action signal returning `TRUE` when `f` queued its command (`f`'s `None`: a missing or
/// mistyped argument, refused as `FALSE`).
pub(super) fn action<const N: usize>(
    name: &str,
    params: [glib::Type; N],
    f: fn(&EdgeTamTrack, &[glib::Value]) -> Option<bool>,
) -> glib::subclass::Signal {
    let what = format!("the {name} signal");
    glib::subclass::Signal::builder(name)
        .param_types(params)
        .return_type::<bool>()
        .action()
        .class_handler(move |args| {
            // GLib does not catch a Rust panic in a signal handler (it would abort the
            // process): a panic becomes an element error and the signal returns FALSE.
            let ok = this(args).and_then(|el| {
                let imp = el.imp();
                imp.contained(
                    &what,
                    || None,
                    || {
                        if imp.take_fault(|f| *f == TestFault::SignalPanic).is_some() {
                            panic!("injected test fault: a signal handler panics");
                        }
                        f(imp, args)
                    },
                )
            });
            Some(ok.unwrap_or(false).to_value())
        })
        .build()
}

/// Argument `i` of a signal as a string (`NULL`: empty).
pub(super) fn string_arg(args: &[glib::Value], i: usize) -> Option<String> {
    Some(
        args.get(i)?
            .get::<Option<String>>()
            .ok()?
            .unwrap_or_default(),
    )
}

pub(super) fn signals() -> Vec<glib::subclass::Signal> {
    let (uint, double, string) = (
        u32::static_type(),
        f64::static_type(),
        String::static_type(),
    );
    vec![
        action(
            "add-box",
            [uint, double, double, double, double],
            |imp, args| {
                let obj = args.get(1)?.get::<u32>().ok()?;
                let c: Vec<f32> = (2..6)
                    .map(|i| args.get(i)?.get::<f64>().ok().map(|v| v as f32))
                    .collect::<Option<_>>()?;
                let prompt = Prompt::from_box(c[0], c[1], c[2], c[3]);
                Some(imp.command(Command::Add(obj, ObjectPrompt::Points(prompt))))
            },
        ),
        action("add-points", [uint, string], |imp, args| {
            Some(imp.add_points(args.get(1)?.get::<u32>().ok()?, &string_arg(args, 2)?))
        }),
        action("add-prompt", [string], |imp, args| {
            Some(imp.add_spec(&string_arg(args, 1)?))
        }),
        action("remove-object", [uint], |imp, args| {
            Some(imp.command(Command::Remove(args.get(1)?.get::<u32>().ok()?)))
        }),
        action("reset", [], |imp, _| Some(imp.command(Command::Reset))),
    ]
}
