//! Rust to Rust over DDS on 127.0.0.1: the `edgetam-ros2` binary against a stand-in detector
//! and camera in this process, checked frame by frame against the same frames and prompts
//! tracked in-process (fixtures/model, input size 256).
//!
//! The test re-runs itself inside a private network namespace (`unshare -n`, loopback up) when
//! it can (root, `unshare` and `ip` present), so no packet can leave the machine; either way
//! both sides use `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST` and a domain id of their own.
//! Run it with `--release` (the model is unusably slow unoptimised):
//! `cargo test --release -p edgetam-ros2 --test node`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgetam_pipeline::Pipeline;
use edgetam_ros2::msgs::{
    BoundingBox2D, Detection2D, Detection2DArray, DiagnosticArray, Header, Image, ObjectHypothesis,
    ObjectHypothesisWithPose, Point2D, Pose2D, StringMsg, Time,
};
use edgetam_ros2::{node, outputs};
use edgetam_tracker::{ModelSpec, Prompt};
use ros2_client::{MessageTypeName, Name, Node, NodeName, NodeOptions, Publisher, Subscription};

const NETNS_FLAG: &str = "EDGETAM_ROS2_TEST_NETNS";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Re-runs `test` of this binary inside `unshare -n` with `lo` up; `None` if that is not
/// possible here (then the caller runs in place).
fn in_private_netns(test: &str) -> Option<bool> {
    if std::env::var_os(NETNS_FLAG).is_some() {
        return None;
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .is_some_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let have = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !is_root || !have("unshare") || !have("ip") {
        eprintln!("note: not root or no unshare/ip: running on this namespace's loopback");
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let status = Command::new("unshare")
        .args(["-n", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(NETNS_FLAG, "1")
        .status()
        .ok()?;
    Some(status.success())
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn topic(node: &mut Node, name: &str, pkg: &str, ty: &str) -> ros2_client::dds::rustdds::Topic {
    node.create_topic(
        &Name::parse(name).unwrap(),
        MessageTypeName::new(pkg, ty),
        &node::reliable_qos(),
    )
    .unwrap()
}

fn wait_for<T: 'static + serde::de::DeserializeOwned>(
    sub: &Subscription<T>,
    what: &str,
    deadline: Duration,
    log: &Path,
) -> T {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if let Ok(Some((m, _))) = sub.take() {
            return m;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!(
        "no {what} within {deadline:?}; node log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// A 160x120 rgb8 frame: a grey background and two bright squares drifting right.
fn frame(k: u32, w: u32, h: u32) -> Vec<u8> {
    let mut px = vec![60u8; (w * h * 3) as usize];
    for (x0, y0, c) in [(20 + 2 * k, 30, [230, 40, 40]), (90 + k, 60, [40, 220, 60])] {
        for y in y0..(y0 + 30).min(h) {
            for x in x0..(x0 + 30).min(w) {
                px[(3 * (y * w + x)) as usize..][..3].copy_from_slice(&c);
            }
        }
    }
    px
}

fn image_msg(k: u32, w: u32, h: u32, encoding: &str) -> Image {
    let data = frame(k, w, h);
    let bpp = if encoding == "16UC1" { 2 } else { 3 };
    Image {
        header: Header {
            stamp: Time {
                sec: 1000 + k as i32,
                nanosec: 7 * k,
            },
            frame_id: "test_camera".into(),
        },
        height: h,
        width: w,
        encoding: encoding.into(),
        is_bigendian: 0,
        step: w * bpp,
        data: data[..(w * h * bpp) as usize].to_vec(),
    }
}

fn detection(b: [f64; 4], score: f64, class: &str) -> Detection2D {
    Detection2D {
        results: vec![ObjectHypothesisWithPose {
            hypothesis: ObjectHypothesis {
                class_id: class.into(),
                score,
            },
            ..Default::default()
        }],
        bbox: BoundingBox2D {
            center: Pose2D {
                position: Point2D {
                    x: (b[0] + b[2]) / 2.0,
                    y: (b[1] + b[3]) / 2.0,
                },
                theta: 0.0,
            },
            size_x: b[2] - b[0],
            size_y: b[3] - b[1],
        },
        ..Default::default()
    }
}

fn diag_value(d: &DiagnosticArray, key: &str) -> Option<String> {
    d.status
        .first()?
        .values
        .iter()
        .find(|v| v.key == key)
        .map(|v| v.value.clone())
}

#[test]
fn detector_prompts_frames_and_detections_round_trip() {
    if let Some(ok) = in_private_netns("detector_prompts_frames_and_detections_round_trip") {
        assert!(
            ok,
            "the test failed inside its network namespace (output above)"
        );
        return;
    }
    let domain = 100 + (std::process::id() % 100);
    // SAFETY-free in edition 2021: set before any thread of this test reads the environment.
    std::env::set_var("ROS_DOMAIN_ID", domain.to_string());
    std::env::set_var("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST");
    let model_dir = root().join("fixtures/model");
    let log = std::env::temp_dir().join(format!("edgetam-ros2-node-{}.log", std::process::id()));
    let child = Command::new(env!("CARGO_BIN_EXE_edgetam-ros2"))
        .args([
            "--ros-args",
            "-r",
            "__node:=tracker",
            "-r",
            "__ns:=/t",
            "-r",
            "image:=/cam/image",
            "-p",
            &format!("model:={}", model_dir.display()),
            "-p",
            "input_size:=256",
            "-p",
            "drop_frames:=false",
            "-p",
            "threads:=2",
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _child = Killed(child);

    // The expected side: the same model and pipeline in-process.
    let model = ModelSpec::new(&model_dir)
        .input_size(256)
        .load()
        .unwrap()
        .model;
    let expected = Pipeline::builder(Arc::new(model)).build().unwrap();

    let context = node::context().unwrap();
    let mut n = context
        .new_node(NodeName::new("/", "tester").unwrap(), NodeOptions::new())
        .unwrap();
    let t_image = topic(&mut n, "/cam/image", "sensor_msgs", "Image");
    let t_prompts = topic(
        &mut n,
        "/t/tracker/prompts",
        "vision_msgs",
        "Detection2DArray",
    );
    let t_prompt = topic(&mut n, "/t/tracker/prompt", "std_msgs", "String");
    let t_det = topic(
        &mut n,
        "/t/tracker/detections",
        "vision_msgs",
        "Detection2DArray",
    );
    let t_mask = topic(&mut n, "/t/tracker/mask", "sensor_msgs", "Image");
    let t_diag = topic(&mut n, "/diagnostics", "diagnostic_msgs", "DiagnosticArray");
    let pub_image: Publisher<Image> = n
        .create_publisher(&t_image, Some(node::sensor_qos()))
        .unwrap();
    let pub_prompts: Publisher<Detection2DArray> = n.create_publisher(&t_prompts, None).unwrap();
    let pub_prompt: Publisher<StringMsg> = n.create_publisher(&t_prompt, None).unwrap();
    let sub_det: Subscription<Detection2DArray> = n.create_subscription(&t_det, None).unwrap();
    let sub_mask: Subscription<Image> = n.create_subscription(&t_mask, None).unwrap();
    let sub_diag: Subscription<DiagnosticArray> = n.create_subscription(&t_diag, None).unwrap();

    // Discovery: the node's readers and writers are known here (it loads the model first).
    let end = Instant::now() + Duration::from_secs(60);
    while !(n.subscription_count("/cam/image") > 0
        && n.subscription_count("/t/tracker/prompts") > 0
        && n.subscription_count("/t/tracker/prompt") > 0
        && n.publisher_count("/t/tracker/mask") > 0
        && n.publisher_count("/t/tracker/detections") > 0)
    {
        assert!(
            Instant::now() < end,
            "the node was not discovered; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));

    // The detector stand-in: two boxes, the less confident first. By confidence: the red
    // square becomes object 1, the green one object 2 (both new: nothing tracked yet).
    let red = [20.0, 30.0, 50.0, 60.0];
    let green = [90.0, 60.0, 120.0, 90.0];
    pub_prompts
        .publish(Detection2DArray {
            header: Header::default(),
            detections: vec![detection(green, 0.6, "box"), detection(red, 0.9, "box")],
        })
        .unwrap();
    expected
        .add_prompt(1, Prompt::from_box(20.0, 30.0, 50.0, 60.0))
        .unwrap();
    expected
        .add_prompt(2, Prompt::from_box(90.0, 60.0, 120.0, 90.0))
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));

    let (w, h) = (160, 120);
    let mut seen_ids = std::collections::BTreeSet::new();
    let mut check = |k: u32, msg: Image, expected: &Pipeline| {
        let stamp = msg.header.clone();
        let (fw, fh) = (msg.width as usize, msg.height as usize);
        let rgb = msg.data.clone();
        pub_image.publish(msg).unwrap();
        expected
            .push(edgetam_pipeline::Frame::rgb8(&rgb[..], fw, fh))
            .unwrap();
        let out = expected.recv().unwrap();
        let r = out.result().unwrap();
        let mask = wait_for(
            &sub_mask,
            &format!("mask of frame {k}"),
            Duration::from_secs(60),
            &log,
        );
        let det = wait_for(
            &sub_det,
            &format!("detections of frame {k}"),
            Duration::from_secs(10),
            &log,
        );
        assert_eq!(
            mask.header, stamp,
            "frame {k}: the mask's header is the frame's"
        );
        assert_eq!(
            det.header, stamp,
            "frame {k}: the detections' header is the frame's"
        );
        let want_mask = outputs::mask_message(&stamp, r).unwrap();
        assert_eq!(
            mask, want_mask,
            "frame {k}: the ID mask differs from in-process tracking"
        );
        let want_det = outputs::detections_message(&stamp, r);
        assert_eq!(
            det, want_det,
            "frame {k}: detections differ from in-process tracking"
        );
        for d in &det.detections {
            assert_eq!(d.id, d.results[0].hypothesis.class_id);
            let id: u16 = d.id.parse().unwrap();
            seen_ids.insert(id);
            // Every pixel of this id in the mask lies inside its box.
            let [x0, y0, x1, y1] = d.bbox.corners();
            for (p, px) in mask.data.chunks_exact(2).enumerate() {
                if u16::from_le_bytes([px[0], px[1]]) == id {
                    let (x, y) = ((p % fw) as f64, (p / fw) as f64);
                    assert!(x >= x0 && x < x1 && y >= y0 && y < y1, "frame {k} id {id}");
                }
            }
        }
        r.objects.iter().map(|o| o.id).collect::<Vec<u32>>()
    };
    for k in 0..4 {
        let ids = check(k, image_msg(k, w, h, "rgb8"), &expected);
        assert_eq!(
            ids,
            [1, 2],
            "frame {k}: objects 1 (red) and 2 (green) are tracked"
        );
    }
    // A depth frame (received frame 4): refused, counted, nothing published.
    pub_image.publish(image_msg(4, w, h, "16UC1")).unwrap();
    // A bad prompt (refused, counted) and object 2 removed from received frame 6 on.
    pub_prompt
        .publish(StringMsg {
            data: "obj=1;bx=1,2,3,4".into(),
        })
        .unwrap();
    pub_prompt
        .publish(StringMsg {
            data: "remove=2;frame=6".into(),
        })
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let d = wait_for(&sub_diag, "diagnostics", Duration::from_secs(10), &log);
        if diag_value(&d, "frames_received").as_deref() == Some("5")
            && diag_value(&d, "rejected_prompts").as_deref() == Some("1")
        {
            assert_eq!(diag_value(&d, "bad_encoding").as_deref(), Some("1"));
            assert_eq!(diag_value(&d, "bad_frames").as_deref(), Some("1"));
            break;
        }
        assert!(
            Instant::now() < end,
            "diagnostics never counted the bad frame: {d:?}"
        );
    }
    assert!(
        sub_mask.take().unwrap().is_none(),
        "no mask for a refused frame"
    );
    let ids = check(5, image_msg(5, w, h, "rgb8"), &expected);
    assert_eq!(ids, [1, 2]);
    expected.remove_object(2).unwrap();
    for k in 6..8 {
        let ids = check(k, image_msg(k, w, h, "rgb8"), &expected);
        assert_eq!(ids, [1], "frame {k}: object 2 was removed from frame 6 on");
    }
    // A frame of another size: tracking resets (in the node as in-process), then goes on.
    let ids = check(8, image_msg(8, 128, 96, "rgb8"), &expected);
    assert!(
        ids.is_empty(),
        "after a size change nothing is tracked: {ids:?}"
    );
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let d = wait_for(&sub_diag, "diagnostics", Duration::from_secs(10), &log);
        if diag_value(&d, "frames_tracked").as_deref() == Some("8") {
            assert_eq!(diag_value(&d, "frames_received").as_deref(), Some("9"));
            assert_eq!(diag_value(&d, "frames_dropped").as_deref(), Some("0"));
            assert_eq!(diag_value(&d, "size_changes").as_deref(), Some("1"));
            assert_eq!(d.status[0].name, "/t/tracker: tracker");
            break;
        }
        assert!(
            Instant::now() < end,
            "diagnostics never counted 8 tracked frames: {d:?}"
        );
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("unsupported encoding `16UC1`"), "{text}");
    assert!(
        text.contains("bx"),
        "the bad prompt's reason is logged: {text}"
    );
    eprintln!("ids seen in detections: {seen_ids:?}");
    let _ = std::fs::remove_file(&log);
}
