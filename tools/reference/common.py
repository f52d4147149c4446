"""Shared helpers for the reference generators: the EdgeTAM config, deterministic random weights.

The reference is transformers' `EdgeTamVideoModel`, float32 on the CPU. Nothing in the Rust project
imports this; it only writes the committed fixtures under `fixtures/`.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import (
    EdgeTamVideoConfig,
    EdgeTamVideoModel,
    EdgeTamVisionConfig,
    Sam2ImageProcessor,
    Sam2VideoProcessor,
    Sam2VideoVideoProcessor,
    TimmWrapperConfig,
)

# The released EdgeTAM: 13,895,794 parameters (transformers' defaults add two more tensors).
EXPECTED_PARAMS = 13_895_794
SEED = 20261130


def make_config(image_size: int = 1024) -> EdgeTamVideoConfig:
    """EdgeTAM's config at `image_size`, with every size derived from it.

    Trap: `EdgeTamVisionConfig()` builds a resnet50 (a typo in its default timm config), so the timm
    architecture is named explicitly.
    """
    if image_size % 64:
        raise ValueError("image_size must be a multiple of 64")
    backbone = TimmWrapperConfig(
        architecture="repvit_m1",
        model_args={"in_chans": 3, "features_only": True, "out_indices": [0, 1, 2, 3]},
    )
    s = image_size
    vision = EdgeTamVisionConfig(
        backbone_config=backbone,
        backbone_feature_sizes=[[s // 4, s // 4], [s // 8, s // 8], [s // 16, s // 16]],
    )
    return EdgeTamVideoConfig(
        vision_config=vision,
        prompt_encoder_config={"image_size": s},
        image_size=s,
        memory_attention_rope_feat_sizes=[s // 16, s // 16],
        enable_temporal_pos_encoding_for_object_pointers=False,
        enable_occlusion_spatial_embedding=False,
    )


def make_model(image_size: int = 1024) -> EdgeTamVideoModel:
    model = EdgeTamVideoModel(make_config(image_size)).eval()
    arch = model.config.vision_config.backbone_config.architecture
    assert arch == "repvit_m1", arch
    n = sum(p.numel() for p in model.parameters())
    assert n == EXPECTED_PARAMS, f"parameter count {n} != {EXPECTED_PARAMS}: wrong backbone?"
    return model


def make_processor(image_size: int) -> Sam2VideoProcessor:
    size = {"height": image_size, "width": image_size}
    mask_size = {"height": image_size // 4, "width": image_size // 4}
    return Sam2VideoProcessor(
        image_processor=Sam2ImageProcessor(size=size, mask_size=mask_size),
        video_processor=Sam2VideoVideoProcessor(size=size),
        target_size=image_size,
    )


def fp16_round(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float16).to(t.dtype) if t.is_floating_point() else t


def calibration_image(h: int, w: int, seed: int) -> torch.Tensor:
    """A smooth, structured uint8 RGB image (H, W, 3): gradients, discs and a little noise."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    img = torch.stack([xx, yy, 0.5 + 0.5 * torch.sin(6 * xx + 4 * yy)], dim=-1) * 0.6
    for _ in range(6):
        cx, cy, r = torch.rand(3, generator=g)
        col = torch.rand(3, generator=g)
        d = ((xx - cx) ** 2 + (yy - cy) ** 2).sqrt()
        inside = (d < 0.1 + 0.25 * r).float()[..., None]
        img = img * (1 - inside) + col * inside
    img = img + 0.03 * torch.randn(img.shape, generator=g)
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def _is_norm_weight(model: torch.nn.Module, name: str) -> bool:
    mod_name, _, leaf = name.rpartition(".")
    mod = model.get_submodule(mod_name) if mod_name else model
    norm_types = (torch.nn.LayerNorm, torch.nn.BatchNorm2d, torch.nn.GroupNorm)
    return isinstance(mod, norm_types) and leaf == "weight"


@torch.no_grad()
def randomize(model: EdgeTamVideoModel, seed: int = SEED) -> None:
    """Every parameter and buffer random, deterministic, fp16-representable, and not degenerate."""
    g = torch.Generator().manual_seed(seed)

    def randn(shape):
        return torch.randn(shape, generator=g)

    def unif(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g)

    for name, p in model.named_parameters():
        shape = p.shape
        owner = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        if _is_norm_weight(model, name):
            p.copy_(unif(shape, 0.9, 1.1))
        elif name.endswith("memory_fuser.layers.0.scale") or name.endswith(".scale"):
            # ConvNeXt layer scale (1e-6 by default would make the fuser an identity).
            p.copy_(unif(shape, 0.1, 0.4))
        elif name.endswith("bias"):
            p.copy_(0.05 * randn(shape))
        elif isinstance(owner, torch.nn.ConvTranspose2d):
            # [in, out, k, k] with stride == k: each output sums `in` terms.
            p.copy_(randn(shape) / math.sqrt(shape[0]))
        elif isinstance(owner, (torch.nn.Linear, torch.nn.Conv2d)):
            p.copy_(randn(shape) / math.sqrt(math.prod(shape[1:])))
        else:
            # Embeddings, tokens, latents, no-memory / no-object parameters, temporal encodings.
            p.copy_(randn(shape) * (0.5 if name.startswith("no_") or "temporal" in name else 1.0))
        p.copy_(fp16_round(p))
    # Object-score head: widen its spread and centre it above zero, so prompted objects are
    # "present" with a margin (scores straddling 0 would make the NO_OBJ decision fragile).
    last = [m for m in model.mask_decoder.pred_obj_score_head.modules() if isinstance(m, torch.nn.Linear)][-1]
    last.weight.mul_(4.0)
    last.bias.copy_(fp16_round(last.bias * 4.0 + 3.25))
    persistent = set(model.state_dict().keys())
    for name, b in model.named_buffers():
        if name not in persistent:
            continue  # non-persistent (RoPE inv_freq): derived from the config, never saved
        if name.endswith("num_batches_tracked"):
            b.fill_(int(torch.randint(1, 1000, (1,), generator=g)))
        elif name.endswith("running_mean") or name.endswith("running_var"):
            continue  # set by calibrate_batchnorm
        elif b.is_floating_point():
            b.copy_(fp16_round(randn(b.shape)))


@torch.no_grad()
def calibrate_batchnorm(model: EdgeTamVideoModel, image_size: int, seed: int = SEED) -> None:
    """Set RepViT BatchNorm running stats from one calibration image, then perturb them.

    Random convolutions make activations grow layer by layer; statistics taken from real inputs
    keep every stage in a sane range while staying random (perturbed, fp16-rounded).
    """
    g = torch.Generator().manual_seed(seed + 1)
    proc = make_processor(image_size)
    img = calibration_image(image_size * 3 // 4, image_size, seed + 2)
    pixels = proc(images=img.numpy(), return_tensors="pt").pixel_values
    hooks = []

    def pre_hook(bn, args):
        x = args[0]
        mean = x.mean(dim=(0, 2, 3))
        var = x.var(dim=(0, 2, 3), unbiased=False)
        std = var.sqrt()
        bn.running_mean.copy_(fp16_round(mean + 0.1 * std * torch.randn(mean.shape, generator=g)))
        bn.running_var.copy_(fp16_round(var * (0.8 + 0.4 * torch.rand(var.shape, generator=g)) + 1e-3))

    for mod in model.vision_encoder.backbone.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            hooks.append(mod.register_forward_pre_hook(pre_hook))
    model.vision_encoder(pixels)
    for h in hooks:
        h.remove()


@torch.no_grad()
def normalize_neck(model: EdgeTamVideoModel, image_size: int, seed: int = SEED) -> None:
    """Scale the FPN convs by powers of two so each used level has a std near 1.

    Random RepViT stages come out with std ~30; fed as attention keys to the mask decoder, such
    features make attention logits so large that float32 rounding is amplified ~10x per attention
    step and the reference's own f32 output drifts ~1e-3 from its f64 output, which would make a
    1e-4 parity bar meaningless. Trained EdgeTAM features are O(1). 
    """
    proc = make_processor(image_size)
    img = calibration_image(image_size * 3 // 4, image_size, seed + 2)
    pixels = proc(images=img.numpy(), return_tensors="pt").pixel_values
    convs = model.vision_encoder.neck.convs
    # FPN level 0 <- convs.3, level 1 <- convs.2, level 2 <- convs.1 (+ top-down of convs.0).
    for level, idx in ((0, [3]), (1, [2]), (2, [1, 0])):
        std = float(model.vision_encoder(pixels).fpn_hidden_states[level].std())
        scale = 2.0 ** -round(math.log2(std))
        for i in idx:
            # (Rounded again: tiny values can fall into fp16's subnormal range.)
            convs[i].weight.copy_(fp16_round(convs[i].weight * scale))
            convs[i].bias.copy_(fp16_round(convs[i].bias * scale))


def persistent_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]
