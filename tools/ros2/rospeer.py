"""Shared parts of the rclpy peers of the edgetam-ros2 node (peer_checks.py, latency.py).

A deterministic clip, PNG helpers, starting and stopping the node, and a small rclpy peer that
publishes frames and prompts and collects masks and /diagnostics. Run these programs with the
python of the venv scripts/test-ros2.sh builds (rclpy from PyPI wheels), inside a private network
namespace, with FASTDDS_DEFAULT_PROFILES_FILE=tools/ros2/fastdds-loopback.xml and
ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT (the profile says why).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image as PilImage

import rclpy
from rclpy.node import Node
from rclpy.qos import (
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    DurabilityPolicy,
    qos_profile_sensor_data,
)
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image
from std_msgs.msg import String

# ---------------------------------------------------------------------------------------------
# The clip


def clip_frame(t: int, width: int, height: int) -> np.ndarray:
    """Frame `t` (H x W x 3, uint8, RGB) of the test clip: a textured gradient, a red square
    moving right, a blue disc moving left and up (the two cross mid-clip, so that masks can
    overlap), and a yellow bar that enters on frame 5. Pure integer arithmetic: the same bytes
    on every machine and numpy version."""
    y, x = np.mgrid[0:height, 0:width].astype(np.int64)
    img = np.empty((height, width, 3), np.int64)
    img[..., 0] = 20 + (x * 60) // max(width, 1) + ((x * 7 + y * 13 + t * 3) % 17)
    img[..., 1] = 30 + (y * 50) // max(height, 1) + ((x * 11 + y * 5) % 13)
    img[..., 2] = 50 + ((x + y + 2 * t) % 23)
    sx = width // 8 + (t * width) // 64
    sy = height // 4
    side = max(width, height) // 5
    sq = (x >= sx) & (x < sx + side) & (y >= sy) & (y < sy + side)
    img[sq] = (220, 40, 35)
    cx = (width * 3) // 4 - (t * width) // 80
    cy = (height * 3) // 4 - (t * height) // 100
    r = max(width, height) // 8
    disc = (x - cx) ** 2 + (y - cy) ** 2 < r * r
    img[disc] = (40, 70, 225)
    if t >= 5:
        bx = width // 10
        by = height - height // 6 - (t - 5) * max(height // 120, 1)
        bar = (x >= bx) & (x < bx + width // 3) & (y >= by) & (y < by + height // 12)
        img[bar] = (230, 210, 40)
    return np.clip(img, 0, 255).astype(np.uint8)


def clip_prompts(width: int, height: int, frames: int) -> list[str]:
    """Prompts in the CLI's syntax for the clip: object 1 a box on the square (frame 0),
    object 2 a positive and a negative point on the disc (frame 0), object 3 a box on the bar
    (frame 5, added mid-stream, when the clip is long enough)."""
    side = max(width, height) // 5
    sx, sy = width // 8, height // 4
    r = max(width, height) // 8
    cx, cy = (width * 3) // 4, (height * 3) // 4
    out = [
        f"obj=1;frame=0;box={sx - 3},{sy - 3},{sx + side + 2},{sy + side + 2}",
        f"obj=2;frame=0;point={cx},{cy},1;point={max(cx - 2 * r, 0)},{cy},0",
    ]
    if frames > 5:
        bx, by = width // 10, height - height // 6
        out.append(f"obj=3;frame=5;box={bx - 2},{by - 2},{bx + width // 3 + 1},{by + height // 12 + 1}")
    return out


def write_png_rgb(path: Path, rgb: np.ndarray) -> None:
    PilImage.fromarray(rgb, "RGB").save(path)


def read_png_u16(path: Path) -> np.ndarray:
    """A 16-bit (or 8-bit) grayscale PNG as a uint16 array."""
    with PilImage.open(path) as im:
        a = np.array(im)
    return a.astype(np.uint16)


def read_png_u8(path: Path) -> np.ndarray:
    with PilImage.open(path) as im:
        return np.array(im.convert("L"))


# ---------------------------------------------------------------------------------------------
# Messages


def image_msg(rgb: np.ndarray, encoding: str, stamp: tuple[int, int], frame_id: str) -> Image:
    """`rgb` (H x W x 3) as a sensor_msgs/Image in `encoding` (rgb8, bgr8, rgba8, bgra8, mono8)."""
    h, w, _ = rgb.shape
    if encoding == "rgb8":
        px = rgb
    elif encoding == "bgr8":
        px = rgb[..., ::-1]
    elif encoding in ("rgba8", "bgra8"):
        c = rgb if encoding == "rgba8" else rgb[..., ::-1]
        px = np.concatenate([c, np.full((h, w, 1), 255, np.uint8)], axis=2)
    elif encoding == "mono8":
        px = rgb[..., 1]
    else:
        raise ValueError(f"unsupported test encoding {encoding}")
    px = np.ascontiguousarray(px)
    m = Image()
    m.header.stamp = Time(sec=stamp[0], nanosec=stamp[1])
    m.header.frame_id = frame_id
    m.height, m.width = h, w
    m.encoding = encoding
    m.is_bigendian = 0
    m.step = px.nbytes // h
    m.data = px.tobytes()
    return m


def raw_image_msg(width: int, height: int, encoding: str, step: int, data: bytes,
                  stamp: tuple[int, int], frame_id: str) -> Image:
    """An Image with exactly the given fields (for bad frames)."""
    m = Image()
    m.header.stamp = Time(sec=stamp[0], nanosec=stamp[1])
    m.header.frame_id = frame_id
    m.width, m.height, m.encoding, m.step, m.is_bigendian = width, height, encoding, step, 0
    m.data = data
    return m


def stamp_key(header) -> tuple[int, int, str]:
    return (header.stamp.sec, header.stamp.nanosec, header.frame_id)


def mask_array(m: Image) -> np.ndarray:
    """A mono16 little-endian mask message as an H x W uint16 array (checks its layout)."""
    if m.encoding != "mono16":
        raise ValueError(f"mask encoding {m.encoding!r}, expected mono16")
    if m.step != 2 * m.width or len(m.data) != m.step * m.height or m.is_bigendian:
        raise ValueError(
            f"mask layout: {m.width}x{m.height} step {m.step} data {len(m.data)} "
            f"big-endian {m.is_bigendian}")
    return np.frombuffer(bytes(m.data), "<u2").reshape(m.height, m.width)


# ---------------------------------------------------------------------------------------------
# The node process


@dataclass
class NodeProcess:
    """An edgetam-ros2 process started by `start_node`; stderr goes to `log`."""

    proc: subprocess.Popen
    log: Path
    name: str

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL; the exit code."""
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None:
                break
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.poll()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def rss_kib(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None


def node_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The node's environment: the peer's, minus the Fast DDS profile (the node is RustDDS),
    with discovery on localhost as a user would run it."""
    env = dict(os.environ)
    env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("RUST_BACKTRACE", "1")
    if extra:
        env.update(extra)
    return env


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the peer dies (a `timeout` that kills the peer
    must not leave a node behind in the namespace)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def start_node(binary: str, name: str, params: dict[str, str], log: Path,
               remap: dict[str, str] | None = None, env: dict[str, str] | None = None) -> NodeProcess:
    args = [binary, "--ros-args", "-r", f"__node:={name}"]
    for k, v in (remap or {}).items():
        args += ["-r", f"{k}:={v}"]
    for k, v in params.items():
        args += ["-p", f"{k}:={v}"]
    f = open(log, "wb")
    proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=node_env(env),
                            preexec_fn=_die_with_parent)
    f.close()
    return NodeProcess(proc, log, name)


def run_node_to_exit(binary: str, params: dict[str, str], env: dict[str, str],
                     timeout: float) -> tuple[int | None, str]:
    """Runs the node that is expected to exit by itself (load errors): exit code and output."""
    args = [binary, "--ros-args"]
    for k, v in params.items():
        args += ["-p", f"{k}:={v}"]
    try:
        p = subprocess.run(args, capture_output=True, env=node_env(env), timeout=timeout,
                           preexec_fn=_die_with_parent)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        return None, out.decode(errors="replace")
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


# ---------------------------------------------------------------------------------------------
# The rclpy peer


@dataclass
class Received:
    t: float  # time.perf_counter() at receipt
    msg: Image


@dataclass
class Peer:
    """One rclpy node talking to one edgetam-ros2 node called `name` whose `image` is remapped
    to `image_topic`."""

    name: str
    image_topic: str
    node: Node = field(init=False)
    masks: list[Received] = field(default_factory=list)
    diagnostics: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.node = rclpy.create_node(f"edgetam_peer_{os.getpid()}_{self.name}")
        reliable = QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=100,
            reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
        self.image_pub = self.node.create_publisher(Image, self.image_topic, qos_profile_sensor_data)
        self.prompt_pub = self.node.create_publisher(String, f"/{self.name}/prompt", reliable)
        self.node.create_subscription(
            Image, f"/{self.name}/mask",
            lambda m: self.masks.append(Received(time.perf_counter(), m)), reliable)
        self.node.create_subscription(
            DiagnosticArray, "/diagnostics", self._on_diagnostics, reliable)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name.startswith(f"{self.name}:") or st.name.startswith(f"/{self.name}:"):
                self.diagnostics.append({kv.key: kv.value for kv in st.values})

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            rclpy.spin_once(self.node, timeout_sec=min(left, 0.05))

    def wait_for(self, pred, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > end:
                return False
            rclpy.spin_once(self.node, timeout_sec=0.01)
        return True

    def wait_connected(self, timeout: float) -> bool:
        """Waits until the node reads our image and prompt topics and we read its masks."""
        ok = self.wait_for(
            lambda: self.image_pub.get_subscription_count() >= 1
            and self.prompt_pub.get_subscription_count() >= 1
            and self.node.count_publishers(f"/{self.name}/mask") >= 1,
            timeout)
        # Both directions: give the node's side of discovery a moment to match our writers.
        self.spin(1.0)
        return ok

    def handshake(self, timeout: float) -> bool:
        """Sends a bad prompt until /diagnostics counts it (rejected_prompts): then the node has
        matched our prompt writer. A prompt sent as soon as we see the node's reader can still be
        lost (its side of discovery may not have matched us yet, and the topic is volatile); a
        bad prompt changes nothing."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.prompt("edgetam-peer-handshake")
            if self.wait_for(lambda: (diag_int(self.last_diag(), "rejected_prompts") or 0) >= 1, 1.5):
                return True
        return False

    def prompt(self, text: str) -> None:
        self.prompt_pub.publish(String(data=text))

    def publish(self, msg: Image) -> float:
        t = time.perf_counter()
        self.image_pub.publish(msg)
        return t

    def wait_mask(self, count: int, timeout: float) -> bool:
        return self.wait_for(lambda: len(self.masks) >= count, timeout)

    def last_diag(self) -> dict[str, str] | None:
        return self.diagnostics[-1] if self.diagnostics else None

    def wait_diag(self, pred, timeout: float) -> dict[str, str] | None:
        """The newest /diagnostics values once `pred` holds for them (or the newest at timeout)."""
        self.wait_for(lambda: bool(self.diagnostics) and pred(self.diagnostics[-1]), timeout)
        return self.last_diag()

    def close(self) -> None:
        self.node.destroy_node()


def diag_int(d: dict[str, str] | None, key: str) -> int | None:
    if not d or key not in d:
        return None
    try:
        return int(float(d[key]))
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# ID masks composed from `edgetam track --dump-logits`, independently of the Rust code


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (F32, U8 and the other plain dtypes)."""
    import json
    import struct

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    dtypes = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "U8": "u1", "I64": "<i8", "I32": "<i4",
              "U32": "<u4", "U16": "<u2"}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(raw[base + a:base + b], dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


def _taps(in_size: int, out_size: int):
    """torch's bilinear taps (align_corners=False) in f32, as the tracker computes them:
    src = max(scale * (o + 0.5) - 0.5, 0), i0 = min(floor(src), in - 1), i1 = i0 + (i0 < in - 1),
    l1 = clamp(src - i0, 0, 1), l0 = 1 - l1."""
    scale = np.float32(in_size) / np.float32(out_size)
    o = np.arange(out_size, dtype=np.float32)
    src = np.maximum(scale * (o + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    l1 = np.clip(src - i0.astype(np.float32), np.float32(0), np.float32(1)).astype(np.float32)
    i1 = i0 + (i0 < in_size - 1)
    return i0, i1, (np.float32(1) - l1).astype(np.float32), l1


def resize_logits(low: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of f32 logits [h, w] to [height, width] with torch's arithmetic (a width
    pass, then a height pass; each product rounded to f32, then the sum)."""
    low = low.astype(np.float32)
    h, w = low.shape
    if w != width:
        i0, i1, l0, l1 = _taps(w, width)
        low = low[:, i0] * l0 + low[:, i1] * l1
    if h != height:
        i0, i1, l0, l1 = _taps(h, height)
        low = low[i0, :] * l0[:, None] + low[i1, :] * l1[:, None]
    return low


def compose_id_mask(objects: dict[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The ID mask from {id: (mask u8 [H,W], full-resolution logits f32 [H,W])}: a pixel goes to
    the object with the highest logit among those whose mask is set there, equal logits to the
    lower id, 0 where no mask is set (the rule of the node's `~/mask`)."""
    ids = sorted(objects)
    if not ids:
        raise ValueError("no objects")
    masks = np.stack([objects[i][0] != 0 for i in ids])
    logits = np.stack([np.where(objects[i][0] != 0, objects[i][1], -np.inf) for i in ids])
    best = np.argmax(logits, axis=0)  # the first (lowest id) among equal maxima
    out = np.asarray(ids, np.uint16)[best]
    return np.where(masks.any(axis=0), out, np.uint16(0)).astype(np.uint16)
