//! The overlay video: RGB frames into `appsrc ! videoconvert ! I420 ! encoder ! muxer !
//! filesink`, on a thread of its own beside the tracker. The file is written under a temporary
//! name next to the output and renamed when the muxer has finished it (EOS), so an output that
//! exists is always a complete, playable file; a failure or an abort removes the temporary.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use gst::prelude::*;
use image::RgbImage;

use super::{has_element, make, VideoError};

/// Container and codec, from the output's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.webm`: VP8 in WebM (gstreamer1.0-plugins-good), what every browser plays.
    Webm,
    /// `.mkv`: VP8 in Matroska.
    Mkv,
    /// `.mp4`: H.264 (x264enc, else openh264enc) in MP4.
    Mp4 { x264: bool },
}

impl Format {
    /// The format for `path`, checked against the installed encoders and the output folder
    /// before anything runs.
    pub fn for_path(path: &Path) -> Result<Self, VideoError> {
        super::init()?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(VideoError::NoOutputFolder {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
            });
        }
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        let format = match ext.as_deref() {
            Some("webm") => Self::Webm,
            Some("mkv") => Self::Mkv,
            Some("mp4") | Some("m4v") => {
                if has_element("x264enc") {
                    Self::Mp4 { x264: true }
                } else if has_element("openh264enc") {
                    Self::Mp4 { x264: false }
                } else {
                    return Err(VideoError::NoH264Encoder(path.to_path_buf()));
                }
            }
            _ => return Err(VideoError::UnknownContainer(path.to_path_buf())),
        };
        let needed: &[&str] = match format {
            Self::Webm => &["vp8enc", "webmmux"],
            Self::Mkv => &["vp8enc", "matroskamux"],
            Self::Mp4 { .. } => &["mp4mux", "h264parse"],
        };
        for element in ["appsrc", "videoconvert", "filesink"].iter().chain(needed) {
            if !has_element(element) {
                make(element)?;
            }
        }
        Ok(format)
    }

    pub fn codec(self) -> &'static str {
        match self {
            Self::Webm | Self::Mkv => "VP8",
            Self::Mp4 { .. } => "H.264",
        }
    }
}

enum Msg {
    Frame(RgbImage, Duration),
    Abort,
}

/// A running encoder; [`Encoder::finish`] completes the file, dropping it unfinished removes it.
pub struct Encoder {
    tx: Option<SyncSender<Msg>>,
    thread: Option<JoinHandle<Result<u64, VideoError>>>,
    path: PathBuf,
    tmp: PathBuf,
    size: (u32, u32),
    first_pts: Option<Duration>,
    /// One frame at the output's rate: frames without a pts are spaced by it.
    frame: Duration,
    sent: u32,
    codec: &'static str,
}

/// Frames waiting for the encoder thread before the tracker's side waits.
const BACKLOG: usize = 4;
/// How long the muxer may take to finish the file after the last frame.
const FINISH_TIMEOUT: Duration = Duration::from_secs(120);

impl Encoder {
    /// Starts encoding `width`x`height` frames at `fps` (frames per second as a fraction) into
    /// `path` in `format`.
    pub fn start(
        path: &Path,
        format: Format,
        width: usize,
        height: usize,
        fps: (i32, i32),
    ) -> Result<Self, VideoError> {
        let fail = |message: String| VideoError::Encode {
            path: path.to_path_buf(),
            message,
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "output".into());
        let tmp = path.with_file_name(format!(".{name}.{}.part", std::process::id()));
        let (w, h) = (width as u32, height as u32);
        let caps = gst::Caps::builder("video/x-raw")
            .field("format", "RGB")
            .field("width", w as i32)
            .field("height", h as i32)
            .field("framerate", gst::Fraction::new(fps.0, fps.1))
            .build();
        let src = gst_app::AppSrc::builder()
            .caps(&caps)
            .format(gst::Format::Time)
            .block(true)
            .max_bytes(3 * 3 * u64::from(w) * u64::from(h))
            .build();
        let convert = make("videoconvert")?;
        let i420 = make("capsfilter")?;
        let mut i420_caps = gst::Caps::builder("video/x-raw").field("format", "I420");
        let mut chain: Vec<gst::Element> = vec![src.clone().upcast(), convert];
        if matches!(format, Format::Mp4 { .. }) && (w % 2 == 1 || h % 2 == 1) {
            // H.264 in 4:2:0 (what browsers play) needs even sides: scale to the even size
            // below (one pixel less).
            chain.push(make("videoscale")?);
            i420_caps = i420_caps
                .field("width", (w & !1).max(2) as i32)
                .field("height", (h & !1).max(2) as i32);
        }
        i420.set_property("caps", i420_caps.build());
        chain.push(i420);
        // Bits per second: about 4 per pixel per frame second, at least 800 kbit/s.
        let rate = f64::from(fps.0) / f64::from(fps.1.max(1));
        let bits = ((f64::from(w) * f64::from(h) * rate * 0.13) as u64).max(800_000);
        match format {
            Format::Webm | Format::Mkv => {
                let enc = make("vp8enc")?;
                // Realtime: the encoder shares the cores with the tracker.
                enc.set_property("deadline", 1i64);
                enc.set_property("cpu-used", 4i32);
                enc.set_property("target-bitrate", bits.min(i32::MAX as u64) as i32);
                enc.set_property("keyframe-max-dist", (rate.round() as i32 * 2).max(1));
                chain.push(enc);
                chain.push(make(if format == Format::Webm {
                    "webmmux"
                } else {
                    "matroskamux"
                })?);
            }
            Format::Mp4 { x264 } => {
                if x264 {
                    let enc = make("x264enc")?;
                    enc.set_property("bitrate", (bits / 1000).min(u32::MAX as u64) as u32);
                    enc.set_property_from_str("speed-preset", "veryfast");
                    enc.set_property_from_str("tune", "zerolatency");
                    chain.push(enc);
                } else {
                    let enc = make("openh264enc")?;
                    enc.set_property("bitrate", bits.min(u32::MAX as u64) as u32);
                    chain.push(enc);
                }
                chain.push(make("h264parse")?);
                chain.push(make("mp4mux")?);
            }
        }
        let sink = make("filesink")?;
        sink.set_property("location", tmp.to_string_lossy().as_ref());
        chain.push(sink);
        let pipeline = gst::Pipeline::new();
        pipeline
            .add_many(&chain)
            .and_then(|_| gst::Element::link_many(&chain))
            .map_err(|e| fail(format!("cannot build the encoder: {e}")))?;
        if pipeline.set_state(gst::State::Playing).is_err() {
            let e = bus_error(&pipeline).unwrap_or_else(|| "cannot start the encoder".into());
            let _ = pipeline.set_state(gst::State::Null);
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e));
        }
        let (tx, rx) = sync_channel(BACKLOG);
        let out = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("edgetam-encode".into())
            .spawn(move || {
                let result = run(&pipeline, &src, rx, fps)
                    .map_err(|message| VideoError::Encode { path: out, message });
                let _ = pipeline.set_state(gst::State::Null);
                result
            })
            .map_err(|e| fail(format!("cannot start the encoder thread: {e}")))?;
        let frame =
            Duration::from_nanos((1e9 * f64::from(fps.1) / f64::from(fps.0.max(1))).round() as u64);
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            path: path.to_path_buf(),
            tmp,
            size: (w, h),
            first_pts: None,
            frame,
            sent: 0,
            codec: format.codec(),
        })
    }

    /// Queues one frame shown at `pts` (the output starts at the first frame's pts); waits
    /// while the encoder is [`BACKLOG`] frames behind.
    pub fn send(&mut self, img: RgbImage, pts: Option<Duration>) -> Result<(), VideoError> {
        if img.dimensions() != self.size {
            return Err(VideoError::Encode {
                path: self.path.clone(),
                message: format!(
                    "a frame is {}x{} but the video is {}x{} (one size per output video)",
                    img.width(),
                    img.height(),
                    self.size.0,
                    self.size.1
                ),
            });
        }
        let pts = pts.unwrap_or(self.frame * self.sent);
        self.sent = self.sent.saturating_add(1);
        let t = pts.saturating_sub(*self.first_pts.get_or_insert(pts));
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send(Msg::Frame(img, t)).is_ok());
        if !sent {
            // The thread ended on an error: that error is the answer.
            self.tx = None;
            return Err(self.join().err().unwrap_or_else(|| VideoError::Encode {
                path: self.path.clone(),
                message: "the encoder stopped".into(),
            }));
        }
        Ok(())
    }

    /// The codec written (`VP8`, `H.264`).
    pub fn codec(&self) -> &'static str {
        self.codec
    }

    /// Ends the stream (EOS), waits for the muxer to finish the file and moves it to its name.
    /// Returns the number of frames written.
    pub fn finish(mut self) -> Result<u64, VideoError> {
        self.tx = None;
        let frames = self.join()?;
        std::fs::rename(&self.tmp, &self.path).map_err(|e| VideoError::Encode {
            path: self.path.clone(),
            message: format!("cannot move {} into place: {e}", self.tmp.display()),
        })?;
        Ok(frames)
    }

    fn join(&mut self) -> Result<u64, VideoError> {
        let result = match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(VideoError::Encode {
                    path: self.path.clone(),
                    message: "the encoder thread panicked".into(),
                })
            }),
            None => Err(VideoError::Encode {
                path: self.path.clone(),
                message: "the encoder already stopped".into(),
            }),
        };
        if result.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        result
    }
}

impl Drop for Encoder {
    /// An unfinished output (an error elsewhere) is aborted and its temporary removed.
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.try_send(Msg::Abort);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// The encoder thread: frames in until the channel closes, then EOS and wait for the muxer.
fn run(
    pipeline: &gst::Pipeline,
    src: &gst_app::AppSrc,
    rx: Receiver<Msg>,
    fps: (i32, i32),
) -> Result<u64, String> {
    let duration = gst::ClockTime::from_nseconds(
        (1e9 * f64::from(fps.1) / f64::from(fps.0.max(1))).round() as u64,
    );
    let mut frames = 0u64;
    for msg in rx {
        let (img, pts) = match msg {
            Msg::Frame(img, pts) => (img, pts),
            Msg::Abort => return Err("aborted".into()),
        };
        let mut buffer = gst::Buffer::from_mut_slice(img.into_raw());
        if let Some(b) = buffer.get_mut() {
            b.set_pts(gst::ClockTime::from_nseconds(pts.as_nanos() as u64));
            b.set_duration(duration);
        }
        if src.push_buffer(buffer).is_err() {
            return Err(bus_error(pipeline).unwrap_or_else(|| "the encoder stopped".into()));
        }
        frames += 1;
        if let Some(e) = bus_error(pipeline) {
            return Err(e);
        }
    }
    src.end_of_stream()
        .map_err(|e| format!("cannot end the stream: {e}"))?;
    let bus = pipeline.bus().ok_or("the encoder has no bus")?;
    let msg = bus.timed_pop_filtered(
        gst::ClockTime::from_nseconds(FINISH_TIMEOUT.as_nanos() as u64),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    match msg.as_ref().map(|m| m.view()) {
        Some(gst::MessageView::Eos(_)) => Ok(frames),
        Some(gst::MessageView::Error(e)) => Err(e.error().to_string()),
        _ => Err(format!(
            "the muxer did not finish within {} s",
            FINISH_TIMEOUT.as_secs()
        )),
    }
}

/// The first error message waiting on the pipeline's bus.
fn bus_error(pipeline: &gst::Pipeline) -> Option<String> {
    let bus = pipeline.bus()?;
    let msg = bus.pop_filtered(&[gst::MessageType::Error])?;
    match msg.view() {
        gst::MessageView::Error(e) => Some(match e.debug() {
            Some(d) => format!("{} ({d})", e.error()),
            None => e.error().to_string(),
        }),
        _ => None,
    }
}
