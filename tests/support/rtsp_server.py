#!/usr/bin/python3
"""A loopback RTSP server for tests/video.rs: serves a live videotestsrc (VP8 over RTP) at
rtsp://127.0.0.1:PORT/test until killed. Needs python3-gi and gir1.2-gst-rtsp-server-1.0."""
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

Gst.init(None)
port = sys.argv[1] if len(sys.argv) > 1 else "8554"
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(
    "( videotestsrc is-live=true pattern=ball ! video/x-raw,width=96,height=64,framerate=15/1 "
    "! vp8enc deadline=1 ! rtpvp8pay name=pay0 pt=96 )"
)
factory.set_shared(True)
server.get_mount_points().add_factory("/test", factory)
if server.attach(None) == 0:
    sys.exit("cannot listen on 127.0.0.1:" + port)
print("ready", flush=True)
GLib.MainLoop().run()
