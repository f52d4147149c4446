#!/usr/bin/env python3
"""Write the streaming-tracking reference fixtures for edgetam-rs.

    python tools/reference/generate_sequence_fixtures.py   # writes fixtures/sequence_256{,_defaults}/

Runs transformers' `EdgeTamVideoModel` streaming session (`init_video_session` without a video,
`add_inputs_to_inference_session`, `model(inference_session=..., frame=...)`) at image_size 256 on
a synthetic non-square video (12 frames, 240x160) with the committed weights of
fixtures/model/model.safetensors:

  frame 0   obj 1 box, obj 2 points (positive + negative)
  frame 5   obj 3 joins with a mask prompt
  frame 8   obj 1 gets a new point on a not-yet-tracked frame (prompted again, no memory read)
  frame 10  after tracking it, obj 2 gets points ON frame 10 and the frame is re-run
            (`model(inference_session, frame_idx=10)`: memory path with points)

Twice: `sequence_256` with the released switches (no pointer temporal encoding, no occlusion
embedding) and `sequence_256_defaults` with transformers' defaults (both on; their two extra
tensors are random and stored in `extra_weights.safetensors`).

`events.json` lists the session in the Rust `Tracker`'s terms (prompts for the next frame are
queued; `refresh` re-runs the current frame). Every reference output R holds, per object O
(`out.r{R:06}.o{O}.*`): `lowres` [h,w] logits, `score` [1], `mask` u8 [H,W] (post-processed,
> 0), `pointer` [256], `is_cond`, `multimask` u8 [1], `chosen` i64 [1], `iou` [k], and `mem_mask`
u8 [S,S] (the exact binarised memory-encoder input, where the reference binarised). Stage
tensors (`stage.*`) are captured for obj 1 on the last frame: memory-attention inputs/output,
decoder outputs, pointer token, memory encoder and perceiver inputs/outputs.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import EdgeTamVideoModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fp16_round, make_config, make_processor, repo_root  # noqa: E402

torch.set_grad_enabled(False)

S = 256
W, H, N = 240, 160, 12
STAGE_FRAME, STAGE_OBJ = 11, 1


def video(seed: int = 3) -> torch.Tensor:
    """[N, H, W, 3] uint8: textured background, three moving blobs; frames 6 and 7 are noise (a
    full occlusion): with these random weights every tracked object is judged absent there and
    found again on frame 8."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(H, dtype=torch.float32), torch.arange(W, dtype=torch.float32),
                            indexing="ij")
    base = torch.stack([60 + 40 * torch.sin(xx / 9), 80 + 30 * torch.cos(yy / 7), 110 + 20 * torch.sin((xx + yy) / 13)], -1)
    frames = []
    for t in range(N):
        f = base + 8 * torch.randn(H, W, 3, generator=g)
        for k, (cx, cy, col) in enumerate([(60 + 4 * t, 70, (220, 60, 50)), (170 - 3 * t, 50 + 2 * t, (40, 200, 70)),
                                            (120, 120 - 2 * t, (230, 220, 40))]):
            inside = ((xx - cx) / 22) ** 2 + ((yy - cy) / 16) ** 2 < 1
            f[inside] = torch.tensor(col, dtype=torch.float32)
        f = f.clamp(0, 255).round().to(torch.uint8)
        if t in (6, 7):
            f = torch.randint(0, 256, f.shape, generator=torch.Generator().manual_seed(t)).to(torch.uint8)
        frames.append(f)
    return torch.stack(frames)


def build(defaults: bool):
    cfg = make_config(S)
    extra = {}
    if defaults:
        cfg.enable_temporal_pos_encoding_for_object_pointers = True
        cfg.enable_occlusion_spatial_embedding = True
        g = torch.Generator().manual_seed(77)
        extra = {
            "temporal_positional_encoding_projection_layer.weight": torch.randn(64, 256, generator=g) / 16.0,
            "temporal_positional_encoding_projection_layer.bias": 0.1 * torch.randn(64, generator=g),
            "occlusion_spatial_embedding_parameter": 0.5 * torch.randn(1, 64, generator=g),
        }
        extra = {k: fp16_round(v) for k, v in extra.items()}
    model = EdgeTamVideoModel(cfg).eval()
    sd = {k: (v.float() if v.is_floating_point() else v)
          for k, v in load_file(repo_root() / "fixtures/model/model.safetensors").items()}
    model.load_state_dict({**sd, **extra}, strict=True)
    return model, extra


class Recorder:
    """Wraps reference methods to record, per object, decoder choices, the binarised memory
    input and (for one call) the stage tensors."""

    def __init__(self, model):
        self.m = model
        self.obj = None
        self.frame = None
        self.mask_prompt = False
        self.per_obj = {}
        self.stage = {}
        self.stage_on = False
        m = model
        orig_run, orig_sff, orig_enc = m._run_single_frame_inference, m._single_frame_forward, m._encode_new_memory
        orig_prep = m._prepare_memory_conditioned_features
        orig_ma, orig_dec, orig_ptr = m.memory_attention.forward, m.mask_decoder.forward, m.object_pointer_proj.forward
        orig_me, orig_sp = m.memory_encoder.forward, m.spatial_perceiver.forward

        def run(*a, **k):
            self.obj, self.frame = k["obj_idx"], k["frame_idx"]
            self.mask_prompt = k.get("mask_inputs") is not None
            self.per_obj[self.obj] = {}
            self.stage_on = (not k["is_init_cond_frame"] and self.frame == STAGE_FRAME
                             and self.m_id(self.obj) == STAGE_OBJ and not self.stage)
            out = orig_run(*a, **k)
            if self.mask_prompt:
                # transformers bug: the mask-prompt path returns a [1, 1] score where the decoder
                # path returns [1, 1, 1], and `forward` then fails to concatenate several objects.
                # Same value, the decoder path's shape.
                out["object_score_logits"] = out["object_score_logits"].reshape(1, 1, 1)
                self.per_obj[self.obj].update(multimask=False, chosen=0, iou=torch.ones(1))
            self.stage_on = False
            return out

        def sff(*a, **k):
            out = orig_sff(*a, **k)
            mm = k.get("multimask_output", True)
            iou = out.iou_scores.reshape(-1)
            self.per_obj[self.obj].update(multimask=bool(mm), chosen=int(iou.argmax()) if mm else 0, iou=iou.clone())
            return out

        def enc(*a, **k):
            if k["is_mask_from_pts"]:
                self.per_obj[self.obj]["mem_mask"] = (k["pred_masks_high_res"] > 0).to(torch.uint8).reshape(S, S)
            return orig_enc(*a, **k)

        def prep(*a, **k):
            out = orig_prep(*a, **k)
            if self.stage_on:
                self.stage["conditioned"] = out.clone()
            return out

        def ma(*a, **k):
            out = orig_ma(*a, **k)
            if self.stage_on:
                self.stage["current"] = k["current_vision_features"].permute(1, 0, 2).clone()
                self.stage["current_pos"] = k["current_vision_position_embeddings"].permute(1, 0, 2).clone()
                self.stage["memory"] = k["memory"].permute(1, 0, 2).clone()
                self.stage["memory_pos"] = k["memory_posision_embeddings"].permute(1, 0, 2).clone()
                self.stage["num_object_pointer_tokens"] = torch.tensor([k["num_object_pointer_tokens"]])
                self.stage["num_spatial_memory_tokens"] = torch.tensor([k["num_spatial_memory_tokens"]])
            return out

        def dec(*a, **k):
            out = orig_dec(*a, **k)
            if self.stage_on and "masks" not in self.stage:
                self.stage["masks"] = out[0].clone()
                self.stage["iou"] = out[1].clone()
                self.stage["object_score"] = out[3].reshape(1, 1).clone()
            return out

        def ptr(x):
            out = orig_ptr(x)
            if self.stage_on and "pointer" not in self.stage:
                self.stage["sam_token"] = x.reshape(1, -1).clone()
                self.stage["pointer"] = out.reshape(1, -1).clone()
            return out

        def me(pix, mask):
            out = orig_me(pix, mask)
            if self.stage_on:
                self.stage["mask_for_mem"] = mask.clone()
                self.stage["maskmem_features"] = out[0].clone()
            return out

        def sp(feats, pos):
            out = orig_sp(feats, pos)
            if self.stage_on:
                self.stage["maskmem"] = out[0].clone()
                self.stage["maskmem_pos"] = out[1].clone()
            return out

        m._run_single_frame_inference, m._single_frame_forward, m._encode_new_memory = run, sff, enc
        m._prepare_memory_conditioned_features = prep
        m.memory_attention.forward, m.mask_decoder.forward, m.object_pointer_proj.forward = ma, dec, ptr
        m.memory_encoder.forward, m.spatial_perceiver.forward = me, sp
        self.session = None

    def m_id(self, idx):
        return self.session.obj_idx_to_id(idx)


def generate(defaults: bool) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model, extra = build(defaults)
    proc = make_processor(S)
    frames = video()
    rec = Recorder(model)
    session = proc.init_video_session(inference_device="cpu", dtype=torch.float32)
    rec.session = session
    tensors: dict[str, torch.Tensor] = {"frames": frames.contiguous()}
    events: list[dict] = []
    stats: list[dict] = []
    n_out = 0
    mask3 = torch.zeros(H, W, dtype=torch.uint8)
    yy, xx = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    mask3[((xx - 120) / 22.0) ** 2 + ((yy - 110) / 16.0) ** 2 < 1] = 1
    tensors["prompt.f000005.o3.mask"] = mask3

    def pix(t):
        return proc(images=frames[t].numpy(), return_tensors="pt")

    def record(out, frame, kind):
        nonlocal n_out
        r = n_out
        n_out += 1
        events.append({"type": kind, "frame": frame, "out": r})
        ids = list(out.object_ids)
        tensors[f"out.r{r:06}.object_ids"] = torch.tensor(ids, dtype=torch.int64)
        masks = proc.post_process_masks([out.pred_masks], original_sizes=[[H, W]], binarize=False)[0]
        for i, oid in enumerate(ids):
            idx = session.obj_id_to_idx(oid)
            p = f"out.r{r:06}.o{oid}."
            is_cond = frame in session.output_dict_per_obj[idx]["cond_frame_outputs"]
            store = session.output_dict_per_obj[idx]["cond_frame_outputs" if is_cond else "non_cond_frame_outputs"][frame]
            low = out.pred_masks[i].reshape(S // 4, S // 4)
            tensors[p + "lowres"] = low.contiguous()
            tensors[p + "score"] = out.object_score_logits[i].reshape(1).contiguous()
            tensors[p + "mask"] = (masks[i, 0] > 0).to(torch.uint8).contiguous()
            tensors[p + "pointer"] = store["object_pointer"].reshape(-1).contiguous()
            tensors[p + "is_cond"] = torch.tensor([int(is_cond)], dtype=torch.uint8)
            info = rec.per_obj.get(idx, {}) if idx in rec.recent else {}
            tensors[p + "multimask"] = torch.tensor([int(info.get("multimask", False))], dtype=torch.uint8)
            tensors[p + "chosen"] = torch.tensor([info.get("chosen", 0)], dtype=torch.int64)
            tensors[p + "iou"] = info.get("iou", torch.ones(1)).float().contiguous()
            if "mem_mask" in info:
                tensors[p + "mem_mask"] = info["mem_mask"].contiguous()
            iou = info.get("iou", torch.ones(1))
            srt = iou.sort(descending=True).values
            stats.append({"out": r, "frame": frame, "obj": oid, "score": float(out.object_score_logits[i]),
                          "is_cond": is_cond, "multimask": bool(info.get("multimask", False)),
                          "iou_gap": float(srt[0] - srt[1]) if srt.numel() > 1 else None,
                          "lowres_std": float(low.std()), "mask_area": int((masks[i, 0] > 0).sum())})

    def call(**k):
        rec.recent = set()
        before = dict(rec.per_obj)
        rec.per_obj.clear()
        o = model(inference_session=session, **k)
        rec.recent = set(rec.per_obj)
        # Objects reused from a stored output keep their earlier decoder record.
        for idx, v in before.items():
            rec.per_obj.setdefault(idx, v)
            if idx not in rec.recent:
                rec.recent.add(idx)
        return o

    rec.recent = set()
    for t in range(N):
        inp = pix(t)
        osz = inp.original_sizes[0]
        if t == 0:
            events.append({"type": "prompt", "frame": 0, "obj": 1, "box": [40.0, 50.0, 85.0, 90.0]})
            proc.add_inputs_to_inference_session(session, frame_idx=0, obj_ids=1,
                                                 input_boxes=[[[40.0, 50.0, 85.0, 90.0]]], original_size=osz)
            call(frame=inp.pixel_values[0])
            events.append({"type": "prompt", "frame": 0, "obj": 2, "points": [[170.0, 50.0, 1], [200.0, 120.0, 0]]})
            proc.add_inputs_to_inference_session(session, frame_idx=0, obj_ids=2,
                                                 input_points=[[[[170.0, 50.0], [200.0, 120.0]]]],
                                                 input_labels=[[[1, 0]]])
            out = call(frame_idx=0)
        elif t == 5:
            events.append({"type": "prompt", "frame": 5, "obj": 3, "mask": "prompt.f000005.o3.mask"})
            proc.add_inputs_to_inference_session(session, frame_idx=5, obj_ids=3, input_masks=mask3)
            out = call(frame=inp.pixel_values[0])
        elif t == 8:
            events.append({"type": "prompt", "frame": 8, "obj": 1, "points": [[92.0, 70.0, 1]]})
            proc.add_inputs_to_inference_session(session, frame_idx=8, obj_ids=1,
                                                 input_points=[[[[92.0, 70.0]]]], input_labels=[[[1]]],
                                                 original_size=osz)
            out = call(frame=inp.pixel_values[0])
        else:
            out = call(frame=inp.pixel_values[0])
        record(out, t, "track")
        for oid in ([1, 2] if t == 0 else [3] if t == 5 else [1] if t == 8 else []):
            idx = session.obj_id_to_idx(oid)
            assert t in session.output_dict_per_obj[idx]["cond_frame_outputs"], (t, oid)
        if t == 10:
            events.append({"type": "prompt", "frame": 10, "obj": 2, "points": [[140.0, 70.0, 1], [60.0, 120.0, 0]]})
            proc.add_inputs_to_inference_session(session, frame_idx=10, obj_ids=2,
                                                 input_points=[[[[140.0, 70.0], [60.0, 120.0]]]],
                                                 input_labels=[[[1, 0]]], original_size=osz)
            out = call(frame_idx=10)
            idx = session.obj_id_to_idx(2)
            assert 10 in session.output_dict_per_obj[idx]["non_cond_frame_outputs"]
            record(out, 10, "refresh")
    assert rec.stage, "stage tensors were not captured"
    for k, v in rec.stage.items():
        tensors["stage." + k] = v.contiguous()
    tensors["stage.frame"] = torch.tensor([STAGE_FRAME])
    tensors["stage.obj"] = torch.tensor([STAGE_OBJ])

    name = "sequence_256_defaults" if defaults else "sequence_256"
    out_dir = repo_root() / "fixtures" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(out_dir / "config.json")
    for k, v in tensors.items():
        assert torch.isfinite(v.float()).all(), k
    save_file(tensors, out_dir / "sequence.safetensors")
    if extra:
        save_file({k: v.contiguous() for k, v in extra.items()}, out_dir / "extra_weights.safetensors")
    (out_dir / "events.json").write_text(json.dumps({"width": W, "height": H, "num_frames": N, "events": events}, indent=1) + "\n")
    (out_dir / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    absent = [(s["frame"], s["obj"]) for s in stats if s["score"] <= 0]
    print(f"{name}: {len(stats)} object outputs, absent {absent}")
    min_score = min(abs(s["score"]) for s in stats)
    min_gap = min(s["iou_gap"] for s in stats if s["iou_gap"] is not None and s["multimask"])
    print(f" min |score| {min_score:.3f}, min IoU gap of multimask choices {min_gap:.2e}")
    # Every discrete decision needs a margin over float noise, or the fixture tests luck.
    assert min_score >= 0.05 and min_gap >= 1e-3, (min_score, min_gap)
    # An object must go absent on a tracked frame and come back (the occlusion path).
    assert any(not s["is_cond"] and s["score"] <= 0 for s in stats)
    assert any(not s["is_cond"] and s["score"] > 0 and s["frame"] > 7 for s in stats)
    print(f" wrote {out_dir} ({(out_dir / 'sequence.safetensors').stat().st_size} bytes)")


if __name__ == "__main__":
    generate(False)
    generate(True)
