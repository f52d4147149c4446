#!/usr/bin/env python3
"""Time transformers' EdgeTAM streaming tracker frame by frame and stage by stage.

    python tools/reference/time_reference.py --size 1024 --objects 1,3 --frames 12 --warmup 2 \\
        --threads 2 --json /tmp/reference.json [--peak] [--device cpu|cuda] \\
        [--engine torch|openvino-f32|openvino|onnxruntime] [--max-isa avx2|avx512]

The reference twin of `edgetam bench`: the same synthetic frames and box prompts (defined in
`synthetic_frame` / `box_prompt` below; the Rust bench mirrors them exactly), random weights
(speed does not depend on the values), float32.

Per frame it records, in milliseconds (keys shared with `edgetam bench --json`):

* `preprocess_ms`: the processor call (resize + normalise), plus the copy to the device;
* `image_encoder_ms`: `vision_encoder` (RepViT + FPN) and the decoder's `conv_s0`/`conv_s1`
  (transformers runs those in `get_image_features`, once per frame);
* `memory_attention_ms`: `memory_attention`, summed over objects;
* `mask_decoder_ms`: `prompt_encoder` + `mask_decoder`, summed over objects;
* `memory_encoder_ms`: `memory_encoder` + `spatial_perceiver`, summed over objects;
* `postprocess_ms`: `post_process_masks` to the original size, binarised (skip: --no-postprocess);
* `end_to_end_ms`: preprocess + the model call + postprocess;
* `other_ms`: end to end minus the stages above (Python bookkeeping, memory gathering, ...).

`--engine` runs the per-frame stages in another engine users deploy (OpenVINO at f32 or at its
default precision, ONNX Runtime; `engines.py`), swapped into the same streaming loop and timed by
the same hooks; the stream then runs once untimed first, so that every graph it needs is
converted before the timed run. `--max-isa` holds the engines to an instruction set (oneDNN's
ONEDNN_MAX_CPU_ISA; the JSON's `engine_report` lists the kernels OpenVINO says it ran).

Stages are timed with forward pre/post hooks (`time.perf_counter`; on CUDA after a synchronize).
Frame 0 is the prompted frame (every object's box); statistics (median, p95, max) are over frames
`t >= max(1, warmup)`. `--frames` counts every frame, frame 0 included. `--frames 0` with `--peak`
only measures the machine's float32 matmul throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# --max-isa must reach oneDNN's environment before torch or an engine loads it.
from engine_isa import from_argv  # noqa: E402

from_argv()

import torch  # noqa: E402

from common import make_model, make_processor  # noqa: E402
from engines import ENGINES, use_engine  # noqa: E402

# Synthetic stream: 640x360 RGB.
W, H = 640, 360

STAGES = (
    "preprocess_ms",
    "image_encoder_ms",
    "memory_attention_ms",
    "mask_decoder_ms",
    "memory_encoder_ms",
    "postprocess_ms",
)
KEYS = ("end_to_end_ms",) + STAGES + ("other_ms",)


def square_centre(k: int, t: int) -> tuple[int, int]:
    """Centre of object k's square on frame t (it moves 4 px right per frame)."""
    return 120 + 150 * k + 4 * t, 160 + 60 * k


def synthetic_frame(t: int, objects: int) -> torch.Tensor:
    """Frame t (H, W, 3) uint8: background (x//3, y//2, 96) mod 256, then one 79x79 square per
    object (|x-cx| < 40 and |y-cy| < 40) coloured (230, 60k mod 256, 40)."""
    yy, xx = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    f = torch.stack([xx // 3, yy // 2, torch.full_like(xx, 96)], -1).to(torch.uint8)
    for k in range(objects):
        cx, cy = square_centre(k, t)
        inside = ((xx - cx).abs() < 40) & ((yy - cy).abs() < 40)
        f[inside] = torch.tensor([230, (60 * k) % 256, 40], dtype=torch.uint8)
    return f


def box_prompt(k: int) -> list[float]:
    """Object k+1's box on frame 0: 90x90 around the square's centre, (x0, y0, x1, y1)."""
    cx, cy = square_centre(k, 0)
    return [cx - 45.0, cy - 45.0, cx + 45.0, cy + 45.0]


class StageTimer:
    """Forward pre/post hooks accumulating wall time per stage for the current frame."""

    def __init__(self, model, device: str):
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.acc: dict[str, float] = {}
        self.handles = []
        stages = {
            "image_encoder_ms": [model.vision_encoder, model.mask_decoder.conv_s0, model.mask_decoder.conv_s1],
            "memory_attention_ms": [model.memory_attention],
            "mask_decoder_ms": [model.prompt_encoder, model.mask_decoder],
            "memory_encoder_ms": [model.memory_encoder, model.spatial_perceiver],
        }
        for stage, modules in stages.items():
            for m in modules:
                self._hook(m, stage)

    def _hook(self, module, stage: str) -> None:
        start: list[float] = []

        def pre(_mod, _args):
            self.sync()
            start.append(time.perf_counter())

        def post(_mod, _args, _out):
            self.sync()
            self.acc[stage] = self.acc.get(stage, 0.0) + (time.perf_counter() - start.pop()) * 1e3

        self.handles.append(module.register_forward_pre_hook(pre))
        self.handles.append(module.register_forward_hook(post))

    def take(self) -> dict[str, float]:
        out, self.acc = self.acc, {}
        return out


def percentile(sorted_vals: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_vals:
        return float("nan")
    rank = max(1, -(-len(sorted_vals) * q // 100))  # ceil(n q / 100)
    return sorted_vals[int(rank) - 1]


def summarize(frames: list[dict], first: int) -> dict[str, dict[str, float]]:
    used = [f for f in frames if f["frame"] >= first]
    out: dict[str, dict[str, float]] = {"median": {}, "p95": {}, "max": {}}
    for key in KEYS:
        vals = sorted(f[key] for f in used)
        if not vals:
            continue
        out["median"][key] = statistics.median(vals)
        out["p95"][key] = percentile(vals, 95)
        out["max"][key] = vals[-1]
    return out


@torch.no_grad()
def run_config(model, proc, timer: StageTimer, objects: int, frames: int, device: str,
               postprocess: bool, verbose: bool) -> list[dict]:
    session = proc.init_video_session(inference_device=device, dtype=torch.float32)
    sync = timer.sync
    rows = []
    for t in range(frames):
        img = synthetic_frame(t, objects).numpy()  # the decoded frame is given, not timed
        timer.take()
        sync()
        t0 = time.perf_counter()
        inp = proc(images=img, return_tensors="pt")
        pixels = inp.pixel_values[0].to(device)
        sync()
        t1 = time.perf_counter()
        if t == 0:
            # One call for every object (a second call would replace the first's `obj_with_new_inputs`).
            proc.add_inputs_to_inference_session(
                session, frame_idx=0, obj_ids=list(range(1, objects + 1)),
                input_boxes=[[box_prompt(k) for k in range(objects)]],
                original_size=inp.original_sizes[0])
        out = model(inference_session=session, frame=pixels)
        sync()
        t2 = time.perf_counter()
        post_ms = 0.0
        if postprocess:
            proc.post_process_masks([out.pred_masks], original_sizes=[[H, W]], binarize=True)
            sync()
            post_ms = (time.perf_counter() - t2) * 1e3
        e2e = (t2 - t0) * 1e3 + post_ms
        row = {"frame": t, "prompted": t == 0, "end_to_end_ms": e2e,
               "preprocess_ms": (t1 - t0) * 1e3, "postprocess_ms": post_ms}
        stages = timer.take()
        for key in STAGES[1:-1]:
            row[key] = stages.get(key, 0.0)
        row["other_ms"] = e2e - sum(row[k] for k in STAGES)
        rows.append(row)
        if verbose:
            print(f"  {objects} obj frame {t:3d}: " + " ".join(
                f"{k[:-3]} {row[k]:.1f}" for k in KEYS), flush=True)
    return rows


def matmul_peak(device: str, reps: int = 5) -> dict[str, float]:
    """Best-of-`reps` float32 matmul throughput in GFLOP/s (2 flops per multiply-add)."""
    shapes = {
        "matmul_2048x2048x2048": (2048, 2048, 2048),
        # Memory-attention-like: Q K^T (4096 x 256 . 256 x 4096) and A V (4096 x 4096 . 4096 x 256).
        "qk_4096x256x4096": (4096, 256, 4096),
        "av_4096x4096x256": (4096, 4096, 256),
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {}
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, device=device)
        b = torch.randn(k, n, device=device)
        torch.matmul(a, b)  # warm-up
        best = float("inf")
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            torch.matmul(a, b)
            sync()
            best = min(best, time.perf_counter() - t0)
        out[name] = 2.0 * m * k * n / best / 1e9
    return out


def cpu_info() -> dict:
    """The first processor of /proc/cpuinfo: name, x86 family/model, the ISA the fast paths need
    (the same fields as `edgetam bench`'s JSON): "AMD EPYC" alone names several
    microarchitectures whose AVX-512 throughput differs by 2x."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor()
    family = int(fields["cpu family"]) if fields.get("cpu family", "").isdigit() else None
    model = int(fields["model"]) if fields.get("model", "").isdigit() else None
    flags = fields.get("flags", "").split()
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    uarch = None
    if fields.get("vendor_id") == "AuthenticAMD" and family is not None and model is not None:
        if family == 26:
            uarch = "Zen 5"
        elif family == 25:
            uarch = "Zen 4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF else "Zen 3"
        elif family == 23:
            uarch = "Zen 1/2"
    parts = ([uarch] if uarch else []) + ([f"family {family} model {model}"] if family is not None else [])
    desc = name + (f" ({', '.join(parts)}; {' '.join(isa)})" if parts or isa else "")
    return {"cpu": name, "cpu_description": desc, "cpu_family": family, "cpu_model": model,
            "microarchitecture": uarch, "isa": isa}


def machine_info(device: str, threads: int) -> dict:
    info = cpu_info()
    info.update({"logical_cpus": os.cpu_count(), "system": platform.platform(),
                 "implementation": "transformers EdgeTamVideoModel", "torch": torch.__version__,
                 "torch_threads": torch.get_num_threads(), "threads_requested": threads})
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def print_table(configs: list[dict]) -> None:
    cols = ("end_to_end_ms",) + STAGES + ("other_ms",)
    print(f"{'objects':>7} {'stat':>6} " + " ".join(f"{c[:-3][:13]:>13}" for c in cols))
    for c in configs:
        for stat in ("median", "p95", "max"):
            vals = c.get(stat, {})
            print(f"{c['objects']:>7} {stat:>6} " + " ".join(
                f"{vals.get(k, float('nan')):>13.1f}" for k in cols))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024, help="model input side (multiple of 64)")
    ap.add_argument("--objects", default="1", help="comma-separated object counts, e.g. 1,3")
    ap.add_argument("--frames", type=int, default=6, help="frames per configuration, frame 0 included")
    ap.add_argument("--warmup", type=int, default=1, help="leading frames left out of the statistics")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--peak", action="store_true", help="also measure float32 matmul GFLOP/s")
    ap.add_argument("--no-postprocess", action="store_true",
                    help="leave out post_process_masks (end to end = processor + model call)")
    ap.add_argument("--quiet", action="store_true", help="no per-frame lines")
    ap.add_argument("--engine", choices=ENGINES, default="torch",
                    help="the engine of the per-frame stages (engines.py); torch: transformers' own")
    ap.add_argument("--max-isa", choices=("avx2", "avx512"),
                    help="hold torch and the engines to this instruction set (oneDNN's switch)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    if a.engine != "torch" and a.device != "cpu":
        ap.error("--engine: the CPU engines run on --device cpu")
    result = {"implementation": "reference" if a.engine == "torch" else f"reference ({a.engine})",
              "engine": a.engine, "max_isa": a.max_isa, "machine": machine_info(a.device, a.threads),
              "threads": a.threads, "device": a.device, "dtype": "f32", "size": a.size,
              "frames": a.frames, "warmup": a.warmup, "stats_from_frame": max(1, a.warmup),
              "postprocess": not a.no_postprocess, "configs": []}
    if a.peak:
        result["peak_gflops"] = matmul_peak(a.device)
        print("fp32 matmul peak (GFLOP/s): " + ", ".join(f"{k} {v:.1f}" for k, v in result["peak_gflops"].items()))
    if a.frames > 0:
        model = make_model(a.size).to(a.device)
        proc = make_processor(a.size)
        engine = use_engine(model, a.engine, a.threads, a.size)
        timer = StageTimer(model, a.device)
        counts = [int(x) for x in a.objects.split(",") if x.strip()]
        if engine is not None:
            # Every graph the timed runs need (one per stage call signature), converted now.
            for n in counts:
                run_config(model, proc, timer, n, a.frames, a.device, not a.no_postprocess, False)
            print(f"{a.engine} {engine.version}: {engine.graphs} graphs converted in "
                  f"{engine.compile_seconds:.1f} s (not timed)")
            result["engine_version"] = engine.version
            result["engine_graphs"] = engine.graphs
            result["engine_compile_s"] = engine.compile_seconds
        for n in counts:
            frames = run_config(model, proc, timer, n, a.frames, a.device, not a.no_postprocess, not a.quiet)
            cfg = {"objects": n, "encoder_ahead": False, "dtype": "f32", "frames": frames}
            cfg.update(summarize(frames, result["stats_from_frame"]))
            result["configs"].append(cfg)
        if engine is not None:
            result["engine_report"] = engine.precision_report()
            report = result["engine_report"]
            if "primitives" in report:
                print(f"{a.engine}: precision hint {report['precision_hint']}, layers by runtime precision "
                      f"{report['runtime_precisions']}, by kernel {report['primitives']}")
        print(f"\n{result['implementation']}, {a.size} input, {a.threads} threads, {a.device}, "
              f"stats over frames >= {result['stats_from_frame']} of {a.frames} (ms)")
        print_table(result["configs"])
    # Peak resident memory of this process (Linux reports ru_maxrss in KiB), as `edgetam bench`.
    import resource
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"peak RSS {result['peak_rss_mib']:.0f} MiB (whole run, model included)")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
