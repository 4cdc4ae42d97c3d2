"""Listening: the phrases a stream's users asked to hear ("tell me when someone says 'hexagon'", a watch "said:
stop"), told to the speech recogniser (Whisper's hotwords) for the utterances that start after they were asked:

    listening = Listening(wake_word="assistant")
    listening.note(Question("q0", "Tell me when someone says 'hexagon'.", 12.0).condition, t_s=12.0)
    listening.hint(15.3)                                               # "assistant, hexagon": for the recogniser

On held-out synth streams, utterances saying a watched word held it 58 times in 85 told nothing and 76 told, and the
rest of their words were heard better too (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import threading

from streamvid.language.asked import Condition

MAX_HINTS = 8  # phrases told to the recogniser at once (the newest asked)


class Listening:
    """The phrases a stream's users asked to hear, each from the stream time it was asked; what the recogniser is
    told for an utterance. A phrase stays once asked (its trigger may have fired or been stopped): the newest
    MAX_HINTS are told. Any thread."""

    def __init__(self, wake_word: str | None = None):
        self.wake_word = wake_word or None
        self._lock = threading.Lock()
        self._asked: list[tuple[float, str]] = []

    def note(self, condition: Condition | None, t_s: float) -> None:
        """Remember the phrase `condition` asks to hear from stream time `t_s`, when it asks to hear one (a question's
        or a watch's condition, parsed where it was asked); anything else is ignored."""
        if condition is None or (phrase := condition.listens_for) is None:
            return
        with self._lock:  # (a scheduled question is noted when scheduled and again when asked: once is enough)
            if not any(p == phrase and t <= t_s for t, p in self._asked):
                self._asked.append((t_s, phrase))

    def hint(self, t_s: float) -> str | None:
        """What the recogniser is told for an utterance starting at stream time `t_s`: the wake word, then the
        phrases asked at or before `t_s`, newest first, each once, comma separated (None: nothing)."""
        with self._lock:
            asked = [p for t, p in self._asked if t <= t_s + 1e-6]
        words: list[str] = []
        for phrase in asked[::-1]:
            if phrase.lower() not in (w.lower() for w in words) and len(words) < MAX_HINTS:
                words.append(phrase)
        if self.wake_word and self.wake_word.lower() not in (w.lower() for w in words):
            words.insert(0, self.wake_word)
        return ", ".join(words) or None
