"""The frame source a user's text names: "cam:N", a URL, or a video file's path."""

from __future__ import annotations

import re

from streamvid.media.file_source import FileSource
from streamvid.media.frame_source import FrameSource
from streamvid.media.live_source import LiveSource

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def open_source(spec: str, fps: float, realtime: bool = False, size: int | None = None,
                max_frame_pixels: int | None = None) -> FrameSource:
    """A source for `spec`: "cam:N" (/dev/videoN via v4l2, live), a URL such as rtsp:// or http:// (live),
    or a video file path (replay, or live paced to the wall clock when `realtime`); frames above
    `max_frame_pixels` (None: no cap) are refused."""
    if spec.startswith("cam:"):
        device = spec.removeprefix("cam:")
        if not device.isdigit():
            raise ValueError(f"camera spec must be cam:N with N a device number, got {spec!r}")
        return LiveSource(f"/dev/video{device}", fps, size=size, format="v4l2", name=spec,
                          max_frame_pixels=max_frame_pixels)
    if _URL.match(spec):
        return LiveSource(spec, fps, size=size, name=spec, max_frame_pixels=max_frame_pixels)
    return FileSource(spec, fps, realtime=realtime, size=size, max_frame_pixels=max_frame_pixels)
