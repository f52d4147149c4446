"""Shared fixtures: the committed fixture model at input 256, the sequence_256 frames and
prompts, and the Rust library's results on them (written by the `edgetam` CLI)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

import edgetam

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
SEQUENCE = FIXTURES / "sequence_256"
INPUT_SIZE = 256

_DTYPES = {"U8": np.uint8, "F32": np.float32, "I64": np.int64, "F16": np.float16}


def read_safetensors(path: Path) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file (the format is an 8-byte header length, a JSON header
    and the raw little-endian data; no extra package needed)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = memoryview(raw)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[start:end], dtype=dtype).reshape(info["shape"]).copy()
    return out


@dataclass
class Sequence:
    """sequence_256's frames and prompts, prompts keyed by the frame they go on. The fixture's
    refresh (a prompt on an already tracked frame) is given here before that frame is tracked,
    as the CLI takes it."""

    frames: np.ndarray  # [N, H, W, 3] RGB
    prompts: Dict[int, List[Dict[str, Any]]] = field(default_factory=dict)
    masks: Dict[str, np.ndarray] = field(default_factory=dict)

    def apply(self, target: Any, frame: int, with_frame: bool = True) -> None:
        """Adds the prompts of `frame` to a Tracker (`with_frame`) or a Pipeline."""
        for p in self.prompts.get(frame, []):
            args = (p["obj"], frame) if with_frame else (p["obj"],)
            if "box" in p:
                target.add_box(*args, tuple(p["box"]))
            elif "points" in p:
                target.add_points(*args, [tuple(q) for q in p["points"]])
            else:
                target.add_mask(*args, self.masks[p["mask"]])


@pytest.fixture(scope="session")
def sequence() -> Sequence:
    tensors = read_safetensors(SEQUENCE / "sequence.safetensors")
    events = json.loads((SEQUENCE / "events.json").read_text())
    seq = Sequence(frames=tensors["frames"])
    for e in events["events"]:
        if e["type"] == "prompt":
            seq.prompts.setdefault(e["frame"], []).append(e)
            if "mask" in e:
                seq.masks[e["mask"]] = tensors[e["mask"]]
    return seq


@pytest.fixture(scope="session")
def model() -> edgetam.Model:
    return edgetam.Model.load(FIXTURES / "model", input_size=INPUT_SIZE)


def cli_path() -> Path:
    """The `edgetam` CLI scripts/test-python.sh builds (or EDGETAM_CLI)."""
    path = Path(os.environ.get("EDGETAM_CLI", REPO / "target" / "release" / "edgetam"))
    if not path.exists():
        pytest.fail(f"{path} is missing: build it with `cargo build --release --bin edgetam`")
    return path


@dataclass
class RustResults:
    """The Rust library's results per (frame, object): mask, score and results.jsonl's record."""

    masks: Dict[Tuple[int, int], np.ndarray]
    scores: Dict[Tuple[int, int], np.float32]
    records: Dict[Tuple[int, int], Dict[str, Any]]


@pytest.fixture(scope="session")
def rust_results(sequence: Sequence, tmp_path_factory: pytest.TempPathFactory) -> RustResults:
    """Runs `edgetam track` on the sequence's frames (PNG, lossless) and prompts."""
    import cv2

    tmp = tmp_path_factory.mktemp("rust")
    frames = tmp / "frames"
    frames.mkdir()
    for i, f in enumerate(sequence.frames):
        assert cv2.imwrite(str(frames / f"{i:06}.png"), f[..., ::-1])
    specs = []
    for frame, prompts in sorted(sequence.prompts.items()):
        for p in prompts:
            spec = f"obj={p['obj']};frame={frame}"
            if "box" in p:
                spec += ";box=" + ",".join(str(v) for v in p["box"])
            elif "points" in p:
                spec += "".join(";point=" + ",".join(str(v) for v in q) for q in p["points"])
            else:
                path = tmp / f"mask_{frame}_{p['obj']}.png"
                assert cv2.imwrite(str(path), sequence.masks[p["mask"]] * 255)
                spec += f";mask={path}"
            specs.append(spec)
    out = tmp / "out"
    dump = tmp / "dump.safetensors"
    cmd = [str(cli_path()), "track", "--model", str(FIXTURES / "model")]
    cmd += ["--input-size", str(INPUT_SIZE), "--frames", str(frames), "--out", str(out)]
    cmd += ["--dump-logits", str(dump)]
    for s in specs:
        cmd += ["--prompt", s]
    subprocess.run(cmd, check=True, capture_output=True)
    tensors = read_safetensors(dump)
    masks, scores = {}, {}
    for name, t in tensors.items():
        f, o, what = name.split("/")
        key = (int(f[1:]), int(o[1:]))
        if what == "mask":
            masks[key] = t.astype(bool)
        elif what == "score":
            scores[key] = t[0]
    records = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        records[(r["frame"], r["object"])] = r
    return RustResults(masks, scores, records)
