//! `edgetamtrack model=owner/name`: the model by Hugging Face hub repository id, in the real
//! `gst-launch-1.0`, fetched from a loopback server that answers as the hub does
//! (`tracker/tests/common/fake_hub.rs`, reached through `HF_ENDPOINT`), never the internet.
//!
//! The plugin is the `libgstedgetam.so` cargo builds for this package's tests, copied into a
//! scratch folder for `GST_PLUGIN_PATH` (as in `gst_launch.rs`).

mod common;
#[path = "../../tracker/tests/common/fake_hub.rs"]
mod fake_hub;

use std::process::Output;

use common::launch::{failure, plugin_command, run, text};
use common::{repo, tmp};
use fake_hub::{FakeHub, FakeRepo, HUB_ENV};

/// Fetched into a scratch HF_HOME, then tracked; an unknown repository is a clear error; with
/// the server gone and HF_HUB_OFFLINE=1 the cached model still starts.
#[test]
fn model_by_hub_repository_id() {
    let read = |rel: &str| std::fs::read(repo().join("fixtures").join(rel)).expect("fixture");
    let hub = FakeHub::start(vec![FakeRepo::new("test-org/edgetam-hf")
        .file("config.json", read("image_256/config.json"))
        .file("model.safetensors", read("model/model.safetensors"))]);
    let endpoint = hub.endpoint();
    let home = tmp("hf-home");
    let launch = |repo: &str, offline: bool| {
        let desc = format!(
            "-m videotestsrc num-buffers=2 ! video/x-raw,width=96,height=64 ! edgetamtrack \
             model={repo} prompts=obj=1;box=10,10,40,40 post-messages=true ! fakesink"
        );
        let args: Vec<&str> = desc.split_whitespace().collect();
        let mut cmd = plugin_command("gst-launch-1.0", &args);
        for k in HUB_ENV {
            cmd.env_remove(k);
        }
        if offline {
            cmd.env("HF_HUB_OFFLINE", "1");
        }
        cmd.env("HF_HOME", &home).env("HF_ENDPOINT", &endpoint);
        run(&mut cmd, "gst-launch-1.0")
    };
    let tracked = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("(element): edgetam-tracking"))
            .count()
    };
    let o = launch("test-org/edgetam-hf", false);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(tracked(&o), 2, "{}", text(&o));
    assert!(home
        .join("hub/models--test-org--edgetam-hf/snapshots")
        .is_dir());

    let all = failure(&launch("test-org/unknown", false));
    assert!(
        all.contains("`test-org/unknown`") && all.contains("HTTP 404"),
        "{all}"
    );

    hub.stop();
    let o = launch("test-org/edgetam-hf", true);
    assert!(o.status.success(), "from the cache: {}", text(&o));
    assert_eq!(tracked(&o), 2, "{}", text(&o));
}
