"""Answer scorers of the stream-episode format: exact, substring, mc_first_letter, number."""

from __future__ import annotations

import re

_WORD_NUMBERS = {"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
                 "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
SCORERS = ("exact", "substring", "mc_first_letter", "number")


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces (commas kept as list separators), number words to digits."""
    words = re.sub(r"(?<!\d)\.|\.(?!\d)|[^a-z0-9,.]+", " ", text.lower()).replace(",", " , ").split()
    return " ".join(_WORD_NUMBERS.get(w, w) for w in words)


def score(answer: str, gold: str, scorer: str) -> bool:
    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r}; known: {', '.join(SCORERS)}")
    a, g = normalise(answer), normalise(gold)
    if scorer == "exact":
        return a == g or (g in ("yes", "no") and a.split(" ")[:1] == [g])
    if scorer == "substring":
        return bool(g) and f" {g} " in f" {a} "
    if scorer == "mc_first_letter":
        m = re.search(r"\b([a-e])\b", a)
        return m is not None and m.group(1) == g[:1]
    num_a, num_g = re.findall(r"\d+(?:\.\d+)?", a), re.findall(r"\d+(?:\.\d+)?", g)
    return bool(num_a and num_g) and float(num_a[0]) == float(num_g[0])
