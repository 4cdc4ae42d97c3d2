"""Spoken answers: text as it is generated, spoken sentence by sentence.

    speaker = Speaker(load_voice(), on_audio=send)     # send(pcm16_bytes) gets 24 kHz mono PCM16, in order
    for piece in answer_pieces:
        speaker.feed(piece)                            # a finished sentence is synthesized at once, on a thread
    speaker.finish()                                   # the rest is spoken; wait() returns once all is sent
    speaker.cancel()                                   # interrupted: nothing more is sent

The first sentence plays while the next ones are still being generated. Voices are voices.py's (espeak-ng, Piper,
a transformers text-to-speech checkpoint); their samples are resampled by PyAV to OUT_RATE, OpenAI Realtime's
PCM16 rate.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Callable

from streamvid.audio.pcm import resample
from streamvid.audio.voices import Voice, to_pcm16

log = logging.getLogger("streamvid")

OUT_RATE = 24000
_END = re.compile(r"[.!?;:…]+[\"')\]]*(?=\s)|\n+")


class Sentences:
    """Pieces of text in, whole sentences out (at . ! ? ; : or a line break followed by space)."""

    def __init__(self) -> None:
        self._text = ""

    def feed(self, piece: str) -> list[str]:
        self._text += piece
        out = []
        while (m := _END.search(self._text)) is not None:
            sentence, self._text = self._text[:m.end()].strip(), self._text[m.end():]
            if re.search(r"\w", sentence):
                out.append(sentence)
        return out

    def flush(self) -> str | None:
        rest, self._text = self._text.strip(), ""
        return rest if re.search(r"\w", rest) else None


class Speaker:
    def __init__(self, voice: Voice, on_audio: Callable[[bytes], None], name: str = "streamvid-speak",
                 on_sentence: Callable[[str], None] | None = None):
        self.voice = voice
        self.on_audio = on_audio
        self.on_sentence = on_sentence  # called with each sentence just before its audio
        self._sentences = Sentences()
        self._todo: queue.Queue[str | None] = queue.Queue()
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self.spoken: list[str] = []  # the sentences sent, in order
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def feed(self, piece: str) -> None:
        for sentence in self._sentences.feed(piece):
            self._todo.put(sentence)

    def finish(self) -> None:
        if (rest := self._sentences.flush()) is not None:
            self._todo.put(rest)
        self._todo.put(None)

    def say(self, text: str) -> None:
        """A whole text at once (an alert)."""
        self.feed(text)
        self.finish()

    def cancel(self) -> None:
        """Stop speaking: what is being synthesized is not sent, nor anything after it."""
        self._cancelled.set()
        self._todo.put(None)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    def _run(self) -> None:
        try:
            while (sentence := self._todo.get()) is not None and not self._cancelled.is_set():
                samples, rate = self.voice.synthesize(sentence)
                if self._cancelled.is_set():
                    return
                if self.on_sentence is not None:
                    self.on_sentence(sentence)
                if len(samples):
                    self.on_audio(to_pcm16(resample(samples, rate, OUT_RATE)).tobytes())
                self.spoken.append(sentence)
        except Exception as e:  # noqa: BLE001 - the answer's text still goes out; its speech stops here
            self.error = e
            log.warning("speaking stopped: %s", e)
        finally:
            self._done.set()
