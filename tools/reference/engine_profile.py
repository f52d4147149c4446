"""OpenVINO's own per-layer profile of the image encoder: where its time goes, layer by layer.

The starting point for matching OpenVINO's f32 encoder (issue 48): the same graph `engines.py`
converts (RepViT-M1 + FPN with the stride-4/8 projections fused, random weights), compiled by
OpenVINO's CPU plugin with performance counters on, run WARMUP + ITERS times. For every executed
node it prints what the plugin chose and how long it took (median over the timed runs):

* the node type after the plugin's fusions (`Convolution`, `Eltwise`, ...) and its primitive
  (`jit_avx2_FP32`, `brgconv_avx512`, `jit_uni_dw`, ...);
* the output layout (`nChw8c`, `nChw16c` are oneDNN's blocked layouts; `abcd` is plain NCHW) and
  runtime precision;
* which original layers were fused into it (`originalLayersNames`: a convolution with its bias,
  activation and residual add shows them all);

then the totals per (node type, primitive) and per RepViT stage, and the time of one whole
inference measured outside the counters.

    PYTHON tools/reference/engine_profile.py --size 512 [--engine openvino-f32|openvino]
        [--threads 2] [--warmup 5] [--iters 20] [--max-isa avx2] [--top 25] [--json out.json]
        [--ours bench.json]

`--ours` reads an `edgetam bench --layers --json` report (the same size and threads) and prints
the two side by side, block by block (a node whose fused layers name no module, such as a
depthwise conv with its BatchNorm folded, is counted in the block of the next node that does).

Never imported by the Rust build, its tests or CI; needs tools/reference/requirements.txt.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_isa import from_argv  # noqa: E402

from_argv()

import torch  # noqa: E402

from common import make_model  # noqa: E402
from engines import _FusedImageFeatures, _rt_value  # noqa: E402

# A node's block, read from the module paths of the original layers it fused (`__module.backbone.
# timm_model.stages_2.blocks.3.channel_mixer...`), named as `edgetam bench --layers` names ours.
BLOCK = re.compile(r"(stem|stages_\d+\.(?:blocks\.\d+|downsample\.pre_block|downsample))")
FPN = "fpn + conv_s0/s1"


def block_of(names: str) -> str | None:
    """The RepViT block a node came from; the FPN (laterals, top-down, the fused stride-4/8
    projections) is one part; None when no original layer names a module (BatchNorm folds
    such as `Multiply_123`)."""
    m = BLOCK.search(names)
    if m:
        return m.group(1)
    return FPN if "__module." in names else None


def our_block(layer: str) -> str:
    """Ours (`edgetam bench --layers` JSON) on the same blocks: `stages_2.blocks.3.se` ->
    `stages_2.blocks.3`, `stages_1.downsample.ffn` -> `stages_1.downsample`, the neck and the
    high-resolution convs -> the FPN part."""
    if layer.startswith("stem"):
        return "stem"
    m = BLOCK.match(layer)
    return m.group(1) if m else FPN


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=512, help="model input side (a multiple of 256)")
    ap.add_argument("--engine", choices=("openvino-f32", "openvino"), default="openvino-f32",
                    help="openvino-f32: held to f32; openvino: its default precision")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--top", type=int, default=25, help="the slowest nodes listed one by one")
    ap.add_argument("--max-isa", choices=("avx2", "avx512"),
                    help="hold OpenVINO to this instruction set (oneDNN's switch)")
    ap.add_argument("--json", type=Path, help="write every node's record here")
    ap.add_argument("--ours", type=Path,
                    help="an `edgetam bench --layers --json` report to set beside, block by block")
    a = ap.parse_args()
    if a.iters < 1 or a.warmup < 0:
        ap.error("--iters must be at least 1 and --warmup not negative")
    if a.size % 256:
        ap.error(f"--size {a.size}: EdgeTAM's input side is a multiple of 256")

    import openvino as ov

    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    model = make_model(a.size)
    graph = _FusedImageFeatures(model).eval()
    pixels = torch.randn(1, 3, a.size, a.size, generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    converted = ov.convert_model(graph, example_input=(pixels,))
    config = {"INFERENCE_NUM_THREADS": a.threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
              "PERF_COUNT": True}
    if a.engine == "openvino-f32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = ov.Core().compile_model(converted, "CPU", config)
    convert_s = time.perf_counter() - t0
    request = compiled.create_infer_request()
    feed = [pixels.numpy()]
    for _ in range(a.warmup):
        request.infer(feed)

    per_node: dict[str, list[float]] = defaultdict(list)
    kind: dict[str, tuple[str, str]] = {}
    walls = []
    for _ in range(a.iters):
        t = time.perf_counter()
        request.infer(feed)
        walls.append((time.perf_counter() - t) * 1e3)
        for info in request.profiling_info:
            if str(info.status).endswith("NOT_RUN"):
                continue
            per_node[info.node_name].append(info.real_time.total_seconds() * 1e3)
            kind[info.node_name] = (info.node_type, info.exec_type)

    # The executed graph: layouts, precisions and the original layers each node fused.
    detail = {}
    for op in compiled.get_runtime_model().get_ops():
        rt = op.get_rt_info()
        detail[op.get_friendly_name()] = {
            "layouts": _rt_value(rt, "outputLayouts"),
            "precision": _rt_value(rt, "runtimePrecision"),
            "original": _rt_value(rt, "originalLayersNames"),
        }
    # Blocks in execution order (the counters' order); an unnamed node takes the block of the
    # next named node: a block's first layer is its depthwise token mixer, BatchNorm folded.
    order = [info.node_name for info in request.profiling_info]
    block: dict[str, str] = {}
    pending = []
    for name in order:
        b = block_of(f"{detail.get(name, {}).get('original', '')},{name}")
        if b is None:
            pending.append(name)
            continue
        for p in pending:
            block[p] = b
        pending = []
        block[name] = b
    for p in pending:
        block[p] = FPN

    nodes = []
    for name, times in per_node.items():
        d = detail.get(name, {"layouts": "?", "precision": "?", "original": ""})
        nodes.append({"name": name, "type": kind[name][0], "primitive": kind[name][1],
                      "ms": statistics.median(times), "layouts": d["layouts"],
                      "precision": d["precision"], "fused": d["original"].count(",") + 1 if d["original"] else 0,
                      "original": d["original"], "block": block.get(name, FPN)})
    nodes.sort(key=lambda n: -n["ms"])
    total = sum(n["ms"] for n in nodes)
    wall = statistics.median(walls)

    print(f"OpenVINO {ov.get_version()} ({a.engine}), image encoder at {a.size}, {a.threads} threads, "
          f"{a.iters} timed runs after {a.warmup}; converted + compiled in {convert_s:.1f} s")
    print(f"one inference: median {wall:.2f} ms, min {min(walls):.2f} ms; the nodes' counters sum to "
          f"{total:.2f} ms over {len(nodes)} executed nodes")
    print(f"\nthe {min(a.top, len(nodes))} slowest nodes (median ms):")
    print(f"{'ms':>7} {'share':>6}  {'type':<14} {'primitive':<26} {'layout':<14} {'prec':<5} fused  stage / name")
    for n in nodes[: a.top]:
        print(f"{n['ms']:7.3f} {100 * n['ms'] / total:5.1f}%  {n['type']:<14} {n['primitive']:<26} "
              f"{n['layouts'][:14]:<14} {n['precision'][:5]:<5} {n['fused']:>5}  {n['block']} / {n['name'][:60]}")

    def table(key, title):
        agg: dict = defaultdict(lambda: [0, 0.0])
        for n in nodes:
            k = key(n)
            agg[k][0] += 1
            agg[k][1] += n["ms"]
        print(f"\n{title}:")
        for k, (count, ms) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            print(f"{ms:8.3f} ms {100 * ms / total:5.1f}%  {count:4d} nodes  {k}")
        return {str(k): {"nodes": c, "ms": m} for k, (c, m) in agg.items()}

    by_kind = table(lambda n: f"{n['type']} / {n['primitive']}", "by node type / primitive")
    by_stage = table(lambda n: n["block"].split(".")[0], "by RepViT stage (from the fused original layers)")
    by_layout = table(lambda n: n["layouts"], "by output layout")
    if a.json:
        a.json.write_text(json.dumps({
            "openvino": ov.get_version(), "engine": a.engine, "size": a.size, "threads": a.threads,
            "max_isa": a.max_isa, "iters": a.iters, "warmup": a.warmup, "wall_ms_median": wall,
            "wall_ms_min": min(walls), "counters_ms": total, "nodes": nodes, "by_kind": by_kind,
            "by_stage": by_stage, "by_layout": by_layout}, indent=1))
        print(f"\nwrote {a.json}")
    if a.ours:
        side_by_side(a.ours, nodes, order, wall, a.engine)


def side_by_side(path: Path, nodes: list, order: list, wall: float, engine: str) -> None:
    """Ours (the first serial configuration of an `edgetam bench --layers` JSON) against the
    engine's counters, block by block in execution order."""
    report = json.loads(path.read_text())
    config = next((c for c in report.get("configs", []) if c.get("layers")), None)
    if config is None:
        sys.exit(f"{path}: no configuration with `layers` (run `edgetam bench --layers --json`)")
    ours: dict[str, float] = defaultdict(float)
    for layer in config["layers"]:
        ours[our_block(layer["layer"])] += layer["ms_per_frame"]
    theirs: dict[str, float] = defaultdict(float)
    for n in nodes:
        theirs[n["block"]] += n["ms"]
    blocks = list(dict.fromkeys(n["block"] for n in sorted(nodes, key=lambda n: order.index(n["name"]))))
    blocks += [b for b in ours if b not in theirs]
    frames = config.get("frames", [])
    stage = sum(f["image_encoder_ms"] for f in frames) / max(len(frames), 1)
    print(f"\nours ({config.get('dtype')}, {path.name}) against {engine}, block by block (ms; ratio = ours / theirs):")
    print(f"{'ours':>8} {'theirs':>8} {'ratio':>6}  block")
    for b in blocks:
        o, t = ours.get(b, 0.0), theirs.get(b, 0.0)
        ratio = f"{o / t:6.2f}" if t > 0 else "     -"
        print(f"{o:8.3f} {t:8.3f} {ratio}  {b}")
    o, t = sum(ours.values()), sum(theirs.values())
    print(f"{o:8.3f} {t:8.3f} {o / t:6.2f}  all layers (probes / counters)")
    print(f"{stage:8.3f} {wall:8.3f} {stage / wall:6.2f}  the whole encoder (our stage time / one inference)")


if __name__ == "__main__":
    main()
