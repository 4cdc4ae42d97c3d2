"""Replay clips: the frames of a video from t_start to a question time, by random access.

`--mode replay` answers each question on a fresh cache fed only the clip [t0, t] that the benchmark's own
protocol gives it (t0 = 0, or t - context_window_s). `ClipSource` decodes that clip with decord
(`VideoReader.get_batch` on the frame indices) and falls back to PyAV seeking (streamvid.sources.FileSource
with t_start_s) where decord is not installed or cannot open the file.

Frames sit on the grid t0 + k/fps, k = 0, 1, ...; the last one is the latest grid time <= t, so a clip ends
exactly at the question time when t is on the grid (and never after it). Each grid time shows the video frame
displayed then: the last frame whose timestamp is <= the grid time. Single consumer thread; `live` is False.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from streamvid.types import Frame

_EPS_S = 1e-6


def grid_times(t0: float, t: float, fps: float) -> list[float]:
    """t0, t0 + 1/fps, ... up to and including t (within 1e-6 s)."""
    if fps <= 0 or t < t0:
        raise ValueError(f"expected fps > 0 and t0 <= t, got fps={fps}, t0={t0}, t={t}")
    n = math.floor((t - t0) * fps + _EPS_S) + 1
    return [round(t0 + k / fps, 6) for k in range(n)]


class ClipSource:
    """The clip [t0, t] of a video file at `fps`, as a FrameSource (every frame, in order)."""

    live = False
    dropped = 0

    def __init__(self, path: str | Path, t0: float, t: float, fps: float, size: int | None = None,
                 backend: str = "auto") -> None:
        if backend not in ("auto", "decord", "pyav"):
            raise ValueError(f"backend must be auto, decord or pyav, got {backend!r}")
        if not Path(path).is_file():
            raise ValueError(f"video file not found: {path}")
        self.path, self.times = str(path), grid_times(t0, t, fps)
        self.backend = backend
        self._frames = None
        if backend in ("auto", "decord"):
            try:
                self._frames = self._decord(size)
                self.backend = "decord"
            except (ImportError, RuntimeError, OSError) as e:  # decord missing, or it cannot open this file
                if backend == "decord":
                    raise ValueError(f"decord cannot read {path}: {e}") from e
        if self._frames is None:
            self._frames = self._pyav(size)
            self.backend = "pyav"
        self._next = 0

    def _decord(self, size: int | None) -> list[np.ndarray]:
        import decord

        kw = {"width": size, "height": size} if size else {}
        vr = decord.VideoReader(self.path, ctx=decord.cpu(0), num_threads=1, **kw)
        starts = vr.get_frame_timestamp(range(len(vr)))[:, 0]
        idx = [max(0, int(np.searchsorted(starts, tt + _EPS_S, side="right")) - 1) for tt in self.times]
        batch = vr.get_batch(idx).asnumpy()
        return [batch[i] for i in range(len(idx))]

    def _pyav(self, size: int | None) -> list[np.ndarray]:
        import av

        container = av.open(self.path)
        try:
            stream = container.streams.video[0]
            origin = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
            container.seek(int((origin + self.times[0]) / stream.time_base), stream=stream)  # a keyframe at or before
            out: list[np.ndarray] = []
            last = None
            k = 0
            for frame in container.decode(stream):
                ft = (frame.time if frame.time is not None else 0.0) - origin
                while k < len(self.times) and ft > self.times[k] + _EPS_S:
                    if last is None:  # the clip starts before the first decodable frame: show that frame
                        last = frame
                    out.append(_rgb(last, size))
                    k += 1
                if k == len(self.times):
                    break
                last = frame
            while k < len(self.times) and last is not None:  # past the end of the file: the last frame holds
                out.append(_rgb(last, size))
                k += 1
        finally:
            container.close()
        if len(out) != len(self.times):
            raise ValueError(f"cannot decode {self.path} between {self.times[0]} and {self.times[-1]} s")
        return out

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        if self._next >= len(self.times):
            return None
        i = self._next
        self._next += 1
        return Frame(image=self._frames[i], t_s=self.times[i], index=i)

    def close(self) -> None:
        self._frames, self._next = [], len(self.times)


def _rgb(frame, size: int | None) -> np.ndarray:
    if size is None:
        return frame.to_ndarray(format="rgb24")
    return frame.to_ndarray(format="rgb24", width=size, height=size)
