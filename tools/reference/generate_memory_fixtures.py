#!/usr/bin/env python3
"""Write the memory-encoder + spatial-perceiver reference fixture for edgetam-rs.

    python tools/reference/generate_memory_fixtures.py     # writes fixtures/memory_256/

Needs fixtures/model/model.safetensors (from generate_fixtures.py). Runs transformers'
`EdgeTamVideoModel` at image_size 256 on the image_256 calibration image with the "box" prompt
(an object that is present), then `_encode_new_memory` for three cases:

  prompted  the mask input is the binarised high-res mask, (hr > 0) * 20 - 10
  tracked   the same high-res logits through the sigmoid path, sigmoid(hr) * 20 - 10
  occluded  object score <= 0: low-res logits -> -1024 everywhere, so the input is -10 everywhere

Tensors (all float32 unless noted):
  memory.pix_feat               [1,256,16,16] raw FPN level 2 (no no_memory_embedding)
  memory.low_res_masks          [1,1,64,64]   decoder's chosen low-res logits (object present)
  memory.object_score           [1,1]         its object score (> 0)
  memory.pos_enc                [1,64,16,16]  memory encoder position encoding (all cases)
  memory.perceiver_pos          [1,512,64]    perceiver position output (all cases)
  memory.prompted.mask_binary   [1,1,256,256] uint8, the exact (hr > 0) used (float noise flips
                                              pixels, so tests force it)
  memory.{prompted,occluded}.features  [1,64,16,16]  memory encoder output
  memory.{prompted,occluded}.memory    [1,512,64]    perceiver output
  memory.tracked.mask_for_mem   [1,1,256,256] sigmoid(hr) * 20 - 10
  memory.tracked.mask_downsampler / .fuser [1,256,16,16], .features, .memory as above
  memory.window2.memory_2d      [1,256,64]    2-D half of the perceiver output for a 32x32 input (2x2
                                              windows; at 256 the windows are 1x1, at 1024 4x4), the
                                              input being `window_input()` (a formula Rust rebuilds)
  memory.feature_projection is not stored (size budget): the fuser check feeds pix_feat and the
  reference's mask-downsampler output, so it covers the projection and the sum.

Every stored output is also computed by a float64 copy of the model from the same float32 inputs;
the reference's own float32 noise must stay <= 2e-5 relative, so the 1e-4 bar tests the port.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import calibration_image, make_model, make_processor, repo_root  # noqa: E402
from generate_fixtures import IMAGES, encode_prompt, prompt_cases  # noqa: E402

torch.set_grad_enabled(False)

IMAGE_SIZE = 256
CASE = "box"
NOISE_LIMIT = 2e-5


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


WINDOW_GRID = 32


def window_input(n: int = WINDOW_GRID, c: int = 64) -> torch.Tensor:
    """[1, c, n, n] deterministic perceiver input, computed in float64 then rounded to float32
    (the Rust check evaluates the same formula)."""
    ci = torch.arange(c, dtype=torch.float64)[:, None, None]
    yi = torch.arange(n, dtype=torch.float64)[None, :, None]
    xi = torch.arange(n, dtype=torch.float64)[None, None, :]
    return (2.0 * torch.sin(0.7 * ci + 1.3 * yi + 0.9 * xi + 0.05 * ci * yi)).float()[None].contiguous()


def stages(model, pix_feat: torch.Tensor, mask_for_mem: torch.Tensor) -> dict[str, torch.Tensor]:
    """The memory encoder step by step, then the perceiver (as `_encode_new_memory` runs them)."""
    me = model.memory_encoder
    ds = me.mask_downsampler(mask_for_mem)
    proj = me.feature_projection(pix_feat)
    fused = me.memory_fuser(proj + ds)
    feats = me.projection(fused)
    pos = me.position_encoding(feats.shape, feats.device, feats.dtype)
    feats_ref, pos_ref = me(pix_feat, mask_for_mem)
    assert torch.equal(feats, feats_ref) and torch.equal(pos, pos_ref)
    memory, mem_pos = model.spatial_perceiver(feats, pos)
    return {
        "mask_downsampler": ds,
        "fuser": fused,
        "features": feats,
        "pos_enc": pos,
        "memory": memory,
        "perceiver_pos": mem_pos,
    }


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    root = repo_root()
    sd = {k: (v.float() if v.is_floating_point() else v)
          for k, v in load_file(root / "fixtures/model/model.safetensors").items()}
    model = make_model(IMAGE_SIZE)
    model.load_state_dict(sd, strict=True)
    model64 = copy.deepcopy(model).double()
    cfg = model.config
    scale, bias = cfg.sigmoid_scale_for_mem_enc, cfg.sigmoid_bias_for_mem_enc

    proc = make_processor(IMAGE_SIZE)
    h, w = IMAGES[IMAGE_SIZE]
    img = calibration_image(h, w, seed=7)
    pixel_values = proc(images=img.numpy(), return_tensors="pt").pixel_values
    feats = model.get_image_features(pixel_values).fpn_hidden_states  # (HW)BC per level
    sizes = model.backbone_feature_sizes
    maps = [x.permute(1, 2, 0).view(1, -1, *s) for x, s in zip(feats, sizes)]
    pix_feat = maps[-1].contiguous()  # raw level 2: what `_encode_new_memory` receives
    embed = maps[-1] + model.no_memory_embedding.reshape(1, -1, 1, 1)

    points, labels = encode_prompt(proc, prompt_cases(h, w)[CASE], h, w)
    multimask = model._use_multimask(True, {"point_coords": points, "point_labels": labels})
    out = model._single_frame_forward(
        pixel_values=None, input_points=points, input_labels=labels.to(torch.int32),
        image_embeddings=maps[:-1] + [embed], multimask_output=multimask,
    )
    score = out.object_score_logits
    assert float(score) > 0.05, f"object of case {CASE} is not present: score {float(score)}"
    low_res = out.pred_masks.reshape(1, 1, IMAGE_SIZE // 4, IMAGE_SIZE // 4).contiguous()
    high_res = out.high_res_masks.reshape(1, 1, IMAGE_SIZE, IMAGE_SIZE)
    # The decoder's high-res mask is the low-res one upsampled (what the Rust helper does).
    up = F.interpolate(low_res, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)
    assert torch.equal(up, high_res), "high-res mask is not the bilinear upsample of the low-res one"

    # Occluded: the decoder's NO_OBJ replacement, then the same upsample.
    occluded_low = torch.full_like(low_res, -1024.0)
    occluded_high = F.interpolate(occluded_low, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear",
                                  align_corners=False)

    binary = (high_res > 0).to(high_res.dtype)
    cases = {
        "prompted": (high_res, True, binary * scale + bias),
        "tracked": (high_res, False, torch.sigmoid(high_res) * scale + bias),
        "occluded": (occluded_high, False, torch.sigmoid(occluded_high) * scale + bias),
    }
    t: dict[str, torch.Tensor] = {
        "memory.pix_feat": pix_feat,
        "memory.low_res_masks": low_res,
        "memory.object_score": score.reshape(1, 1).contiguous(),
        "memory.prompted.mask_binary": binary.to(torch.uint8).contiguous(),
    }
    stats: dict[str, dict] = {}
    vision_feats = feats[-1]  # (HW)BC, as `_encode_new_memory` takes it
    for name, (hr, from_pts, mask) in cases.items():
        got = stages(model, pix_feat, mask)
        # The whole reference entry point gives the same memory.
        mem_ref, pos_ref = model._encode_new_memory(vision_feats, hr, score, is_mask_from_pts=from_pts)
        assert torch.equal(mem_ref, got["memory"]) and torch.equal(pos_ref, got["perceiver_pos"]), name
        # Float64 from the same float32 inputs (the binarised mask forced, as in the tests).
        got64 = stages(model64, pix_feat.double(), mask.double())
        if name == "tracked":
            mask64 = torch.sigmoid(hr.double()) * scale + bias
            got["mask_for_mem"], got64["mask_for_mem"] = mask, mask64
        if name == "occluded":
            assert torch.equal(mask, torch.full_like(mask, bias)), "occluded input is not constant"
        keep = {
            "prompted": ["features", "memory"],
            "tracked": ["mask_for_mem", "mask_downsampler", "fuser", "features", "memory"],
            "occluded": ["features", "memory"],
        }[name]
        stats[name] = {}
        for k in keep + ["pos_enc", "perceiver_pos"]:
            stats[name][f"f64_noise_{k}"] = rel(got[k], got64[k])
        for k in keep:
            t[f"memory.{name}.{k}"] = got[k].contiguous()
        if name == "tracked":
            t["memory.pos_enc"] = got["pos_enc"].contiguous()
            t["memory.perceiver_pos"] = got["perceiver_pos"].contiguous()
        stats[name]["memory_std"] = float(got["memory"].std())
        stats[name]["features_std"] = float(got["features"].std())
    # The 2-D path with windows larger than one token (window partition order).
    win = window_input()
    win_pos = model.memory_encoder.position_encoding(win.shape, win.device, win.dtype)
    n1 = cfg.perceiver_resampler_num_latents
    mem_win = model.spatial_perceiver(win, win_pos)[0][:, n1:]
    mem_win64 = model64.spatial_perceiver(win.double(), win_pos.double())[0][:, n1:]
    t["memory.window2.memory_2d"] = mem_win.contiguous()
    stats["window2"] = {"f64_noise_memory_2d": rel(mem_win, mem_win64), "memory_std": float(mem_win.std())}
    stats["prompt"] = {"case": CASE, "score": float(score), "mask_frac": float(binary.mean())}

    for name, s in stats.items():
        for k, v in s.items():
            if k.startswith("f64_noise"):
                assert v <= NOISE_LIMIT, f"{name}: reference float32 noise {k}={v:.2e} > {NOISE_LIMIT}"
    # The three cases must give different memories, or the case split tests nothing.
    assert rel(t["memory.prompted.memory"], t["memory.tracked.memory"]) > 1e-2
    assert rel(t["memory.occluded.memory"], t["memory.tracked.memory"]) > 1e-2

    out_dir = root / "fixtures/memory_256"
    out_dir.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(out_dir / "config.json")
    for k, v in t.items():
        assert torch.isfinite(v.float()).all(), f"non-finite values in {k}"
    save_file({k: v.contiguous() for k, v in t.items()}, out_dir / "image.safetensors",
              metadata={"image_size": str(IMAGE_SIZE), "case": CASE})
    (out_dir / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    size = (out_dir / "image.safetensors").stat().st_size
    print(json.dumps(stats, indent=1))
    print(f"wrote {out_dir} ({size} bytes)")
    assert size < 2_000_000, "memory fixture over its 2 MB budget"


if __name__ == "__main__":
    main()
