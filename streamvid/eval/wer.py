"""Word error rate: word-level Levenshtein distance between a reference transcript and a recognised one.

Both sides are normalised first (`words`): lower case, apostrophes dropped ("don't" -> "dont"), every other
character that is not a letter or digit a word break, and numbers written as words turned into digits, so "7" and
"seven", "21" and "twenty one" (or "twenty-one"), "105" and "one hundred and five" count as the same word (whole
numbers 0 to 999 999; digits lose leading zeros: "07" -> "7"). Number words that do not form one number stay
separate numbers: "three one four" -> "3 1 4".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streamvid.language.text import TENS, UNITS, words

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
