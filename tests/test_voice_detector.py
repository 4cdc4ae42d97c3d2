"""The voice detector's own rules, on probabilities the test gives it (no model): the hysteresis between the
threshold that starts an utterance and the lower one that keeps it open, and the padding of an utterance's samples
that its times leave out. The expected times and samples are computed here by hand from the window layout."""

from __future__ import annotations

import numpy as np

from streamvid.audio.pcm import RATE, AudioChunk
from streamvid.audio.vad import WINDOW, Segmenter


def _segment(probs: np.ndarray, x: np.ndarray | None = None, step: int = 8000, **settings):
    """Feed `x` (default silence, one WINDOW per probability) in chunks of `step` samples to a Segmenter that scores
    window i with probs[i]; the utterances it cut, flushed at the end."""
    seen = iter(probs)
    seg = Segmenter(probabilities=lambda v: np.array([next(seen) for _ in range(len(v) // WINDOW)]), **settings)
    x = np.zeros(len(probs) * WINDOW, np.float32) if x is None else x
    out = []
    for i in range(0, len(x), step):
        out += seg.feed(AudioChunk(i / RATE, x[i:i + step]))
    return out + seg.flush(), seg


def _at(window: int) -> float:
    return round(window * WINDOW / RATE, 3)


def test_an_utterance_stays_open_while_its_probability_is_between_the_two_thresholds():
    # threshold 0.5 starts an utterance, 0.35 (threshold - 0.15) keeps it open. 0.42 lies between the two.
    probs = np.zeros(int(4 * RATE) // WINDOW)
    probs[5:15] = 0.42  # between the thresholds with nothing open: starts nothing
    probs[30:50] = 0.9  # speech: windows 30..49
    probs[50:70] = 0.42  # between the thresholds: the utterance goes on to the end of window 69
    out, seg = _segment(probs, threshold=0.5, silence_s=0.5, pad_s=0.0)
    assert [(u.t_s, u.t_end_s) for u in out] == [(_at(30), _at(70))]
    assert seg.take_events() == [("speech_started", _at(30)), ("speech_stopped", _at(70))]


def test_an_utterance_ends_once_its_probability_stays_under_the_lower_threshold():
    probs = np.zeros(int(4 * RATE) // WINDOW)
    probs[30:50] = 0.9
    probs[50:70] = 0.3  # under threshold - 0.15: silence, which ends it at the end of window 49 after 0.5 s
    out, _ = _segment(probs, threshold=0.5, silence_s=0.5, pad_s=0.0)
    assert [(u.t_s, u.t_end_s) for u in out] == [(_at(30), _at(50))]
    # a pause between the thresholds that outlasts silence_s is still speech: one utterance, not two
    probs[50:70] = 0.4
    probs[70:90] = 0.9
    out, _ = _segment(probs, threshold=0.5, silence_s=0.5, pad_s=0.0)
    assert [(u.t_s, u.t_end_s) for u in out] == [(_at(30), _at(90))]


def test_padding_widens_the_samples_and_not_the_times():
    pad_s = 0.4
    pad = int(pad_s * RATE)
    probs = np.zeros(int(4 * RATE) // WINDOW)
    probs[40:60] = 0.9  # speech from window 40 (1.28 s) to the end of window 59 (1.92 s)
    x = (np.arange(len(probs) * WINDOW) % 30011 / 30011).astype(np.float32)  # every sample tells where it was
    out, _ = _segment(probs, x, step=3000, threshold=0.5, silence_s=0.5, pad_s=pad_s)
    assert [(u.t_s, u.t_end_s) for u in out] == [(_at(40), _at(60))]
    (u,) = out
    assert np.array_equal(u.samples, x[40 * WINDOW - pad:60 * WINDOW + pad])
    # at the very start of the input the padding before the speech is what there is
    probs = np.zeros(int(3 * RATE) // WINDOW)
    probs[2:20] = 0.9
    out, _ = _segment(probs, x[:len(probs) * WINDOW], threshold=0.5, silence_s=0.5, pad_s=pad_s)
    assert [(u.t_s, u.t_end_s) for u in out] == [(_at(2), _at(20))]
    assert np.array_equal(out[0].samples, x[:20 * WINDOW + pad])
