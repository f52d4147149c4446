#!/usr/bin/env python3
"""Writes the hand-made seed corpora of the fuzz targets into fuzz/seeds/<target>/.

Deterministic, standard library only (the PNG, BMP, safetensors and torch.save files are
written byte by byte; the one JPEG comes from GStreamer's jpegenc when gst-launch-1.0 is there).
Run from anywhere: python3 fuzz/make_seeds.py. The committed seeds are its output plus what
`cargo fuzz cmin` kept from the long runs (fuzz/README.md).
"""

import collections
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import types
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEEDS = os.path.join(HERE, "seeds")


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- prompt_spec -------------------------------------------------------------------------

PROMPTS = [
    "obj=1;frame=0;box=100,80,200,180",
    "obj=2;frame=0;point=520,210,1;point=600,90,0",
    "obj=3;frame=5;mask=masks/obj3.png",
    "obj=1;box=1.5,2e1,30,40;point=3,4,1",
    "obj=1;frame=0;box=100,80,400,360|obj=2;frame=0;point=520,210,1;point=600,90,0",
    " obj = 7 ; frame = 12 ; point = -1 , 2 , 0 ",
    "obj=4294967295;frame=18446744073709551615;box=inf,NaN,-0,1e39",
    "obj=1;bx=1,2,3,4",
]
for i, p in enumerate(PROMPTS):
    write("prompt_spec", f"spec{i}", p)

# --- config_json ---------------------------------------------------------------------------

fixture_config = os.path.join(ROOT, "fixtures/model/config.json")
with open(fixture_config) as f:
    cfg = json.load(f)
write("config_json", "fixture_1024.json", json.dumps(cfg, indent=1))
for size in (256, 64, 128):
    c = json.loads(json.dumps(cfg))
    c["image_size"] = size
    c["prompt_encoder_config"]["image_size"] = size
    c["vision_config"]["backbone_feature_sizes"] = [[size // 4] * 2, [size // 8] * 2, [size // 16] * 2]
    c["memory_attention_rope_feat_sizes"] = [size // 16] * 2
    write("config_json", f"fixture_{size}.json", json.dumps(c, indent=1))
write("config_json", "minimal.json",
      json.dumps({"vision_config": {"backbone_config": {"architecture": "repvit_m1"}}}))
write("config_json", "typo.json",
      json.dumps({"vision_config": {"backbone_config": {"archirecture": "resnet50"}}}))

# --- safetensors ---------------------------------------------------------------------------


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)]"""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


f32 = lambda vals: struct.pack(f"<{len(vals)}f", *vals)
write("safetensors", "small.safetensors", safetensors([
    ("no_memory_embedding", "F32", [1, 1, 4], f32([0.5, -1, 2, 3])),
    ("mask_decoder.iou_token.weight", "F16", [2, 2], struct.pack("<4e", 1, 2, 3, 4)),
    ("vision_encoder.backbone.timm_model.stem.conv1.bn.num_batches_tracked", "I64", [], struct.pack("<q", 7)),
    ("prompt_encoder.point_embed.weight", "BF16", [2], b"\x80\x3f\x00\x40"),
], {"format": "pt"}))
write("safetensors", "empty.safetensors", safetensors([]))
write("safetensors", "scalar_u8.safetensors", safetensors([("a", "U8", [3, 1], b"\x01\x02\x03"), ("b", "F64", [1], struct.pack("<d", 1.0))]))

# --- pt_checkpoint ---------------------------------------------------------------------------
# torch.save's format without torch: fake `torch` modules whose objects pickle under torch's
# global names, a persistent id per storage, protocol 2, stored zip entries.

torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
torch_tensor = types.ModuleType("torch._tensor")
sys.modules.update({"torch": torch, "torch._utils": torch_utils, "torch._tensor": torch_tensor})


def _rebuild_tensor_v2(*args):
    raise NotImplementedError


def _rebuild_parameter(*args):
    raise NotImplementedError


_rebuild_tensor_v2.__module__ = "torch._utils"
_rebuild_parameter.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2
torch_utils._rebuild_parameter = _rebuild_parameter
STORAGE_TYPES = {}
for tname in ("FloatStorage", "HalfStorage", "LongStorage", "BFloat16Storage", "DoubleStorage"):
    cls = type(tname, (), {"__module__": "torch"})
    setattr(torch, tname, cls)
    STORAGE_TYPES[tname] = cls


class Storage:
    def __init__(self, kind, key, numel):
        self.kind, self.key, self.numel = kind, key, numel


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce__(self):
        return (_rebuild_tensor_v2, self.args)


class Parameter:
    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce__(self):
        return (_rebuild_parameter, (self.tensor, True, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", STORAGE_TYPES[obj.kind], obj.key, "cpu", obj.numel)
        return None


def torch_save(state, storages, name):
    import io
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(state)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "little")
        for key, raw in storages.items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", "3\n")
    write("pt_checkpoint", name, out.getvalue())


def contiguous(size):
    stride, acc = [], 1
    for d in reversed(size):
        stride.insert(0, acc)
        acc *= d
    return stride


storages = {}
state = collections.OrderedDict()
n = 0


def add(name, size, kind="FloatStorage", wrap=False, stride=None, offset=0, numel=None):
    global n
    key = str(n)
    n += 1
    count = 1
    for d in size:
        count *= d
    numel = numel if numel is not None else offset + count
    fmt = {"FloatStorage": "f", "HalfStorage": "e", "LongStorage": "q", "DoubleStorage": "d"}.get(kind)
    raw = struct.pack(f"<{numel}{fmt}", *range(numel)) if fmt else b"\x80\x3f" * numel
    storages[key] = raw
    t = Tensor(Storage(kind, key, numel), offset, size, stride or contiguous(size))
    state[name] = Parameter(t) if wrap else t


add("maskmem_tpos_enc", [2, 1, 1, 4])
for i in range(4):
    add(f"sam_prompt_encoder.point_embeddings.{i}.weight", [1, 4], kind="HalfStorage")
add("spatial_perceiver.layers.0.attn.to_kv.weight", [4, 2], wrap=True)
add("sam_prompt_encoder.pe_layer.positional_encoding_gaussian_matrix", [2, 3], stride=[1, 2])
add("image_encoder.trunk.body.stem.0.c.weight", [2, 1, 1, 1], kind="BFloat16Storage")
add("image_encoder.trunk.body.stem.0.bn.num_batches_tracked", [], kind="LongStorage")
add("no_obj_ptr", [1, 3], kind="DoubleStorage", offset=2)
torch_save({"model": state}, storages, "key_map.pt")
small = collections.OrderedDict()
small["no_mem_embed"] = state["maskmem_tpos_enc"]
torch_save({"model": small}, {"0": storages["0"]}, "one_tensor.pt")
torch_save({"model": collections.OrderedDict()}, {}, "empty_state.pt")
torch_save({"optimizer": 1}, {}, "no_model_key.pt")

# --- mask_png ------------------------------------------------------------------------------


def png(width, height, color_type, bit_depth, rows, palette=None):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))
    if palette:
        out += chunk(b"PLTE", palette)
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


write("mask_png", "gray8.png", png(4, 3, 0, 8, [bytes([0, 255, 0, 0])] * 3))
write("mask_png", "gray1.png", png(8, 2, 0, 1, [b"\x0f", b"\xf0"]))
write("mask_png", "gray16.png", png(2, 2, 0, 16, [b"\x00\x00\xff\xff"] * 2))
write("mask_png", "rgb8.png", png(2, 2, 2, 8, [b"\x00\x00\x00\xff\x00\x00"] * 2))
write("mask_png", "rgba8.png", png(2, 1, 6, 8, [b"\x00\x00\x00\x00\x01\x02\x03\xff"]))
write("mask_png", "palette.png", png(3, 1, 3, 8, [b"\x00\x01\x00"], palette=b"\x00\x00\x00\xff\xff\xff"))
write("mask_png", "empty_mask.png", png(2, 2, 0, 8, [b"\x00\x00"] * 2))
# A 2x2 24-bit BMP (bottom-up rows padded to 4 bytes).
pixels = (b"\x00\x00\x00\xff\xff\xff" + b"\x00\x00") * 2
bmp = b"BM" + struct.pack("<IHHI", 54 + len(pixels), 0, 0, 54)
bmp += struct.pack("<IiiHHIIiiII", 40, 2, 2, 1, 24, 0, len(pixels), 2835, 2835, 0, 0) + pixels
write("mask_png", "rgb.bmp", bmp)
if shutil.which("gst-launch-1.0"):
    out = os.path.join(SEEDS, "mask_png", "mask.jpg")
    subprocess.run(["gst-launch-1.0", "-q", "videotestsrc", "num-buffers=1", "pattern=circular", "!",
                    "video/x-raw,width=16,height=8", "!", "jpegenc", "quality=30", "!", "filesink",
                    f"location={out}"], check=True)

# --- element_prompts -----------------------------------------------------------------------
# One selector byte (mod 6: 0 prompts property, 1 add-prompt, 2 prompt event, 3 add-points,
# 4 prompt-roi-types, 5 device), the string, a zero byte, the mask file's bytes. Prompt events:
# "NAME SPEC", the spec a string field (selector 2), an int (8) or missing (14).

gray = png(4, 3, 0, 8, [bytes([0, 255, 0, 0])] * 3)
ELEMENT = [
    (0, "obj=1;frame=0;box=100,80,200,180|obj=2;frame=3;point=5,6,1", b""),
    (0, "obj=3;frame=5;mask=m.png", gray),
    (1, "obj=2;point=520,210,1;point=600,90,0", b""),
    (1, "obj=9;mask=m.png", gray),
    (2, "edgetam-prompt obj=1;box=1,2,30,40", b""),
    (2, "edgetam-prompt obj=4;mask=x.png", gray),
    (8, "edgetam-prompt 3", b""),
    (14, "edgetam-prompt", b""),
    (2, "other-event obj=1;box=1,2,30,40", b""),
    (3, "120,80,1;300,40,0", b""),
    (4, "face, person,,car ", b""),
    (5, "cuda:0", b""),
    (5, "cpu", b""),
]
for i, (which, text, mask) in enumerate(ELEMENT):
    write("element_prompts", f"input{i}", bytes([which]) + text.encode() + (b"\x00" + mask if mask else b""))

print("seeds written to", SEEDS)
