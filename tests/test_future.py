"""The future-question classifier and the condition -> yes/no probe conversion, on tables of phrasings."""

from __future__ import annotations

import pytest

from streamvid.language.future import acknowledgement, parse_request, probe_for

BLUE_STAR = "Is there a blue star now? Answer yes or no."

# (question, condition, repeat, probe question, negate)
FUTURE = [
    ("Tell me when a blue star appears.", "a blue star appears", False, BLUE_STAR, False),
    ("Let me know when a green circle appears.", "a green circle appears", False,
     "Is there a green circle now? Answer yes or no.", False),
    ("let me know if a red circle shows up", "a red circle shows up", False,
     "Is there a red circle now? Answer yes or no.", False),
    ("Notify me when an orange hexagon enters the screen", "an orange hexagon enters the screen", False,
     "Is there an orange hexagon now? Answer yes or no.", False),
    ("Alert me if you see a blue star!", "you see a blue star", False, BLUE_STAR, False),
    ("Please tell me as soon as there is a blue star.", "there is a blue star", False, BLUE_STAR, False),
    ("Can you let me know once the blue star leaves?", "the blue star leaves", False, BLUE_STAR, True),
    ("Tell me when the blue star is gone", "the blue star is gone", False, BLUE_STAR, True),
    ("When a blue star appears, tell me.", "a blue star appears", False, BLUE_STAR, False),
    ("If a blue star shows up let me know", "a blue star shows up", False, BLUE_STAR, False),
    ("Ping me the moment a blue star pops up", "a blue star pops up", False, BLUE_STAR, False),
    ("Watch for a blue star", "a blue star", False, BLUE_STAR, False),
    ("Keep an eye out for two circles", "two circles", False, "Are there two circles now? Answer yes or no.", False),
    ("Tell me every time a blue star enters", "a blue star enters", True, BLUE_STAR, False),
    ("Hey, could you tell me whenever a blue star is on screen?", "a blue star is on screen", True, BLUE_STAR, False),
    ("Warn me when the circle turns red", "the circle turns red", False,
     "Is the circle red now? Answer yes or no.", False),
    ("Give me a heads-up when a blue star appears", "a blue star appears", False, BLUE_STAR, False),
    ("I want to know when a blue star appears", "a blue star appears", False, BLUE_STAR, False),
    ("Tell me if a blue star ever appears", "a blue star ever appears", False, BLUE_STAR, False),
    ("When will a blue star appear?", "a blue star appear", False, BLUE_STAR, False),
    ("Tell me when someone enters on the left", "someone enters on the left", False,
     "Is there someone on the left now? Answer yes or no.", False),
]

NOT_FUTURE = [
    "What colour is the circle?",
    "When did the blue star appear?",
    "Tell me when the red circle appeared.",  # asks about a time in the past
    "Tell me when you saw the star",
    "Tell me when the circle left",
    "When was the last time a circle appeared?",
    "What happened when the star appeared?",
    "Tell me what you see.",
    "Tell me if there is a red circle.",  # a yes/no question about now
    "Tell me whether a star is on screen",
    "Let me know what colour the square is",
    "Tell me about the hexagon",
    "What was on screen at 01:12?",
    "How many shapes are there?",
    "Did a blue star appear?",
    "Is there a blue star now? Answer yes or no.",
    "Which shape appears most often?",
    "What shape was red two minutes ago?",
]


@pytest.mark.parametrize("text,condition,repeat,probe,negate", FUTURE)
def test_future_requests_become_triggers(text, condition, repeat, probe, negate):
    req = parse_request(text)
    assert req is not None, text
    assert (req.condition, req.repeat, req.probe.question, req.probe.negate) == (condition, repeat, probe, negate)


@pytest.mark.parametrize("text", NOT_FUTURE)
def test_other_questions_are_answered_now(text):
    assert parse_request(text) is None


@pytest.mark.parametrize("condition,probe,statement", [
    ("a blue star", BLUE_STAR, "There is a blue star now."),
    ("blue star", BLUE_STAR, "There is a blue star now."),
    ("the blue star", BLUE_STAR, "There is a blue star now."),
    ("Is there a blue star?", BLUE_STAR, "There is a blue star now."),
    ("Is there a blue star now? Answer yes or no.", BLUE_STAR, "There is a blue star now."),
    ("Tell me when a blue star appears", BLUE_STAR, "There is a blue star now."),
    ("a blue star appears", BLUE_STAR, "There is a blue star now."),
    ("an orange hexagon", "Is there an orange hexagon now? Answer yes or no.", "There is an orange hexagon now."),
    ("a orange hexagon", "Is there an orange hexagon now? Answer yes or no.", "There is an orange hexagon now."),
    ("an red star", "Is there a red star now? Answer yes or no.", "There is a red star now."),
    ("the orange hexagon leaves", "Is there an orange hexagon now? Answer yes or no.",
     "An orange hexagon is gone now."),
    ("Is the circle red?", "Is the circle red now? Answer yes or no.", "Is the circle red now? Yes."),
    ("a person is waving", "Is it true now that a person is waving? Answer yes or no.", "Now: a person is waving."),
    ("the door opens", "Is it true now that the door opens? Answer yes or no.", "Now: the door opens."),
])
def test_probe_for_conditions(condition, probe, statement):
    p = probe_for(condition)
    assert (p.question, p.statement) == (probe, statement)


def test_acknowledgements_and_empty_conditions():
    assert acknowledgement(parse_request("Tell me when a blue star appears")) == \
        "OK, I will tell you when a blue star appears."
    assert acknowledgement(parse_request("Watch for a blue star")) == "OK, I will tell you when I see a blue star."
    assert acknowledgement(parse_request("Notify me whenever you see a blue star")) == \
        "OK, I will tell you every time I see a blue star."
    with pytest.raises(ValueError, match="empty condition"):
        probe_for("  ?  ")
