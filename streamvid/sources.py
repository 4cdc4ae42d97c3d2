"""Frame sources: files, camera devices, URLs, UI pushes and synthetic frames, all yielding `Frame`s.

Two semantics, chosen per source and exposed as `source.live`:

* every-frame (`live=False`: file replay, synthetic): `read()` returns every sampled frame, in order, as fast
  as the consumer reads. Nothing is ever dropped; the consumer sets the pace. Used for scoring and tests.
* latest-frame (`live=True`: camera, URL, UI push, `--realtime` file): a producer (a daemon reader thread
  named "streamvid-source", or the UI calling `push()`) runs at its own pace and never waits for the consumer.
  Only the newest frame is kept; `read()` returns the newest frame not yet read. A frame overwritten before
  it was read is counted in `dropped`, and the gap shows in `Frame.index`. `read()` raises `TimeoutError`
  when nothing new arrives within `timeout_s`.

All sources first resample to `fps` on the grid k/fps of stream time: a frame is kept when its time reaches
the next grid point (frames skipped this way are sampling, not drops). `Frame.index` counts sampled frames.
Images are (H, W, 3) uint8 RGB, converted (and resized when `size` is given) by PyAV, never by hand.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import av
import numpy as np

from streamvid.types import Frame

THREAD_NAME = "streamvid-source"
JOIN_TIMEOUT_S = 2.0
LIVE_OPEN_TIMEOUT_S = 10.0  # PyAV gives up opening a camera/URL after this long
LIVE_READ_TIMEOUT_S = 5.0  # ... and a blocked read after this long, so the reader thread always ends
RECONNECT_BACKOFF_S = (0.5, 8.0)  # a lost camera/URL is reopened after 0.5 s, then 1, 2, 4, 8, 8, ... s
_GRID_EPS_S = 1e-6  # float slack when comparing a frame time with a grid point
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class FrameSource(Protocol):
    live: bool  # True: latest-frame-wins, never blocks the producer; False: every sampled frame, in order

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        """Next frame; None at end of stream. Live sources raise TimeoutError when nothing new arrives."""
        ...

    @property
    def dropped(self) -> int:
        """Frames a live source discarded because the consumer was slower (0 for replay)."""
        ...

    def close(self) -> None:
        """Idempotent; stops any reader thread and joins it with a bound."""
        ...


def open_source(spec: str, fps: float, realtime: bool = False, size: int | None = None) -> FrameSource:
    """A source for `spec`: "cam:N" (/dev/videoN via v4l2, live), a URL such as rtsp:// or http:// (live),
    or a video file path (replay, or live paced to the wall clock when `realtime`)."""
    if spec.startswith("cam:"):
        device = spec.removeprefix("cam:")
        if not device.isdigit():
            raise ValueError(f"camera spec must be cam:N with N a device number, got {spec!r}")
        return LiveSource(f"/dev/video{device}", fps, size=size, format="v4l2", name=spec)
    if _URL.match(spec):
        return LiveSource(spec, fps, size=size, name=spec)
    return FileSource(spec, fps, realtime=realtime, size=size)


def _check_fps_size(fps: float, size: int | None) -> None:
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    if size is not None and size <= 0:
        raise ValueError(f"size must be a positive number of pixels or None, got {size}")


class _Sampler:
    """Keeps frames on the grid k/fps: accepts the first time at or past the next grid point. One thread."""

    def __init__(self, fps: float) -> None:
        self._period_s = 1.0 / fps
        self._k = 0  # index of the next grid point

    def take(self, t_s: float) -> bool:
        if t_s < self._k * self._period_s - _GRID_EPS_S:
            return False
        # Past a gap in the stream, jump to the first grid point after t_s instead of catching up.
        self._k = max(self._k + 1, math.floor(t_s / self._period_s + _GRID_EPS_S) + 1)
        return True


def _open(target: str, name: str, **kwargs):
    """An open PyAV container that has a video stream, decoded with frame threads; ValueError otherwise."""
    try:
        container = av.open(target, **kwargs)
    except av.error.FFmpegError as e:
        raise ValueError(f"cannot open {name}: {e}") from e
    if not container.streams.video:
        container.close()
        raise ValueError(f"no video stream in {name}")
    container.streams.video[0].thread_type = "AUTO"
    return container


def _to_rgb(frame: av.VideoFrame, size: int | None) -> np.ndarray:
    if size is None:
        return frame.to_ndarray(format="rgb24")
    return frame.to_ndarray(format="rgb24", width=size, height=size)


def _decode(container, fps: float, size: int | None, name: str, origin_s: float | None = None,
            end_s: float | None = None) -> Iterator[Frame]:
    """Sampled RGB frames of the first video stream of an open container (which the caller closes).

    Stream time is the frame's pts in seconds minus `origin_s`, or minus the first frame's pts when
    `origin_s` is None (live). Frames before the origin are skipped, decoding stops at `end_s`. A frame
    without pts gets the previous time + 1/rate for a file, the wall clock since decoding started when live.
    """
    stream = container.streams.video[0]
    frame_period_s = 1.0 / float(stream.average_rate) if stream.average_rate else 0.0
    sampler, index, t_s = _Sampler(fps), 0, -frame_period_s
    live, started_s = origin_s is None, time.monotonic()
    try:
        for frame in container.decode(stream):
            if frame.time is None:
                t_s = time.monotonic() - started_s if live else t_s + frame_period_s
            else:
                if origin_s is None:
                    origin_s = frame.time
                t_s = frame.time - origin_s
            if t_s < -_GRID_EPS_S:  # decoded from the keyframe before the seek target
                continue
            if end_s is not None and t_s >= end_s - _GRID_EPS_S:
                return
            if sampler.take(t_s):
                yield Frame(image=_to_rgb(frame, size), t_s=max(t_s, 0.0), index=index)
                index += 1
    except av.error.FFmpegError as e:
        raise ValueError(f"cannot decode {name}: {e}") from e


class _LatestSlot:
    """One-frame mailbox between a producer and one consumer.

    Thread contract: `put` from the producer thread; `read` from the consumer thread; `close` from either.
    All state is guarded by `_cond`. After `close`, `put` is ignored and `read` drains the pending frame, then
    raises the stored producer error, if any, else returns None.
    """

    def __init__(self, name: str, max_age_s: float | None = None) -> None:
        self._name = name
        self._max_age_s = max_age_s
        self._cond = threading.Condition()
        self._frame: Frame | None = None
        self._put_s = 0.0  # monotonic time of the pending frame's put
        self._closed = False
        self._error: Exception | None = None
        self.dropped = 0

    def put(self, frame: Frame) -> None:
        with self._cond:
            if self._closed:
                return
            if self._frame is not None:
                self.dropped += 1
            self._frame, self._put_s = frame, time.monotonic()
            self._cond.notify_all()

    def close(self, error: Exception | None = None) -> None:
        with self._cond:
            self._closed = True
            self._error = self._error or error
            self._cond.notify_all()

    def _ready(self) -> bool:
        stale = self._max_age_s is not None and time.monotonic() - self._put_s > self._max_age_s
        if self._frame is not None and stale:
            self._frame = None
            self.dropped += 1
        return self._frame is not None or self._closed

    def read(self, timeout_s: float) -> Frame | None:
        with self._cond:
            if not self._cond.wait_for(self._ready, timeout=timeout_s):
                raise TimeoutError(f"no frame from {self._name} within {timeout_s:g} s")
            frame, self._frame = self._frame, None
            if frame is None and self._error is not None:
                raise self._error
            return frame


class _Pump:
    """A daemon thread "streamvid-source" that moves frames from an iterator into a `_LatestSlot`.

    Thread contract: the iterator is consumed (and `on_exit` called) only by the reader thread; `read` from
    one consumer thread; `close` from any thread. With `pace`, frame t_s is held to the wall clock
    (`Event.wait(delay)`, which `close` interrupts). An exception in the reader is re-raised by `read`.
    """

    def __init__(self, frames: Iterable[Frame], name: str, pace: bool,
                 on_exit: Callable[[], None] = lambda: None) -> None:
        self._frames, self._pace, self._on_exit = frames, pace, on_exit
        self._slot = _LatestSlot(name)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        error, clock_origin_s = None, None
        try:
            for frame in self._frames:
                if self._pace:
                    if clock_origin_s is None:
                        clock_origin_s = time.monotonic() - frame.t_s
                    delay_s = clock_origin_s + frame.t_s - time.monotonic()
                    if delay_s > 0 and self._stop.wait(delay_s):
                        break
                if self._stop.is_set():
                    break
                self._slot.put(frame)
        except Exception as e:  # handed to the consumer by read(), not swallowed
            error = e
        finally:
            self._on_exit()
            self._slot.close(error)

    def read(self, timeout_s: float) -> Frame | None:
        return self._slot.read(timeout_s)

    @property
    def dropped(self) -> int:
        return self._slot.dropped

    def close(self) -> None:
        self._slot.close()
        self._stop.set()
        self._thread.join(timeout=JOIN_TIMEOUT_S)


class _Replay:
    """Every-frame reading of an iterator on the consumer's thread (one thread); `on_close` runs once."""

    dropped = 0

    def __init__(self, frames: Iterable[Frame], on_close: Callable[[], None] = lambda: None) -> None:
        self._frames: Iterator[Frame] | None = iter(frames)
        self._on_close = on_close

    def read(self, timeout_s: float) -> Frame | None:
        return None if self._frames is None else next(self._frames, None)

    def close(self) -> None:
        if self._frames is not None:
            self._frames = None
            self._on_close()


class _Source:
    """`read`, `dropped` and `close` of the public sources, forwarded to a `_Replay` (every frame), a `_Pump`
    or a `_LatestSlot` (latest frame); the thread contract is the one of that object."""

    live: bool
    _impl: _Replay | _Pump | _LatestSlot

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        return self._impl.read(timeout_s)

    @property
    def dropped(self) -> int:
        return self._impl.dropped

    def close(self) -> None:
        self._impl.close()


class FileSource(_Source):
    """A video file decoded with PyAV, resampled to `fps`, between `t_start_s` and `t_end_s` (exclusive).

    Frame.t_s = the frame's own pts time minus the stream start and `t_start_s` (so the first frame is at
    ~0.0), not the grid time. Replay (`realtime=False`): every sampled frame in order, `live=False`;
    `read`/`close` from one consumer thread. `realtime=True`: a reader thread paces frames to the wall clock
    and the source is live (latest frame wins, `dropped` counts); `read` from one consumer thread, `close`
    from any thread. A missing, unreadable or undecodable file raises ValueError.
    """

    def __init__(self, path: str | Path, fps: float, realtime: bool = False, t_start_s: float = 0.0,
                 t_end_s: float | None = None, size: int | None = None) -> None:
        _check_fps_size(fps, size)
        if t_start_s < 0 or (t_end_s is not None and t_end_s <= t_start_s):
            raise ValueError(f"expected 0 <= t_start_s < t_end_s, got t_start_s={t_start_s}, t_end_s={t_end_s}")
        if not Path(path).is_file():
            raise ValueError(f"video file not found: {path}")
        self.path, self.live = str(path), realtime
        container = _open(self.path, f"video file {path}")
        stream = container.streams.video[0]
        stream_start_s = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        origin_s = stream_start_s + t_start_s
        if t_start_s > 0:
            container.seek(int(origin_s / stream.time_base), stream=stream)  # lands on a keyframe at or before
        end_s = None if t_end_s is None else t_end_s - t_start_s
        frames = _decode(container, fps, size, self.path, origin_s, end_s)
        if realtime:  # the reader thread closes the container when it ends
            self._impl = _Pump(frames, self.path, pace=True, on_exit=container.close)
        else:
            self._impl = _Replay(frames, on_close=container.close)


class LiveSource(_Source):
    """A camera device or URL opened with PyAV and decoded continuously by a reader thread; live.

    Stream time = pts minus the first frame's pts (wall clock since open when pts is missing). Thread
    contract: `read` from one consumer thread, `close` from any thread; the container is opened, used and closed
    only by the reader thread (after the first open, here). Errors while opening the first time raise ValueError
    here.

    Drops: a stream that fails while decoding, stalls for LIVE_READ_TIMEOUT_S, or ends although it declares no
    duration (a camera, a live RTSP/HTTP stream) is lost, not ended: with `reconnect` (the default) the reader
    reopens it with exponential backoff (`backoff_s` = first and longest wait) until it is back or the source is
    closed. Stream time goes on through the gap (the first frame after it sits at the time of the last frame
    plus the wall time in between) and `Frame.index` continues. `on_status(event, t_s, info)`, when set before
    frames flow, is called on the reader thread with "source_lost" (t_s: when the loss was noticed; info:
    "reason") and "source_back" (t_s: where the stream resumes; info: "gap_s"); `outages` and `lost_s` count
    them. A stream with a duration (a video file served over HTTP) ends at its end. Without `reconnect`, a
    decoding error is re-raised by `read`.
    """

    live = True

    def __init__(self, url: str, fps: float, size: int | None = None, format: str | None = None,
                 options: dict[str, str] | None = None, name: str | None = None, reconnect: bool = True,
                 backoff_s: tuple[float, float] = RECONNECT_BACKOFF_S) -> None:
        _check_fps_size(fps, size)
        if not 0 < backoff_s[0] <= backoff_s[1]:
            raise ValueError(f"backoff_s must be (first, longest) with 0 < first <= longest, got {backoff_s}")
        self.name = name or url
        self._open = functools.partial(_open, url, self.name, format=format, options=options or {},
                                       timeout=(LIVE_OPEN_TIMEOUT_S, LIVE_READ_TIMEOUT_S))
        self._container = self._open()
        self.finite = self._container.duration is not None
        self.on_status: Callable[[str, float, dict], None] | None = None
        self.outages = 0  # times the stream was lost
        self.lost_s = 0.0  # stream seconds without frames because of outages (up to the last "source_back")
        self._backoff_s = backoff_s
        self._halt = threading.Event()
        frames = self._reconnecting(fps, size) if reconnect else _decode(self._container, fps, size, self.name)
        self._impl = _Pump(frames, self.name, pace=False, on_exit=lambda: self._container.close())

    def _reconnecting(self, fps: float, size: int | None) -> Iterator[Frame]:
        """Frames of every connection in turn, on one clock and one index (reader thread only)."""
        base_t_s, base_index = 0.0, 0  # where the current connection's own time and index start
        last: Frame | None = None
        last_wall_s = time.monotonic()
        while True:
            reason = "the stream ended"
            try:
                for frame in _decode(self._container, fps, size, self.name):
                    last = Frame(frame.image, base_t_s + frame.t_s, base_index + frame.index)
                    last_wall_s = time.monotonic()
                    yield last
            except ValueError as e:  # a decoding error or a stalled read
                reason = str(e)
            else:
                if self.finite:
                    return
            lost_t_s = (last.t_s if last is not None else base_t_s) + time.monotonic() - last_wall_s
            self.outages += 1
            self._status("source_lost", lost_t_s, {"reason": reason})
            self._container.close()
            delay_s = self._backoff_s[0]
            while True:
                if self._halt.wait(delay_s):
                    return
                try:
                    self._container = self._open()
                    break
                except ValueError:
                    delay_s = min(2 * delay_s, self._backoff_s[1])
            back_t_s = (last.t_s if last is not None else base_t_s) + time.monotonic() - last_wall_s
            self.lost_s += back_t_s - lost_t_s
            base_t_s, base_index = back_t_s, (last.index + 1 if last is not None else base_index)
            self._status("source_back", back_t_s, {"gap_s": round(back_t_s - lost_t_s, 3)})

    def _status(self, event: str, t_s: float, info: dict) -> None:
        if self.on_status is not None:
            self.on_status(event, t_s, info)

    def close(self) -> None:
        self._halt.set()
        super().close()


class PushSource(_Source):
    """Frames pushed by the UI (e.g. a Gradio webcam stream callback); live.

    Thread contract: `push` from producer threads (UI callbacks), `read` from one consumer thread, `close`
    from any thread. `read` returns the newest pushed frame not yet read; a frame overwritten before it was
    read, or older than `max_age_s` when read, counts in `dropped`. After `close`, pushes are ignored (the UI
    may still be streaming) and `read` returns None once the pending frame is drained.
    """

    live = True

    def __init__(self, fps: float, max_age_s: float | None = None) -> None:
        _check_fps_size(fps, None)
        if max_age_s is not None and max_age_s <= 0:
            raise ValueError(f"max_age_s must be > 0 or None, got {max_age_s}")
        self._impl = _LatestSlot("push source", max_age_s)
        self._lock = threading.Lock()  # guards the sampler, the index and the first push time
        self._sampler = _Sampler(fps)
        self._index = 0
        self._first_push_s: float | None = None

    def push(self, image: np.ndarray, t_s: float | None = None) -> None:
        """Offer one (H, W, 3) uint8 RGB image at stream time `t_s` (None: wall time since the first push)."""
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected an (H, W, 3) uint8 RGB image, got shape {image.shape} dtype {image.dtype}")
        with self._lock:
            now_s = time.monotonic()
            self._first_push_s = self._first_push_s if self._first_push_s is not None else now_s
            t_s = now_s - self._first_push_s if t_s is None else t_s
            if not self._sampler.take(t_s):
                return
            frame = Frame(image=image.copy(), t_s=t_s, index=self._index)
            self._index += 1
            self._impl.put(frame)


class SyntheticSource(_Source):
    """`n_frames` frames from `make_frame(index, t_s)` at t_s = index / fps; for tests.

    Not live by default: every frame, in order, `read`/`close` from one consumer thread. `live=True` paces
    the frames to the wall clock on a reader thread, with the same contract as a realtime FileSource.
    """

    def __init__(self, make_frame: Callable[[int, float], np.ndarray], fps: float, n_frames: int,
                 live: bool = False) -> None:
        _check_fps_size(fps, None)
        self.live = live
        frames = (Frame(image=make_frame(i, i / fps), t_s=i / fps, index=i) for i in range(n_frames))
        self._impl = _Pump(frames, "synthetic source", pace=True) if live else _Replay(frames)
