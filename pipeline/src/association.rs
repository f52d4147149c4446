//! Objects from a detector: the association of a frame's detections with the objects being
//! tracked, shared by the GStreamer element's detector path and the ROS 2 node's `~/prompts`
//! topic so both decide alike.
//!
//! Rules, applied to every tracked frame's detections, taken in order of confidence:
//!
//! 1. A detection whose box overlaps a tracked object's reference box (its last visible box, or
//!    the box it was last prompted with) by IoU >= `match_iou` belongs to that object: no prompt.
//! 2. An object absent (score <= 0) on at least `reseed_after` consecutive tracked frames is
//!    re-prompted with the detection that overlaps the area around its last box most (the box
//!    grown to twice its size about its centre; IoU > 0 with it), a new conditioning frame for
//!    that object: re-acquisition after occlusion, with the object's id kept.
//! 3. Any other detection starts a new object, id = one more than the largest id seen, while
//!    fewer than `max_objects` are tracked.

use std::collections::BTreeMap;

/// A box `[x0, y0, x1, y1]` in frame pixels (exclusive right and bottom edges).
pub type Box2 = [f32; 4];

/// One detection on a buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    pub bbox: Box2,
    /// The detector's class (an ROI meta's `roi_type`, an analytics Mtd's object type).
    pub label: String,
    /// The detector's confidence when its meta carries one.
    pub confidence: Option<f64>,
    /// The caller's own id of the detection, handed back untouched (the GStreamer element: the
    /// analytics object-detection Mtd it was read from, to relate it to the object's tracking
    /// Mtd).
    pub source_id: Option<u32>,
}

/// What became of a detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// It overlaps object `obj` by `iou`: no prompt.
    Matched { obj: u32, iou: f32 },
    /// It starts object `obj`.
    New { obj: u32 },
    /// It re-prompts object `obj`, absent for a while.
    Reseed { obj: u32 },
    /// `max-objects` objects are tracked already.
    Refused,
}

impl Decision {
    /// The name the bus message gives it.
    pub fn name(self) -> &'static str {
        match self {
            Decision::Matched { .. } => "matched",
            Decision::New { .. } => "new",
            Decision::Reseed { .. } => "reseed",
            Decision::Refused => "refused",
        }
    }

    /// The object it concerns (0 for none).
    pub fn object(self) -> u32 {
        match self {
            Decision::Matched { obj, .. } | Decision::New { obj } | Decision::Reseed { obj } => obj,
            Decision::Refused => 0,
        }
    }
}

/// What the caller knows of one tracked object between results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tracked {
    /// Its last visible box, or the box it was last prompted with.
    pub reference: Option<Box2>,
    /// Consecutive tracked buffers on which it was absent.
    pub absent: u32,
    /// The detector's class when a detection started it.
    pub label: Option<String>,
    /// The first frame (the caller's frame index) its latest prompt applies to: results of
    /// earlier frames (still in flight when it was prompted) do not know it yet.
    pub since: u64,
}

impl Tracked {
    /// Records the object's result on a tracked frame.
    pub fn observe(&mut self, visible: bool, bbox: Option<[usize; 4]>) {
        match (visible, bbox) {
            (true, Some([x0, y0, x1, y1])) => {
                self.reference = Some([x0 as f32, y0 as f32, x1 as f32 + 1.0, y1 as f32 + 1.0]);
                self.absent = 0;
            }
            _ => self.absent = self.absent.saturating_add(1),
        }
    }

    /// Records a prompt with `bbox` (its result is not in yet).
    pub fn prompted(&mut self, bbox: Box2) {
        self.reference = Some(bbox);
        self.absent = 0;
    }
}

/// The association settings (the element's properties, the ROS 2 node's parameters).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    pub match_iou: f32,
    /// 0: never re-prompt.
    pub reseed_after: u32,
    pub max_objects: usize,
}

/// Intersection over union of two boxes (0 for empty ones).
pub fn iou(a: &Box2, b: &Box2) -> f32 {
    let area = |r: &Box2| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let inter = [
        a[0].max(b[0]),
        a[1].max(b[1]),
        a[2].min(b[2]),
        a[3].min(b[3]),
    ];
    let i = area(&inter);
    let u = area(a) + area(b) - i;
    if u > 0.0 {
        i / u
    } else {
        0.0
    }
}

/// `b` grown by `factor` about its centre.
fn grown(b: &Box2, factor: f32) -> Box2 {
    let (cx, cy) = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
    let (hw, hh) = ((b[2] - b[0]) * factor / 2.0, (b[3] - b[1]) * factor / 2.0);
    [cx - hw, cy - hh, cx + hw, cy + hh]
}

/// Decides every detection (see the module docs); `objects` gains the new objects and records
/// the prompts. Returns the decisions in the order of `detections`.
pub fn associate(
    detections: &[Detection],
    objects: &mut BTreeMap<u32, Tracked>,
    rules: Rules,
    next_id: &mut u32,
) -> Vec<Decision> {
    let mut order: Vec<usize> = (0..detections.len()).collect();
    order.sort_by(|&a, &b| {
        let c = |i: usize| detections[i].confidence.unwrap_or(1.0);
        c(b).total_cmp(&c(a))
    });
    let mut decisions = vec![Decision::Refused; detections.len()];
    let mut taken = vec![false; detections.len()];
    // 1. Matches, best overlap first per detection.
    for &d in &order {
        let det = &detections[d].bbox;
        let best = objects
            .iter()
            .filter(|(_, t)| rules.reseed_after == 0 || t.absent < rules.reseed_after)
            .filter_map(|(&id, t)| Some((id, iou(det, t.reference.as_ref()?))))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((obj, v)) = best.filter(|&(_, v)| v >= rules.match_iou && v > 0.0) {
            decisions[d] = Decision::Matched { obj, iou: v };
            taken[d] = true;
        }
    }
    // 2. Re-seeds of objects absent long enough, each from its best free detection.
    if rules.reseed_after > 0 {
        let lost: Vec<u32> = objects
            .iter()
            .filter(|(_, t)| t.absent >= rules.reseed_after)
            .map(|(&id, _)| id)
            .collect();
        for obj in lost {
            let Some(area) = objects
                .get(&obj)
                .and_then(|t| t.reference)
                .map(|r| grown(&r, 2.0))
            else {
                continue;
            };
            let best = order
                .iter()
                .copied()
                .filter(|&d| !taken[d])
                .map(|d| (d, iou(&detections[d].bbox, &area)))
                .filter(|&(_, v)| v > 0.0)
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((d, _)) = best {
                decisions[d] = Decision::Reseed { obj };
                taken[d] = true;
                if let Some(t) = objects.get_mut(&obj) {
                    t.prompted(detections[d].bbox);
                }
            }
        }
    }
    // 3. New objects.
    for &d in &order {
        if taken[d] {
            continue;
        }
        if objects.len() >= rules.max_objects {
            decisions[d] = Decision::Refused;
            continue;
        }
        let obj = *next_id;
        *next_id = next_id.saturating_add(1);
        let mut t = Tracked {
            label: Some(detections[d].label.clone()),
            ..Tracked::default()
        };
        t.prompted(detections[d].bbox);
        objects.insert(obj, t);
        decisions[d] = Decision::New { obj };
    }
    decisions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(b: Box2, conf: f64) -> Detection {
        Detection {
            bbox: b,
            label: "face".into(),
            confidence: Some(conf),
            source_id: None,
        }
    }

    const RULES: Rules = Rules {
        match_iou: 0.3,
        reseed_after: 3,
        max_objects: 3,
    };

    #[test]
    fn iou_of_boxes() {
        assert_eq!(iou(&[0., 0., 10., 10.], &[0., 0., 10., 10.]), 1.0);
        assert_eq!(iou(&[0., 0., 10., 10.], &[10., 0., 20., 10.]), 0.0);
        assert!((iou(&[0., 0., 10., 10.], &[5., 0., 15., 10.]) - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(iou(&[0., 0., 0., 10.], &[0., 0., 0., 10.]), 0.0);
    }

    #[test]
    fn new_then_matched_with_stable_ids() {
        let mut objects = BTreeMap::new();
        let mut next = 1;
        let d = [
            det([10., 10., 50., 50.], 0.9),
            det([100., 10., 140., 60.], 0.8),
        ];
        let first = associate(&d, &mut objects, RULES, &mut next);
        assert_eq!(first, [Decision::New { obj: 1 }, Decision::New { obj: 2 }]);
        // The same faces a little further on: matched, no new object.
        let moved = [
            det([104., 12., 144., 62.], 0.8),
            det([12., 11., 52., 51.], 0.9),
        ];
        let second = associate(&moved, &mut objects, RULES, &mut next);
        assert!(
            matches!(second[0], Decision::Matched { obj: 2, .. }),
            "{second:?}"
        );
        assert!(
            matches!(second[1], Decision::Matched { obj: 1, .. }),
            "{second:?}"
        );
        assert_eq!(objects.len(), 2);
        assert_eq!(next, 3);
    }

    #[test]
    fn reseed_after_absence_keeps_the_id() {
        let mut objects = BTreeMap::new();
        let mut next = 1;
        associate(
            &[det([10., 10., 50., 50.], 0.9)],
            &mut objects,
            RULES,
            &mut next,
        );
        // Absent on 2 buffers: a detection near it is matched (coasting), not re-prompted.
        for _ in 0..2 {
            objects.get_mut(&1).expect("obj 1").observe(false, None);
        }
        let near = [det([15., 12., 55., 52.], 0.9)];
        let d = associate(&near, &mut objects, RULES, &mut next);
        assert!(matches!(d[0], Decision::Matched { obj: 1, .. }), "{d:?}");
        // Absent on a third: the best detection around its last box re-prompts it.
        objects.get_mut(&1).expect("obj 1").observe(false, None);
        let far = [
            det([300., 300., 340., 340.], 0.95),
            det([40., 30., 80., 70.], 0.5),
        ];
        let d = associate(&far, &mut objects, RULES, &mut next);
        assert_eq!(d[1], Decision::Reseed { obj: 1 });
        assert_eq!(d[0], Decision::New { obj: 2 });
        assert_eq!(objects[&1].absent, 0);
        assert_eq!(objects[&1].reference, Some([40., 30., 80., 70.]));
    }

    #[test]
    fn max_objects_refuses() {
        let mut objects = BTreeMap::new();
        let mut next = 1;
        let d: Vec<Detection> = (0..5)
            .map(|i| {
                det(
                    [i as f32 * 100., 0., i as f32 * 100. + 50., 50.],
                    0.5 + i as f64 / 10.,
                )
            })
            .collect();
        let out = associate(&d, &mut objects, RULES, &mut next);
        // Highest confidence first: detections 4, 3, 2 become objects 1, 2, 3.
        assert_eq!(out[4], Decision::New { obj: 1 });
        assert_eq!(out[2], Decision::New { obj: 3 });
        assert_eq!(&out[..2], [Decision::Refused, Decision::Refused]);
    }
}
