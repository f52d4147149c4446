//! `edgetamtrack model=owner/name`: the model by Hugging Face hub repository id, in the real
//! `gst-launch-1.0`, fetched from a loopback server that answers as the hub does
//! (`tracker/tests/common/fake_hub.rs`, reached through `HF_ENDPOINT`), never the internet.
//!
//! The plugin is the `libgstedgetam.so` cargo builds for this package's tests, copied into a
//! scratch folder for `GST_PLUGIN_PATH` (as in `gst_launch.rs`).

#[path = "../../tracker/tests/common/fake_hub.rs"]
mod fake_hub;

use std::path::PathBuf;
use std::process::{Command, Output};

use fake_hub::{FakeHub, FakeRepo};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("edgetam-gst-hub-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A folder holding only the plugin: the newer of `target/<profile>/deps/libgstedgetam.so`
/// (what `cargo test` builds) and `target/<profile>/libgstedgetam.so` (`cargo build`).
fn plugin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let lib = [
        target.join("deps").join("libgstedgetam.so"),
        target.join("libgstedgetam.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .expect("libgstedgetam.so built by cargo for the tests");
    let dir = scratch("plugin");
    std::fs::copy(lib, dir.join("libgstedgetam.so")).expect("copy the plugin");
    dir
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Fetched into a scratch HF_HOME, then tracked; an unknown repository is a clear error; with
/// the server gone and HF_HUB_OFFLINE=1 the cached model still starts.
#[test]
fn model_by_hub_repository_id() {
    let read = |rel: &str| {
        std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../fixtures")
                .join(rel),
        )
        .expect("fixture")
    };
    let hub = FakeHub::start(vec![FakeRepo::new("test-org/edgetam-hf")
        .file("config.json", read("image_256/config.json"))
        .file("model.safetensors", read("model/model.safetensors"))]);
    let endpoint = hub.endpoint();
    let (home, plugins) = (scratch("hf-home"), plugin_dir());
    let run = |repo: &str, offline: bool| {
        let mut cmd = Command::new("gst-launch-1.0");
        // hf-hub's client would send even loopback requests through a proxy from these.
        for k in [
            "HF_TOKEN",
            "HF_HUB_OFFLINE",
            "HF_HUB_CACHE",
            "ALL_PROXY",
            "all_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "GST_DEBUG",
        ] {
            cmd.env_remove(k);
        }
        if offline {
            cmd.env("HF_HUB_OFFLINE", "1");
        }
        cmd.env("GST_PLUGIN_PATH", &plugins)
            .env("GST_REGISTRY", scratch("registry").join("registry.bin"))
            .env("HF_HOME", &home)
            .env("HF_ENDPOINT", &endpoint)
            .args(["-m", "videotestsrc", "num-buffers=2", "!"])
            .args(["video/x-raw,width=96,height=64", "!", "edgetamtrack"])
            .arg(format!("model={repo}"))
            .args([
                "prompts=obj=1;box=10,10,40,40",
                "post-messages=true",
                "!",
                "fakesink",
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run gst-launch-1.0 (gstreamer1.0-tools): {e}"))
    };
    let tracked = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("(element): edgetam-tracking"))
            .count()
    };
    let o = run("test-org/edgetam-hf", false);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(tracked(&o), 2, "{}", text(&o));
    assert!(home
        .join("hub/models--test-org--edgetam-hf/snapshots")
        .is_dir());

    let o = run("test-org/unknown", false);
    assert!(!o.status.success(), "{}", text(&o));
    let all = text(&o);
    assert!(
        all.contains("`test-org/unknown`") && all.contains("HTTP 404"),
        "{all}"
    );
    assert!(!all.contains("panicked"), "{all}");

    hub.stop();
    let o = run("test-org/edgetam-hf", true);
    assert!(o.status.success(), "from the cache: {}", text(&o));
    assert_eq!(tracked(&o), 2, "{}", text(&o));
}
