"""Text people type: questions and trigger conditions, checked and cleaned once where they enter the engine
(`StreamingAssistant.ask` / `watch`, `streamvid run --ask` / `--watch`; replays of benchmark prompts pass as they
are).

    clean("  What colour\x00is it?\r\n")   -> "What colour is it?"
    clean("")                              -> ValueError("empty question")
    clean("x" * 100_000)                   -> ValueError("question too long: 100000 characters, at most 4000; ...")

Control characters other than tab and newline (C0, DEL, C1) and unpaired UTF-16 surrogates (which no tokenizer can
encode) become spaces, line ends become "\n", the text is NFC-normalised and its ends stripped. Every script passes
through unchanged (mixed scripts, emoji, right-to-left text). The length cap counts characters after cleaning: a
cheap first bound before any tokenizer runs; what a forward may cost is capped in the model's tokens where the text
is spent (`streamvid/engine/limits.py`).
"""

from __future__ import annotations

import re
import unicodedata

MAX_CHARS = 4000
SURROGATE = re.compile(r"[\ud800-\udfff]")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab (09) and newline (0a)


def clean(text: object, what: str = "question", max_chars: int = MAX_CHARS) -> str:
    """`text` as the engine uses it (see the module docstring); ValueError with a one-line message when it is not
    text, is empty after cleaning, or is longer than `max_chars`."""
    if not isinstance(text, str):
        raise ValueError(f"a {what} must be text, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", SURROGATE.sub(" ", text)).replace("\r\n", "\n").replace("\r", "\n")
    text = CONTROL.sub(" ", text).strip()
    if not text:
        raise ValueError(f"empty {what}")
    if len(text) > max_chars:
        raise ValueError(f"{what} too long: {len(text)} characters, at most {max_chars}; ask something shorter")
    return text
