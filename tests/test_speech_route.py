"""`POST /v1/audio/speech` (serve/speech_route.py) against a real server on loopback, with a voice whose every
synthesis waits for the test's word: at most SPEECH_SLOTS replies are spoken at once (one more is a 429 at once)
on a pool of their own, so the routes that run on the event loop's default executor still answer while every slot
is held; a long reply streams sentence by sentence, each sent before the next is spoken; a slot comes back when a
reply ends, fails or its client goes away. Counts and event order only. Tiny random checkpoint."""

from __future__ import annotations

import io
import json
import threading
import time
import wave

import httpx
import numpy as np
import pytest
from serve_helpers import png, running, speaking_server, wait_until

from streamvid.serve import ServeOptions, build_app
from streamvid.audio.encoding import Encoder
from streamvid.serve import speech_route
from streamvid.serve.refusal_pace import HOLD_S, PACE_AFTER, PACE_WINDOW_S, RefusalPace
from streamvid.serve.speech_route import SPEECH_SLOTS, Speaker, pieces

LEVEL = 0.25  # every sample the test voice speaks: PCM16 round(0.25 * 32767) = 8192
PCM_LEVEL = 8192
PER_CHAR = 10  # samples per character of the text spoken


class GatedVoice:
    """A voice at 24 kHz (no resampling) that speaks PER_CHAR samples of LEVEL per character, each synthesis
    waiting until the test releases it (`release(n)`: the next n may finish)."""

    def __init__(self):
        self.texts: list[str] = []
        self.threads: set[str] = set()
        self.inside = self.most = 0
        self._lock = threading.Lock()
        self._permits = threading.Semaphore(0)

    def synthesize(self, text, variant=None):
        with self._lock:
            self.texts.append(text)
            self.threads.add(threading.current_thread().name)
            self.inside += 1
            self.most = max(self.most, self.inside)
        self._permits.acquire(timeout=60)
        with self._lock:
            self.inside -= 1
        if text == "fail now.":
            raise RuntimeError("the voice broke")
        return np.full(PER_CHAR * len(text), LEVEL, np.float32), 24000

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self._permits.release()


@pytest.fixture
def voiced(engine, monkeypatch):
    """A server whose --tts names a GatedVoice (a name of its own, so the route loads it fresh); (url, voice)."""
    voice = GatedVoice()
    with speaking_server(engine, monkeypatch, voice) as url:
        yield url, voice
        voice.release(100)  # nothing left waiting


def speech(url: str, text: str, fmt: str = "wav", timeout_s: float = 60.0) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/speech", json={"model": "tiny", "input": text, "voice": "alloy",
                                                      "response_format": fmt}, timeout=timeout_s)


def spoken(text: str) -> bytes:
    """The PCM16 the test voice gives for `text`, written out independently of the route."""
    return np.full(PER_CHAR * len(text), PCM_LEVEL, "<i2").tobytes()


def test_pieces_are_sentences_and_long_ones_are_cut_at_spaces():
    assert pieces("  One. Two?  Three!\nFour \u2026 five 3.5 s") == ["One.", "Two?", "Three!", "Four \u2026",
                                                                    "five 3.5 s"]
    assert pieces("aaaa bbbb cccc", max_chars=9) == ["aaaa bbbb", "cccc"]
    assert pieces("abcdefghij", max_chars=4) == ["abcd", "efgh", "ij"]
    assert pieces(" \n ") == []


def test_the_cap_holds_and_other_routes_are_not_starved(voiced):
    url, voice = voiced
    n = 40  # more than the event loop's default executor has threads on any machine (32 at most)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def ask():
        r = speech(url, "The star is red.")
        with lock:
            answers.append(r)

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    wait_until(lambda: voice.inside >= SPEECH_SLOTS, what=f"{SPEECH_SLOTS} replies being spoken")
    # every slot is held by a synthesis that waits: the routes on the default executor still answer
    with httpx.Client(base_url=url, timeout=30.0) as c:
        assert c.get("/v1/models").status_code == 200
        sid = c.post("/v1/streams", json={"source": "push"}).json()["id"]
        frame = png(np.zeros((32, 32, 3), np.uint8))
        r = c.post(f"/v1/streams/{sid}/frames", params={"t_s": 0.0}, content=frame,
                   headers={"Content-Type": "image/png"})
        assert r.status_code == 200, r.text
        assert c.get(f"/v1/streams/{sid}").status_code == 200
        assert c.delete(f"/v1/streams/{sid}").status_code == 200
    wait_until(lambda: len(answers) == n - SPEECH_SLOTS, what="the replies past the slots to be refused")
    refused = list(answers)
    assert all(r.status_code == 429 and r.headers["retry-after"] == "1" for r in refused)
    message = refused[0].json()["error"]["message"]
    assert "\n" not in message and f"speaking {SPEECH_SLOTS} replies" in message
    assert voice.most == SPEECH_SLOTS and voice.inside == SPEECH_SLOTS
    assert all(name.startswith("streamvid-speech") for name in voice.threads)
    voice.release(SPEECH_SLOTS)
    for t in threads:
        t.join(timeout=60)
    done = [r for r in answers if r.status_code == 200]
    assert len(done) == SPEECH_SLOTS
    for r in done:  # one sentence: a WAV with its exact length
        with wave.open(io.BytesIO(r.content)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
            assert w.getnframes() == PER_CHAR * len("The star is red.")
            assert w.readframes(w.getnframes()) == spoken("The star is red.")
    # the slots came back: the next reply is spoken
    voice.release(1)
    assert speech(url, "Again.").status_code == 200


def test_a_long_reply_streams_each_sentence_before_the_next_is_spoken(voiced):
    url, voice = voiced
    sentences = ["The star is red.", "The circle is blue and moves left.", "Nothing else changed."]
    body = {"model": "tiny", "input": " ".join(sentences), "response_format": "wav"}
    got = b""
    with httpx.Client(timeout=60.0) as c, c.stream("POST", f"{url}/v1/audio/speech", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
        chunks = r.iter_raw()
        want = 44
        for i, sentence in enumerate(sentences):
            voice.release(1)
            want += len(spoken(sentence))
            while len(got) < want:
                got += next(chunks)
            # this sentence has come while the next one, if any, is still waiting to be spoken
            assert voice.texts == sentences[:i + 1] or voice.texts == sentences[:i + 2]
            assert len(got) == want
        got += b"".join(chunks)
    assert voice.texts == sentences
    assert got[:4] == b"RIFF" and int.from_bytes(got[4:8], "little") == 0xFFFFFFFF
    assert got[36:40] == b"data" and int.from_bytes(got[40:44], "little") == 0xFFFFFFFF
    with wave.open(io.BytesIO(got)) as w:  # a standard reader takes the open length and reads to the end
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        assert w.readframes(10**6) == b"".join(spoken(s) for s in sentences)
    # raw PCM streams the same samples, without a header
    voice.release(2)
    r = speech(url, "One. Two.", fmt="pcm")
    assert r.status_code == 200 and r.content == spoken("One.") + spoken("Two.")


def test_slots_come_back_after_a_failed_piece_a_refusal_and_a_client_that_left(voiced, engine, monkeypatch):
    url, voice = voiced
    # a piece that fails ends the stream after the pieces before it
    voice.release(2)
    r = speech(url, "Fine. fail now. Never spoken.", fmt="pcm")
    assert r.status_code == 200 and r.content == spoken("Fine.")
    assert voice.texts == ["Fine.", "fail now."]
    # clients that leave mid-reply: every slot, then their replies are abandoned
    for _ in range(SPEECH_SLOTS):
        with httpx.Client(timeout=60.0) as c, c.stream("POST", f"{url}/v1/audio/speech",
                                                       json={"model": "tiny", "input": "A. B. C."}) as s:
            voice.release(1)
            assert next(s.iter_raw())[:4] == b"RIFF"
    voice.release(100)
    wait_until(lambda: speech(url, "Back.").status_code == 200, what="the slots to come back")
    # a bad request never takes a slot; an empty one is a one-line 400
    for _ in range(SPEECH_SLOTS + 1):
        r = speech(url, " ", fmt="wav")
        assert r.status_code == 400 and "\n" not in r.json()["error"]["message"]
    # --tts off: 409, and the slot is given back
    with running(build_app(engine, ServeOptions(model_id="tiny", max_new_tokens=4, tts="off"))) as off:
        for _ in range(SPEECH_SLOTS + 1):
            r = speech(off, "Hello.")
            assert r.status_code == 409 and "--tts off" in json.loads(r.content)["error"]["message"]


def test_an_address_retrying_refusals_at_once_is_held_and_others_are_not():
    now = [100.0]
    pace = RefusalPace(clock=lambda: now[0], max_addresses=2)
    assert [pace.hold_s("a") for _ in range(PACE_AFTER + 2)] == [0.0] * PACE_AFTER + [HOLD_S] * 2
    assert pace.hold_s("b") == 0.0  # another address: its own count
    now[0] += PACE_WINDOW_S + 0.01  # a client that waited out the window starts again unheld
    assert pace.hold_s("a") == 0.0
    pace.hold_s("c")  # three addresses with room for two: the one refused longest ago ("b") is forgotten
    assert [pace.hold_s("b") for _ in range(PACE_AFTER)] == [0.0] * PACE_AFTER


def test_a_client_that_ignores_retry_after_waits_it_out_on_the_server(voiced):
    url, voice = voiced
    holders = [threading.Thread(target=speech, args=(url, "Hold on."), daemon=True) for _ in range(SPEECH_SLOTS)]
    for t in holders:
        t.start()
    wait_until(lambda: voice.inside >= SPEECH_SLOTS, what="every slot taken")
    n = 2 * (PACE_AFTER + 1)
    start = time.monotonic()
    refused = [speech(url, "Me too.") for _ in range(n)]  # one client, retrying at once
    took = time.monotonic() - start
    assert all(r.status_code == 429 and r.headers["retry-after"] == "1" for r in refused)
    # past PACE_AFTER refusals within PACE_WINDOW_S the next is held HOLD_S: at most PACE_AFTER + 1 a second
    assert took >= 2 * HOLD_S * 0.99, took
    voice.release(SPEECH_SLOTS)
    for t in holders:
        t.join(timeout=60)


def test_a_long_reply_is_spoken_ahead_of_real_time_only_so_far(monkeypatch):
    """Five pieces of 10 s of sound each: the first 20 s (LEAD_S) at once, then at most 4x (PACE) real time: the
    fourth piece waits until 2.5 s have passed ((30 - 20) / 4), the fifth until 5 s ((40 - 20) / 4)."""
    import asyncio

    assert (speech_route.LEAD_S, speech_route.PACE) == (20.0, 4.0)

    class TenSeconds:
        def synthesize(self, text, variant=None):
            return np.full(10 * 24000, LEVEL, np.float32), 24000

    monkeypatch.setattr(speech_route, "load_voice", lambda n: TenSeconds())
    now, waits = [0.0], []

    async def sleep(s):
        waits.append(s)
        now[0] += s

    speaker = Speaker(clock=lambda: now[0], sleep=sleep)

    async def reply():
        return b"".join([b async for b in speaker.stream(["One.", "Two.", "Three.", "Four.", "Five."],
                                                         "test-paced-voice", Encoder("pcm"))])

    data = asyncio.run(reply())
    assert waits == [2.5, 2.5] and now[0] == 5.0
    assert data == np.full(5 * 10 * 24000, PCM_LEVEL, "<i2").tobytes()  # every piece, in full
