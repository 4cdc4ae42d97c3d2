"""Speech addressed to the assistant: an utterance that starts with the wake word is a question, not the stream's
own sound.

    addressed("Assistant, what colour is the star?", "assistant")   # "what colour is the star?"
    addressed("Hey assistant: where are my keys", "assistant")       # "where are my keys"
    addressed("The assistant is late", "assistant")                  # None: the stream's speech
    addressed("Assistant.", "assistant")                             # None: nothing asked

Case and punctuation around the wake word are ignored, as are "hey", "hi", "ok" and "okay" before it.

A recording that is a question on its own (push to talk, a WAV on the API or `--ask-audio`) is read by
`spoken_question`: the words after the wake word when it starts with one, else all of them. Both read times the
way a recogniser writes them spoken ("at 4.13", "at 254") as "mm:ss" (spoken_times.py).
"""

from __future__ import annotations

import re

from streamvid.language.spoken_times import clock_times


def addressed(text: str, wake_word: str) -> str | None:
    """The question after the wake word, or None when `text` is not addressed to the assistant (or `wake_word` is
    empty: no utterance is)."""
    wake = " ".join(wake_word.split())
    if not wake:
        return None
    pattern = rf"^\s*(?:(?:hey|hi|ok|okay)[\s,]+)?{re.escape(wake)}\b[\s,.:;!?-]*(?P<q>.*)$"
    m = re.match(pattern, text, re.IGNORECASE | re.DOTALL)
    if m is None:
        return None
    question = m.group("q").strip()
    return clock_times(question[0].upper() + question[1:]) if re.search(r"\w", question) else None


def spoken_question(text: str, wake_word: str) -> str:
    """The question a recording asks on its own: the words after the wake word when it starts with one, else all
    of them, with spoken times written "mm:ss"."""
    return addressed(text, wake_word) or clock_times(text)
