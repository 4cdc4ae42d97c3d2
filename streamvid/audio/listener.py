"""Listener: one stream's sound, from chunks of samples to transcribed utterances, on its own thread.

    listener = Listener(recognizer, on_utterance=stream.hear, on_heard=stream.heard)
    listener.feed(chunk)        # pcm.AudioChunk, in time order, from any thread (waits while 8 s are queued)
    listener.finish()           # no more sound: the open utterance ends there
    listener.close()

The thread (`streamvid-listen`) runs the voice activity detector (vad.Segmenter) and, for each utterance, the
recogniser (asr.py); `on_utterance(Utterance)` gets every utterance with words, in time order, and then
`on_heard(t)` the stream time before which every utterance has been handed over (vad.Segmenter.heard_until_s;
infinity once the sound has ended); `on_voice(event, t)`, when given, the detector's edges as they are seen
("speech_started", "speech_stopped": before the utterance is transcribed). Recognition thus never runs on the engine's scheduler thread: a stream's
speech costs its ingest and answers nothing but the speech block's own short text forward.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from streamvid.audio.asr import Recognizer
from streamvid.audio.pcm import CHUNK_S, RATE, AudioChunk
from streamvid.audio.recognition import below_the_engine
from streamvid.audio.vad import Segmenter
from streamvid.types import Utterance

log = logging.getLogger("streamvid.audio")

QUEUE_S = 8.0  # seconds of sound queued for the thread before `feed` waits


class Listener:
    def __init__(self, recognizer: Recognizer, on_utterance: Callable[[Utterance], None],
                 on_heard: Callable[[float], None] = lambda t: None, segmenter: Segmenter | None = None,
                 name: str = "streamvid-listen", hint: str | Callable[[float], str | None] | None = None,
                 on_voice: Callable[[str, float], None] | None = None):
        self.recognizer = recognizer
        # words speakers may say (the wake word, phrases users wait for), told to the recogniser: fixed, or
        # a function of the utterance's start (stream.Stream.hints)
        self.hint = hint or None
        self.on_utterance = on_utterance
        self.on_heard = on_heard
        self.on_voice = on_voice  # the detector's edges: ("speech_started" | "speech_stopped", stream time)
        self.segmenter = segmenter or Segmenter()
        self._queue: queue.Queue[AudioChunk | None] = queue.Queue(maxsize=max(2, int(QUEUE_S / CHUNK_S)))
        self._closed = threading.Event()
        self.error: BaseException | None = None
        self.audio_s_in = 0.0
        self.utterances = 0
        self.asr_s = 0.0  # seconds spent recognising
        self.last_t_s = -1.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def feed(self, chunk: AudioChunk, timeout_s: float | None = None) -> bool:
        """Queue a chunk (waits while QUEUE_S seconds are queued: up to `timeout_s`, None without end). False when
        it was not taken (closed, or the wait ran out). ValueError for a chunk earlier than the last one's end."""
        if chunk.t_s < self.last_t_s - 1e-3:
            raise ValueError(f"audio goes back in time: {chunk.t_s:.3f} s after {self.last_t_s:.3f} s")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._closed.is_set():
            try:
                wait = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
                self._queue.put(chunk, timeout=wait)
                self.last_t_s = chunk.t_end_s
                return True
            except queue.Full:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
        return False

    def finish(self) -> None:
        """No more sound: the open utterance is transcribed and the stream hears up to the end."""
        while not self._closed.is_set():
            try:
                self._queue.put(None, timeout=0.2)
                return
            except queue.Full:
                continue

    def close(self, timeout_s: float = 5.0) -> None:
        self._closed.set()
        self._thread.join(timeout=timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        below_the_engine()  # voice detection gives way to the engine's forwards, as recognition does
        try:
            while not self._closed.is_set():
                try:
                    chunk = self._queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                if chunk is None:
                    self._hear(self._voiced(self.segmenter.flush()))
                    self.on_heard(float("inf"))
                    return
                self.audio_s_in += len(chunk.samples) / RATE
                self._hear(self._voiced(self.segmenter.feed(chunk)))
                self.on_heard(self.segmenter.heard_until_s)
        except BaseException as e:  # noqa: BLE001 - the stream goes on without sound; its caller is told once
            self.error = e
            log.warning("listening stopped: %s", e)
            self.on_heard(float("inf"))

    def _voiced(self, speech: list) -> list:
        """`speech`, after telling on_voice the detector's edges (a stop before its utterance is transcribed)."""
        for event, t_s in self.segmenter.take_events():
            if self.on_voice is not None:
                self.on_voice(event, t_s)
        return speech

    def _hear(self, speech) -> None:
        for s in speech:
            t0 = time.perf_counter()
            text = self.recognizer.transcribe(s.samples, self.hint(s.t_s) if callable(self.hint) else self.hint)
            self.asr_s += time.perf_counter() - t0
            if text.strip(" .,!?-"):
                self.utterances += 1
                self.on_utterance(Utterance(s.t_s, s.t_end_s, text, heard_s=time.perf_counter()))
