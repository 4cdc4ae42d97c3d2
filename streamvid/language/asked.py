"""What a user asks a stream, parsed once where it enters and carried typed from there: a `Question` knows whether it
asks to be told once something happens (its `condition`), and a watch's condition is a `Condition` before the
stream sees it. The stream checks, queues and notes the parsed form; reasoning acts on it; nothing parses the text
again.

    q = Question("q3", "Tell me when someone says 'stop'.", t_s=12.0)
    q.condition           # Condition(phrase="someone says 'stop'", heard=Heard("stop"), repeat=False, ...)
    Question("q4", "What colour is the circle?", 12.0).condition       # None: answered now
    watched("a blue star appears")                                     # Condition(..., probe=Probe("Is there ..."))
    watched("said: help").listens_for                                  # "help": told to the recogniser
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from streamvid.language import user_text
from streamvid.language.future import FutureRequest, Probe, acknowledgement, parse_request, probe_for
from streamvid.language.heard import Heard, heard_condition


@dataclass(frozen=True)
class Condition:
    """What a trigger waits for: `phrase` as the user put it; `heard` when it is decided on the transcripts (then
    `probe` is only how it shows among the triggers), else `probe` asks the picture on each chunk; `repeat`: keep
    watching after the first alert."""

    phrase: str
    probe: Probe
    heard: Heard | None = None
    repeat: bool = True

    @property
    def listens_for(self) -> str | None:
        """The phrase the speech recogniser is told to listen for, when the condition is on words said."""
        return self.heard.phrase if self.heard is not None else None

    def acknowledgement(self) -> str:
        """What the assistant says at once to a question asking to be told of this condition."""
        if self.heard is not None:
            return f"OK, I will tell you {'every time' if self.repeat else 'when'} {self.phrase}."
        return acknowledgement(FutureRequest(self.phrase, self.repeat, self.probe))


def condition_of(text: str) -> Condition | None:
    """The condition a question asks to be told of ("tell me when a blue star appears", "let me know whenever
    someone says 'stop'"); None for a question to answer now. Raises ValueError for "said:" without a phrase."""
    request = parse_request(text)
    if request is None:
        return None
    heard = heard_condition(request.condition)
    return Condition(request.condition, heard.probe if heard is not None else request.probe, heard, request.repeat)


def watched(condition: object) -> Condition:
    """A watch's condition as a user typed it (cleaned and bounded, user_text.clean): a bare one ("a blue star
    appears", "said: stop", "someone speaks") or a request ("tell me when ..."). Raises ValueError in one line when
    it is not text, is empty or too long, or names no phrase."""
    condition = user_text.clean(condition, "condition")
    request = parse_request(condition)
    phrase = request.condition if request is not None else " ".join(condition.split()).rstrip(".!")
    if (heard := heard_condition(phrase)) is not None:
        return Condition(phrase, heard.probe, heard)
    return Condition(phrase, request.probe if request is not None else probe_for(condition))


# Question's default condition: parse it from the text when the question is made
PARSE = Condition("", Probe("", False, ""))


@dataclass(frozen=True)
class Question:
    """A question asked of a stream. `condition` is parsed from `text` when the question is made, unless the caller
    parsed it already (Stream.ask checks it before queueing) and hands it in."""

    id: str
    text: str
    t_s: float  # stream time at which it was asked
    asked_s: float = field(default_factory=time.perf_counter)  # wall clock (perf_counter) when it arrived: TTFT's 0
    # earlier (question, answer) turns to answer with instead of the stream's own dialogue (an API client's
    # conversation); None: the stream's
    dialogue: tuple[tuple[str, str], ...] | None = None
    condition: Condition | None = field(default=PARSE, repr=False, compare=False)

    def __post_init__(self):
        if self.condition is PARSE:
            object.__setattr__(self, "condition", condition_of(self.text))
