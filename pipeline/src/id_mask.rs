//! One ID mask per frame: every pixel the id of the object it belongs to, 0 for background
//! (the ROS 2 node's `~/mask`, and whatever compares with it).
//!
//! The rule where objects overlap is SAM 2's non-overlapping constraint at the output: a pixel
//! inside several objects' masks goes to the object whose mask logit is highest there; equal
//! logits go to the lower id. The logits compared are exactly the ones each object's own
//! [`ObjectResult::mask`] was made from (its `low_res_logits`, resized once to the frame by the
//! tracker's bilinear resize, `> 0` inside), so a pixel gets an id only where that object's own
//! mask is set, and a pixel inside exactly one mask always gets that object's id.

use edgetam_tracker::internals::resize_logits;
use edgetam_tracker::{FrameResult, ObjectResult};

/// Why a frame's ID mask cannot be composed.
#[derive(Debug, thiserror::Error)]
pub enum IdMaskError {
    /// An object's id does not fit the 16-bit mask (ids 1..=65535 do).
    #[error("object id {id} does not fit a 16-bit ID mask (ids 1..=65535)")]
    IdTooLarge { id: u32 },
    /// Object id 0 is the background's.
    #[error("object id 0 is the background's in an ID mask")]
    ZeroId,
    /// An object's mask is not the frame's size.
    #[error("object {id}'s mask is {got_w}x{got_h}, the frame {width}x{height}")]
    MaskSize {
        id: u32,
        got_w: usize,
        got_h: usize,
        width: usize,
        height: usize,
    },
    /// Resizing an object's logits failed.
    #[error("object {id}'s mask logits: {source}")]
    Logits {
        id: u32,
        #[source]
        source: edgetam_tracker::Error,
    },
}

/// The ID mask of `result`: `width * height` values, row-major, object id or 0 (see the module
/// docs for the overlap rule). Full-resolution logits are computed only where masks overlap
/// (for the objects overlapping something), so frames without overlap cost one pass over the
/// masks.
pub fn compose_id_mask(result: &FrameResult) -> Result<Vec<u16>, IdMaskError> {
    let (width, height) = (result.width, result.height);
    let n = width * height;
    for o in &result.objects {
        check_object(o, width, height)?;
    }
    // Pass 1: masks alone; `overlap` marks pixels claimed twice or more.
    let mut ids = vec![0u16; n];
    let mut overlap = vec![false; n];
    let mut overlapping = vec![false; result.objects.len()];
    let mut any_overlap = false;
    for (k, o) in result.objects.iter().enumerate() {
        let id = o.id as u16; // checked above
        for (p, &m) in o.mask.data.iter().enumerate() {
            if m != 0 {
                if ids[p] == 0 {
                    ids[p] = id;
                } else {
                    overlap[p] = true;
                    any_overlap = true;
                    overlapping[k] = true;
                }
            }
        }
    }
    if !any_overlap {
        return Ok(ids);
    }
    // The first claimant of an overlapped pixel overlaps too.
    for (k, o) in result.objects.iter().enumerate() {
        if !overlapping[k] && o.mask.data.iter().zip(&overlap).any(|(&m, &v)| m != 0 && v) {
            overlapping[k] = true;
        }
    }
    // Pass 2: on overlapped pixels, the highest logit among the objects whose mask is set.
    let mut best: Vec<(f32, u16)> = vec![(f32::NEG_INFINITY, u16::MAX); n];
    for (o, _) in result.objects.iter().zip(&overlapping).filter(|(_, &v)| v) {
        let logits = full_logits(o, width, height)?;
        let id = o.id as u16;
        for p in 0..n {
            if overlap[p] && o.mask.data[p] != 0 {
                let (l, b) = best[p];
                if logits[p] > l || (logits[p] == l && id < b) {
                    best[p] = (logits[p], id);
                }
            }
        }
    }
    for p in 0..n {
        if overlap[p] {
            ids[p] = best[p].1;
        }
    }
    Ok(ids)
}

fn check_object(o: &ObjectResult, width: usize, height: usize) -> Result<(), IdMaskError> {
    if o.id == 0 {
        return Err(IdMaskError::ZeroId);
    }
    if o.id > u32::from(u16::MAX) {
        return Err(IdMaskError::IdTooLarge { id: o.id });
    }
    if o.mask.width != width || o.mask.height != height || o.mask.data.len() != width * height {
        return Err(IdMaskError::MaskSize {
            id: o.id,
            got_w: o.mask.width,
            got_h: o.mask.height,
            width,
            height,
        });
    }
    Ok(())
}

/// The object's logits at the frame's size, as the tracker makes them for its mask.
fn full_logits(o: &ObjectResult, width: usize, height: usize) -> Result<Vec<f32>, IdMaskError> {
    let wrap = |source: edgetam_tracker::Error| IdMaskError::Logits { id: o.id, source };
    let t = resize_logits(&o.low_res_logits, height, width).map_err(wrap)?;
    t.flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| wrap(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};
    use edgetam_tracker::Mask;

    /// An object whose low-res logits are `low` (`h x w`) and whose mask is made the tracker's
    /// way (resize to the frame, `> 0`).
    fn object(id: u32, low: &[f32], h: usize, w: usize, fw: usize, fh: usize) -> ObjectResult {
        let t = Tensor::from_vec(low.to_vec(), (1, 1, h, w), &Device::Cpu).unwrap();
        let full = resize_logits(&t, fh, fw)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let data: Vec<u8> = full.iter().map(|&v| u8::from(v > 0.0)).collect();
        let mask = Mask {
            width: fw,
            height: fh,
            data,
        };
        ObjectResult::from_mask(id, t, mask, None, 0, 1.0)
    }

    fn frame(objects: Vec<ObjectResult>, w: usize, h: usize) -> FrameResult {
        FrameResult::from_objects(w, h, objects)
    }

    #[test]
    fn overlap_goes_to_the_highest_logit_and_ties_to_the_lower_id() {
        // 1x4 frames, low-res = frame size (the resize is the identity).
        let a = object(7, &[5.0, 2.0, 1.0, -1.0], 1, 4, 4, 1);
        let b = object(3, &[-1.0, 3.0, 1.0, 4.0], 1, 4, 4, 1);
        let ids = compose_id_mask(&frame(vec![a, b], 4, 1)).unwrap();
        // pixel 0: only 7; pixel 1: 3 (3.0 > 2.0); pixel 2: tie 1.0 -> lower id 3; pixel 3: only 3.
        assert_eq!(ids, [7, 3, 3, 3]);
    }

    #[test]
    fn order_of_objects_does_not_matter_and_background_is_zero() {
        let a = || object(1, &[1.0, -2.0, 2.0, -1.0], 1, 4, 4, 1);
        let b = || object(2, &[2.0, -3.0, 1.0, -1.0], 1, 4, 4, 1);
        let ab = compose_id_mask(&frame(vec![a(), b()], 4, 1)).unwrap();
        let ba = compose_id_mask(&frame(vec![b(), a()], 4, 1)).unwrap();
        assert_eq!(ab, [2, 0, 1, 0]);
        assert_eq!(ab, ba);
    }

    #[test]
    fn upsampled_logits_decide_and_match_each_mask() {
        // 2x2 low-res logits upsampled to 8x8: the decision uses the resized logits, and an id
        // is only ever given where that object's own mask is set.
        let a = object(1, &[4.0, 1.0, -2.0, -4.0], 2, 2, 8, 8);
        let b = object(2, &[1.0, 4.0, -4.0, -2.0], 2, 2, 8, 8);
        let (ma, mb) = (a.mask.data.clone(), b.mask.data.clone());
        let ids = compose_id_mask(&frame(vec![a, b], 8, 8)).unwrap();
        for p in 0..64 {
            match ids[p] {
                0 => assert!(ma[p] == 0 && mb[p] == 0),
                1 => assert_ne!(ma[p], 0),
                2 => assert_ne!(mb[p], 0),
                v => panic!("unexpected id {v}"),
            }
        }
        // Left columns belong to 1, right columns to 2 (logits mirror each other).
        assert_eq!(ids[0], 1);
        assert_eq!(ids[7], 2);
        assert!(ids.contains(&0));
    }

    #[test]
    fn bad_ids_and_sizes_are_refused() {
        let big = object(70_000, &[1.0], 1, 1, 1, 1);
        assert!(matches!(
            compose_id_mask(&frame(vec![big], 1, 1)),
            Err(IdMaskError::IdTooLarge { id: 70_000 })
        ));
        let zero = object(0, &[1.0], 1, 1, 1, 1);
        assert!(matches!(
            compose_id_mask(&frame(vec![zero], 1, 1)),
            Err(IdMaskError::ZeroId)
        ));
        let small = object(1, &[1.0], 1, 1, 1, 1);
        assert!(matches!(
            compose_id_mask(&frame(vec![small], 2, 1)),
            Err(IdMaskError::MaskSize { .. })
        ));
    }
}
