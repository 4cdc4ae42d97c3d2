"""The sound of a live source (a camera's microphone, a URL's audio track): demuxed beside the frames on the reader
thread, resampled to 16 kHz mono chunks, and held for one listener, the oldest dropped past a bound."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator

from streamvid.audio.pcm import RATE, AudioChunk, Resampler

SOUND_QUEUE_S = 8.0  # seconds of a live source's sound that wait for the listener before the oldest are dropped


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
