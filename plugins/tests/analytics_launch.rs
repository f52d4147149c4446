//! The analytics metas (feature `v1_24`; `v1_26` adds segmentation) with real consumers, in
//! the plugin built as `libgstedgetam.so`: the stock `objectdetectionoverlay` (plugins-bad,
//! GStreamer >= 1.24) after edgetamtrack in `gst-launch-1.0`, and an application in Python
//! (PyGObject, `GstAnalytics` by introspection) reading the relation meta in a pad probe.
//!
//! Runs where the plugin links GStreamer >= 1.24: scripts/test-debian13.sh (a Debian 13 root
//! with gstreamer1.0-plugins-bad, python3-gi and gir1.2-gst-plugins-bad-1.0).
#![cfg(feature = "v1_24")]

mod common;

use std::process::Output;
use std::str::FromStr;

use common::launch::{text, with_plugin};
use common::{frames, model_dir, pngs_and_library, repo, tmp, H, PROMPTS, W};

/// `gst-launch-1.0` with `pipeline` split on whitespace.
fn launch(pipeline: &str) -> Output {
    let args: Vec<&str> = pipeline.split_whitespace().collect();
    with_plugin("gst-launch-1.0", &args, &[])
}

/// The four fixture frames through edgetamtrack and `middle` into raw RGB frames.
fn render(dir: &std::path::Path, middle: &str, out: &std::path::Path) -> Vec<Vec<u8>> {
    let prompts = PROMPTS.replace(' ', "");
    let o = launch(&format!(
        "multifilesrc location={}/%03d.png index=0 stop-index=3 caps=image/png,framerate=10/1 \
         ! pngdec ! videoconvert ! video/x-raw,format=RGB \
         ! edgetamtrack model={} prompts=\"{prompts}\" ! {middle} ! videoconvert \
         ! video/x-raw,format=RGB ! filesink location={}",
        dir.display(),
        model_dir().display(),
        out.display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let data = std::fs::read(out).expect("rendered frames");
    assert_eq!(data.len(), 4 * W * H * 3, "{}", text(&o));
    data.chunks(W * H * 3).map(<[u8]>::to_vec).collect()
}

/// The stock objectdetectionoverlay draws the element's object-detection Mtds: with labels off,
/// the frames change exactly on the outlines of the tracked boxes (frame pixels, the library
/// API's boxes) and nowhere else.
#[test]
fn objectdetectionoverlay_draws_the_tracked_boxes() {
    let (dir, expected) = pngs_and_library(4, "overlay-pngs");
    let plain = render(&dir, "identity", &dir.join("plain.rgb"));
    let drawn = render(
        &dir,
        "objectdetectionoverlay draw-labels=false object-detection-outline-color=0xFFFF00FF",
        &dir.join("drawn.rgb"),
    );
    // Margin around a box's edge lines in which the outline may touch pixels (its width and
    // antialiasing).
    const MARGIN: i64 = 2;
    for (i, ((p, d), want)) in plain.iter().zip(&drawn).zip(&expected).enumerate() {
        let boxes: Vec<[i64; 4]> = want
            .objects
            .iter()
            .filter(|o| o.visible)
            .filter_map(|o| o.bbox)
            .map(|b| b.map(|v| v as i64))
            .collect();
        assert!(!boxes.is_empty(), "frame {i}: the fixture shows objects");
        // Near the outline of [x0, y0, x1, y1] (x1, y1 inclusive; the overlay draws w x h).
        let near_outline = |x: i64, y: i64, b: &[i64; 4]| {
            let [x0, y0, x1, y1] = *b;
            let inside_outer = x >= x0 - MARGIN
                && x <= x1 + 1 + MARGIN
                && y >= y0 - MARGIN
                && y <= y1 + 1 + MARGIN;
            let inside_inner =
                x > x0 + MARGIN && x < x1 + 1 - MARGIN && y > y0 + MARGIN && y < y1 + 1 - MARGIN;
            inside_outer && !inside_inner
        };
        let (mut changed, mut stray) = (0usize, Vec::new());
        let mut per_edge = vec![[0usize; 4]; boxes.len()];
        for y in 0..H as i64 {
            for x in 0..W as i64 {
                let at = (y as usize * W + x as usize) * 3;
                if p[at..at + 3] == d[at..at + 3] {
                    continue;
                }
                changed += 1;
                let mut on_a_box = false;
                for (b, edges) in boxes.iter().zip(per_edge.iter_mut()) {
                    if near_outline(x, y, b) {
                        on_a_box = true;
                        let [x0, y0, x1, y1] = *b;
                        let d = [
                            (x - x0).abs(),
                            (x - x1 - 1).abs(),
                            (y - y0).abs(),
                            (y - y1 - 1).abs(),
                        ];
                        for (e, dist) in edges.iter_mut().zip(d) {
                            if dist <= MARGIN {
                                *e += 1;
                            }
                        }
                    }
                }
                if !on_a_box {
                    stray.push((x, y));
                }
            }
        }
        eprintln!(
            "frame {i}: {changed} pixels changed, on box outlines per edge (left, right, top, \
             bottom) {per_edge:?}, elsewhere {}",
            stray.len()
        );
        assert!(
            stray.is_empty(),
            "frame {i}: pixels changed away from the boxes: {:?}",
            &stray[..stray.len().min(20)]
        );
        for (b, edges) in boxes.iter().zip(&per_edge) {
            // Every edge of every box is drawn along most of its length.
            let (w, h) = ((b[2] - b[0] + 1) as usize, (b[3] - b[1] + 1) as usize);
            let need = [h / 2, h / 2, w / 2, w / 2];
            for (e, n) in edges.iter().zip(need) {
                assert!(
                    *e >= n,
                    "frame {i} box {b:?}: edges {edges:?}, need {need:?}"
                );
            }
        }
    }
}

/// The `edgetam-tracking` messages of element `name` printed by `gst-launch-1.0 -m`.
fn tracking_messages(o: &Output, name: &str) -> Vec<gst::Structure> {
    gst::init().expect("gst init");
    let from = format!("from element \"{name}\" (element): ");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_once(from.as_str()).map(|(_, s)| s))
        .filter(|s| s.starts_with("edgetam-tracking"))
        .map(|s| gst::Structure::from_str(s.trim_end_matches(';')).expect("message structure"))
        .collect()
}

/// A real chain of producers: Debian's stock `facedetect` attaches `face` ROI metas, a first
/// edgetamtrack (`prompt-source=roi-meta`) tracks the faces and attaches `face`
/// object-detection Mtds, a second one (`prompt-source=analytics`) takes those Mtds as its
/// detections, in the real `gst-launch-1.0`: every detection it reports is one of the first
/// element's visible objects, box for box, and the first one starts its object 1.
#[test]
fn a_second_element_takes_upstream_od_mtds_as_prompts() {
    let photo = std::path::Path::new("/usr/share/doc/opencv-doc/examples/data/messi5.jpg");
    assert!(
        photo.exists(),
        "needs gstreamer1.0-opencv, opencv-data and opencv-doc"
    );
    let o = launch(&format!(
        "-m filesrc location={} ! jpegdec ! imagefreeze num-buffers=4 ! videoconvert \
         ! facedetect display=false ! videoconvert \
         ! edgetamtrack name=first model={model} prompt-source=roi-meta prompt-roi-types=face \
           post-messages=true \
         ! edgetamtrack name=second model={model} prompt-source=analytics prompt-roi-types=face \
           post-messages=true ! fakesink",
        photo.display(),
        model = model_dir().display()
    ));
    assert!(o.status.success(), "{}", text(&o));
    let first = tracking_messages(&o, "first");
    let second = tracking_messages(&o, "second");
    assert_eq!((first.len(), second.len()), (4, 4), "{}", text(&o));
    let structures = |m: &gst::Structure, field: &str| -> Vec<gst::Structure> {
        m.get::<gst::Array>(field)
            .expect(field)
            .iter()
            .map(|v| v.get::<gst::Structure>().expect("structure"))
            .collect()
    };
    let rect =
        |s: &gst::Structure| ["x", "y", "width", "height"].map(|k| s.get::<u32>(k).expect(k));
    let mut detections = 0;
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        let faces: Vec<[u32; 4]> = structures(a, "objects")
            .iter()
            .filter(|o| o.get::<bool>("visible").expect("visible"))
            .inspect(|o| assert_eq!(o.get::<String>("label").expect("label"), "face"))
            .map(rect)
            .collect();
        let mut seen: Vec<[u32; 4]> = structures(b, "detections")
            .iter()
            .inspect(|d| assert_eq!(d.get::<String>("label").expect("label"), "face"))
            .map(rect)
            .collect();
        seen.sort_unstable();
        let mut want = faces.clone();
        want.sort_unstable();
        assert_eq!(seen, want, "frame {i}: {b}");
        detections += seen.len();
        let decisions: Vec<(String, u32)> = structures(b, "detections")
            .iter()
            .map(|d| {
                (
                    d.get::<String>("decision").expect("decision"),
                    d.get::<u32>("object").expect("object"),
                )
            })
            .collect();
        eprintln!("frame {i}: first's visible faces {faces:?}, second's decisions {decisions:?}");
        for o in structures(b, "objects") {
            assert_eq!(o.get::<String>("label").expect("label"), "face");
        }
        if i == 0 {
            let d = structures(b, "detections");
            assert_eq!(
                d.first().map(|d| (
                    d.get::<String>("decision").expect("d"),
                    d.get::<u32>("object").expect("o")
                )),
                Some(("new".to_string(), 1)),
                "{b}"
            );
        }
    }
    assert!(detections > 0, "the first element showed no face");
}

/// An application in Python pushes frames into a live appsrc (the fixture sequence, with white
/// frames on which the objects vanish), reads every buffer's relation meta from a pad probe and
/// checks ids, boxes, confidences, seen times, lost flags and masks against the element's bus
/// messages (plugins/tests/analytics_client.py).
#[test]
fn python_application_reads_the_relation_meta() {
    let fixture = frames(9);
    let white = vec![255u8; W * H * 3];
    // 9 sequence frames, 4 white, the sequence again: objects seen, lost, seen again.
    let mut raw = Vec::new();
    for f in fixture
        .iter()
        .chain(std::iter::repeat_n(&white, 4))
        .chain(&fixture)
    {
        raw.extend_from_slice(f);
    }
    let file = tmp("python").join("frames.rgb");
    std::fs::write(&file, raw).expect("frames");
    let script = repo().join("plugins/tests/analytics_client.py");
    let model = model_dir();
    let mut args = vec![
        script.to_str().expect("utf-8 path"),
        "--model",
        model.to_str().expect("utf-8 path"),
        "--frames",
        file.to_str().expect("utf-8 path"),
        "--buffers",
        "44",
        "--fps",
        "10",
        "--prompts",
        PROMPTS,
        "--expect-lost",
    ];
    if cfg!(feature = "v1_26") {
        args.push("--segmentation");
    }
    let o = with_plugin("python3", &args, &[]);
    assert!(o.status.success(), "{}", text(&o));
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
}
