"""Replay clips: the frames of a video from t_start to a question time, by random access.

`--mode replay` answers each question on a fresh cache fed only the clip [t0, t] that the benchmark's own
protocol gives it (t0 = 0, or t - context_window_s). `ClipSource` decodes that clip with decord
(`VideoReader.get_batch` on the frame indices, a few frames at a time as they are read) and falls back to PyAV
seeking where decord is not installed or cannot open the file.

Frames sit on the grid t0 + k/fps, k = 0, 1, ...; the last one is the latest grid time <= t, so a clip ends
exactly at the question time when t is on the grid (and never after it); a question after the end of the video
sees the clip up to the last frame (`times` then ends there). Each grid time shows the video frame displayed
then: the last frame whose timestamp is <= the grid time. Frames are decoded lazily (memory stays at one batch).
Single consumer thread; `live` is False.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from streamvid.media.geometry import centre_square, scaled_size
from streamvid.types import Frame

_EPS_S = 1e-6
BATCH = 16  # frames decoded per decord call


def grid_times(t0: float, t: float, fps: float) -> list[float]:
    """t0, t0 + 1/fps, ... up to and including t (within 1e-6 s)."""
    if fps <= 0 or t < t0:
        raise ValueError(f"expected fps > 0 and t0 <= t, got fps={fps}, t0={t0}, t={t}")
    n = math.floor((t - t0) * fps + _EPS_S) + 1
    return [round(t0 + k / fps, 6) for k in range(n)]


class ClipSource:
    """The clip [t0, t] of a video file at `fps`, as a FrameSource (every frame, in order).

    `times` are the grid times of the frames it yields (known once the source is open); `backend` says which
    decoder was used."""

    live = False
    dropped = 0

    def __init__(self, path: str | Path, t0: float, t: float, fps: float, size: int | None = None,
                 backend: str = "auto") -> None:
        if backend not in ("auto", "decord", "pyav"):
            raise ValueError(f"backend must be auto, decord or pyav, got {backend!r}")
        if not Path(path).is_file():
            raise ValueError(f"video file not found: {path}")
        self.path, self.size = str(path), size
        self.times = grid_times(t0, t, fps)
        # one clear error for a file no decoder can open (before decord logs its own); its frames' size
        self._source_size = _video_size(self.path)
        self._frames: Iterator[np.ndarray] | None = None
        if backend in ("auto", "decord"):
            try:
                self._frames = self._decord()
                self.backend = "decord"
            except (ImportError, RuntimeError, OSError) as e:  # decord missing, or it cannot open this file
                if backend == "decord":
                    raise ValueError(f"decord cannot read {path}: {e}") from e
        if self._frames is None:
            self._frames = self._pyav()
            self.backend = "pyav"
        self._next = 0

    def _decord(self) -> Iterator[np.ndarray]:
        import decord

        kw = {}
        if self.size:  # decord scales as it decodes; the centre square is kept below (media/geometry.py)
            kw["width"], kw["height"] = scaled_size(*self._source_size, self.size)
        vr = decord.VideoReader(self.path, ctx=decord.cpu(0), num_threads=1, **kw)
        stamps = vr.get_frame_timestamp(range(len(vr)))
        if len(vr) == 0:
            raise RuntimeError("no frames")
        self.times = [g for g in self.times if g < stamps[-1, 1] - _EPS_S] or self.times[:1]
        idx = [max(0, int(np.searchsorted(stamps[:, 0], g + _EPS_S, side="right")) - 1) for g in self.times]

        def frames() -> Iterator[np.ndarray]:
            for i in range(0, len(idx), BATCH):
                batch = vr.get_batch(idx[i:i + BATCH]).asnumpy()
                yield from (np.ascontiguousarray(centre_square(f)) if self.size else f for f in batch)
        return frames()

    def _pyav(self) -> Iterator[np.ndarray]:
        import av

        from streamvid.media.decoding import to_rgb

        container = av.open(self.path)
        stream = container.streams.video[0]
        origin = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        if stream.duration is not None:
            end = float(stream.duration * stream.time_base)
            self.times = [g for g in self.times if g < end - _EPS_S] or self.times[:1]
        times = list(self.times)
        container.seek(int((origin + times[0]) / stream.time_base), stream=stream)  # a keyframe at or before

        def frames() -> Iterator[np.ndarray]:
            k, last = 0, None
            try:
                for frame in container.decode(stream):
                    ft = (frame.time if frame.time is not None else 0.0) - origin
                    while k < len(times) and ft > times[k] + _EPS_S:
                        yield to_rgb(frame if last is None else last, self.size)  # before the first frame: show it
                        k += 1
                    if k == len(times):
                        return
                    last = frame
                period = 1.0 / float(stream.average_rate) if stream.average_rate else 0.0
                end = (last.time or 0.0) - origin + period if last is not None else 0.0
                while k < len(times) and last is not None and times[k] < end - _EPS_S:  # the last frame's span
                    yield to_rgb(last, self.size)
                    k += 1
            except av.error.FFmpegError as e:
                raise ValueError(f"cannot decode {self.path}: {e}") from e
            finally:
                container.close()
        return frames()

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        if self._next >= len(self.times):
            return None
        image = next(self._frames, None)
        if image is None:  # the video ended before t: the clip ends with its last frame
            self.times = self.times[:self._next]
            return None
        i = self._next
        self._next += 1
        return Frame(image=image, t_s=self.times[i], index=i)

    def close(self) -> None:
        self._next = len(self.times)
        if self._frames is not None:
            close = getattr(self._frames, "close", None)
            if close is not None:
                close()


def _video_size(path: str) -> tuple[int, int]:
    """(width, height) of the first video stream's frames; ValueError in one line when there is none or no decoder
    can open the file."""
    import av

    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise ValueError(f"no video stream in {path}")
            codec = container.streams.video[0].codec_context
            return codec.width, codec.height
    except av.error.FFmpegError as e:
        raise ValueError(f"cannot read video {path}: {e.strerror or e}") from None
