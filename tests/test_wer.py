"""Word error rate: normalisation and edit counts, against values worked out by hand."""

from __future__ import annotations

import pytest

from streamvid.eval.wer import Errors, corpus_wer, errors, wer, words


@pytest.mark.parametrize("text, want", [
    ("Alice, STOP!", ["alice", "stop"]),
    ("don't  stop\nnow", ["dont", "stop", "now"]),
    ("seven", ["7"]),
    ("7", ["7"]),
    ("07", ["7"]),
    ("twenty one", ["21"]),
    ("twenty-one", ["21"]),
    ("ninety nine", ["99"]),
    ("one hundred", ["100"]),
    ("one hundred and five", ["105"]),
    ("three one four", ["3", "1", "4"]),
    ("twenty twenty", ["20", "20"]),
    ("zero", ["0"]),
    ("ten thousand and one", ["10001"]),
    ("and one", ["and", "1"]),
    ("", []),
])
def test_words_normalise_case_punctuation_and_numbers(text, want):
    assert words(text) == want


@pytest.mark.parametrize("n, spelled", [(0, "zero"), (5, "five"), (13, "thirteen"), (20, "twenty"), (21, "twenty one"),
                                        (47, "forty-seven"), (90, "ninety"), (100, "one hundred")])
def test_numbers_as_digits_equal_numbers_as_words(n, spelled):
    assert wer(f"say {spelled} now", f"say {n} now") == 0.0
    assert wer(f"say {n} now", f"say {spelled} now") == 0.0


def test_hand_computed_edits():
    # one deletion over six reference words
    assert errors("the cat sat on the mat", "the cat sat on mat") == Errors(0, 1, 0, 6)
    assert wer("the cat sat on the mat", "the cat sat on mat") == pytest.approx(1 / 6)
    # a -> x substituted, d inserted: 2 / 3
    assert errors("a b c", "x b c d") == Errors(1, 0, 1, 3)
    assert wer("a b c", "x b c d") == pytest.approx(2 / 3)
    # everything wrong and longer: 2 substitutions + 2 insertions over 2 words
    assert wer("alice stop", "bob wait a moment") == pytest.approx(2.0)
    # punctuation, case and number words do not count
    assert wer("look at the red star", "Look at the RED star.") == 0.0
    assert wer("eight six six", "866") == pytest.approx(1.0)  # "866" is one word: 1 substitution + 2 deletions / 3
    assert wer("eight six six", "8 6 6") == 0.0
    # "seven blue squares" vs "seven glue squares please": 1 substitution + 1 insertion over 3
    assert wer("seven blue squares", "7 glue squares please") == pytest.approx(2 / 3)


def test_empty_sides():
    assert wer("", "") == 0.0
    assert wer("", "hello") == 1.0
    assert wer("hello there", "") == 1.0
    assert errors("hello there", "") == Errors(0, 2, 0, 2)


def test_corpus_wer_pools_edits_over_all_reference_words():
    pairs = [("the cat sat on the mat", "the cat sat on mat"),  # 1 edit / 6 words
             ("a b c", "x b c d"),  # 2 edits / 3 words
             ("stop", "stop")]  # 0 / 1
    assert corpus_wer(pairs) == pytest.approx(3 / 10)
    assert corpus_wer([]) == 0.0
