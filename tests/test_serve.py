"""`streamvid serve` in process: the FastAPI app on uvicorn (a thread, 127.0.0.1, a free port) over a prebuilt Engine,
driven by the clients people use: the `openai` package, `websockets`, `httpx` (and curl, for the docs). The tiny random
checkpoint for the plumbing; the bundled model with a ShapesWorld clip's frames for answers compared with the
engine's own on the same frames. No wall-clock thresholds: waits are bounded polling."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from PIL import Image

from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.media.file_source import FileSource
from streamvid.serve import ServeOptions, build_app
from streamvid.serve.web import event_name
from conftest import random_frames
from serve_helpers import frames_taken, engine_answer, png, push_frames, running, strict_json, wait_until

openai = pytest.importorskip("openai")
websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import InvalidStatus  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KEY = "s3cret-test-key"
MODEL_ID = "tiny-qwen"


# ---- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def receiver():
    """A tiny webhook receiver (FastAPI on uvicorn): fails the first POST with 500, then records every alert."""
    hook = FastAPI()
    got: dict = {"attempts": 0, "alerts": []}

    @hook.post("/hook")
    async def receive(request: Request):
        got["attempts"] += 1
        if got["attempts"] == 1:
            return JSONResponse({"error": "try again"}, status_code=500)
        got["alerts"].append(await request.json())
        return {"ok": True}

    with running(hook) as url:
        yield f"{url}/hook", got


@pytest.fixture(scope="module")
def tiny_config(tiny_model_dir) -> EngineConfig:
    return EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=8)


@pytest.fixture(scope="module")
def engine(tiny_config, adapter):
    engine = Engine(tiny_config, adapter)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def allow_dir(tmp_path_factory) -> Path:
    from streamvid.assets import demo_clip

    folder = tmp_path_factory.mktemp("videos")
    (folder / "clip.mp4").write_bytes(demo_clip("shapes_8").read_bytes())
    (folder / "notes.txt").write_text("not a video")
    return folder


@pytest.fixture(scope="module")
def server(engine, receiver, allow_dir):
    """The app over the tiny engine: no key, alerts to the receiver, small limits to test them."""
    options = ServeOptions(model_id=MODEL_ID, max_new_tokens=8, webhook_urls=(receiver[0],),
                           allow_dirs=(str(allow_dir),), max_frame_pixels=256 * 256, max_body_mb=1.0,
                           answer_timeout_s=60.0, heartbeat_s=1.0)
    app = build_app(engine, options)
    with running(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def keyed(engine):
    """A second app on the same engine, with an API key."""
    app = build_app(engine, ServeOptions(api_key=KEY, model_id=MODEL_ID, max_new_tokens=8))
    with running(app) as url:
        yield url


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server[0], timeout=60.0) as client:
        yield client


@pytest.fixture
def stream(http):
    sid = http.post("/v1/streams", json={"source": "push", "fps": 2.0}).json()["id"]
    yield sid
    http.delete(f"/v1/streams/{sid}")


def oai(base: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60.0)


# ---- streams ----------------------------------------------------------------------------------------------------
def test_models_and_a_stream_from_open_to_delete(http):
    models = http.get("/v1/models").json()
    assert models["object"] == "list" and len(models["data"]) == 1
    assert models["data"][0]["id"] == MODEL_ID and models["data"][0]["object"] == "model"
    assert models["data"][0]["owned_by"] == "streamvid" and isinstance(models["data"][0]["created"], int)

    r = http.post("/v1/streams", json={"source": "push", "fps": 2.0})
    assert r.status_code == 201
    info = r.json()
    assert info["object"] == "stream" and info["source"] == "push" and isinstance(info["created"], int)
    sid = info["id"]
    assert sid in [s["id"] for s in http.get("/v1/streams").json()["data"]]
    assert http.post(f"/v1/streams/{sid}/frames", content=png(random_frames(1)[0]),
                     headers={"Content-Type": "image/png"}).json()["t_s"] == 0.0  # the first frame, no t_s: 0
    push_frames(http, sid, random_frames(3, seed=1), t0_s=0.5)
    status = strict_json(http.get(f"/v1/streams/{sid}").text)
    assert status["frames_in"] == 4 and status["frames_dropped"] == 0 and status["t_s"] == 1.5
    assert status["blocks_in_window"] == 2 and status["window_tokens"] > 0 and "blocks_in_memory" in status
    assert status["running"] is True and status["error"] is None
    final = http.delete(f"/v1/streams/{sid}").json()
    assert final["deleted"] is True and final["running"] is False and final["frames_in"] == 4
    assert http.get(f"/v1/streams/{sid}").status_code == 404
    assert sid not in [s["id"] for s in http.get("/v1/streams").json()["data"]]


def test_a_jpeg_frame_is_taken(http, stream):
    buf = io.BytesIO()
    Image.fromarray(random_frames(1)[0]).save(buf, "JPEG")
    r = http.post(f"/v1/streams/{stream}/frames", params={"t_s": 0.0}, content=buf.getvalue(),
                  headers={"Content-Type": "image/jpeg"})
    assert r.status_code == 200 and set(r.json()) == {"frames_in", "frames_dropped", "t_s"}
    wait_until(lambda: frames_taken(http, stream) == 1, what="the jpeg to reach the engine")


def test_clips_and_allowed_files_open_and_other_sources_are_refused(http, allow_dir):
    clip = http.post("/v1/streams", json={"source": "shapes_7"})
    assert clip.status_code == 201 and clip.json()["source"] == "shapes_7"
    sid = clip.json()["id"]
    wait_until(lambda: http.get(f"/v1/streams/{sid}").json()["frames_in"] > 0, what="the clip to play")
    r = http.post(f"/v1/streams/{sid}/frames", content=png(random_frames(1)[0]), headers={"Content-Type": "image/png"})
    assert r.status_code == 409 and "push" in r.json()["error"]["message"]
    http.delete(f"/v1/streams/{sid}")
    allowed = http.post("/v1/streams", json={"source": str(allow_dir / "clip.mp4")})
    assert allowed.status_code == 201 and allowed.json()["source"] == "clip.mp4"
    http.delete(f"/v1/streams/{allowed.json()['id']}")
    for source, words in (("/etc/passwd", "not \"push\""), (str(ROOT / "README.md"), "not \"push\""),
                          ("file:///etc/passwd", "scheme 'file'"), ("http://127.0.0.1:9/cam", "loopback"),
                          (str(allow_dir / "notes.txt"), "expected a video file"), ("", "must be")):
        r = http.post("/v1/streams", json={"source": source})
        assert r.status_code == 400, (source, r.text)
        assert words in r.json()["error"]["message"] and "\n" not in r.json()["error"]["message"]


# ---- chat completions -------------------------------------------------------------------------------------------
def test_openai_client_plain_and_streamed_answer_like_the_engine(server, http, stream, tiny_config, adapter):
    images = random_frames(6, seed=3)
    t_last = push_frames(http, stream, images)
    client = oai(server[0])
    reply = client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": stream},
                                           messages=[{"role": "user", "content": "What do you see?"}])
    assert reply.object == "chat.completion" and reply.model == MODEL_ID and reply.id.startswith("chatcmpl-")
    assert reply.choices[0].message.role == "assistant" and reply.choices[0].finish_reason in ("stop", "length")
    extra = reply.model_extra["streamvid"]
    assert extra["stream_id"] == stream and extra["t_s"] == t_last
    assert extra["evidence_t_s"] == [[0.0, 3.0]] and extra["ttft_ms"] >= 0 and "retrieved_blocks" in extra
    assert reply.usage.completion_tokens > 0
    expected = engine_answer(tiny_config, adapter, images, "What do you see?")
    assert reply.choices[0].message.content == expected["text"]
    assert (extra["t_s"], extra["evidence_t_s"]) == (expected["t_s"], expected["evidence_t_s"])

    chunks = list(client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": stream}, stream=True,
                                                 messages=[{"role": "user", "content": "What do you see?"}]))
    assert all(c.object == "chat.completion.chunk" for c in chunks) and len(chunks) >= 3
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == expected["text"]  # no dialogue in the request: answered as the first question was
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].model_extra["streamvid"]["evidence_t_s"] == [[0.0, 3.0]]

    # earlier messages are the dialogue the question is answered with
    history = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "What do you see?"},
               {"role": "assistant", "content": "shapes"}, {"role": "user", "content": "And now?"}]
    with_history = client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": stream}, messages=history)
    expected = engine_answer(tiny_config, adapter, images, "And now?", dialogue=[("What do you see?", "shapes")])
    assert with_history.choices[0].message.content == expected["text"]


def raw_chat(client: httpx.Client, sid: str, question: str, model: str = MODEL_ID) -> tuple[str, dict]:
    """The raw bytes of a streamed chat completion (as text) and the plain reply's JSON, asked in one request each."""
    body = {"model": model, "stream_id": sid, "messages": [{"role": "user", "content": question}]}
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(r.iter_bytes()).decode()
    plain = client.post("/v1/chat/completions", json=body)
    assert plain.status_code == 200, plain.text
    return raw, plain.json()


def check_sse(raw: str, text: str, finish: str) -> None:
    """Server-sent events as an OpenAI client reads them: `data: ` lines, each event ended by a blank line; the
    content pieces make `text`; the last chunk carries `finish`; the stream ends with `data: [DONE]` exactly once."""
    assert raw.endswith("data: [DONE]\n\n"), f"the stream does not end with data: [DONE]: ...{raw[-80:]!r}"
    events = raw[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events), raw
    assert events.count("data: [DONE]") == 1 and events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == text
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + [finish]


def test_raw_sse_ends_with_done_and_an_answer_cut_at_the_token_limit_finishes_with_length(server, http, stream,
                                                                                          tiny_config, adapter):
    """The random checkpoint does not stop by itself: the engine's own answer on the same frames runs to the
    server's max_new_tokens (8), so the API must say "length", in the raw SSE bytes and in the plain reply."""
    images = random_frames(4, seed=5)
    push_frames(http, stream, images)
    expected = engine_answer(tiny_config, adapter, images, "What do you see?")
    assert expected["tokens"] == tiny_config.generation.max_new_tokens == 8, "precondition: cut at the limit"
    raw, plain = raw_chat(http, stream, "What do you see?")
    check_sse(raw, expected["text"], "length")
    assert plain["choices"][0]["finish_reason"] == "length" and plain["choices"][0]["message"]["content"] == \
        expected["text"]


def test_tell_me_when_registers_a_trigger(server, http, stream):
    reply = oai(server[0]).chat.completions.create(
        model=MODEL_ID, extra_body={"stream_id": stream},
        messages=[{"role": "user", "content": "Tell me when a red circle appears."}])
    extra = reply.model_extra["streamvid"]
    assert extra["trigger_id"] == extra["question_id"]
    assert reply.choices[0].message.content
    watches = http.get(f"/v1/streams/{stream}/watches").json()["data"]
    assert [w["id"] for w in watches] == [extra["trigger_id"]] and "red circle" in watches[0]["condition"]


def test_sse_events_alerts_and_the_webhook_retry(server, http, receiver):
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    events: list[tuple[str, dict]] = []
    lines: list[str] = []

    def read():
        with httpx.Client(base_url=server[0], timeout=60.0) as c, c.stream("GET", f"/v1/streams/{sid}/events") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            event = None
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((event, strict_json(line.removeprefix("data: "))))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_until(lambda: ": subscribed" in lines, what="the event stream to open")
    wid = http.post(f"/v1/streams/{sid}/watches", json={"condition": "a red circle", "fire": 0.0,
                                                        "reset": 0.0}).json()["id"]
    push_frames(http, sid, random_frames(8, seed=5))
    answer = http.post("/v1/chat/completions", json={"model": MODEL_ID, "stream_id": sid,
                                                     "messages": [{"role": "user", "content": "What is there?"}]})
    assert answer.status_code == 200
    wait_until(lambda: any(e == "alert" for e, _ in events), what="an alert on the event stream")
    wait_until(lambda: receiver[1]["alerts"], what="the webhook to get the alert")
    assert http.delete(f"/v1/streams/{sid}").status_code == 200
    reader.join(timeout=30)
    assert not reader.is_alive(), "the event stream did not end with the stream"
    alert = next(d for e, d in events if e == "alert")
    assert alert["type"] == "alert" and alert["trigger_id"] == wid
    assert set(alert) >= {"condition", "t_s", "score", "evidence_t_s", "text"}
    (sse_answer,) = [d for e, d in events if e == "answer"]
    assert sse_answer["text"] == answer.json()["choices"][0]["message"]["content"]
    assert sse_answer["question"] == "What is there?"
    assert events[-1] == ("status", {"type": "status", "event": "closed", "t_s": 3.5})
    assert all(e == event_name(d) for e, d in events)
    hooked = receiver[1]["alerts"][0]
    assert receiver[1]["attempts"] >= 2  # the first POST failed (500) and was retried
    assert hooked["stream_id"] == sid and hooked["trigger_id"] == wid and hooked["type"] == "alert"


def test_sse_event_names():
    assert event_name({"type": "say", "text": "a circle"}) == "narration"
    assert event_name({"type": "status", "event": "source_lost"}) == "source_lost"
    assert event_name({"type": "status", "event": "source_back"}) == "source_back"
    assert event_name({"type": "status", "event": "ended"}) == "status"
    assert event_name({"type": "alert"}) == "alert" and event_name({"type": "answer"}) == "answer"


def test_watches_added_listed_and_removed(http, stream):
    wid = http.post(f"/v1/streams/{stream}/watches", json={"condition": "a red circle appears"}).json()["id"]
    listed = http.get(f"/v1/streams/{stream}/watches").json()
    assert listed["object"] == "list" and [w["id"] for w in listed["data"]] == [wid]
    assert http.delete(f"/v1/streams/{stream}/watches/{wid}").json() == {"id": wid, "object": "watch",
                                                                          "deleted": True}
    assert http.get(f"/v1/streams/{stream}/watches").json()["data"] == []
    assert http.delete(f"/v1/streams/{stream}/watches/{wid}").status_code == 404


def test_a_slow_subscriber_loses_its_oldest_items_and_never_blocks():
    from streamvid.hub.subscriber import CLOSED, Subscriber

    sub = Subscriber(maxlen=3, deltas=False)
    for i in range(5):
        sub.offer({"n": i})  # the fan-out thread never waits on a subscriber
    sub.offer(CLOSED)
    assert sub.dropped == 2
    assert [sub.get_sync(0.0) for _ in range(4)] == [{"n": 2}, {"n": 3}, {"n": 4}, CLOSED]
    assert sub.get_sync(0.0) is None
    sub.offer({"n": 5})  # after CLOSED nothing more is taken
    assert sub.get_sync(0.0) is None


# ---- realtime ---------------------------------------------------------------------------------------------------
def test_realtime_socket_frames_question_watch_and_errors(server, http, stream, tiny_config, adapter):
    ws_url = server[0].replace("http://", "ws://") + f"/v1/streams/{stream}/realtime"
    images = random_frames(4, seed=7)
    with websockets_sync.connect(ws_url) as ws:
        def until(kind: str, **match) -> list[dict]:
            got = []
            while True:
                m = strict_json(ws.recv(timeout=60))
                got.append(m)
                if m["type"] == kind and all(m.get(k) == v for k, v in match.items()):
                    return got

        for i, image in enumerate(images):
            ws.send(json.dumps({"type": "input_image", "image": base64.b64encode(png(image)).decode(), "t_s": i / 2}))
            ack = until("ack")[-1]
            assert ack["for"] == "input_image" and ack["t_s"] == i / 2
            wait_until(lambda n=i + 1: frames_taken(http, stream) >= n, what="the frame to reach the engine")
        wait_until(lambda: http.get(f"/v1/streams/{stream}").json()["blocks_encoded"] == 2, what="two chunks")
        ws.send("{not json")
        assert until("error")[-1]["message"] == "the message is not valid JSON"
        ws.send(json.dumps({"type": "dance"}))
        assert "unknown message type" in until("error")[-1]["message"]
        ws.send(json.dumps({"type": "input_image", "image": "***"}))
        assert "base64" in until("error")[-1]["message"]
        ws.send(json.dumps({"type": "question", "text": ""}))
        assert until("error")[-1]["status"] == 400
        ws.send(json.dumps({"type": "watch", "condition": "a blue star"}))
        assert until("ack", **{"for": "watch"})[-1]["id"] == "w0"
        ws.send(json.dumps({"type": "question", "text": "What do you see?"}))  # the socket is still open
        got = until("answer")
        qid = next(m["id"] for m in got if m["type"] == "ack" and m["for"] == "question")
        deltas = [m for m in got if m["type"] == "answer.delta"]
        answer = got[-1]
        assert answer["id"] == qid and deltas and all(d["id"] == qid for d in deltas)
        assert "".join(d["text"] for d in deltas).strip() == answer["text"]
    expected = engine_answer(tiny_config, adapter, images, "What do you see?")
    assert (answer["text"], answer["t_s"], answer["evidence_t_s"]) == \
        (expected["text"], expected["t_s"], expected["evidence_t_s"])


def test_realtime_socket_refuses_an_unknown_stream(server):
    with pytest.raises(InvalidStatus) as e:
        websockets_sync.connect(server[0].replace("http://", "ws://") + "/v1/streams/vs-nope/realtime")
    assert e.value.response.status_code == 404


# ---- auth -------------------------------------------------------------------------------------------------------
def test_api_key_is_required_when_set(keyed):
    with httpx.Client(base_url=keyed, timeout=60.0) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            r = c.get("/v1/models", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert r.headers["www-authenticate"] == "Bearer"
            assert c.post("/v1/streams", json={"source": "push"}, headers=headers).status_code == 401
        assert c.get("/docs").status_code == 200  # the OpenAPI page itself is open
        good = {"Authorization": f"Bearer {KEY}"}
        assert c.get("/v1/models", headers=good).status_code == 200
        sid = c.post("/v1/streams", json={"source": "push"}, headers=good).json()["id"]
    with pytest.raises(openai.AuthenticationError):
        oai(keyed, "wrong").models.list()
    assert [m.id for m in oai(keyed, KEY).models.list()] == [MODEL_ID]
    ws_url = keyed.replace("http://", "ws://") + f"/v1/streams/{sid}/realtime"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(InvalidStatus) as e:
            websockets_sync.connect(ws_url, additional_headers=headers)
        assert e.value.response.status_code == 401
    with websockets_sync.connect(ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(json.dumps({"type": "watch", "condition": "a circle"}))
        assert json.loads(ws.recv(timeout=60))["type"] == "ack"
    with httpx.Client(base_url=keyed, timeout=60.0, headers={"Authorization": f"Bearer {KEY}"}) as c:
        assert c.delete(f"/v1/streams/{sid}").status_code == 200


def test_a_public_bind_without_a_key_is_refused_at_start(monkeypatch, capsys):
    from streamvid.cli.main import main

    monkeypatch.delenv("STREAMVID_API_KEY", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "8011"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refusing to listen on 0.0.0.0 without --api-key" in err


def test_serve_help_lists_its_flags():
    p = subprocess.run([sys.executable, "-m", "streamvid.cli", "serve", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    for flag in ("--api-key", "--allow-dir", "--alert-webhook", "--ui", "--ray", "--replicas", "--max-streams"):
        assert flag in p.stdout


# ---- errors -----------------------------------------------------------------------------------------------------
def test_every_error_is_one_line_of_openai_shaped_json(server, http, stream):
    def error(r: httpx.Response, status: int, words: str = "") -> None:
        assert r.status_code == status, (r.status_code, r.text)
        body = strict_json(r.text)["error"]
        assert set(body) == {"message", "type", "code"} and "\n" not in body["message"] and words in body["message"]

    for method, path in (("GET", "/v1/streams/vs-nope"), ("DELETE", "/v1/streams/vs-nope"),
                         ("GET", "/v1/streams/vs-nope/watches"), ("GET", "/v1/streams/vs-nope/events"),
                         ("DELETE", f"/v1/streams/{stream}/watches/w9")):
        error(http.request(method, path), 404, "no ")
    error(http.post("/v1/streams/vs-nope/frames", content=png(random_frames(1)[0]),
                    headers={"Content-Type": "image/png"}), 404, "no stream")
    error(http.post("/v1/streams/vs-nope/watches", json={"condition": "x"}), 404, "no stream")
    error(http.post("/v1/streams", content=b"{not json", headers={"Content-Type": "application/json"}), 400, "JSON")
    error(http.post("/v1/streams", json={"fps": 2.0}), 422, "source")
    error(http.post("/v1/streams", json={"source": "push", "fps": "fast"}), 422, "fps")
    error(http.post("/v1/streams", json={"source": "push", "fps": 0}), 400, "fps")
    error(http.post("/v1/streams", json={"source": "push", "extra": 1}), 422, "extra")
    frames = f"/v1/streams/{stream}/frames"
    error(http.post(frames, content=b"hello", headers={"Content-Type": "text/plain"}), 415, "image/png")
    error(http.post(frames, content=b"hello"), 415)
    error(http.post(frames, content=b"not a png", headers={"Content-Type": "image/png"}), 400, "not a readable")
    error(http.post(frames, content=png(random_frames(1, px=300)[0]), headers={"Content-Type": "image/png"}), 400,
          "cap")
    error(http.post(frames, content=b"\0" * (2 * 2**20), headers={"Content-Type": "image/png"}), 413, "MB")
    error(http.post(frames, params={"t_s": "nan"}, content=png(random_frames(1)[0]),
                    headers={"Content-Type": "image/png"}), 400, "t_s")
    assert http.post(frames, params={"t_s": 5.0}, content=png(random_frames(1)[0]),
                     headers={"Content-Type": "image/png"}).status_code == 200
    error(http.post(frames, params={"t_s": 4.0}, content=png(random_frames(1)[0]),
                    headers={"Content-Type": "image/png"}), 400, "earlier than")
    watches = f"/v1/streams/{stream}/watches"
    error(http.post(watches, json={}), 422, "condition")
    error(http.post(watches, json={"condition": "  "}), 400, "empty condition")
    error(http.post(watches, json={"condition": "x", "fire": 2}), 400, "fire")
    chat = "/v1/chat/completions"
    user = [{"role": "user", "content": "What?"}]
    error(http.post(chat, json={"model": "gpt-4o", "stream_id": stream, "messages": user}), 404, "gpt-4o")
    error(http.post(chat, json={"model": MODEL_ID, "messages": user}), 400, "stream_id")
    error(http.post(chat, json={"model": MODEL_ID, "stream_id": "vs-nope", "messages": user}), 404, "no stream")
    error(http.post(chat, json={"model": MODEL_ID, "stream_id": stream, "messages": []}), 400, "last message")
    error(http.post(chat, json={"model": MODEL_ID, "stream_id": stream,
                                "messages": [*user, {"role": "assistant", "content": "x"}]}), 400, "last message")
    error(http.post(chat, json={"model": MODEL_ID, "stream_id": stream, "messages": [{"role": "robot"}]}), 400, "role")
    error(http.post(chat, json={"model": MODEL_ID, "stream_id": stream, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}), 400, "frames")
    error(http.post(chat, json={"model": MODEL_ID, "stream_id": stream, "messages": "hi"}), 422, "messages")
    error(http.post(chat, json={"model": MODEL_ID, "stream_id": stream,
                                "messages": [{"role": "user", "content": " "}]}), 400, "empty question")
    error(http.get("/v1/nothing-here"), 404)


def test_a_full_questions_queue_is_429(server, http, stream):
    from streamvid.assistant.assistant import BusyError

    served = server[1].state.hub.get(stream)

    def busy(*args, **kwargs):
        raise BusyError("busy: 8 questions are waiting; ask again shortly")

    served.sa.ask = busy
    r = http.post("/v1/chat/completions", json={"model": MODEL_ID, "stream_id": stream,
                                                "messages": [{"role": "user", "content": "What?"}]})
    assert r.status_code == 429 and "busy" in r.json()["error"]["message"]
    with pytest.raises(openai.RateLimitError):
        oai(server[0]).chat.completions.create(model=MODEL_ID, extra_body={"stream_id": stream},
                                               messages=[{"role": "user", "content": "What?"}], stream=True)


def test_a_full_engine_is_429_until_a_stream_closes(tiny_config, adapter):
    engine = Engine(tiny_config.replace(max_streams=1), adapter)
    try:
        with running(build_app(engine)) as url, httpx.Client(base_url=url, timeout=60.0) as c:
            first = c.post("/v1/streams", json={"source": "push"})
            assert first.status_code == 201
            full = c.post("/v1/streams", json={"source": "push"})
            assert full.status_code == 429 and "1 streams at most" in full.json()["error"]["message"]
            assert full.json()["error"]["type"] == "rate_limit_error"
            c.delete(f"/v1/streams/{first.json()['id']}")
            assert c.post("/v1/streams", json={"source": "push"}).status_code == 201
    finally:
        engine.close()


# ---- the web page on the same engine ----------------------------------------------------------------------------
def test_ui_mounts_the_web_page_on_the_same_engine(engine):
    app = build_app(engine, ServeOptions(model_id=MODEL_ID), ui=True)
    with running(app) as url, httpx.Client(base_url=url, timeout=60.0) as c:
        page = c.get("/")
        assert page.status_code == 200 and "gradio" in page.text.lower()
        assert c.get("/v1/models").json()["data"][0]["id"] == MODEL_ID
        assert c.get("/gradio_api/info").status_code == 200


# ---- the bundled model: answers through the API are the engine's ------------------------------------------------
BUNDLED = EngineConfig.from_settings(frame_px=112, max_new_tokens=12)
QUESTION = "How many shapes are on screen?"


@pytest.fixture(scope="module")
def bundled():
    engine = Engine(BUNDLED)
    app = build_app(engine)
    try:
        with running(app) as url:
            yield url, engine
    finally:
        engine.close()


def clip_images(clip: str, until_s: float) -> list[np.ndarray]:
    from streamvid.assets import demo_clip

    source = FileSource(demo_clip(clip), fps=2.0)
    return [f.image for f in iter(source.read, None) if f.t_s <= until_s]


def test_bundled_model_answers_pushed_clip_frames_like_the_engine(bundled):
    url, engine = bundled
    images = clip_images("shapes_7", 25.5)
    assert len(images) == 52
    with httpx.Client(base_url=url, timeout=120.0) as c:
        sid = c.post("/v1/streams", json={"source": "push"}).json()["id"]
        t_last = push_frames(c, sid, images)
        assert t_last == 25.5
        client = oai(url)
        reply = client.chat.completions.create(model="streamvid-tiny", extra_body={"stream_id": sid},
                                               messages=[{"role": "user", "content": QUESTION}])
        streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model="streamvid-tiny", extra_body={"stream_id": sid}, stream=True,
            messages=[{"role": "user", "content": QUESTION}]) if ch.choices)
        stats = c.delete(f"/v1/streams/{sid}").json()
    expected = engine_answer(BUNDLED, engine.adapter, images, QUESTION)
    extra = reply.model_extra["streamvid"]
    assert re.fullmatch(r"\d+", reply.choices[0].message.content), reply
    assert reply.choices[0].message.content == expected["text"] == streamed
    assert (extra["t_s"], extra["evidence_t_s"], extra["retrieved_blocks"]) == \
        (expected["t_s"], expected["evidence_t_s"], expected["retrieved_blocks"])
    assert stats["frames_in"] == 52 and stats["frames_dropped"] == 0


def test_raw_sse_of_an_answer_that_stops_by_itself_finishes_with_stop(bundled):
    """The bundled model answers a count in fewer tokens than max_new_tokens (12) and stops (the engine's own answer
    on the same frames says how many): "stop", in the raw SSE bytes, ending with data: [DONE], and the plain reply."""
    url, engine = bundled
    images = clip_images("shapes_7", 3.5)
    with httpx.Client(base_url=url, timeout=120.0) as c:
        sid = c.post("/v1/streams", json={"source": "push"}).json()["id"]
        push_frames(c, sid, images)
        raw, plain = raw_chat(c, sid, QUESTION, model="streamvid-tiny")
        c.delete(f"/v1/streams/{sid}")
    expected = engine_answer(BUNDLED, engine.adapter, images, QUESTION)
    assert 0 < expected["tokens"] < BUNDLED.generation.max_new_tokens, "precondition: the model stopped itself"
    check_sse(raw, expected["text"], "stop")
    assert plain["choices"][0]["finish_reason"] == "stop" and plain["choices"][0]["message"]["content"] == \
        expected["text"]


# ---- the examples of docs/api.md, as written --------------------------------------------------------------------
def doc_blocks(tag: str) -> list[str]:
    text = (ROOT / "docs" / "api.md").read_text()
    return re.findall(rf"<!-- test: {tag} -->\n```\w+\n(.*?)```", text, re.S)


def test_docs_examples_run_against_a_server(bundled, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("the curl examples need curl (apt-get install curl)")
    url, _ = bundled
    (curl,) = doc_blocks("curl")
    p = subprocess.run(["bash", "-ec", curl.replace("http://127.0.0.1:8000", url)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    replies = [json.loads(line) for line in p.stdout.replace("}{", "}\n{").splitlines() if line.strip()]
    assert [r.get("object") for r in replies] == [None, "chat.completion", "watch", "stream"]
    assert replies[0]["frames_dropped"] == 0 and isinstance(replies[1]["choices"][0]["message"]["content"], str)

    with httpx.Client(base_url=url, timeout=60.0) as c:
        sid = c.post("/v1/streams", json={"source": "push"}).json()["id"]
        (sse,) = doc_blocks("sse")
        reader = subprocess.Popen(["bash", "-ec", sse.replace("http://127.0.0.1:8000", url)], cwd=tmp_path,
                                  env={"SID": sid, "PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE, text=True)
        lines: list[str] = []
        pump = threading.Thread(target=lambda: lines.extend(iter(reader.stdout.readline, "")), daemon=True)
        pump.start()
        wait_until(lambda: ": subscribed\n" in lines, what="curl to subscribe")
        c.delete(f"/v1/streams/{sid}")  # ends the event stream
        assert reader.wait(timeout=60) == 0
        pump.join(timeout=10)
    out = "".join(lines)
    assert "event: status" in out and '"event": "closed"' in out

    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in doc_blocks("python"):
            exec(compile(block.replace("127.0.0.1:8000", url.removeprefix("http://")), "docs/api.md", "exec"),
                 namespace)
    lines = printed.getvalue().splitlines()
    assert any("'evidence_t_s'" in line for line in lines)
    assert 9.5 <= float(lines[-1].split()[-1]) <= 10.0  # the answer's stream time: the newest frame taken
