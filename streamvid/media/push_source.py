"""Frames pushed by a client (the web page's webcam, a push stream of the HTTP API) as a live frame source: the
newest pushed frame wins, on the stream times the client gives."""

from __future__ import annotations

import threading

import numpy as np

from streamvid.media.decoding import FullFrames, Sampler
from streamvid.media.frame_source import LatestSlot, SourceBase, check_fps_size
from streamvid.types import Frame


class PushSource(SourceBase):
    """Frames pushed by a client at the stream times it gives (the hub's push clock places them: hub/pushed_frames.py);
    live.

    Thread contract: `push` from producer threads (UI callbacks, the hub), `read` from one consumer thread, `close`
    from any thread. `read` returns the newest pushed frame not yet read; a frame overwritten before it was
    read, or older than `max_age_s` when read, counts in `dropped`. After `close`, pushes are ignored (the UI
    may still be streaming) and `read` returns None once the pending frame is drained.
    """

    live = True

    def __init__(self, fps: float, max_age_s: float | None = None) -> None:
        check_fps_size(fps, None)
        if max_age_s is not None and max_age_s <= 0:
            raise ValueError(f"max_age_s must be > 0 or None, got {max_age_s}")
        self._impl = LatestSlot("push source", max_age_s)
        self._full = FullFrames()
        self._lock = threading.Lock()  # guards the sampler and the index
        self._sampler = Sampler(fps)
        self._index = 0

    def push(self, image: np.ndarray, t_s: float) -> None:
        """Offer one (H, W, 3) uint8 RGB image at stream time `t_s`."""
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected an (H, W, 3) uint8 RGB image, got shape {image.shape} dtype {image.dtype}")
        with self._lock:
            if not self._sampler.take(t_s):
                return
            frame = Frame(image=image.copy(), t_s=t_s, index=self._index)
            self._index += 1
            self._full.hand(frame, frame.image)
            self._impl.put(frame)
