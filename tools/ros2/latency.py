"""Latency and memory of the edgetam-ros2 node seen from a real ROS 2 peer (issue 41, item 8).

Latency: the peer publishes a frame (sensor_msgs/Image rgb8), waits for its `~/mask`, then sends
the next (drop_frames=false, one object): publish-to-mask-receipt per frame, median and p95 after
a warm-up, against the same frames tracked in-process by `edgetam bench --input DIR` (serial: in
lock-step the node has no next frame to encode ahead). Memory: the node's RSS (/proc/PID/status
VmRSS) every `--rss-every` frames over a long lock-step run.

Run inside the namespace tools/ros2/netns.sh makes, with the venv's python, e.g.

    tools/ros2/netns.sh VENV/bin/python tools/ros2/latency.py --node target/release/edgetam-ros2 \\
        --cli target/release/edgetam --model fixtures/model --work /tmp/lat --json lat.json

Prints a table and writes everything (every frame's latency, the RSS samples) to --json.
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


def pct(v: list[float], q: float) -> float:
    """The q-th percentile, nearest rank (the same rule for the node and the in-process run)."""
    s = sorted(v)
    return s[min(len(s) - 1, max(0, int(np.ceil(q / 100 * len(s))) - 1))]


def bench_box(w: int, h: int) -> str:
    """The box `edgetam bench --input DIR` gives one object (20 %-80 % of the width, 30 %-70 % of
    the height), so that both runs track the same object."""
    return f"obj=1;frame=0;box={w * 0.2:.1f},{h * 0.3:.1f},{w * 0.8:.1f},{h * 0.7:.1f}"


def node_lockstep(args, name: str, w: int, h: int, input_size: int, count: int,
                  rss_every: int = 0, seconds: float = 0) -> dict:
    """Lock-step run of `count` frames (fewer when `seconds` > 0 runs out first)."""
    work = args.work
    topic = f"/cam_{name}/image_raw"
    params = {"model": args.model, "input_size": str(input_size), "drop_frames": "false",
              "encoder_ahead": args.encoder_ahead}
    node = rp.start_node(args.node, name, params, work / f"{name}.log", remap={"image": topic})
    peer = rp.Peer(name, topic)
    try:
        if not (peer.wait_connected(args.discovery_timeout)
                and peer.handshake(args.discovery_timeout)) or not node.alive():
            raise RuntimeError(f"node {name} did not connect:\n{node.log_text()[-3000:]}")
        peer.prompt(bench_box(w, h))
        peer.spin(0.5)
        # A 30-frame cycle of the clip, made once.
        clip = [rp.clip_frame(t, w, h) for t in range(min(count, 30))]
        lat, rss = [], []
        t0 = time.perf_counter()
        for i in range(count):
            if seconds and time.perf_counter() - t0 > seconds:
                rss.append((i - 1, node.rss_kib()))
                break
            msg = rp.image_msg(clip[i % len(clip)], "rgb8", (1_800_000_000 + i // 1000, i % 1000),
                               f"{name}_{i}")
            n = len(peer.masks)
            sent = peer.publish(msg)
            if not peer.wait_mask(n + 1, args.timeout * (3 if i == 0 else 1)):
                raise RuntimeError(f"no mask for frame {i}:\n{node.log_text()[-3000:]}")
            r = peer.masks[-1]
            if rp.stamp_key(r.msg.header) != rp.stamp_key(msg.header):
                raise RuntimeError(f"frame {i}: a mask for another frame arrived")
            lat.append((r.t - sent) * 1e3)
            peer.masks.clear()
            if rss_every and (i % rss_every == 0 or i == count - 1):
                rss.append((i, node.rss_kib()))
                if i % (rss_every * 10) == 0:
                    print(f"  frame {i}: RSS {rss[-1][1]} KiB, {lat[-1]:.1f} ms, "
                          f"{time.perf_counter() - t0:.0f} s", flush=True)
        peer.spin(1.5)
        diag = peer.last_diag()
        return {"latency_ms": lat, "rss_kib": rss, "diagnostics": diag, "frames": len(lat),
                "wall_s": time.perf_counter() - t0}
    finally:
        node.stop()
        peer.close()


def in_process(args, w: int, h: int, count: int, warmup: int) -> dict:
    """`edgetam bench` on the same frames, serial, one object: `warmup` + `count` frames."""
    frames = args.work / f"frames_{w}x{h}"
    frames.mkdir(parents=True, exist_ok=True)
    for t in range(min(warmup + count, 30)):
        rp.write_png_rgb(frames / f"frame{t:04}.png", rp.clip_frame(t, w, h))
    out = args.work / f"bench_{w}x{h}.json"
    cmd = [args.cli, "bench", "--model", args.model, "--input-size", str(args.input_size),
           "--input", str(frames), "--objects", "1", "--frames", str(count),
           "--warmup", str(warmup), "--encoder-ahead", "off", "--json", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
    cfg = json.loads(out.read_text())["configs"][0]
    return {"command": " ".join(cmd), "end_to_end_ms": [f["end_to_end_ms"] for f in cfg["frames"]],
            "threads": cfg.get("threads")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--node", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--sizes", default="640x480,1280x720")
    ap.add_argument("--input-size", type=int, default=512)
    ap.add_argument("--frames", type=int, default=40, help="measured frames per size")
    ap.add_argument("--warmup", type=int, default=8, help="frames before measuring, per round")
    ap.add_argument("--encoder-ahead", default="false", choices=["true", "false"],
                    help="the node's encoder_ahead: off by default, as the in-process run (in "
                         "lock-step there is no next frame to encode ahead)")
    ap.add_argument("--rounds", type=int, default=4,
                    help="node and in-process runs alternate this many times per size (each round "
                         "measures frames/rounds frames), so that a change of load on a shared "
                         "machine falls on both alike")
    ap.add_argument("--rss-frames", type=int, default=5000, help="0: no memory run")
    ap.add_argument("--rss-size", default="320x240")
    ap.add_argument("--rss-input-size", type=int, default=256)
    ap.add_argument("--rss-every", type=int, default=50)
    ap.add_argument("--rss-seconds", type=float, default=0, help="stop the memory run after this long")
    ap.add_argument("--discovery-timeout", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    report: dict = {"input_size": args.input_size, "frames": args.frames, "warmup": args.warmup,
                    "rounds": args.rounds, "sizes": {}}
    rclpy.init()
    try:
        for size in filter(None, args.sizes.split(",")):
            w, h = (int(v) for v in size.split("x"))
            per_round = max(1, args.frames // args.rounds)
            lat, e2e, diags, cmds = [], [], [], []
            for k in range(args.rounds):
                print(f"{size}: round {k + 1}/{args.rounds}: node, lock-step, {args.warmup} + "
                      f"{per_round} frames", flush=True)
                r = node_lockstep(args, f"lat_{w}x{h}_{k}", w, h, args.input_size,
                                  args.warmup + per_round)
                lat += r["latency_ms"][args.warmup:]
                diags.append(r["diagnostics"])
                print(f"{size}: round {k + 1}/{args.rounds}: edgetam bench (in-process)", flush=True)
                b = in_process(args, w, h, per_round, args.warmup)
                e2e += b["end_to_end_ms"]
                cmds.append(b["command"])
            row = {"node_median_ms": pct(lat, 50), "node_p95_ms": pct(lat, 95),
                   "inproc_median_ms": pct(e2e, 50), "inproc_p95_ms": pct(e2e, 95),
                   "node_latency_ms": lat, "inproc_ms": e2e, "rounds": args.rounds,
                   "node_diagnostics": diags, "bench_command": cmds[-1]}
            row["added_median_ms"] = row["node_median_ms"] - row["inproc_median_ms"]
            report["sizes"][size] = row
            print(f"{size}: node {row['node_median_ms']:.1f} / {row['node_p95_ms']:.1f} ms "
                  f"(median / p95), in-process {row['inproc_median_ms']:.1f} / "
                  f"{row['inproc_p95_ms']:.1f} ms, added {row['added_median_ms']:+.1f} ms", flush=True)
            if args.json:
                args.json.write_text(json.dumps(report, indent=1))
        if args.rss_frames:
            w, h = (int(v) for v in args.rss_size.split("x"))
            print(f"memory: {args.rss_frames} frames {args.rss_size} at input {args.rss_input_size}",
                  flush=True)
            r = node_lockstep(args, "rss", w, h, args.rss_input_size, args.rss_frames, args.rss_every,
                              args.rss_seconds)
            samples = [s for s in r["rss_kib"] if s[1] is not None]
            first_after_warm = next((s for s in samples if s[0] >= 100), samples[0])
            report["rss"] = {"frames": r["frames"], "frames_asked": args.rss_frames, "size": args.rss_size,
                             "input_size": args.rss_input_size, "samples": samples,
                             "wall_s": r["wall_s"], "diagnostics": r["diagnostics"],
                             "latency_median_ms": pct(r["latency_ms"], 50)}
            print(f"memory: RSS {samples[0][1]} KiB at frame 0, {first_after_warm[1]} KiB at frame "
                  f"{first_after_warm[0]}, {max(s[1] for s in samples)} KiB max, {samples[-1][1]} KiB "
                  f"at frame {samples[-1][0]}; {r['frames']} frames in {r['wall_s']:.0f} s", flush=True)
            if args.json:
                args.json.write_text(json.dumps(report, indent=1))
    finally:
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
