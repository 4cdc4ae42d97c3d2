"""The speech blocks of training samples: a ShapesWorld timeline's spoken lines as the engine lays them out.

The engine turns each utterance it hears into a speech block, one line of text `ingest.speech_line` ("[mm:ss]
speech: words"), encoded into the window just before the first video chunk that starts at or after the
utterance's end (`Ingest.speech_due`), evicted into long-term memory with the chunks around it, and retrieved for a
question about what was said (`Reasoning.retrieve`: the blocks saying its quoted word first, else the nearest by
meaning; for a question that names a time, the blocks at that time alone). Training samples lay speech out the
same way, so the model learns to read it where the engine puts it.

Training needs no sound: the lines are those `synth.speech.plan_lines` plans for the timeline's seed (what a
stream with sound would say, and when its voice starts), each with an end time estimated from its words, and each
written as a speech recogniser writes it (`transcript`: a capital first letter, a full stop or a comma, a number
word sometimes as digits), so answers copy the recogniser's words as the engine shows them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamvid.engine.ingest import speech_line
from streamvid.synth.speech import NAMES, NUMBERS, SLOT_S, plan_lines
from streamvid.synth.world import Speech, Timeline
from streamvid.types import Utterance

WORD_S = (0.25, 0.45)  # seconds a word takes, drawn per line (Piper and espeak-ng say these words in 0.2-0.5 s)
DIGITS_P = 0.6  # a number word written as digits ("Number 7")
PUNCT = (".", ".", "!", "", "")
SOUND_P = 0.75  # share of training streams with a speech track (the rest are silent, as video-only sources are)


@dataclass(frozen=True)
class Line:
    """One utterance of a training timeline: its gold times and words, and the transcript the engine shows."""

    t_s: float
    t_end_s: float
    text: str  # gold words (lowercase)
    transcript: str  # as a recogniser writes them

    @property
    def block(self) -> str:
        """The speech block's text, as the engine encodes it."""
        return speech_line(Utterance(self.t_s, self.t_end_s, self.transcript))


def transcript(text: str, rng: np.random.Generator) -> str:
    """Gold words as a speech recogniser writes them (Whisper tiny.en on synth's voices: "Number 10", "Stop!",
    "Where is the triangle?", "Purple Diamond", "This is Alice"): a capital first letter or every word capitalised,
    a number word often as digits, a comma after a name, a question mark after a question, a full stop, an
    exclamation mark or nothing."""
    words = [str(NUMBERS.index(w)) if w in NUMBERS and rng.random() < DIGITS_P else w for w in text.split()]
    if len(words) > 1 and words[0] in NAMES and rng.random() < 0.4:
        words[0] += ","
    if rng.random() < 0.25:
        words = [w[:1].upper() + w[1:] for w in words]
    out = " ".join(words)
    out = out[:1].upper() + out[1:] if rng.random() < 0.9 else out
    end = "?" if text.startswith("where") and rng.random() < 0.7 else PUNCT[int(rng.integers(len(PUNCT)))]
    return out + end


def lines_for(timeline: Timeline, rng: np.random.Generator) -> list[Line]:
    """The lines a stream with this timeline's seed would say (`plan_lines`), with end times estimated from
    their words and their transcripts."""
    out = []
    for start, text, _, _ in plan_lines(timeline.seed, timeline.duration_s):
        dur = min(SLOT_S, 0.1 + len(text.split()) * float(rng.uniform(*WORD_S)))
        end = min(start + dur, timeline.duration_s - 0.05)
        out.append(Line(round(start, 3), round(end, 3), text, transcript(text, rng)))
    return out


def as_speech(lines: list[Line]) -> list[Speech]:
    """The lines as the timeline's gold speech track (what `synth.questions`' speech families ask about)."""
    return [Speech(u.t_s, u.t_end_s, u.text) for u in lines]


def slot(line: Line, chunk_s: float) -> int:
    """The chunk the line's speech block is encoded just before: the first one starting at or after its end."""
    return math.ceil(line.t_end_s / chunk_s - 1e-9)


def line_of(lines: list[Line], evidence_s: tuple[float, float]) -> Line:
    """The line a speech question is about (its QA's evidence span is the line's gold span)."""
    return min(lines, key=lambda u: abs(u.t_s - evidence_s[0]) + abs(u.t_end_s - evidence_s[1]))
