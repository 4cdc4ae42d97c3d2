"""Spoken answers: sentences cut as text streams in, spoken in order as they complete (the first before the answer
ends), resampled to 24 kHz PCM16, and interrupted on cancel. Checked against espeak-ng's own output for each
sentence (the independent reference), and a tiny random VITS against transformers' own pipeline."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from streamvid.audio.pcm import resample
from streamvid.audio.spoken import OUT_RATE, Sentences, Speaker
from streamvid.audio.voices import load_voice


@pytest.mark.parametrize("pieces, sentences, rest", [
    (["Hel", "lo there. How", " are you?", " Fine"], ["Hello there.", "How are you?"], "Fine"),
    (["It is 3.5 metres away. ", "OK"], ["It is 3.5 metres away."], "OK"),
    (["Wait!!! ", "\"Stop.\" ", "...", ""], ["Wait!!!", "\"Stop.\""], None),
])
def test_sentences(pieces, sentences, rest):
    s = Sentences()
    got = [x for p in pieces for x in s.feed(p)]
    assert got == sentences and s.flush() == rest


def test_resampling_keeps_pitch_and_length():
    t = np.arange(16000) / 16000
    y = resample((0.3 * np.sin(2 * np.pi * 500 * t)).astype(np.float32), 16000, OUT_RATE)
    assert abs(len(y) - OUT_RATE) <= 64
    assert abs(np.argmax(np.abs(np.fft.rfft(y[500:-500]))) * OUT_RATE / len(y[500:-500]) - 500) < 10


class _Gated:
    """A voice that speaks only when allowed (a unit-test double around a real voice)."""

    def __init__(self, voice):
        self.voice, self.name = voice, "gated"
        self.go = threading.Semaphore(0)
        self.calls = []

    def synthesize(self, text, variant=None):
        self.calls.append(text)
        self.go.acquire(timeout=60)
        return self.voice.synthesize(text)


def _espeak_voice():
    try:
        return load_voice("espeak-ng")
    except Exception as e:  # noqa: BLE001
        import os

        if os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":
            raise
        pytest.skip(str(e))


def test_the_first_sentence_is_spoken_before_the_answer_ends_and_cancel_stops_it():
    voice = _espeak_voice()
    gated = _Gated(voice)
    sent = []
    speaker = Speaker(gated, on_audio=sent.append)
    speaker.feed("The star is red. It moved")
    gated.go.release()
    from conftest import wait_until

    assert wait_until(lambda: len(sent) == 1)  # spoken while the answer is still coming
    reference, rate = voice.synthesize("The star is red.")
    assert len(sent[0]) // 2 == pytest.approx(len(reference) * OUT_RATE / rate, abs=64)
    speaker.feed(" left. Then it stopped.")
    assert wait_until(lambda: len(gated.calls) == 2)
    speaker.cancel()
    gated.go.release()
    gated.go.release()
    assert speaker.wait(30) and len(sent) == 1 and speaker.spoken == ["The star is red."]


def test_a_transformers_voice_from_a_directory(tmp_path):
    import torch
    from transformers import pipeline

    out = tmp_path / "vits"
    subprocess.run([sys.executable, "-m", "streamvid.cli", "make-tiny", "--arch", "vits", "--out", str(out)],
                   check=True, capture_output=True, timeout=300)
    voice = load_voice(str(out))
    reference = pipeline("text-to-speech", model=str(out), device="cpu")
    torch.manual_seed(0)  # VITS samples its durations and noise: the same seed gives the same speech
    samples, rate = voice.synthesize("hello there")
    torch.manual_seed(0)
    ref = reference("hello there")
    assert rate == ref["sampling_rate"] and np.allclose(samples, np.clip(np.asarray(ref["audio"]).reshape(-1), -1, 1))
