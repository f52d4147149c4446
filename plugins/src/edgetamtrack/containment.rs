//! Panic containment: a panic in a call into the element becomes an element error (never an
//! abort, a leak per buffer or a stalled stream), and the faults the element's tests inject
//! to prove it ([`TestFault`]).

use std::sync::atomic::{AtomicBool, Ordering};

use edgetam_tracker::util::{lock, panic_message};
use gst::subclass::prelude::*;

use super::imp::{EdgeTamTrack, CAT};
use super::TestFault;

impl EdgeTamTrack {
    pub(super) fn inject_fault(&self, fault: TestFault) {
        *lock(&self.fault) = Some(fault);
    }

    /// Takes the injected fault if it is `f`.
    pub(super) fn take_fault(&self, f: impl Fn(&TestFault) -> bool) -> Option<TestFault> {
        let mut fault = lock(&self.fault);
        if fault.as_ref().is_some_and(f) {
            return fault.take();
        }
        None
    }

    /// Runs the body of a call into the element, catching its panic here instead of leaving it
    /// to the bindings' guard: once that guard has seen a panic it refuses every later call
    /// without releasing the buffer or event the call owns (a leak per buffer), and refuses
    /// the state changes too, so `stop` never runs and the tracking threads outlive the
    /// stream. Here a panic posts an element error; until the next start the element refuses
    /// buffers, events and queries (`refused`), dropping what they carry, while state changes,
    /// properties and signals keep working.
    pub(super) fn guarded<R>(
        &self,
        what: &str,
        refused: impl FnOnce() -> R,
        body: impl FnOnce() -> R,
    ) -> R {
        if self.panicked.load(Ordering::SeqCst) {
            gst::debug!(CAT, imp = self, "{what} refused: the element panicked");
            return refused();
        }
        self.contained(what, refused, body)
    }

    /// Catches a panic of `body` (see [`Self::guarded`]) and returns `fallback()` after it,
    /// whether or not the element panicked before: for the calls that must still run after a
    /// panic (state changes, `stop`, properties, signals).
    pub(super) fn contained<R>(
        &self,
        what: &str,
        fallback: impl FnOnce() -> R,
        body: impl FnOnce() -> R,
    ) -> R {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(r) => r,
            Err(panic) => {
                self.fail_after_panic(
                    &self.panicked,
                    &format!("Panicked in {what}: {}", panic_message(panic.as_ref())),
                );
                fallback()
            }
        }
    }

    /// Sets a failure flag (`panicked`, `output_failed`) and wakes the drains waiting on
    /// pending buffers, which stop waiting once it is set.
    pub(super) fn mark_failed(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// [`Self::mark_failed`] after a caught panic, posting `text` as the element error.
    pub(super) fn fail_after_panic(&self, flag: &AtomicBool, text: &str) {
        self.mark_failed(flag);
        gst::element_imp_error!(
            self,
            gst::LibraryError::Failed,
            ("{text}"),
            ["the element refuses buffers until it is restarted (READY -> PAUSED)"]
        );
    }
}
