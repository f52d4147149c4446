//! The built plugin (`libgstedgetam.so`) in the real `gst-launch-1.0` and `gst-inspect-1.0`.
//!
//! The shared library is the one `cargo test` builds next to this test binary
//! (`target/<profile>/deps/libgstedgetam.so`, or the newer `target/<profile>/libgstedgetam.so`
//! of a `cargo build`; cargo builds the package's cdylib for its integration
//! tests). It is copied into a scratch folder that `GST_PLUGIN_PATH` points at (the target
//! folder itself holds other shared objects GStreamer would try to load), with a scratch
//! `GST_REGISTRY`.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::str::FromStr;
use std::sync::OnceLock;

use common::{frames, library, model_dir, tmp, write_pngs, PROMPTS};

/// `target/<profile>`, from this test binary's path (`target/<profile>/deps/gst_launch-*`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// A folder holding only the plugin.
fn plugin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // `cargo test` builds the cdylib into `deps/` (beside this binary) but copies it up to
        // `target/<profile>/` only on `cargo build`: take the newer of the two, so a stale
        // copy from an earlier build is never tested.
        let built = |p: PathBuf| {
            let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        };
        let lib = [
            target_dir().join("deps").join("libgstedgetam.so"),
            target_dir().join("libgstedgetam.so"),
        ]
        .into_iter()
        .filter_map(built)
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "libgstedgetam.so not built in {}: run `cargo build --release -p gst-plugin-edgetam`",
                target_dir().display()
            )
        });
        let dir = tmp("plugin");
        std::fs::copy(&lib, dir.join("libgstedgetam.so")).expect("copy the plugin");
        dir
    })
    .clone()
}

fn gst_tool(tool: &str, args: &[&str]) -> Output {
    gst_tool_env(tool, args, &[])
}

fn gst_tool_env(tool: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(tool);
    cmd.args(args)
        .env("GST_PLUGIN_PATH", plugin_dir())
        .env("GST_REGISTRY", tmp("registry").join("registry.bin"))
        .env_remove("GST_DEBUG")
        .env_remove("GST_TRACERS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {tool} (install gstreamer1.0-tools): {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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

fn objects(s: &gst::Structure) -> Vec<gst::Structure> {
    s.get::<gst::Array>("objects")
        .expect("objects")
        .iter()
        .map(|v| v.get::<gst::Structure>().expect("object"))
        .collect()
}

const PROPERTIES: [&str; 12] = [
    "model",
    "device",
    "prompts",
    "encoder-ahead",
    "precision",
    "overlay",
    "overlay-alpha",
    "max-objects",
    "live-mode",
    "post-messages",
    "fps",
    "latency",
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
    let frames = frames(4);
    let expected = library(&frames, PROMPTS);
    let dir = tmp("pngs");
    write_pngs(&frames, &dir);
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
    assert_eq!(msgs.len(), frames.len(), "{}", text(&o));
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
    assert!(!o.status.success(), "{}", text(&o));
    let all = text(&o);
    assert!(
        all.contains("/no/such/model") && all.contains("does not exist"),
        "{all}"
    );
    assert!(!all.contains("panicked"), "{all}");
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
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(
        log.contains("object-alive.class"),
        "the leaks tracer did not run:\n{log}"
    );
    let alive: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("object-alive, type-name=") && !l.contains("format string"))
        .collect();
    assert!(alive.is_empty(), "leaked: {alive:#?}");
}
