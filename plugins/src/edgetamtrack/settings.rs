//! The element's properties: defaults, the settings they fill, their GObject specs.

use gst::glib;
use gst::prelude::*;

use super::{Overlay, Precision, PromptSource};

pub const DEFAULT_DEVICE: &str = "cpu";
pub const DEFAULT_ENCODER_AHEAD: bool = false;
/// 0: 2 with encoder-ahead, 1 without.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 0;
pub const MAX_IN_FLIGHT: u32 = 8;
pub const DEFAULT_OVERLAY_ALPHA: f64 = 0.5;
pub const DEFAULT_MAX_OBJECTS: u32 = 16;
pub const DEFAULT_LIVE_MODE: bool = false;
pub const DEFAULT_POST_MESSAGES: bool = false;
pub const DEFAULT_MATCH_IOU: f64 = 0.3;
pub const DEFAULT_RESEED_AFTER: u32 = 5;
pub const DEFAULT_MIN_CONFIDENCE: f64 = 0.0;
/// 0: the checkpoint's own input size.
pub const DEFAULT_INPUT_SIZE: u32 = 0;

#[derive(Debug, Clone)]
pub struct Settings {
    pub model: Option<String>,
    pub device: String,
    pub input_size: u32,
    pub prompts: Option<String>,
    pub encoder_ahead: bool,
    pub max_in_flight: u32,
    pub precision: Precision,
    pub overlay: Overlay,
    pub overlay_alpha: f64,
    pub max_objects: u32,
    pub live_mode: bool,
    pub post_messages: bool,
    pub prompt_source: PromptSource,
    pub prompt_roi_types: String,
    pub min_confidence: f64,
    pub match_iou: f64,
    pub reseed_after: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            model: None,
            device: DEFAULT_DEVICE.into(),
            input_size: DEFAULT_INPUT_SIZE,
            prompts: None,
            encoder_ahead: DEFAULT_ENCODER_AHEAD,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            precision: Precision::default(),
            overlay: Overlay::empty(),
            overlay_alpha: DEFAULT_OVERLAY_ALPHA,
            max_objects: DEFAULT_MAX_OBJECTS,
            live_mode: DEFAULT_LIVE_MODE,
            post_messages: DEFAULT_POST_MESSAGES,
            prompt_source: PromptSource::default(),
            prompt_roi_types: String::new(),
            min_confidence: DEFAULT_MIN_CONFIDENCE,
            match_iou: DEFAULT_MATCH_IOU,
            reseed_after: DEFAULT_RESEED_AFTER,
        }
    }
}

impl Settings {
    /// Buffers in the tracking pipeline at once (`max-in-flight`, 0 resolved).
    pub fn in_flight(&self) -> usize {
        match self.max_in_flight {
            0 if self.encoder_ahead => 2,
            0 => 1,
            n => n as usize,
        }
    }

    /// Sets a writable property; false for an unknown name.
    pub fn set(&mut self, name: &str, value: &glib::Value) -> bool {
        let string = || value.get::<Option<String>>().ok().flatten();
        match name {
            "model" => self.model = string(),
            "device" => self.device = string().unwrap_or_else(|| DEFAULT_DEVICE.into()),
            "input-size" => self.input_size = value.get().unwrap_or(DEFAULT_INPUT_SIZE),
            "prompts" => self.prompts = string(),
            "encoder-ahead" => self.encoder_ahead = value.get().unwrap_or(DEFAULT_ENCODER_AHEAD),
            "max-in-flight" => self.max_in_flight = value.get().unwrap_or(DEFAULT_MAX_IN_FLIGHT),
            "precision" => self.precision = value.get().unwrap_or_default(),
            "overlay" => self.overlay = value.get().unwrap_or(Overlay::empty()),
            "overlay-alpha" => self.overlay_alpha = value.get().unwrap_or(DEFAULT_OVERLAY_ALPHA),
            "max-objects" => self.max_objects = value.get().unwrap_or(DEFAULT_MAX_OBJECTS),
            "live-mode" => self.live_mode = value.get().unwrap_or(DEFAULT_LIVE_MODE),
            "post-messages" => self.post_messages = value.get().unwrap_or(DEFAULT_POST_MESSAGES),
            "prompt-source" => self.prompt_source = value.get().unwrap_or_default(),
            "prompt-roi-types" => self.prompt_roi_types = string().unwrap_or_default(),
            "min-confidence" => self.min_confidence = value.get().unwrap_or(DEFAULT_MIN_CONFIDENCE),
            "match-iou" => self.match_iou = value.get().unwrap_or(DEFAULT_MATCH_IOU),
            "reseed-after" => self.reseed_after = value.get().unwrap_or(DEFAULT_RESEED_AFTER),
            _ => return false,
        }
        true
    }

    /// A writable property's value; `None` for an unknown name.
    pub fn get(&self, name: &str) -> Option<glib::Value> {
        Some(match name {
            "model" => self.model.to_value(),
            "device" => self.device.to_value(),
            "input-size" => self.input_size.to_value(),
            "prompts" => self.prompts.to_value(),
            "encoder-ahead" => self.encoder_ahead.to_value(),
            "max-in-flight" => self.max_in_flight.to_value(),
            "precision" => self.precision.to_value(),
            "overlay" => self.overlay.to_value(),
            "overlay-alpha" => self.overlay_alpha.to_value(),
            "max-objects" => self.max_objects.to_value(),
            "live-mode" => self.live_mode.to_value(),
            "post-messages" => self.post_messages.to_value(),
            "prompt-source" => self.prompt_source.to_value(),
            "prompt-roi-types" => self.prompt_roi_types.to_value(),
            "min-confidence" => self.min_confidence.to_value(),
            "match-iou" => self.match_iou.to_value(),
            "reseed-after" => self.reseed_after.to_value(),
            _ => return None,
        })
    }
}

/// Every property, with its blurb, default and range.
pub fn properties() -> Vec<glib::ParamSpec> {
    vec![
        glib::ParamSpecString::builder("model")
            .nick("Model")
            .blurb("EdgeTAM model (required), loaded when the element starts: a folder with config.json + model.safetensors, an edgetam.pt, or a Hugging Face hub repository id such as yonigozlan/EdgeTAM-hf (fetched once into the Hugging Face cache, HF_HOME; HF_HUB_OFFLINE=1 reads only the cache); elements with the same model, device, precision and input size share one copy")
            .mutable_ready()
            .build(),
        glib::ParamSpecString::builder("device")
            .nick("Device")
            .blurb("Compute device: cpu or cuda:N")
            .default_value(Some(DEFAULT_DEVICE))
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt::builder("input-size")
            .nick("Input size")
            .blurb("Model input side: 0 = the checkpoint's own (1024 for the released EdgeTAM), or a multiple of 256 from 256 to 2048 (the same weights; 512 is about 4x faster than 1024 and less accurate); another value fails the start")
            .minimum(0)
            .maximum(edgetam_tracker::MAX_INPUT_SIZE as u32)
            .default_value(DEFAULT_INPUT_SIZE)
            .mutable_ready()
            .build(),
        glib::ParamSpecString::builder("prompts")
            .nick("Prompts")
            .blurb("Initial objects, as the CLI's --prompt, several separated by |: obj=1;frame=0;box=x0,y0,x1,y1 | obj=2;point=x,y,1;point=x,y,0 | obj=3;frame=5;mask=PATH (frame = buffer index since start)")
            .mutable_ready()
            .build(),
        glib::ParamSpecBoolean::builder("encoder-ahead")
            .nick("Encoder ahead")
            .blurb("Run the image encoder of the next buffer on its own thread while the current one is tracked (with max-in-flight >= 2; identical results)")
            .default_value(DEFAULT_ENCODER_AHEAD)
            .mutable_ready()
            .build(),
        glib::ParamSpecUInt::builder("max-in-flight")
            .nick("Buffers in flight")
            .blurb("Buffers in the tracking pipeline at once, output in input order (0 = 2 with encoder-ahead, 1 without)")
            .minimum(0)
            .maximum(MAX_IN_FLIGHT)
            .default_value(DEFAULT_MAX_IN_FLIGHT)
            .mutable_ready()
            .build(),
        glib::ParamSpecEnum::builder::<Precision>("precision")
            .nick("Precision")
            .blurb("f32 (exact) or bf16 (fast mode: the heaviest products in bf16 with f32 accumulation; needs a CPU with AVX512-BF16, elsewhere the element fails to start)")
            .default_value(Precision::default())
            .mutable_ready()
            .build(),
        glib::ParamSpecFlags::builder::<Overlay>("overlay")
            .nick("Overlay")
            .blurb("What to draw into the frames: none, or mask, contour and box combined with +")
            .default_value(Overlay::empty())
            .mutable_playing()
            .build(),
        glib::ParamSpecDouble::builder("overlay-alpha")
            .nick("Overlay alpha")
            .blurb("Weight of the object color in the mask tint (0 = invisible, 1 = opaque)")
            .minimum(0.0)
            .maximum(1.0)
            .default_value(DEFAULT_OVERLAY_ALPHA)
            .mutable_playing()
            .build(),
        glib::ParamSpecUInt::builder("max-objects")
            .nick("Maximum objects")
            .blurb("Most objects tracked at once; prompts (and detections) for further new objects are refused")
            .minimum(1)
            .maximum(1024)
            .default_value(DEFAULT_MAX_OBJECTS)
            .mutable_playing()
            .build(),
        glib::ParamSpecBoolean::builder("live-mode")
            .nick("Live mode")
            .blurb("For live sources: track the newest buffer whenever the tracker is free and pass on untracked the buffers it cannot finish within the latency it reports (they carry the last known objects marked stale)")
            .default_value(DEFAULT_LIVE_MODE)
            .mutable_ready()
            .build(),
        glib::ParamSpecBoolean::builder("post-messages")
            .nick("Post messages")
            .blurb("Post an edgetam-tracking element message (running time, objects, detections) for every tracked buffer")
            .default_value(DEFAULT_POST_MESSAGES)
            .mutable_playing()
            .build(),
        glib::ParamSpecEnum::builder::<PromptSource>("prompt-source")
            .nick("Prompt source")
            .blurb("Where objects come from: property (prompts, signals, events), roi-meta (also upstream GstVideoRegionOfInterestMeta boxes, e.g. facedetect), analytics (also upstream object-detection Mtds; GStreamer >= 1.24 builds)")
            .default_value(PromptSource::default())
            .mutable_ready()
            .build(),
        glib::ParamSpecString::builder("prompt-roi-types")
            .nick("Detection types")
            .blurb("Comma-separated detection classes (ROI types, analytics object types) that prompt objects; empty = all")
            .mutable_playing()
            .build(),
        glib::ParamSpecDouble::builder("min-confidence")
            .nick("Minimum confidence")
            .blurb("Detections whose meta carries a lower confidence are ignored")
            .minimum(0.0)
            .maximum(1.0)
            .default_value(DEFAULT_MIN_CONFIDENCE)
            .mutable_playing()
            .build(),
        glib::ParamSpecDouble::builder("match-iou")
            .nick("Match IoU")
            .blurb("A detection overlapping a tracked object's box by at least this IoU belongs to that object (no new prompt)")
            .minimum(0.0)
            .maximum(1.0)
            .default_value(DEFAULT_MATCH_IOU)
            .mutable_playing()
            .build(),
        glib::ParamSpecUInt::builder("reseed-after")
            .nick("Re-seed after")
            .blurb("An object absent on this many consecutive tracked buffers is re-prompted from the best detection around its last box (0 = never)")
            .minimum(0)
            .maximum(10_000)
            .default_value(DEFAULT_RESEED_AFTER)
            .mutable_playing()
            .build(),
        glib::ParamSpecDouble::builder("fps")
            .nick("FPS")
            .blurb("Buffers tracked per second of processing time, over the last 30 tracked buffers")
            .minimum(0.0)
            .default_value(0.0)
            .read_only()
            .build(),
        glib::ParamSpecUInt64::builder("latency")
            .nick("Latency")
            .blurb("Latency in nanoseconds the element adds in LATENCY queries (longest time a recent buffer spent in the element, plus a margin in live mode)")
            .default_value(0)
            .read_only()
            .build(),
        glib::ParamSpecUInt64::builder("tracked")
            .nick("Tracked buffers")
            .blurb("Buffers tracked since the element started")
            .default_value(0)
            .read_only()
            .build(),
        glib::ParamSpecUInt64::builder("skipped")
            .nick("Skipped buffers")
            .blurb("Buffers passed on untracked since the element started (live mode: late or tracker busy)")
            .default_value(0)
            .read_only()
            .build(),
    ]
}
