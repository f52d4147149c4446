"""Checks of the edgetam-ros2 node against a real ROS 2 peer (rclpy from PyPI wheels).

Run by scripts/test-ros2.sh inside a private network namespace (see rospeer.py for the
environment). Prints one `PASS name: detail` or `FAIL name: detail` line per check and a closing
`peer: N passed, M failed`; exits 1 when a check failed.

Checks (issue 41, item 7):
  stamps         every mask's header (stamp, frame_id) is one of a sent frame's
  identity       drop_frames=false: every ID mask (mono16) equals the one composed from
                 `edgetam track`'s output on the same PNG frames and prompts
  encoding       the same in bgr8: masks equal the rgb8 ones
  drop           drop_frames=true at 30 Hz: newest frames kept, last frame's mask arrives,
                 /diagnostics frames_dropped == frames sent - masks returned
  bad_frames     16UC1, yuv422, step and data length that do not fit, zero size, a size change:
                 survived, counted on /diagnostics, the next good frame still gets its mask
  exit           bad model path and precision=bf16 under EDGETAM_ISA=avx2: exit 2, clear message
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import rclpy

import rospeer as rp

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str) -> bool:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    return ok


def log_tail(node: rp.NodeProcess, lines: int = 25) -> str:
    text = node.log_text().splitlines()
    return "\n".join("    | " + line for line in text[-lines:])


# ---------------------------------------------------------------------------------------------
# Expected masks from the CLI


class Expected:
    """What the node's ID masks must be, from `edgetam track` on the same PNG frames and prompts:
    its composed ID masks when it has `--id-masks`, else composed here from its
    `--dump-logits` (each object's 0/1 mask and low-res logits, resized with torch's bilinear
    arithmetic: rospeer.compose_id_mask), an implementation independent of the node's."""

    def __init__(self, out: Path, frames: int, id_masks: bool) -> None:
        self.out, self.frames, self.id_masks = out, frames, id_masks
        self.dump = None if id_masks else rp.read_safetensors(out / "logits.safetensors")
        self.resize_mismatch = 0  # pixels where (resized logits > 0) != the CLI's mask

    def id_mask(self, f: int) -> np.ndarray | None:
        if self.id_masks:
            p = self.out / "id_masks" / f"{f:06}.png"
            return rp.read_png_u16(p) if p.exists() else None
        objs = {}
        prefix = f"f{f:06}/o"
        for key in self.dump:
            if key.startswith(prefix) and key.endswith("/mask"):
                obj = int(key[len(prefix):].split("/")[0])
                mask = self.dump[key]
                logits = rp.resize_logits(self.dump[f"{prefix}{obj}/lowres"], *mask.shape)
                self.resize_mismatch += int(np.count_nonzero((logits > 0) != (mask != 0)))
                objs[obj] = (mask, logits)
        if not objs:
            return None
        return rp.compose_id_mask(objs)

    def compare(self, f: int, got: np.ndarray) -> tuple[bool, str]:
        """(byte-identical, detail) for frame `f`."""
        want = self.id_mask(f)
        if want is None:
            # No object on this frame: an all-background mask.
            want = np.zeros_like(got)
        if want.shape != got.shape:
            return False, f"size {got.shape} vs the CLI's {want.shape}"
        diff = int(np.count_nonzero(want != got))
        return diff == 0, f"{diff} pixels differ"


def run_cli(cli: str, model: str, size: int, frames_dir: Path, prompts: list[str], out: Path,
            timeout: float) -> tuple[bool, bool, str]:
    """`edgetam track` on the clip: (ran, wrote composed ID masks, output)."""
    helptext = subprocess.run([cli, "track", "--help"], capture_output=True, text=True).stdout
    id_masks = "--id-masks" in helptext
    args = [cli, "track", "--model", model, "--input-size", str(size), "--frames", str(frames_dir),
            "--out", str(out)]
    for p in prompts:
        args += ["--prompt", p]
    args += ["--id-masks"] if id_masks else ["--dump-logits", str(out / "logits.safetensors")]
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, id_masks, f"edgetam track took over {timeout:.0f} s"
    return p.returncode == 0, id_masks, (p.stdout + p.stderr).strip()


# ---------------------------------------------------------------------------------------------
# Runs


def stamp_of(run: int, i: int) -> tuple[int, int]:
    return (1_700_000_000 + 100 * run + i, 1_000 * i + 7 * run + 1)


def connect(args, work: Path, name: str, label: str, drop_frames: bool,
            prompt: str) -> tuple[rp.NodeProcess, rp.Peer] | None:
    """Starts node `name` on the test model (its camera topic remapped to one of its own) and a
    peer that discovers it, has its handshake answered and sends it `prompt`. Where that fails,
    the check `connect[label]` fails with the node's log, the node is stopped and this is None."""
    params = {"model": args.model, "input_size": str(args.input_size),
              "drop_frames": "true" if drop_frames else "false"}
    timeout = args.discovery_timeout
    topic = f"/cam_{name}/image_raw"
    node = rp.start_node(args.node, name, params, work / f"{name}.log", remap={"image": topic})
    peer = rp.Peer(name, topic)
    ok = peer.wait_connected(timeout) and peer.handshake(timeout)
    if not ok or not node.alive():
        why = "the node exited" if not node.alive() else \
            f"no discovery (or no rejected handshake prompt on /diagnostics) within {timeout:.0f} s"
        peer.close()
        check(f"connect[{label}]", False, f"{why}\n{log_tail(node)}")
        node.stop()
        return None
    peer.prompt(prompt)
    peer.spin(0.5)
    return node, peer


def lockstep(peer: rp.Peer, frames: list[np.ndarray], encoding: str, run: int, name: str,
             first_timeout: float, timeout: float) -> tuple[list[tuple], str]:
    """Publishes each frame after the previous one's mask arrived; the sent keys, or why not."""
    sent = []
    for i, rgb in enumerate(frames):
        key_stamp = stamp_of(run, i)
        msg = rp.image_msg(rgb, encoding, key_stamp, f"{name}_optical_{i}")
        n = len(peer.masks)
        peer.publish(msg)
        sent.append((key_stamp[0], key_stamp[1], msg.header.frame_id))
        if not peer.wait_mask(n + 1, first_timeout if i == 0 else timeout):
            return sent, f"no mask for frame {i} within {first_timeout if i == 0 else timeout:.0f} s"
    return sent, ""


def check_stamps(label: str, peer: rp.Peer, sent: list[tuple]) -> dict[tuple, int]:
    """Check a: every mask's header is a sent frame's. Returns frame index per key."""
    index = {k: i for i, k in enumerate(sent)}
    keys = [rp.stamp_key(r.msg.header) for r in peer.masks]
    unknown = [k for k in keys if k not in index]
    check(f"stamps[{label}]", not unknown and len(keys) > 0,
          f"{len(keys)} masks, {len(unknown)} with a header no sent frame had"
          + (f" (first {unknown[0]})" if unknown else ""))
    return index


def check_identity(label: str, peer: rp.Peer, sent: list[tuple], expected: Expected,
                   size: tuple[int, int]) -> list[np.ndarray]:
    """Check b: every mask equals the CLI's composed one. Returns the masks in frame order."""
    index = {k: i for i, k in enumerate(sent)}
    got: dict[int, np.ndarray] = {}
    layout_errors = []
    for r in peer.masks:
        i = index.get(rp.stamp_key(r.msg.header))
        if i is None:
            continue
        try:
            got[i] = rp.mask_array(r.msg)
        except ValueError as e:
            layout_errors.append(f"frame {i}: {e}")
    check(f"mask_layout[{label}]", not layout_errors and len(got) == len(sent),
          f"{len(got)}/{len(sent)} frames have a mono16 mask of {size[0]}x{size[1]}"
          + (f"; {layout_errors[0]}" if layout_errors else ""))
    identical, details = 0, []
    for i in range(len(sent)):
        if i not in got:
            details.append(f"frame {i}: no mask")
            continue
        same, d = expected.compare(i, got[i])
        identical += same
        if not same:
            details.append(f"frame {i}: {d}")
    ids = sorted({int(v) for m in got.values() for v in np.unique(m)})
    what = "`edgetam track --id-masks`" if expected.id_masks else \
        "the masks composed from `edgetam track --dump-logits`"
    resize = "" if expected.id_masks else \
        f"; resized logits vs the CLI's own masks: {expected.resize_mismatch} pixels differ"
    check(f"identity[{label}]", identical == len(sent) and expected.resize_mismatch == 0,
          f"{identical}/{len(sent)} ID masks byte-identical to {what}; ids seen {ids}{resize}"
          + (f"; {details[0]}" if details else ""))
    return [got[i] for i in sorted(got)]


def run_lockstep(args, work: Path, clip: list[np.ndarray], prompts: list[str], expected: Expected,
                 encoding: str, run: int, count: int) -> list[np.ndarray]:
    name = f"edgetam_{encoding}"
    label = f"{encoding},drop_frames=false"
    started = connect(args, work, name, label, drop_frames=False, prompt="|".join(prompts))
    if started is None:
        return []
    node, peer = started
    sent, why = lockstep(peer, clip[:count], encoding, run, name, args.first_timeout, args.timeout)
    peer.spin(0.5)
    if why:
        check(f"lockstep[{label}]", False, f"{why}\n{log_tail(node)}")
    check_stamps(label, peer, sent)
    masks = check_identity(label, peer, sent, expected, (clip[0].shape[1], clip[0].shape[0]))
    d = peer.wait_diag(lambda d: rp.diag_int(d, "frames_tracked") == len(sent), 4.0)
    check(f"diagnostics[{label}]",
          rp.diag_int(d, "frames_received") == len(sent) and rp.diag_int(d, "frames_dropped") == 0
          and rp.diag_int(d, "bad_frames") == 0,
          f"/diagnostics {json.dumps(d, sort_keys=True) if d else 'never received'}")
    alive = node.alive()
    code = node.stop()
    check(f"shutdown[{label}]", alive and code is not None,
          f"alive to the end, exit code {code} after SIGINT")
    peer.close()
    return masks


def run_drop(args, work: Path, clip: list[np.ndarray], prompts: list[str], run: int) -> None:
    """Check c: drop_frames=true, frames published at 30 Hz."""
    name = "edgetam_live"
    label = "rgb8,drop_frames=true,30Hz"
    first = "|".join(p for p in prompts if "frame=0" in p)
    started = connect(args, work, name, label, drop_frames=True, prompt=first)
    if started is None:
        return
    node, peer = started
    n = len(clip)
    period = 1.0 / args.rate
    # Messages made beforehand: filling an Image's data from Python takes milliseconds.
    msgs = [rp.image_msg(clip[i % n], "rgb8", stamp_of(run, i), f"{name}_optical_{i}")
            for i in range(args.drop_frames)]
    sent = []
    start = time.perf_counter()
    for i, msg in enumerate(msgs):
        target = start + i * period
        while (left := target - time.perf_counter()) > 0:
            rclpy.spin_once(peer.node, timeout_sec=min(left, 0.005))
        peer.publish(msg)
        sent.append(rp.stamp_key(msg.header))
    last = sent[-1]
    got_last = peer.wait_for(lambda: any(rp.stamp_key(r.msg.header) == last for r in peer.masks),
                             args.timeout)
    peer.spin(1.0)
    index = {k: i for i, k in enumerate(sent)}
    frames = [index.get(rp.stamp_key(r.msg.header)) for r in peer.masks]
    check_stamps(label, peer, sent)
    known = [f for f in frames if f is not None]
    increasing = all(b > a for a, b in zip(known, known[1:]))
    gaps = [b - a for a, b in zip(known, known[1:])]
    check(f"newest_frames[{label}]",
          increasing and got_last and len(known) < len(sent),
          f"{len(sent)} sent in {time.perf_counter() - start:.2f} s, {len(known)} masks, frames "
          f"{known}, increasing {increasing}, last frame's mask {'arrived' if got_last else 'missing'}"
          f", mean gap {np.mean(gaps) if gaps else 0:.1f} frames")
    returned = len(known)
    d = peer.wait_diag(lambda d: rp.diag_int(d, "frames_received") == len(sent)
                       and rp.diag_int(d, "frames_tracked") == returned, 4.0)
    dropped = rp.diag_int(d, "frames_dropped")
    check(f"drop_count[{label}]",
          dropped == len(sent) - returned and rp.diag_int(d, "frames_received") == len(sent),
          f"frames_dropped {dropped} == sent {len(sent)} - returned {returned}; "
          f"/diagnostics {json.dumps(d, sort_keys=True) if d else 'never received'}")
    node.stop()
    peer.close()


def run_bad_frames(args, work: Path, clip: list[np.ndarray], run: int) -> None:
    """Check d: bad frames are survived, counted, and the next good frame gets its mask."""
    name = "edgetam_bad"
    label = "bad frames,rgba8"
    h, w, _ = clip[0].shape
    started = connect(args, work, name, label, drop_frames=False,
                      prompt=rp.clip_prompts(w, h, 1)[0])
    if started is None:
        return
    node, peer = started
    bad = [
        ("16UC1 depth", lambda s, f: rp.raw_image_msg(w, h, "16UC1", 2 * w, bytes(2 * w * h), s, f)),
        ("yuv422", lambda s, f: rp.raw_image_msg(w, h, "yuv422", 2 * w, bytes(2 * w * h), s, f)),
        ("step != width x 3", lambda s, f: rp.raw_image_msg(w, h, "rgb8", 3 * w - 6, bytes(3 * w * h), s, f)),
        ("data shorter than step x height",
         lambda s, f: rp.raw_image_msg(w, h, "rgb8", 3 * w, bytes(3 * w * h - 3 * w), s, f)),
        ("zero size", lambda s, f: rp.raw_image_msg(0, 0, "rgb8", 0, b"", s, f)),
    ]
    seq: list[tuple[str, object]] = [("good", None)]
    for b in bad:
        seq += [b, ("good", None)]
    seq += [("size change 640x480", "resize"), ("good", None), ("good", None)]
    sent: list[tuple] = []
    kinds: list[str] = []
    missing: list[str] = []
    g = 0
    for i, (kind, make) in enumerate(seq):
        stamp, fid = stamp_of(run, i), f"{name}_optical_{i}"
        if kind == "good":
            msg = rp.image_msg(clip[g % len(clip)], "rgba8", stamp, fid)
            g += 1
        elif make == "resize":
            big = rp.clip_frame(g, 640, 480)
            msg = rp.image_msg(big, "rgba8", stamp, fid)
        else:
            msg = make(stamp, fid)
        n = len(peer.masks)
        peer.publish(msg)
        sent.append(rp.stamp_key(msg.header))
        kinds.append(kind)
        if kind == "good":
            if not peer.wait_for(lambda: any(rp.stamp_key(r.msg.header) == sent[-1]
                                             for r in peer.masks[n:]),
                                 args.first_timeout if i == 0 else args.timeout):
                missing.append(f"frame {i} (after {kinds[i - 1] if i else 'start'})")
        else:
            # A bad frame gets no mask; a size change may be tracked: give it time to show.
            peer.spin(2.0 if make == "resize" else 0.3)
    peer.spin(0.5)
    index = {k: i for i, k in enumerate(sent)}
    masked = {index.get(rp.stamp_key(r.msg.header)) for r in peer.masks}
    bad_masked = [kinds[i] for i in masked if i is not None and kinds[i] not in ("good",)]
    resize_i = kinds.index("size change 640x480")
    resize_tracked = resize_i in masked
    expected_bad = len(bad) + (0 if resize_tracked else 1)
    d = peer.wait_diag(lambda d: rp.diag_int(d, "frames_received") == len(sent), 4.0)
    alive = node.alive()
    log = node.log_text()
    # Each kind is logged once with its reason; the log names the diagnostics key it counts.
    kinds_seen = sorted(k for k in (d or {}) if k.startswith("bad_") and k != "bad_frames"
                        and (rp.diag_int(d, k) or 0) > 0)
    logged = [k for k in kinds_seen if f"`{k}`" in log]
    check(f"bad_frames_survived[{label}]",
          alive and not missing and not [k for k in bad_masked if not k.startswith("size")],
          f"node {'alive' if alive else 'DEAD'}; every good frame after a bad one got its mask: "
          f"{'yes' if not missing else 'no, missing ' + ', '.join(missing)}; masks for bad frames: "
          f"{bad_masked or 'none'}; size-change frame {'tracked' if resize_tracked else 'not tracked'}")
    check(f"bad_frames_counted[{label}]",
          rp.diag_int(d, "bad_frames") == expected_bad
          and rp.diag_int(d, "frames_received") == len(sent),
          f"bad_frames {rp.diag_int(d, 'bad_frames')} (expected {expected_bad}), /diagnostics "
          f"{json.dumps(d, sort_keys=True) if d else 'never received'}")
    check(f"bad_frames_logged[{label}]",
          len(kinds_seen) >= 4 and logged == kinds_seen and "16UC1" in log,
          f"kinds counted {kinds_seen}, logged with their reason {logged}")
    (work / "bad_frames.json").write_text(json.dumps(
        {"sequence": kinds, "masked": sorted(i for i in masked if i is not None),
         "diagnostics": d, "log": log.splitlines()[-40:]}, indent=1))
    if not alive or missing:
        print(log_tail(node, 40), flush=True)
    node.stop()
    peer.close()


def run_exits(args) -> None:
    """Check e: load errors end the node with exit 2 and a clear message."""
    missing = "/nonexistent/edgetam-model"
    code, out = rp.run_node_to_exit(args.node, {"model": missing}, {}, 60)
    check("exit[bad model path]", code == 2 and missing in out,
          f"exit {code}; message: {out.strip().splitlines()[-1] if out.strip() else '(none)'}")
    code, out = rp.run_node_to_exit(
        args.node, {"model": args.model, "input_size": str(args.input_size), "precision": "bf16"},
        {"EDGETAM_ISA": "avx2"}, 60)
    check("exit[precision=bf16 under EDGETAM_ISA=avx2]", code == 2 and "bf16" in out,
          f"exit {code}; message: {out.strip().splitlines()[-1] if out.strip() else '(none)'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node", required=True, help="the edgetam-ros2 binary")
    ap.add_argument("--cli", required=True, help="the edgetam binary")
    ap.add_argument("--model", required=True, help="model folder (the random-weight fixture)")
    ap.add_argument("--work", required=True, type=Path, help="scratch folder")
    ap.add_argument("--input-size", type=int, default=256)
    ap.add_argument("--size", default="320x240", help="clip frame size WxH")
    ap.add_argument("--frames", type=int, default=24, help="clip length")
    ap.add_argument("--encoding-frames", type=int, default=10, help="frames of the bgr8 run")
    ap.add_argument("--drop-frames", type=int, default=45, help="frames of the 30 Hz run")
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--discovery-timeout", type=float, default=30.0)
    ap.add_argument("--first-timeout", type=float, default=90.0)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--only", default="", help="comma-separated subset: identity,encoding,drop,bad,exit")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    want = lambda k: not only or k in only  # noqa: E731

    w, h = (int(v) for v in args.size.split("x"))
    args.work.mkdir(parents=True, exist_ok=True)
    clip = [rp.clip_frame(t, w, h) for t in range(args.frames)]
    prompts = rp.clip_prompts(w, h, args.frames)
    frames_dir = args.work / "frames"
    frames_dir.mkdir(exist_ok=True)
    for t, f in enumerate(clip):
        rp.write_png_rgb(frames_dir / f"frame{t:04}.png", f)

    expected = None
    if want("identity") or want("encoding"):
        t = time.perf_counter()
        ok, id_masks, out = run_cli(args.cli, args.model, args.input_size, frames_dir, prompts,
                                    args.work / "cli", 600)
        print(f"edgetam track ({time.perf_counter() - t:.1f} s, "
              f"{'--id-masks' if id_masks else '--dump-logits: ID masks composed here'}): "
              f"{out.splitlines()[-1] if out else ''}", flush=True)
        check("cli_track", ok, out.splitlines()[-1] if out else "no output")
        expected = Expected(args.work / "cli", args.frames, id_masks) if ok else None

    rclpy.init()
    try:
        rgb_masks = []
        if want("identity") and expected:
            rgb_masks = run_lockstep(args, args.work, clip, prompts, expected, "rgb8", 1, args.frames)
        if want("encoding") and expected:
            bgr = run_lockstep(args, args.work, clip, prompts, expected, "bgr8", 2, args.encoding_frames)
            if rgb_masks and bgr:
                same = sum(np.array_equal(a, b) for a, b in zip(rgb_masks, bgr))
                check("encoding[bgr8 == rgb8]", same == len(bgr),
                      f"{same}/{len(bgr)} bgr8 masks equal the rgb8 run's")
        if want("drop"):
            run_drop(args, args.work, clip, prompts, 3)
        if want("bad"):
            run_bad_frames(args, args.work, clip, 4)
    finally:
        rclpy.try_shutdown()
    if want("exit"):
        run_exits(args)

    failed = sum(not ok for _, ok, _ in RESULTS)
    print(f"peer: {len(RESULTS) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
