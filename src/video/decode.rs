//! A video source decoded to packed RGB frames through GStreamer: `uridecodebin` for files and
//! URIs, `v4l2src` for cameras, or a user's `gst:` description, each into `videoconvert` and an
//! `appsink`. Decoding runs on GStreamer's own streaming threads; [`VideoSource::next`] hands
//! the frames over one at a time, and a file source waits (back-pressure) while the tracker is
//! behind, so no frame of a file is ever lost.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gst::prelude::*;
use gst_video::prelude::*;
use image::RgbImage;

use super::{make, package_for, Missing, VideoError};

/// What `--input` names, besides a folder of frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// A video file (any container and codec GStreamer decodes here).
    File(PathBuf),
    /// A URI GStreamer reads: `rtsp://`, `http(s)://`, `file://`, ...
    Uri(String),
    /// A V4L2 camera device (`/dev/video0`).
    Camera(PathBuf),
    /// A GStreamer source description (`gst:videotestsrc is-live=true ! ...`), as OpenCV's
    /// GStreamer capture takes it; a trailing `! appsink ...` is allowed and replaced by ours.
    Launch(String),
}

impl SourceKind {
    /// Classifies `--input` (a folder is the caller's business).
    pub fn parse(s: &str) -> Self {
        if let Some(desc) = s.strip_prefix("gst:") {
            return Self::Launch(desc.trim().to_string());
        }
        if s.contains("://") {
            return Self::Uri(s.to_string());
        }
        if s.starts_with("/dev/video") {
            return Self::Camera(PathBuf::from(s));
        }
        Self::File(PathBuf::from(s))
    }

    /// How messages name the source.
    pub fn label(&self) -> String {
        match self {
            Self::File(p) => p.display().to_string(),
            Self::Uri(u) => u.clone(),
            Self::Camera(p) => format!("camera {}", p.display()),
            Self::Launch(d) => format!("gst:{d}"),
        }
    }
}

/// One decoded frame.
pub struct DecodedFrame {
    pub img: RgbImage,
    /// Presentation time: stream time for files, time since the first frame for live sources.
    pub pts: Option<Duration>,
}

/// What [`VideoSource::next`] found.
pub enum Next {
    Frame(DecodedFrame),
    /// Nothing yet (the caller checks its stop conditions and asks again).
    Waiting,
    /// The end of the stream.
    Eos,
}

/// An opened, prerolled source: its first frame's size is known and the stream is set up.
pub struct VideoSource {
    pipeline: gst::Pipeline,
    sink: gst_app::AppSink,
    label: String,
    missing: Arc<Mutex<Vec<Missing>>>,
    /// A live source (camera, RTSP, `is-live=true`): frames come at the source's pace.
    pub live: bool,
    pub width: usize,
    pub height: usize,
    /// Frames per second from the caps (`None` when the source does not say).
    pub fps: Option<(i32, i32)>,
    /// Length of a file (`None` for live sources and streams that do not say).
    pub duration: Option<Duration>,
    /// The first frame's pts, subtracted from a live source's timestamps.
    first_pts: Mutex<Option<Duration>>,
}

/// How long opening may take before the source counts as dead.
const OPEN_TIMEOUT: Duration = Duration::from_secs(20);

impl VideoSource {
    /// Builds the decoding pipeline and prerolls it: errors (a missing file, a missing codec,
    /// a camera that is not there, a bad description) come out here, before anything is
    /// written or a model is loaded.
    pub fn open(kind: &SourceKind) -> Result<Self, VideoError> {
        super::init()?;
        let label = kind.label();
        let pipeline = gst::Pipeline::new();
        let convert = make("videoconvert")?;
        let caps = gst::Caps::builder("video/x-raw")
            .field("format", "RGB")
            .build();
        let sink = gst_app::AppSink::builder()
            .caps(&caps)
            .max_buffers(2)
            .drop(false)
            .sync(false)
            .build();
        pipeline
            .add_many([&convert, sink.upcast_ref()])
            .and_then(|_| convert.link(&sink))
            .map_err(|e| stream_error(&label, e))?;
        let missing = Arc::new(Mutex::new(Vec::new()));
        match kind {
            SourceKind::File(path) => {
                let uri = file_uri(path)?;
                add_uridecodebin(&pipeline, &convert, &uri, &label)?;
            }
            SourceKind::Uri(uri) => add_uridecodebin(&pipeline, &convert, uri, &label)?,
            SourceKind::Camera(dev) => {
                if !dev.exists() {
                    return Err(VideoError::NoCamera(dev.clone()));
                }
                let src = make("v4l2src")?;
                src.set_property("device", dev.to_string_lossy().as_ref());
                pipeline
                    .add(&src)
                    .and_then(|_| src.link(&convert))
                    .map_err(|e| stream_error(&label, e))?;
            }
            SourceKind::Launch(desc) => {
                let desc = strip_appsink(desc);
                // A description may end in caps (`... ! video/x-raw,width=320`), which the
                // parser takes only between two elements.
                let full = format!("{desc} ! identity silent=true");
                let bin = gst::parse::bin_from_description(&full, true).map_err(|e| {
                    VideoError::BadDescription {
                        desc: desc.to_string(),
                        reason: e.to_string(),
                    }
                })?;
                if bin.static_pad("src").is_none() {
                    return Err(VideoError::BadDescription {
                        desc: desc.to_string(),
                        reason: "it has no video output left unlinked (end it with the last \
                                 element of the source, e.g. `videotestsrc ! video/x-raw,width=320`)"
                            .into(),
                    });
                }
                pipeline.add(&bin).map_err(|e| stream_error(&label, e))?;
                bin.link(&convert).map_err(|e| VideoError::BadDescription {
                    desc: desc.to_string(),
                    reason: format!("its output is not raw video: {e}"),
                })?;
            }
        }
        let mut source = Self {
            pipeline,
            sink,
            label,
            missing,
            live: false,
            width: 0,
            height: 0,
            fps: None,
            duration: None,
            first_pts: Mutex::new(None),
        };
        source.preroll()?;
        Ok(source)
    }

    /// Pauses the pipeline until the first frame is there (a live source plays), and reads
    /// its size, rate and length.
    fn preroll(&mut self) -> Result<(), VideoError> {
        let change = self.pipeline.set_state(gst::State::Paused);
        let caps = match change {
            Ok(gst::StateChangeSuccess::NoPreroll) => {
                // Live: keep only the newest frame until tracking starts.
                self.live = true;
                self.sink.set_drop(true);
                self.sink.set_max_buffers(1);
                self.play()?;
                self.first_caps(
                    |sink, t| sink.try_pull_sample(t),
                    || VideoError::Stream {
                        source_name: self.label.clone(),
                        message: "the stream ended before its first frame".into(),
                    },
                )?
            }
            Ok(_) => self.first_caps(
                |sink, t| sink.try_pull_preroll(t),
                || VideoError::NoVideo {
                    source_name: self.label.clone(),
                },
            )?,
            Err(_) => {
                self.check_bus()?;
                return Err(VideoError::Stream {
                    source_name: self.label.clone(),
                    message: "cannot start the source".into(),
                });
            }
        };
        let caps = caps.ok_or_else(|| self.format_error("a frame without caps"))?;
        let info = gst_video::VideoInfo::from_caps(&caps)
            .map_err(|e| self.format_error(&e.to_string()))?;
        self.width = info.width() as usize;
        self.height = info.height() as usize;
        let fps = info.fps();
        self.fps = (fps.numer() > 0 && fps.denom() > 0).then(|| (fps.numer(), fps.denom()));
        if !self.live {
            self.duration = self
                .pipeline
                .query_duration::<gst::ClockTime>()
                .map(|d| Duration::from_nanos(d.nseconds()));
        }
        Ok(())
    }

    /// Waits at most [`OPEN_TIMEOUT`] for the first sample `pull` takes from the sink (a
    /// played sample for a live source, the preroll for the others) and returns its caps; a
    /// stream that ends first is `at_eos()`, an error on the bus is returned as it comes.
    fn first_caps(
        &self,
        pull: impl Fn(&gst_app::AppSink, gst::ClockTime) -> Option<gst::Sample>,
        at_eos: impl FnOnce() -> VideoError,
    ) -> Result<Option<gst::Caps>, VideoError> {
        let deadline = Instant::now() + OPEN_TIMEOUT;
        loop {
            self.check_bus()?;
            if let Some(s) = pull(&self.sink, gst::ClockTime::from_mseconds(100)) {
                return Ok(s.caps().map(|c| c.to_owned()));
            }
            if self.sink.is_eos() {
                return Err(at_eos());
            }
            if Instant::now() > deadline {
                return Err(VideoError::NoFrame {
                    source_name: self.label.clone(),
                    secs: OPEN_TIMEOUT.as_secs(),
                });
            }
        }
    }

    /// Starts (or resumes) the flow of frames.
    pub fn play(&self) -> Result<(), VideoError> {
        if self.pipeline.set_state(gst::State::Playing).is_err() {
            self.check_bus()?;
            return Err(VideoError::Stream {
                source_name: self.label.clone(),
                message: "cannot play the source".into(),
            });
        }
        Ok(())
    }

    /// Called when tracking starts: a live source now hands over every frame (the pipeline's
    /// queue drops what the tracker cannot take, and counts it).
    pub fn start(&self) -> Result<(), VideoError> {
        if self.live {
            self.sink.set_max_buffers(4);
        } else {
            self.play()?;
        }
        Ok(())
    }

    /// The next frame, waiting at most `timeout`.
    pub fn next(&self, timeout: Duration) -> Result<Next, VideoError> {
        let Some(sample) = self
            .sink
            .try_pull_sample(gst::ClockTime::from_nseconds(timeout.as_nanos() as u64))
        else {
            return Ok(if self.sink.is_eos() {
                Next::Eos
            } else {
                Next::Waiting
            });
        };
        self.convert(&sample).map(Next::Frame)
    }

    /// A sample as a packed RGB image (rows copied without their stride padding).
    fn convert(&self, sample: &gst::Sample) -> Result<DecodedFrame, VideoError> {
        let caps = sample
            .caps()
            .ok_or_else(|| self.format_error("a frame without caps"))?;
        let info =
            gst_video::VideoInfo::from_caps(caps).map_err(|e| self.format_error(&e.to_string()))?;
        let buffer = sample
            .buffer()
            .ok_or_else(|| self.format_error("a sample without a buffer"))?;
        let frame = gst_video::VideoFrameRef::from_buffer_ref_readable(buffer, &info)
            .map_err(|e| self.format_error(&e.to_string()))?;
        let (w, h) = (info.width() as usize, info.height() as usize);
        let stride = usize::try_from(frame.plane_stride()[0])
            .map_err(|_| self.format_error("a negative stride"))?;
        let data = frame
            .plane_data(0)
            .map_err(|e| self.format_error(&e.to_string()))?;
        let row = w * 3;
        if stride < row || data.len() < stride * (h.max(1) - 1) + row {
            return Err(self.format_error("a frame smaller than its caps"));
        }
        let mut packed = Vec::with_capacity(row * h);
        for y in 0..h {
            packed.extend_from_slice(&data[y * stride..y * stride + row]);
        }
        let img = RgbImage::from_raw(w as u32, h as u32, packed)
            .ok_or_else(|| self.format_error("a frame of the wrong size"))?;
        let pts = buffer.pts().map(|pts| {
            let stream = sample
                .segment()
                .and_then(|s| s.downcast_ref::<gst::ClockTime>())
                .and_then(|s| s.to_stream_time(pts))
                .unwrap_or(pts);
            Duration::from_nanos(stream.nseconds())
        });
        let pts = if self.live {
            let mut first = self.first_pts.lock().unwrap_or_else(|p| p.into_inner());
            pts.map(|t| t.saturating_sub(*first.get_or_insert(t)))
        } else {
            pts
        };
        Ok(DecodedFrame { img, pts })
    }

    /// The first error on the bus, as a typed error (a missing decoder named with its Debian
    /// package); missing-plugin notes are kept for it.
    pub fn check_bus(&self) -> Result<(), VideoError> {
        let Some(bus) = self.pipeline.bus() else {
            return Ok(());
        };
        while let Some(msg) = bus.pop() {
            use gst::MessageView;
            match msg.view() {
                MessageView::Element(e) => {
                    if let Some(s) = e.structure().filter(|s| s.has_name("missing-plugin")) {
                        let detail = s
                            .get::<gst::Caps>("detail")
                            .ok()
                            .and_then(|c| c.structure(0).map(|s| s.name().to_string()))
                            .or_else(|| s.get::<String>("detail").ok())
                            .unwrap_or_default();
                        let description = s.get::<String>("name").unwrap_or_default();
                        lock(&self.missing).push(Missing {
                            detail,
                            description,
                        });
                    }
                }
                MessageView::Application(a)
                    if a.structure().is_some_and(|s| s.has_name(NO_VIDEO)) =>
                {
                    return Err(self.missing_or(VideoError::NoVideo {
                        source_name: self.label.clone(),
                    }));
                }
                MessageView::Error(err) => {
                    let message = err.error().to_string();
                    let hint = match err.debug() {
                        Some(d) if d.contains("No such file") || d.contains("does not exist") => {
                            " (no such file or device)"
                        }
                        _ => "",
                    };
                    return Err(self.missing_or(VideoError::Stream {
                        source_name: self.label.clone(),
                        message: format!("{message}{hint}"),
                    }));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A missing video decoder or demuxer explains an error better than the error itself.
    fn missing_or(&self, error: VideoError) -> VideoError {
        let missing = lock(&self.missing);
        let video = missing
            .iter()
            .find(|m| !m.detail.starts_with("audio/") && !m.detail.starts_with("text/"));
        match video {
            Some(m) => VideoError::MissingDecoder {
                source_name: self.label.clone(),
                // GStreamer's description ends in "decoder" ("H.264 (High Profile) decoder").
                what: match m.description.trim_end_matches(" decoder") {
                    "" => m.detail.clone(),
                    what => format!("{what} ({})", m.detail),
                },
                package: package_for(&m.detail),
            },
            None => error,
        }
    }

    fn format_error(&self, reason: &str) -> VideoError {
        VideoError::Format {
            source_name: self.label.clone(),
            reason: reason.to_string(),
        }
    }
}

impl Drop for VideoSource {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

/// The application message a decodebin posts when it found no video stream.
const NO_VIDEO: &str = "edgetam-no-video";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn stream_error(label: &str, e: impl std::fmt::Display) -> VideoError {
    VideoError::Stream {
        source_name: label.to_string(),
        message: e.to_string(),
    }
}

/// `file://` URI of an existing, readable file.
fn file_uri(path: &Path) -> Result<String, VideoError> {
    if !path.exists() {
        return Err(VideoError::NotFound(path.to_path_buf()));
    }
    std::fs::File::open(path).map_err(|source| VideoError::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    if path.is_dir() {
        return Err(VideoError::Unreadable {
            path: path.to_path_buf(),
            source: std::io::Error::other("a folder without frames"),
        });
    }
    let abs = std::path::absolute(path).map_err(|source| VideoError::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    gst::glib::filename_to_uri(&abs, None)
        .map(|u| u.to_string())
        .map_err(|e| VideoError::Unreadable {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })
}

/// A `uridecodebin` for `uri` exposing only raw video, its first video pad linked to
/// `convert`; no video stream at all is posted as [`NO_VIDEO`].
fn add_uridecodebin(
    pipeline: &gst::Pipeline,
    convert: &gst::Element,
    uri: &str,
    label: &str,
) -> Result<(), VideoError> {
    let decode = make("uridecodebin")?;
    decode.set_property("uri", uri);
    decode.set_property(
        "caps",
        gst::Caps::builder("video/x-raw").any_features().build(),
    );
    decode.set_property("expose-all-streams", false);
    pipeline.add(&decode).map_err(|e| stream_error(label, e))?;
    let sink_pad = convert
        .static_pad("sink")
        .ok_or_else(|| stream_error(label, "videoconvert has no sink pad"))?;
    decode.connect_pad_added(move |_, pad| {
        let is_video = pad
            .current_caps()
            .unwrap_or_else(|| pad.query_caps(None))
            .structure(0)
            .is_some_and(|s| s.name().starts_with("video/"));
        if is_video && !sink_pad.is_linked() {
            // A failed link surfaces as a not-linked error on the bus.
            let _ = pad.link(&sink_pad);
        }
    });
    let convert = convert.clone();
    decode.connect_no_more_pads(move |decode| {
        let linked = convert.static_pad("sink").is_some_and(|p| p.is_linked());
        if !linked {
            let msg = gst::message::Application::builder(gst::Structure::new_empty(NO_VIDEO))
                .src(decode)
                .build();
            let _ = decode.post_message(msg);
        }
    });
    Ok(())
}

/// An OpenCV-style description ends in `! appsink ...`: ours replaces it.
fn strip_appsink(desc: &str) -> &str {
    match desc.rsplit_once('!') {
        Some((head, last)) if last.trim_start().starts_with("appsink") => head.trim_end(),
        _ => desc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_classified() {
        for (source, want) in [
            (
                "gst:videotestsrc ! appsink",
                SourceKind::Launch("videotestsrc ! appsink".into()),
            ),
            (
                "rtsp://127.0.0.1:8554/x",
                SourceKind::Uri("rtsp://127.0.0.1:8554/x".into()),
            ),
            ("/dev/video0", SourceKind::Camera("/dev/video0".into())),
            ("clip.mp4", SourceKind::File("clip.mp4".into())),
        ] {
            assert_eq!(SourceKind::parse(source), want, "{source}");
        }
        assert_eq!(
            strip_appsink("videotestsrc ! videoconvert ! appsink drop=1"),
            "videotestsrc ! videoconvert"
        );
        assert_eq!(strip_appsink("videotestsrc"), "videotestsrc");
    }
}
