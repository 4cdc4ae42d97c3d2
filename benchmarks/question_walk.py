"""Which of the library's files a question crosses on its way from `POST /v1/chat/completions` to its answer: every
`streamvid/` module with a function called while one chat completion is served (the route, the hub, the engine's
scheduler, reasoning, the KV window, the adapter's forward and decode), on every thread, nothing else running: a
push stream holds four frames already encoded, the bundled model answers.

    python benchmarks/question_walk.py            # one JSON line: {"files": N, "walk": {path: calls, ...}}

Set up before the request (engine, app, stream, frames) is not counted; Python's profiler sees each call.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from PIL import Image

import streamvid

ROOT = Path(streamvid.__file__).resolve().parent
walk: Counter = Counter()
recording = threading.Event()


def profile(frame, event, arg):
    if event == "call" and recording.is_set():
        path = frame.f_code.co_filename
        if path.startswith(str(ROOT)):
            walk[str(Path(path).relative_to(ROOT.parent))] += 1


def png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


def wait(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def main() -> None:
    threading.setprofile(profile)  # every thread started from here on (the engine's, the server's)
    sys.setprofile(profile)
    from streamvid.config import EngineConfig
    from streamvid.engine.engine import Engine
    from streamvid.serve.options import ServeOptions
    from streamvid.serve.server import build_app

    engine = Engine(EngineConfig.from_settings(max_new_tokens=8))
    model = "streamvid-tiny"
    with TestClient(build_app(engine, ServeOptions(model_id=model)), base_url="http://127.0.0.1") as client:
        opened = client.post("/v1/streams", json={"source": "push"})
        assert opened.status_code == 201, opened.text
        sid = opened.json()["id"]
        rng = np.random.default_rng(0)
        for i in range(4):
            image = rng.integers(0, 256, (112, 112, 3), dtype=np.uint8)
            r = client.post(f"/v1/streams/{sid}/frames", params={"t_s": i / 2}, content=png(image),
                            headers={"Content-Type": "image/png"})
            assert r.status_code == 200, r.text
            wait(lambda n=i + 1: client.get(f"/v1/streams/{sid}").json()["frames_in"] >= n, f"frame {i}")
        wait(lambda: client.get(f"/v1/streams/{sid}").json()["blocks_encoded"] >= 2, "two blocks")
        time.sleep(1.0)  # the engine idle again
        recording.set()
        reply = client.post("/v1/chat/completions", json={
            "model": model, "stream_id": sid, "messages": [{"role": "user", "content": "How many shapes are there?"}]})
        recording.clear()
        assert reply.status_code == 200, reply.text
    sys.setprofile(None)
    threading.setprofile(None)
    print(json.dumps({"files": len(walk), "answer": reply.json()["choices"][0]["message"]["content"],
                      "walk": dict(sorted(walk.items()))}))


if __name__ == "__main__":
    main()
