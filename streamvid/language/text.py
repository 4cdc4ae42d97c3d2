"""Words as the library compares them: lowercased, punctuation dropped, apostrophes joined, numbers as digits
("twenty one" and "21" are the same word; "oh" is not zero). Word error rates (eval/wer.py) and the search over
what was said (kv/speech_index.py) read text through `words`."""

from __future__ import annotations

import re


_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
UNITS = {w: i for i, w in enumerate(_UNITS)}
TENS = {w: 20 + 10 * i for i, w in enumerate(_TENS)}


def _below_hundred(tokens: list[str], i: int) -> tuple[int | None, int]:
    """A number 0..99 spelled from tokens[i] ("seven", "twenty", "twenty one"), and the index after it."""
    if i < len(tokens) and tokens[i] in UNITS:
        return UNITS[tokens[i]], i + 1
    if i < len(tokens) and tokens[i] in TENS:
        if i + 1 < len(tokens) and tokens[i + 1] in UNITS and 0 < UNITS[tokens[i + 1]] < 10:
            return TENS[tokens[i]] + UNITS[tokens[i + 1]], i + 2
        return TENS[tokens[i]], i + 1
    return None, i


def _below_thousand(tokens: list[str], i: int) -> tuple[int | None, int]:
    """A number 0..999 ("one hundred and five", "forty two"), and the index after it."""
    n, j = _below_hundred(tokens, i)
    if n is not None and 0 < n < 10 and j < len(tokens) and tokens[j] == "hundred":
        n, j = 100 * n, j + 1
        k = j + 1 if j < len(tokens) and tokens[j] == "and" and _below_hundred(tokens, j + 1)[0] else j
        rest, k2 = _below_hundred(tokens, k)
        if rest is not None and rest > 0:
            n, j = n + rest, k2
    return n, j


def _number(tokens: list[str], i: int) -> tuple[int | None, int]:
    """A number 0..999 999 spelled from tokens[i], and the index after it."""
    n, j = _below_thousand(tokens, i)
    if n is not None and 0 < n < 1000 and j < len(tokens) and tokens[j] == "thousand":
        n, j = 1000 * n, j + 1
        k = j + 1 if j < len(tokens) and tokens[j] == "and" and _below_thousand(tokens, j + 1)[0] else j
        rest, k2 = _below_thousand(tokens, k)
        if rest is not None and rest > 0:
            n, j = n + rest, k2
    return n, j


def words(text: str) -> list[str]:
    """The normalised words of a text (see the module's docstring)."""
    tokens = re.sub(r"[^a-z0-9]+", " ", re.sub(r"['\u2019]", "", str(text).lower())).split()
    out, i = [], 0
    while i < len(tokens):
        n, j = _number(tokens, i)
        if n is not None:
            out.append(str(n))
            i = j
        else:
            out.append(str(int(tokens[i])) if tokens[i].isdigit() else tokens[i])
            i += 1
    return out


def holds(transcript: str, phrase: str) -> bool:
    """Whether `transcript` says `phrase` (as whole words, in order; case, punctuation and number forms ignored)."""
    have, want = words(transcript), words(phrase)
    return bool(want) and any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))
