""""Hold to talk" keeps a bounded recording whatever rate the page's client declares (streamvid_app.voice)."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from streamvid.errors import Refused
from streamvid_app.voice import MAX_TALK_S, TalkRecording, pcm16

CHUNK = np.zeros(4 * 2**20, "<i2")  # 8 MB of samples, as one message of the microphone's stream may carry


def _wav(data: bytes) -> tuple[int, int]:
    with wave.open(io.BytesIO(data)) as w:
        return w.getframerate(), w.getnframes()


def test_a_declared_rate_of_100_mhz_is_refused_and_nothing_is_kept():
    talk = TalkRecording()
    talk.start()
    for _ in range(10):
        with pytest.raises(Refused, match="^hold to talk: the microphone's rate of 100000000 Hz"):
            talk.add(100_000_000, CHUNK)
    assert talk.stop() == b""


@pytest.mark.parametrize("rate", [8000, 16000, 48000])
def test_ten_8_mb_chunks_keep_at_most_60_seconds_at_the_rate(rate):
    talk = TalkRecording()
    talk.start()
    for _ in range(10):
        assert talk.add(rate, CHUNK) is True
    kept_rate, frames = _wav(talk.stop())
    assert kept_rate == rate and frames == int(MAX_TALK_S * rate)  # 60 s, 5.76 MB at 48 kHz, not 80 MB


def test_float_samples_that_are_not_finite_become_silence_or_full_scale():
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.5], np.float32)
    assert pcm16(x).tolist() == [0, 32767, -32767, 32767, -32767, 16383]
    stereo = np.array([[1.0, 1.0], [-1.0, -1.0]], np.float32)
    assert pcm16(stereo).tolist() == [32767, -32767]


def test_off_the_recording_leaves_the_sound_to_the_stream():
    talk = TalkRecording()
    assert talk.add(16000, CHUNK[:100]) is False and talk.stop() is None
