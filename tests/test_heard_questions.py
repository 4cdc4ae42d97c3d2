"""train-tiny's spoken questions (`training/heard.py`): questions said by synth's voices after the wake word, heard by
the recogniser, the wake word stripped as the engine strips it; a share of the training's user questions asked in
those words, with the answer of the question as written. Checked with a scripted recogniser double and hand-written
tables, and once with espeak-ng and Whisper tiny.en."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from streamvid.audio.voices import EspeakVoice, Voice
from streamvid.synth.questions import QA
from streamvid.training.config import TrainConfig
from streamvid.training.data import TrainingData, asked_aloud
from streamvid.training.heard import hear_questions, load, question_texts, save, training_voices


class Tone(Voice):
    """A voice double: a tone as long as the text, recording what it was asked to say."""

    name = "tone"
    variants = ("en-us@100", "en-gb@100", "en-029+m2@100", "en-us+f3@120")

    def __init__(self):
        self.said: list[tuple[str, str]] = []

    def synthesize(self, text, variant=None):
        self.said.append((text, variant))
        rate = 22050
        return (0.5 * np.sin(np.arange(int(0.05 * len(text) * rate)) / 5)).astype(np.float32), rate


class Scripted:
    """A recogniser double that writes what it is scripted to for each call, recording what it was told."""

    def __init__(self, outputs):
        self.outputs, self.hints, self.lengths = list(outputs), [], []

    def transcribe(self, samples, hint=None):
        self.hints.append(hint)
        self.lengths.append(len(samples))
        return self.outputs.pop(0)


def test_the_us_accents_are_held_out_of_the_training_voices():
    voices = training_voices([EspeakVoice.__new__(EspeakVoice), Tone()])
    assert [var for _, var in voices] == ["en-gb+m3@175", "en-gb-x-rp+f2@160", "en-029+m2@155",
                                          "en-gb-scotland+f4@170", "en-gb@100", "en-029+m2@100"]


def test_a_question_is_heard_as_the_engine_reads_it(tmp_path):
    voice = Tone()
    voices = training_voices([voice])  # en-gb and en-029
    rec = Scripted(["Assistant, is near a blue star.", "Is there a blue star?",  # the wake word not heard: left out
                    "Hey assistant: what colour is the square?", "Assistant."])  # nothing asked: left out
    table = hear_questions(["Is there a blue star?", "What colour is the square?"], rec, voices, "assistant",
                           np.random.default_rng(0), per_text=2)
    assert table == {"Is there a blue star?": ["Is near a blue star."],
                     "What colour is the square?": ["What colour is the square?"]}
    assert [t for t, _ in voice.said] == ["Assistant, Is there a blue star?"] * 2 + [
        "Assistant, What colour is the square?"] * 2
    assert {v for _, v in voice.said} == {"en-gb@100", "en-029+m2@100"}  # each text by two voices, no US one
    assert rec.hints == ["assistant"] * 4  # told the wake word, as the engine tells it
    save(table, tmp_path / "heard.json")
    assert load(tmp_path / "heard.json") == table
    (tmp_path / "bad.json").write_text('{"a": "not a list"}')
    with pytest.raises(ValueError, match="question text -> list"):
        load(tmp_path / "bad.json")


def test_a_heard_question_that_lost_what_it_asks_about_is_left_out():
    rec = Scripted(["Assistant, what shape is verbal?", "Assistant, what shape is purple",
                    "Assistant, when was time?", "Assistant, when did someone say star?",
                    "Assistant, do you see a red hex?", "Assistant, is near a red hexagon."])
    voices = training_voices([Tone()])
    table = hear_questions(["What shape is purple?", "When did someone say 'star'?", "Do you see a red hexagon?"],
                           rec, voices, "assistant", np.random.default_rng(0), per_text=2)
    assert table == {"What shape is purple?": ["What shape is purple"],
                     "When did someone say 'star'?": ["When did someone say star?"],
                     "Do you see a red hexagon?": ["Is near a red hexagon."]}


def test_question_texts_are_distinct_and_capped_per_family():
    drawn = iter(["a", "b", "a", None, "c", "d", "x", "x", "a"])
    texts = question_texts(lambda family, rng: next(drawn), ["f1", "f2"], np.random.default_rng(0), tries=4)
    assert texts == ["a", "b", "c", "d", "x"]  # f1: a b a None; f2: c d x x ("a" kept once)


def test_asked_aloud_keeps_the_answer_and_follows_its_share():
    qa = QA("realtime_exists", "Is there a blue star?", "yes", 10.0, (8.0, 10.0))
    rng = np.random.default_rng(0)
    heard = ["Is near a blue star.", "Is there a blue star?"]
    asked = [asked_aloud(qa, heard, 0.25, rng) for _ in range(4000)]
    assert all((a.answer, a.family, a.t_s, a.evidence_s) == ("yes", "realtime_exists", 10.0, (8.0, 10.0)) for a in asked)
    aloud = sum(a.text == "Is near a blue star." for a in asked)
    assert 0.09 < aloud / 4000 < 0.16  # a quarter asked aloud, half of those in the misheard words
    assert asked_aloud(qa, heard, 0.0, rng) == qa and asked_aloud(qa, [], 1.0, rng) == qa


def test_training_samples_ask_user_questions_in_their_heard_words(tmp_path):
    families = ("realtime_colour", "realtime_exists", "probe", "backward_at_time")
    cfg = TrainConfig(out_dir=tmp_path, n_timelines=1, minutes=1.0, heard_p=1.0, families=dict.fromkeys(families, 1.0))
    data = TrainingData(cfg, np.random.default_rng(3))
    rng = np.random.default_rng(4)
    texts = {data.draw_question(f, rng) for f in families for _ in range(400)}
    data.heard = {t: [f"heard: {t}"] for t in texts if t is not None}
    drawn = [data.draw_question("realtime_colour", rng) for _ in range(20)]
    assert all(t is None or not t.startswith("heard: ") for t in drawn)  # the table is built from the written words
    questions = []
    for _ in range(40):
        s = data.sample(4)
        questions += [(q, f) for q, _, f in s["turns"]]
    aloud = [q for q, f in questions if f in ("realtime_colour", "realtime_exists")]
    assert aloud and all(q.startswith("heard: ") for q in aloud if q.removeprefix("heard: ") in texts)
    assert sum(q.startswith("heard: ") for q in aloud) > 0.8 * len(aloud)
    # the engine's probes are never spoken, and a question naming a time keeps its words (the engine reads the time
    # in them: a misheard time names none)
    assert {f for _, f in questions} >= {"probe", "backward_at_time"}
    assert not any(q.startswith("heard: ") for q, f in questions if f in ("probe", "backward_at_time"))


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_espeak_and_whisper_hear_a_question_without_its_wake_word():
    from streamvid.audio.asr import load_recognizer

    voice = EspeakVoice()
    table = hear_questions(["How many shapes are there?"], load_recognizer(), [(voice, "en-gb+m3@175")],
                           "assistant", np.random.default_rng(0))
    (heard,) = table["How many shapes are there?"]
    assert "assistant" not in heard.lower() and "how many shapes" in heard.lower()
