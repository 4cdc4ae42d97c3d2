"""Cameras and URLs as frame sources: opened with PyAV (a URL's host checked first), decoded by a reader thread,
reopened with a backoff when the stream drops, and given up after a long outage; live (latest frame wins)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from streamvid.audio.pcm import AudioChunk
from streamvid.media.decoding import FullFrames, decode_frames, open_container
from streamvid.media.frame_source import Pump, SourceBase, check_fps_size
from streamvid.media.live_sound import LiveSound
from streamvid.types import Frame

if TYPE_CHECKING:
    from streamvid.media.net_policy import UrlGuard

LIVE_OPEN_TIMEOUT_S = 10.0  # PyAV gives up opening a camera/URL after this long (connect; then probe), by default
LIVE_READ_TIMEOUT_S = 5.0  # ... and a blocked read after this long, so the reader thread always ends
RECONNECT_BACKOFF_S = (0.5, 30.0)  # a lost camera/URL is reopened after 0.5 s, then 1, 2, 4, ... 30, 30 s
RECONNECT_HEALTHY_S = 10.0  # a connection that delivered this much stream time resets the backoff
MAX_OUTAGE_S = 300.0  # a camera/URL without frames for this long is given up


class LiveSource(SourceBase):
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
        check_fps_size(fps, size)
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
        self._impl = Pump(frames, self.name, pace=False, on_exit=self._exit)

    def _exit(self) -> None:
        self._container.close()
        if self._sound is not None:
            self._sound.end()

    def sound(self) -> Iterator[AudioChunk] | None:
        """The stream's sound on the frames' clock, demuxed beside them (16 kHz mono chunks; the newest
        live_sound.SOUND_QUEUE_S seconds wait for the reader, older ones are dropped), or None when it has no audio track."""
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
