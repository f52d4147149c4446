//! Video in and out for `edgetam track` (feature `video`): a file, camera, URI or GStreamer
//! description decoded to RGB frames ([`decode`]), and the overlay encoded to a WebM, MP4 or
//! Matroska file on its own thread ([`encode`]). Both go through the system's GStreamer, so
//! whatever codecs the machine has installed are what `--input` reads; a codec that is missing
//! is named with the Debian package that brings it ([`package_for`]).

pub mod decode;
pub mod encode;

use std::path::PathBuf;

/// Why a video source or output cannot be opened, read or written. Every message names the
/// source or file and, where a plugin is missing, the Debian package that brings it.
#[derive(Debug, thiserror::Error)]
pub enum VideoError {
    #[error("cannot start GStreamer: {0}")]
    Init(String),
    #[error("input {} does not exist", .0.display())]
    NotFound(PathBuf),
    #[error("cannot read input {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("camera {} is not there (no such device; `ls /dev/video*` lists the cameras)", .0.display())]
    NoCamera(PathBuf),
    #[error("bad GStreamer description `{desc}`: {reason}")]
    BadDescription { desc: String, reason: String },
    #[error("GStreamer element `{element}` is not installed (install {package})")]
    MissingElement {
        element: String,
        package: &'static str,
    },
    #[error(
        "{source_name}: no decoder for {what} is installed (install {package}: \
         apt-get install {package})"
    )]
    MissingDecoder {
        source_name: String,
        what: String,
        package: &'static str,
    },
    #[error("{source_name}: no video stream")]
    NoVideo { source_name: String },
    #[error("{source_name}: {message}")]
    Stream {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: no frame within {secs} s")]
    NoFrame { source_name: String, secs: u64 },
    #[error("{source_name}: unexpected frame format: {reason}")]
    Format { source_name: String, reason: String },
    #[error(
        "--output-video {}: unknown extension (expected .webm (VP8), .mkv (VP8 in Matroska) \
         or .mp4 (H.264))", .0.display()
    )]
    UnknownContainer(PathBuf),
    #[error("--output-video {}: folder {} does not exist", path.display(), dir.display())]
    NoOutputFolder { path: PathBuf, dir: PathBuf },
    #[error(
        "--output-video {}: no H.264 encoder is installed (x264enc: install \
         gstreamer1.0-plugins-ugly; or openh264enc: gstreamer1.0-plugins-bad); .webm and .mkv \
         need only gstreamer1.0-plugins-good", .0.display()
    )]
    NoH264Encoder(PathBuf),
    #[error("--output-video {}: {message}", path.display())]
    Encode { path: PathBuf, message: String },
}

/// A `missing-plugin` message of a decodebin: what was needed (caps or an element / protocol
/// name) and GStreamer's own description of it.
#[derive(Debug, Clone)]
pub(crate) struct Missing {
    /// The caps' media type (`video/x-h264`), or a URI protocol / element name.
    pub detail: String,
    /// GStreamer's description, e.g. "H.264 (Main Profile) decoder".
    pub description: String,
}

/// The Debian 12 package that brings the GStreamer plugin for `detail`: a caps media type
/// (decoders, demuxers), a URI protocol or an element name. Unknown ones get the two packages
/// that hold most of the rest.
pub fn package_for(detail: &str) -> &'static str {
    match detail {
        "video/x-h264"
        | "video/x-h265"
        | "video/mpeg"
        | "video/x-divx"
        | "video/x-xvid"
        | "video/x-msmpeg"
        | "video/x-wmv"
        | "video/x-prores"
        | "video/x-ffv"
        | "video/x-h263"
        | "video/x-flash-video"
        | "video/x-mjpeg"
        | "audio/mpeg"
        | "audio/x-ac3"
        | "audio/x-eac3"
        | "audio/x-wma" => "gstreamer1.0-libav",
        "video/x-vp8" | "video/x-vp9" | "video/x-matroska" | "video/webm" | "video/quicktime"
        | "video/x-msvideo" | "video/x-flv" | "image/jpeg" | "image/png" | "audio/x-flac"
        | "application/x-rtp" | "rtsp" | "rtspt" | "http" | "https" | "v4l2src" | "vp8enc"
        | "vp9enc" | "webmmux" | "matroskamux" | "matroskademux" | "mp4mux" | "qtdemux"
        | "rtspsrc" | "souphttpsrc" => "gstreamer1.0-plugins-good",
        "video/x-theora" | "application/ogg" | "audio/x-vorbis" | "audio/x-opus"
        | "video/x-raw" | "audio/x-raw" | "videoconvert" | "appsink" | "appsrc"
        | "uridecodebin" | "decodebin" => "gstreamer1.0-plugins-base",
        "video/x-av1" | "video/mpegts" | "openh264enc" | "h264parse" | "srt" => {
            "gstreamer1.0-plugins-bad"
        }
        "x264enc" => "gstreamer1.0-plugins-ugly",
        _ => "gstreamer1.0-libav or gstreamer1.0-plugins-bad",
    }
}

/// Starts GStreamer once per process.
pub fn init() -> Result<(), VideoError> {
    gst::init().map_err(|e| VideoError::Init(e.to_string()))
}

/// `element` made by its factory, or [`VideoError::MissingElement`] naming its package.
pub(crate) fn make(element: &str) -> Result<gst::Element, VideoError> {
    gst::ElementFactory::make(element)
        .build()
        .map_err(|_| VideoError::MissingElement {
            element: element.to_string(),
            package: package_for(element),
        })
}

/// Whether an element factory is installed.
pub(crate) fn has_element(element: &str) -> bool {
    gst::ElementFactory::find(element).is_some()
}
