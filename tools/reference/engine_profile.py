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

STAGE = re.compile(r"(stem|stages?\.\d+|neck|lateral\.\d+|unfused_projections)")


def stage_of(original_names: str) -> str:
    """The RepViT stage (or FPN part) a fused node came from, read from its original layers."""
    m = STAGE.search(original_names)
    return m.group(1) if m else "other"


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

    nodes = []
    for name, times in per_node.items():
        d = detail.get(name, {"layouts": "?", "precision": "?", "original": ""})
        nodes.append({"name": name, "type": kind[name][0], "primitive": kind[name][1],
                      "ms": statistics.median(times), "layouts": d["layouts"],
                      "precision": d["precision"], "fused": d["original"].count(",") + 1 if d["original"] else 0,
                      "original": d["original"], "stage": stage_of(d["original"] or name)})
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
              f"{n['layouts'][:14]:<14} {n['precision'][:5]:<5} {n['fused']:>5}  {n['stage']} / {n['name'][:60]}")

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
    by_stage = table(lambda n: n["stage"], "by RepViT stage (from the fused original layers)")
    by_layout = table(lambda n: n["layouts"], "by output layout")
    if a.json:
        a.json.write_text(json.dumps({
            "openvino": ov.get_version(), "engine": a.engine, "size": a.size, "threads": a.threads,
            "max_isa": a.max_isa, "iters": a.iters, "warmup": a.warmup, "wall_ms_median": wall,
            "wall_ms_min": min(walls), "counters_ms": total, "nodes": nodes, "by_kind": by_kind,
            "by_stage": by_stage, "by_layout": by_layout}, indent=1))
        print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
