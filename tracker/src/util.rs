//! Small helpers every front end of this workspace needs in the same form (the C ABI, the
//! Python module, the GStreamer element, the pipeline): written once here so their behaviour
//! cannot drift apart. Public for those crates; not a supported API.

use std::any::Any;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The message of a caught panic's payload: the `&str` or `String` that `panic!` formats, or a
/// fixed sentence for any other payload (`std::panic::panic_any`). For turning a panic caught at
/// an API boundary (FFI, Python, a worker thread, a GLib callback) into an error message.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// Locks `m` even when a panic poisoned it. Every caller catches panics at its boundary and
/// reports them there (an error status, an exception, an element error); the data behind these
/// locks stays consistent on its own (each update is a whole assignment, or the owner marks
/// itself failed), so refusing every later call over the poison flag would only turn one
/// reported bug into a dead handle.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_payloads_become_messages() {
        let text = |f: fn()| {
            let payload = std::panic::catch_unwind(f)
                .err()
                .unwrap_or_else(|| Box::new(()));
            panic_message(payload.as_ref())
        };
        assert_eq!(text(|| panic!("static")), "static");
        assert_eq!(text(|| panic!("formatted {}", 7)), "formatted 7");
        assert_eq!(
            text(|| std::panic::panic_any(42_u32)),
            "a panic without a message"
        );
    }

    #[test]
    fn a_poisoned_lock_is_still_taken() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _guard = m2.lock();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
