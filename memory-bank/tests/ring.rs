//! The memory ring: what is read for each frame, and that nothing grows over a long stream.

use candle_core::{DType, Device, Tensor};
use edgetam_memory_bank::{BankLayout, FrameKind, ObjectMemory, Selection};

fn layout() -> BankLayout {
    BankLayout {
        num_maskmem: 7,
        max_object_pointers: 16,
        max_cond_frame_num: None,
        conditioning_capacity: 4,
        memory_tokens: 3,
        memory_dim: 2,
        pointer_dim: 4,
    }
}

/// Tensors whose every value is `frame` (memory), `frame + 0.5` (position), `-frame` (pointer),
/// so a gathered tensor tells which frame each slot held.
fn payload(l: &BankLayout, frame: u64) -> (Tensor, Tensor, Tensor) {
    let d = Device::Cpu;
    let f = frame as f32;
    (
        Tensor::full(f, (1, l.memory_tokens, l.memory_dim), &d).unwrap(),
        Tensor::full(f + 0.5, (l.memory_tokens, l.memory_dim), &d).unwrap(),
        Tensor::full(-f, (1, l.pointer_dim), &d).unwrap(),
    )
}

fn store(bank: &mut ObjectMemory, frame: u64, kind: FrameKind) {
    let (m, p, ptr) = payload(bank.layout(), frame);
    bank.store(frame, kind, &m, &p, &ptr).unwrap();
}

/// Frames read (first value of each gathered memory / pointer) with offsets.
/// (memory frame, offset) pairs, (pointer frame, offset) pairs and the raw selection.
type Read = (Vec<(u64, usize)>, Vec<(u64, u64)>, Selection);

fn read(bank: &ObjectMemory, t: u64) -> Read {
    let sel = bank.select(t);
    let mems = match bank.gather_memories(&sel).unwrap() {
        Some((m, p)) => {
            let m = m.flatten_from(1).unwrap().to_vec2::<f32>().unwrap();
            let p = p.flatten_from(1).unwrap().to_vec2::<f32>().unwrap();
            m.iter()
                .zip(&p)
                .zip(&sel.memories)
                .map(|((m, p), &(_, off))| {
                    assert!(m.iter().all(|&v| v == m[0]), "slot mixes frames");
                    assert_eq!(p[0], m[0] + 0.5, "position does not match memory");
                    (m[0] as u64, off)
                })
                .collect()
        }
        None => vec![],
    };
    let ptrs = match bank.gather_pointers(&sel).unwrap() {
        Some(p) => p
            .to_vec2::<f32>()
            .unwrap()
            .iter()
            .zip(&sel.pointers)
            .map(|(v, &(_, off))| ((-v[0]) as u64, off))
            .collect(),
        None => vec![],
    };
    (mems, ptrs, sel)
}

#[test]
fn reads_conditioning_then_six_recent_frames_and_fifteen_pointers() {
    let l = layout();
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    assert!(bank.select(0).is_empty());
    store(&mut bank, 0, FrameKind::Conditioning);
    for f in 1..20 {
        store(&mut bank, f, FrameKind::Tracked);
    }
    let (mems, ptrs, _) = read(&bank, 20);
    let want: Vec<(u64, usize)> =
        vec![(0, 0), (14, 6), (15, 5), (16, 4), (17, 3), (18, 2), (19, 1)];
    assert_eq!(mems, want);
    let mut want_ptrs = vec![(0, 20)];
    want_ptrs.extend((5..20).rev().map(|f| (f, 20 - f)));
    assert_eq!(ptrs, want_ptrs);

    // Early frames: only what exists (frame 3 reads the prompt and frames 1, 2).
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    store(&mut bank, 0, FrameKind::Conditioning);
    store(&mut bank, 1, FrameKind::Tracked);
    store(&mut bank, 2, FrameKind::Tracked);
    let (mems, ptrs, _) = read(&bank, 3);
    assert_eq!(mems, vec![(0, 0), (1, 2), (2, 1)]);
    assert_eq!(ptrs, vec![(0, 3), (2, 1), (1, 2)]);
}

#[test]
fn later_prompts_join_the_conditioning_frames_in_prompt_order() {
    let l = layout();
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    store(&mut bank, 5, FrameKind::Conditioning);
    for f in 6..9 {
        store(&mut bank, f, FrameKind::Tracked);
    }
    store(&mut bank, 9, FrameKind::Conditioning);
    store(&mut bank, 10, FrameKind::Tracked);
    let (mems, ptrs, _) = read(&bank, 11);
    assert_eq!(mems, vec![(5, 0), (9, 0), (6, 5), (7, 4), (8, 3), (10, 1)]);
    assert_eq!(ptrs, vec![(5, 6), (9, 2), (10, 1), (8, 3), (7, 4), (6, 5)]);
    // Re-running frame 10 overwrites its slot, nothing else.
    let (m, p, ptr) = payload(&l, 10);
    bank.store(
        10,
        FrameKind::Tracked,
        &(m + 100.0).unwrap(),
        &(p + 100.0).unwrap(),
        &ptr,
    )
    .unwrap();
    let sel = bank.select(11);
    assert_eq!(sel.memories.len(), 6);
}

#[test]
fn max_cond_frame_num_picks_the_closest_and_lends_the_rest_as_recent_frames() {
    let mut l = layout();
    l.max_cond_frame_num = Some(1);
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    store(&mut bank, 0, FrameKind::Conditioning);
    store(&mut bank, 1, FrameKind::Tracked);
    store(&mut bank, 2, FrameKind::Conditioning);
    store(&mut bank, 3, FrameKind::Tracked);
    let (mems, ptrs, _) = read(&bank, 4);
    // Closest before 4 is frame 2; frame 0 is unselected and stands in at offset 4.
    assert_eq!(mems, vec![(2, 0), (0, 4), (1, 3), (3, 1)]);
    // Pointers come from every conditioning frame, selected or not.
    assert_eq!(ptrs, vec![(0, 4), (2, 2), (3, 1), (1, 3)]);
}

#[test]
fn conditioning_capacity_recycles_the_oldest_prompt() {
    let l = layout();
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    for f in 0..6 {
        store(&mut bank, f * 10, FrameKind::Conditioning);
    }
    assert_eq!(bank.conditioning_frames(), vec![20, 30, 40, 50]);
}

#[test]
fn rejects_wrong_shapes() {
    let l = layout();
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    let d = Device::Cpu;
    let bad = Tensor::zeros((2, 3, 2), DType::F32, &d).unwrap();
    let (_, p, ptr) = payload(&l, 0);
    let err = bank
        .store(0, FrameKind::Tracked, &bad, &p, &ptr)
        .unwrap_err();
    assert!(err.to_string().contains("memory must be [3, 2]"), "{err}");
}

/// 10,000 frames with periodic re-prompts: the slot count and allocated bytes never change and
/// every frame reads exactly what the reference would.
#[test]
fn ten_thousand_frames_stay_flat() {
    let l = layout();
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    let slots = bank.slot_count();
    let bytes = bank.allocated_bytes();
    assert_eq!(slots, (4 + 7) + (4 + 16));
    assert_eq!(bytes, 4 * ((4 + 7) * 3 * 2 * 2 + (4 + 16) * 4));
    store(&mut bank, 0, FrameKind::Conditioning);
    let mut prompts = vec![0u64];
    for t in 1..10_000u64 {
        let (mems, ptrs, _) = read(&bank, t);
        // Conditioning frames (the 4 most recent prompts), then t-6..t-1 minus prompts.
        let cond: Vec<u64> = prompts.iter().rev().take(4).rev().copied().collect();
        let mut want: Vec<(u64, usize)> = cond.iter().map(|&f| (f, 0)).collect();
        for off in (1..7u64).rev() {
            if let Some(f) = t.checked_sub(off) {
                if !prompts.contains(&f) {
                    want.push((f, off as usize));
                }
            }
        }
        assert_eq!(mems, want, "frame {t}");
        assert_eq!(
            ptrs.len(),
            cond.len()
                + (1..16u64)
                    .filter(|&d| d <= t && !prompts.contains(&(t - d)))
                    .count()
        );
        if t % 997 == 0 {
            store(&mut bank, t, FrameKind::Conditioning);
            prompts.push(t);
        } else {
            store(&mut bank, t, FrameKind::Tracked);
        }
        assert_eq!(bank.slot_count(), slots);
        assert_eq!(bank.allocated_bytes(), bytes);
    }
}

/// A prompt on the current frame re-runs it after its own output is stored: it must still read
/// the oldest of its six frames and fifteen pointers.
#[test]
fn re_running_the_current_frame_still_reads_its_whole_window() {
    let l = layout();
    let mut bank = ObjectMemory::new(l, DType::F32, &Device::Cpu).unwrap();
    store(&mut bank, 0, FrameKind::Conditioning);
    for f in 1..=20 {
        store(&mut bank, f, FrameKind::Tracked);
    }
    let (mems, ptrs, _) = read(&bank, 20);
    assert_eq!(
        mems,
        vec![(0, 0), (14, 6), (15, 5), (16, 4), (17, 3), (18, 2), (19, 1)]
    );
    assert_eq!(ptrs.len(), 1 + 15);
    assert_eq!(ptrs.last(), Some(&(5, 15)));
}
