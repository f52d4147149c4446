//! Keeping freed activation buffers in the process heap (glibc).
//!
//! Every stage allocates its outputs afresh (candle tensors own their buffers): several 4-25 MiB
//! activations per frame. glibc serves blocks above its mmap threshold with fresh `mmap`s and
//! returns them on free, and trims the heap top beyond its trim threshold, so each frame pays
//! page faults and kernel page zeroing for the same sizes again (BENCHMARKS.md, "Kernel notes"). [`keep_freed_memory`] raises the mmap threshold to glibc's maximum
//! (32 MiB) and stops trimming, so freed buffers are reused. Peak memory is unchanged (the
//! buffers were needed anyway) and stays flat over a stream; freed memory is just not handed
//! back to the OS while the process runs.
//!
//! It also keeps every thread on one heap (`M_ARENA_MAX` 1). A frame's compute runs on
//! whichever worker of the pool picks it up (`kernels::threads::on_compute_pool`), and glibc
//! gives each thread an arena of its own: with two arenas each kept its own freed buffers, so
//! resident memory settled about twice as far above the model as with one (BENCHMARKS.md). Small
//! allocations still come from each thread's cache without the heap's lock.

/// Tunes glibc's `malloc` as described in the module docs; process-wide, idempotent. Returns
/// whether it applied (glibc on Linux only; elsewhere it does nothing). The `edgetam` CLI and
/// the GStreamer element call it; library users opt in.
///
/// `EDGETAM_KEEP_FREED_MEMORY=0` in the environment turns it off (to compare, or where returning
/// memory to the OS matters more than speed).
pub fn keep_freed_memory() -> bool {
    if std::env::var("EDGETAM_KEEP_FREED_MEMORY").is_ok_and(|v| v == "0") {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        /// glibc's upper bound for `M_MMAP_THRESHOLD` on 64-bit targets (`HEAP_MAX_SIZE / 2`).
        const MAX_MMAP_THRESHOLD: libc::c_int = 32 * 1024 * 1024;
        // SAFETY: `mallopt` only changes allocator parameters; any value is accepted or
        // rejected with a 0 return, and allocations made before keep working.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MAX_MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) == 1
                && libc::mallopt(libc::M_ARENA_MAX, 1) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
