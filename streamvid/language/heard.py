"""Conditions on what is heard: "tell me when someone says 'stop'", a watch "said: help", "tell me when someone
speaks". They are decided on each utterance's transcript, exactly and without a forward (engine/reasoning.py `hear`):

    heard_condition("someone says 'stop'")      # Heard(phrase="stop")
    heard_condition("said: help me")            # Heard(phrase="help me")
    heard_condition("someone speaks")           # Heard(phrase=None): the first utterance after SILENCE_S of quiet
    heard_condition("a blue star appears")      # None: a condition on the picture (a probe, future.py)

A phrase matches a transcript that says it as whole words in order, case, punctuation and number forms ignored
(text.holds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streamvid.language.future import Probe
from streamvid.language.text import holds

SILENCE_S = 5.0  # "someone speaks": an utterance after at least this long without one

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
