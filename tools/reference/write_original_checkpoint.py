#!/usr/bin/env python3
"""Write fixtures/original/edgetam.pt: the random fixture weights in Meta's original checkpoint layout.

    python tools/reference/write_original_checkpoint.py        # from the repository root

Reads fixtures/model/model.safetensors (transformers `EdgeTamVideoModel` names), renames every tensor
to the names of Meta's original EdgeTAM code (PyPI `edgetam-dimos`, module `sam2`) by inverting the
ONE key map, tracker/src/model/original_keys.map (the Rust loader reads the same file), and saves
`torch.save({"model": state_dict}, ...)` like Meta's release, float tensors stored as float16 (the
fixture values are fp16-representable, so this is exact).

Checks, all of which must pass before the file is written:
  1. the map, applied to the original model's `state_dict()` keys, yields exactly the fixture's
     transformers keys (and the inverse yields exactly the original keys), shapes included;
  2. the round trip original -> transformers reproduces every fixture tensor bitwise, except the one
     documented `copy` target (see COPY below);
  3. functionally: the original model loaded with the written state dict and transformers' model
     loaded with its mapped-back state dict give the same outputs (image encoder, prompt encoder +
     mask decoder on a prompted frame, memory encoder + spatial perceiver, memory attention).

The original model is built from `sam2/edgetam.yaml` with ckpt_path=None; timm's `create_model` is
called with pretrained=False so nothing is downloaded.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from common import calibration_image, make_model, make_processor, repo_root

torch.set_grad_enabled(False)

MAP_FILE = repo_root() / "tracker" / "src" / "model" / "original_keys.map"


# ---------------------------------------------------------------------------------------------------
# The key map (same grammar as tracker/src/model/original_keys.rs)


@dataclass
class Rule:
    kind: str  # rename | split | concat | copy
    original: str
    targets: list[str]
    count: int = 1
    line: int = 0

    def regex(self) -> re.Pattern:
        parts = []
        segs = self.original.split(".")
        for n, seg in enumerate(segs):
            if seg == "{i}":
                parts.append(r"(?P<i>\d+)")
            elif seg == "*":
                assert n == len(segs) - 1, f"line {self.line}: `*` must be the last segment"
                parts.append(r"(?P<rest>.+)")
            else:
                parts.append(re.escape(seg))
        return re.compile(r"\.".join(parts) + "$")


def parse_map(path: Path = MAP_FILE) -> list[Rule]:
    rules = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        cols = line.split()
        kind = cols[0]
        if kind == "rename":
            assert len(cols) == 3, f"line {n}: rename takes 2 patterns"
            rules.append(Rule(kind, cols[1], cols[2:], line=n))
        elif kind in ("split", "copy"):
            assert len(cols) == 4, f"line {n}: {kind} takes 3 patterns"
            rules.append(Rule(kind, cols[1], cols[2:], line=n))
        elif kind == "concat":
            assert len(cols) == 4, f"line {n}: concat takes 2 patterns and a count"
            assert "{i}" in cols[1].split(".") and "{i}" not in cols[2], f"line {n}: concat pattern"
            rules.append(Rule(kind, cols[1], [cols[2]], count=int(cols[3]), line=n))
        else:
            raise ValueError(f"{path}:{n}: unknown rule kind {kind!r}")
    return rules


def match(rules: list[Rule], key: str) -> tuple[Rule, dict[str, str]] | None:
    for r in rules:
        m = r.regex().match(key)
        if m:
            return r, {k: v for k, v in m.groupdict().items() if v is not None}
    return None


def fill(pattern: str, caps: dict[str, str]) -> str:
    segs = []
    for seg in pattern.split("."):
        if seg == "{i}":
            segs.append(caps["i"])
        elif seg == "*":
            segs.append(caps["rest"])
        else:
            segs.append(seg)
    return ".".join(segs)


def to_transformers(orig: dict[str, torch.Tensor], rules: list[Rule]) -> dict[str, torch.Tensor]:
    """Python twin of `original_keys::to_transformers` (used to check the round trip)."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, list] = {}

    def put(name, t, src):
        assert name not in out, f"`{src}` and another original key both map to `{name}`"
        out[name] = t

    for key, t in orig.items():
        hit = match(rules, key)
        if hit is None:
            raise KeyError(f"unknown original key `{key}`")
        r, caps = hit
        names = [fill(p, caps) for p in r.targets]
        if r.kind == "rename":
            put(names[0], t, key)
        elif r.kind == "copy":
            for nm in names:
                put(nm, t.clone(), key)
        elif r.kind == "split":
            a, b = torch.chunk(t, 2, dim=0)
            put(names[0], a.clone(), key)
            put(names[1], b.clone(), key)
        elif r.kind == "concat":
            groups.setdefault(names[0], []).append((int(caps["i"]), t, key))
    for name, parts in groups.items():
        parts.sort()
        assert [p[0] for p in parts] == list(range(len(parts))), f"{name}: pieces {[p[0] for p in parts]}"
        put(name, torch.cat([p[1] for p in parts], dim=0), parts[0][2])
    return out


def to_original(hf: dict[str, torch.Tensor], orig_shapes: dict[str, torch.Size], rules: list[Rule]):
    """Inverse map: for every key of the original model, take its tensor from the transformers dict."""
    orig: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for key, shape in orig_shapes.items():
        hit = match(rules, key)
        assert hit is not None, f"no rule for original key `{key}`"
        r, caps = hit
        names = [fill(p, caps) for p in r.targets]
        if r.kind == "rename":
            t = hf[names[0]]
        elif r.kind == "copy":
            t = hf[names[0]]  # the first target is the source; see COPY in main()
        elif r.kind == "split":
            t = torch.cat([hf[names[0]], hf[names[1]]], dim=0)
        elif r.kind == "concat":
            whole = hf[names[0]]
            n = whole.shape[0] // r.count
            assert n * r.count == whole.shape[0], f"{names[0]}: {whole.shape} not divisible by {r.count}"
            i = int(caps["i"])
            t = whole[i * n:(i + 1) * n]
        else:
            raise AssertionError(r.kind)
        used.update(names)
        assert tuple(t.shape) == tuple(shape), f"{key}: mapped shape {tuple(t.shape)} != original {tuple(shape)}"
        orig[key] = t.clone().contiguous()
    unused = sorted(set(hf) - used)
    assert not unused, f"transformers keys with no original key: {unused[:5]} ({len(unused)})"
    return orig


# ---------------------------------------------------------------------------------------------------
# The original model


def build_original():
    import sam2.modeling.backbones.timm as sam2_timm

    create = sam2_timm.create_model

    def create_offline(name, pretrained=False, **kw):  # never download ImageNet weights
        return create(name, pretrained=False, **kw)

    sam2_timm.create_model = create_offline
    from sam2.build_sam import build_sam2

    model = build_sam2("edgetam.yaml", None, device="cpu", mode="eval")
    # Meta's video predictor turns this on (build_sam2_video_predictor's hydra overrides); the
    # image builder leaves it off. transformers always binarises masks from prompts, so match the
    # video predictor, or the memory check compares sigmoid(mask) with (mask > 0).
    model.binarize_mask_from_pts_for_mem_enc = True
    return model.float().eval()


def maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.float() - b.float()).abs().max())


def diffs_of(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(max abs diff, max abs diff / max |a|): float32 noise grows with the values' magnitude."""
    d = maxdiff(a, b)
    return d, d / max(float(a.float().abs().max()), 1e-12)


def functional_check(orig_model, hf_model) -> dict[str, tuple[float, float]]:
    g = torch.Generator().manual_seed(5)
    s = hf_model.config.image_size
    d: dict[str, tuple[float, float]] = {}
    # The calibration image the fixture's BatchNorm statistics come from (sane activation sizes;
    # pure noise pixels drive level-2 features to ~2e3 and attention logits far out of range).
    img = calibration_image(s * 3 // 4, s, seed=7)
    pixels = make_processor(s)(images=img.numpy(), return_tensors="pt").pixel_values

    # Image encoder: RepViT + FPN + conv_s0/conv_s1.
    bo = orig_model.forward_image(pixels)
    vis = hf_model.vision_encoder(pixels)
    s0 = hf_model.mask_decoder.conv_s0(vis.fpn_hidden_states[0])
    s1 = hf_model.mask_decoder.conv_s1(vis.fpn_hidden_states[1])
    l2 = vis.fpn_hidden_states[2]
    d["image.feat_s0"] = diffs_of(bo["backbone_fpn"][0], s0)
    d["image.feat_s1"] = diffs_of(bo["backbone_fpn"][1], s1)
    d["image.level2"] = diffs_of(bo["backbone_fpn"][2], l2)
    d["image.pos_level2"] = diffs_of(bo["vision_pos_enc"][2], vis.fpn_position_encoding[2])
    d["image.dense_pe"] = diffs_of(orig_model.sam_prompt_encoder.get_dense_pe(),
                                  hf_model.get_image_wide_positional_embeddings())

    # Prompt encoder + mask decoder + object pointer on a prompted frame (no memory).
    embed_o = bo["backbone_fpn"][2] + orig_model.no_mem_embed.reshape(1, -1, 1, 1)
    embed_h = l2 + hf_model.no_memory_embedding.reshape(1, -1, 1, 1)
    cases = {
        "point": (torch.tensor([[[400.0, 300.0]]]), torch.tensor([[1]])),
        "box+points": (torch.tensor([[[100.0, 120.0], [800.0, 900.0], [500.0, 450.0], [150.0, 850.0]]]),
                       torch.tensor([[2, 3, 1, 0]])),
    }
    for name, (pts, lab) in cases.items():
        for mm in (True, False):
            o = orig_model._forward_sam_heads(
                embed_o, point_inputs={"point_coords": pts, "point_labels": lab.int()},
                high_res_features=[bo["backbone_fpn"][0], bo["backbone_fpn"][1]], multimask_output=mm)
            h = hf_model._single_frame_forward(
                pixel_values=None, input_points=pts[:, None], input_labels=lab[:, None].int(),
                image_embeddings=[s0, s1, embed_h], multimask_output=mm)
            k = f"decoder.{name}.mm{int(mm)}"
            # o: low-res multimasks, high-res multimasks, ious, low-res chosen, high-res chosen,
            #    object pointer, object score. transformers returns the chosen masks only.
            d[f"{k}.low_res_mask"] = diffs_of(o[3], h.pred_masks.reshape(o[3].shape))
            d[f"{k}.high_res_mask"] = diffs_of(o[4], h.high_res_masks.reshape(o[4].shape))
            d[f"{k}.iou"] = diffs_of(o[2], h.iou_scores.reshape(o[2].shape))
            d[f"{k}.object_score"] = diffs_of(o[6], h.object_score_logits.reshape(o[6].shape))
            d[f"{k}.object_pointer"] = diffs_of(o[5], h.object_pointer.reshape(o[5].shape))
            mask_hr = o[4]

    # Memory encoder + spatial perceiver (prompted-frame path: binarised mask).
    feats_seq = l2.flatten(2).permute(2, 0, 1)  # (HW, B, C)
    score = torch.tensor([[1.0]])
    mem_o, pos_o = orig_model._encode_new_memory([feats_seq], [(l2.shape[-2], l2.shape[-1])],
                                                 mask_hr, score, True)
    mem_h, pos_h = hf_model._encode_new_memory(feats_seq, mask_hr, score, True)
    d["memory.features"] = diffs_of(mem_o, mem_h.reshape(mem_o.shape))
    d["memory.position"] = diffs_of(pos_o[0], pos_h.reshape(pos_o[0].shape))

    # Memory attention: the current frame attends to two memories + 4 pointer tokens of 64.
    mem_seq_o = mem_o.flatten(2).permute(2, 0, 1) if mem_o.dim() == 4 else mem_o.permute(1, 0, 2)
    mpos_o = pos_o[0].flatten(2).permute(2, 0, 1) if pos_o[0].dim() == 4 else pos_o[0].permute(1, 0, 2)
    ptr = torch.randn(4, 1, 64, generator=g)
    memory = torch.cat([mem_seq_o, 0.5 * mem_seq_o, ptr], dim=0)
    memory_pos = torch.cat([mpos_o + orig_model.maskmem_tpos_enc[-1].reshape(1, 1, -1),
                            mpos_o + orig_model.maskmem_tpos_enc[0].reshape(1, 1, -1),
                            torch.zeros_like(ptr)], dim=0)
    cur_pos = bo["vision_pos_enc"][2].flatten(2).permute(2, 0, 1)
    att_o = orig_model.memory_attention(curr=[feats_seq], curr_pos=[cur_pos], memory=memory,
                                        memory_pos=memory_pos, num_obj_ptr_tokens=4, num_spatial_mem=2)
    att_h = hf_model.memory_attention(current_vision_features=feats_seq, memory=memory,
                                      current_vision_position_embeddings=cur_pos,
                                      memory_posision_embeddings=memory_pos, num_object_pointer_tokens=4,
                                      num_spatial_memory_tokens=2)
    d["memory_attention.output"] = diffs_of(att_o, att_h.reshape(att_o.shape))
    return d


# ---------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", type=Path, default=repo_root() / "fixtures" / "model" / "model.safetensors")
    ap.add_argument("--out", type=Path, default=repo_root() / "fixtures" / "original" / "edgetam.pt")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="max relative diff (max abs diff / max |original|) allowed in the functional check; "
                         "float32 noise is ~1e-5, a wrong key map gives differences of order 1")
    args = ap.parse_args()
    torch.set_num_threads(2)

    rules = parse_map()
    print(f"{MAP_FILE.relative_to(repo_root())}: {len(rules)} rules")
    hf_fixture = load_file(args.fixture)
    orig_model = build_original()
    orig_shapes = {k: v.shape for k, v in orig_model.state_dict().items()}
    print(f"original state_dict: {len(orig_shapes)} keys; transformers fixture: {len(hf_fixture)} keys")

    # 1. Key sets and shapes, both directions.
    orig_sd = to_original(hf_fixture, orig_shapes, rules)
    assert list(orig_sd) == list(orig_shapes)
    for r in rules:  # every rule is used by the original model (no dead rules)
        assert any(r.regex().match(k) for k in orig_shapes), f"map line {r.line}: rule matches no key"
    back = to_transformers(orig_sd, rules)
    assert set(back) == set(hf_fixture), sorted(set(back) ^ set(hf_fixture))[:10]

    # 2. Bitwise round trip, except the second target of each `copy` rule: transformers keeps two
    #    copies of the prompt encoder's Gaussian matrix where the original has one tensor, and the
    #    random fixture gave them different values; the original layout cannot hold both.
    copy_only = set()
    for r in rules:
        if r.kind == "copy":
            copy_only.update(r.targets[1:])
    for k, t in hf_fixture.items():
        if k in copy_only:
            print(f"  not representable in the original layout: {k} "
                  f"(fixture max|diff| to its copy source {maxdiff(t, back[k]):.4f})")
            continue
        assert t.dtype == back[k].dtype and torch.equal(t, back[k]), f"round trip changed {k}"
    print("round trip original -> transformers: bitwise equal on", len(hf_fixture) - len(copy_only), "tensors")

    # 3. Functional check on identical weights (fp32). The transformers model gets the mapped-back
    #    state dict, i.e. what the Rust loader produces from the .pt.
    orig_f32 = {k: (v.float() if v.is_floating_point() else v) for k, v in orig_sd.items()}
    missing, unexpected = orig_model.load_state_dict(orig_f32, strict=True)
    hf_model = make_model(1024)
    hf_model.load_state_dict({k: (v.float() if v.is_floating_point() else v) for k, v in back.items()},
                             strict=True)
    hf_model.eval()
    diffs = functional_check(orig_model, hf_model)
    print("functional comparison, original sam2 vs transformers (max abs diff, relative to max |original|):")
    for k, (a, r) in diffs.items():
        print(f"  {k:44s} abs {a:.3e}  rel {r:.3e}")
    bad = {k: v for k, v in diffs.items() if not v[1] <= args.tol}
    if bad:
        sys.exit(f"functional check failed (tol {args.tol}): {bad}")

    # 4. Write like Meta's release: {"model": state_dict}; floats as fp16 (exact for these values).
    to_save = {}
    for k, v in orig_sd.items():
        if v.is_floating_point():
            h = v.to(torch.float16)
            assert torch.equal(h.float(), v.float()), f"{k} is not fp16-representable"
            v = h
        to_save[k] = v.contiguous()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": to_save}, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {len(to_save)} tensors)")

    # Read it back the way a user would.
    again = torch.load(args.out, map_location="cpu", weights_only=True)["model"]
    assert list(again) == list(orig_shapes)
    assert all(torch.equal(again[k], to_save[k]) for k in again)


if __name__ == "__main__":
    main()
