"""What every frame source is (`FrameSource`), and the machinery the kinds share: a one-frame mailbox, a reader
thread that fills it, and every-frame replay on the consumer's thread.

The kinds, one module each: files (file_source.py), cameras and URLs (live_source.py, their sound in
live_sound.py), frames pushed by a client (push_source.py) and synthetic frames for tests (synthetic_source.py);
`open_source` (source_spec.py) picks one from what a user typed. All yield `Frame`s.

Two semantics, chosen per source and exposed as `source.live`:

* every-frame (`live=False`: file replay, synthetic): `read()` returns every sampled frame, in order, as fast
  as the consumer reads. Nothing is ever dropped; the consumer sets the pace. Used for scoring and tests.
* latest-frame (`live=True`: camera, URL, pushed frames, `--realtime` file): a producer (a daemon reader thread
  named "streamvid-source", or a client calling `push()`) runs at its own pace and never waits for the consumer.
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

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from streamvid.media.decoding import FullFrames
from streamvid.types import Frame

THREAD_NAME = "streamvid-source"
JOIN_TIMEOUT_S = 2.0


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


def check_fps_size(fps: float, size: int | None) -> None:
    """ValueError unless `fps` > 0 and `size` is None or a positive number of pixels."""
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    if size is not None and size <= 0:
        raise ValueError(f"size must be a positive number of pixels or None, got {size}")


class LatestSlot:
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


class Pump:
    """A daemon thread "streamvid-source" that moves frames from an iterator into a `LatestSlot`.

    Thread contract: the iterator is consumed (and `on_exit` called) only by the reader thread; `read` from
    one consumer thread; `close` from any thread. With `pace`, frame t_s is held to the wall clock
    (`Event.wait(delay)`, which `close` interrupts). An exception in the reader is re-raised by `read`.
    """

    def __init__(self, frames: Iterable[Frame], name: str, pace: bool,
                 on_exit: Callable[[], None] = lambda: None) -> None:
        self._frames, self._pace, self._on_exit = frames, pace, on_exit
        self.clock_origin_s: float | None = None  # paced: the monotonic time stream time 0 is played at
        self._slot = LatestSlot(name)
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


class Replay:
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


class SourceBase:
    """`read`, `dropped` and `close` of the public sources, forwarded to a `Replay` (every frame), a `Pump`
    or a `LatestSlot` (latest frame); the thread contract is the one of that object."""

    live: bool
    _impl: Replay | Pump | LatestSlot
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
