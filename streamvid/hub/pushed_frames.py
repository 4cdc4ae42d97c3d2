"""Frames pushed into a hub stream by a client: decoded under the pixel cap, placed on the stream's push clock.

    push_frame(s, png_bytes, "image/png", None, max_pixels, px)   # {"frames_in", "frames_dropped", "t_s"}

A frame's stream time is the client's `t_s` (never going back), or the last frame's time plus the wall time since
it. Refusals are the hub's errors, one line each; a stream that is not "push" is a Conflict.
"""

from __future__ import annotations

import time
from pathlib import Path

import streamvid.hub.images as images
import streamvid.hub.validation as validation
from streamvid.errors import Conflict
from streamvid.hub.stream import HubStream


def push_frame(s: HubStream, image, content_type: str | None, t_s: float | None, max_pixels: int,
               px: int | None) -> dict:
    """PNG/JPEG bytes (of `content_type` when given), an image file's path, or an RGB array into push stream `s`."""
    if s.push is None:
        raise Conflict(f"stream {s.id} plays {s.source!r}: frames can only be pushed to a \"push\" stream")
    if isinstance(image, bytes | bytearray):
        image = images.decode(bytes(image), content_type, max_pixels, px)
    elif isinstance(image, str | Path):
        image = images.load(str(image), max_pixels, px)
    else:
        image = images.prepare(image, max_pixels, px)
    s.check_running()
    with s.lock:
        now = time.monotonic()
        t_s = validation.stream_time(t_s, after_s=s.last_t_s)
        if t_s is None:
            t_s = 0.0 if s.last_t_s is None else s.last_t_s + (now - s.last_push_s)
        s.last_t_s, s.last_push_s = t_s, now
        s.push.push(image, t_s)
    st = s.sa.ingest_stats()
    return {"frames_in": st["frames_in"], "frames_dropped": st["frames_dropped"], "t_s": round(t_s, 3)}
