//! Measuring the model as it runs: wall time per stage ([`timings`]), counted multiply-adds per
//! stage ([`macs`]), host <-> device bytes ([`transfer`]), wall time per layer of the image
//! encoder when asked for ([`layers`]) and the heap tuning that keeps per-frame activations from
//! being faulted in anew ([`allocator`]).

pub(crate) mod allocator;
pub mod layers;
pub(crate) mod macs;
pub(crate) mod timings;
pub mod transfer;
