"""Sound pushed to `streamvid serve`: `POST /v1/streams/{id}/audio` (a WAV, or raw PCM16 at ?rate=) and the
realtime socket's `input_audio_buffer.append` (base64 PCM16, 24 kHz), heard as `transcript` events by real
clients (httpx reading the SSE stream, a websockets client); bad sound is a one-line 4xx and the stream goes on.
The speech is espeak-ng's (skipped without it, except under STREAMVID_REQUIRE_SPEECH=1), the check that it was
heard is the recogniser's words against the words spoken."""

from __future__ import annotations

import base64
import io
import json
import re
import threading
import wave

import httpx
import numpy as np
import pytest
from conftest import random_frames
from serve_helpers import config, engine, frames_taken, png, running, spoken, strict_json, wait_until  # noqa: F401 - fixtures

from streamvid.eval.wer import words
from streamvid.serve import ServeOptions, build_app

websockets_sync = pytest.importorskip("websockets.sync.client")


def _wav(samples: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return buf.getvalue()


@pytest.fixture(scope="module")
def server(engine):  # noqa: F811
    app = build_app(engine, ServeOptions(max_new_tokens=4, max_body_mb=4.0))
    with running(app) as url:
        yield url


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server, timeout=60.0) as client:
        yield client


def _events(server: str, sid: str, got: list, stop: threading.Event) -> threading.Thread:
    def read():
        with httpx.stream("GET", f"{server}/v1/streams/{sid}/events", timeout=60.0) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got.append(strict_json(line[6:]))
                if stop.is_set():
                    return
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_pushed_wav_and_pcm_are_heard_as_transcript_events(server, http, tmp_path):
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    got, stop = [], threading.Event()
    reader = _events(server, sid, got, stop)
    try:
        r = http.post(f"/v1/streams/{sid}/audio?t_s=2.0", content=_wav(spoken(tmp_path, "stop", 22050), 22050),
                      headers={"content-type": "audio/wav"})
        assert r.status_code == 200, r.text
        first = r.json()
        assert first["t_s"] == 2.0 and first["t_end_s"] > 3.0
        raw = spoken(tmp_path, "where are my keys", 24000).tobytes()
        r = http.post(f"/v1/streams/{sid}/audio?rate=24000", content=raw, headers={"content-type": "audio/pcm"})
        assert r.status_code == 200 and r.json()["t_s"] == first["t_end_s"]  # goes on where the last ended
        said = wait_until(lambda: [e for e in got if e["type"] == "transcript"][1:] and
                          [e for e in got if e["type"] == "transcript"], what="two transcripts")
        assert "stop" in words(said[0]["text"]) and "keys" in words(said[1]["text"])
        assert 2.0 <= said[0]["t_s"] < said[0]["t_end_s"] <= first["t_end_s"] <= said[1]["t_s"]
        assert http.get(f"/v1/streams/{sid}").json()["utterances"] == 2
    finally:
        stop.set()
        http.delete(f"/v1/streams/{sid}")
        reader.join(10)


@pytest.mark.parametrize("query, body, content_type, status, message", [
    ("", b"\x00\x00", "audio/pcm", 400, "needs its sample rate"),
    ("?rate=24000", b"\x00\x00\x00", "audio/pcm", 400, "even number of bytes"),
    ("", b"RIFFnot a wav at all", "audio/wav", 400, "not a WAV file"),
    ("", b"\x00\x00", "audio/mpeg", 415, "WAV (audio/wav) or raw PCM16"),
    ("?rate=24000&t_s=0.5", b"\x00\x00" * 2400, "audio/pcm", 400, "goes back in time"),
])
def test_bad_sound_is_one_line_and_the_stream_goes_on(http, query, body, content_type, status, message):
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    try:
        assert http.post(f"/v1/streams/{sid}/audio?rate=24000&t_s=1.0", content=b"\x00\x00" * 2400,
                         headers={"content-type": "audio/pcm"}).status_code == 200
        r = http.post(f"/v1/streams/{sid}/audio{query}", content=body, headers={"content-type": content_type})
        error = strict_json(r.text)["error"]
        assert r.status_code == status and message in error["message"] and "\n" not in error["message"]
        assert http.post(f"/v1/streams/{sid}/audio?rate=24000", content=b"\x00\x00" * 2400,
                         headers={"content-type": "audio/pcm"}).status_code == 200  # and it goes on
    finally:
        http.delete(f"/v1/streams/{sid}")


def test_sound_to_a_clip_stream_is_409(http):
    sid = http.post("/v1/streams", json={"source": "shapes_7"}).json()["id"]
    try:
        r = http.post(f"/v1/streams/{sid}/audio?rate=24000", content=b"\x00\x00", headers={"content-type": "audio/pcm"})
        assert r.status_code == 409 and "push" in r.json()["error"]["message"]
    finally:
        http.delete(f"/v1/streams/{sid}")


def test_realtime_socket_hears_input_audio_buffer_append(server, http, tmp_path):
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    try:
        raw = spoken(tmp_path, "please help", 24000).tobytes()
        with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "***"}))
            error = strict_json(ws.recv(timeout=60))
            assert error["type"] == "error" and "base64" in error["message"] and error["status"] == 400
            for i in range(0, len(raw), 9600):  # 0.2 s a message, as a microphone sends
                ws.send(json.dumps({"type": "input_audio_buffer.append",
                                    "audio": base64.b64encode(raw[i:i + 9600]).decode()}))
            while (m := strict_json(ws.recv(timeout=60)))["type"] != "transcript":
                assert m["type"] != "error", m
            assert "help" in words(m["text"])
    finally:
        http.delete(f"/v1/streams/{sid}")


def test_a_spoken_question_in_a_chat_completion(server, http, tmp_path):
    """OpenAI's `input_audio` content part, sent with the openai client: the words heard are the question (read back
    from the stream's own answer event)."""
    openai = pytest.importorskip("openai")
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    got, stop = [], threading.Event()
    reader = _events(server, sid, got, stop)
    try:
        client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120.0)
        model = http.get("/v1/models").json()["data"][0]["id"]
        wav = _wav(spoken(tmp_path, "what colour is the star", 16000), 16000)
        part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}}
        reply = client.chat.completions.create(model=model, extra_body={"stream_id": sid},
                                               messages=[{"role": "user", "content": [part]}])
        qid = reply.model_extra["streamvid"]["question_id"]
        answer = wait_until(lambda: next((e for e in got if e["type"] == "answer" and e["id"] == qid), None),
                            what="the answer event")
        assert {"star", "what"} <= set(words(answer["question"])) and answer["text"] == reply.choices[0].message.content
        r = http.post("/v1/chat/completions", json={"model": model, "stream_id": sid, "messages": [
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "***", "format": "wav"}}]}]})
        assert r.status_code == 400 and "base64" in r.json()["error"]["message"]
        part["input_audio"]["format"] = "mp3"
        r = http.post("/v1/chat/completions", json={"model": model, "stream_id": sid,
                                                    "messages": [{"role": "user", "content": [part]}]})
        assert r.status_code == 400 and 'must be "wav"' in r.json()["error"]["message"]
    finally:
        stop.set()
        http.delete(f"/v1/streams/{sid}")
        reader.join(10)


def test_audio_speech_speaks_with_the_servers_voice(server, http, tmp_path):
    """OpenAI's /v1/audio/speech through the openai client: a 24 kHz WAV whose words the recogniser hears (an
    independent check of what was said); a bad format or empty input is a one-line 400."""
    openai = pytest.importorskip("openai")
    spoken(tmp_path, "x", 16000)  # (skips without espeak-ng, the voice this test hears)
    from streamvid.audio.asr import load_recognizer
    from streamvid.audio.pcm import wav_samples

    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120.0)
    model = http.get("/v1/models").json()["data"][0]["id"]
    reply = client.audio.speech.create(model=model, voice="alloy", input="Where are my keys?", response_format="wav")
    body = reply.read()
    with wave.open(io.BytesIO(body)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2) and w.getnframes() > 12000
    assert "keys" in words(load_recognizer().transcribe(wav_samples(body)))
    r = http.post("/v1/audio/speech", json={"model": model, "input": "Where are my keys?", "voice": "alloy",
                                            "response_format": "vorbis"})
    assert r.status_code == 400 and "'vorbis' is not supported" in r.json()["error"]["message"]
    r = http.post("/v1/audio/speech", json={"model": model, "input": " ", "voice": "alloy"})
    assert r.status_code == 400 and "\n" not in r.json()["error"]["message"]


def test_a_question_spoken_on_the_socket_is_answered_in_text_and_speech(server, http, tmp_path):
    """Push to talk with OpenAI Realtime's events: turn detection off, audio appended, committed; the transcript,
    the answer's text deltas (joined: the answer) and its audio deltas (PCM16 the recogniser hears the answer in,
    when it has words), then response.done; an empty commit and a cancel with nothing to cancel are errors."""
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    raw = spoken(tmp_path, "what colour is the star", 24000).tobytes()
    try:
        with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
            def until(kind):
                got = []
                while True:
                    m = strict_json(ws.recv(timeout=120))
                    got.append(m)
                    if m["type"] == kind:
                        return got
            ws.send(json.dumps({"type": "session.update", "session": {"turn_detection": None}}))
            assert until("session.updated")[-1]["session"]["turn_detection"] is None
            ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            assert "empty" in until("error")[-1]["message"]
            ws.send(json.dumps({"type": "response.cancel"}))
            assert "no response" in until("error")[-1]["message"]
            for i in range(0, len(raw), 9600):
                ws.send(json.dumps({"type": "input_audio_buffer.append",
                                    "audio": base64.b64encode(raw[i:i + 9600]).decode()}))
            ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            got = until("response.done")
            kinds = [m["type"] for m in got]
            assert kinds.index("input_audio_buffer.committed") < kinds.index(
                "conversation.item.input_audio_transcription.completed")
            transcript = next(m for m in got if m["type"] == "conversation.item.input_audio_transcription.completed")
            assert {"star", "what"} <= set(words(transcript["transcript"]))
            done = got[-1]["response"]
            answer = next(m for m in got if m["type"] == "answer" and m["id"] == done["question_id"])
            text = "".join(m["delta"] for m in got if m["type"] == "response.output_text.delta")
            assert done["status"] == "completed" and text.strip() == answer["text"] == done["text"]
            audio = b"".join(base64.b64decode(m["delta"]) for m in got if m["type"] == "response.output_audio.delta")
            assert (len(audio) > 0) == bool(re.search(r"[a-z]", answer["text"], re.I))
    finally:
        http.delete(f"/v1/streams/{sid}")


def test_server_vad_on_the_socket_tells_speech_edges_and_answers_the_wake_word(server, http, tmp_path):
    """Turn detection on (the default): the voice detector's edges as speech_started / speech_stopped at the times
    the speech is in the pushed sound (found here from the samples themselves), the stream's own speech as a
    transcript only, and speech after the wake word as a committed item with its transcription (same item_id as
    its speech_started) and a spoken response; silence_duration_ms is echoed, and refused out of range."""
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    plain = spoken(tmp_path, "the star is blue", 24000)
    asked = spoken(tmp_path, "assistant, what colour is the star", 24000)

    def voiced_ms(x, offset):
        loud = np.flatnonzero(np.abs(x.astype(np.int32)) > 300)
        return offset + loud[0] / 24, offset + loud[-1] / 24

    plain_ms, asked_ms = voiced_ms(plain, 0.0), voiced_ms(asked, len(plain) / 24)
    try:
        with websockets_sync.connect(server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
            def until(kind, pred=lambda m: True):
                got = []
                while True:
                    m = strict_json(ws.recv(timeout=120))
                    got.append(m)
                    if m["type"] == kind and pred(m):
                        return got
            ws.send(json.dumps({"type": "session.update", "session": {"turn_detection": {
                "type": "server_vad", "silence_duration_ms": 50}}}))
            assert "silence_duration_ms" in until("error")[-1]["message"]
            ws.send(json.dumps({"type": "session.update", "session": {"turn_detection": {
                "type": "server_vad", "silence_duration_ms": 600}}}))
            assert until("session.updated")[-1]["session"]["turn_detection"] == {
                "type": "server_vad", "silence_duration_ms": 600}
            raw = np.concatenate([plain, asked]).tobytes()
            for i in range(0, len(raw), 9600):
                ws.send(json.dumps({"type": "input_audio_buffer.append", "t_s": i / 48000,
                                    "audio": base64.b64encode(raw[i:i + 9600]).decode()}))
            got = until("response.done")
    finally:
        http.delete(f"/v1/streams/{sid}")
    started = [m for m in got if m["type"] == "input_audio_buffer.speech_started"]
    stopped = [m for m in got if m["type"] == "input_audio_buffer.speech_stopped"]
    assert len(started) >= 2 and [m["item_id"] for m in started] == [m["item_id"] for m in stopped]
    for voiced in (plain_ms, asked_ms):  # each stretch of speech starts and stops within it (32-ms windows)
        edges = [(a["audio_start_ms"], b["audio_end_ms"]) for a, b in zip(started, stopped)
                 if voiced[0] - 64 <= a["audio_start_ms"] <= voiced[1]]
        assert edges and edges[-1][1] <= voiced[1] + 64, (voiced, edges)
    transcripts = [m for m in got if m["type"] == "transcript"]
    assert "question_id" not in transcripts[0] and "blue" in words(transcripts[0]["text"])
    question = next(m for m in transcripts if m.get("question_id"))
    committed = [m for m in got if m["type"] == "input_audio_buffer.committed"]
    completed = next(m for m in got if m["type"] == "conversation.item.input_audio_transcription.completed")
    assert len(committed) == 1 and committed[0]["item_id"] == completed["item_id"]
    assert completed["item_id"] in {m["item_id"] for m in started if asked_ms[0] - 64 <= m["audio_start_ms"]}
    assert {"star", "what"} <= set(words(completed["transcript"])) and completed["transcript"] == question["text"]
    done = got[-1]["response"]
    answer = next(m for m in got if m["type"] == "answer" and m["id"] == done["question_id"])
    assert done["question_id"] == question["question_id"] and done["status"] == "completed"
    text = "".join(m["delta"] for m in got if m["type"] == "response.output_text.delta")
    assert text.strip() == answer["text"] == done["text"]
    audio = b"".join(base64.b64decode(m["delta"]) for m in got if m["type"] == "response.output_audio.delta")
    assert (len(audio) > 0) == bool(re.search(r"[a-z]", answer["text"], re.I))


def test_alerts_are_spoken_on_the_socket_unless_its_session_leaves_audio_out(server, http):
    """A watch that fires at once (fire and reset thresholds 0: one alert): a socket with the default output
    modalities gets it as a response of its own (its text as a text delta, its sentences' audio, response.done naming
    the trigger and the alert), one that set output_modalities ["text"] gets only the alert message."""
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    url = server.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime"
    try:
        with websockets_sync.connect(url) as spoken, websockets_sync.connect(url) as quiet:
            def until(ws, kind, got=None):
                got = [] if got is None else got
                while True:
                    m = strict_json(ws.recv(timeout=120))
                    got.append(m)
                    if m["type"] == kind:
                        return got
            quiet.send(json.dumps({"type": "session.update", "session": {"output_modalities": ["text"]}}))
            assert until(quiet, "session.updated")[-1]["session"]["output_modalities"] == ["text"]
            quiet.send(json.dumps({"type": "session.update", "session": {"output_modalities": ["video"]}}))
            assert "output_modalities" in until(quiet, "error")[-1]["message"]
            spoken.send(json.dumps({"type": "watch", "condition": "a red circle", "fire": 0.0, "reset": 0.0}))
            wid = until(spoken, "ack")[-1]["id"]
            got = []
            for i, image in enumerate(random_frames(8, seed=3)):  # each taken before the next (a push stream
                spoken.send(json.dumps({"type": "input_image",   # keeps only the newest frame)
                                        "image": base64.b64encode(png(image)).decode(), "t_s": i / 2}))
                until(spoken, "ack", got)
                wait_until(lambda n=i + 1: frames_taken(http, sid) >= n, what="the frame to reach the engine")
            if not any(m["type"] == "response.done" for m in got):  # the alert may come before the last ack
                got = until(spoken, "response.done", got)
            heard_quietly = until(quiet, "alert")
            quiet.send(json.dumps({"type": "question", "text": "What do you see?"}))
            heard_quietly = until(quiet, "answer", heard_quietly)  # after the alert in the quiet socket's pump
    finally:
        http.delete(f"/v1/streams/{sid}")
    alert = next(m for m in got if m["type"] == "alert")
    done = next(m for m in got if m["type"] == "response.done")["response"]
    assert done["question_id"] is None and done["trigger_id"] == wid == alert["trigger_id"]
    assert done["alert_id"] == alert["alert_id"] and done["text"] == alert["text"] and done["status"] == "completed"
    rid = done["id"]
    text = "".join(m["delta"] for m in got if m["type"] == "response.output_text.delta" and m["response_id"] == rid)
    said = " ".join(m["delta"] for m in got if m["type"] == "response.output_audio_transcript.delta"
                    and m["response_id"] == rid)
    audio = b"".join(base64.b64decode(m["delta"]) for m in got if m["type"] == "response.output_audio.delta"
                     and m["response_id"] == rid)
    assert text == alert["text"] and words(said) == words(alert["text"]) and len(audio) > 24000  # > 0.5 s of speech
    assert not [m for m in heard_quietly if m["type"].startswith("response.")]
