"""Spoken times: what Whisper writes for a time said aloud becomes the "mm:ss" the engine reads. Checked against
hand-written expectations, and once end to end: espeak-ng says a question naming a time, Whisper tiny.en hears it,
and the engine's own time reader finds the second asked about."""

from __future__ import annotations

import os
import shutil

import pytest

from streamvid.language.spoken_times import clock_times, stream_times
from streamvid.language.wake_word import spoken_question


@pytest.mark.parametrize("heard, written", [
    ("What was on screen at 4.13?", "What was on screen at 04:13?"),          # "at four thirteen"
    ("What was on screen at 254?", "What was on screen at 02:54?"),           # "at two fifty-four"
    ("What was on screen at 007?", "What was on screen at 00:07?"),           # "at zero zero seven"
    ("What went on screen at 0.07", "What went on screen at 00:07"),
    ("What color was the star at 730.", "What color was the star at 07:30."),
    ("What was on screen at 1230", "What was on screen at 12:30"),
    ("What was on screen at 1 minute 20?", "What was on screen at 01:20?"),
    ("What was said at one minute and twenty seconds?", "What was said at 01:20?"),
    ("What was on screen at forty-five seconds?", "What was on screen at 00:45?"),
    ("What was on screen at two minutes", "What was on screen at 02:00"),
    ("What was on screen at 4:13?", "What was on screen at 04:13?"),
    ("What did you see at 0 0 6?", "What did you see at 00:06?"),
    ("What went on screen at zero zero six?", "What went on screen at 00:06?"),
    ("What did you see at 3 45?", "What did you see at 03:45?"),
    ("What was on screen at two fifty-four?", "What was on screen at 02:54?"),
    ("What was on screen at zero four thirteen?", "What was on screen at 04:13?"),
    ("What was on screen at twelve oh five?", "What was on screen at 12:05?"),
    ("What was on screen at 0 4 1 3?", "What was on screen at 04:13?"),
    ("What went on screen at 0-40?", "What went on screen at 00:40?"),
    ("What went on screen at three-zero-zero?", "What went on screen at 03:00?"),
    ("What went on screen at 3-11?", "What went on screen at 03:11?"),
    ("What was on screen at 04:13?", "What was on screen at 04:13?"),
])
def test_a_heard_time_is_written_as_the_engine_reads_it(heard, written):
    assert clock_times(heard) == written


@pytest.mark.parametrize("text", [
    "Is there 1 circle?", "How many shapes at 5?", "What was there at 4.5 seconds in?", "at 4.75", "at 12345",
    "What was on screen 2 minutes ago?", "What was on screen at 30 seconds ago?", "at 1 minute 20 seconds ago",
    "What was on screen at 1:02:03?", "What colour is the 254th shape?", "at 413,5", "at 1 2", "at two three",
    "at 1 2 3 4 5", "at 1-2-3-4-5", "at 2-2", "at 1, 2, 3 and 4", "What did you see at 2 near 1?", "at 5 75",
])
def test_what_is_not_a_minutes_and_seconds_time_is_left_as_it_is(text):
    assert clock_times(text) == text


def test_the_engine_reads_the_rewritten_time():
    assert stream_times(clock_times("What was on screen at 4.13?"), now_s=600.0) == [253.0]
    assert stream_times("What was on screen at 4.13?", now_s=600.0) == []  # as heard, no time at all


def test_spoken_questions_get_their_times_written_and_the_wake_word_taken_off():
    assert spoken_question("Assistant, what was on screen at 254?", "assistant") == "What was on screen at 02:54?"
    assert spoken_question("what was on screen at 254?", "assistant") == "what was on screen at 02:54?"  # push to talk


def test_espeak_and_whisper_ask_about_the_second_named():
    if shutil.which("espeak-ng") is None:
        if os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":
            pytest.fail("STREAMVID_REQUIRE_SPEECH=1 but espeak-ng is not installed")
        pytest.skip("espeak-ng is not installed")
    from streamvid.audio.asr import load_recognizer
    from streamvid.audio.pcm import RATE, resample
    from streamvid.audio.voices import EspeakVoice

    samples, rate = EspeakVoice().synthesize("Assistant, what was on screen at 04:13?", "en-us@165")
    heard = load_recognizer().transcribe(resample(samples, rate, RATE), "assistant")
    question = spoken_question(heard, "assistant")
    assert stream_times(question, now_s=600.0) == [253.0], question
