#!/usr/bin/env python3
"""Write the committed reference fixtures for edgetam-rs.

    python tools/reference/generate_fixtures.py            # writes fixtures/

Outputs (see fixtures/README.md for every tensor name):
  fixtures/model/config.json, model.safetensors   random EdgeTAM weights, transformers layout, fp16
  fixtures/image_256/{config.json, image.safetensors}  every image-path stage at image_size 256
  fixtures/image_1024/{config.json, image.safetensors} end-to-end at the default 1024 (subsampled stages)

Weights are random but deterministic, fp16-representable (so fp16 storage is exact), and the goldens
are computed from the model reloaded from the saved file.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from common import (
    calibrate_batchnorm,
    calibration_image,
    make_model,
    make_processor,
    normalize_neck,
    persistent_state_dict,
    randomize,
    repo_root,
)

torch.set_grad_enabled(False)

# Test images: non-square on purpose. 300x200 -> 256 downscales x (antialias) and upscales y.
IMAGES = {256: (200, 300), 1024: (270, 480)}


def prompt_cases(h: int, w: int) -> dict[str, dict]:
    """Prompts in original-image pixel coordinates, as a user gives them."""
    sx, sy = w / 300.0, h / 200.0
    return {
        "point1": {"points": [[150 * sx, 95 * sy]], "labels": [1]},
        "points": {"points": [[120 * sx, 80 * sy], [210 * sx, 150 * sy]], "labels": [1, 0]},
        "box": {"box": [60 * sx, 40 * sy, 230 * sx, 170 * sy]},
        "box_points": {
            "box": [50 * sx, 30 * sy, 250 * sx, 180 * sy],
            "points": [[140 * sx, 100 * sy], [60 * sx, 170 * sy]],
            "labels": [1, 0],
        },
        "mask": {"mask": True},
    }


def encode_prompt(proc, case: dict, h: int, w: int):
    """Points/labels exactly as the video processor stores them (box -> labels 2, 3 first)."""
    pts = case.get("points")
    labels = case.get("labels")
    box = case.get("box")
    enc = proc(
        input_points=[[pts]] if pts else None,
        input_labels=[[labels]] if labels else None,
        input_boxes=[[box]] if box else None,
        original_sizes=[[h, w]],
        return_tensors="pt",
    )
    points = enc.get("input_points")
    lab = enc.get("input_labels")
    if points is None:
        points = torch.zeros(1, 1, 0, 2)
        lab = torch.zeros(1, 1, 0, dtype=torch.int32)
    if enc.get("input_boxes") is not None:
        bc = enc["input_boxes"].reshape(1, -1, 2, 2)
        bl = torch.tensor([2, 3], dtype=torch.int32).repeat(1, bc.shape[1], 1)
        points = torch.cat([bc, points], dim=2)
        lab = torch.cat([bl, lab.to(torch.int32)], dim=2)
    return points.float(), lab.to(torch.int64)


def smooth_mask_logits(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, n), torch.linspace(-1, 1, n), indexing="ij")
    z = 4.0 * (0.45 - ((xx - 0.1) ** 2 / 0.5 + (yy + 0.05) ** 2 / 0.3).sqrt())
    return (z + 0.3 * torch.randn(n, n, generator=g)).reshape(1, 1, n, n)


def sub(t: torch.Tensor, grid: int) -> torch.Tensor:
    """Spatially subsample an NCHW tensor to at most grid x grid (for the 1024 fixture)."""
    step = max(1, t.shape[-1] // grid)
    return t[..., ::step, ::step].contiguous()


def run_image_fixture(sd: dict, image_size: int, out_dir: Path, full: bool) -> dict:
    model = make_model(image_size)
    missing, unexpected = model.load_state_dict(sd, strict=True)
    proc = make_processor(image_size)
    h, w = IMAGES[image_size]
    img = calibration_image(h, w, seed=7)
    t: dict[str, torch.Tensor] = {"image.rgb_u8": img.contiguous()}
    keep = (lambda x: x.contiguous()) if full else (lambda x: sub(x, 16))

    pixel_values = proc(images=img.numpy(), return_tensors="pt").pixel_values
    t["preprocess.pixel_values"] = pixel_values if full else sub(pixel_values, 128)

    stages = model.vision_encoder.backbone(pixel_values).last_hidden_state
    for i, s in enumerate(stages):
        t[f"backbone.stage{i}"] = keep(s)
    vis = model.vision_encoder(pixel_values)
    for i, (f, p) in enumerate(zip(vis.fpn_hidden_states, vis.fpn_position_encoding)):
        # Levels 0/1 at full width are large and only feed conv_s0/conv_s1 (stored in full):
        # keep a 16x16 subsample of them even in the full fixture.
        k = keep if i == 2 else (lambda x: sub(x, 16))
        t[f"neck.fpn{i}"] = k(f)
        t[f"neck.pos{i}"] = k(p)
    feat_s0 = model.mask_decoder.conv_s0(vis.fpn_hidden_states[0])
    feat_s1 = model.mask_decoder.conv_s1(vis.fpn_hidden_states[1])
    embed = vis.fpn_hidden_states[2] + model.no_memory_embedding.reshape(1, -1, 1, 1)
    t["image.feat_s0"] = keep(feat_s0)
    t["image.feat_s1"] = keep(feat_s1)
    t["image.embed"] = keep(embed)
    dense_pe = model.get_image_wide_positional_embeddings()
    t["image.dense_pe"] = keep(dense_pe)

    # The same model in float64: the reference's own float32 noise must be far below the parity
    # bar, or a 1e-4 bar would test rounding luck rather than the port.
    model64 = copy.deepcopy(model).double()
    d64 = lambda x: x.double()  # noqa: E731

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm().clamp_min(1e-30))

    stats = {}
    cases = prompt_cases(h, w)
    if not full:
        cases = {k: v for k, v in cases.items() if k in ("point1", "box", "box_points")}
    for name, case in cases.items():
        p = f"prompt.{name}"
        masks_in = None
        if case.get("mask"):
            points = torch.zeros(1, 1, 1, 2)
            labels = -torch.ones(1, 1, 1, dtype=torch.int64)
            masks_in = smooth_mask_logits(image_size // 4, seed=11)
            t[f"{p}.mask_input"] = masks_in
        else:
            points, labels = encode_prompt(proc, case, h, w)
            if "points" in case:
                t[f"{p}.raw_points"] = torch.tensor(case["points"], dtype=torch.float32)
                t[f"{p}.raw_labels"] = torch.tensor(case["labels"], dtype=torch.int64)
            if "box" in case:
                t[f"{p}.raw_box"] = torch.tensor(case["box"], dtype=torch.float32)
        t[f"{p}.points"] = points
        t[f"{p}.labels"] = labels
        sparse, dense = model.prompt_encoder(points, labels.to(torch.int32), None, masks_in)
        t[f"{p}.sparse"] = sparse
        t[f"{p}.dense"] = keep(dense)

        for mm in (True, False):
            d = f"decoder.{name}.mm{int(mm)}"
            masks, iou, tokens, score = model.mask_decoder(
                image_embeddings=embed,
                image_positional_embeddings=dense_pe,
                sparse_prompt_embeddings=sparse,
                dense_prompt_embeddings=dense,
                multimask_output=mm,
                high_resolution_features=[feat_s0, feat_s1],
            )
            if full:
                # Only full fixtures can feed the decoder the reference's own inputs; at 1024 the
                # decoder is checked end to end through `frame.*` instead.
                t[f"{d}.masks"] = masks
                t[f"{d}.iou"] = iou
                t[f"{d}.tokens"] = tokens
                t[f"{d}.object_score"] = score
            # All four raw mask-token outputs, to check dynamic multimask selection.
            m64, _, tok64, score64 = model64.mask_decoder(
                image_embeddings=d64(embed), image_positional_embeddings=d64(dense_pe),
                sparse_prompt_embeddings=d64(sparse), dense_prompt_embeddings=d64(dense),
                multimask_output=mm, high_resolution_features=[d64(feat_s0), d64(feat_s1)],
            )
            extra = {
                "f64_noise_masks": rel(masks, m64),
                "f64_noise_tokens": rel(tokens, tok64),
                "f64_noise_score": float((score.double() - score64).abs().max()),
            }
            if not mm:
                # Token 0's stability score decides the dynamic fallback: it needs a margin.
                model.mask_decoder.dynamic_multimask_via_stability = False
                token0 = model.mask_decoder(
                    image_embeddings=embed, image_positional_embeddings=dense_pe,
                    sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                    multimask_output=False, high_resolution_features=[feat_s0, feat_s1],
                )[0]
                model.mask_decoder.dynamic_multimask_via_stability = True
                stab = float(model.mask_decoder._get_stability_scores(token0).flatten()[0])
                # Decision margin in pixels: logits within `tol` of +-delta may flip under the
                # parity bar (max |diff| <= 1e-3 x std); the decision must survive the worst case.
                lg = token0.flatten().double()
                tol = 1e-3 * float(lg.std())
                inter, union = float((lg > 0.05).sum()), float((lg > -0.05).sum())
                near_i = float(((lg - 0.05).abs() < tol).sum())
                near_u = float(((lg + 0.05).abs() < tol).sum())
                lo = (inter - near_i) / max(union + near_u, 1.0)
                hi = (inter + near_i) / max(union - near_u, 1.0)
                extra |= {"stability": round(stab, 5), "stability_range": [round(lo, 5), round(hi, 5)],
                          "fallback": bool(stab < 0.98)}
            stats[f"{name}.mm{int(mm)}"] = extra | {
                "iou": [round(float(x), 5) for x in iou.flatten()],
                "score": round(float(score), 4),
                "logit_min": round(float(masks.min()), 3),
                "logit_max": round(float(masks.max()), 3),
                "pos_frac": round(float((masks > 0).float().mean()), 4),
            }

        if case.get("mask"):
            continue
        # The single-frame path the video model takes on a prompted frame (what `segment` does).
        multimask = model._use_multimask(True, {"point_coords": points, "point_labels": labels})
        out = model._single_frame_forward(
            pixel_values=None,
            input_points=points,
            input_labels=labels.to(torch.int32),
            image_embeddings=[feat_s0, feat_s1, embed],
            multimask_output=multimask,
        )
        # End to end in float64 from the same pixels: the reference's own noise over all stages.
        f64_feats = model64.get_image_features(d64(pixel_values))
        maps = [x.permute(1, 2, 0).view(1, -1, *sz)
                for x, sz in zip(f64_feats.fpn_hidden_states, model64.backbone_feature_sizes)]
        maps[-1] = maps[-1] + model64.no_memory_embedding.reshape(1, -1, 1, 1)
        out64 = model64._single_frame_forward(
            pixel_values=None, input_points=d64(points), input_labels=labels.to(torch.int32),
            image_embeddings=maps, multimask_output=multimask,
        )
        f = f"frame.{name}"
        t[f"{f}.multimask"] = torch.tensor([int(multimask)], dtype=torch.uint8)
        t[f"{f}.low_res_masks"] = out.pred_masks.contiguous()
        t[f"{f}.iou"] = out.iou_scores
        t[f"{f}.object_score"] = out.object_score_logits
        t[f"{f}.object_pointer"] = out.object_pointer
        logits = proc.post_process_masks([out.pred_masks], original_sizes=[[h, w]], binarize=False)[0]
        if full:
            t[f"post.{name}.logits"] = logits.contiguous()
        t[f"post.{name}.mask"] = (logits > 0).to(torch.uint8).contiguous()
        stats[f"{name}.frame"] = {
            "f64_noise_masks": rel(out.pred_masks, out64.pred_masks),
            "f64_noise_score": float((out.object_score_logits.double() - out64.object_score_logits).abs().max()),
            "multimask": bool(multimask),
            "score": round(float(out.object_score_logits), 4),
            "mask_frac": round(float((logits > 0).float().mean()), 4),
        }

    out_dir.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(out_dir / "config.json")
    for k, v in t.items():
        assert torch.isfinite(v.float()).all(), f"non-finite values in {k}"
    save_file({k: v.contiguous() for k, v in t.items()}, out_dir / "image.safetensors",
              metadata={"image_size": str(image_size), "full": str(full)})
    (out_dir / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    return stats


def check_not_degenerate(stats: dict) -> None:
    for k, s in stats.items():
        # Decoder fed float32 inputs: its own noise; ".frame": all stages from pixels.
        score_limit = 1e-4 if k.endswith(".frame") else 2e-5
        for key, limit in (("f64_noise_masks", 2e-5), ("f64_noise_tokens", 2e-5), ("f64_noise_score", score_limit)):
            if key in s:
                assert s[key] <= limit, f"{k}: reference float32 noise {key}={s[key]:.2e} > {limit}: {s}"
        if "logit_min" in s:
            assert s["logit_min"] < -1 and s["logit_max"] > 1, f"{k}: mask logits lack both signs: {s}"
            assert 0.02 < s["pos_frac"] < 0.98, f"{k}: mask almost constant: {s}"
        if "stability" in s:
            lo, hi = s["stability_range"]
            assert (lo >= 0.98) == (hi >= 0.98), f"{k}: stability decision without margin: {s}"
        if "iou" in s and len(s["iou"]) > 1:
            top = sorted(s["iou"], reverse=True)
            assert top[0] - top[1] > 2e-3, f"{k}: IoU argmax without margin: {s}"
        if "score" in s:
            assert abs(s["score"]) > 0.05, f"{k}: object score too close to 0: {s}"
    present = [k for k, s in stats.items() if k.endswith(".frame") and s["score"] > 0]
    assert present, "no prompted object is present: the mask path would go untested"
    scores = {s["score"] for s in stats.values()}
    assert len(scores) >= 2, f"object scores do not vary: {scores}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=repo_root() / "fixtures")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)

    model = make_model(1024)
    randomize(model)
    calibrate_batchnorm(model, 1024)
    normalize_neck(model, 1024)
    sd = persistent_state_dict(model)
    model_dir = args.out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(model_dir / "config.json")
    half = {k: (v.to(torch.float16) if v.is_floating_point() else v) for k, v in sd.items()}
    for k, v in sd.items():
        if v.is_floating_point():
            assert torch.equal(half[k].float(), v), f"{k} is not fp16-representable"
    save_file(half, model_dir / "model.safetensors", metadata={"format": "pt"})

    # Goldens come from the weights as saved.
    loaded = {k: (v.float() if v.is_floating_point() else v) for k, v in load_file(model_dir / "model.safetensors").items()}
    print(f"{len(loaded)} tensors, {sum(v.numel() for k, v in loaded.items() if v.is_floating_point())} floats")
    for size, full in ((256, True), (1024, False)):
        stats = run_image_fixture(loaded, size, args.out / f"image_{size}", full)
        print(f"image_size {size}:")
        for k, v in stats.items():
            print(f"  {k}: {v}")
        check_not_degenerate(stats)


if __name__ == "__main__":
    main()
