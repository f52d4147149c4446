//! `edgetam track --input` of real video files (made here by GStreamer's own encoders) and live
//! sources, and `--output-video`: what a user gets, exit codes and messages.
#![cfg(feature = "video")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Frames of the test clip: 12 at 10 fps (1.2 s), 96x64.
const FRAMES: usize = 12;
const W: u32 = 96;
const H: u32 = 64;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("edgetam-video-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_dir_all(&path);
    let _ = std::fs::remove_file(&path);
    path
}

fn edgetam_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_edgetam"));
    cmd.args(args)
        .current_dir(root())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("GST_PLUGIN_FEATURE_RANK");
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `edgetam track --random-weights --input-size 256 --input INPUT`, a `--prompt` per spec of
/// `prompts`, then `rest`.
fn track_cmd(input: &str, prompts: &[&str], rest: &[&str]) -> Command {
    let mut cmd = edgetam_cmd(&["track", "--random-weights", "--input-size", "256"]);
    cmd.args(["--input", input]);
    for p in prompts {
        cmd.args(["--prompt", p]);
    }
    cmd.args(rest);
    cmd
}

/// [`track_cmd`] run to its end, which must succeed; its stdout.
fn track_ok(input: impl AsRef<Path>, prompts: &[&str], rest: &[&str]) -> String {
    let input = input.as_ref().to_str().unwrap();
    let o = track_cmd(input, prompts, rest)
        .output()
        .expect("run edgetam");
    assert!(o.status.success(), "{input}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The prompt of the tests that do not care where the object is.
const BOX: &str = "obj=1;box=1,1,20,20";

/// A folder of PNG frames: a red square moving right and down over a dark background.
fn frames(name: &str) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..FRAMES as u32 {
        let (x0, y0) = (10 + 3 * i, 12 + i);
        let img = image::RgbImage::from_fn(W, H, |x, y| {
            if (x0..x0 + 28).contains(&x) && (y0..y0 + 26).contains(&y) {
                image::Rgb([200, 50, 50])
            } else {
                image::Rgb([20, 20 + (x % 7) as u8, 80])
            }
        });
        img.save(dir.join(format!("frame_{i:03}.png"))).unwrap();
    }
    dir
}

/// `gst-launch-1.0 -q` with `desc` split into words; panics with its output on failure.
fn gst_launch(desc: &str) {
    let o = Command::new("gst-launch-1.0")
        .arg("-q")
        .args(desc.split_whitespace())
        .output()
        .expect("gst-launch-1.0 (gstreamer1.0-tools)");
    assert!(
        o.status.success(),
        "gst-launch-1.0 {desc}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

/// The PNG frames of `dir` encoded by `encode` (e.g. `vp8enc ! webmmux`) into `out`.
fn encode_frames(dir: &Path, encode: &str, out: &Path) {
    gst_launch(&format!(
        "multifilesrc location={}/frame_%03d.png index=0 caps=image/png,framerate=10/1 ! pngdec \
         ! videoconvert ! {encode} ! filesink location={}",
        dir.display(),
        out.display()
    ));
}

fn has_element(name: &str) -> bool {
    Command::new("gst-inspect-1.0")
        .arg(name)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Decodes `path` back: (frames, width, height).
fn decode(path: &Path) -> (usize, u32, u32) {
    let o = Command::new("gst-launch-1.0")
        .args(["-v", "filesrc"])
        .arg(format!("location={}", path.display()))
        .args([
            "!",
            "decodebin",
            "!",
            "videoconvert",
            "!",
            "video/x-raw,format=RGB",
        ])
        .args(["!", "fakesink", "silent=false"])
        .output()
        .expect("gst-launch-1.0");
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "decoding {}: {out}{}",
        path.display(),
        text(&o.stderr)
    );
    let frames = out.matches("last-message = chain").count();
    let size = |key: &str| -> u32 {
        let at = out
            .find(&format!("{key}=(int)"))
            .expect("caps in the output");
        out[at + key.len() + 6..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    };
    (frames, size("width"), size("height"))
}

/// `gst-discoverer-1.0`'s description of `path` (empty when the tool is not installed).
fn discover(path: &Path) -> String {
    Command::new("gst-discoverer-1.0")
        .arg(path)
        .output()
        .map(|o| text(&o.stdout))
        .unwrap_or_default()
}

fn sorted_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn results(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// No `.NAME.*.part` left beside an output.
fn no_partial_files(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".part"), "left behind: {name}");
    }
}

/// Raw RGB in Matroska is lossless: `--input clip.mkv` gives the same masks, byte for byte, as
/// the same frames through `--frames`; a `t=` prompt lands on the frame its time names.
#[test]
fn lossless_video_gives_the_masks_of_its_frames() {
    let dir = frames("lossless_frames");
    let mkv = tmp("lossless.mkv");
    encode_frames(&dir, "video/x-raw,format=RGB ! matroskamux", &mkv);
    assert!(discover(&mkv).is_empty() || discover(&mkv).contains("Uncompressed"));

    let by_frames = tmp("lossless_by_frames");
    let prompts = [
        "obj=1;frame=0;box=10,12,37,37",
        "obj=2;frame=3;point=30,30,1",
    ];
    track_ok(&dir, &prompts, &["--out", by_frames.to_str().unwrap()]);
    // The same prompts, the second by time.
    let by_video = tmp("lossless_by_video");
    let prompts = [
        "obj=1;frame=0;box=10,12,37,37",
        "obj=2;t=0.25;point=30,30,1",
    ];
    let stdout = track_ok(&mkv, &prompts, &["--out", by_video.to_str().unwrap()]);
    assert!(
        stdout.contains(&format!("tracked {FRAMES} frames")),
        "{stdout}"
    );

    let (a, b) = (
        sorted_files(&by_frames.join("masks")),
        sorted_files(&by_video.join("masks")),
    );
    assert_eq!(
        a.len(),
        FRAMES + FRAMES - 3,
        "{:?}",
        a.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert!(a == b, "masks differ between --frames and --input");

    // results.jsonl: the same but for `file` (folders) and `pts` (videos, in seconds).
    let (ra, rb) = (results(&by_frames), results(&by_video));
    assert_eq!(ra.len(), rb.len());
    for (mut x, mut y) in ra.into_iter().zip(rb) {
        assert!(x["file"].is_string() && x.get("pts").is_none(), "{x}");
        let (f, pts) = (y["frame"].as_u64().unwrap(), y["pts"].as_f64().unwrap());
        assert!((pts - f as f64 / 10.0).abs() < 2e-3, "{y}");
        assert!(y.get("file").is_none(), "{y}");
        x.as_object_mut().unwrap().remove("file");
        y.as_object_mut().unwrap().remove("pts");
        assert_eq!(x, y);
    }
    // t=0.25 is frame 3 (0.3 s), the first at or after it.
    let first2 = results(&by_video)
        .into_iter()
        .find(|l| l["object"] == 2)
        .unwrap();
    assert_eq!(
        (first2["frame"].as_u64(), first2["prompted"].as_bool()),
        (Some(3), Some(true))
    );
}

/// A VP8 WebM and, where an H.264 encoder is installed, an MP4 go in; the same containers come
/// out with every frame at the source's size.
#[test]
fn webm_and_mp4_in_and_out() {
    let dir = frames("codec_frames");
    let mut cases = vec![(
        "webm",
        "video/x-raw,format=I420 ! vp8enc deadline=1 ! webmmux",
        "VP8",
    )];
    if has_element("x264enc") {
        cases.push(("mp4", "video/x-raw,format=I420 ! x264enc ! mp4mux", "H.264"));
    } else {
        eprintln!("x264enc not installed (gstreamer1.0-plugins-ugly): MP4 not tested");
    }
    for (ext, encode, codec) in cases {
        let input = tmp(&format!("in.{ext}"));
        encode_frames(&dir, encode, &input);
        let out_dir = tmp(&format!("codec_out_{ext}"));
        std::fs::create_dir_all(&out_dir).unwrap();
        let video = out_dir.join(format!("overlay.{ext}"));
        let stdout = track_ok(
            &input,
            &["obj=1;box=10,12,37,37"],
            &["--output-video", video.to_str().unwrap()],
        );
        assert!(
            stdout.contains(&format!("({codec}, {FRAMES} frames)")),
            "{ext}: {stdout}"
        );
        assert_eq!(decode(&video), (FRAMES, W, H), "{ext}");
        let found = discover(&video);
        if !found.is_empty() {
            assert!(
                found.contains(codec) && found.contains("Width: 96"),
                "{found}"
            );
        }
        no_partial_files(&out_dir);
    }
}

/// A live source runs until Ctrl-C, which finishes the output video: it decodes to exactly the
/// frames tracked.
#[test]
fn live_source_ends_cleanly_on_ctrl_c() {
    let out = tmp("live_out");
    std::fs::create_dir_all(&out).unwrap();
    let video = out.join("live.webm");
    let mut child = track_cmd(
        "gst:videotestsrc is-live=true pattern=ball ! video/x-raw,width=96,height=64,framerate=20/1",
        &["obj=1;box=30,20,60,44"],
        &[
            "--out",
            out.to_str().unwrap(),
            "--output-video",
            video.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let results = out.join("results.jsonl");
    let start = Instant::now();
    while std::fs::read_to_string(&results).map_or(0, |s| s.lines().count()) < 6 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no frames tracked in 120 s"
        );
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("stopped: Ctrl-C"), "{stdout}");
    let tracked = std::fs::read_to_string(&results).unwrap().lines().count();
    assert!(tracked >= 6);
    assert!(
        stdout.contains(&format!("tracked {tracked} frames")),
        "{stdout}"
    );
    assert_eq!(decode(&video), (tracked, 96, 64));
    no_partial_files(&out);
}

/// `--max-frames` ends a live source too.
#[test]
fn live_source_stops_at_max_frames() {
    let out = tmp("live_max");
    let stdout = track_ok(
        "gst:videotestsrc is-live=true ! video/x-raw,width=64,height=48,framerate=30/1 ! appsink",
        &["obj=1;point=20,20,1"],
        &["--max-frames", "5", "--out", out.to_str().unwrap()],
    );
    // Frames the busy tracker could not take are dropped and counted, never queued up.
    let dropped: usize = stdout
        .split("dropped ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .map_or(0, |n| n.parse().unwrap());
    let tracked = results(&out).len();
    assert_eq!(tracked + dropped, 5, "{stdout}");
    assert!(stdout.contains("--max-frames"), "{stdout}");
}

/// Runs `track` of `input` with `prompt` and `env` expecting exit status 2; returns stderr and
/// checks nothing was written.
fn track_fails(input: &str, prompt: &str, env: &[(&str, &str)]) -> String {
    let dir = tmp(&format!("fail_{}", prompt.len() + input.len()));
    std::fs::create_dir_all(&dir).unwrap();
    let video = dir.join("out.webm");
    let out = dir.join("out");
    let outputs = [
        "--output-video",
        video.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let o = track_cmd(input, &[prompt], &outputs)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{input}: {err}");
    assert!(
        !video.exists() && !out.exists(),
        "{input}: wrote something: {err}"
    );
    no_partial_files(&dir);
    assert!(
        !err.contains("meaningless"),
        "the model was loaded first: {err}"
    );
    err
}

#[test]
fn bad_inputs_are_clear_errors_that_write_nothing() {
    let e = track_fails("no/such/clip.webm", BOX, &[]);
    assert!(
        e.contains("no/such/clip.webm") && e.contains("does not exist"),
        "{e}"
    );

    let junk = tmp("junk.webm");
    std::fs::write(&junk, b"this is not a video").unwrap();
    let e = track_fails(junk.to_str().unwrap(), BOX, &[]);
    assert!(e.contains("junk.webm"), "{e}");

    // A codec with no decoder installed (VP8's hidden from autoplugging): the package is named.
    let dir = frames("fail_frames");
    let webm = tmp("fail.webm");
    encode_frames(
        &dir,
        "video/x-raw,format=I420 ! vp8enc deadline=1 ! webmmux",
        &webm,
    );
    let e = track_fails(
        webm.to_str().unwrap(),
        BOX,
        &[("GST_PLUGIN_FEATURE_RANK", "vp8dec:NONE,avdec_vp8:NONE")],
    );
    assert!(
        e.contains("no decoder")
            && e.contains("video/x-vp8")
            && e.contains("gstreamer1.0-plugins-good"),
        "{e}"
    );

    if has_element("x264enc") {
        let mp4 = tmp("fail.mp4");
        encode_frames(&dir, "video/x-raw,format=I420 ! x264enc ! mp4mux", &mp4);
        let e = track_fails(
            mp4.to_str().unwrap(),
            BOX,
            &[(
                "GST_PLUGIN_FEATURE_RANK",
                "avdec_h264:NONE,openh264dec:NONE",
            )],
        );
        assert!(
            e.contains("H.264") && e.contains("video/x-h264") && e.contains("gstreamer1.0-libav"),
            "{e}"
        );
    }

    let e = track_fails("/dev/video99", BOX, &[]);
    assert!(e.contains("/dev/video99") && e.contains("not there"), "{e}");

    let e = track_fails("gst:nosuchelement ! videoconvert", BOX, &[]);
    assert!(
        e.contains("bad GStreamer description") && e.contains("nosuchelement"),
        "{e}"
    );

    // A prompt time past the end of a 1.2 s clip.
    let e = track_fails(webm.to_str().unwrap(), "obj=1;t=5;box=1,1,20,20", &[]);
    assert!(e.contains("t=5") && e.contains("1.200 s long"), "{e}");

    // A prompt outside the video's frames.
    let e = track_fails(webm.to_str().unwrap(), "obj=1;box=1,1,200,20", &[]);
    assert!(e.contains("outside"), "{e}");

    // An output format nobody can play.
    let dir = tmp("fail_ext");
    std::fs::create_dir_all(&dir).unwrap();
    let avi = dir.join("out.avi");
    let o = track_cmd(
        webm.to_str().unwrap(),
        &[BOX],
        &["--output-video", avi.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains(".webm (VP8)"),
        "{}",
        text(&o.stderr)
    );
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
}

/// An RTSP stream from a loopback server (GStreamer's RTSP server through python3-gi, when
/// installed): a live source, tracked to `--max-frames` into an MP4 or WebM.
#[test]
fn rtsp_stream_from_a_loopback_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Command::new("/usr/bin/python3")
        .arg(root().join("tests/support/rtsp_server.py"))
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut server) = server else {
        eprintln!("no /usr/bin/python3: RTSP not tested");
        return;
    };
    let mut ready = String::new();
    let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
    let _ = std::io::BufRead::read_line(&mut out, &mut ready);
    if ready.trim() != "ready" {
        let o = server.wait_with_output().unwrap();
        eprintln!(
            "no RTSP server (python3-gi, gir1.2-gst-rtsp-server-1.0): RTSP not tested: {}",
            text(&o.stderr)
        );
        return;
    }
    let dir = tmp("rtsp_out");
    std::fs::create_dir_all(&dir).unwrap();
    let video = dir.join("rtsp.webm");
    let uri = format!("rtsp://127.0.0.1:{port}/test");
    let o = track_cmd(
        &uri,
        &["obj=1;box=30,20,60,44"],
        &[
            "--max-frames",
            "8",
            "--output-video",
            video.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let tracked: usize = stdout
        .split("tracked ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(tracked >= 1, "{stdout}");
    assert_eq!(decode(&video), (tracked, 96, 64));
    no_partial_files(&dir);
}

/// Three `--input` (a lossless video, its frames as a folder, a live source): three streams of
/// one model, each with its own `--out DIR/stream-N/` and its own output video
/// (`NAME.streamN.webm`); the video and its frames give the same masks.
#[test]
fn several_inputs_give_a_video_each() {
    let dir = frames("multi_frames");
    let mkv = tmp("multi.mkv");
    encode_frames(&dir, "video/x-raw,format=RGB ! matroskamux", &mkv);
    let out = tmp("multi_out");
    let videos = tmp("multi_videos");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&videos).unwrap();
    let video = videos.join("overlay.webm");
    let live = "gst:videotestsrc is-live=true ! video/x-raw,width=64,height=48,framerate=30/1";
    let mut cmd = edgetam_cmd(&["track", "--random-weights", "--input-size", "256"]);
    cmd.args(["--input", mkv.to_str().unwrap(), "--input"])
        .args([dir.to_str().unwrap(), "--input", live])
        .args(["--prompt", "obj=1;frame=0;box=10,12,37,37"])
        .args(["--prompt", "stream=1;obj=1;frame=0;box=10,12,37,37"])
        .args(["--prompt", "stream=2;obj=1;point=20,20,1"])
        .args(["--max-frames", "5", "--out", out.to_str().unwrap()])
        .args(["--output-video", video.to_str().unwrap()]);
    let o = cmd.output().expect("run edgetam");
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for n in 0..2 {
        assert!(
            stdout.contains(&format!("stream {n}: tracked 5 frames"))
                && stdout.contains(&format!("overlay.stream{n}.webm (VP8, 5 frames)")),
            "{stdout}"
        );
        assert_eq!(
            decode(&videos.join(format!("overlay.stream{n}.webm"))),
            (5, W, H)
        );
    }
    assert!(
        stdout.contains("stream 2: stopped: --max-frames"),
        "{stdout}"
    );
    let (frames2, w2, h2) = decode(&videos.join("overlay.stream2.webm"));
    assert!(frames2 >= 1 && (w2, h2) == (64, 48), "{frames2} {w2}x{h2}");
    no_partial_files(&videos);
    let (a, b) = (
        sorted_files(&out.join("stream-0/masks")),
        sorted_files(&out.join("stream-1/masks")),
    );
    assert_eq!(a.len(), 5);
    assert!(a == b, "the video and its frames give other masks");
}
