//! The process-wide set-up every front end (the CLI, the GStreamer element, the C library, the
//! Python module) runs before its first model: one function, so they all run the model under
//! the same conditions.

use std::sync::Once;

/// Sets the process up for running models, once per process (later calls return at once);
/// [`ModelSpec::load`](crate::ModelSpec::load) calls it. What it sets, each only where the user
/// has not (it never overrides a variable the user set):
///
/// * `RAYON_NUM_THREADS` := the detected core count, and `CANDLE_BARRIER_POOL_SPIN_LIMIT` :=
///   [`CANDLE_SPIN_LIMIT`](crate::CANDLE_SPIN_LIMIT) ([`pin_default_threads`](crate::pin_default_threads)):
///   candle stops re-detecting the core count on every product, and its elementwise pool stops
///   spinning ~0.6 ms after each op (8-10 % of a tracked frame on 2 cores). These take effect
///   only if no thread pool exists yet (rayon and candle read them once, when their pools
///   start), so call this early, before the first model op;
/// * glibc's malloc keeps freed activation buffers (mmap threshold 32 MiB, no trimming, one
///   arena: [`keep_freed_memory`](crate::keep_freed_memory)), unless
///   `EDGETAM_KEEP_FREED_MEMORY=0`. Glibc on Linux only; a no-op elsewhere.
///
/// Writing the environment while another thread reads it with C's `getenv` is a data race in
/// glibc, so a host application with threads of its own should call this (or load its first
/// model) before starting them; the front ends call it at their earliest point (the CLI's
/// `main`, the plugin's init, the Python module's import, the C library's first model load).
pub fn process_setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        crate::kernels::pin_default_threads();
        crate::instrument::allocator::keep_freed_memory();
    });
}
