"""Conditions on what is heard: "tell me when someone says 'stop'", a watch "said: help", "tell me when someone
speaks". They are decided on each utterance's transcript, exactly and without a forward (reasoning.py `hear`):

    heard_condition("someone says 'stop'")      # Heard(phrase="stop")
    heard_condition("said: help me")            # Heard(phrase="help me")
    heard_condition("someone speaks")           # Heard(phrase=None): the first utterance after SILENCE_S of quiet
    heard_condition("a blue star appears")      # None: a condition on the picture (a probe, future.py)

A phrase matches a transcript that says it as whole words in order, case, punctuation and number forms ignored
(speech_index.holds).

    listening = Listening(wake_word="assistant")
    listening.note("Tell me when someone says 'hexagon'.", t_s=12.0)   # a question or a watch's condition
    listening.hint(15.3)                                               # "assistant, hexagon": for the recogniser

The phrases users asked to hear are told to the speech recogniser (Whisper's hotwords) for the utterances that
start after they were asked: on held-out synth streams, utterances saying a watched word held it 58 times in 85
told nothing and 76 told, and the rest of their words were heard better too (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from streamvid.kv.speech_index import holds
from streamvid.language.future import Probe, parse_request

SILENCE_S = 5.0  # "someone speaks": an utterance after at least this long without one
MAX_HINTS = 8  # phrases told to the recogniser at once (the newest asked)

_WHO = r"(?:someone|somebody|anyone|anybody|a\s+person|people|he|she|they|you|i|the\s+speaker|a\s+voice|\w+)"
_SAYS = r"(?:says|say|said|mentions|mention|shouts|shout|yells|yell|calls\s+out|utters|asks\s+for|is\s+saying)"
_SAID = re.compile(r"^said\s*:\s*(?P<phrase>.+)$", re.IGNORECASE)
_SAYS_PHRASE = re.compile(rf"^(?:{_WHO}\s+)?{_SAYS}\s+(?:the\s+words?\s+|the\s+name\s+)?(?P<phrase>.+)$", re.IGNORECASE)
_IS_SAID = re.compile(r"^(?:the\s+words?\s+)?(?P<phrase>.+?)\s+(?:is|are|gets|get)\s+(?:said|mentioned|heard|spoken)$",
                      re.IGNORECASE)
_SPEAKS = re.compile(rf"^(?:{_WHO}\s+)?(?:speaks|speak|talks|talk|starts\s+(?:talking|speaking)|begins\s+"
                     rf"(?:talking|speaking)|says\s+(?:something|anything)|is\s+(?:talking|speaking))"
                     r"(?:\s+again)?$|^(?:there\s+is\s+)?(?:speech|talking|a\s+voice)$", re.IGNORECASE)


@dataclass(frozen=True)
class Heard:
    """A condition on the transcripts: `phrase` said (None: anyone speaking after a silence)."""

    phrase: str | None

    @property
    def probe(self) -> Probe:
        """How it shows among the triggers (no forward asks it)."""
        if self.phrase is None:
            return Probe("said: (anything)", False, "Someone is speaking.")
        return Probe(f"said: {self.phrase}", False, f'Someone said "{self.phrase}".')

    def matches(self, text: str, quiet_s: float) -> bool:
        """Whether an utterance with these words, after `quiet_s` seconds without one, meets the condition."""
        if self.phrase is None:
            return quiet_s >= SILENCE_S
        return holds(text, self.phrase)


def _phrase(raw: str) -> str | None:
    phrase = raw.strip().strip("\"'“”‘’ ").rstrip(".!?,;:").strip("\"'“”‘’ ")
    return phrase or None


def heard_condition(condition: str) -> Heard | None:
    """The Heard a condition names, or None when it is about the picture."""
    text = " ".join(condition.replace("’", "'").split()).rstrip(".!?")
    if m := _SAID.match(text):
        phrase = _phrase(m.group("phrase"))
        if phrase is None:
            raise ValueError("a said: condition needs a word or phrase, e.g. said: stop")
        return Heard(phrase)
    if _SPEAKS.match(text):
        return Heard(None)
    for pattern in (_SAYS_PHRASE, _IS_SAID):
        if (m := pattern.match(text)) and (phrase := _phrase(m.group("phrase"))) is not None:
            if re.fullmatch(r"(?:something|anything)", phrase, re.IGNORECASE):
                return Heard(None)
            return Heard(phrase)
    return None


class Listening:
    """The phrases a stream's users asked to hear, each from the stream time it was asked; what the recogniser is
    told for an utterance. A phrase stays once asked (its trigger may have fired or been stopped): the newest
    MAX_HINTS are told. Any thread."""

    def __init__(self, wake_word: str | None = None):
        self.wake_word = wake_word or None
        self._lock = threading.Lock()
        self._asked: list[tuple[float, str]] = []

    def note(self, text: str, t_s: float) -> None:
        """Remember the phrase `text` asks to hear, when it asks to hear one: a question ("tell me when someone says
        'stop'") or a watch's condition ("said: stop", "someone says help"); anything else is ignored."""
        request = parse_request(text)
        try:
            heard = heard_condition(request.condition if request is not None else text)
        except ValueError:
            return
        if heard is not None and heard.phrase is not None:
            with self._lock:  # (a scheduled question is noted when scheduled and again when asked: once is enough)
                if not any(p == heard.phrase and t <= t_s for t, p in self._asked):
                    self._asked.append((t_s, heard.phrase))

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
