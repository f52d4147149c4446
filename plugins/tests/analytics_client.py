#!/usr/bin/env python3
"""An application-style client of edgetamtrack's analytics metas (GStreamer >= 1.24, PyGObject).

It runs a live pipeline (appsrc is-live=true fed with the application's frames, or videotestsrc
is-live=true ! edgetamtrack live-mode=true ! fakesink sync=true), reads every buffer's GstAnalyticsRelationMeta in a pad probe (tracking,
object-detection and, on GStreamer 1.26 builds, segmentation Mtds with their relations) and the
element's `edgetam-tracking` bus messages, then checks that they agree: ids, boxes,
confidences, first / last seen, lost flags and masks (against the message's areas and the
element's own ROI-meta masks). Buffers the element passed untracked (live mode) must carry
the Mtds of the last tracked buffer.

Run by plugins/tests/analytics_launch.rs inside the Debian 13 root (scripts/test-debian13.sh)
with GST_PLUGIN_PATH pointing at the plugin; by hand:

    GST_PLUGIN_PATH=target/release python3 plugins/tests/analytics_client.py \
        --model /path/to/model [--frames frames.rgb] [--segmentation]

Needs python3-gi, gir1.2-gst-plugins-bad-1.0 (GstAnalytics) and gir1.2-gst-plugins-base-1.0.
Exit status 0 when every check holds; the summary goes to stdout.
"""

import argparse
import math
import sys
import time

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import GLib, Gst, GstAnalytics, GstVideo  # noqa: E402

RELATE_TO = GstAnalytics.RelTypes.RELATE_TO


def related(rmeta, first, second):
    return bool(rmeta.get_relation(first.id, second.id) & RELATE_TO)


def mask_values(buf):
    """A GRAY8 mask buffer's (width, height, bytes) through its video meta."""
    vmeta = GstVideo.buffer_get_video_meta(buf)
    if vmeta is None:
        raise AssertionError("segmentation mask without a GstVideoMeta")
    if vmeta.format != GstVideo.VideoFormat.GRAY8:
        raise AssertionError(f"mask format {vmeta.format}, expected GRAY8")
    data = buf.extract_dup(0, buf.get_size())
    stride, offset = vmeta.stride[0], vmeta.offset[0]
    rows = [data[offset + r * stride: offset + r * stride + vmeta.width] for r in range(vmeta.height)]
    return vmeta.width, vmeta.height, b"".join(rows)


def roi_mask(buf, obj_id):
    """The element's ROI meta of object `obj_id`: its param structure's mask and fields."""
    meta = GstVideo.buffer_get_video_region_of_interest_meta_id(buf, obj_id)
    if meta is None:
        return None
    param = meta.get_param("edgetam")
    mask = param.get_value("mask")
    return {
        "mask": mask.extract_dup(0, mask.get_size()),
        "width": param.get_value("mask-width"),
        "stale": param.get_value("stale"),
    }


def read_buffer(buf):
    """Everything the relation meta of `buf` says, per tracking id."""
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    if rmeta is None:
        return None
    mtds = list(rmeta)
    tracks = [m for m in mtds if isinstance(m, GstAnalytics.TrackingMtd)]
    ods = [m for m in mtds if isinstance(m, GstAnalytics.ODMtd)]
    segs = [m for m in mtds if type(m).__name__ == "SegmentationMtd"]
    out = {}
    for t in tracks:
        ok, tid, first, last, lost = t.get_info()
        assert ok
        entry = {"first": first, "last": last, "lost": lost, "od": None, "seg": None}
        for od in ods:
            if related(rmeta, od, t):
                ok, x, y, w, h, conf = od.get_location()
                assert ok
                label = GLib.quark_to_string(od.get_obj_type())
                assert entry["od"] is None, f"two OD Mtds related to track {tid}"
                entry["od"] = {"box": (x, y, w, h), "conf": conf, "label": label}
                for seg in segs:
                    if related(rmeta, od, seg):
                        mask, mx, my, mw, mh = seg.get_mask()
                        regions = [seg.get_region_id(i) for i in range(seg.get_region_count())]
                        entry["seg"] = {
                            "loc": (mx, my, mw, mh),
                            "regions": regions,
                            "mask": mask_values(mask),
                        }
        out[tid] = entry
    return out


def read_rois(buf, ids):
    """The element's ROI-meta masks of the objects `ids` that have one."""
    return {i: r for i in ids if (r := roi_mask(buf, i)) is not None}


def structures(value):
    """A message's GstValueArray of structures as a list."""
    return [value[i] for i in range(len(value))] if not isinstance(value, list) else value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--buffers", type=int, default=45)
    ap.add_argument("--frames", help="raw RGB frames (WIDTH x HEIGHT each) to push through "
                    "appsrc; default: videotestsrc")
    ap.add_argument("--width", type=int, default=240)
    ap.add_argument("--height", type=int, default=160)
    ap.add_argument("--fps", type=int, default=15)
    ap.add_argument("--prompts", default="obj=1;frame=0;box=20,20,110,120|obj=2;frame=0;box=130,40,220,140")
    ap.add_argument("--expect-lost", action="store_true",
                    help="the frames hide the objects for a while: expect lost tracks and "
                    "objects seen again")
    ap.add_argument("--segmentation", action="store_true",
                    help="expect segmentation Mtds (a GStreamer 1.26 build, feature v1_26)")
    args = ap.parse_args()

    Gst.init(None)
    width, height = args.width, args.height
    prompts = args.prompts
    caps = f"video/x-raw,format=RGB,width={width},height={height},framerate={args.fps}/1"
    if args.frames:
        # An application's own frames, pushed live (timestamped with the pipeline clock on
        # arrival, at the frame rate).
        source = f"appsrc name=src is-live=true format=time do-timestamp=true caps={caps}"
    else:
        source = f"videotestsrc is-live=true num-buffers={args.buffers} pattern=smpte ! {caps}"
    pipeline = Gst.parse_launch(
        f"{source} ! "
        f'edgetamtrack name=track model="{args.model}" prompts="{prompts}" '
        "live-mode=true post-messages=true ! fakesink name=sink sync=true"
    )
    seen = []  # (pts, {track id: ...}) per buffer, in order

    rois = {}  # pts -> the element's ROI-meta masks per object id

    def probe(pad, info):
        buf = info.get_buffer()
        tracks = read_buffer(buf)
        seen.append((buf.pts, tracks))
        rois[buf.pts] = read_rois(buf, tracks or {})
        return Gst.PadProbeReturn.OK

    pipeline.get_by_name("sink").get_static_pad("sink").add_probe(Gst.PadProbeType.BUFFER, probe)
    messages = {}  # pts -> objects of the edgetam-tracking message
    bus = pipeline.get_bus()
    pipeline.set_state(Gst.State.PLAYING)
    if args.frames:
        with open(args.frames, "rb") as f:
            data = f.read()
        size = width * height * 3
        frames = [data[i:i + size] for i in range(0, len(data) - size + 1, size)]
        assert frames, f"{args.frames}: no {width}x{height} RGB frame"
        src = pipeline.get_by_name("src")
        for i in range(args.buffers):
            src.emit("push-buffer", Gst.Buffer.new_wrapped(frames[i % len(frames)]))
            time.sleep(1.0 / args.fps)
        src.emit("end-of-stream")
    while True:
        msg = bus.timed_pop_filtered(
            60 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR | Gst.MessageType.ELEMENT)
        if msg is None:
            raise AssertionError("no EOS within 60 s")
        if msg.type == Gst.MessageType.ERROR:
            err, dbg = msg.parse_error()
            raise AssertionError(f"pipeline error: {err.message} ({dbg})")
        if msg.type == Gst.MessageType.EOS:
            break
        s = msg.get_structure()
        if s is not None and s.get_name() == "edgetam-tracking":
            objs = []
            for o in structures(s.get_value("objects")):
                objs.append({k: o.get_value(k) for k in (
                    "id", "visible", "score", "area", "x", "y", "width", "height", "label",
                    "first-seen", "last-seen")})
            messages[s.get_value("pts")] = objs
    pipeline.set_state(Gst.State.NULL)

    assert len(seen) == args.buffers, f"{len(seen)} buffers reached the sink of {args.buffers}"
    assert messages, "no buffer was tracked"
    checked = {"od": 0, "tracking": 0, "segmentation": 0, "stale": 0, "lost": 0}
    ids = set()
    last_tracked = None
    for pts, tracks in seen:
        if pts not in messages:
            # Passed untracked (live mode): the last tracked buffer's Mtds, unchanged.
            if last_tracked is not None:
                assert tracks == last_tracked, f"stale buffer {pts}: {tracks} != {last_tracked}"
                assert all(r["stale"] for r in rois[pts].values()), f"buffer {pts}: not stale"
                checked["stale"] += 1
            continue
        objs = messages[pts]
        assert tracks is not None, f"tracked buffer {pts} without a relation meta"
        assert sorted(tracks) == sorted(o["id"] for o in objs), f"buffer {pts}: ids differ"
        for o in objs:
            t = tracks[o["id"]]
            ids.add(o["id"])
            assert (t["first"], t["last"]) == (o["first-seen"], o["last-seen"]), (pts, t, o)
            assert t["lost"] == (not o["visible"]), (pts, t, o)
            checked["tracking"] += 1
            if not o["visible"]:
                assert t["od"] is None, f"lost object {o['id']} with an OD Mtd"
                checked["lost"] += 1
                continue
            od = t["od"]
            assert od is not None, f"visible object {o['id']} without an OD Mtd"
            box = (o["x"], o["y"], o["width"], o["height"])
            assert od["box"] == box, f"buffer {pts} object {o['id']}: {od['box']} != {box}"
            presence = 1.0 / (1.0 + math.exp(-o["score"]))
            assert abs(od["conf"] - presence) < 1e-6, (od["conf"], presence)
            assert od["label"] == o["label"], (od["label"], o["label"])
            checked["od"] += 1
            seg = t["seg"]
            if not args.segmentation:
                assert seg is None
                continue
            assert seg is not None, f"visible object {o['id']} without a segmentation Mtd"
            assert seg["loc"] == box, (seg["loc"], box)
            assert seg["regions"] == [0, 1], seg["regions"]
            mw, mh, values = seg["mask"]
            assert (mw, mh) == (box[2], box[3]), (mw, mh, box)
            assert set(values) <= {0, 1}
            assert sum(values) == o["area"], (sum(values), o["area"])
            # The element's full-frame ROI-meta mask, cut to the box, is the same mask.
            roi = rois[pts][o["id"]]
            fw = roi["width"]
            x, y, w, h = box
            cut = b"".join(roi["mask"][(y + r) * fw + x:(y + r) * fw + x + w] for r in range(h))
            assert cut == values, f"buffer {pts} object {o['id']}: mask differs from the ROI meta's"
            assert not roi["stale"]
            checked["segmentation"] += 1
        last_tracked = tracks
    assert checked["od"] > 0, "no visible object was checked"
    if args.expect_lost:
        assert checked["lost"] > 0, "no lost object was checked"
        assert any(
            t["lost"] is False and t["last"] > t["first"]
            for p, tr in seen if p in messages for t in tr.values()
        ), "no object was seen again after its first buffer"
    if args.segmentation:
        assert checked["segmentation"] == checked["od"]
    print(f"python client ({Gst.version_string()}): {len(seen)} buffers from a live "
          f"{'appsrc' if args.frames else 'videotestsrc'}, {len(messages)} tracked, {checked['stale']} untracked with the last "
          f"tracked Mtds; object ids {sorted(ids)}; checked {checked['tracking']} tracking Mtds "
          f"({checked['lost']} lost), {checked['od']} OD Mtds, "
          f"{checked['segmentation']} segmentation masks")
    first_tracked = next(t for p, t in seen if p in messages)
    for tid, t in sorted(first_tracked.items()):
        od = t["od"]
        print(f"  first tracked buffer: object {tid}: first seen {t['first']} ns, lost {t['lost']}"
              + (f", box {od['box']}, confidence {od['conf']:.3f}, label {od['label']}" if od else ""))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"python client: check failed: {e}", file=sys.stderr)
        sys.exit(1)
