"""scope.about_now: which questions are answered from the recent window alone."""

from __future__ import annotations

import numpy as np
import pytest

from streamvid.language.scope import about_now
from streamvid.synth.questions import FAMILIES
from streamvid.synth.world import generate

NOW = ["What colour is the circle?", "How many shapes do you see?", "Is there a red star?", "What is happening?",
       "Which shape is purple?", "What do you see right now?", "Are the lights on?", "Is the door open now?",
       "What\u2019s on screen?", "Do you see a dog?", "What did someone just say?", "What was just said?",
       "What did you just hear?", "Did a red circle just appear?", "What has she just said?"]
NOT_NOW = ["What colour was the circle?", "What did you see at 00:04?", "What was on screen at 1:02:03?",
           "Have you seen my keys?", "Where are my keys?", "Is this the first time the dog is here?",
           "Is the cat back again?", "How many people have entered so far?", "Describe the video.", "Summarise.",
           "Did a red circle appear?", "What happened before the car left?", "Is it the same person as earlier?",
           "Qu'est-ce que tu vois ?", "", "What was just said at 01:02?",
           "What did he just say before the door closed?"]


@pytest.mark.parametrize("text", NOW)
def test_present_tense_questions_are_about_now(text):
    assert about_now(text)


@pytest.mark.parametrize("text", NOT_NOW)
def test_past_timed_or_tenseless_questions_search_memory(text):
    assert not about_now(text)


def test_shapesworld_question_families_by_tense():
    """Every ShapesWorld template: questions about now (realtime families, probes) are, questions about the past
    (backward families) are not."""
    tl = generate(7, 600.0, 2.0, 4)
    rng = np.random.default_rng(0)
    seen = {}
    for t in np.arange(30.0, 590.0, 3.0):
        for name, family in FAMILIES.items():
            if name != "forward" and (qa := family(tl, float(t), rng, 8.0)) is not None:
                seen.setdefault(name, set()).add(qa.text)
    assert set(seen) == set(FAMILIES) - {"forward"}
    for name, texts in seen.items():
        assert all(about_now(t) == (not name.startswith("backward")) for t in texts), (name, texts)
