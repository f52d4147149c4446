#!/usr/bin/env python3
"""Per layer group: what plain bf16 costs in accuracy and what it saves in time.

    python tools/dev/bf16_sensitivity.py BIN SEQUENCE_DIR [SEQUENCE_DIR ...]
        [--groups G,G,...] [--policy SPEC ...] [--time-size 512] [--time-rounds 3] [--no-time]
        [--markdown OUT.md]

The bf16 fast mode's precision per layer group is one table (`tracker/src/model/bf16_policy.rs`,
`BF16_POLICY`); `EDGETAM_BF16_POLICY=group=precision,...` overrides its rows for one run. This
tool drives an `edgetam` binary through that switch:

* sensitivity, per group: every group exact f32 but that one in plain bf16 (bf16 inputs, f32
  accumulation; `--alone split`: in split products), tracked with `BIN track --dtype bf16` on each sequence and compared with
  `--dtype f32` on the same frames and prompts: the worst mask IoU of any (frame, object), the
  share of pairs with IoU >= 0.99 and the presence (visibility) flips;
* whole policies (`--policy SPEC`, repeatable; `default` is the table as compiled): the same
  comparison, to check a combination, whose errors add up, on sequences it was not chosen on;
* cost: `BIN bench --random-weights --dtype bf16` at `--time-size` (1 object, 2 threads),
  the table as compiled against the table with the group in plain bf16 (or each policy),
  alternating `--time-rounds` times: the median image-encoder and whole-frame ms of each, so
  the saving is a ratio measured side by side.

Sequences are `tools/reference/generate_heldout_sequences.py` folders or the sequence
fixtures. The tolerance the policy must keep (the mode's rule): every pair >= 0.99 on short
sequences, >= 95 % of pairs >= 0.99 on long ones (30 frames or more), no presence flip.
Needs numpy, pillow and safetensors.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bf16_tolerance import iou, prepare, results  # noqa: E402

# The rows of BF16_POLICY (the binary refuses a name it does not know, naming the ones it does).
GROUPS = [
    "backbone.stem", "backbone.stage0", "backbone.stage1", "backbone.stage2", "backbone.stage3",
    "fpn", "high_res", "memory_attention.self_attn", "memory_attention.cross_attn",
    "memory_attention.mlp", "mask_decoder", "memory_encoder",
]
LONG_FRAMES = 30


def only(group: str, precision: str) -> str:
    """Every group exact but `group` in `precision`."""
    return f"*=f32,{group}={precision}"


class Sequence:
    def __init__(self, path: Path, work: Path):
        self.path, self.work = path, work
        self.model, self.prompts = prepare(path, work)
        events = json.loads((path / "events.json").read_text())["events"]
        self.frames = 1 + max((e["frame"] for e in events), default=0)
        self.frames = max(self.frames, len(list((work / "frames").iterdir())))
        self.size = json.loads((path / "config.json").read_text())["image_size"]
        self.runs = 0

    @property
    def long(self) -> bool:
        return self.frames >= LONG_FRAMES

    def track(self, binary: str, dtype: str, policy: str | None) -> Path:
        out = self.work / f"run{self.runs}"
        self.runs += 1
        env = dict(os.environ)
        env.pop("EDGETAM_BF16_POLICY", None)
        if policy:
            env["EDGETAM_BF16_POLICY"] = policy
        r = subprocess.run([binary, "track", "--model", str(self.model), "--frames", str(self.work / "frames"),
                            *self.prompts, "--dtype", dtype, "--out", str(out)], env=env, capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"{binary} track failed on {self.path.name} (policy {policy!r}):\n{r.stderr.strip()}")
        return out


def compare(exact: Path, fast: Path) -> dict:
    a, b = results(exact), results(fast)
    ious, flips, worst_at = [], 0, None
    for key, ra in a.items():
        f, o = key
        rb = b[key]
        flips += ra["visible"] != rb["visible"]
        ma = np.array(Image.open(exact / "masks" / f"{f:06}_obj{o}.png"))
        mb = np.array(Image.open(fast / "masks" / f"{f:06}_obj{o}.png"))
        v = iou(ma, mb)
        if not ious or v < min(ious):
            worst_at = f"frame {f} obj {o}"
        ious.append(v)
    return {"worst": min(ious), "pairs": len(ious), "good": sum(v >= 0.99 for v in ious), "flips": flips,
            "worst_at": worst_at}


def breaking(per_seq: list[tuple["Sequence", dict]]) -> str:
    """The sequences that break the tolerance, with their worst pair."""
    out = []
    for s, c in per_seq:
        bad = c["flips"] > 0 or ((c["good"] < 0.95 * c["pairs"]) if s.long else (c["worst"] < 0.99))
        if bad:
            out.append(f"{s.path.name} {c['worst']:.3f} ({c['worst_at']}{', %d flips' % c['flips'] if c['flips'] else ''})")
    return "; ".join(out) or "-"


def verdict(per_seq: list[tuple["Sequence", dict]]) -> tuple[float, float, int, bool]:
    worst = min(c["worst"] for _, c in per_seq)
    pairs = sum(c["pairs"] for _, c in per_seq)
    good = sum(c["good"] for _, c in per_seq)
    flips = sum(c["flips"] for _, c in per_seq)
    ok = flips == 0 and all(
        (c["good"] >= 0.95 * c["pairs"]) if s.long else (c["worst"] >= 0.99) for s, c in per_seq)
    return worst, good / pairs, flips, ok


def bench(binary: str, policy: str | None, size: int, frames: int) -> dict:
    env = dict(os.environ)
    env.pop("EDGETAM_BF16_POLICY", None)
    if policy:
        env["EDGETAM_BF16_POLICY"] = policy
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "b.json"
        subprocess.run([binary, "bench", "--random-weights", "--input-size", str(size), "--objects", "1",
                        "--threads", "2", "--frames", str(frames), "--dtype", "bf16", "--json", str(out)],
                       env=env, check=True, capture_output=True)
        median = json.loads(out.read_text())["configs"][0]["median"]
    return {"encoder": median["image_encoder_ms"], "frame": median["end_to_end_ms"]}


def timing(binary: str, variants: dict, size: int, rounds: int, frames: int) -> dict:
    """Median ms per variant, the variants alternating within each round."""
    seen = {name: [] for name in variants}
    for r in range(rounds):
        for name, policy in variants.items():
            seen[name].append(bench(binary, policy, size, frames))
            print(f"  timing round {r + 1}/{rounds}: {name} done", file=sys.stderr, flush=True)
    return {name: {k: statistics.median(t[k] for t in ts) for k in ("encoder", "frame")} for name, ts in seen.items()}


def plot(path: Path, points: list[tuple[str, float, float, bool]], xlabel: str) -> None:
    """An SVG of (name, ms, worst IoU, keeps) points: time across, worst IoU up (on a
    1 - IoU log scale, so 0.99 and 0.999 are told apart), the tolerance line at 0.99."""
    import math
    w, h, left, right, top, bottom = 760, 440, 70, 250, 20, 50
    xs = [p[1] for p in points]
    lo, hi = min(xs) * 0.95, max(xs) * 1.05

    def fy(v: float) -> float:  # 1 - IoU from 1e-4 (top) to 1 (bottom)
        e = min(max(1.0 - v, 1e-4), 1.0)
        return top + (h - top - bottom) * (math.log10(e) + 4) / 4

    def fx(v: float) -> float:
        return left + (w - left - right) * (v - lo) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           'font-size="11">', f'<rect width="{w}" height="{h}" fill="white"/>']
    for v in (0.0, 0.9, 0.99, 0.999, 0.9999):
        y = fy(v)
        dash = ' stroke-dasharray="4 3"' if v == 0.99 else ""
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" stroke="#bbb"{dash}/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    for i in range(6):
        v = lo + (hi - lo) * i / 5
        out.append(f'<text x="{fx(v):.1f}" y="{h - bottom + 16}" text-anchor="middle">{v:.0f}</text>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 10}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<text x="14" y="{(top + h - bottom) / 2}" transform="rotate(-90 14 {(top + h - bottom) / 2})" '
               'text-anchor="middle">worst mask IoU against f32</text>')
    for i, (name, ms, worst, ok) in enumerate(points):
        x, y = fx(ms), fy(worst)
        color = "#1a7f37" if ok else "#cf222e"
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>')
        out.append(f'<text x="{x + 6:.1f}" y="{y - 4 + 12 * (i % 3):.1f}" fill="{color}">{name}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("sequences", nargs="+", type=Path)
    ap.add_argument("--groups", default=",".join(GROUPS), help="the groups to switch alone (default: all)")
    ap.add_argument("--policy", action="append", default=[],
                    help="a whole policy to check (`default`, or overrides such as backbone.stage3=bf16)")
    ap.add_argument("--no-sensitivity", action="store_true", help="only the policies given")
    ap.add_argument("--alone", default="bf16", choices=["bf16", "split"],
                    help="the precision a group is switched to alone (split: the f32-accurate AMX products)")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--no-accuracy", action="store_true", help="only the timing (no sequences tracked)")
    ap.add_argument("--time-size", type=int, default=512)
    ap.add_argument("--time-rounds", type=int, default=3)
    ap.add_argument("--time-frames", type=int, default=8)
    ap.add_argument("--markdown", type=Path, help="also write the tables here")
    ap.add_argument("--plot", type=Path, help="an SVG of the policies: frame ms against worst IoU")
    ap.add_argument("--anchor", action="append", default=[],
                    help="an outside point for the plot, NAME=FRAME_MS:WORST_IOU (e.g. another engine)")
    args = ap.parse_args()
    groups = [g for g in args.groups.split(",") if g]

    variants = {}  # name -> (policy for accuracy, policy for timing)
    if not args.no_sensitivity:
        for g in groups:
            variants[f"{g} alone in {args.alone}"] = (only(g, args.alone), f"{g}={args.alone}")
    for p in args.policy:
        spec = "" if p == "default" else p
        variants[f"policy: {p}"] = (spec, spec)

    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        seqs = []
        for i, path in enumerate([] if args.no_accuracy else args.sequences):
            s = Sequence(path, Path(tmp) / f"s{i}")
            seqs.append((s, s.track(args.binary, "f32", None)))
            print(f"{path.name}: input {s.size}, {s.frames} frames, f32 tracked", file=sys.stderr, flush=True)
        acc = {}
        for name, (policy, _) in ([] if args.no_accuracy else variants.items()):
            per_seq = [(s, compare(exact, s.track(args.binary, "bf16", policy))) for s, exact in seqs]
            acc[name] = (verdict(per_seq), per_seq)
            w, share, flips, ok = acc[name][0]
            print(f"{name}: worst IoU {w:.4f}, {100 * share:.1f} % of pairs >= 0.99, {flips} flips, "
                  f"{'keeps' if ok else 'breaks'} the tolerance; broken on: {breaking(per_seq)}",
                  file=sys.stderr, flush=True)

    times = {}
    if not args.no_time:
        timed = {"table as compiled": ""}
        timed.update({name: tp for name, (_, tp) in variants.items()})
        times = timing(args.binary, timed, args.time_size, args.time_rounds, args.time_frames)

    names = ", ".join(f"{p.name} ({s.size}, {s.frames} fr)" for p, (s, _) in zip(args.sequences, seqs))
    lines.append(f"Sequences: {names}.")
    lines.append("")
    head = "| variant | worst IoU | pairs >= 0.99 | flips | tolerance | broken on |"
    rule = "|---|---|---|---|---|---|"
    if times:
        base = times["table as compiled"]
        head += f" encoder ms ({args.time_size}) | frame ms | frame / table |"
        rule += "---|---|---|"
        lines += [f"Timing: `bench --random-weights --input-size {args.time_size} --objects 1 --threads 2 "
                  f"--dtype bf16`, medians of {args.time_rounds} alternating rounds; the table as compiled: "
                  f"encoder {base['encoder']:.2f} ms, frame {base['frame']:.2f} ms. A group alone is timed as "
                  "the table with that group in plain bf16.", ""]
    lines += [head, rule]
    for name in variants:
        if name in acc:
            (w, share, flips, ok), per_seq = acc[name]
            row = (f"| {name} | {w:.4f} | {100 * share:.1f} % | {flips} | {'keeps' if ok else 'breaks'} "
                   f"| {breaking(per_seq)} |")
        else:
            row = f"| {name} | - | - | - | - | - |"
        if times:
            t = times[name]
            row += f" {t['encoder']:.2f} | {t['frame']:.2f} | {t['frame'] / base['frame']:.3f} |"
        lines.append(row)
    if args.plot and times:
        # Whole policies only: a group alone is measured exact elsewhere but timed in the table.
        points = [(n.removeprefix("policy: "), times[n]["frame"], w, ok)
                  for n, ((w, _, _, ok), _) in acc.items() if n.startswith("policy: ")]
        for a in args.anchor:
            name, _, rest = a.partition("=")
            ms, _, worst = rest.partition(":")
            points.append((name, float(ms), float(worst), float(worst) >= 0.99))
        plot(args.plot, points, f"frame ms at {args.time_size}, 1 object, 2 threads")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
