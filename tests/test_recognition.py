"""Streams sharing one speech recogniser (audio/recognition.py): round-robin turns per stream, a bound on a spoken
question's length, and requests that wait for the recogniser off asyncio's default executor.

The recogniser is a double that blocks until the test lets it go and records the order it was given utterances in
(each utterance's samples carry its name), so the order expected is written out by hand from the turn rule."""

from __future__ import annotations

import asyncio
import io
import threading
import types
import wave
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import wait_until
from streamvid.audio.pcm import RATE, AudioChunk
from streamvid.audio.recognition import QUESTION_MAX_S, SHARE, FairRecognition, fair, question, rest_s


class _Gate:
    """Holds its first utterance until `release`; records every utterance's tag (its first sample) in order."""

    name = "gate"

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()
        self.order: list[float] = []

    def transcribe(self, samples, hint=None):
        self.entered.set()
        assert self.release.wait(60)
        self.order.append(float(samples[0]))
        return f"heard {float(samples[0]):g}"


def test_streams_waiting_for_the_recogniser_take_turns():
    gate = _Gate()
    turns = FairRecognition(gate)
    said = lambda tag: np.full(8, tag, np.float32)  # noqa: E731
    futures = [turns.submit(said(10), key="a")]  # a's first: being decoded
    assert gate.entered.wait(30)
    futures += [turns.submit(said(10 + i), key="a") for i in range(1, 5)]  # a's backlog: four more
    futures += [turns.submit(said(20), key="b"), turns.submit(said(21), key="b"), turns.submit(said(30), key="c")]
    assert turns.waiting == {"a": 4, "b": 2, "c": 1}
    gate.release.set()
    assert [f.result(timeout=30) for f in futures] == [f"heard {t}" for t in (10, 11, 12, 13, 14, 20, 21, 30)]
    # b and c waited behind one utterance of a each, not behind a's backlog
    assert gate.order == [10, 11, 20, 30, 12, 21, 13, 14]
    assert turns.waiting == {}
    assert wait_until(lambda: not _threads("streamvid-recognise"))  # idle, its thread ends (a later submit starts one)
    assert turns.transcribe(said(40), key="c") == "heard 40"


def test_with_a_backlog_the_recogniser_rests_as_long_as_it_worked():
    """At SHARE 0.5 a decoding of d seconds is followed by d seconds of rest before the next utterance waiting.
    (Lower bounds only: a loaded machine only adds time.)"""
    import time

    assert SHARE == 0.5 and rest_s(0.4) == pytest.approx(0.4) and rest_s(1.0, share=0.25) == pytest.approx(3.0)

    class Timed:
        name = "timed"

        def __init__(self):
            self.spans: list[tuple[float, float]] = []

        def transcribe(self, samples, hint=None):
            start = time.monotonic()
            time.sleep(float(samples[0]))
            self.spans.append((start, time.monotonic()))
            return "ok"

    timed = Timed()
    turns = FairRecognition(timed)
    backlog = [turns.submit(np.full(4, 0.3, np.float32), key=k) for k in ("a", "b", "a")]
    assert [f.result(timeout=60) for f in backlog] == ["ok"] * 3
    for (s0, e0), (s1, _) in zip(timed.spans, timed.spans[1:]):
        assert s1 - e0 >= rest_s(e0 - s0) - 1e-3  # the rest after each decoding, as long as the decoding took
    timed.device = "cuda"  # a recogniser on a GPU takes no rest: the cores are not what it uses
    assert FairRecognition(timed).share == 1.0 and rest_s(0.3, 1.0) == 0.0


def test_a_recognisers_failure_reaches_its_caller_and_the_next_turn_goes_on():
    class Flaky:
        name = "flaky"

        def transcribe(self, samples, hint=None):
            if samples[0] < 0:
                raise RuntimeError("decoder broke")
            return "fine"

    turns = FairRecognition(Flaky())
    with pytest.raises(RuntimeError, match="decoder broke"):
        turns.transcribe(np.full(4, -1.0, np.float32), key="a")
    assert turns.transcribe(np.ones(4, np.float32), key="b") == "fine"


def test_streams_hearing_one_recogniser_queue_as_themselves(adapter):
    from streamvid.assistant.hearing import Hearing
    from streamvid.audio.vad import WINDOW, Segmenter
    from streamvid.config import EngineConfig
    from streamvid.engine.engine import Engine

    engine = Engine(EngineConfig.from_settings(device="cpu", frame_px=56), adapter)
    a, b = engine.open(), engine.open()
    gate = _Gate()
    hearings = [Hearing(s, gate) for s in (a, b)]
    loud = np.concatenate([np.zeros(RATE // 2), np.full(RATE, 0.5), np.zeros(RATE)]).astype(np.float32)
    try:
        for h in hearings:
            h.listener.segmenter = Segmenter(pad_s=0.0, probabilities=lambda v: np.array(
                [float(np.abs(v[i:i + WINDOW]).mean() > 0.1) for i in range(0, len(v) - WINDOW + 1, WINDOW)]))
        hearings[0].feed(AudioChunk(0.0, loud))
        assert gate.entered.wait(30)
        hearings[1].feed(AudioChunk(0.0, loud))
        assert wait_until(lambda: fair(gate).waiting == {b.id: 1})  # b's utterance waits in b's own line
        gate.release.set()
        assert wait_until(lambda: a.utterances == 1 and b.utterances == 1)
    finally:
        gate.release.set()
        for h in hearings:
            h.close()
        engine.close()


def test_a_spoken_question_longer_than_the_bound_is_refused_before_it_is_decoded():
    gate = _Gate()
    gate.release.set()
    longest = np.full(int(QUESTION_MAX_S * RATE), 0.25, np.float32)
    assert question(gate, longest, key="s") == "heard 0.25"
    with pytest.raises(ValueError) as e:
        question(gate, np.zeros(int(QUESTION_MAX_S * RATE) + RATE // 2, np.float32), key="s")
    assert "30.5 s" in str(e.value) and "at most 30 s" in str(e.value) and "\n" not in str(e.value)
    assert gate.order == [0.25]  # the long one never reached the recogniser


def test_a_long_spoken_question_to_a_hub_is_a_one_line_refusal():
    from streamvid.config import EngineConfig
    from streamvid.errors import Refused
    from streamvid.hub.sound import spoken_question

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(np.zeros(16000 * 31, "<i2").tobytes())
    with pytest.raises(Refused) as e:
        spoken_question(EngineConfig.from_settings(device="cpu"), buf.getvalue(), "wav", "s0")
    assert "31.0 s" in str(e.value) and "\n" not in str(e.value)


def test_sound_requests_never_wait_on_the_event_loops_default_executor():
    """With asyncio's default executor wholly taken (one thread, held), a spoken question and a sound push still
    complete: they run on the sound pool."""
    from streamvid.serve.service import HubService

    ran_on: list[str] = []

    def job(*args):
        ran_on.append(threading.current_thread().name)
        return {"ok": True} if len(args) > 3 else "words"

    hub = types.SimpleNamespace(options=None, spoken_question=job, push_audio=job)
    service = HubService(hub)
    held = threading.Event()

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(1))
        blocker = loop.run_in_executor(None, held.wait, 60)
        try:
            said = await asyncio.wait_for(service.spoken_question("s0", b"", "wav"), 30)
            pushed = await asyncio.wait_for(service.push_audio("s0", b"", "audio/pcm", 24000, None), 30)
        finally:
            held.set()
            await blocker
        return said, pushed

    assert asyncio.run(main()) == ("words", {"ok": True})
    assert len(ran_on) == 2 and all(name.startswith("streamvid-sound") for name in ran_on)
    assert wait_until(lambda: not _threads("streamvid-sound"))  # idle, the pool's threads end


def _threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]
