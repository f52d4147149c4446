//! Live mode's output thread: it pushes pending buffers in order as soon as they may leave, so
//! the streaming thread only hands buffers in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use edgetam_tracker::util::{lock, panic_message};
use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use super::imp::{EdgeTamTrack, CAT};
use super::state::{OutputThread, WAIT_STEP};
use super::TestFault;

impl EdgeTamTrack {
    /// The live output thread: pushes pending buffers in order as soon as they may leave.
    pub(super) fn start_output_thread(&self) -> Result<(), gst::ErrorMessage> {
        self.output_failed.store(false, Ordering::SeqCst);
        let stop = Arc::new(AtomicBool::new(false));
        let weak = self.obj().downgrade();
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("edgetam-output".into())
            .spawn(move || output_loop(&weak, &flag))
            .map_err(|e| {
                gst::error_msg!(
                    gst::CoreError::Thread,
                    ("cannot start the output thread: {e}")
                )
            })?;
        *lock(&self.output) = Some(OutputThread { stop, handle });
        Ok(())
    }

    pub(super) fn stop_output_thread(&self) {
        let Some(t) = lock(&self.output).take() else {
            return;
        };
        t.stop.store(true, Ordering::SeqCst);
        self.changed.notify_all();
        if t.handle.join().is_err() {
            gst::warning!(CAT, imp = self, "the output thread panicked");
        }
    }

    /// One round of the output thread; false when it should stop.
    pub(super) fn output_round(&self, stop: &AtomicBool) -> bool {
        if self
            .take_fault(|f| *f == TestFault::OutputThreadPanic)
            .is_some()
        {
            panic!("injected test fault: the output thread panics");
        }
        match self.next_output(true, true) {
            Ok(Some(buf)) => {
                let r = self
                    .obj()
                    .static_pad("src")
                    .map(|pad| pad.push(buf))
                    .unwrap_or(Err(gst::FlowError::Error));
                if let Some(state) = lock(&self.state).as_mut() {
                    state.in_transit = state.in_transit.saturating_sub(1);
                }
                self.changed.notify_all();
                match r {
                    Ok(_) | Err(gst::FlowError::Flushing) => true,
                    Err(gst::FlowError::Eos) => true,
                    Err(e) => {
                        gst::element_imp_error!(
                            self,
                            gst::StreamError::Failed,
                            ("downstream refused a buffer: {e:?}")
                        );
                        false
                    }
                }
            }
            Ok(None) => {
                let guard = lock(&self.state);
                if !stop.load(Ordering::SeqCst) {
                    let _ = self.changed.wait_timeout(guard, Duration::from_millis(100));
                }
                true
            }
            Err(gst::FlowError::Flushing) => {
                std::thread::sleep(WAIT_STEP);
                true
            }
            Err(_) => false,
        }
    }
}

/// The live output thread's loop. A panic in it (a bug) becomes an element error, and drains
/// and new buffers stop waiting for the thread, instead of a silent stall.
pub(super) fn output_loop(weak: &glib::WeakRef<super::EdgeTamTrack>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let Some(el) = weak.upgrade() else {
            return;
        };
        let imp = el.imp();
        let round =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| imp.output_round(stop)));
        match round {
            Ok(true) => {}
            Ok(false) => {
                // An error was posted where it happened (or downstream refused a buffer).
                imp.mark_failed(&imp.output_failed);
                return;
            }
            Err(panic) => {
                imp.fail_after_panic(
                    &imp.output_failed,
                    &format!(
                        "the live output thread panicked: {}",
                        panic_message(panic.as_ref())
                    ),
                );
                return;
            }
        }
    }
}
