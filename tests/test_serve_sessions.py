"""`streamvid serve` in one process: streams saved in a session_dir and resumed after a restart with their memory
and dialogue, the folder policy's errors, and idle streams closed by the server (a hand-driven clock, and one short
real-time run). Real clients: httpx, the `openai` package, `websockets`. The tiny random checkpoint."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest
from conftest import random_frames
from serve_helpers import allow_dir, config, engine, png, push_frames, running, wait_until  # noqa: F401 - fixtures

from streamvid.assistant import session_store
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.serve import ServeOptions, build_app
from streamvid.types import Frame

openai = pytest.importorskip("openai")
from websockets.sync.client import connect

MODEL_ID = "tiny-qwen"
MEMORY_Q = "What was on screen at 00:01?"  # answered from long-term memory: the window holds the last 2 s only
NOW_Q = "What do you see?"  # answered from the window


def options(allow_dir, **changes) -> ServeOptions:
    return ServeOptions(model_id=MODEL_ID, max_new_tokens=8, answer_timeout_s=60.0, heartbeat_s=1.0,
                        allow_dirs=(str(allow_dir),), **changes)


def chat(base: str, sid: str, messages: list[dict]):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60.0)
    reply = client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": sid}, messages=messages)
    return reply.choices[0].message.content, reply.model_extra["streamvid"]


def ask(base: str, sid: str, question: str):
    return chat(base, sid, [{"role": "user", "content": question}])


def uninterrupted(config, adapter, images, question: str, t_s: float) -> dict:
    """The answer of a stream that saw the same frames and was never saved or resumed, asked at `t_s`."""
    sa = StreamingAssistant(config, adapter=adapter)
    try:
        sa.feed([Frame(image, i / 2.0, i) for i, image in enumerate(images)])
        qid = sa.ask(question, t_s=t_s)
        sa.engine.run_until_idle()
        return next(o for o in sa.outputs(timeout_s=0.0) if o.kind == "answer" and o.id == qid).to_json()
    finally:
        sa.stop()


# ---- sessions ---------------------------------------------------------------------------------------------------
def test_a_stream_resumed_after_a_restart_answers_from_its_memory_and_dialogue(engine, config, adapter, allow_dir):
    folder = allow_dir / "cam1"
    images = random_frames(8, seed=21)
    with running(build_app(engine, options(allow_dir, session_save_s=None))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:
        r = http.post("/v1/streams", json={"source": "push", "session_dir": str(folder)})
        assert r.status_code == 201, r.text
        info = r.json()
        assert info["session_dir"] == str(folder.resolve()) and info["resumed"] is False
        sid = info["id"]
        push_frames(http, sid, images)
        before = http.get(f"/v1/streams/{sid}").json()
        assert before["blocks_in_memory"] >= 2 and before["t_s"] == 3.5
        first, extra = ask(base, sid, MEMORY_Q)
        assert extra["retrieved_blocks"], "the question is answered from long-term memory"
        final = http.delete(f"/v1/streams/{sid}").json()
        assert final["session"]["saves"] == 1 and final["session"]["error"] is None  # saved when it closed
        saved_t_s = final["session"]["saved_t_s"]
    assert session_store.read_meta(folder)["dialogue"] == [[MEMORY_Q, first]]

    with running(build_app(engine, options(allow_dir, session_save_s=None))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:  # a new server on the engine: nothing in memory
        r = http.post("/v1/streams", json={"session_dir": str(folder), "resume": True})  # source: "push"
        assert r.status_code == 201, r.text
        resumed = r.json()
        assert resumed["resumed"] is True and resumed["source"] == "push" and resumed["id"] != sid
        rid = resumed["id"]
        status = http.get(f"/v1/streams/{rid}").json()
        assert status["t_s"] == saved_t_s  # the stream clock goes on from the save
        assert (status["blocks_in_memory"], status["blocks_in_window"]) == \
               (before["blocks_in_memory"], before["blocks_in_window"])
        # memory: the same answer as a stream that was never interrupted, asked at the same time
        again, extra_again = ask(base, rid, MEMORY_Q)
        expected = uninterrupted(config, adapter, images, MEMORY_Q, saved_t_s)
        assert (again, extra_again["t_s"]) == (expected["text"], expected["t_s"])
        assert extra_again["retrieved_blocks"] == expected["retrieved_blocks"] == extra["retrieved_blocks"]
        assert extra_again["evidence_t_s"] == expected["evidence_t_s"]
        # frames pushed to the resumed stream go on from its clock
        http.post(f"/v1/streams/{rid}/frames", params={"t_s": 0.0}, content=png(images[0]),
                  headers={"Content-Type": "image/png"})
        wait_until(lambda: http.get(f"/v1/streams/{rid}").json()["frames_in"] == 1, what="the frame")
        assert http.get(f"/v1/streams/{rid}").json()["t_s"] == saved_t_s
        http.delete(f"/v1/streams/{rid}")
    # the dialogue went on from the saved one: its next save starts with the turn from before the restart
    assert session_store.read_meta(folder)["dialogue"] == [[MEMORY_Q, first], [MEMORY_Q, again]]


def test_a_stream_is_saved_periodically_and_its_folder_is_held(engine, allow_dir):
    folder = allow_dir / "cam2"
    with running(build_app(engine, options(allow_dir, session_save_s=0.2))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:
        sid = http.post("/v1/streams", json={"source": "push", "session_dir": str(folder)}).json()["id"]
        push_frames(http, sid, random_frames(4, seed=5))
        t_s = http.get(f"/v1/streams/{sid}").json()["t_s"]
        wait_until(lambda: (http.get(f"/v1/streams/{sid}").json()["session"]["saved_t_s"] or 0) > t_s,
                   what="a periodic save after the last frame")
        assert session_store.has_session(folder)  # on disk while the stream runs: a crash loses little
        held = http.post("/v1/streams", json={"session_dir": str(folder), "resume": True})
        assert held.status_code == 409 and "in use" in held.json()["error"]["message"]
        http.delete(f"/v1/streams/{sid}")
        resumed = http.post("/v1/streams", json={"session_dir": str(folder), "resume": True})
        assert resumed.status_code == 201, resumed.text
        http.delete(f"/v1/streams/{resumed.json()['id']}")


def test_session_dir_errors_are_one_line(engine, allow_dir, tmp_path):
    (allow_dir / "a-file").write_text("x")
    damaged = allow_dir / "damaged"
    damaged.mkdir()
    (damaged / "session.json").write_text("{not json")
    with running(build_app(engine, options(allow_dir))) as base, httpx.Client(base_url=base, timeout=60.0) as http:
        def error(body: dict, status: int, words: str):
            r = http.post("/v1/streams", json=body)
            assert r.status_code == status, (body, r.text)
            message = r.json()["error"]["message"]
            assert words in message and "\n" not in message, message

        error({"source": "push", "session_dir": str(tmp_path / "elsewhere")}, 403, "not inside a folder")
        error({"source": "push", "session_dir": str(allow_dir / ".." / "escape")}, 403, "not inside a folder")
        error({"source": "push", "session_dir": str(allow_dir)}, 403, "not inside a folder")  # a folder of its own
        error({"source": "push", "session_dir": "relative/cam"}, 400, "absolute")
        error({"source": "push", "session_dir": str(allow_dir / "a-file")}, 400, "not a folder")
        error({"source": "push", "session_dir": 7}, 422, "session_dir")
        error({"session_dir": str(allow_dir / "none"), "resume": True}, 404, "no saved session")
        error({"source": "push", "resume": True}, 400, "session_dir")
        error({"fps": 2.0}, 422, "source")
        error({"session_dir": str(damaged), "resume": True}, 400, "damaged")
        assert not (allow_dir / "none").exists()  # a refused resume leaves nothing behind
        sid = http.post("/v1/streams", json={"source": "push", "session_dir": str(allow_dir / "c")}).json()["id"]
        error({"source": "push", "session_dir": str(allow_dir / "c")}, 409, "in use")
        http.delete(f"/v1/streams/{sid}")
        error({"source": "push", "session_dir": str(allow_dir / "c")}, 409, '"resume": true')
    with running(build_app(engine, ServeOptions(model_id=MODEL_ID))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:
        r = http.post("/v1/streams", json={"source": "push", "session_dir": str(allow_dir / "d")})
        assert r.status_code == 403 and "--allow-dir" in r.json()["error"]["message"]


# ---- idle streams -----------------------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_idle_streams_are_closed_and_active_ones_are_not(engine, allow_dir, caplog):
    app = build_app(engine, options(allow_dir, stream_idle_timeout_s=60.0, session_save_s=None))
    clock = app.state.hub.clock = Clock()
    with running(app) as base, httpx.Client(base_url=base, timeout=60.0) as http:
        def open_(**body) -> str:
            return http.post("/v1/streams", json={"source": "push", **body}).json()["id"]

        idle, pushed, asked, read, watched, socket = (open_() for _ in range(6))
        saved = open_(session_dir=str(allow_dir / "idle-cam"))
        push_frames(http, saved, random_frames(2, seed=1))
        lines, opened = [], threading.Event()

        def listen():  # an open event stream keeps its stream alive
            with httpx.Client(base_url=base, timeout=60.0) as c, c.stream("GET", f"/v1/streams/{watched}/events") as r:
                for line in r.iter_lines():
                    lines.append(line)
                    opened.set()
                    if len(lines) > 3 and not line:
                        return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        assert opened.wait(30)
        ws = connect(base.replace("http://", "ws://") + f"/v1/streams/{socket}/realtime")  # so does a socket
        clock.now += 50
        http.post(f"/v1/streams/{pushed}/frames", content=png(random_frames(1)[0]),
                  headers={"Content-Type": "image/png"})
        ask(base, asked, NOW_Q)
        http.get(f"/v1/streams/{read}")
        clock.now += 20  # 70 s since the others were last used; 20 s since these three
        with caplog.at_level(logging.WARNING, logger="streamvid.hub.hub"):
            app.state.hub.reap_idle()
        alive = {s["id"] for s in http.get("/v1/streams").json()["data"]}
        assert alive == {pushed, asked, read, watched, socket}
        for sid in (idle, saved):
            assert http.get(f"/v1/streams/{sid}").status_code == 404
            logged = [r.getMessage() for r in caplog.records if sid in r.getMessage()]
            assert logged and "after 70 s without frames, questions or reads" in logged[0]
            assert '"reason": "idle"' in logged[0] and '"deleted": true' in logged[0]  # the final stats
        assert session_store.has_session(allow_dir / "idle-cam")  # saved before it was closed
        assert session_store.read_meta(allow_dir / "idle-cam")["stream_t_s"] == 1.0
        ws.close()
        wait_until(lambda: len(app.state.hub.get(socket).subscribers) == 0, what="the socket's subscription to end")
        clock.now += 61
        app.state.hub.reap_idle()
        assert {s["id"] for s in http.get("/v1/streams").json()["data"]} == {watched}


def test_the_server_closes_idle_streams_by_itself(engine, allow_dir):
    with running(build_app(engine, options(allow_dir, stream_idle_timeout_s=1.0))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:
        idle = http.post("/v1/streams", json={"source": "push"}).json()["id"]
        busy = http.post("/v1/streams", json={"source": "push"}).json()["id"]

        def listed() -> set[str]:  # (listing the streams is not a request about any of them)
            return {s["id"] for s in http.get("/v1/streams").json()["data"]}

        deadline = time.monotonic() + 30
        while idle in listed():
            assert time.monotonic() < deadline, "the idle stream was not closed"
            assert http.get(f"/v1/streams/{busy}").status_code == 200  # a read every 0.1 s keeps it open
            time.sleep(0.1)
        assert busy in listed()
    hub = build_app(engine, options(allow_dir, stream_idle_timeout_s=0)).state.hub  # 0: never
    try:
        hub.open("push")
        assert hub.reap_idle(now=hub.clock() + 1e9) == [] and len(hub) == 1
    finally:
        hub.shutdown()
