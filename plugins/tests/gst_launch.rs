//! The built plugin (`libgstedgetam.so`) in the real `gst-launch-1.0` and `gst-inspect-1.0`.
//!
//! The shared library is the one `cargo test` builds next to this test binary
//! (`target/<profile>/deps/libgstedgetam.so`, or the newer `target/<profile>/libgstedgetam.so`
//! of a `cargo build`; cargo builds the package's cdylib for its integration
//! tests). It is copied into a scratch folder that `GST_PLUGIN_PATH` points at (the target
//! folder itself holds other shared objects GStreamer would try to load), with a scratch
//! `GST_REGISTRY`.

mod common;

use std::process::Output;
use std::str::FromStr;

use common::launch::{failure, text, with_plugin};
use common::{assert_nothing_alive, decisions, model_dir, objects, pngs_and_library, PROMPTS};

fn gst_tool(tool: &str, args: &[&str]) -> Output {
    with_plugin(tool, args, &[])
}

fn gst_tool_env(tool: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    with_plugin(tool, args, env)
}

/// `gst-launch-1.0 -m` with `pipeline` split on whitespace (no quoting needed in ours).
fn launch(pipeline: &str) -> Output {
    let mut args = vec!["-m"];
    args.extend(pipeline.split_whitespace());
    gst_tool("gst-launch-1.0", &args)
}

/// The `edgetam-tracking` messages printed by `gst-launch-1.0 -m`, parsed.
fn tracking_messages(o: &Output) -> Vec<gst::Structure> {
    gst::init().expect("gst init");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_once("(element): ").map(|(_, s)| s))
        .filter(|s| s.starts_with("edgetam-tracking"))
        .map(|s| gst::Structure::from_str(s.trim_end_matches(';')).expect("message structure"))
        .collect()
}

const PROPERTIES: [&str; 22] = [
    "model",
    "device",
    "prompts",
    "encoder-ahead",
    "max-in-flight",
    "precision",
    "overlay",
    "overlay-alpha",
    "max-objects",
    "live-mode",
    "post-messages",
    "prompt-source",
    "prompt-roi-types",
    "min-confidence",
    "match-iou",
    "reseed-after",
    "fps",
    "latency",
    "tracked",
    "skipped",
    "qos",
    "name",
];

#[test]
fn inspect_lists_every_property_and_signal() {
    let o = gst_tool("gst-inspect-1.0", &["edgetamtrack"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for p in PROPERTIES {
        assert!(
            out.contains(&format!("  {p}")),
            "property {p} missing:\n{out}"
        );
    }
    for s in [
        "add-box",
        "add-points",
        "add-prompt",
        "remove-object",
        "reset",
    ] {
        assert!(
            out.contains(&format!("\"{s}\"")),
            "signal {s} missing:\n{out}"
        );
    }
    for caps in ["NV12", "I420", "BGRx", "RGBA", "RGB"] {
        assert!(out.contains(caps), "format {caps} missing");
    }
    assert!(
        out.contains("Default: 16") && out.contains("Range: 1 - 1024"),
        "{out}"
    );
    // Registered enums and flags, a real licence and origin.
    for t in [
        "GstEdgeTamPrecision",
        "GstEdgeTamPromptSource",
        "GstEdgeTamOverlay",
    ] {
        assert!(out.contains(t), "{t} missing:\n{out}");
    }
    assert!(
        out.contains("(1): bf16") && out.contains("(1): roi-meta"),
        "{out}"
    );
    let license = out
        .lines()
        .find(|l| l.contains("License"))
        .unwrap_or_default();
    assert!(license.contains("MIT/X11"), "{license}");
    let origin = out
        .lines()
        .find(|l| l.contains("Origin URL"))
        .unwrap_or_default();
    assert!(!origin.contains("example.invalid"), "{origin}");
}

#[test]
fn bad_enum_values_are_refused_with_the_property_named() {
    let o = launch(&format!(
        "videotestsrc num-buffers=1 ! edgetamtrack model={} precision=f8 ! fakesink",
        model_dir().display()
    ));
    let all = failure(&o);
    assert!(all.contains("precision") && all.contains("f8"), "{all}");
}

/// `precision=bf16` where bf16 cannot run (here: the kernels capped below the bf16 kernels'
/// avx512 by `EDGETAM_ISA`, read once per process, so in gst-launch's own process) fails to
/// start with the reason, and does not run f32 in its place.
#[test]
fn bf16_where_it_cannot_run_fails_to_start() {
    let cap = if edgetam_tracker::Isa::Avx2.runs_here() {
        "avx2"
    } else {
        "portable"
    };
    let pipeline = format!(
        "videotestsrc num-buffers=2 ! video/x-raw,width=96,height=64 ! edgetamtrack model={} \
         input-size=256 precision=bf16 ! fakesink",
        model_dir().display()
    );
    let args: Vec<&str> = pipeline.split_whitespace().collect();
    let o = gst_tool_env("gst-launch-1.0", &args, &[("EDGETAM_ISA", cap)]);
    let all = failure(&o);
    assert!(
        all.contains("precision bf16 is not available here: it needs "),
        "{all}"
    );
}

#[test]
fn videotestsrc_pipeline_posts_messages() {
    let model = model_dir();
    let o = launch(&format!(
        "videotestsrc num-buffers=6 pattern=ball ! video/x-raw,width=640,height=360 \
         ! edgetamtrack model={} prompts=\"obj=1;frame=0;box=280,140,360,220\" post-messages=true \
         overlay=mask+box ! fakesink",
        model.display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let msgs = tracking_messages(&o);
    assert_eq!(msgs.len(), 6, "{}", text(&o));
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(m.get::<u64>("frame").expect("frame"), i as u64);
        let objs = objects(m);
        assert_eq!(objs.len(), 1);
        assert_eq!(objs[0].get::<u32>("id").expect("id"), 1);
    }
}

#[test]
fn png_frames_match_the_library_api() {
    let (dir, expected) = pngs_and_library(4, "pngs");
    // No spaces inside the prompts: the pipeline is split on whitespace.
    let prompts = PROMPTS.replace(' ', "");
    let o = launch(&format!(
        "multifilesrc location={}/%03d.png index=0 stop-index=3 caps=image/png,framerate=10/1 \
         ! pngdec ! edgetamtrack model={} prompts=\"{prompts}\" post-messages=true ! fakesink",
        dir.display(),
        model_dir().display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let msgs = tracking_messages(&o);
    assert_eq!(msgs.len(), expected.len(), "{}", text(&o));
    for (i, (m, want)) in msgs.iter().zip(&expected).enumerate() {
        let got = objects(m);
        assert_eq!(got.len(), want.objects.len(), "frame {i}");
        for (g, w) in got.iter().zip(&want.objects) {
            assert_eq!(g.get::<u32>("id").expect("id"), w.id);
            assert_eq!(g.get::<bool>("visible").expect("visible"), w.visible);
            assert_eq!(
                g.get::<u64>("area").expect("area"),
                w.area as u64,
                "frame {i} obj {}",
                w.id
            );
            let score = g.get::<f32>("score").expect("score");
            assert!(
                (score - w.score).abs() <= 1e-4 * w.score.abs().max(1.0),
                "{score} vs {}",
                w.score
            );
            let [x0, y0, x1, y1] = w.bbox.unwrap_or_default();
            let b = ["x", "y", "width", "height"].map(|k| g.get::<u32>(k).expect("box"));
            if w.bbox.is_some() {
                assert_eq!(b, [x0, y0, x1 - x0 + 1, y1 - y0 + 1].map(|v| v as u32));
            }
        }
    }
}

#[test]
fn missing_model_fails_with_a_clear_error() {
    let o = launch("videotestsrc num-buffers=2 ! edgetamtrack model=/no/such/model ! fakesink");
    let all = failure(&o);
    assert!(
        all.contains("/no/such/model") && all.contains("does not exist"),
        "{all}"
    );
}

#[test]
fn leaks_tracer_finds_nothing_alive() {
    // GStreamer's leaks tracer lists every GstObject / mini object (buffers with their metas,
    // events, messages, caps) still alive when gst-launch-1.0 exits.
    let pipeline = format!(
        "videotestsrc num-buffers=3 ! video/x-raw,width=96,height=64 ! edgetamtrack model={} \
         prompts=\"obj=1;box=10,10,40,40\" post-messages=true overlay=mask+box ! fakesink",
        model_dir().display()
    );
    let args: Vec<&str> = pipeline.split_whitespace().collect();
    let o = gst_tool_env(
        "gst-launch-1.0",
        &args,
        &[
            ("GST_TRACERS", "leaks"),
            ("GST_DEBUG", "GST_TRACER:7"),
            ("GST_DEBUG_NO_COLOR", "1"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_nothing_alive(&String::from_utf8_lossy(&o.stderr));
}

/// The `processing-time` (s) of each tracking message.
fn processing_times(msgs: &[gst::Structure]) -> Vec<f64> {
    msgs.iter()
        .map(|m| m.get::<u64>("processing-time").expect("processing-time") as f64 / 1e9)
        .collect()
}

/// A live 30 fps source for 5 s: the element tracks the next buffer to arrive once its last
/// result is out, up to the end of the stream (the last second included), and passes the others
/// on. A tracked buffer that takes T holds the tracker for ceil(T / frame period) buffers (the
/// next one to track arrives on the frame clock), so the stream has room for 150 / mean(ceil)
/// tracked buffers.
#[test]
fn live_source_is_tracked_at_the_rate_the_element_can_keep() {
    let o = launch(&format!(
        "videotestsrc is-live=true num-buffers=150 pattern=ball ! \
         video/x-raw,width=320,height=240,framerate=30/1 ! edgetamtrack name=t model={} \
         prompts=\"obj=1;frame=0;box=120,80,200,160\" live-mode=true post-messages=true ! \
         fakesink sync=true",
        model_dir().display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let msgs = tracking_messages(&o);
    let times = processing_times(&msgs);
    assert!(times.len() >= 3, "{}", text(&o));
    let mut sorted = times[1..].to_vec();
    sorted.sort_by(f64::total_cmp);
    let t = sorted[sorted.len() / 2];
    // Buffers each tracked one holds the tracker for (frame 0 is slower: warm-up, left out).
    let period = 1.0 / 30.0;
    let held = times[1..]
        .iter()
        .map(|&t| (t / period).ceil().max(1.0))
        .sum::<f64>()
        / (times.len() - 1) as f64;
    let expected = 150.0 / held;
    let tracked = msgs.len() as f64;
    eprintln!(
        "live: {tracked} of 150 buffers tracked, median processing {:.1} ms, each held the \
         tracker for {held:.2} buffers on average: room for {expected:.1}",
        t * 1e3
    );
    assert!(
        tracked >= 0.8 * expected.min(150.0),
        "{tracked} tracked, expected about {expected:.1}"
    );
    let last = msgs
        .iter()
        .map(|m| m.get::<u64>("running-time").expect("rt"))
        .max()
        .unwrap_or(0);
    assert!(
        last >= 4_000_000_000,
        "last tracked buffer at {last} ns: not through the last second"
    );
}

/// Debian's stock facedetect (gstreamer1.0-opencv, opencv-data) upstream: its ROI metas prompt
/// the face as object 1 (label `face`); every later detection gets a decision. (Which decision
/// depends on the tracked mask's box, meaningless with random weights; the association rules
/// themselves are tested with hand-made metas in harness.rs.)
#[test]
fn facedetect_upstream_prompts_the_face() {
    let photo = std::path::Path::new("/usr/share/doc/opencv-doc/examples/data/messi5.jpg");
    let has_facedetect = gst_tool("gst-inspect-1.0", &["facedetect"])
        .status
        .success();
    assert!(
        photo.exists() && has_facedetect,
        "needs gstreamer1.0-opencv, opencv-data and opencv-doc (scripts/install-deps.sh)"
    );
    let o = launch(&format!(
        "filesrc location={} ! jpegdec ! imagefreeze num-buffers=4 ! videoconvert ! \
         facedetect display=false ! videoconvert ! \
         edgetamtrack model={} prompt-source=roi-meta prompt-roi-types=face post-messages=true ! \
         fakesink",
        photo.display(),
        model_dir().display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let msgs = tracking_messages(&o);
    assert_eq!(msgs.len(), 4, "{}", text(&o));
    assert_eq!(
        decisions(&msgs[0]),
        [("new".to_string(), 1)],
        "{}",
        text(&o)
    );
    for m in &msgs {
        let objs = objects(m);
        assert_eq!(objs[0].get::<u32>("id").expect("id"), 1);
        for o in &objs {
            assert_eq!(o.get::<String>("label").expect("label"), "face");
        }
        // Every face facedetect reports gets a decision.
        let d = decisions(m);
        assert!(!d.is_empty(), "{m}");
        assert!(
            d.iter()
                .all(|(k, _)| ["new", "matched", "reseed", "refused"].contains(&k.as_str())),
            "{d:?}"
        );
    }
}
