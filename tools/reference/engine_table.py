"""One Markdown table per object count from a `bench_alternating.sh -d DIR` folder: every stage of
the tracked frame, ours (each precision) beside each engine of the reference's rotation.

    python tools/reference/engine_table.py DIR

Reads `DIR/ours_*.json` and `DIR/ref_<engine>_*.json` (medians over the rounds, as
`compare_bench.py`). Each engine cell is `ms (ratio)`, the ratio being the engine's time over
ours at the matching precision (> 1: ours is faster): OpenVINO's default precision (bf16 on CPUs
with AVX512-BF16 or AMX) against our `bf16`, every other engine against our `f32`. Encoder-ahead
configurations of ours are left out (the reference runs serial). `other` is the end-to-end time
less the named stages (medians need not add up): no ratio where ours is under 0.5 ms.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_bench import STAGES, load  # noqa: E402

ENGINE_NAMES = {
    "torch": "PyTorch f32",
    "openvino-f32": "OpenVINO f32",
    "openvino": "OpenVINO default",
    "onnxruntime": "ONNX Runtime f32",
}
# The precision of ours each engine is set against.
MATCHING = {"openvino": "bf16"}


def engines_in(folder: Path) -> list[str]:
    found = {p.name[len("ref_"):].rsplit("_", 1)[0] for p in folder.glob("ref_*_*.json")}
    order = list(ENGINE_NAMES)
    return sorted(found, key=lambda e: (order.index(e) if e in order else len(order), e))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="bench_alternating.sh's output folder (-d)")
    a = ap.parse_args()
    ours_files = sorted(a.folder.glob("ours_*.json"))
    if not ours_files:
        sys.exit(f"{a.folder}: no ours_*.json (run tools/reference/bench_alternating.sh -d {a.folder})")
    ours, _, _, ours_docs = load(ours_files)
    engines = engines_in(a.folder)
    refs = {e: load(sorted(a.folder.glob(f"ref_{e}_*.json"))) for e in engines}
    d = ours_docs[0]
    for objects in sorted({k[0] for k in ours}):
        dtypes = sorted({k[2] for k in ours if k[0] == objects and not k[1]}, key=lambda t: t != "f32")
        cols = [f"ours {t}" for t in dtypes] + [ENGINE_NAMES.get(e, e) for e in engines]
        print(f"\n{objects} object(s), input {d.get('size', '?')}, {d.get('threads', '?')} threads, "
              f"median ms per frame over {len(ours_files)} round(s); (ratio) = engine / ours at the "
              "matching precision\n")
        print("| stage | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for s in STAGES:
            cells = []
            for t in dtypes:
                v = ours[(objects, False, t)].get(s)
                cells.append("-" if v is None else f"{v:.1f}")
            for e in engines:
                theirs = {k[0]: v for k, v in refs[e][0].items()}.get(objects, {})
                mine = ours.get((objects, False, MATCHING.get(e, "f32")), {})
                r, o = theirs.get(s), mine.get(s)
                if r is None:
                    cells.append("-")
                elif o and o > 0.5:
                    cells.append(f"{r:.1f} ({r / o:.2f}x)")
                else:
                    cells.append(f"{r:.1f}")
            print(f"| {s[:-3].replace('_', ' ')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
