"""Question families over a ShapesWorld timeline, each with an exact answer.

Every family is a function `(timeline, t_s, rng, window_s) -> QA | None`; None means the family has no valid
question at that time. `rng` is a `numpy.random.Generator`. Times are read on the frame grid (`frame_time`).
Answers are short lowercase canonical strings: a colour, a shape, "yes"/"no", a digit "0".."3", a sorted
comma-separated list of "colour shape" pairs or "nothing", or (forward) the gold response time "%.1f".

Validity rules that keep answers unambiguous:
- realtime_*: what is asked about has looked the same for the last STABLE_S seconds (no change the model could
  not have seen yet); "no" answers use a (colour, shape) pair absent for those STABLE_S seconds.
- backward_colour / backward_shape: the shape (colour) has been shown by exactly one object so far, that object
  never changed colour and left at least window_s before t, so it is outside a window_s recent-context window.
- backward_at_time: an integer second at least window_s before t, with the same scene for +-1 s around it.
- forward: the next object to enter within [t + 2 s, t + FORWARD_MAX_S] whose (colour, shape) is not on screen at
  any frame in [t, t_enter); the gold response time is t_enter.

Speech families (SPEECH_FAMILIES), over the gold speech track (`Timeline.speech`, see `speech.py`); None on a
stream without one. Answers are a line's text (lowercase words), or a time as "mm:ss" (the second its voice
starts in, as questions name times), or (forward_said) the gold response time "%.1f". A line counts as heard
SPEECH_LAG_S after it ends (time to transcribe it):
- realtime_said: the last line ended SPEECH_LAG_S to JUST_S before t, and nobody speaks at t.
- backward_said_at_time: "what was said at mm:ss?" about a line that ended at least window_s before t; mm:ss is
  the second its voice starts in (lines start apart by seconds: one line per named second).
- when_said: a vocabulary word said in exactly one line among those started by t, and that line was heard.
- forward_said: the next line starting within [t + 2 s, t + FORWARD_MAX_S] whose last word is said once in it
  and in no line between t and it; the gold response time is the end of that word (the line's end).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from .speech import VOCABULARY
from .world import COLOURS, EPS, SHAPES, Speech, Timeline, Track

STABLE_S = 1.5
FORWARD_MIN_S, FORWARD_MAX_S = 2.0, 60.0


@dataclass(frozen=True)
class QA:
    family: str
    text: str
    answer: str
    t_s: float
    evidence_s: tuple[float, float]
    options: tuple[str, ...] = ()


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _say(rng, templates: tuple[str, ...], **kw) -> str:
    a = "an" if kw.get("c", "x")[0] in "aeiou" else "a"  # "an orange star"
    return _pick(rng, templates).format(a=a, **kw)


_WORDS = re.compile(r"[a-z]+")


def mentions(text: str) -> tuple[str | None, str | None]:
    """The (shape, colour) a question names; None for each it does not name."""
    words = set(_WORDS.findall(text.lower()))
    shape = next((s for s in SHAPES if s in words), None)
    colour = next((c for c in COLOURS if c in words), None)
    return shape, colour


def frames_show(tl: Timeline, frames, shape: str | None, colour: str | None) -> bool:
    """Whether an object of that shape and colour (either may be None: any) is visible on one of the frame indices."""
    return any((shape is None or o.shape == shape) and (colour is None or o.colour == colour)
               for k in frames for o in tl.objects_at(k / tl.fps))


def describe(timeline: Timeline, t_s: float) -> list[tuple[str, str]]:
    """Sorted (colour, shape) pairs visible at t_s."""
    return sorted((o.colour, o.shape) for o in timeline.objects_at(t_s))


def _scene_text(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{c} {s}" for c, s in sorted(pairs)) or "nothing"


def _since(tr: Track, tf: float) -> float:
    """When the track took the colour it has at tf."""
    return max(s for s, _ in tr.colours if s <= tf + EPS)


def _steady(tl: Timeline, tf: float) -> list[Track]:
    return [tr for tr in tl.tracks if tr.visible_at(tf) and tf - _since(tr, tf) >= STABLE_S - EPS]


def _recent_pairs(tl: Timeline, tf: float) -> set[tuple[str, str]]:
    k1 = tl.frame_index(tf)
    k0 = max(0, k1 - round(STABLE_S * tl.fps))
    return {p for k in range(k0, k1 + 1) for p in describe(tl, k / tl.fps)}


def realtime_colour(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    tf = tl.frame_time(t_s)
    if not (cands := _steady(tl, tf)):
        return None
    tr = _pick(rng, cands)
    templates = ("What colour is the {s}?", "What is the colour of the {s}?", "The {s} is which colour?")
    text = _say(rng, templates, s=tr.shape)
    return QA("realtime_colour", text, tr.colour_at(tf), t_s, (_since(tr, tf), tf))


def realtime_shape(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    tf = tl.frame_time(t_s)
    if not (cands := _steady(tl, tf)):
        return None
    tr = _pick(rng, cands)
    text = _say(rng, ("Which shape is {c}?", "What shape is {c}?", "Which shape is the {c} one?"), c=tr.colour_at(tf))
    return QA("realtime_shape", text, tr.shape, t_s, (_since(tr, tf), tf))


def realtime_count(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    tf = tl.frame_time(t_s)
    since = max([e.t_s for e in tl.events if e.kind != "recolour" and e.t_s <= tf + EPS], default=0.0)
    if tf - since < STABLE_S - EPS:
        return None
    text = _say(rng, ("How many shapes are there?", "How many shapes are on screen?", "How many shapes do you see?"))
    return QA("realtime_count", text, str(len(tl.objects_at(tf))), t_s, (since, tf))


def _yes_no(tl: Timeline, t_s: float, rng, family: str, templates: tuple[str, ...]) -> QA | None:
    """Balanced yes/no about a (colour, shape) pair; half of the "no" pairs share a shape or colour on screen."""
    tf = tl.frame_time(t_s)
    if rng.random() < 0.5:
        if not (cands := _steady(tl, tf)):
            return None
        tr = _pick(rng, cands)
        pair, answer, ev = (tr.colour_at(tf), tr.shape), "yes", (_since(tr, tf), tf)
    else:
        if not _steady(tl, tf) and rng.random() < 0.5:  # fewer "no" where no "yes" is possible: closer to 50/50
            return None
        recent = _recent_pairs(tl, tf)
        absent = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in recent]
        near = [(c, s) for c, s in absent if any(c == rc or s == rs for rc, rs in describe(tl, tf))]
        pair = _pick(rng, near if near and rng.random() < 0.5 else absent)
        answer, ev = "no", (max(0.0, tf - STABLE_S), tf)
    return QA(family, _say(rng, templates, c=pair[0], s=pair[1]), answer, t_s, ev)


def realtime_exists(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    return _yes_no(tl, t_s, rng, "realtime_exists", ("Is there {a} {c} {s}?", "Do you see {a} {c} {s}?"))


def probe(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    return _yes_no(tl, t_s, rng, "probe", ("Is there {a} {c} {s} now? Answer yes or no.",))


def _once_and_gone(tl: Timeline, tf: float, window_s: float, values) -> list[tuple[str, Track]]:
    """(value, track) where `values(track, tf)` names the value, no other track showed it by tf, and the track
    kept one colour and left at least window_s before tf."""
    seen = [tr for tr in tl.tracks if tr.enter_s <= tf + EPS]
    counts = Counter(v for tr in seen for v in values(tr, tf))
    return [(v, tr) for tr in seen if len(tr.colours) == 1 and tr.leave_s <= tf - window_s + EPS
            for v in values(tr, tf) if counts[v] == 1]


def backward_colour(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    tf = tl.frame_time(t_s)
    if not (cands := _once_and_gone(tl, tf, window_s, lambda tr, _: {tr.shape})):
        return None
    shape, tr = _pick(rng, cands)
    text = _say(rng, ("What colour was the {s}?", "What was the colour of the {s}?"), s=shape)
    return QA("backward_colour", text, tr.colours[0][1], t_s, (tr.enter_s, tr.leave_s))


def backward_shape(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    tf = tl.frame_time(t_s)
    colours = lambda tr, t: {c for s, c in tr.colours if s <= t + EPS}  # noqa: E731
    if not (cands := _once_and_gone(tl, tf, window_s, colours)):
        return None
    colour, tr = _pick(rng, cands)
    text = _say(rng, ("Which shape was {c}?", "What shape was {c}?"), c=colour)
    return QA("backward_shape", text, tr.shape, t_s, (tr.enter_s, tr.leave_s))


def backward_at_time(tl: Timeline, t_s: float, rng, window_s: float, tries: int = 10) -> QA | None:
    latest = min(int(tl.frame_time(t_s) - window_s), int(tl.duration_s - 1 - EPS))
    if latest < 1:
        return None
    for _ in range(tries):
        tau = int(rng.integers(1, latest + 1))
        scenes = {tuple(describe(tl, tau + d / tl.fps)) for d in range(-round(tl.fps), round(tl.fps) + 1)}
        if len(scenes) == 1:
            text = _say(rng, ("What was on screen at {m:02d}:{s:02d}?", "What did you see at {m:02d}:{s:02d}?"),
                        m=tau // 60, s=tau % 60)
            return QA("backward_at_time", text, _scene_text(describe(tl, tau)), t_s, (float(tau), float(tau)))
    return None


def _pair_shown(tl: Timeline, pair: tuple[str, str], a: float, b: float) -> bool:
    """Whether any object shows `pair` on some frame in [a, b)."""
    for tr in tl.tracks:
        if tr.shape != pair[1]:
            continue
        ends = [s for s, _ in tr.colours[1:]] + [tr.leave_s]
        if any(c == pair[0] and max(s, a) < min(e, b) - EPS for (s, c), e in zip(tr.colours, ends)):
            return True
    return False


def forward(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    tf = tl.frame_time(t_s)
    for tr in sorted(tl.tracks, key=lambda tr: tr.enter_s):
        pair = (tr.colours[0][1], tr.shape)
        if tf + FORWARD_MIN_S - EPS <= tr.enter_s <= tf + FORWARD_MAX_S and not _pair_shown(tl, pair, tf, tr.enter_s):
            templates = ("Tell me when {a} {c} {s} appears.", "Let me know when {a} {c} {s} appears.")
            text = _say(rng, templates, c=pair[0], s=pair[1])
            return QA("forward", text, f"{tr.enter_s:.1f}", t_s, (tr.enter_s, tr.enter_s))
    return None


FAMILIES = {f.__name__: f for f in (realtime_colour, realtime_shape, realtime_count, realtime_exists, backward_colour,
                                     backward_shape, backward_at_time, probe, forward)}
ALL_FAMILIES = tuple(FAMILIES)


# ---- speech families ---------------------------------------------------------------------------------------

SPEECH_LAG_S = 1.5
JUST_S = 6.0


def _mmss(t_s: float) -> str:
    s = math.floor(t_s + EPS)
    return f"{s // 60:02d}:{s % 60:02d}"


def realtime_said(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    started = [u for u in tl.speech or () if u.t_s <= t_s + EPS]
    if not started or not started[-1].t_end_s + SPEECH_LAG_S - EPS <= t_s <= started[-1].t_end_s + JUST_S + EPS:
        return None
    u = started[-1]
    text = _say(rng, ("What did someone just say?", "What was just said?", "What did you just hear?"))
    return QA("realtime_said", text, u.text, t_s, (u.t_s, u.t_end_s))


def backward_said_at_time(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    if not (cands := [u for u in tl.speech or () if u.t_end_s <= t_s - window_s + EPS]):
        return None
    u = _pick(rng, cands)
    s = math.floor(u.t_s + EPS)
    text = _say(rng, ("What was said at {m:02d}:{s:02d}?", "What did someone say at {m:02d}:{s:02d}?"),
                m=s // 60, s=s % 60)
    return QA("backward_said_at_time", text, u.text, t_s, (u.t_s, u.t_end_s))


def _said_words(u: Speech) -> list[str]:
    return sorted({w for w in u.text.split() if w in VOCABULARY})


def when_said(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    started = [u for u in tl.speech or () if u.t_s <= t_s + EPS]
    counts = Counter(w for u in started for w in _said_words(u))
    cands = [(w, u) for u in started if u.t_end_s + SPEECH_LAG_S <= t_s + EPS for w in _said_words(u)
             if counts[w] == 1]
    if not cands:
        return None
    w, u = _pick(rng, cands)
    text = _say(rng, ("When did someone say '{w}'?", "When was '{w}' said?", "At what time did someone say '{w}'?"),
                w=w)
    return QA("when_said", text, _mmss(u.t_s), t_s, (u.t_s, u.t_end_s))


def forward_said(tl: Timeline, t_s: float, rng, window_s: float) -> QA | None:
    lines = tl.speech or []
    for i, u in enumerate(lines):
        if not t_s + FORWARD_MIN_S - EPS <= u.t_s <= t_s + FORWARD_MAX_S:
            continue
        word = u.text.split()[-1]
        if u.text.split().count(word) > 1 or any(word in v.text.split() for v in lines[:i] if v.t_end_s > t_s + EPS):
            continue
        text = _say(rng, ("Tell me when someone says '{w}'.", "Let me know when someone says '{w}'."), w=word)
        return QA("forward_said", text, f"{u.t_end_s:.1f}", t_s, (u.t_s, u.t_end_s))
    return None


SPEECH_QUESTIONS = {f.__name__: f for f in (realtime_said, backward_said_at_time, when_said, forward_said)}
SPEECH_FAMILIES = tuple(SPEECH_QUESTIONS)


def sample_qa(timeline: Timeline, t_s: float, rng, window_s: float, families=None) -> QA | None:
    """A question from a family drawn uniformly among those valid at t_s (None if none is); families defaults to
    the visual ones (ALL_FAMILIES), SPEECH_FAMILIES are asked for by name."""
    names = list(families or ALL_FAMILIES)
    known = {**FAMILIES, **SPEECH_QUESTIONS}
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(f"unknown families {sorted(unknown)}; known: {list(known)}")
    for i in rng.permutation(len(names)):
        if (qa := known[names[i]](timeline, t_s, rng, window_s)) is not None:
            return qa
    return None
