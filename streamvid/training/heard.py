"""Spoken questions as the engine reads them: each training question said by synth's voices after the wake word and
transcribed by the default recogniser, the way `Hearing` turns a user's spoken question into text.

    table = hear_questions(texts, load_recognizer(), training_voices([load_voice("espeak-ng")]), "assistant", rng)
    table["Is there a blue star?"]     # ["Is there a blue star?", "Is near a blue star.", ...]: one a voice

A recogniser mishears some words (Whisper tiny.en writes "Do you see a red hex?" for espeak-ng's "Do you see a red
hexagon?"), and the model answers the words it is given. train-tiny asks a share of its user questions
(`TrainConfig.heard_p`) in one of these heard forms, with the answer of the question as asked, so the model learns to
answer the question the speaker meant. The table is JSON (`heard_questions.json` in the training folder).

Voices: synth's espeak-ng variants (Piper's too, when installed) except the US English ones (`HELD_OUT`):
`benchmarks/voice_loop.py` speaks its questions in espeak-ng's en-us voice, which training never hears.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from streamvid.audio.pcm import RATE, resample
from streamvid.audio.voices import Voice
from streamvid.language.wake_word import addressed
from streamvid.synth.questions import mentions
from streamvid.synth.speech import voiced_span

log = logging.getLogger("streamvid")

HELD_OUT = ("en-us",)  # voice variants never used here (the accent benchmarks/voice_loop.py speaks in)
PER_FAMILY = 60  # at most this many distinct question texts a family (the time-naming ones have hundreds)
VOICES_PER_TEXT = 3  # each text is said by this many voices (whisper takes ~0.3 s an utterance on a CPU core)


def training_voices(voices: Sequence[Voice]) -> list[tuple[Voice, str]]:
    """(voice, variant) pairs to speak the questions with: every variant but the held-out accents."""
    return [(v, var) for v in voices for var in v.variants if var.split("@")[0].split("+")[0] not in HELD_OUT]


def question_texts(draw: Callable[[str, np.random.Generator], str | None], families: Iterable[str],
                   rng: np.random.Generator, tries: int = 400) -> list[str]:
    """Distinct question texts of each family, by drawing questions (`draw(family, rng)`, None when none fits)
    `tries` times a family, at most PER_FAMILY a family; in the order first drawn."""
    out: list[str] = []
    for family in families:
        seen: list[str] = []
        for _ in range(tries):
            text = draw(family, rng)
            if text is not None and text not in seen:
                seen.append(text)
                if len(seen) == PER_FAMILY:
                    break
        out += [t for t in seen if t not in out]
    return out


def hear_questions(texts: Sequence[str], recognizer, voices: Sequence[tuple[Voice, str]], wake_word: str,
                   rng: np.random.Generator, per_text: int = VOICES_PER_TEXT) -> dict[str, list[str]]:
    """text -> what the recogniser heard of "<Wake word>, <text>" said by `per_text` of the voices (drawn for each
    text), wake word stripped as the engine strips it (`addressed`). Left out: a saying in which the wake word was
    not heard (the engine would not have taken it for a question), and one that lost a name the question asks
    about (`names_kept`: "What shape is verbal?" for "What shape is purple?" cannot be answered, and a model taught
    to answer it learns to guess)."""
    table: dict[str, list[str]] = {}
    for i, text in enumerate(texts):
        forms = []
        for j in rng.choice(len(voices), min(per_text, len(voices)), replace=False):
            voice, variant = voices[int(j)]
            samples, rate = voice.synthesize(f"{wake_word.capitalize()}, {text}", variant)
            samples = resample(samples, rate, RATE)
            a, b = voiced_span(samples, RATE)
            pad = int(0.2 * RATE)  # the voice detector keeps a little silence around an utterance
            clip = np.concatenate([np.zeros(pad, np.float32), samples[a:b], np.zeros(pad, np.float32)])
            heard = addressed(recognizer.transcribe(clip, wake_word), wake_word)
            if heard is not None and names_kept(text, heard):
                forms.append(heard)
        table[text] = forms
        if (i + 1) % 50 == 0:
            log.info("heard questions: %d of %d", i + 1, len(texts))
    return table


def names_kept(written: str, heard: str) -> bool:
    """Whether the heard words still hold the shape and colour the written question names, and its quoted word."""
    words = set(re.findall(r"[a-z0-9]+", heard.lower()))
    quoted = re.findall(r"'([^']+)'", written)
    names = [n for n in (*mentions(written), *(q.lower() for q in quoted)) if n is not None]
    return all(set(re.findall(r"[a-z0-9]+", n)) <= words for n in names)


def save(table: dict[str, list[str]], path: Path) -> None:
    Path(path).write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")


def load(path: Path) -> dict[str, list[str]]:
    table = json.loads(Path(path).read_text())
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, list)
                                              and all(isinstance(x, str) for x in v) for k, v in table.items()):
        raise ValueError(f"{path}: expected a JSON object of question text -> list of heard texts")
    return table
