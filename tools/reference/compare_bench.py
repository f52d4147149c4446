#!/usr/bin/env python3
"""Compare `edgetam bench --json` with `time_reference.py --json`, stage by stage.

    python tools/reference/compare_bench.py --ours ours*.json --ref ref*.json [--peak peak.json]

Both files hold `{"configs": [{"objects": n, "frames": [{<stage>_ms: ...}, ...], "median":
{<stage>_ms: ...}}, ...]}` with the same stage keys (`end_to_end_ms`, `preprocess_ms`,
`image_encoder_ms`, `memory_attention_ms`, `mask_decoder_ms`, `memory_encoder_ms`,
`postprocess_ms`, `other_ms`). Ours may hold several configurations per object count
(`encoder_ahead`, `dtype`); each is compared with the reference's configuration of the same object
count. Given several files per side (alternating rounds), a stage's time is the median over the
files of each file's median. Ratios are reference / ours (> 1: ours is faster).

If a configuration carries `"macs": {<stage>: multiply-adds per frame}` (stage names without
`_ms`), achieved GFLOP/s (2 flops per multiply-add) are printed too, and set against any
`"peak_gflops"` found in the files.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

STAGES = (
    "end_to_end_ms",
    "preprocess_ms",
    "image_encoder_ms",
    "memory_attention_ms",
    "mask_decoder_ms",
    "memory_encoder_ms",
    "postprocess_ms",
    "other_ms",
)


def config_key(c: dict) -> tuple:
    return (c["objects"], bool(c.get("encoder_ahead", False)), c.get("dtype", "f32"))


def medians(c: dict) -> dict[str, float]:
    """The configuration's medians: its `median` entry, or computed from its tracked frames."""
    if c.get("median"):
        out = dict(c["median"])
    else:
        frames = [f for f in c.get("frames", []) if not f.get("prompted") and not f.get("warmup")]
        out = {k: statistics.median(f[k] for f in frames) for k in STAGES if frames and all(k in f for f in frames)}
    if "other_ms" not in out and "end_to_end_ms" in out:
        # Other = end to end minus the named stages (medians do not add up exactly).
        out["other_ms"] = out["end_to_end_ms"] - sum(v for k, v in out.items() if k != "end_to_end_ms")
    return out


def load(paths: list[Path]) -> tuple[dict[tuple, dict[str, float]], dict[tuple, dict], dict, list[dict]]:
    """Per configuration: the median over files of each stage's median; also macs, peaks, files."""
    per_key: dict[tuple, list[dict[str, float]]] = {}
    macs: dict[tuple, dict] = {}
    peaks: dict = {}
    docs = []
    for p in paths:
        doc = json.loads(p.read_text())
        docs.append(doc)
        if doc.get("peak_gflops"):
            for k, v in doc["peak_gflops"].items():
                peaks.setdefault(k, []).append(v)
        for c in doc.get("configs", []):
            per_key.setdefault(config_key(c), []).append(medians(c))
            if c.get("macs"):
                macs[config_key(c)] = c["macs"]
    combined = {
        key: {s: statistics.median(m[s] for m in runs if s in m) for s in STAGES if any(s in m for m in runs)}
        for key, runs in per_key.items()
    }
    return combined, macs, {k: max(v) for k, v in peaks.items()}, docs


def end_to_end_by_round(docs: list[dict]) -> dict[tuple, list[float]]:
    """Per configuration: each file's (round's) median end-to-end time, in file order."""
    out: dict[tuple, list[float]] = {}
    for doc in docs:
        for c in doc.get("configs", []):
            t = medians(c).get("end_to_end_ms")
            if t:
                out.setdefault(config_key(c), []).append(t)
    return out


def describe(docs: list[dict]) -> str:
    if not docs:
        return "-"
    d = docs[0]
    m = d.get("machine", {})
    cpu = (m.get("cpu_description") or m.get("cpu", "?")) if isinstance(m, dict) else str(m)
    return f"{len(docs)} file(s), threads {d.get('threads', '?')}, size {d.get('size', '?')}, {cpu}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", type=Path, nargs="+", required=True, help="edgetam bench --json output(s)")
    ap.add_argument("--ref", type=Path, nargs="+", required=True, help="time_reference.py --json output(s)")
    ap.add_argument("--peak", type=Path, nargs="*", default=[], help="extra files holding peak_gflops")
    a = ap.parse_args()

    ours, ours_macs, ours_peak, ours_docs = load(a.ours)
    ref, ref_macs, ref_peak, ref_docs = load(a.ref)
    _, _, extra_peak, _ = load(a.peak) if a.peak else ({}, {}, {}, [])
    peak = {**ref_peak, **ours_peak, **extra_peak}
    print(f"ours:      {describe(ours_docs)}")
    print(f"reference: {describe(ref_docs)}")
    if peak:
        print("fp32 matmul peak (GFLOP/s, best): " + ", ".join(f"{k} {v:.1f}" for k, v in peak.items()))

    ref_by_objects = {k[0]: v for k, v in ref.items()}
    for key in sorted(ours):
        objects, ahead, dtype = key
        theirs = ref_by_objects.get(objects)
        if theirs is None:
            print(f"\n{objects} object(s): no reference configuration")
            continue
        mine = ours[key]
        macs = ours_macs.get(key) or ref_macs.get((objects, False, "f32"), {})
        print(f"\n{objects} object(s), ours encoder_ahead={ahead} {dtype} vs reference (median ms per frame)")
        head = f"{'stage':<18}{'ours':>10}{'reference':>11}{'ref/ours':>10}"
        if macs:
            head += f"{'GMAC':>8}{'ours GF/s':>11}{'ref GF/s':>10}"
        print(head)
        for s in STAGES:
            if s not in mine and s not in theirs:
                continue
            o, r = mine.get(s, float("nan")), theirs.get(s, float("nan"))
            ratio = r / o if o and o == o and r == r else float("nan")
            line = f"{s[:-3]:<18}{o:>10.1f}{r:>11.1f}{ratio:>9.2f}x"
            n = macs.get(s[:-3]) if macs else None
            if n:
                line += f"{n / 1e9:>8.2f}{2 * n / o / 1e6:>11.1f}{2 * n / r / 1e6:>10.1f}"
            print(line)
        if mine.get("end_to_end_ms") and theirs.get("end_to_end_ms"):
            print(f"{'fps':<18}{1e3 / mine['end_to_end_ms']:>10.2f}{1e3 / theirs['end_to_end_ms']:>11.2f}")
    # Round by round: noise hits single rounds, so also the least favourable pairing (our slowest
    # round against the reference's fastest).
    ours_rounds, ref_rounds = end_to_end_by_round(ours_docs), end_to_end_by_round(ref_docs)
    ref_rounds = {k[0]: v for k, v in ref_rounds.items()}
    if any(len(v) > 1 for v in ours_rounds.values()):
        print("\nend to end per round (ms; ratio reference / ours, paired by round; least favourable: "
              "our slowest round against the reference's fastest)")
        for key in sorted(ours_rounds):
            mine, theirs = ours_rounds[key], ref_rounds.get(key[0], [])
            if not theirs:
                continue
            paired = " / ".join(f"{r / o:.2f}x" for o, r in zip(mine, theirs))
            print(f"{key[0]} object(s) encoder_ahead={key[1]} {key[2]:<5} ours "
                  + " / ".join(f"{o:.1f}" for o in mine) + "  reference "
                  + " / ".join(f"{r:.1f}" for r in theirs)
                  + f"  ratios {paired}  least favourable {min(theirs) / max(mine):.2f}x")
    rss = [max((d.get("peak_rss_mib") or 0.0) for d in docs) for docs in (ours_docs, ref_docs)]
    if all(rss):
        print(f"\npeak RSS (MiB, whole run): ours {rss[0]:.0f}, reference {rss[1]:.0f}")


if __name__ == "__main__":
    main()
