"""Answer scorers of the stream-episode format: exact, substring, mc_first_letter, number, and the benchmark rules
ovo_count / ovo_yes_no; multiple-choice letter matching strict, lenient and per benchmark (official)."""

from __future__ import annotations

import re

_WORD_NUMBERS = {"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
                 "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
SCORERS = ("exact", "substring", "mc_first_letter", "number", "ovo_count", "ovo_yes_no")


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces (commas kept as list separators), number words to digits."""
    words = re.sub(r"(?<!\d)\.|\.(?!\d)|[^a-z0-9,.]+", " ", text.lower()).replace(",", " , ").split()
    return " ".join(_WORD_NUMBERS.get(w, w) for w in words)


def score(answer: str, gold: str, scorer: str) -> bool:
    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r}; known: {', '.join(SCORERS)}")
    if scorer == "ovo_count":
        return ovo_count(answer, gold)
    if scorer == "ovo_yes_no":
        return ovo_yes_no(answer, gold)
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


# Benchmark rules for multiple choice and OVO-Bench's forward-active probes (see eval/convert/*.py for sources).

def ovo_count(answer: str, count: str) -> bool:
    """OVO-Bench REC: the digits of the reply, joined, equal the count ("3 times" -> "3"; "1 or 2" -> "12")."""
    return "".join(re.findall(r"\d+", answer)) == str(count)


def ovo_yes_no(answer: str, gold: str) -> bool:
    """OVO-Bench SSR/CRR: "Yes"/"No" occurs in the reply (case-sensitive), or the reply is exactly "Y"/"N"."""
    return gold in answer or answer == gold[:1]


def mc_strict(answer: str, letter: str) -> bool:
    """The reply starts with the option letter: "B", "B.", "(B) ...", "B: ..." (upper case, not a word: "Because"
    does not count)."""
    m = re.match(r"\s*\(?([A-J])(?![A-Za-z0-9])", answer)
    return m is not None and m.group(1) == letter


def mc_lenient(answer: str, letter: str, options: list[str] | None = None) -> bool:
    """The first option letter standing alone anywhere in the reply ("The answer is (C)", "c)", "b") is the gold
    letter (only letters of the given options, A-E without options; "a" and "I" only when marked as letters:
    "(a)", "a)", "a."); a reply without such a letter counts when it contains the gold option's text and no
    other option's."""
    n = len(options) if options else 5
    for m in re.finditer(r"(?<![A-Za-z0-9'’])([A-Ja-j])(?![A-Za-z0-9'’])", answer):
        c = m.group(1)
        if c.upper() not in "ABCDEFGHIJ"[:n] or c in "aI":  # "a" and "I" are words unless marked as letters
            if not (re.search(r"[(\[]\s*$", answer[:m.start()]) or answer[m.end():m.end() + 1] in (")", ".", ":")):
                continue
            if c.upper() not in "ABCDEFGHIJ"[:n]:
                continue
        return c.upper() == letter
    texts = [normalise(re.sub(r"^\s*\(?[A-J][.)]\s*", "", o)) for o in options or []]
    reply = f" {normalise(answer)} "
    hits = [i for i, t in enumerate(texts) if t and f" {t} " in reply]
    return len(hits) == 1 and "ABCDEFGHIJ"[hits[0]] == letter


OFFICIAL_MC = {
    # OVOBenchOfflineScore.calculate_score_backward_realtime: int(gt in response)
    "ovo-bench": lambda answer, letter: letter in answer,
    # StreamingBench src/data/count.py: model_answer[0] == answer
    "streamingbench": lambda answer, letter: answer[:1] == letter,
}


def mc_official(benchmark: str, answer: str, letter: str) -> bool | None:
    """The benchmark's own multiple-choice rule, or None when it has none here."""
    rule = OFFICIAL_MC.get(benchmark)
    return None if rule is None else bool(rule(answer, letter))
