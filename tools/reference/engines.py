"""The reference tracker's per-frame stages run by the engines CPU users deploy.

`use_engine(model, engine, threads)` converts each per-frame stage of transformers'
`EdgeTamVideoModel` once and swaps it into the model in place, so the streaming loop (the session,
memory bank, object pointers, post-processing) stays transformers' own and the stage hooks of
`time_reference.py` time the converted stages exactly where they timed PyTorch's:

* image features: `vision_encoder` (RepViT-M1 + FPN) with the decoder's `conv_s0`/`conv_s1`; the
  stride-4/8 FPN lateral convs and those projections are two 1x1 convolutions in a row, fused into
  one as edgetam-rs does (an engine is compared on the same arithmetic); the position encodings do
  not depend on the frame and are computed once;
* `memory_attention`, with its memories (their count grows over the first frames);
* `prompt_encoder` and `mask_decoder`;
* `memory_encoder` and `spatial_perceiver`.

Engines (`ENGINES`): `torch` (nothing swapped), `openvino-f32` (OpenVINO's CPU plugin held to
f32: `INFERENCE_PRECISION_HINT=f32`), `openvino` (its default precision: bf16 where the CPU has
AVX512-BF16 or AMX, f32 elsewhere), `onnxruntime` (torch.onnx export, opset 17, ONNX Runtime's CPU
provider with every graph optimisation).

A stage is converted per call signature: the shapes of its tensors and the values of its
non-tensor arguments (the number of object-pointer tokens, `multimask_output`, which prompt kinds
are present). Transformers' code turns those into Python control flow and slicing, so each
signature is its own static graph: memory attention meets one per memory count while the bank
fills (8 at most for 7 memories and 16 pointers, then one). Conversions happen at the first call
of a signature and are timed apart (`Engine.compile_seconds`); `time_reference.py` runs the whole
stream once untimed first so that no conversion lands in a timed frame.

Never imported by the Rust build, its tests or CI; needs tools/reference/requirements.txt.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils import _pytree as pytree

ENGINES = ("torch", "openvino-f32", "openvino", "onnxruntime")


class Engine:
    """One engine's compiler and runner for flat (tensors in, tensors out) torch modules."""

    def __init__(self, name: str, threads: int, workdir: Path):
        if name not in ENGINES[1:]:
            raise ValueError(f"unknown engine {name!r}: one of {', '.join(ENGINES)}")
        self.name = name
        self.threads = threads
        self.workdir = workdir
        self.compile_seconds = 0.0
        self.graphs = 0
        if name.startswith("openvino"):
            import openvino as ov

            self.ov = ov
            self.core = ov.Core()
            self.version = ov.get_version()
        else:
            import onnxruntime as ort

            self.ort = ort
            self.version = ort.__version__
        self.compiled: list = []

    def compile(self, flat: nn.Module, inputs: tuple[torch.Tensor, ...], tag: str):
        """Converts `flat` (called with `inputs`) and returns a runner: numpy arrays in, numpy out."""
        t0 = time.perf_counter()
        if self.name.startswith("openvino"):
            runner = self._compile_openvino(flat, inputs)
        else:
            runner = self._compile_onnxruntime(flat, inputs, tag)
        self.compile_seconds += time.perf_counter() - t0
        self.graphs += 1
        return runner

    def _compile_openvino(self, flat, inputs):
        ov = self.ov
        model = ov.convert_model(flat, example_input=inputs)
        config = {"INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY",
                  "NUM_STREAMS": 1}
        if self.name == "openvino-f32":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = self.core.compile_model(model, "CPU", config)
        self.compiled.append(compiled)
        request = compiled.create_infer_request()

        def run(arrays):
            request.infer(arrays)
            return [request.get_output_tensor(i).data.copy() for i in range(len(compiled.outputs))]

        return run

    def _compile_onnxruntime(self, flat, inputs, tag):
        ort = self.ort
        path = self.workdir / f"{tag}_{self.graphs}.onnx"
        names = [f"in{i}" for i in range(len(inputs))]
        try:
            torch.onnx.export(flat, inputs, str(path), opset_version=17, input_names=names,
                              dynamo=False)
        except TypeError:  # a torch without the `dynamo` switch
            torch.onnx.export(flat, inputs, str(path), opset_version=17, input_names=names)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        # The exporter drops inputs the graph does not read (and constant-folds them away).
        kept = {i.name for i in session.get_inputs()}

        def run(arrays):
            feed = {n: a for n, a in zip(names, arrays) if n in kept}
            return session.run(None, feed)

        return run

    def precision_report(self) -> dict:
        """What the engine says it ran: OpenVINO's executed graph, layers counted by primitive
        (e.g. `brgconv_avx512_amx_bf16`, `jit_avx2_FP32`) and by runtime precision; for ONNX
        Runtime its version and providers only (it reports no per-layer kernel)."""
        if not self.name.startswith("openvino"):
            return {"engine": self.name, "version": self.version, "providers": ["CPUExecutionProvider"]}
        primitives: Counter = Counter()
        precisions: Counter = Counter()
        for compiled in self.compiled:
            for op in compiled.get_runtime_model().get_ops():
                rt = op.get_rt_info()
                prim = _rt_value(rt, "primitiveType")
                prec = _rt_value(rt, "runtimePrecision")
                if prim in ("", "?", "undef"):
                    continue
                primitives[prim] += 1
                precisions[prec] += 1
        hint = self.compiled[0].get_property("INFERENCE_PRECISION_HINT") if self.compiled else None
        return {"engine": self.name, "version": self.version, "precision_hint": str(hint),
                "primitives": dict(primitives.most_common()), "runtime_precisions": dict(precisions)}


def _rt_value(rt, key: str) -> str:
    """A runtime-info entry of OpenVINO's executed graph as text (an OVAny holding a string)."""
    if key not in rt:
        return "?"
    value = rt[key]
    try:
        return str(value.astype(str))
    except (AttributeError, TypeError, RuntimeError):
        return str(getattr(value, "value", value))


class _Flat(nn.Module):
    """A stage called with one fixed signature, as a module of tensors only: the non-tensor
    arguments are baked in, the outputs flattened (None outputs left out)."""

    def __init__(self, module: nn.Module, spec, constants: list, tensor_slots: list[int]):
        super().__init__()
        self.module = module
        self.spec = spec
        self.constants = constants
        self.tensor_slots = tensor_slots

    def forward(self, *tensors):
        leaves = list(self.constants)
        for slot, t in zip(self.tensor_slots, tensors):
            leaves[slot] = t
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        out = self.module(*args, **kwargs)
        return tuple(x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))


def _signature(leaves) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else ("const", repr(x))
                 for x in leaves)


class ConvertedStage(nn.Module):
    """Stands in for one of the model's stage modules: same call, the engine's graph underneath."""

    def __init__(self, module: nn.Module, engine: Engine, tag: str):
        super().__init__()
        self.module = module
        self.engine = engine
        self.tag = tag
        self.runners: dict[tuple, tuple] = {}

    def __getattr__(self, name):
        # The model reads a few attributes of its stage modules outside their forward (the
        # prompt encoder's mask input size, the decoder's conv_s0/conv_s1): the original's.
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("module"), name)

    def forward(self, *args, **kwargs):
        leaves, spec = pytree.tree_flatten((args, kwargs))
        key = (str(spec), _signature(leaves))
        entry = self.runners.get(key)
        if entry is None:
            slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
            constants = [None if isinstance(x, torch.Tensor) else x for x in leaves]
            flat = _Flat(self.module, spec, constants, slots).eval()
            inputs = tuple(leaves[i].contiguous() for i in slots)
            with torch.no_grad():
                # The structure of the outputs (which are None), from one eager call.
                out = self.module(*args, **kwargs)
            out_leaves, out_spec = pytree.tree_flatten(out)
            runner = self.engine.compile(flat, inputs, self.tag)
            entry = (runner, slots, out_leaves, out_spec)
            self.runners[key] = entry
        runner, slots, out_leaves, out_spec = entry
        arrays = [leaves[i].detach().contiguous().numpy() for i in slots]
        results = iter(runner(arrays))
        filled = [torch.from_numpy(np.ascontiguousarray(next(results))) if isinstance(x, torch.Tensor) else x
                  for x in out_leaves]
        return pytree.tree_unflatten(filled, out_spec)


class _FusedImageFeatures(nn.Module):
    """RepViT + FPN + the decoder's stride-4/8 projections, the three feature maps (high to low
    resolution) as `get_image_features` leaves them before flattening. Where an FPN level has no
    top-down path and both convolutions are 1x1 (EdgeTAM's stride-4 and stride-8 levels), the
    lateral conv and the projection are one 1x1 conv."""

    def __init__(self, model):
        super().__init__()
        enc = model.vision_encoder
        neck = enc.neck
        self.backbone = enc.backbone
        self.levels = enc.num_feature_levels
        self.top_down = set(neck.fpn_top_down_levels)
        n = len(neck.convs) - 1
        self.n = n
        self.lateral = nn.ModuleList()
        projections = {0: model.mask_decoder.conv_s0, 1: model.mask_decoder.conv_s1}
        self.fused = []
        for i in range(n + 1):
            conv = neck.convs[n - i]
            proj = projections.get(i)
            if proj is not None and (i not in self.top_down or i == n) and conv.kernel_size == (1, 1) \
                    and proj.kernel_size == (1, 1) and conv.stride == (1, 1) and proj.stride == (1, 1):
                w = proj.weight[:, :, 0, 0] @ conv.weight[:, :, 0, 0]
                b = proj.weight[:, :, 0, 0] @ conv.bias + proj.bias
                fused = nn.Conv2d(conv.in_channels, proj.out_channels, 1)
                fused.weight.data = w[:, :, None, None].clone()
                fused.bias.data = b.clone()
                self.lateral.append(fused)
                self.fused.append(i)
            else:
                self.lateral.append(conv)
        self.unfused_projections = nn.ModuleDict(
            {str(i): p for i, p in projections.items() if i not in self.fused})

    def forward(self, pixel_values):
        feats = self.backbone(pixel_values).last_hidden_state
        out = {}
        prev = None
        for i in range(self.n, -1, -1):
            lateral = self.lateral[i](feats[i])
            if i in self.top_down and i != self.n:
                prev = lateral + torch.nn.functional.interpolate(prev, scale_factor=2.0, mode="nearest")
            else:
                prev = lateral
            out[i] = prev
        maps = [out[i] for i in range(self.levels)]
        for i, p in self.unfused_projections.items():
            maps[int(i)] = p(maps[int(i)])
        return tuple(maps)


class ConvertedImageEncoder(nn.Module):
    """Stands in for `vision_encoder`: the fused graph's feature maps, the position encodings
    computed once (they depend on the input size only). `conv_s0`/`conv_s1` become identities:
    the graph applied them."""

    def __init__(self, model, engine: Engine, size: int):
        super().__init__()
        self.original = model.vision_encoder
        self.output_type = None
        pixels = torch.zeros(1, 3, size, size)
        with torch.no_grad():
            ref = self.original(pixels, return_dict=True)
        self.output_type = type(ref)
        self.position = tuple(p.clone() for p in ref.fpn_position_encoding)
        graph = _FusedImageFeatures(model).eval()
        with torch.no_grad():
            fused = graph(pixels)
            expect = (model.mask_decoder.conv_s0(ref.fpn_hidden_states[0]),
                      model.mask_decoder.conv_s1(ref.fpn_hidden_states[1]), ref.fpn_hidden_states[2])
        for a, b in zip(fused, expect):
            err = (a - b).abs().max().item()
            if err > 1e-3 * max(1.0, b.abs().max().item()):
                raise RuntimeError(f"fused image-feature graph differs from the model's by {err}")
        self.fused_levels = graph.fused
        self.run = engine.compile(graph, (pixels,), "image_encoder")

    def forward(self, pixel_values, return_dict=True, **kwargs):
        maps = self.run([pixel_values.detach().contiguous().numpy()])
        maps = tuple(torch.from_numpy(np.ascontiguousarray(m)) for m in maps)
        return self.output_type(last_hidden_state=None, fpn_hidden_states=maps,
                                fpn_position_encoding=self.position)


def use_engine(model, engine_name: str, threads: int, size: int, workdir: Path | None = None):
    """Swaps every per-frame stage of `model` for `engine_name`'s; returns the Engine (None for
    torch). The model must be in eval mode, float32, on the CPU."""
    if engine_name == "torch":
        return None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="edgetam-engines-"))
    engine = Engine(engine_name, threads, workdir)
    model.vision_encoder = ConvertedImageEncoder(model, engine, size)
    model.mask_decoder.conv_s0 = nn.Identity()
    model.mask_decoder.conv_s1 = nn.Identity()
    model.memory_attention = ConvertedStage(model.memory_attention, engine, "memory_attention")
    model.prompt_encoder = ConvertedStage(model.prompt_encoder, engine, "prompt_encoder")
    model.mask_decoder = ConvertedStage(model.mask_decoder, engine, "mask_decoder")
    model.memory_encoder = ConvertedStage(model.memory_encoder, engine, "memory_encoder")
    model.spatial_perceiver = ConvertedStage(model.spatial_perceiver, engine, "spatial_perceiver")
    return engine
