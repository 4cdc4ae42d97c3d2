"""The page's voice (streamvid_app.voice): answers spoken sentence by sentence as they are generated, a new question
interrupting what is being said, and "hold to talk" questions; with espeak-ng's voice, on the real hub with the
bundled model (no browser: tests/test_app_browser.py plays the clips in Chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
import wave

import numpy as np
import pytest
from conftest import wait_until

from streamvid.config import EngineConfig
from streamvid.eval.wer import words
from streamvid.errors import Refused
from streamvid_app.manager import SessionManager
from streamvid_app.voice import STOP, PageVoice, page_voice


def _espeak() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        if os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":
            pytest.fail("STREAMVID_REQUIRE_SPEECH=1 but espeak-ng is not installed")
        pytest.skip("espeak-ng is not installed")
    return path


@pytest.fixture(scope="module")
def voice():
    _espeak()
    return page_voice("espeak-ng")


@pytest.fixture(scope="module")
def manager(voice):
    m = SessionManager.standalone(EngineConfig.from_settings(frame_px=112, max_new_tokens=12), voice=voice)
    yield m
    m.shutdown()


def _clip(pv: PageVoice, timeout_s: float = 60.0) -> str:
    """The next clip the page's player gets (as the page asks: its clip ended, wait for the next)."""
    got = []
    assert wait_until(lambda: got.append(pv.next_clip(ended=True, wait_s=0.5)) or got[-1] not in (None, STOP),
                      timeout_s), f"no clip to play; played so far: {pv.played}"
    return got[-1]


def _duration_s(path: str) -> float:
    with wave.open(path) as w:
        return w.getnframes() / w.getframerate()


def test_an_answer_is_spoken_sentence_by_sentence_as_it_is_generated(voice):
    pv = PageVoice(voice)
    try:
        pv.asked("q0")
        for piece in ("The star", " is red.", " It moves"):
            pv.on_item({"type": "answer.delta", "id": "q0", "text": piece})
        first = _clip(pv)  # the first sentence plays while the answer is still being generated
        assert pv.played == [("q0", "The star is red.")] and _duration_s(first) > 0.3
        for piece in (" to the left. Then", " stops"):
            pv.on_item({"type": "answer.delta", "id": "q0", "text": piece})
        pv.on_item({"type": "answer", "id": "q0", "text": "The star is red. It moves to the left. Then stops"})
        second = _clip(pv)
        if len(pv.played) < 3:
            _clip(pv)
        assert second != first
        assert pv.played == [("q0", "The star is red."), ("q0", "It moves to the left."), ("q0", "Then stops")]
        assert not wait_until(lambda: pv.next_clip(ended=True) not in (None, STOP), 0.5)  # nothing more is said
    finally:
        pv.close()


def test_an_answer_asked_by_voice_interrupts_and_an_alert_waits_its_turn(voice):
    pv = PageVoice(voice)
    try:
        pv.asked("q0")
        pv.on_item({"type": "answer.delta", "id": "q0", "text": "One. Two. Three. Four. "})
        _clip(pv)  # q0 is playing
        pv.on_item({"type": "answer.delta", "id": "q1", "text": "Blue."})  # asked with the wake word
        pv.on_item({"type": "alert", "alert_id": "a0", "text": "A red circle appeared."})
        pv.on_item({"type": "answer.delta", "id": "q0", "text": "Five. "})  # q0 goes on being generated
        pv.on_item({"type": "answer", "id": "q1", "text": "Blue."})
        first = pv.next_clip()  # q0's clip is stopped at once (or replaced by q1's)
        assert first == STOP or (first is not None and pv.played[-1][0] == "q1"), first
        while [k for k, _ in pv.played].count("alert:a0") == 0:
            _clip(pv)
        keys = [k for k, _ in pv.played]
        assert keys[keys.index("q1"):] == ["q1", "alert:a0"]  # after the interrupt: q1, then the alert, no q0
        assert "Five." not in [s for _, s in pv.played]
    finally:
        pv.close()


def _started(manager, key: str):
    s = manager.session(key)
    s.start("shapes_7")
    assert wait_until(lambda: (s.status().get("blocks_encoded") or 0) >= 2, 120), s.status()
    return s


def test_a_new_question_stops_the_answer_being_spoken_on_the_real_hub(manager):
    s = _started(manager, "voice-interrupt")
    try:
        assert s.voice.next_clip() is None  # the page's player is there (it asks for clips)
        q1 = s.ask("What colour is the star?")
        _clip(s.voice, 120)  # the page plays q1's answer
        assert {k for k, _ in s.voice.played} == {q1}
        q2 = s.ask("How many shapes are on screen?")
        # the player is told at once to stop q1's clip (or gets q2's), not after q1's clip would have ended
        first = s.voice.next_clip()
        assert first == STOP or (first is not None and s.voice.played[-1][0] == q2), first
        s.wait_answer(q2, 120)
        while [k for k, _ in s.voice.played][-1] != q2:
            _clip(s.voice, 120)
        keys = [k for k, _ in s.voice.played]
        assert keys[keys.index(q2):] == [q2] * (len(keys) - keys.index(q2))
        s.voice.interrupt()  # "Stop speaking" while q2's clip plays: the player stops it, and nothing follows
        assert s.voice.next_clip() == STOP and s.voice.next_clip(ended=True, wait_s=0.5) is None
    finally:
        manager.close("voice-interrupt")


def _said(tmp_path, text: str) -> tuple[int, np.ndarray]:
    out = tmp_path / "said.wav"
    subprocess.run([_espeak(), "-v", "en-us", "-w", str(out), text], check=True, timeout=30)
    with wave.open(str(out)) as w:
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), "<i2")


def test_hold_to_talk_asks_what_the_microphone_heard_on_the_real_hub(manager, tmp_path):
    s = _started(manager, "voice-talk")
    try:
        assert s.talk(False) is None  # not talking: nothing to ask
        rate, samples = _said(tmp_path, "How many shapes are there?")
        quiet = np.zeros(rate // 2, "<i2")
        s.talk(True)
        for chunk in np.array_split(np.concatenate([quiet, samples, quiet]), 6):  # as the page's microphone sends
            assert s.push_audio(rate, chunk.astype(np.float32) / 32768) is None  # kept for the question
        assert s.voice.next_clip() is None  # the page's player is there
        question, qid = s.talk(False)
        assert words(question) == ["how", "many", "shapes", "are", "there"]
        answer = s.wait_answer(qid, 120)
        chat = [m["content"] for m in s.chat()]
        at = chat.index(question)  # the words heard are the question in the chat, its answer under it
        assert answer["text"] in chat[at + 1]
        _clip(s.voice, 120)
        assert {k for k, _ in s.voice.played} == {qid}  # and it is spoken

        s.talk(True)
        with pytest.raises(Refused, match="^hold to talk: nothing was recorded"):
            s.talk(False)
        s.talk(True)
        s.push_audio(rate, np.zeros(rate, "<i2"))
        with pytest.raises(Refused, match="^hold to talk: no words were heard"):
            s.talk(False)
        assert s.status()["running"]  # the session goes on
    finally:
        manager.close("voice-talk")


def test_a_session_voice_synthesizes_nothing_until_a_player_asks_and_keeps_a_bounded_queue(manager, monkeypatch):
    """A session nobody listens to (an API client, a tab whose player never asks) makes no speech; with a player,
    alerts that are never taken wait in a queue of at most QUEUED_MAX, and speech stops once the player is gone."""
    import streamvid_app.voice as voice_module

    s = manager.session("voice-unheard")
    try:
        pv = s.voice
        for i in range(3):
            pv.on_item({"type": "alert", "alert_id": f"a{i}", "text": "A red circle appeared."})
        assert pv.queued == 0 and not pv.speaking()  # nothing synthesized, nothing kept
        assert pv.next_clip() is None  # the player asks: from now on alerts are spoken
        for i in range(3, 3 + 3 * voice_module.QUEUED_MAX):
            pv.on_item({"type": "alert", "alert_id": f"a{i}", "text": "A red circle appeared."})
        assert pv.queued == voice_module.QUEUED_MAX
        clip = _clip(pv)
        assert pv.played[0][0] == "alert:a3" and _duration_s(clip) > 0.3  # the first alert heard after it asked
        pv.interrupt()
        monkeypatch.setattr(pv, "player_timeout_s", 0.0)  # the player has not asked since: it is gone
        assert wait_until(lambda: not pv.listened(), 5.0)
        pv.on_item({"type": "alert", "alert_id": "late", "text": "A red circle appeared."})
        assert pv.queued == 0
    finally:
        manager.close("voice-unheard")
