"""`streamvid demo`'s scriptable API, in process: a real Gradio server with the bundled model, driven by
gradio_client the way the README shows (every endpoint, ShapesWorld frames pushed one by one)."""

from __future__ import annotations

import itertools

import os
import re
import subprocess
import sys
import threading

import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError, AuthenticationError
from PIL import Image

from streamvid.assets import DEMO_VIDEOS
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.media.file_source import FileSource
from streamvid_app.manager import SessionManager
from streamvid_app.server import check_bind, launch, upload_folder
from streamvid_app.ui import build_demo

CLIP = "shapes_7"
CONFIG = EngineConfig.from_settings(frame_px=112, max_new_tokens=12)
QUESTION = "How many shapes are on screen?"


def wait_until(condition, timeout_s: float = 60.0, what: str = "condition") -> None:
    tick = threading.Event()
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        tick.wait(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture(scope="module")
def server():
    # every client here comes from 127.0.0.1, and REST clients leave their sessions open until they idle out
    manager = SessionManager.standalone(CONFIG, upload_dirs=[upload_folder()], max_sessions=8, max_sessions_per_client=8)
    demo = launch(build_demo(manager, ask_timeout_s=120.0), port=None, block=False)
    yield demo.local_url, manager
    manager.shutdown()
    demo.close()


def frames_of(clip: str, tmp_path_factory) -> list[tuple[float, str]]:
    """(t_s, png path) for every 2-fps frame of a bundled ShapesWorld clip."""
    folder = tmp_path_factory.mktemp(clip)
    out, source = [], FileSource(DEMO_VIDEOS / clip / f"{clip}.mp4", fps=2.0)
    while (frame := source.read()) is not None:
        path = folder / f"{frame.index:05d}.png"
        Image.fromarray(frame.image).save(path)
        out.append((frame.t_s, str(path)))
    return out


@pytest.fixture(scope="module")
def clip_frames(tmp_path_factory):
    return frames_of(CLIP, tmp_path_factory)


def engine_answer(adapter, clip: str, t_s: float, question: str) -> dict:
    """The engine's own answer on the same frames, without the app or threads: every frame up to t_s through the
    engine stepped on this thread, then the question answered on the window, as a live session answers it (the
    pushed frames end on a chunk boundary, so nothing is left pending)."""
    from streamvid.language.asked import Question

    sa = StreamingAssistant(CONFIG, adapter=adapter)
    try:
        source = FileSource(DEMO_VIDEOS / clip / f"{clip}.mp4", fps=2.0)
        sa.feed(itertools.takewhile(lambda f: f.t_s <= t_s, iter(source.read, None)))
        answer = sa.reasoning.answer(Question("q0", question, t_s))
    finally:
        sa.stop()
    return answer.to_json()


def push_until(client: Client, frames, until_s: float) -> float:
    """Push frames with t <= until_s one by one, each once the engine has taken the previous one; return once the
    last chunk is in the window."""
    pushed, last = 0, 0.0
    for t_s, path in frames:
        if t_s > until_s:
            break
        client.predict(handle_file(path), t_s, api_name="/push_frame")
        pushed, last = pushed + 1, t_s
        wait_until(lambda n=pushed: frames_taken(client) >= n, what=f"frame {pushed} to reach the engine")
    assert pushed % CONFIG.frames_per_chunk == 0, "push whole chunks: a partial one would wait for its next frame"
    wait_until(lambda: client.predict(api_name="/status")["blocks_encoded"] == pushed // CONFIG.frames_per_chunk,
               what="the last chunk in the window")
    return last


def frames_taken(client: Client) -> int:
    st = client.predict(api_name="/status")
    return st["frames_in"] + st["frames_dropped"]


def test_push_a_clip_frame_by_frame_and_ask_the_count(server, clip_frames):
    """The answer through the app is a count, at the stream time of the last frame pushed, and exactly the answer the
    engine gives on the same frames replayed offline (whether the count is right is the bundled model's business:
    tests/test_bundled_model.py)."""
    url, manager = server
    client = Client(url, verbose=False)
    started = client.predict("push", None, api_name="/start")
    assert started["type"] == "status" and started["event"] == "started"
    t_last = push_until(client, clip_frames, 25.5)
    answer = client.predict(QUESTION, api_name="/ask")
    assert answer["type"] == "answer" and answer["question"] == QUESTION
    assert answer["t_s"] == t_last == 25.5
    assert re.fullmatch(r"\d+", answer["text"]), answer
    expected = engine_answer(manager.adapter, CLIP, t_last, QUESTION)
    assert {k: answer[k] for k in ("text", "t_s", "evidence_t_s", "retrieved_blocks")} == \
        {k: expected[k] for k in ("text", "t_s", "evidence_t_s", "retrieved_blocks")}
    polled = client.predict(0, api_name="/poll")
    assert [o["type"] for o in polled["outputs"]] == ["status", "answer"]
    assert polled["outputs"][1] == answer
    assert client.predict(polled["cursor"], api_name="/poll") == {"cursor": polled["cursor"], "outputs": []}
    stats = client.predict(api_name="/status")
    assert stats["type"] == "stats" and stats["frames_in"] == 52 and stats["frames_dropped"] == 0
    assert stats["running"] and stats["t_s"] == 25.5 and stats["questions_answered"] == 1
    final = client.predict(api_name="/stop")
    assert final["type"] == "stats" and final["running"] is False and final["frames_in"] == 52


def test_watch_a_condition_and_poll_its_alert(server, clip_frames):
    url, _ = server
    client = Client(url, verbose=False)
    client.predict("push", None, api_name="/start")
    # a low firing threshold: this checks the path from /watch to an alert in /poll (the clip's orange circle is
    # on screen from 0.5 s to 14.5 s)
    tid = client.predict("an orange circle", 0.05, 0.0, api_name="/watch")["trigger_id"]
    alerts = []
    for t_s, path in clip_frames[:40]:
        client.predict(handle_file(path), t_s, api_name="/push_frame")
        alerts = [o for o in client.predict(0, api_name="/poll")["outputs"] if o["type"] == "alert"]
        if alerts:
            break
    assert alerts, "no alert in 20 s of stream"
    alert = alerts[0]
    assert set(alert) >= {"trigger_id", "condition", "t_s", "score", "evidence_t_s", "text"}
    assert alert["trigger_id"] == tid and "orange" in alert["condition"] and alert["score"] >= 0.05
    assert 0.0 <= alert["t_s"] <= 20.0
    assert client.predict(tid, api_name="/unwatch") == {"type": "status", "event": "unwatched", "trigger_id": tid}
    assert client.predict(tid, api_name="/unwatch")["event"] == "unknown_trigger"
    client.predict(api_name="/stop")


def test_two_clients_get_independent_sessions(server, clip_frames, tmp_path_factory):
    url, manager = server
    other = frames_of("shapes_8", tmp_path_factory)
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    answers, errors = {}, []

    def run(client, frames, until_s, name):
        try:
            client.predict("push", None, api_name="/start")
            push_until(client, frames, until_s)
            answers[name] = (client.predict(QUESTION, api_name="/ask"),
                             client.predict(0, api_name="/poll"), client.predict(api_name="/status"))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(a, clip_frames, 25.5, "a")),
               threading.Thread(target=run, args=(b, other, 9.5, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    (ans_a, poll_a, st_a), (ans_b, poll_b, st_b) = answers["a"], answers["b"]
    assert ans_a["t_s"] == 25.5 and ans_b["t_s"] == 9.5
    assert max(e[1] for e in ans_b["evidence_t_s"]) <= 10.0  # b's answer saw none of a's 25 s
    for got, clip, t_s in ((ans_a, CLIP, 25.5), (ans_b, "shapes_8", 9.5)):  # each as if it were alone
        expected = engine_answer(manager.adapter, clip, t_s, QUESTION)
        assert (got["text"], got["evidence_t_s"]) == (expected["text"], expected["evidence_t_s"]), clip
    assert [o for o in poll_a["outputs"] if o["type"] == "answer"] == [ans_a]
    assert [o for o in poll_b["outputs"] if o["type"] == "answer"] == [ans_b]
    assert st_a["frames_in"] == 52 and st_b["frames_in"] == 20
    assert len(manager) >= 2
    for c in (a, b):
        c.predict(api_name="/stop")


def test_inputs_outside_the_allowed_places_are_refused_and_the_session_lives_on(server, tmp_path):
    url, _ = server
    client = Client(url, verbose=False)
    with pytest.raises(AppError, match="no stream is running"):
        client.predict("Anything?", api_name="/ask")
    with pytest.raises(AppError, match='is not "push", a demo clip'):
        client.predict("/etc/passwd", None, api_name="/start")
    with pytest.raises(AppError, match="scheme 'file' is not allowed"):
        client.predict("file:///etc/passwd", None, api_name="/start")
    with pytest.raises(AppError, match='is not "push", a demo clip'):
        client.predict(str(DEMO_VIDEOS / ".." / "README.md"), None, api_name="/start")
    text = tmp_path / "notes.mp4"
    text.write_text("not a video")
    with pytest.raises(AppError, match="not a video file"):  # uploaded, but not a playable container
        client.predict("", handle_file(str(text)), api_name="/start")
    started = client.predict("", handle_file(str(DEMO_VIDEOS / "shapes_8" / "shapes_8.mp4")), api_name="/start")
    assert started["source"] == "shapes_8.mp4"
    wait_until(lambda: client.predict(api_name="/status")["frames_in"] > 0, what="the upload to play")
    assert client.predict("shapes_8", None, api_name="/start")["source"] == "shapes_8"
    client.predict(api_name="/stop")


def test_auth_is_required_when_set(server):
    _, manager = server
    demo = launch(build_demo(manager), port=None, auth=("viewer", "s3cret"), block=False)
    try:
        with pytest.raises(AuthenticationError, match="credentials were not provided"):
            Client(demo.local_url, verbose=False).predict(api_name="/status")
        client = Client(demo.local_url, auth=("viewer", "s3cret"), verbose=False)
        assert client.predict(api_name="/status")["running"] is False
    finally:
        demo.close()


def test_binding_beyond_loopback_needs_auth():
    assert check_bind("127.0.0.1", None) is None and check_bind("::1", None) is None
    assert check_bind("0.0.0.0", "u:a-long-password") == ("u", "a-long-password")
    for host in ("0.0.0.0", "192.168.1.5", "example.org"):
        with pytest.raises(ValueError, match=f"refusing to listen on {host} without --auth"):
            check_bind(host, None)
    with pytest.raises(ValueError, match="USER:PASS"):
        check_bind("127.0.0.1", "nopassword")
    p = subprocess.run([sys.executable, "-m", "streamvid.cli", "demo", "--host", "0.0.0.0"], check=False,
                       capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "STREAMVID_AUTH"})
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "refusing to listen on 0.0.0.0 without --auth" in p.stderr


def test_every_endpoint_answers_with_only_its_required_arguments(server, tmp_path):
    """What the docs call optional is optional for gradio_client: /start(source), /push_frame(image), ..."""
    url, _ = server
    client = Client(url, verbose=False)
    frame = tmp_path / "frame.png"
    Image.new("RGB", (112, 112), (200, 30, 30)).save(frame)
    assert client.predict("push", api_name="/start")["source"] == "pushed frames"
    pushed = client.predict(handle_file(str(frame)), api_name="/push_frame")
    assert pushed["type"] == "status" and pushed["event"] == "frame", pushed
    trigger_id = client.predict("a red square", api_name="/watch")["trigger_id"]
    assert client.predict(trigger_id, api_name="/unwatch")["event"] == "unwatched"
    assert set(client.predict(0, api_name="/poll")) == {"cursor", "outputs"}
    assert client.predict(api_name="/status")["source"] == "pushed frames"
    assert client.predict(api_name="/stop")["type"] == "stats"
    required = {name: [p["parameter_name"] for p in info["parameters"] if not p["parameter_has_default"]]
                for name, info in client.view_api(print_info=False, return_format="dict")["named_endpoints"].items()}
    assert required["/start"] == ["source"] and required["/push_frame"] == ["image"], required
    assert required["/watch"] == ["condition"], required
