"""Helpers shared by the serve tests: a FastAPI app on uvicorn in a thread (or on a local Ray Serve cluster), one that
speaks with a test voice, frames pushed over HTTP one by one, and the engine's own answer on the same frames."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import socket
import subprocess
import threading
import wave

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi import FastAPI
from PIL import Image

from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.types import Frame


# ---- fixtures two serve test modules share (imported there by name) -------------------------------------------
@pytest.fixture(scope="module")
def config(tiny_model_dir) -> EngineConfig:
    """The tiny random checkpoint on the CPU, a 2 s window (older blocks go to long-term memory)."""
    return EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=8, window_s=2.0, device="cpu")


@pytest.fixture(scope="module")
def engine(config, adapter):
    engine = Engine(config, adapter)
    yield engine
    engine.close()


@pytest.fixture()
def allow_dir(tmp_path):
    """A folder for --allow-dir, resolved as the server names it in its errors."""
    folder = tmp_path / "allowed"
    folder.mkdir()
    return folder.resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout_s: float = 60.0, what: str = "condition"):
    tick = threading.Event()
    for _ in range(int(timeout_s / 0.05)):
        if (got := condition()):
            return got
        tick.wait(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@contextlib.contextmanager
def ray_serve(config, options, app_name: str = "streamvid", **deployment):
    """streamvid's Ray Serve application (`ray_app.application(config, options, **deployment)`) on a local 2-CPU
    Ray cluster serving HTTP on 127.0.0.1 and a free port; yields its base URL, and shuts Ray down after."""
    import ray
    from ray import serve

    from streamvid.serve.ray_app import application

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(application(config, options, **deployment), name=app_name, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@contextlib.contextmanager
def running(app: FastAPI):
    """`app` on uvicorn in a thread on 127.0.0.1 and a free port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), what="uvicorn to start")
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


_voice_names = itertools.count()


@contextlib.contextmanager
def speaking_server(engine: Engine, monkeypatch, voice):
    """`build_app` on `engine` whose --tts names `voice` (a test voice, under a name of its own so the speech route
    loads it fresh), on uvicorn; yields its base URL."""
    from streamvid.serve import ServeOptions, build_app, speech_route

    name = f"test-voice-{next(_voice_names)}"
    monkeypatch.setattr(speech_route, "load_voice", lambda n: voice if n == name else pytest.fail(n))
    with running(build_app(engine, ServeOptions(model_id="tiny", max_new_tokens=4, tts=name))) as url:
        yield url


def png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


def push_frames(client: httpx.Client, sid: str, images, t0_s: float = 0.0, fps: float = 2.0) -> float:
    """Push each image at t0 + i/fps once the engine has taken the one before; return once every whole chunk is in
    the window. The last frame's time."""
    start = client.get(f"/v1/streams/{sid}").json()
    taken0 = start["frames_in"] + start["frames_dropped"]
    t_s = t0_s
    for i, image in enumerate(images):
        t_s = t0_s + i / fps
        r = client.post(f"/v1/streams/{sid}/frames", params={"t_s": t_s}, content=png(image),
                        headers={"Content-Type": "image/png"})
        assert r.status_code == 200, r.text
        wait_until(lambda n=i + 1: frames_taken(client, sid) >= taken0 + n, what=f"frame {i} to reach the engine")
    blocks = (start["frames_in"] + len(images)) // 2
    wait_until(lambda: client.get(f"/v1/streams/{sid}").json()["blocks_encoded"] >= blocks,
               what="the last chunk in the window")
    return t_s


def frames_taken(client: httpx.Client, sid: str) -> int:
    st = client.get(f"/v1/streams/{sid}").json()
    return st["frames_in"] + st["frames_dropped"]


def engine_answer(config: EngineConfig, adapter, images, question: str, dialogue=None, fps: float = 2.0) -> dict:
    """The engine's own answer on the same frames: a StreamingAssistant fed the frames on this thread, then asked at
    the last frame's time."""
    sa = StreamingAssistant(config, adapter=adapter)
    try:
        frames = [Frame(image, i / fps, i) for i, image in enumerate(images)]
        sa.feed(frames)
        qid = sa.ask(question, t_s=frames[-1].t_s, dialogue=dialogue)
        sa.engine.run_until_idle()
        return next(o for o in sa.outputs(timeout_s=0.0) if o.kind == "answer" and o.id == qid).to_json()
    finally:
        sa.stop()


def strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def spoken(tmp_path, text: str, rate: int) -> np.ndarray:
    """espeak-ng saying `text` as PCM16 samples at `rate`, with 0.5 s of silence before and 1 s after (the listener
    ends an utterance on the silence after it). Skips without espeak-ng, unless STREAMVID_REQUIRE_SPEECH=1."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        if os.environ.get("STREAMVID_REQUIRE_SPEECH") == "1":
            raise RuntimeError("STREAMVID_REQUIRE_SPEECH=1 but espeak-ng is not installed")
        pytest.skip("espeak-ng is not installed")
    out = tmp_path / "say.wav"
    subprocess.run([exe, "-v", "en-us", "-w", str(out), text], check=True, timeout=30)
    with wave.open(str(out)) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
        src = w.getframerate()
    x = np.concatenate([np.zeros(src // 2, np.float32), x, np.zeros(src, np.float32)])
    t = np.arange(int(len(x) * rate / src)) / rate
    return (np.interp(t, np.arange(len(x)) / src, x) * 32767).astype("<i2")
