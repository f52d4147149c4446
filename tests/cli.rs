//! The `edgetam` binary as a user runs it: outputs, exit codes and error messages.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[path = "../tracker/tests/common/fake_hub.rs"]
mod fake_hub;

/// `edgetam` with the hub sandboxed ([`fake_hub::HUB_ENV`] cleared, an empty cache and
/// HF_HUB_OFFLINE), so a `--model` that looks like a repository id never reaches the network.
fn edgetam(args: &[&str]) -> Output {
    edgetam_env(args, &[])
}

/// [`edgetam`] with `env` set too, over the sandbox's own settings.
fn edgetam_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_edgetam"));
    for k in fake_hub::HUB_ENV {
        cmd.env_remove(k);
    }
    cmd.env("HF_HOME", tmp("hf-home-empty"))
        .env("HF_HUB_OFFLINE", "1")
        .envs(env.iter().copied())
        .args(args)
        .current_dir(root())
        .output()
        .expect("run edgetam")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("edgetam-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The test image (480x360).
const SHAPES: &str = "examples/data/shapes.png";
/// The model arguments for random weights.
const RANDOM: &[&str] = &["--random-weights"];

/// `edgetam segment` with `model` (e.g. [`RANDOM`]), `--image IMAGE`, then `rest` (prompts,
/// outputs).
fn segment(model: &[&str], image: &str, rest: &[&str]) -> Output {
    let mut args = vec!["segment"];
    args.extend(model);
    args.extend(["--image", image]);
    args.extend(rest);
    edgetam(&args)
}

/// [`segment`] with `prompt` (e.g. `["--box", "1,1,5,5"]`), which must fail with the
/// clear-error status 2; its stderr.
fn segment_error(model: &[&str], image: &str, prompt: &[&str]) -> String {
    let o = segment(model, image, &[prompt, &["--out", "x.png"]].concat());
    let e = stderr(&o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{model:?} {image} {prompt:?}: {e}"
    );
    e
}

/// `edgetam bench --random-weights --input-size SIZE` + `rest`, with `env` set.
fn bench(size: &str, rest: &[&str], env: &[(&str, &str)]) -> Output {
    let args = [&["bench", "--random-weights", "--input-size", size], rest].concat();
    edgetam_env(&args, env)
}

/// The smallest bench: one object, one warm-up frame, one measured frame.
const ONE_FRAME: [&str; 6] = ["--objects", "1", "--warmup", "1", "--frames", "1"];

#[test]
fn segment_with_random_weights_writes_mask_and_overlay() {
    let (mask, overlay) = (tmp("mask.png"), tmp("overlay.png"));
    let prompts = ["--box", "150,90,330,260", "--point", "240,170,1"];
    let outputs = ["--out", mask.to_str().unwrap()];
    let o = segment(
        &["--random-weights", "--input-size", "256"],
        SHAPES,
        &[
            &prompts[..],
            &outputs,
            &["--overlay", overlay.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("meaningless"),
        "must warn that random masks are meaningless"
    );
    let m = image::open(&mask).unwrap();
    assert_eq!((m.width(), m.height()), (480, 360));
    let ov = image::open(&overlay).unwrap();
    assert_eq!((ov.width(), ov.height()), (480, 360));
}

#[test]
fn segment_with_fixture_weights_reports_scores() {
    let mask = tmp("mask_fixture.png");
    let o = segment(
        &["--model", "fixtures/model"],
        SHAPES,
        &["--point", "240,170,1", "--out", mask.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("object score") && out.contains("best of 3"),
        "{out}"
    );
}

#[test]
fn missing_image_is_a_clear_error() {
    let e = segment_error(RANDOM, "no/such.png", &["--box", "1,1,5,5"]);
    assert!(e.contains("no/such.png"), "{e}");
}

#[test]
fn unreadable_image_is_a_clear_error() {
    let bad = tmp("not_an_image.png");
    std::fs::write(&bad, b"this is not a PNG").unwrap();
    let e = segment_error(RANDOM, bad.to_str().unwrap(), &["--box", "1,1,5,5"]);
    assert!(e.contains("cannot"), "{e}");
}

#[test]
fn prompt_outside_the_image_is_rejected() {
    let e = segment_error(RANDOM, SHAPES, &["--box", "10,10,900,50"]);
    assert!(e.contains("outside"), "{e}");
    let e = segment_error(RANDOM, SHAPES, &["--point", "10,10,7"]);
    assert!(e.contains("label"), "{e}");
}

#[test]
fn missing_model_is_a_clear_error() {
    let e = segment_error(&["--model", "no/model"], SHAPES, &["--box", "1,1,5,5"]);
    assert!(e.contains("no/model"), "{e}");
    // A path that cannot be a repository id says so as a path.
    let e = segment_error(&["--model", "no/such/model"], SHAPES, &["--box", "1,1,5,5"]);
    assert!(
        e.contains("no/such/model") && e.contains("no such model file"),
        "{e}"
    );
}

/// `--model owner/name` against a loopback server answering as the hub (HF_ENDPOINT): fetched
/// into HF_HOME once, then loaded from the cache with the server gone and HF_HUB_OFFLINE=1.
#[test]
fn segment_with_a_hub_repository_id() {
    use fake_hub::{FakeHub, FakeRepo};
    let fixture = |rel: &str| std::fs::read(root().join("fixtures").join(rel)).unwrap();
    let hub = FakeHub::start(vec![FakeRepo::new("test-org/edgetam-hf")
        .file("config.json", fixture("image_256/config.json"))
        .file("model.safetensors", fixture("model/model.safetensors"))]);
    let home = tmp("hf-home-hub");
    let _ = std::fs::remove_dir_all(&home);
    let mask = tmp("mask_hub.png");
    let endpoint = hub.endpoint();
    let run = |repo: &str, offline: bool| {
        let args = [
            "segment",
            "--model",
            repo,
            "--image",
            SHAPES,
            "--point",
            "240,170,1",
        ];
        let env = [
            ("HF_HOME", home.to_str().unwrap()),
            ("HF_ENDPOINT", &endpoint),
            ("HF_HUB_OFFLINE", if offline { "1" } else { "0" }),
        ];
        edgetam_env(
            &[&args[..], &["--out", mask.to_str().unwrap()]].concat(),
            &env,
        )
    };
    let o = run("test-org/edgetam-hf", false);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("object score"));
    assert!(
        stderr(&o).contains("loaded test-org/edgetam-hf (hub cache: ")
            && stderr(&o).contains("models--test-org--edgetam-hf"),
        "{}",
        stderr(&o)
    );
    let fetched = hub.requests();
    assert!(
        fetched
            .iter()
            .any(|r| r == "GET /test-org/edgetam-hf/resolve/main/model.safetensors"),
        "{fetched:#?}"
    );
    let o = run("test-org/unknown", false);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`test-org/unknown`") && stderr(&o).contains("HTTP 404"),
        "{}",
        stderr(&o)
    );
    let requests = hub.requests().len();
    let o = run("test-org/edgetam-hf", false);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        hub.requests().len(),
        requests,
        "the cached model needs no request"
    );
    hub.stop();
    let o = run("test-org/edgetam-hf", true);
    assert!(o.status.success(), "offline from the cache: {}", stderr(&o));
}

#[test]
fn check_passes_on_the_fixtures() {
    let o = edgetam(&["check", "--fixtures", "fixtures/image_256"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("[ok]") && !out.contains("[FAIL]"), "{out}");
}

#[test]
fn check_fails_with_other_weights() {
    // Same fixture, but a model with different (random) weights must fail the checks: proves
    // `check` can fail. Uses a copy of the fixture weights with one tensor scaled.
    let dir = tmp("perturbed");
    std::fs::create_dir_all(&dir).unwrap();
    let src = root().join("fixtures/model/model.safetensors");
    let mut tensors = candle_core::safetensors::load(&src, &candle_core::Device::Cpu).unwrap();
    let key = "vision_encoder.neck.convs.1.weight";
    let t = tensors[key].clone();
    tensors.insert(key.into(), (t * 1.01).unwrap());
    let dst = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &dst).unwrap();
    let o = edgetam(&[
        "check",
        "--fixtures",
        "fixtures/image_256",
        "--model",
        dst.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("[FAIL]"));
}

/// A folder of tiny frames: a red square moving right on a dark background, named so that only a
/// numeric-aware sort gets the order right, plus a file that is not a frame and a broken frame.
fn track_frames(name: &str) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (i, file) in ["frame1.png", "frame2.png", "frame10.png"]
        .iter()
        .enumerate()
    {
        let x0 = 20 + 4 * i as u32;
        let img = image::RgbImage::from_fn(96, 64, |x, y| {
            if (x0..x0 + 30).contains(&x) && (15..45).contains(&y) {
                image::Rgb([200, 50, 50])
            } else {
                image::Rgb([20, 20, 80])
            }
        });
        img.save(dir.join(file)).unwrap();
    }
    std::fs::write(dir.join("notes.txt"), b"not a frame").unwrap();
    std::fs::write(dir.join("frame3.png"), b"not a PNG").unwrap();
    dir
}

/// `edgetam track --random-weights --input-size 256 --frames FRAMES`, a `--prompt` per spec
/// of `prompts`, then `rest`.
fn track(frames: &Path, prompts: &[&str], rest: &[&str]) -> Output {
    let frames = frames.to_str().unwrap();
    let mut args = vec!["track", "--random-weights", "--input-size", "256"];
    args.extend(["--frames", frames]);
    for p in prompts {
        args.extend(["--prompt", p]);
    }
    args.extend(rest);
    edgetam(&args)
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn track_writes_masks_overlays_results_and_logits() {
    let frames = track_frames("track_frames");
    let out = tmp("track_out");
    let dump = tmp("track_dump.safetensors");
    // Object 3 starts on frame 1 from a mask prompt.
    let mask = tmp("track_mask.png");
    image::GrayImage::from_fn(96, 64, |x, y| {
        image::Luma([if (60..80).contains(&x) && (30..50).contains(&y) {
            255
        } else {
            0
        }])
    })
    .save(&mask)
    .unwrap();
    let mask_spec = format!("obj=3;frame=1;mask={}", mask.display());
    let prompts = [
        "obj=1;frame=0;box=20,15,50,45",
        "obj=2;frame=0;point=30,30,1;point=80,10,0",
        &mask_spec,
    ];
    let (out_arg, dump_arg) = (out.to_str().unwrap(), dump.to_str().unwrap());
    let o = track(
        &frames,
        &prompts,
        &["--out", out_arg, "--overlay", "--dump-logits", dump_arg],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("meaningless"), "{err}");
    // The broken frame (index 2 in natural order) is reported by name and skipped.
    assert!(
        err.contains("skipping frame 2 (frame3.png)"),
        "must warn about the bad frame: {err}"
    );
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(
        summary.contains("tracked 3 frames") && summary.contains("fps"),
        "{summary}"
    );

    let expected_masks = [
        "000000_obj1.png",
        "000000_obj2.png",
        "000001_obj1.png",
        "000001_obj2.png",
        "000001_obj3.png",
        "000003_obj1.png",
        "000003_obj2.png",
        "000003_obj3.png",
    ];
    assert_eq!(sorted_names(&out.join("masks")), expected_masks);
    for name in expected_masks {
        let m = image::open(out.join("masks").join(name)).unwrap();
        assert_eq!(m.color(), image::ColorType::L8);
        assert_eq!((m.width(), m.height()), (96, 64));
        assert!(m.to_luma8().pixels().all(|p| p[0] == 0 || p[0] == 255));
    }
    assert_eq!(
        sorted_names(&out.join("overlay")),
        ["000000.png", "000001.png", "000003.png"]
    );

    let results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = results
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 8, "{results}");
    let files = ["frame1.png", "frame2.png", "frame3.png", "frame10.png"];
    for (l, name) in lines.iter().zip(expected_masks) {
        let (f, obj) = (l["frame"].as_u64().unwrap(), l["object"].as_u64().unwrap());
        assert_eq!(name, format!("{f:06}_obj{obj}.png"));
        assert_eq!(l["file"], files[f as usize], "natural order: {l}");
        let score = l["score"].as_f64().unwrap();
        assert_eq!(l["visible"].as_bool().unwrap(), score > 0.0, "{l}");
        let area = l["area"].as_u64().unwrap();
        assert!(area <= 96 * 64);
        match &l["box"] {
            serde_json::Value::Null => assert_eq!(area, 0, "{l}"),
            b => assert_eq!(b.as_array().unwrap().len(), 4, "{l}"),
        }
        let prompted = (f == 0 && obj < 3) || (f == 1 && obj == 3);
        assert_eq!(l["prompted"].as_bool().unwrap(), prompted, "{l}");
    }

    let tensors = candle_core::safetensors::load(&dump, &candle_core::Device::Cpu).unwrap();
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut expected: Vec<String> = Vec::new();
    for m in expected_masks {
        let (f, o) = (&m[..6], &m[10..11]);
        for what in ["lowres", "mask", "score"] {
            expected.push(format!("f{f}/o{o}/{what}"));
        }
    }
    expected.sort();
    assert_eq!(names, expected.iter().collect::<Vec<_>>());
    for (name, t) in &tensors {
        let (dtype, dims): (candle_core::DType, &[usize]) = match name.rsplit('/').next() {
            Some("lowres") => (candle_core::DType::F32, &[64, 64]),
            Some("score") => (candle_core::DType::F32, &[1]),
            _ => (candle_core::DType::U8, &[64, 96]),
        };
        assert_eq!((t.dtype(), t.dims()), (dtype, dims), "{name}");
    }
    // The dumped mask and score agree with the PNG and results.jsonl.
    let bin = tensors["f000001/o3/mask"].flatten_all().unwrap();
    let bin = bin.to_vec1::<u8>().unwrap();
    assert!(bin.iter().all(|&v| v <= 1));
    let png = image::open(out.join("masks/000001_obj3.png"))
        .unwrap()
        .to_luma8();
    assert!(bin
        .iter()
        .zip(png.pixels())
        .all(|(&b, p)| (b == 1) == (p[0] == 255)));
    let score = tensors["f000001/o3/score"].to_vec1::<f32>().unwrap()[0];
    assert_eq!(score as f64, lines[4]["score"].as_f64().unwrap());
}

/// `edgetam track` gives the same bytes with the encoder ahead on its own thread.
#[test]
fn track_encoder_ahead_is_byte_identical() {
    let frames = track_frames("track_ahead_frames");
    let run = |ahead: &str, queue: &str| {
        let out = tmp(&format!("track_ahead_{ahead}_out"));
        let dump = tmp(&format!("track_ahead_{ahead}.safetensors"));
        let prompts = [
            "obj=1;frame=0;box=20,15,50,45",
            "obj=2;frame=1;point=30,30,1;point=80,10,0",
        ];
        let (out_arg, dump_arg) = (out.to_str().unwrap(), dump.to_str().unwrap());
        let rest = ["--out", out_arg, "--dump-logits", dump_arg];
        let o = track(
            &frames,
            &prompts,
            &[&rest[..], &["--encoder-ahead", ahead, "--queue", queue]].concat(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let results = std::fs::read(out.join("results.jsonl")).unwrap();
        let mut masks = Vec::new();
        for name in sorted_names(&out.join("masks")) {
            masks.push((
                name.clone(),
                std::fs::read(out.join("masks").join(name)).unwrap(),
            ));
        }
        let tensors = candle_core::safetensors::load(&dump, &candle_core::Device::Cpu).unwrap();
        let mut dumped: Vec<(String, Vec<u8>)> = tensors
            .iter()
            .map(|(k, t)| {
                let bytes = match t.dtype() {
                    candle_core::DType::U8 => t.flatten_all().unwrap().to_vec1::<u8>().unwrap(),
                    _ => t
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap()
                        .iter()
                        .flat_map(|v| v.to_bits().to_le_bytes())
                        .collect(),
                };
                (k.clone(), bytes)
            })
            .collect();
        dumped.sort();
        (results, masks, dumped)
    };
    let off = run("off", "2");
    let on = run("on", "1");
    assert!(!off.1.is_empty() && !off.2.is_empty());
    assert!(off.0 == on.0, "results.jsonl differs");
    assert!(off.1 == on.1, "masks differ");
    assert!(off.2 == on.2, "dumped logits differ");
}

/// Runs `edgetam track` on the test frames with one prompt per SPEC; returns stderr and asserts
/// the clear-error exit status.
fn track_error(frames: &str, specs: &[&str]) -> String {
    let out = tmp("track_err_out");
    let o = track(Path::new(frames), specs, &["--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    stderr(&o)
}

#[test]
fn track_rejects_bad_input_up_front() {
    let frames = track_frames("track_err_frames");
    let frames = frames.to_str().unwrap();
    let e = track_error(frames, &["obj=1;frame=0;bx=1,2,3,4"]);
    assert!(e.contains("`bx=1,2,3,4`"), "bad token must be named: {e}");
    let e = track_error(frames, &["obj=1;frame=0;box=1,2,x,4"]);
    assert!(e.contains("`box=1,2,x,4`"), "{e}");
    let e = track_error(frames, &["obj=1;frame=0;point=5,5,7"]);
    assert!(e.contains("label"), "{e}");
    let e = track_error(frames, &["obj=1;frame=9;box=1,2,30,40"]);
    assert!(e.contains("frame 9") && e.contains("4 frames"), "{e}");
    let e = track_error(
        frames,
        &["obj=1;frame=0;box=1,2,30,40", "obj=1;point=5,5,1"],
    );
    assert!(e.contains("two prompts"), "{e}");
    let e = track_error(frames, &["obj=1;frame=0;box=1,2,300,40"]);
    assert!(e.contains("outside") && e.contains("frame1.png"), "{e}");
    let e = track_error("no/such/frames", &["obj=1;box=1,2,30,40"]);
    assert!(
        e.contains("no/such/frames") && e.contains("does not exist"),
        "{e}"
    );
    let empty = tmp("track_empty_frames");
    std::fs::create_dir_all(&empty).unwrap();
    let e = track_error(empty.to_str().unwrap(), &["obj=1;box=1,2,30,40"]);
    assert!(
        e.contains(".png, .jpg, .jpeg"),
        "must list the extensions: {e}"
    );
    // None of these got as far as loading the model.
    assert!(!e.contains("meaningless"), "{e}");
}

#[test]
fn bench_reports_every_stage_as_table_json_and_plot() {
    let (json, plot) = (tmp("bench.json"), tmp("bench.svg"));
    let runs = ["--objects", "1,2", "--frames", "3", "--warmup", "2"];
    let how = ["--encoder-ahead", "both", "--threads", "2"];
    let outputs = [
        "--json",
        json.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ];
    let o = bench("256", &[&runs[..], &how, &outputs].concat(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for label in [
        "image encoder",
        "memory attention",
        "prompt enc + mask decoder",
        "memory enc + perceiver",
        "post-process",
        "summary",
    ] {
        assert!(out.contains(label), "table lacks `{label}`:\n{out}");
    }
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let configs = doc["configs"].as_array().unwrap();
    assert_eq!(
        configs.len(),
        4,
        "1 and 2 objects x serial and encoder-ahead"
    );
    for c in configs {
        let frames = c["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 3);
        // Measured frames are the ones after the warm-up (frame 0 is the prompted one).
        assert_eq!(frames[0]["frame"], 2);
        for key in [
            "end_to_end_ms",
            "preprocess_ms",
            "image_encoder_ms",
            "memory_attention_ms",
            "mask_decoder_ms",
            "memory_encoder_ms",
            "postprocess_ms",
        ] {
            let v = c["median"][key].as_f64().unwrap();
            assert!(v > 0.0, "{key} median {v} in {c}");
        }
        assert!(c["fps"].as_f64().unwrap() > 0.0);
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("stage breakdown"));
}

#[test]
fn bench_rejects_unknown_modes_and_dtypes() {
    let o = bench("64", &["--encoder-ahead", "sometimes"], &[]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--encoder-ahead must be on, off or both"),
        "{}",
        stderr(&o)
    );
    let o = edgetam(&["bench", "--random-weights", "--size", "64", "--dtype", "f8"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--dtype must be f32 or bf16"),
        "{}",
        stderr(&o)
    );
}

/// `--input-size`: a size the model cannot take is refused before anything loads, with the rule
/// in the message, on every command; an accepted one runs.
#[test]
fn input_size_rule_is_checked_and_named() {
    for size in ["500", "128", "4096", "0"] {
        let o = bench(size, &ONE_FRAME, &[]);
        assert_eq!(o.status.code(), Some(2), "bench: {}", stderr(&o));
        let prompt = ["--box", "150,90,330,260", "--input-size", size];
        for (cmd, e) in [
            ("segment", segment_error(RANDOM, SHAPES, &prompt)),
            ("bench", stderr(&o)),
        ] {
            assert!(
                e.contains(&format!("input size {size} is not supported"))
                    && e.contains("multiple of 256 from 256 to 2048"),
                "{cmd} --input-size {size}: {e}"
            );
        }
    }
    // A checkpoint folder at another size: the config file is untouched, the model runs at 512.
    let o = segment(
        &["--model", "fixtures/model", "--input-size", "512"],
        SHAPES,
        &[
            "--box",
            "150,90,330,260",
            "--out",
            tmp("input512.png").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `--layers`: every layer of the image encoder timed once per measured frame (the 20 RepViT
/// blocks, the stem, the downsamples, the neck and the two high-resolution convs), the totals
/// per part and per kind, the same records in the JSON; the layers' sum fits inside the stage's
/// own time. Encoder-ahead runs carry none (their encoder thread straddles the warm-up).
#[test]
fn bench_times_the_image_encoder_layer_by_layer() {
    let json = tmp("bench_layers.json");
    let args = [
        "--objects",
        "1",
        "--warmup",
        "1",
        "--frames",
        "2",
        "--layers",
    ];
    let how = ["--encoder-ahead", "both", "--json", json.to_str().unwrap()];
    let o = bench("256", &[&args[..], &how].concat(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for line in [
        "image encoder, layer by layer (1 object(s), f32, 256 input)",
        "stem.conv1",
        "stages_0.blocks.0.se",
        "stages_0.blocks.1.token_mixer",
        "stages_1.downsample.pre_block.channel_mixer",
        "stages_2.downsample.spatial_downsample",
        "stages_3.blocks.1.channel_mixer",
        "neck (stride-16 level)",
        "conv_s0 (with its FPN lateral)",
        "per part:",
        "per kind:",
        "mlp (1x1, gelu, 1x1, residual)",
    ] {
        assert!(out.contains(line), "no `{line}` in:\n{out}");
    }
    assert_eq!(
        out.matches("layer by layer").count(),
        1,
        "serial only:\n{out}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let configs = doc["configs"].as_array().unwrap();
    assert!(
        configs[1].get("layers").is_none(),
        "encoder-ahead: no layers"
    );
    let layers = configs[0]["layers"].as_array().unwrap();
    let blocks = layers
        .iter()
        .filter(|l| l["layer"].as_str().unwrap().contains(".blocks."))
        .map(|l| {
            let name = l["layer"].as_str().unwrap();
            name.split('.').take(3).collect::<Vec<_>>().join(".")
        })
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(blocks.len(), 2 + 2 + 14 + 2, "{blocks:?}");
    let mut sum = 0.0;
    for l in layers {
        assert_eq!(l["calls_per_frame"], 1.0, "{l}");
        let ms = l["ms_per_frame"].as_f64().unwrap();
        assert!(ms > 0.0, "{l}");
        sum += ms;
    }
    let stage: f64 = configs[0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["image_encoder_ms"].as_f64().unwrap())
        .sum::<f64>()
        / 2.0;
    assert!(
        sum <= stage,
        "the layers ({sum} ms) within the stage ({stage} ms)"
    );
}

/// `bench --input-size 256,512`: one block per size, the summary names each size, and the JSON
/// lists both.
#[test]
fn bench_runs_every_input_size() {
    let json = tmp("bench_sizes.json");
    let o = bench(
        "256,512",
        &[&ONE_FRAME[..], &["--json", json.to_str().unwrap()]].concat(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for size in ["256", "512"] {
        assert!(
            out.contains(&format!("threads, {size} input")),
            "no {size} block:\n{out}"
        );
    }
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["size"], serde_json::json!([256, 512]));
    let sizes: Vec<u64> = doc["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["image_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [256, 512]);
}

/// A malformed `EDGETAM_BF16_POLICY` is a usage error naming the variable and what is wrong,
/// before anything runs (where bf16 cannot run at all, that refusal comes first); a valid one
/// runs, and f32 ignores it.
#[test]
fn a_bad_bf16_policy_is_refused_and_a_good_one_runs() {
    let runs = edgetam::tracker::Precision::Bf16
        .available_on(&candle_core::Device::Cpu)
        .is_ok();
    let run = |dtype: &str, policy: &str| {
        let args = [&ONE_FRAME[..], &["--dtype", dtype]].concat();
        bench("256", &args, &[("EDGETAM_BF16_POLICY", policy)])
    };
    let o = run("bf16", "decoder=bf16");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    if runs {
        assert!(
            e.contains("EDGETAM_BF16_POLICY: unknown layer group `decoder`"),
            "{e}"
        );
        assert!(
            e.contains("backbone.stage3"),
            "the message lists the groups: {e}"
        );
        let o = run("bf16", "*=f32,memory_attention.mlp=bf16");
        assert!(o.status.success(), "{}", stderr(&o));
    } else {
        assert!(e.contains("precision bf16 is not available here"), "{e}");
    }
    let o = run("f32", "decoder=bf16");
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `--dtype bf16` where bf16 cannot run (the kernels capped below avx512 by `EDGETAM_ISA`) is
/// refused before the model loads, with the reason; never run in f32 instead. f32 still runs.
#[test]
fn bf16_where_it_cannot_run_is_refused() {
    // Below the bf16 kernels' avx512: avx2 where the CPU has it, else portable.
    use edgetam::tracker::Isa;
    let cap = [Isa::Avx2, Isa::Portable]
        .into_iter()
        .find(|isa| isa.runs_here())
        .map_or("portable", Isa::name);
    let run = |dtype: &str| {
        let args = [&ONE_FRAME[..], &["--dtype", dtype]].concat();
        bench("256", &args, &[("EDGETAM_ISA", cap)])
    };
    let o = run("f32,bf16");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--dtype bf16: precision bf16 is not available here: it needs "),
        "{e}"
    );
    let o = run("f32");
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Three frames of a blue square moving down on a gray background (another stream's frames).
fn track_frames_b(name: &str) -> PathBuf {
    let dir = tmp(name);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..3u32 {
        let y0 = 10 + 3 * i;
        let img = image::RgbImage::from_fn(80, 72, |x, y| {
            if (40..70).contains(&x) && (y0..y0 + 25).contains(&y) {
                image::Rgb([40, 60, 210])
            } else {
                image::Rgb([110, 110, 110])
            }
        });
        img.save(dir.join(format!("b{i}.png"))).unwrap();
    }
    dir
}

/// Every file under `dir` (relative path, bytes), sorted.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                files.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// Two `--input`: one model, and each stream's outputs (masks, overlays, results.jsonl, logits)
/// under `--out DIR/stream-N/` and `D.streamN.safetensors` are the bytes of a one-input run
/// on that input; `stream=1;` routes a prompt to the second input.
#[test]
fn track_two_inputs_match_two_one_input_runs() {
    let (a, b) = (track_frames("multi_a"), track_frames_b("multi_b"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = tmp("multi_out");
    let dump = tmp("multi_dump.safetensors");
    let _ = std::fs::remove_dir_all(&out);
    let prompts = [
        "obj=1;frame=0;box=20,15,50,45",
        "stream=1;obj=2;frame=0;box=38,8,72,37",
        "obj=3;frame=1;point=30,30,1",
        "obj=4;frame=1;point=55,25,1;stream=1",
    ];
    let mut args = vec!["track", "--random-weights", "--input-size", "256"];
    args.extend(["--input", a, "--input", b]);
    for p in &prompts {
        args.extend(["--prompt", p]);
    }
    let (out_arg, dump_arg) = (out.to_str().unwrap(), dump.to_str().unwrap());
    args.extend(["--out", out_arg, "--overlay", "--dump-logits", dump_arg]);
    let o = edgetam(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(
        summary.contains("stream 0: tracked 3 frames")
            && summary.contains("stream 1: tracked 3 frames")
            && summary.contains("stream 0: skipped 1 unreadable frame(s): frame3.png"),
        "{summary}"
    );
    assert!(
        stderr(&o).contains("stream 0: skipping frame 2 (frame3.png)"),
        "{}",
        stderr(&o)
    );
    // Routing: stream 0 has objects 1 and 3, stream 1 objects 2 and 4.
    let s1 = sorted_names(&out.join("stream-1/masks"));
    assert_eq!(
        s1,
        [
            "000000_obj2.png",
            "000001_obj2.png",
            "000001_obj4.png",
            "000002_obj2.png",
            "000002_obj4.png"
        ]
    );
    assert!(sorted_names(&out.join("stream-0/masks"))
        .iter()
        .all(|n| n.ends_with("_obj1.png") || n.ends_with("_obj3.png")));

    // The same inputs one at a time, as today (`stream=0;` is accepted with one input).
    let single = |input: &str, prompts: &[&str], n: usize| {
        let out = tmp(&format!("multi_single{n}_out"));
        let dump = tmp(&format!("multi_single{n}.safetensors"));
        let _ = std::fs::remove_dir_all(&out);
        let (out_arg, dump_arg) = (out.to_str().unwrap(), dump.to_str().unwrap());
        let o = track(
            Path::new(input),
            prompts,
            &["--out", out_arg, "--overlay", "--dump-logits", dump_arg],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        (tree(&out), std::fs::read(&dump).unwrap())
    };
    let one = single(a, &["stream=0;obj=1;box=20,15,50,45", prompts[2]], 0);
    let two = single(
        b,
        &[
            "obj=2;frame=0;box=38,8,72,37",
            "obj=4;frame=1;point=55,25,1",
        ],
        1,
    );
    for (n, (files, dumped)) in [one, two].into_iter().enumerate() {
        let multi = tree(&out.join(format!("stream-{n}")));
        assert!(!multi.is_empty());
        assert_eq!(
            multi.iter().map(|f| &f.0).collect::<Vec<_>>(),
            files.iter().map(|f| &f.0).collect::<Vec<_>>(),
            "stream {n}: the same files"
        );
        for (m, s) in multi.iter().zip(&files) {
            assert!(m.1 == s.1, "stream {n}: {} differs", m.0);
        }
        let multi_dump = std::fs::read(tmp(&format!("multi_dump.stream{n}.safetensors"))).unwrap();
        assert!(multi_dump == dumped, "stream {n}: the dumped logits differ");
    }
}

/// `edgetam track` with `args`, which must fail with the clear-error status 2 before the model
/// loads; its stderr.
fn track_usage_error(args: &[&str]) -> String {
    let mut all = vec!["track", "--random-weights", "--input-size", "256"];
    all.extend(args);
    let o = edgetam(&all);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
    assert!(
        !e.contains("meaningless"),
        "refused after the model loaded: {e}"
    );
    e
}

#[test]
fn track_stream_prompts_out_of_range_are_refused() {
    let (a, b) = (track_frames("multi_err_a"), track_frames_b("multi_err_b"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = tmp("multi_err_out");
    let out = out.to_str().unwrap();
    let two = ["--input", a, "--input", b, "--out", out];
    let e = track_usage_error(&[&two[..], &["--prompt", "stream=2;obj=1;box=1,2,30,40"]].concat());
    assert!(
        e.contains("stream 2") && e.contains("2 inputs (streams 0 to 1)"),
        "{e}"
    );
    let one = ["--input", a, "--out", out];
    let e = track_usage_error(&[&one[..], &["--prompt", "stream=1;obj=1;box=1,2,30,40"]].concat());
    assert!(
        e.contains("stream 1") && e.contains("1 input (stream 0)"),
        "{e}"
    );
    let e = track_usage_error(&[&two[..], &["--prompt", "stream=x;obj=1;box=1,2,30,40"]].concat());
    assert!(e.contains("`stream=x`"), "{e}");
    // A prompt that does not fit its own stream's frames names the stream.
    let e = track_usage_error(&[&two[..], &["--prompt", "stream=1;obj=1;box=1,2,90,40"]].concat());
    assert!(e.contains("stream 1") && e.contains("outside"), "{e}");
    // What cannot work per stream is refused, not ignored.
    let e = track_usage_error(
        &[
            &two[..],
            &["--prompt", "obj=1;box=1,2,30,40", "--encoder-ahead", "off"],
        ]
        .concat(),
    );
    assert!(e.contains("--encoder-ahead off"), "{e}");
}

#[test]
fn bench_compares_streams_in_one_pipeline_and_independent_ones() {
    let json = tmp("bench_streams.json");
    let args = ["--streams", "1,2", "--frames", "2", "--warmup", "1"];
    let o = bench(
        "256",
        &[&args[..], &["--json", json.to_str().unwrap()]].concat(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for column in [
        "streams",
        "mode",
        "aggregate FPS",
        "FPS/stream",
        "p50 ms",
        "p95 ms",
        "worst p95 ms",
    ] {
        assert!(out.contains(column), "table lacks `{column}`:\n{out}");
    }
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" multi ") || l.contains(" independent "))
        .collect();
    assert_eq!(
        rows.len(),
        4,
        "1 and 2 streams x multi and independent:\n{out}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runs = doc["streams"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for r in runs {
        let n = r["streams"].as_u64().unwrap() as usize;
        assert!(r["aggregate_fps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["latency_p95_ms"].as_f64().unwrap() >= r["latency_median_ms"].as_f64().unwrap());
        let per = r["per_stream"].as_array().unwrap();
        assert_eq!(per.len(), n);
        for s in per {
            assert_eq!(s["latency_ms"].as_array().unwrap().len(), 2, "{s}");
            assert!(s["latency_median_ms"].as_f64().unwrap() > 0.0, "{s}");
        }
    }
    // The stream comparison replaces the stage tables; what it would ignore is refused.
    let o = bench("256", &["--streams", "2", "--objects", "3"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}
