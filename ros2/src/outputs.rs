//! The messages made from a tracked frame: `~/mask`, `~/detections`, `~/overlay`.

use edgetam_pipeline::{compose_id_mask, IdMaskError, OBJECT_COLORS};
use edgetam_tracker::FrameResult;

use crate::msgs::{
    BoundingBox2D, Detection2D, Detection2DArray, Header, Image, ObjectHypothesis,
    ObjectHypothesisWithPose, Point2D, Pose2D,
};

/// `~/mask`: `mono16`, little-endian, pixel = object id (0 background), the overlap rule of
/// [`compose_id_mask`].
pub fn mask_message(header: &Header, result: &FrameResult) -> Result<Image, IdMaskError> {
    let ids = compose_id_mask(result)?;
    let mut data = Vec::with_capacity(ids.len() * 2);
    for id in ids {
        data.extend_from_slice(&id.to_le_bytes());
    }
    Ok(Image {
        header: header.clone(),
        height: result.height as u32,
        width: result.width as u32,
        encoding: "mono16".into(),
        is_bigendian: 0,
        step: result.width as u32 * 2,
        data,
    })
}

/// The score `~/detections` reports: the probability that the object is present, the sigmoid
/// of the tracker's object-score logit (> 0.5 exactly when the tracker calls it visible).
pub fn presence(score_logit: f32) -> f64 {
    1.0 / (1.0 + (-f64::from(score_logit)).exp())
}

/// `~/detections`: one `Detection2D` per visible object with a non-empty mask. The box is the
/// mask's tight box in pixel-edge coordinates (pixels x0..=x1 give centre (x0 + x1 + 1) / 2 and
/// size x1 - x0 + 1); `id` and `results[0].hypothesis.class_id` are the tracking id.
pub fn detections_message(header: &Header, result: &FrameResult) -> Detection2DArray {
    let detections = result
        .objects
        .iter()
        .filter(|o| o.visible)
        .filter_map(|o| {
            let [x0, y0, x1, y1] = o.bbox?;
            let (w, h) = ((x1 + 1 - x0) as f64, (y1 + 1 - y0) as f64);
            Some(Detection2D {
                header: header.clone(),
                results: vec![ObjectHypothesisWithPose {
                    hypothesis: ObjectHypothesis {
                        class_id: o.id.to_string(),
                        score: presence(o.score),
                    },
                    ..ObjectHypothesisWithPose::default()
                }],
                bbox: BoundingBox2D {
                    center: Pose2D {
                        position: Point2D {
                            x: x0 as f64 + w / 2.0,
                            y: y0 as f64 + h / 2.0,
                        },
                        theta: 0.0,
                    },
                    size_x: w,
                    size_y: h,
                },
                id: o.id.to_string(),
            })
        })
        .collect();
    Detection2DArray {
        header: header.clone(),
        detections,
    }
}

/// `~/overlay`: the frame (`rgb`, packed `width * height * 3`) with each object's mask blended
/// 50/50 with its color and its box outlined, colors by position in the results as the CLI's
/// overlays (`edgetam_pipeline::OBJECT_COLORS`).
pub fn overlay_message(header: &Header, result: &FrameResult, mut rgb: Vec<u8>) -> Image {
    let (w, h) = (result.width, result.height);
    for (o, color) in result.objects.iter().zip(OBJECT_COLORS.iter().cycle()) {
        for (px, &m) in rgb.chunks_exact_mut(3).zip(&o.mask.data) {
            if m != 0 {
                for c in 0..3 {
                    px[c] = ((u16::from(px[c]) + u16::from(color[c])) / 2) as u8;
                }
            }
        }
    }
    for (o, color) in result.objects.iter().zip(OBJECT_COLORS.iter().cycle()) {
        let Some([x0, y0, x1, y1]) = o.bbox else {
            continue;
        };
        let mut put = |x: usize, y: usize| {
            if x < w && y < h {
                rgb[3 * (y * w + x)..][..3].copy_from_slice(color);
            }
        };
        for t in 0..2 {
            for x in x0..=x1 {
                put(x, y0 + t);
                put(x, y1.saturating_sub(t));
            }
            for y in y0..=y1 {
                put(x0 + t, y);
                put(x1.saturating_sub(t), y);
            }
        }
    }
    Image {
        header: header.clone(),
        height: h as u32,
        width: w as u32,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: w as u32 * 3,
        data: rgb,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};
    use edgetam_tracker::{Mask, ObjectResult};

    fn object(id: u32, w: usize, h: usize, rect: [usize; 4], score: f32) -> ObjectResult {
        let mut data = vec![0u8; w * h];
        let mut low = vec![-10f32; w * h];
        for y in rect[1]..=rect[3] {
            for x in rect[0]..=rect[2] {
                data[y * w + x] = 1;
                low[y * w + x] = 10.0;
            }
        }
        let low_res_logits = Tensor::from_vec(low, (1, 1, h, w), &Device::Cpu).unwrap();
        let mask = Mask {
            width: w,
            height: h,
            data,
        };
        ObjectResult::from_mask(id, low_res_logits, mask, Some(rect), 0, score)
    }

    fn result(objects: Vec<ObjectResult>, w: usize, h: usize) -> FrameResult {
        FrameResult::from_objects(w, h, objects)
    }

    fn header() -> Header {
        Header {
            stamp: crate::msgs::Time {
                sec: 12,
                nanosec: 345,
            },
            frame_id: "cam".into(),
        }
    }

    #[test]
    fn mask_is_mono16_little_endian_with_the_header() {
        let r = result(vec![object(258, 4, 2, [1, 0, 2, 1], 3.0)], 4, 2);
        let m = mask_message(&header(), &r).unwrap();
        assert_eq!((m.width, m.height, m.step, m.is_bigendian), (4, 2, 8, 0));
        assert_eq!(m.encoding, "mono16");
        assert_eq!(m.header, header());
        // 258 = 0x0102: low byte first.
        assert_eq!(&m.data[..8], &[0, 0, 2, 1, 2, 1, 0, 0]);
        assert_eq!(m.data.len(), 16);
    }

    #[test]
    fn detections_of_visible_objects() {
        let r = result(
            vec![
                object(1, 20, 10, [2, 3, 11, 6], 2.0),
                object(2, 20, 10, [0, 0, 1, 1], -1.0),
            ],
            20,
            10,
        );
        let d = detections_message(&header(), &r);
        assert_eq!(d.header, header());
        assert_eq!(d.detections.len(), 1);
        let det = &d.detections[0];
        assert_eq!(det.id, "1");
        assert_eq!(det.results[0].hypothesis.class_id, "1");
        assert!((det.results[0].hypothesis.score - 1.0 / (1.0 + (-2f64).exp())).abs() < 1e-12);
        assert_eq!((det.bbox.size_x, det.bbox.size_y), (10.0, 4.0));
        assert_eq!(
            (det.bbox.center.position.x, det.bbox.center.position.y),
            (7.0, 5.0)
        );
        assert_eq!(det.bbox.corners(), [2.0, 3.0, 12.0, 7.0]);
        assert_eq!(det.results[0].pose.pose.orientation.w, 1.0);
    }

    #[test]
    fn overlay_tints_and_outlines() {
        let r = result(vec![object(1, 8, 8, [1, 1, 6, 6], 1.0)], 8, 8);
        let rgb = vec![100u8; 8 * 8 * 3];
        let o = overlay_message(&header(), &r, rgb);
        assert_eq!((o.encoding.as_str(), o.step), ("rgb8", 24));
        let px = |x: usize, y: usize| &o.data[3 * (y * 8 + x)..][..3];
        assert_eq!(px(0, 0), &[100, 100, 100]);
        assert_eq!(px(1, 1), &OBJECT_COLORS[0]);
        assert_eq!(px(5, 6), &OBJECT_COLORS[0]);
        let c = OBJECT_COLORS[0];
        let tinted: Vec<u8> = c
            .iter()
            .map(|&v| ((100 + u16::from(v)) / 2) as u8)
            .collect();
        assert_eq!(px(3, 3)[..], tinted[..]);
        assert_eq!(px(4, 4)[..], tinted[..]);
    }
}
