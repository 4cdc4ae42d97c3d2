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
Images are (H, W, 3) uint8 RGB, converted (and resized when `size` is given) by PyAV right after decoding,
never by hand (streamvid.media.decoding). Files and URLs may be held to a frame-size cap (`max_frame_pixels`), URLs to
public hosts (`guard`, streamvid.media.net_policy).

Every source can also hand each sampled frame at its own size, before any resize, to `on_full_frame` (a callable
taking a Frame, set before frames flow; None by default: no second conversion). It is called on the thread that
decodes or pushes (the reader thread of a live source, the consumer's for replay), before the frame is readable,
and sees every sampled frame, also those a live source drops later (alert_media.py keeps them).
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from streamvid.audio.pcm import RATE, AudioChunk, Resampler, file_audio
from streamvid.media.decoding import FullFrames, Sampler, decode_frames, open_container
from streamvid.types import Frame

if TYPE_CHECKING:
    from streamvid.media.net_policy import UrlGuard

THREAD_NAME = "streamvid-source"
JOIN_TIMEOUT_S = 2.0
LIVE_OPEN_TIMEOUT_S = 10.0  # PyAV gives up opening a camera/URL after this long (connect; then probe), by default
LIVE_READ_TIMEOUT_S = 5.0  # ... and a blocked read after this long, so the reader thread always ends
RECONNECT_BACKOFF_S = (0.5, 30.0)  # a lost camera/URL is reopened after 0.5 s, then 1, 2, 4, ... 30, 30 s
SOUND_QUEUE_S = 8.0  # seconds of a live source's sound that wait for the listener before the oldest are dropped
RECONNECT_HEALTHY_S = 10.0  # a connection that delivered this much stream time resets the backoff
MAX_OUTAGE_S = 300.0  # a camera/URL without frames for this long is given up
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


def _check_fps_size(fps: float, size: int | None) -> None:
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    if size is not None and size <= 0:
        raise ValueError(f"size must be a positive number of pixels or None, got {size}")


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
        self.clock_origin_s: float | None = None  # paced: the monotonic time stream time 0 is played at
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
                        clock_origin_s = self.clock_origin_s = time.monotonic() - frame.t_s
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
    _full: FullFrames

    def read(self, timeout_s: float = 1.0) -> Frame | None:
        return self._impl.read(timeout_s)

    @property
    def on_full_frame(self) -> Callable[[Frame], None] | None:
        """The consumer of each sampled frame at the source's own size (see the module's docstring); None: none."""
        return self._full.to

    @on_full_frame.setter
    def on_full_frame(self, consumer: Callable[[Frame], None] | None) -> None:
        self._full.to = consumer

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
    from any thread. A missing, unreadable or undecodable file raises ValueError; one whose frames are larger
    than `max_frame_pixels` (None: no cap) raises FrameTooLarge before a frame is decoded.
    """

    def __init__(self, path: str | Path, fps: float, realtime: bool = False, t_start_s: float = 0.0,
                 t_end_s: float | None = None, size: int | None = None, max_frame_pixels: int | None = None) -> None:
        _check_fps_size(fps, size)
        if t_start_s < 0 or (t_end_s is not None and t_end_s <= t_start_s):
            raise ValueError(f"expected 0 <= t_start_s < t_end_s, got t_start_s={t_start_s}, t_end_s={t_end_s}")
        if not Path(path).is_file():
            raise ValueError(f"video file not found: {path}")
        self.path, self.live = str(path), realtime
        container = open_container(self.path, f"video file {path}", max_frame_pixels)
        stream = container.streams.video[0]
        stream_start_s = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        origin_s = stream_start_s + t_start_s
        if t_start_s > 0:
            container.seek(int(origin_s / stream.time_base), stream=stream)  # lands on a keyframe at or before
        end_s = None if t_end_s is None else t_end_s - t_start_s
        self._sound = (origin_s, end_s) if container.streams.audio else None
        self._full = FullFrames()
        frames = self._full.through(decode_frames(container, fps, size, self.path, origin_s, end_s,
                                                  max_frame_pixels=max_frame_pixels, full=self._full))
        if realtime:  # the reader thread closes the container when it ends
            self._impl = _Pump(frames, self.path, pace=True, on_exit=container.close)
        else:
            self._impl = _Replay(frames, on_close=container.close)


    @property
    def clock_origin_s(self) -> float | None:
        """Paced (`realtime`): the monotonic time at which stream time 0 is played, once the first frame is out;
        what the file's sound is paced by too (hearing.py). None for a replay."""
        return getattr(self._impl, "clock_origin_s", None)

    def sound(self) -> Iterator[AudioChunk] | None:
        """The file's sound on the frames' clock (audio/pcm.file_audio, decoded on its own), or None when it has no
        audio track."""
        if self._sound is None:
            return None
        return file_audio(self.path, origin_s=self._sound[0], end_s=self._sound[1])


class LiveSource(_Source):
    """A camera device or URL opened with PyAV and decoded continuously by a reader thread; live.

    Stream time = pts minus the first frame's pts (`clock()` since open when pts is missing). Thread contract:
    `read` from one consumer thread, `close` from any thread; the container is opened, used and closed only by
    the reader thread (after the first open, here). Errors while opening the first time raise ValueError here.
    `guard` (a `net_policy.UrlGuard`) checks the URL's host before every open and fetches http(s) resources,
    nested ones included, itself; `max_frame_pixels` refuses larger frames (see FileSource). Every open (the first
    and each reopen) gives up after `open_timeout_s` connecting, and again probing (PyAV's open timeout: ffmpeg's
    interrupt callback, so a server that never answers or drips its reply fails too), with a ValueError that names
    the timeout.

    Drops: a stream that fails while decoding, stalls for LIVE_READ_TIMEOUT_S, or ends although it declares no
    duration (a camera, a live RTSP/HTTP stream) is lost, not ended: with `reconnect` (the default) the reader
    reopens it after `sleep(delay_s)`, the delay doubling from `backoff_s[0]` up to `backoff_s[1]` across failed
    opens and across connections that fail again soon; a connection that delivered RECONNECT_HEALTHY_S of stream
    time resets it. An outage (from the loss to the next frame) longer than `max_outage_s` (None: no limit)
    ends the stream: `read` returns None once drained. Stream time goes on through a gap (the first frame after
    it sits at the time of the last frame plus the `clock()` time in between) and `Frame.index` continues.

    `on_status(event, t_s, info)`, when set before frames flow, is called on the reader thread with
    "source_lost" (t_s: when the loss was noticed; info: "reason"), "source_back" (at the first frame after
    an outage; t_s: where the stream resumes; info: "gap_s") and, when it gives up, "source_lost" again with
    info "reason" and "gave_up": True. `outages` and `lost_s` count them. A stream with a duration (a video file
    served over HTTP) ends at its end. Without `reconnect`, a decoding error is re-raised by `read`.

    `clock()` (monotonic seconds) and `sleep(seconds)` (True when the wait was cut short and the reader should
    stop) default to `time.monotonic` and a wait that `close` interrupts; tests pass their own.
    """

    live = True

    def __init__(self, url: str, fps: float, size: int | None = None, format: str | None = None,
                 options: dict[str, str] | None = None, name: str | None = None, reconnect: bool = True,
                 backoff_s: tuple[float, float] = RECONNECT_BACKOFF_S, max_outage_s: float | None = MAX_OUTAGE_S,
                 max_frame_pixels: int | None = None, guard: UrlGuard | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], bool] | None = None, open_timeout_s: float = LIVE_OPEN_TIMEOUT_S) -> None:
        _check_fps_size(fps, size)
        if not 0 < open_timeout_s < float("inf"):
            raise ValueError(f"open_timeout_s must be a number of seconds > 0, got {open_timeout_s}")
        if not 0 < backoff_s[0] <= backoff_s[1]:
            raise ValueError(f"backoff_s must be (first, longest) with 0 < first <= longest, got {backoff_s}")
        if max_outage_s is not None and not max_outage_s > 0:
            raise ValueError(f"max_outage_s must be > 0 or None, got {max_outage_s}")
        self.url, self.name, self.guard, self.open_timeout_s = url, name or url, guard, open_timeout_s
        self.backoff_s, self.max_outage_s, self.max_frame_pixels = backoff_s, max_outage_s, max_frame_pixels
        self._format, self._options = format, dict(options or {})
        self._halt = threading.Event()
        self._clock, self._sleep = clock, sleep or self._halt.wait
        self._full = FullFrames()
        self._container = self._connect()
        self.finite = self._container.duration is not None
        self._sound = LiveSound() if self._container.streams.audio else None
        self.on_status: Callable[[str, float, dict], None] | None = None
        self.outages = 0  # times the stream was lost
        self.lost_s = 0.0  # stream seconds without frames because of outages (up to the last "source_back")
        on_audio = self._sound.put if self._sound is not None else None
        frames = self._reconnecting(fps, size) if reconnect else self._full.through(decode_frames(
            self._container, fps, size, self.name, clock=clock, max_frame_pixels=max_frame_pixels,
            on_audio=on_audio, full=self._full))
        self._impl = _Pump(frames, self.name, pace=False, on_exit=self._exit)

    def _exit(self) -> None:
        self._container.close()
        if self._sound is not None:
            self._sound.end()

    def sound(self) -> Iterator[AudioChunk] | None:
        """The stream's sound on the frames' clock, demuxed beside them (16 kHz mono chunks; the newest
        SOUND_QUEUE_S seconds wait for the reader, older ones are dropped), or None when it has no audio track."""
        return None if self._sound is None else self._sound.chunks()

    def _connect(self):
        """A fresh container for the URL (checked by the guard, when there is one); ValueError when it fails."""
        target, kwargs = self.url, {"format": self._format, "options": dict(self._options),
                                    "timeout": (self.open_timeout_s, LIVE_READ_TIMEOUT_S)}
        if self.guard is not None:
            try:
                target, extra = self.guard.prepare(self.url)
            except OSError as e:  # an http(s) URL that does not answer (a refused one raises AddressRefused)
                raise ValueError(f"cannot open {self.name}: {e}") from None
            kwargs["options"].update(extra.pop("options", {}))
            kwargs["format"] = extra.pop("format", None) or self._format
            kwargs.update(extra)
        started_s = time.monotonic()
        try:
            return open_container(target, self.name, self.max_frame_pixels, **kwargs)
        except ValueError as e:
            if type(e) is ValueError and time.monotonic() - started_s >= self.open_timeout_s:
                # ffmpeg's interrupt callback ended it ("Immediate exit requested"): say which limit did
                raise ValueError(f"cannot open {self.name}: no answer within {self.open_timeout_s:g} s "
                                 f"(the open timeout)") from None
            raise

    def _reconnecting(self, fps: float, size: int | None) -> Iterator[Frame]:
        """Frames of every connection in turn, on one clock and one index (reader thread only)."""
        base_t_s, base_index = 0.0, 0  # where the current connection's own time and index start
        last: Frame | None = None
        last_wall_s = self._clock()
        delay_s = self.backoff_s[0]  # the next wait before reopening
        lost_t_s, outage_start_s = None, 0.0  # stream time and clock() of the current outage's start, if any

        def now_t_s() -> float:
            return (last.t_s if last is not None else base_t_s) + self._clock() - last_wall_s

        while True:
            reason, span = "the stream ended", None  # span: (first, last) stream time of this connection
            try:
                on_audio = None if self._sound is None else (
                    lambda t, f, base=base_t_s: self._sound.put(base + t, f))
                for frame in decode_frames(self._container, fps, size, self.name, clock=self._clock,
                                           max_frame_pixels=self.max_frame_pixels, on_audio=on_audio,
                                           full=self._full):
                    if lost_t_s is not None:  # the first frame after an outage: the stream is back
                        back_t_s = now_t_s()
                        self.lost_s += back_t_s - lost_t_s
                        base_t_s, base_index = back_t_s, (last.index + 1 if last is not None else base_index)
                        self._status("source_back", back_t_s, {"gap_s": round(back_t_s - lost_t_s, 3)})
                        lost_t_s = None
                    last = Frame(frame.image, base_t_s + frame.t_s, base_index + frame.index)
                    self._full.hand(last)
                    last_wall_s = self._clock()
                    span = (span[0] if span else last.t_s, last.t_s)
                    yield last
            except ValueError as e:  # a decoding error, a stalled read, a refused nested URL
                reason = str(e)
            else:
                if self.finite:
                    return
            self._container.close()
            if span is not None and span[1] - span[0] >= RECONNECT_HEALTHY_S:
                delay_s = self.backoff_s[0]
            if lost_t_s is None:  # a new outage (else a reopened connection failed before its first frame)
                lost_t_s, outage_start_s = now_t_s(), self._clock()
                self.outages += 1
                self._status("source_lost", lost_t_s, {"reason": reason})
            while True:
                left_s = None if self.max_outage_s is None else self.max_outage_s - (self._clock() - outage_start_s)
                if left_s is not None and left_s <= 0:
                    self._status("source_lost", now_t_s(), {
                        "reason": f"no frames for {self.max_outage_s:g} s, given up: {reason}", "gave_up": True})
                    return
                wait_s = delay_s if left_s is None else min(delay_s, left_s)
                delay_s = min(2 * delay_s, self.backoff_s[1])
                if self._sleep(wait_s) or self._halt.is_set():
                    return
                try:
                    self._container = self._connect()
                    break
                except ValueError as e:
                    reason = str(e)

    def _status(self, event: str, t_s: float, info: dict) -> None:
        if self.on_status is not None:
            self.on_status(event, t_s, info)

    def close(self) -> None:
        self._halt.set()
        super().close()


class LiveSound:
    """A live source's sound: decoded audio frames (reader thread) -> 16 kHz mono chunks for one consumer
    (`chunks`), at most SOUND_QUEUE_S seconds waiting (the oldest dropped: a live stream does not wait)."""

    def __init__(self) -> None:
        self._chunks: deque[AudioChunk | None] = deque(maxlen=int(SOUND_QUEUE_S / 0.02) + 1)
        self._ready = threading.Condition()
        self._resample = Resampler()
        self.dropped_s = 0.0

    def put(self, t_s: float, frame) -> None:
        samples = self._resample(frame)
        if not len(samples):
            return
        with self._ready:
            if len(self._chunks) == self._chunks.maxlen and self._chunks[0] is not None:
                self.dropped_s += len(self._chunks[0].samples) / RATE
            self._chunks.append(AudioChunk(max(0.0, t_s), samples))
            self._ready.notify_all()

    def end(self) -> None:
        with self._ready:
            self._chunks.append(None)
            self._ready.notify_all()

    def chunks(self) -> Iterator[AudioChunk]:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: bool(self._chunks))
                chunk = self._chunks.popleft()
            if chunk is None:
                return
            yield chunk


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
        self._full = FullFrames()
        self._lock = threading.Lock()  # guards the sampler, the index and the first push time
        self._sampler = Sampler(fps)
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
            self._full.hand(frame, frame.image)
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
        self._full = FullFrames()
        frames = self._full.through((Frame(image=make_frame(i, i / fps), t_s=i / fps, index=i)
                                     for i in range(n_frames)), same_size=True)
        self._impl = _Pump(frames, "synthetic source", pace=True) if live else _Replay(frames)
