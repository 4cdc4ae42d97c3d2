"""Sound pushed to a live stream against its video's clock: placed where the video is (also in a resumed session,
whose offset applies once), heard and laid into the stream without waiting for another frame (frames that stopped,
or came ahead of real time), and its spoken questions answered.

The engine tests use a recogniser double (words given by the test) and a loudness detector, so the times expected
are the test's own: where it put the loud samples. The socket test is end to end: espeak-ng's speech over
`WS /v1/streams/{id}/realtime` with server VAD after frames pushed ahead of real time, heard by Whisper."""

from __future__ import annotations

import base64
import json
import queue

import numpy as np
import pytest
from conftest import random_frames, wait_until
from serve_helpers import spoken

from streamvid.assistant.hearing import Hearing
from streamvid.audio.pcm import RATE
from streamvid.audio.vad import WINDOW, Segmenter
from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.types import Frame


class _Words:
    """A recogniser double: the given texts, one per utterance, in order."""

    name = "words"

    def __init__(self, *texts: str):
        self.texts = list(texts)

    def transcribe(self, samples, hint=None):
        return self.texts.pop(0) if self.texts else ""


def _loudness(v: np.ndarray) -> np.ndarray:
    return np.array([float(np.abs(v[i:i + WINDOW]).mean() > 0.1) for i in range(0, len(v) - WINDOW + 1, WINDOW)])


def _talk(*loud_s: tuple[float, float], length_s: float) -> np.ndarray:
    """`length_s` of silence with noise (loud to the loudness detector) over each (start, end), in seconds."""
    rng = np.random.default_rng(0)
    x = np.zeros(int(length_s * RATE), np.float32)
    for a, b in loud_s:
        x[int(a * RATE):int(b * RATE)] = 0.5 * rng.standard_normal(int(b * RATE) - int(a * RATE))
    return x


def _outputs(stream, until, timeout_s: float = 60.0) -> list:
    got = []

    def more():
        while True:
            try:
                got.append(stream.outputs.get_nowait())
            except queue.Empty:
                return until(got)
    assert wait_until(more, timeout_s), [(o.kind, getattr(o, "t_s", None)) for o in got]
    return got


@pytest.fixture
def live(adapter):
    engine = Engine(EngineConfig.from_settings(device="cpu", frame_px=56), adapter)
    stream = engine.open()
    hearing = Hearing(stream, _Words("hello there", "assistant, what is on screen?"), voice_events=True)
    hearing.listener.segmenter = Segmenter(probabilities=_loudness, pad_s=0.0)
    engine.start()
    yield engine, stream, hearing
    hearing.close()
    engine.close()


def test_speech_after_the_frames_stopped_is_heard_and_answered_without_another_frame(live):
    _, stream, hearing = live
    for i, image in enumerate(random_frames(3, seed=1, px=56)):  # one chunk of two frames, and one frame of the next
        assert stream.insert(Frame(image, i / 2.0, i), timeout_s=30)
    assert wait_until(lambda: stream.ingest.blocks_encoded == 1 and stream.ingest.frames_in == 3)
    # no t_s: the sound starts where the video is (its newest frame, 1.0 s); speech 1.5-2.5 s and 3.5-4.5 s
    assert hearing.push(_talk((0.5, 1.5), (2.5, 3.5), length_s=5.0)) == 1.0
    got = _outputs(stream, lambda got: any(o.kind == "answer" for o in got))
    transcripts = [o for o in got if o.kind == "transcript"]
    assert [(o.text, o.question_id is not None) for o in transcripts] == [
        ("hello there", False), ("assistant, what is on screen?", True)]
    assert transcripts[0].t_s == pytest.approx(1.5, abs=0.05) and transcripts[0].t_end_s == pytest.approx(2.5, abs=0.05)
    answer = next(o for o in got if o.kind == "answer")
    assert answer.id == transcripts[1].question_id and answer.question.lower() == "what is on screen?"
    assert answer.t_s == transcripts[1].t_end_s == pytest.approx(4.5, abs=0.05)
    assert stream.ingest.speech_blocks == 1 and stream.ingest.frames_in == 3  # heard with no frame after it


def test_a_resumed_sessions_sound_is_moved_by_its_offset_once(live):
    _, stream, hearing = live
    stream.ingest.resume_at(60.0, 0)  # what a resumed session does (session_state.restore): input time 0 is 60 s
    # on the stream's one clock, which the answers' input_t_s reads too
    for i, image in enumerate(random_frames(2, seed=2, px=56)):
        assert stream.insert(Frame(image, i / 2.0, i), timeout_s=30)
    assert wait_until(lambda: stream.ingest.blocks_encoded == 1)
    assert hearing.video_t_s() == 0.5  # its newest frame, in input time
    assert hearing.push(_talk((0.5, 1.5), (2.5, 3.5), length_s=5.0)) == 0.5
    got = _outputs(stream, lambda got: any(o.kind == "answer" for o in got))
    transcripts = [o for o in got if o.kind == "transcript"]
    assert transcripts[0].t_s == pytest.approx(61.0, abs=0.05)  # 60 s of the session before + 0.5 + 0.5
    edges = [(o.event, o.t_s) for o in got if o.kind == "voice_activity"]  # the detector's edges, on the same clock
    assert [e for e, _ in edges] == ["speech_started", "speech_stopped"] * 2
    assert [t for _, t in edges] == pytest.approx([61.0, 62.0, 63.0, 64.0], abs=0.05)
    answer = next(o for o in got if o.kind == "answer")
    assert answer.t_s == pytest.approx(63.5 + 0.5, abs=0.05) and answer.input_t_s == pytest.approx(4.0, abs=0.05)


def test_untimed_sound_flows_on_and_after_a_pause_resumes_where_the_video_is(live):
    import time

    from streamvid.assistant.hearing import PAUSE_S

    _, stream, hearing = live
    frames = random_frames(9, seed=3, px=56)
    for i in range(2):
        assert stream.insert(Frame(frames[i], i / 2.0, i), timeout_s=30)
    assert wait_until(lambda: stream.ingest.frames_in == 2)
    quiet = np.zeros(RATE // 2, np.float32)
    assert hearing.push(quiet) == 0.5  # the first: where the video is
    assert hearing.push(quiet) == 1.0  # flowing: where the last ended
    for i in range(2, 9):  # the video goes on to 4 s while the sound is paused
        assert stream.insert(Frame(frames[i], i / 2.0, i), timeout_s=30)
    assert wait_until(lambda: stream.ingest.frames_in == 9)
    time.sleep(len(quiet) / RATE + PAUSE_S + 0.2)  # longer than the sound pushed, and the pause
    assert hearing.push(quiet) == 4.0  # after the pause: where the video is, not 1.5
    assert hearing.push(quiet) == 4.5
    with pytest.raises(ValueError, match="goes back in time"):  # a time the client gives is still its own
        hearing.push(quiet, t_s=4.9)


# ---- end to end: the realtime socket, frames ahead of real time, then speech -----------------------------------
websockets_sync = pytest.importorskip("websockets.sync.client")


def test_a_question_spoken_after_frames_ahead_of_real_time_is_answered_on_the_socket(adapter, tiny_model_dir,
                                                                                       tmp_path):
    import httpx
    from serve_helpers import push_frames, running, strict_json

    from streamvid.serve import ServeOptions, build_app

    config = EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=4, window_s=2.0, device="cpu")
    engine = Engine(config, adapter)
    asked = spoken(tmp_path, "assistant, what colour is the star", 24000)
    try:
        with running(build_app(engine, ServeOptions(max_new_tokens=4))) as url, \
                httpx.Client(base_url=url, timeout=60.0) as http:
            sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
            # frames for 0-9 s with their own times, sent as fast as the engine takes them (about a second): the
            # video is ahead of the wall clock, and its last chunk (the frame at 9 s) is never completed
            last = push_frames(http, sid, random_frames(19, seed=4, px=56))
            assert last == 9.0
            with websockets_sync.connect(url.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime") as ws:
                raw = asked.tobytes()
                for i in range(0, len(raw), 9600):  # 0.2 s a message, no t_s, as a microphone sends
                    ws.send(json.dumps({"type": "input_audio_buffer.append",
                                        "audio": base64.b64encode(raw[i:i + 9600]).decode()}))
                got = []
                while not got or got[-1]["type"] != "response.done":
                    got.append(strict_json(ws.recv(timeout=120)))
                    assert got[-1]["type"] != "error", got[-1]
            http.delete(f"/v1/streams/{sid}")
    finally:
        engine.close()
    question = next(m for m in got if m["type"] == "transcript" and m.get("question_id"))
    assert {"star", "what"} <= set(question["text"].lower().replace(",", " ").replace("?", " ").split())
    assert 9.0 <= question["t_s"] < question["t_end_s"]  # placed where the video is, not at the wall clock's 0
    answer = next(m for m in got if m["type"] == "answer" and m["id"] == question["question_id"])
    assert got[-1]["response"]["question_id"] == answer["id"] and got[-1]["response"]["status"] == "completed"
