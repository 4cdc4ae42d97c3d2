"""Questions whose answer lies in the future, and the yes/no probe a standing trigger asks.

    parse_request("Tell me when a blue star appears.")
        -> FutureRequest(condition="a blue star appears", repeat=False,
                         probe=Probe("Is there a blue star now? Answer yes or no.", negate=False, ...))
    parse_request("What colour is the circle?") -> None
    probe_for("a blue star") / probe_for("Is there a blue star?") -> the same probe as above

A future request is a request to be told (tell / let me know / notify / alert / warn / ping / give me a shout
...) joined to a condition by a conjunction of time or condition (when / whenever / if / once / as soon as /
the moment / every time ...), in either order ("When a star appears, tell me"), or a watch verb with an object
("watch for a red circle", "keep an eye out for ..."). It is not one when the condition is in the past ("tell me
when the star appeared" asks about a time) or when "tell me if" asks about now ("tell me if there is a red
circle": no event verb, so it is a yes/no question to answer at once).

The probe turns a condition into one yes/no question about the current moment, in the form the bundled model is
trained on ("Is there a blue star now? Answer yes or no."): presence ("a blue star appears", "you see a blue
star", "a blue star"), absence ("the blue star leaves": the same question, fired on a "no"), a change of
property ("the circle turns red": "Is the circle red now?"), a yes/no question given as is ("Is there a blue
star?"); anything else is asked as "Is it true now that <condition>?".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSWER_SUFFIX = "Answer yes or no."

_POLITE = r"(?:(?:hey|hi|ok|okay|so|and|also|please|kindly|just|now)[,]?\s+)*"
_CAN_YOU = (r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?"
            r"|i\s+(?:want|need|would\s+like|'d\s+like)\s+you\s+to\s+)?")
_ME = r"(?:me|us)"
_TELL = (r"(?:tell|inform|notify|alert|warn|ping|remind|signal|message|text|call|buzz|nudge|wake)\s+" + _ME
         + r"|let\s+" + _ME + r"\s+know|give\s+" + _ME + r"\s+a\s+(?:shout|heads[\s-]up|ping|call|sign|signal|nudge)"
         + r"|say\s+(?:something|so)|speak\s+up|shout(?:\s+out)?|call\s+(?:it\s+)?out|notify|alert|warn|beep"
         + r"|i\s+(?:want|need|would\s+like|'d\s+like)\s+to\s+(?:know|be\s+told|be\s+notified|be\s+alerted|hear)")
_WHEN = (r"(?:whenever|every\s+time|each\s+time|any\s*time|when(?:ever)?|if(?:\s+ever)?|in\s+case|once|as\s+soon\s+as"
         r"|the\s+(?:moment|minute|second|instant)|the\s+(?:next|first)\s+time|should|after)")
_REPEAT = re.compile(r"^(?:whenever|every\s+time|each\s+time|any\s*time)\b")
_WATCH = (r"(?:watch\s+(?:out\s+)?for|wait\s+for|look\s+(?:out\s+)?for|keep\s+(?:an\s+)?eye\s+(?:out\s+)?(?:for|on)"
          r"|be\s+on\s+the\s+lookout\s+for|keep\s+watching\s+for|listen\s+for|monitor\s+for|wait\s+until|wait\s+till)")

_APPEAR_VERB = r"(?:appear|show\s+up|enter|come\s+(?:in|back|into\s+view)|arrive|pop\s+up|turn\s+up|leave|disappear)"
_REQUEST_FIRST = re.compile(rf"^{_POLITE}{_CAN_YOU}(?P<head>{_TELL})\s+(?:(?:right\s+)?away\s+|immediately\s+)?"
                            rf"(?P<when>{_WHEN})\s+(?P<cond>.+)$")
_CONDITION_FIRST = re.compile(rf"^{_POLITE}(?P<when>{_WHEN})\s+(?P<cond>.+?),?\s+(?:then\s+)?(?:please\s+)?"
                              rf"{_CAN_YOU}(?P<head>{_TELL})(?:\s+(?:right\s+)?(?:away|immediately|please))?$")
_WATCH_FOR = re.compile(rf"^{_POLITE}{_CAN_YOU}(?P<when>{_WATCH})\s+(?P<cond>.+)$")
_WHEN_WILL = re.compile(rf"^{_POLITE}(?P<when>when\s+will)\s+(?P<cond>.+\s+{_APPEAR_VERB})$")

# words that put a condition in the past: then the question asks about a time, it does not request a future alert
_PAST = re.compile(r"\b(?:was|were|did|had|happened|appeared|entered|showed|came|went|arrived|disappeared|vanished|"
                   r"turned|became|changed|saw|left|ago|earlier|previously|last\s+time|so\s+far|before\s+now|"
                   r"already)\b")
_LEFT_PLACE = re.compile(r"\b(?:on|to|at|from|in)\s+the\s+left\b|\bleft[\s-](?:side|corner|edge|half|hand)\b")
_EVENT = re.compile(r"\b(?:appears?|shows?\s+up|enters?|comes?|arrives?|pops?\s+up|turns?|becomes?|changes?|leaves?|"
                    r"disappears?|goes|gets?|starts?|stops?|begins?|ever|again|anything|any\s+time|moves?|happens?)\b")


@dataclass(frozen=True)
class Probe:
    """The yes/no question a trigger asks about the current moment.

    negate: the condition holds when the answer is "no" (a trigger scores it as 1 - p(yes)).
    statement: what an alert says when the condition holds, e.g. "There is a blue star now."
    """

    question: str
    negate: bool
    statement: str


@dataclass(frozen=True)
class FutureRequest:
    condition: str  # the condition as phrased, e.g. "a blue star appears"
    repeat: bool  # "whenever" / "every time": keep watching after the first alert
    probe: Probe


def _clean(text: str) -> str:
    text = text.strip().replace("\u2019", "'")
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"[\s.!?,;:]+$", "", text)


def parse_request(text: str) -> FutureRequest | None:
    """A FutureRequest when `text` asks to be told once something happens, else None (answer it now)."""
    clean = _clean(text)
    low = clean.lower()
    for pattern in (_REQUEST_FIRST, _CONDITION_FIRST, _WATCH_FOR, _WHEN_WILL):
        m = pattern.match(low)
        if m:
            break
    else:
        return None
    cond_low = m.group("cond").strip(" ,")
    cond_low = re.sub(r"\s+(?:please|thanks|thank\s+you|right\s+away|immediately)$", "", cond_low)
    cond_low = re.sub(r",?\s+(?:ok|okay)$", "", cond_low)
    when = re.sub(r"\s+", " ", m.group("when"))
    head = re.sub(r"\s+", " ", m.groupdict().get("head") or "")
    if not cond_low or _PAST.search(_LEFT_PLACE.sub(" ", cond_low)):
        return None
    if when.startswith("if") and head in ("tell me", "tell us", "say so") and not _EVENT.search(cond_low):
        return None  # "tell me if there is a red circle": a yes/no question about now
    start = m.start("cond")
    condition = clean[start:start + len(cond_low)]  # the user's own casing
    return FutureRequest(condition, bool(_REPEAT.match(when)), probe_for(condition))


def acknowledgement(request: FutureRequest) -> str:
    """What the assistant says at once to a future request."""
    cond = request.condition
    if _bare_noun_phrase(cond.lower()):
        cond = f"I see {_np(cond)}"
    cond = re.sub(r"^you\s+(?:can\s+)?see\b", "I see", cond, flags=re.IGNORECASE)
    return f"OK, I will tell you {'every time' if request.repeat else 'when'} {cond}."


# ---- conditions -> yes/no probes ---------------------------------------------------------------------------
_ARTICLE = r"(?:a|an|the|one|any|some|another|two|three|four|five|six|\d+)"
_APPEAR = (r"(?:appears?|shows?\s+up|enters?(?:\s+the\s+(?:screen|frame|picture|scene|view))?|pops?\s+up|arrives?"
           r"|turns?\s+up|comes?\s+(?:in(?:to\s+(?:view|the\s+picture|the\s+frame))?|back|on\s*screen|into\s+view)"
           r"|is\s+(?:visible|on\s*screen|on\s+the\s+screen|in\s+(?:view|the\s+picture|the\s+frame)"
           r"|there|here|back|shown)"
           r"|are\s+(?:visible|on\s*screen|on\s+the\s+screen|in\s+view|there|here|back|shown)"
           r"|can\s+be\s+seen|becomes?\s+visible|is\s+seen|is|are)")  # bare "is": "on screen" was cut off
_VANISH = (r"(?:leaves?(?:\s+the\s+(?:screen|frame|picture|scene|view))?|disappears?|vanishes?|goes\s+away|is\s+gone"
           r"|are\s+gone|exits?|is\s+no\s+longer\s+(?:visible|there|on\s*screen)"
           r"|is\s+not\s+(?:visible|there|on\s*screen)"
           r"(?:\s+any\s*more)?)")
_BECOME = r"(?:turns?(?:\s+into)?|becomes?|goes|changes?\s+(?:colou?r\s+)?to|is\s+now|gets)"
_THERE = r"(?:you\s+(?:can\s+)?see|you\s+spot|i\s+can\s+see|there\s+is|there's|there\s+are|there\s+will\s+be)"
_QUESTION = re.compile(r"^(?:is|are|does|do|can|has|have|will)\b", re.IGNORECASE)
_PRONOUN = re.compile(r"^(?:someone|somebody|anyone|anybody|something|anything|people|nobody|nothing)\b", re.IGNORECASE)
_SCREEN = re.compile(r"\s+(?:on\s*(?:the\s+)?screen|in\s+(?:the\s+)?(?:view|picture|frame|scene|video))$",
                     re.IGNORECASE)
_PLACE = r"(?:\s+(?P<place>(?:on|in|at|from|into|near|by|behind|under|over)\s+.+))?"


def _np(phrase: str) -> str:
    """A noun phrase as an indefinite one: "the blue star" / "blue star" -> "a blue star", "the circles" ->
    "some circles"; "two circles", "a star" as they are."""
    if _PRONOUN.match(phrase.strip()):
        return phrase.strip()
    words = phrase.strip().split()
    if len(words) > 1 and words[0].lower() in ("the", "that", "this", "any", "another"):
        words = words[1:]
    if len(words) > 1 and words[0].lower() in ("a", "an"):  # the article that fits the next word
        words = words[1:]
    np_ = " ".join(words)
    if _is_plural(np_):
        return np_
    last = words[-1].lower()
    if last.endswith("s") and not last.endswith(("ss", "us", "is")):
        return f"some {np_}"
    return ("an " if np_[:1].lower() in "aeiou" else "a ") + np_


def _is_plural(np_: str) -> bool:
    return bool(re.match(r"^(?:two|three|four|five|six|seven|eight|nine|ten|some|several|many|\d+)\s", np_,
                         re.IGNORECASE))


def _presence(np_: str, negate: bool) -> Probe:
    be = "Are" if _is_plural(np_) else "Is"
    question = f"{be} there {np_} now? {ANSWER_SUFFIX}"
    if negate:
        return Probe(question, True, f"{np_[0].upper()}{np_[1:]} {'are' if be == 'Are' else 'is'} gone now.")
    return Probe(question, False, f"There {be.lower()} {np_} now.")


def _bare_noun_phrase(low: str) -> bool:
    """A short phrase without a verb: "a blue star", "blue star", "two circles" (not "the door opens")."""
    words = low.split()
    clause = len(words) >= 3 and words[-1].endswith("s") and not _is_plural(low)
    verb = re.search(r"\b(?:is|are|was|were|be|been|has|have|do|does|will|can|you|there)\b", low)
    return 0 < len(words) <= 5 and not clause and not verb


def probe_for(condition: str) -> Probe:
    """The yes/no probe for a condition phrase, a bare noun phrase, or a yes/no question."""
    cond = _clean(condition)
    if not cond:
        raise ValueError("empty condition")
    if _QUESTION.match(cond):  # a yes/no question already: ask it about now
        q = _clean(re.sub(r"\s*answer\s+(?:with\s+)?(?:yes\s+or\s+no|y/n)$", "", cond, flags=re.IGNORECASE))
        q = re.sub(r"\s+(?:now|right\s+now|at\s+the\s+moment)$", "", q, flags=re.IGNORECASE)
        m = re.match(r"^(is|are)\s+there\s+(.+)$", q, re.IGNORECASE)
        if m:
            return _presence(m.group(2), False)
        q = f"{q[0].upper()}{q[1:]} now?"
        return Probe(f"{q} {ANSWER_SUFFIX}", False, f"{q} Yes.")
    future = parse_request(cond)
    if future is not None:  # watch("Tell me when a blue star appears")
        return future.probe
    cond = re.sub(r"\s+(?:ever|again|finally|eventually|suddenly|at\s+last)\b", "", cond, flags=re.IGNORECASE)
    cond = _SCREEN.sub("", cond)
    low = cond.lower()
    m = re.match(rf"^{_THERE}\s+(.+)$", low)
    if m:
        return _presence(_np(cond[m.start(1):]), False)
    for verbs, negate in ((_APPEAR, False), (_VANISH, True)):
        m = re.match(rf"^(.+?)\s+{verbs}{_PLACE}$", low)
        if m:
            np_ = _np(cond[:m.end(1)])
            if m.group("place") and not _SCREEN.search(" " + m.group("place")):
                np_ += " " + cond[m.start("place"):]
            return _presence(np_, negate)
    m = re.match(rf"^(.+?)\s+{_BECOME}\s+(.+)$", low)
    if m:
        subject, state = cond[:m.end(1)], cond[m.start(2):]
        subject = subject if re.match(rf"^{_ARTICLE}\b", subject, re.IGNORECASE) else f"the {subject}"
        be = "are" if _is_plural(subject) else "is"
        return Probe(f"{be.capitalize()} {subject} {state} now? {ANSWER_SUFFIX}", False,
                     f"{subject[0].upper()}{subject[1:]} {be} {state} now.")
    if _bare_noun_phrase(low):
        return _presence(_np(cond), False)  # "a blue star", "blue star", "two circles"
    return Probe(f"Is it true now that {cond}? {ANSWER_SUFFIX}", False, f"Now: {cond}.")
