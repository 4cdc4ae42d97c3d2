"""Hearing: a stream's sound fed to its listener (audio/listener.py), from the source or pushed by a client.

    hearing = Hearing(stream, load_recognizer(config.asr), voice_events=True)   # pushed sound: hearing.push(samples, t_s);
                                                                 # the detector's edges are voice_activity outputs
    hearing = hearing_for(config, source, stream, replay=True)  # a source's own sound, read on a thread; None
                                                                 # when it has none or config.audio is "off"
    hearing.stats()      # {"audio_s_in", "utterances", "asr_s"}
    hearing.close()

A source's sound is read on its own thread (`streamvid-audio`): paced to the wall clock for a live source (the
file is played as it is watched), as fast as the listener takes it for a replay, whose frames then wait for
their sound to be transcribed (`ingest.wait_for_sound`), so a replay is reproducible.

Pushed sound is placed in the input's time, as frames are (the stream adds a resumed session's offset to both):
at the client's `t_s`, else where the last push ended while the sound flows, else (the first push, or after a
pause in it) where the video is: the stream's newest frame, whatever times the frames carried.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from streamvid.audio.asr import Recognizer, load_recognizer
from streamvid.audio.listener import Listener
from streamvid.audio.pcm import CHUNK_S, RATE, AudioChunk
from streamvid.audio.recognition import fair
from streamvid.config import EngineConfig
from streamvid.engine.stream import BusyError, Stream

log = logging.getLogger("streamvid")

# pushed sound that stops this long past real time has paused: un-timed sound then resumes where the video is (long
# enough that a browser microphone whose 0.5-s chunks a loaded server takes late is not cut into pieces)
PAUSE_S = 5.0


class Hearing:
    def __init__(self, stream: Stream, recognizer: Recognizer, voice_events: bool = False):
        self.stream = stream
        # every stream's utterances take turns at the shared recogniser (audio/recognition.py)
        self.listener = Listener(fair(recognizer).on_behalf(stream.id), on_utterance=stream.hear, on_heard=stream.heard,
                                 name=f"streamvid-listen-{stream.id}", hint=stream.hints,
                                 on_voice=stream.voice if voice_events else None)
        self._reader: threading.Thread | None = None
        self._stop = threading.Event()
        self._pushed_end: float | None = None  # input time where the last pushed sound ended
        self._pushed_wall = (0.0, 0.0)  # (monotonic time it was pushed at, its length in seconds)

    def feed(self, chunk: AudioChunk, timeout_s: float | None = None) -> bool:
        """Sound in input times, in order. ValueError for sound that goes back in time."""
        return self.listener.feed(chunk, timeout_s)

    def push(self, samples: np.ndarray, t_s: float | None = None, timeout_s: float = 5.0) -> float:
        """Pushed sound (mono float32 at pcm.RATE, e.g. pcm.wav_samples / pcm16_samples of a request body) starting
        at input time `t_s` (None: where the last push ended, or where the video is (`video_t_s`, whatever times
        the frames carried) for the first one and after the sound paused, see `_untimed_start`).
        Returns its start. ValueError (one line) when it starts before the last push ended or the time is not a
        finite number >= 0; BusyError when the listener is more than QUEUE_S behind for `timeout_s`."""
        if t_s is None:
            t_s = self._untimed_start()
        if not isinstance(t_s, (int, float)) or not math.isfinite(t_s) or t_s < 0:
            raise ValueError(f"t_s must be a number of seconds >= 0, got {t_s!r}")
        if self._pushed_end is not None and t_s < self._pushed_end - 1e-3:
            raise ValueError(f"audio goes back in time: it starts at {t_s:.3f} s, the last ended at "
                             f"{self._pushed_end:.3f} s")
        step = int(CHUNK_S * RATE)
        for i in range(0, len(samples), step):
            if not self.listener.feed(AudioChunk(t_s + i / RATE, samples[i:i + step]), timeout_s=timeout_s):
                raise BusyError("busy: the speech recogniser is behind; send the sound again shortly")
        self._pushed_end = t_s + len(samples) / RATE
        self._pushed_wall = (time.monotonic(), len(samples) / RATE)
        return t_s

    def _untimed_start(self) -> float:
        """Where sound pushed without a time starts: where the last push ended while the sound flows (each push
        coming within its predecessor's length + PAUSE_S of wall time), else (the first push, or after a pause)
        where the video is, when that is later."""
        video = self.video_t_s()
        if self._pushed_end is None:
            return video
        at, length = self._pushed_wall
        if time.monotonic() - at > length + PAUSE_S:
            return max(self._pushed_end, video)
        return self._pushed_end

    def video_t_s(self) -> float:
        """Where the stream's video is, in input time (sound's time, as `push` takes it): its newest frame's
        session time less the session's offset (a resumed session's frames and sound are both moved by it once,
        when the stream takes them in)."""
        return max(0.0, self.stream.clock.input_t(self.stream.ingest.latest_t_s))

    def finish(self) -> None:
        self.listener.finish()

    def set_silence(self, silence_s: float) -> None:
        """How long a pause ends an utterance (the voice detector's `silence_s`), from the next one on."""
        self.listener.segmenter.silence_s = silence_s

    def read(self, chunks: Iterator[AudioChunk], clock: Callable[[], float | None] | None = None) -> None:
        """Read `chunks` on a thread into the listener. With `clock` (the monotonic time stream time 0 is played
        at, None until it is known: a paced source's `clock_origin_s`), each chunk is handed over once its last
        sample has been played, as a microphone would."""
        self._reader = threading.Thread(target=self._read, args=(chunks, clock), name="streamvid-audio", daemon=True)
        self._reader.start()

    def _read(self, chunks: Iterator[AudioChunk], clock: Callable[[], float | None] | None) -> None:
        try:
            for chunk in chunks:
                if self._stop.is_set():
                    return
                if clock is not None:
                    while (origin := clock()) is None:  # the frames have not started playing yet
                        if self._stop.wait(0.01):
                            return
                    if (wait := origin + chunk.t_end_s - time.monotonic()) > 0 and self._stop.wait(wait):
                        return
                while not self.listener.feed(chunk, timeout_s=0.5):
                    if self._stop.is_set() or not self.listener.alive:
                        return
        except Exception as e:  # noqa: BLE001 - a broken track: the frames go on without sound
            log.warning("sound stopped: %s", e)
        finally:
            self.listener.finish()

    def close(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        self.listener.close()

    def stats(self) -> dict:
        return {"audio_s_in": round(self.listener.audio_s_in, 3), "utterances": self.listener.utterances,
                "asr_s": round(self.listener.asr_s, 3)}


def asr_device(config: EngineConfig) -> str:
    return "cuda" if config.device.startswith("cuda") else "cpu"


def hearing_for(config: EngineConfig, source, stream: Stream, replay: bool) -> Hearing | None:
    """A Hearing reading `source`'s sound (`sound()` of a file, camera or URL source), or None when it has none or
    config.audio is "off". The recogniser is loaded here: one that cannot load is a one-line ValueError before anything runs."""
    if config.audio == "off" or not hasattr(source, "sound"):
        return None
    chunks = source.sound()
    if chunks is None:
        return None
    hearing = Hearing(stream, load_recognizer(config.asr, asr_device(config)))
    stream.ingest.wait_for_sound = replay
    stream.ingest.has_sound = True  # the stream ends once its sound has been heard too
    paced = not replay and hasattr(source, "clock_origin_s")  # a file played live (a camera or URL is live already)
    hearing.read(chunks, clock=(lambda: source.clock_origin_s) if paced else None)
    return hearing
