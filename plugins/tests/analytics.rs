//! The element's analytics metas (feature `v1_24`, GStreamer >= 1.24; with `v1_26` the
//! segmentation Mtds too) read back in a `gst_check::Harness`: per object one tracking Mtd,
//! per visible object an object-detection Mtd (and a segmentation Mtd) related to it, in the
//! buffer's one relation meta; first / last seen and lost over a stream in which the objects
//! vanish and come back; upstream object-detection Mtds as prompts (`prompt-source=analytics`).
//!
//! Runs where the plugin links GStreamer >= 1.24: scripts/test-debian13.sh (a Debian 13 root).
#![cfg(feature = "v1_24")]

mod common;

use common::{
    buffer, decisions, detector_props, frames, init, library, model_dir, objects, H, PROMPTS, W,
};
use gst::prelude::*;
use gst_analytics::prelude::*;
use gst_analytics::{
    AnalyticsMetaRefExt, AnalyticsODMtd, AnalyticsRelationMeta, AnalyticsTrackingMtd, RelTypes,
};
use gst_check::Harness;
use gstedgetam::results;

fn harness(props: &[(&str, &str)]) -> (Harness, gst::Bus) {
    init();
    let el = gst::ElementFactory::make("edgetamtrack")
        .property("model", model_dir().display().to_string())
        .build()
        .expect("element");
    for (k, v) in props {
        el.set_property_from_str(k, v);
    }
    let bus = gst::Bus::new();
    el.set_bus(Some(&bus));
    let mut h = Harness::with_element(&el, Some("sink"), Some("src"));
    h.set_src_caps_str(&format!(
        "video/x-raw,format=RGB,width={W},height={H},framerate=10/1"
    ));
    (h, bus)
}

/// The `edgetam-tracking` messages waiting on the bus.
fn tracking_messages(bus: &gst::Bus) -> Vec<gst::Structure> {
    let mut out = Vec::new();
    while let Some(m) = bus.pop_filtered(&[gst::MessageType::Element]) {
        if let Some(s) = m.structure().filter(|s| s.name() == results::MESSAGE_NAME) {
            out.push(s.to_owned());
        }
    }
    out
}

/// An object-detection Mtd: label, x, y, w, h, confidence.
#[derive(Debug, Clone, PartialEq)]
struct Od {
    id: u32,
    label: String,
    rect: (i32, i32, i32, i32),
    confidence: f32,
}

/// A segmentation Mtd: its location, region ids, mask values (row-major, no padding).
#[cfg(feature = "v1_26")]
#[derive(Debug, Clone, PartialEq)]
struct Seg {
    location: (i32, i32, u32, u32),
    region_ids: Vec<u32>,
    size: (u32, u32),
    values: Vec<u8>,
}

/// What the relation meta says of one tracked object.
#[derive(Debug, Clone, PartialEq)]
struct Track {
    id: u64,
    first_seen: gst::ClockTime,
    last_seen: gst::ClockTime,
    lost: bool,
    /// The object-detection Mtd related to it (`od RELATE_TO tracking`).
    od: Option<Od>,
    /// Upstream detections related to it (`detection RELATE_TO tracking`), not the element's.
    detections: Vec<Od>,
    #[cfg(feature = "v1_26")]
    seg: Option<Seg>,
}

fn od(m: &gst_analytics::AnalyticsMtdRef<'_, AnalyticsODMtd>) -> Od {
    let loc = m.location().expect("location");
    Od {
        id: m.id(),
        label: m
            .obj_type()
            .map(|q| q.as_str().to_string())
            .unwrap_or_default(),
        rect: (loc.x, loc.y, loc.w, loc.h),
        confidence: loc.loc_conf_lvl,
    }
}

/// Every tracking Mtd of the buffer's only relation meta, with what is related to it, and every
/// object-detection Mtd; `upstream`: the ids of the OD Mtds that came with the input buffer.
fn read(buf: &gst::BufferRef, upstream: &[u32]) -> (Vec<Track>, Vec<Od>) {
    let metas: Vec<_> = buf.iter_meta::<AnalyticsRelationMeta>().collect();
    assert_eq!(metas.len(), 1, "one relation meta per buffer");
    let meta = &metas[0];
    let ods: Vec<Od> = meta.iter::<AnalyticsODMtd>().map(|m| od(&m)).collect();
    let tracks = meta
        .iter::<AnalyticsTrackingMtd>()
        .map(|t| {
            let (id, first_seen, last_seen, lost) = t.info();
            let related: Vec<&Od> = ods
                .iter()
                .filter(|o| meta.relation(o.id, t.id()).contains(RelTypes::RELATE_TO))
                .collect();
            let own: Vec<&Od> = related
                .iter()
                .copied()
                .filter(|o| !upstream.contains(&o.id))
                .collect();
            assert!(own.len() <= 1, "{own:?}");
            let od = own.first().map(|o| (*o).clone());
            #[cfg(feature = "v1_26")]
            let seg = od.as_ref().and_then(|o| segmentation(meta, o.id));
            Track {
                id,
                first_seen,
                last_seen,
                lost,
                detections: related
                    .iter()
                    .filter(|o| upstream.contains(&o.id))
                    .map(|o| (*o).clone())
                    .collect(),
                od,
                #[cfg(feature = "v1_26")]
                seg,
            }
        })
        .collect();
    (tracks, ods)
}

#[cfg(feature = "v1_26")]
fn segmentation(meta: &gst::MetaRef<'_, AnalyticsRelationMeta>, od: u32) -> Option<Seg> {
    use gstedgetam::segmentation::{
        gray8_mask_values, AnalyticsSegmentationMtd, SegmentationMtdExt,
    };
    let segs: Vec<_> = meta
        .iter_direct_related::<AnalyticsSegmentationMtd>(od, RelTypes::RELATE_TO)
        .collect();
    assert!(segs.len() <= 1, "one segmentation Mtd per object");
    let s = segs.first()?;
    let (mask, loc) = s.mask().expect("mask buffer");
    let (w, h, values) = gray8_mask_values(&mask).expect("GRAY8 mask with a video meta");
    Some(Seg {
        location: (loc.x, loc.y, loc.w, loc.h),
        region_ids: s.region_ids(),
        size: (w, h),
        values,
    })
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The element's `edgetam` ROI meta mask of object `id` (the whole frame, 0/1).
fn roi_mask(buf: &gst::BufferRef, id: u32) -> Vec<u8> {
    let m = buf
        .iter_meta::<gst_video::VideoRegionOfInterestMeta>()
        .find(|m| m.roi_type() == results::ROI_TYPE && m.id() == id as i32)
        .expect("ROI meta");
    let mask = m
        .param(results::PARAM_NAME)
        .expect("param")
        .get::<gst::Buffer>("mask")
        .expect("mask");
    let data = mask.map_readable().expect("map").to_vec();
    data
}

#[test]
fn every_object_has_related_od_and_tracking_mtds_equal_to_the_library_api() {
    let frames = frames(4);
    let expected = library(&frames, PROMPTS);
    let (mut h, bus) = harness(&[("prompts", PROMPTS), ("post-messages", "true")]);
    let mut checked = 0;
    for (i, (f, want)) in frames.iter().zip(&expected).enumerate() {
        let out = h.push_and_pull(buffer(f, i as u64)).expect("buffer out");
        let (tracks, ods) = read(&out, &[]);
        // One tracking Mtd per object the tracker has, one OD Mtd per visible one.
        assert_eq!(
            tracks.iter().map(|t| t.id).collect::<Vec<_>>(),
            want.objects
                .iter()
                .map(|o| u64::from(o.id))
                .collect::<Vec<_>>(),
            "frame {i}"
        );
        let visible = want.objects.iter().filter(|o| o.visible).count();
        assert!(visible > 0, "frame {i}: the fixture shows objects");
        assert_eq!(ods.len(), visible, "frame {i}");
        for (t, o) in tracks.iter().zip(&want.objects) {
            assert_eq!(
                t.first_seen,
                gst::ClockTime::ZERO,
                "frame {i}: prompted on frame 0"
            );
            assert_eq!(t.last_seen, gst::ClockTime::from_mseconds(100 * i as u64));
            assert!(!t.lost);
            let od = t.od.as_ref().expect("OD Mtd related to the tracking Mtd");
            let [x0, y0, x1, y1] = o.bbox.expect("box");
            assert_eq!(
                od.rect,
                (
                    x0 as i32,
                    y0 as i32,
                    (x1 - x0 + 1) as i32,
                    (y1 - y0 + 1) as i32
                ),
                "frame {i} object {}",
                o.id
            );
            assert_eq!(od.label, "edgetam");
            assert_eq!(od.confidence, sigmoid(o.score));
            let full = roi_mask(&out, o.id);
            assert_eq!(full, o.mask.data, "frame {i}");
            #[cfg(feature = "v1_26")]
            {
                let seg = t
                    .seg
                    .as_ref()
                    .expect("segmentation Mtd related to the OD Mtd");
                let (w, h) = ((x1 - x0 + 1) as u32, (y1 - y0 + 1) as u32);
                assert_eq!(seg.location, (x0 as i32, y0 as i32, w, h));
                assert_eq!(seg.size, (w, h), "the mask covers its location 1:1");
                assert_eq!(seg.region_ids, [0, 1]);
                // The mask is the element's (ROI meta) mask and the library's, cut to the box,
                // and nothing of the object lies outside the box.
                let cut: Vec<u8> = (y0..=y1)
                    .flat_map(|y| full[y * W + x0..=y * W + x1].to_vec())
                    .collect();
                assert_eq!(seg.values, cut, "frame {i} object {}", o.id);
                let inside: usize = seg.values.iter().map(|&v| usize::from(v)).sum();
                assert_eq!(inside, o.area, "frame {i} object {}", o.id);
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 8, "2 objects on 4 frames");
    assert_eq!(tracking_messages(&bus).len(), 4);
}

/// A tracking Mtd: id, first seen, last seen, lost, whether an OD Mtd relates to it.
type TrackSummary = (u64, gst::ClockTime, gst::ClockTime, bool, bool);

#[test]
fn tracking_mtds_keep_first_seen_advance_last_seen_and_mark_lost_objects() {
    // The fixture's objects vanish on white frames (the random-weights model's scores drop to
    // about -2 there) and come back on the sequence's frame 5 (object 2, prompted with points
    // on buffer 1, shows only there): the element must report them lost with their last-seen
    // kept, then seen again.
    let fx = frames(6);
    let white = vec![255u8; W * H * 3];
    let seq = [&fx[0], &fx[1], &white, &white, &fx[5]];
    // Object 2 is prompted on buffer 1: its first seen is buffer 1's running time.
    let prompts = "obj=1;frame=0;box=35,57,93,108|obj=2;frame=1;point=65,50,1;point=125,119,0";
    let (mut h, bus) = harness(&[("prompts", prompts), ("post-messages", "true")]);
    let mut got = Vec::new();
    for (i, f) in seq.iter().enumerate() {
        let out = h.push_and_pull(buffer(f, i as u64)).expect("buffer out");
        got.push(read(&out, &[]).0);
    }
    let msgs = tracking_messages(&bus);
    let visible: Vec<Vec<(u32, bool)>> = msgs
        .iter()
        .map(|m| {
            objects(m)
                .iter()
                .map(|o| {
                    (
                        o.get::<u32>("id").expect("id"),
                        o.get::<bool>("visible").expect("v"),
                    )
                })
                .collect()
        })
        .collect();
    assert_eq!(
        visible,
        [
            vec![(1, true)],
            vec![(1, true), (2, false)],
            vec![(1, false), (2, false)],
            vec![(1, false), (2, false)],
            vec![(1, true), (2, true)],
        ],
        "the fixture's visibility"
    );
    let t = |ms: u64| gst::ClockTime::from_mseconds(ms);
    // On both white buffers: both objects lost, last seen on buffer 1.
    let lost: Vec<TrackSummary> = vec![
        (1, t(0), t(100), true, false),
        (2, t(100), t(100), true, false),
    ];
    let summary: Vec<Vec<TrackSummary>> = got
        .iter()
        .map(|tracks| {
            tracks
                .iter()
                .map(|x| (x.id, x.first_seen, x.last_seen, x.lost, x.od.is_some()))
                .collect()
        })
        .collect();
    assert_eq!(
        summary,
        [
            vec![(1, t(0), t(0), false, true)],
            // Object 2 is not visible on its prompt's buffer: lost from the start, last seen
            // = first seen until it shows.
            vec![
                (1, t(0), t(100), false, true),
                (2, t(100), t(100), true, false)
            ],
            lost.clone(),
            lost,
            vec![
                (1, t(0), t(400), false, true),
                (2, t(100), t(400), false, true)
            ],
        ]
    );
    // The bus messages carry the same times.
    for (m, tracks) in msgs.iter().zip(&got) {
        for (o, tr) in objects(m).iter().zip(tracks) {
            assert_eq!(
                o.get::<u64>("first-seen").expect("first"),
                tr.first_seen.nseconds()
            );
            assert_eq!(
                o.get::<u64>("last-seen").expect("last"),
                tr.last_seen.nseconds()
            );
        }
    }
    // A removed object is forgotten: prompted again, it is first seen anew.
    let el = h.element().expect("element");
    assert!(el.emit_by_name::<bool>("remove-object", &[&2u32]));
    let out = h.push_and_pull(buffer(&fx[5], 5)).expect("out");
    assert!(el.emit_by_name::<bool>("add-prompt", &[&"obj=2;point=65,50,1;point=125,119,0"]));
    let out2 = h.push_and_pull(buffer(&fx[5], 6)).expect("out");
    let ids: Vec<u64> = read(&out, &[]).0.iter().map(|x| x.id).collect();
    assert_eq!(ids, [1]);
    let again = read(&out2, &[]).0;
    assert_eq!(again[1].id, 2);
    assert_eq!(again[1].first_seen, t(600));
    assert_eq!(again[0].first_seen, t(0));
}

/// A buffer with an upstream relation meta holding `dets` (label, x, y, w, h, confidence), and
/// their Mtd ids.
fn with_detections(
    data: &[u8],
    i: u64,
    dets: &[(&str, i32, i32, i32, i32, f32)],
) -> (gst::Buffer, Vec<u32>) {
    let mut b = buffer(data, i);
    let mut ids = Vec::new();
    {
        let mut meta = AnalyticsRelationMeta::add(b.get_mut().expect("writable"));
        for &(label, x, y, w, h, c) in dets {
            let od = meta
                .add_od_mtd(gst::glib::Quark::from_str(label), x, y, w, h, c)
                .expect("od");
            ids.push(od.id());
        }
    }
    (b, ids)
}

#[test]
fn upstream_od_mtds_prompt_objects_and_relate_to_their_tracks() {
    let frames = frames(3);
    let (mut h, bus) = harness(&detector_props("analytics"));
    // Buffer 0: a face (new object 1); a car (not a class asked for); a weak face (< 0.5).
    let (b0, up0) = with_detections(
        &frames[0],
        0,
        &[
            ("face", 35, 57, 58, 51, 0.9),
            ("car", 150, 20, 40, 40, 0.9),
            ("face", 180, 100, 30, 30, 0.2),
        ],
    );
    let o0 = h.push_and_pull(b0).expect("out");
    let (tracks, ods) = read(&o0, &up0);
    // The element added to upstream's relation meta: the 3 detections and its own OD Mtd.
    assert_eq!(ods.len(), 4, "{ods:?}");
    assert_eq!(tracks.len(), 1);
    let t0 = &tracks[0];
    assert_eq!(t0.id, 1);
    assert_eq!(t0.detections.len(), 1, "{t0:?}");
    assert_eq!(t0.detections[0].label, "face");
    assert_eq!(t0.detections[0].rect, (35, 57, 58, 51));
    // The object carries its detector's class.
    let own = ods
        .iter()
        .find(|o| o.id == t0.od.as_ref().expect("own OD").id);
    assert_eq!(own.expect("own OD").label, "face");
    // Buffer 1: the face again near the object's box (matched, related, no new object) and a
    // person (new object 2).
    let (x, y, w, hh) = t0.od.as_ref().expect("od").rect;
    let (b1, up1) = with_detections(
        &frames[1],
        1,
        &[
            ("face", x + 2, y + 1, w, hh, 0.8),
            ("person", 150, 5, 60, 50, 0.7),
        ],
    );
    let o1 = h.push_and_pull(b1).expect("out");
    let (tracks, _) = read(&o1, &up1);
    let ids: Vec<u64> = tracks.iter().map(|t| t.id).collect();
    assert_eq!(ids, [1, 2]);
    assert_eq!(
        tracks[0].detections.len(),
        1,
        "matched face related to object 1"
    );
    assert_eq!(tracks[0].detections[0].rect, (x + 2, y + 1, w, hh));
    // Object 2 starts on this buffer (its prompt applies to it): the person relates to it.
    assert_eq!(tracks[1].detections.len(), 1);
    assert_eq!(tracks[1].detections[0].label, "person");
    let msgs = tracking_messages(&bus);
    assert_eq!(decisions(&msgs[0]), [("new".to_string(), 1)]);
    assert_eq!(
        decisions(&msgs[1]),
        [("matched".to_string(), 1), ("new".to_string(), 2)]
    );
    // Buffer 2 without detections: the element makes its own relation meta.
    let o2 = h.push_and_pull(buffer(&frames[2], 2)).expect("out");
    let (tracks, _) = read(&o2, &[]);
    assert_eq!(tracks.len(), 2);
    assert!(tracks.iter().all(|t| t.detections.is_empty()));
}
