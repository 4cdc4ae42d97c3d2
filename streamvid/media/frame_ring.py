"""FrameRing: a stream's most recent frames, bounded in seconds of stream time and in bytes.

    ring = FrameRing(seconds=14.0, max_bytes=192 * 2**20)
    ring.put(frame)                     # the newest frame; the oldest go once either bound is passed
    ring.last_at(17.5, within_s=1.0)    # the newest frame at or before 17.5 s, if one is that close
    ring.between(7.5, 21.5)             # the frames in [7.5, 21.5] s, oldest first

Frames are kept by reference (their images are never changed once made). One thread at a time: the owner
(alert_media.AlertMedia) holds its lock around every call.
"""

from __future__ import annotations

from collections import deque

from streamvid.types import Frame

EPS_S = 1e-6


class FrameRing:
    def __init__(self, seconds: float, max_bytes: int) -> None:
        if not seconds >= 0 or not max_bytes > 0:
            raise ValueError(f"a frame ring needs seconds >= 0 and max_bytes > 0, got {seconds}, {max_bytes}")
        self.seconds, self.max_bytes = seconds, max_bytes
        self._frames: deque[Frame] = deque()
        self.nbytes = 0
        self.dropped_for_bytes = 0  # frames dropped by the byte bound while the seconds bound still held them

    def put(self, frame: Frame) -> None:
        """Keep `frame` as the newest (a frame older than the newest restarts the ring: a new input's clock)."""
        if self._frames and frame.t_s < self._frames[-1].t_s - EPS_S:
            self.clear()
        self._frames.append(frame)
        self.nbytes += frame.image.nbytes
        while self._frames[0].t_s < frame.t_s - self.seconds - EPS_S:
            self._drop()
        while self.nbytes > self.max_bytes and len(self._frames) > 1:
            self._drop()
            self.dropped_for_bytes += 1
        if self.nbytes > self.max_bytes:  # one frame larger than the whole ring: none is kept
            self._drop()
            self.dropped_for_bytes += 1

    def _drop(self) -> None:
        self.nbytes -= self._frames.popleft().image.nbytes

    def clear(self) -> None:
        self._frames.clear()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def newest_t_s(self) -> float | None:
        return self._frames[-1].t_s if self._frames else None

    @property
    def span_s(self) -> tuple[float, float] | None:
        """Stream times of the oldest and newest frames kept."""
        return (self._frames[0].t_s, self._frames[-1].t_s) if self._frames else None

    def last_at(self, t_s: float, within_s: float) -> Frame | None:
        """The newest frame at or before `t_s`, if it is at most `within_s` older; else None."""
        for frame in reversed(self._frames):
            if frame.t_s <= t_s + EPS_S:
                return frame if frame.t_s >= t_s - within_s - EPS_S else None
        return None

    def nearest(self, t_s: float, within_s: float) -> Frame | None:
        """The frame nearest to `t_s`, if it is at most `within_s` away; else None."""
        best = min(self._frames, key=lambda f: abs(f.t_s - t_s), default=None)
        return best if best is not None and abs(best.t_s - t_s) <= within_s + EPS_S else None

    def between(self, start_s: float, end_s: float) -> list[Frame]:
        """The frames with start_s <= t_s <= end_s, oldest first."""
        return [f for f in self._frames if start_s - EPS_S <= f.t_s <= end_s + EPS_S]
