"""Word error rate: word-level Levenshtein distance between a reference transcript and a recognised one.

Both sides are normalised first (`words`): lower case, apostrophes dropped ("don't" -> "dont"), every other
character that is not a letter or digit a word break, and numbers written as words turned into digits, so "7" and
"seven", "21" and "twenty one" (or "twenty-one"), "105" and "one hundred and five" count as the same word (whole
numbers 0 to 999 999; digits lose leading zeros: "07" -> "7"). Number words that do not form one number stay
separate numbers: "three one four" -> "3 1 4".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
UNITS = {w: i for i, w in enumerate(_UNITS)}
TENS = {w: 20 + 10 * i for i, w in enumerate(_TENS)}
NUMBER_WORDS = frozenset((*UNITS, *TENS, "hundred", "thousand"))


@dataclass(frozen=True)
class Errors:
    """Word edits that turn the reference into the hypothesis, and the reference's length (in words)."""

    substitutions: int
    deletions: int
    insertions: int
    reference_words: int

    @property
    def edits(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """edits / reference words; an empty reference: 0.0 against an empty hypothesis, else 1.0."""
        if self.reference_words == 0:
            return 0.0 if self.edits == 0 else 1.0
        return self.edits / self.reference_words

    def __add__(self, other: Errors) -> Errors:
        return Errors(self.substitutions + other.substitutions, self.deletions + other.deletions,
                      self.insertions + other.insertions, self.reference_words + other.reference_words)


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


def errors(reference: str, hypothesis: str) -> Errors:
    """The fewest word substitutions, deletions and insertions turning the reference into the hypothesis."""
    ref, hyp = words(reference), words(hypothesis)
    # cost[j]: (edits, substitutions, deletions, insertions) from ref[:i] to hyp[:j], row by row
    row = [(j, 0, 0, j) for j in range(len(hyp) + 1)]
    for i, r in enumerate(ref, 1):
        new = [(i, 0, i, 0)]
        for j, h in enumerate(hyp, 1):
            e, s, d, n = row[j - 1]
            best = (e, s, d, n) if r == h else (e + 1, s + 1, d, n)
            e, s, d, n = row[j]
            best = min(best, (e + 1, s, d + 1, n))
            e, s, d, n = new[j - 1]
            best = min(best, (e + 1, s, d, n + 1))
            new.append(best)
        row = new
    _, s, d, n = row[-1]
    return Errors(s, d, n, len(ref))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of one hypothesis: (substitutions + deletions + insertions) / reference words."""
    return errors(reference, hypothesis).wer


def corpus_wer(pairs: Iterable[tuple[str, str]]) -> float:
    """Word error rate over many (reference, hypothesis) pairs: all edits / all reference words."""
    total = Errors(0, 0, 0, 0)
    for reference, hypothesis in pairs:
        total += errors(reference, hypothesis)
    return total.wer
