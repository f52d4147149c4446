//! Models by Hugging Face hub repository id (`ModelSource`, feature `hub`), against a loopback
//! server that answers as the hub does (`common/fake_hub.rs`, reached through `HF_ENDPOINT`),
//! never the internet: download into `HF_HOME`, load and track; a second load from the cache
//! with the server stopped and with `HF_HUB_OFFLINE=1`; `HF_TOKEN`; and the errors (unknown
//! repository, a repository without the files, an unreachable server, an offline cache miss).
//!
//! The environment is process-wide, so everything runs in the one test of this binary, in order.

#[path = "common/fake_hub.rs"]
mod fake_hub;

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::Device;
use edgetam_tracker::{
    resolve_model, EdgeTam, EdgeTamConfig, Error, HubError, ModelSource, Prompt, Tracker, Weights,
};
use fake_hub::{FakeHub, FakeRepo};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(rel)).unwrap_or_else(|e| panic!("fixture {rel}: {e}"))
}

/// Three synthetic 96x64 frames with a square moving right; masks and scores per frame.
fn track(model: EdgeTam) -> Vec<(Vec<u8>, f32)> {
    let (w, h) = (96usize, 64usize);
    let mut tracker = Tracker::new(Arc::new(model));
    tracker
        .add_prompt(1, 0, Prompt::from_box(20.0, 16.0, 44.0, 40.0))
        .expect("prompt");
    (0..3)
        .map(|f| {
            let mut rgb = vec![40u8; w * h * 3];
            for y in 16..40 {
                for x in (20 + 4 * f)..(44 + 4 * f) {
                    rgb[(y * w + x) * 3..][..3].copy_from_slice(&[230, 200, 30]);
                }
            }
            let r = tracker.track(&rgb, w, h).expect("track");
            let o = &r.objects[0];
            (o.mask.data.clone(), o.score)
        })
        .collect()
}

fn hub_error(r: edgetam_tracker::Result<PathBuf>) -> (HubError, String) {
    match r {
        Err(Error::Hub(e)) => {
            let m = e.to_string();
            eprintln!("error as shown: {m}");
            (*e, m)
        }
        Err(e) => panic!("not a hub error: {e}"),
        Ok(p) => panic!("resolved to {}", p.display()),
    }
}

#[test]
fn hub_models_download_load_cache_and_fail_clearly() {
    let home = std::env::temp_dir().join(format!("edgetam-hub-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("temp dir");
    for k in fake_hub::HUB_ENV {
        std::env::remove_var(k);
    }
    std::env::set_var("HF_HOME", &home);

    // The 256 config with the fixture weights: the same model as `fixtures/model`, 16x cheaper
    // to run than its 1024 config.
    let config = read("image_256/config.json");
    let weights = read("model/model.safetensors");
    let hub = FakeHub::start(vec![
        FakeRepo::new("test-org/edgetam-hf")
            .file(".gitattributes", b"*.safetensors filter=lfs\n".to_vec())
            .file("README.md", b"# EdgeTAM (test)\n".to_vec())
            .file("config.json", config.clone())
            .file("model.safetensors", weights.clone()),
        FakeRepo::new("test-org/edgetam-pt")
            .file("README.md", b"# EdgeTAM, Meta's layout\n".to_vec())
            .file("edgetam.pt", read("original/edgetam.pt")),
        FakeRepo::new("test-org/no-weights")
            .file("README.md", b"nothing here\n".to_vec())
            .file("config.json", config.clone()),
        FakeRepo::new("test-org/gated")
            .file("config.json", config.clone())
            .file("model.safetensors", weights)
            .gated("secret-token"),
    ]);
    let endpoint = hub.endpoint();
    std::env::set_var("HF_ENDPOINT", &endpoint);

    // transformers layout: the snapshot folder, loaded and tracked exactly as the local files.
    let source = ModelSource::parse("test-org/edgetam-hf");
    assert_eq!(
        source,
        ModelSource::Hub {
            repo: "test-org/edgetam-hf".into()
        }
    );
    let dir = source.resolve().expect("download the transformers layout");
    let snapshots = home.join("hub/models--test-org--edgetam-hf/snapshots");
    assert!(dir.starts_with(&snapshots), "{}", dir.display());
    assert_eq!(std::fs::read(dir.join("config.json")).unwrap(), config);
    assert!(dir.join("model.safetensors").is_file());
    assert!(
        !dir.join("README.md").exists(),
        "only the model's files are fetched"
    );
    let log = hub.requests();
    for want in [
        "GET /api/models/test-org/edgetam-hf/revision/main",
        "GET /test-org/edgetam-hf/resolve/main/config.json",
        "GET /test-org/edgetam-hf/resolve/main/model.safetensors",
        "GET /storage/test-org/edgetam-hf/model.safetensors",
    ] {
        assert!(log.iter().any(|r| r == want), "no `{want}` in {log:#?}");
    }
    let from_hub = track(EdgeTam::load(&dir, &Device::Cpu).expect("load the hub snapshot"));
    let local = {
        let cfg = EdgeTamConfig::from_file(fixtures().join("image_256/config.json")).unwrap();
        let w = Weights::load(fixtures().join("model/model.safetensors"), &Device::Cpu).unwrap();
        EdgeTam::from_weights(cfg, &w, &Device::Cpu).unwrap()
    };
    assert_eq!(
        from_hub,
        track(local),
        "hub model tracks as the local files"
    );

    // Meta's layout: the `edgetam.pt` file (released config).
    let pt = resolve_model("test-org/edgetam-pt").expect("download edgetam.pt");
    assert_eq!(pt.file_name(), Some("edgetam.pt".as_ref()));
    assert!(pt.starts_with(home.join("hub/models--test-org--edgetam-pt/snapshots")));
    EdgeTam::load(&pt, &Device::Cpu).expect("load the hub edgetam.pt");

    // Cached: no request at all.
    let before = hub.requests().len();
    assert_eq!(resolve_model("test-org/edgetam-hf").unwrap(), dir);
    assert_eq!(resolve_model("test-org/edgetam-pt").unwrap(), pt);
    assert_eq!(
        hub.requests().len(),
        before,
        "a cached model needs no network"
    );

    // An unknown repository: 404, named.
    let (e, m) = hub_error(resolve_model("test-org/nope"));
    assert!(
        matches!(&e, HubError::RepoNotFound { repo, status: 404, .. } if repo == "test-org/nope"),
        "{e:?}"
    );
    assert!(
        m.contains("`test-org/nope`") && m.contains(&endpoint),
        "{m}"
    );

    // A repository without the weights: what is missing and what it holds.
    let (e, m) = hub_error(resolve_model("test-org/no-weights"));
    assert!(matches!(e, HubError::MissingFiles { .. }), "{e:?}");
    for want in [
        "`test-org/no-weights`",
        "model.safetensors (beside config.json) and edgetam.pt",
        "README.md, config.json",
    ] {
        assert!(m.contains(want), "no `{want}` in: {m}");
    }

    // A gated repository: refused without HF_TOKEN, fetched with it.
    let (e, m) = hub_error(resolve_model("test-org/gated"));
    assert!(matches!(e, HubError::Download { .. }), "{e:?}");
    assert!(
        m.contains("`test-org/gated`") && m.contains("config.json") && m.contains("HF_TOKEN"),
        "{m}"
    );
    std::env::set_var("HF_TOKEN", "secret-token");
    resolve_model("test-org/gated").expect("the token opens the gated repository");
    std::env::remove_var("HF_TOKEN");

    // The server gone: cached models still load; others are an unreachable hub.
    hub.stop();
    assert_eq!(resolve_model("test-org/edgetam-hf").unwrap(), dir);
    EdgeTam::load(resolve_model("test-org/edgetam-pt").unwrap(), &Device::Cpu)
        .expect("cached .pt loads with the server stopped");
    let (e, m) = hub_error(resolve_model("test-org/uncached"));
    assert!(matches!(e, HubError::Unreachable { .. }), "{e:?}");
    assert!(
        m.contains("`test-org/uncached`") && m.contains(&endpoint) && m.contains("cache"),
        "{m}"
    );

    // Offline: the cache only, and a clear miss.
    std::env::set_var("HF_HUB_OFFLINE", "1");
    assert_eq!(resolve_model("test-org/edgetam-hf").unwrap(), dir);
    assert_eq!(resolve_model("test-org/edgetam-pt").unwrap(), pt);
    let (e, m) = hub_error(resolve_model("test-org/uncached"));
    assert!(matches!(e, HubError::NotCached { .. }), "{e:?}");
    assert!(
        m.contains("`test-org/uncached`") && m.contains("HF_HUB_OFFLINE"),
        "{m}"
    );
    // A local path is never looked up on the hub.
    let local = fixtures().join("model");
    assert_eq!(resolve_model(&local).unwrap(), local);
    std::env::remove_var("HF_HUB_OFFLINE");

    let _ = std::fs::remove_dir_all(&home);
}
