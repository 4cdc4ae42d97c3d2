"""Speech addressed to the assistant: an utterance that starts with the wake word is a question, not the stream's
own sound.

    addressed("Assistant, what colour is the star?", "assistant")   # "what colour is the star?"
    addressed("Hey assistant: where are my keys", "assistant")       # "where are my keys"
    addressed("The assistant is late", "assistant")                  # None: the stream's speech
    addressed("Assistant.", "assistant")                             # None: nothing asked

Case and punctuation around the wake word are ignored, as are "hey", "hi", "ok" and "okay" before it.
"""

from __future__ import annotations

import re


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
    return question[0].upper() + question[1:] if re.search(r"\w", question) else None
