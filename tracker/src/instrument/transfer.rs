//! Bytes moved between host and a GPU by the tracking path, process-wide.
//!
//! On a GPU everything a stream keeps (image features, the memory bank's ring slots, object
//! pointers, position encodings) stays in device memory; per frame only the frame goes up and the
//! results (mask logits, scores) come down. These counters let a benchmark check that: read a
//! [`snapshot`] before and after a run and divide by the frames. The CPU path records nothing.

use std::sync::atomic::{AtomicU64, Ordering};

static UPLOADED: AtomicU64 = AtomicU64::new(0);
static UPLOADS: AtomicU64 = AtomicU64::new(0);
static DOWNLOADED: AtomicU64 = AtomicU64::new(0);
static DOWNLOADS: AtomicU64 = AtomicU64::new(0);

/// Totals since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Host -> device bytes and copies.
    pub uploaded_bytes: u64,
    pub uploads: u64,
    /// Device -> host bytes and copies.
    pub downloaded_bytes: u64,
    pub downloads: u64,
}

impl Transfers {
    /// What moved between `earlier` and `self`.
    pub fn since(&self, earlier: &Transfers) -> Transfers {
        Transfers {
            uploaded_bytes: self.uploaded_bytes.saturating_sub(earlier.uploaded_bytes),
            uploads: self.uploads.saturating_sub(earlier.uploads),
            downloaded_bytes: self
                .downloaded_bytes
                .saturating_sub(earlier.downloaded_bytes),
            downloads: self.downloads.saturating_sub(earlier.downloads),
        }
    }
}

/// The current totals.
pub fn snapshot() -> Transfers {
    Transfers {
        uploaded_bytes: UPLOADED.load(Ordering::Relaxed),
        uploads: UPLOADS.load(Ordering::Relaxed),
        downloaded_bytes: DOWNLOADED.load(Ordering::Relaxed),
        downloads: DOWNLOADS.load(Ordering::Relaxed),
    }
}

/// Records a host -> device copy of `bytes`.
pub fn record_upload(bytes: usize) {
    UPLOADED.fetch_add(bytes as u64, Ordering::Relaxed);
    UPLOADS.fetch_add(1, Ordering::Relaxed);
}

/// Records a device -> host copy of `bytes`.
pub fn record_download(bytes: usize) {
    DOWNLOADED.fetch_add(bytes as u64, Ordering::Relaxed);
    DOWNLOADS.fetch_add(1, Ordering::Relaxed);
}

/// Records a copy of `t` to the host, if `t` is on a GPU.
pub(crate) fn note_download(t: &candle_core::Tensor) {
    if !t.device().is_cpu() {
        record_download(t.elem_count() * t.dtype().size_in_bytes());
    }
}
