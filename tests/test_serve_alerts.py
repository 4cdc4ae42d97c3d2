"""The evidence behind alerts over `streamvid serve`, through real clients (httpx, the SSE stream, a webhook
receiver): an alert carries its alert_id and the URLs of its snapshot and clip; the snapshot is the frame the alert
fired on (checked against the source decoded on its own with PyAV), the clip is 404 while it records and then H.264
spanning the seconds around the alert; answers cite their newest evidence frame; webhooks carry a thumbnail with
--webhook-thumbnails; wrong ids, another stream's ids and a deleted stream's media are one-line 404s, and every route
asks for the stream's API key."""

from __future__ import annotations

import base64
import io
import threading

import av
import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from PIL import Image

from serve_helpers import push_frames, running, strict_json, wait_until
from streamvid import assets
from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.serve import ServeOptions, build_app

KEY = "alerts-test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
FPS = 2.0
BEFORE_S, AFTER_S = 2.0, 1.5


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.fixture(scope="module")
def source() -> dict[float, np.ndarray]:
    """The first 10 s of shapes_7 (112 px, 2 fps), decoded with PyAV: the frames pushed, by their time."""
    with av.open(str(assets.demo_clip("shapes_7"))) as container:
        frames = {round(f.time, 3): f.to_ndarray(format="rgb24") for f in container.decode(video=0) if f.time < 10}
    assert len(frames) == 20 and frames[0.0].shape == (112, 112, 3)
    return frames


@pytest.fixture(scope="module")
def engine(tiny_model_dir, adapter):
    config = EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=4, window_s=2.0, device="cpu",
                                        alert_media_before_s=BEFORE_S, alert_media_after_s=AFTER_S, trigger_k=1)
    engine = Engine(config, adapter)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def receiver():
    hook, got = FastAPI(), []

    @hook.post("/hook")
    async def receive(request: Request):
        got.append(await request.json())
        return {"ok": True}

    with running(hook) as url:
        yield f"{url}/hook", got


@pytest.fixture(scope="module")
def server(engine, receiver):
    options = ServeOptions(api_key=KEY, model_id="tiny", max_new_tokens=4, webhook_urls=(receiver[0],),
                           webhook_thumbnails=True)
    with running(build_app(engine, options)) as url:
        yield url


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server, timeout=60.0, headers=AUTH) as client:
        yield client


def _read_events(server: str, sid: str, events: list, lines: list) -> threading.Thread:
    def read():
        with httpx.stream("GET", f"{server}/v1/streams/{sid}/events", headers=AUTH, timeout=120.0) as r:
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("data: "):
                    events.append(strict_json(line[6:]))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _error(r: httpx.Response, status: int, words: str) -> None:
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    assert "\n" not in message and words in message, message


def _jpeg(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_an_alert_served_with_its_snapshot_clip_list_and_webhook_thumbnail(server, http, receiver, source):
    times = sorted(source)
    sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    other = http.post("/v1/streams", json={"source": "push"}).json()["id"]
    events, lines = [], []
    reader = _read_events(server, sid, events, lines)
    wait_until(lambda: ": subscribed" in lines, what="the event stream to open")
    push_frames(http, sid, [source[t] for t in times[:8]])  # 0.0 .. 3.5 s
    http.post(f"/v1/streams/{sid}/watches", json={"condition": "a red hexagon", "fire": 0.0, "reset": 0.0})
    push_frames(http, sid, [source[t] for t in times[8:10]], t0_s=times[8])  # 4.0, 4.5 s: the watch fires
    alert = wait_until(lambda: next((e for e in events if e["type"] == "alert"), None), timeout_s=120,
                       what="the alert on the event stream")
    aid, t_s = alert["alert_id"], alert["t_s"]
    assert aid == "a0" and alert["snapshot_url"] == f"/v1/streams/{sid}/alerts/a0/snapshot.jpg"
    assert alert["clip_url"] == f"/v1/streams/{sid}/alerts/a0/clip.mp4"
    assert t_s + AFTER_S > times[9]  # its clip cannot be complete yet: no frame past 4.5 s was pushed

    snapshot = http.get(alert["snapshot_url"])
    assert snapshot.status_code == 200 and snapshot.headers["content-type"] == "image/jpeg"
    assert psnr(_jpeg(snapshot.content), source[t_s]) >= 30.0  # the frame the alert fired on, at the source's size

    _error(http.get(alert["clip_url"]), 404, "still recording")
    (listed,) = http.get(f"/v1/streams/{sid}/alerts").json()["data"]
    assert listed["clip"] == "recording" and listed["object"] == "alert"
    last = max(t for t in times if t <= t_s + AFTER_S + 1e-6)
    push_frames(http, sid, [source[t] for t in times if times[9] < t <= last], t0_s=times[10])
    clip = wait_until(lambda: (r := http.get(alert["clip_url"])).status_code == 200 and r, what="the clip")
    assert clip.headers["content-type"] == "video/mp4"
    with av.open(io.BytesIO(clip.content)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        frames = [(f.time, f.to_ndarray(format="rgb24")) for f in container.decode(stream)]
        duration_s = container.duration / 1e6
    assert abs(duration_s - (BEFORE_S + AFTER_S)) <= 1.0 / FPS + 1e-6
    assert psnr(frames[0][1], source[round(t_s - BEFORE_S, 3)]) >= 30.0

    page = http.get(f"/v1/streams/{sid}/alerts").json()
    assert page["object"] == "list" and [a["alert_id"] for a in page["data"]] == ["a0"]
    (listed,) = page["data"]
    assert listed["snapshot"] == listed["clip"] == "ready"
    assert listed["snapshot_url"] == alert["snapshot_url"] and listed["clip_url"] == alert["clip_url"]
    assert http.get(f"/v1/streams/{sid}/alerts/a0").json()["clip_span_s"] == [t_s - BEFORE_S, t_s + AFTER_S]

    # an answer cites its newest evidence frame, served from the ring while it holds it
    reply = http.post("/v1/chat/completions", json={"model": "tiny", "stream_id": sid,
                                                    "messages": [{"role": "user", "content": "What is there?"}]})
    assert reply.status_code == 200, reply.text
    answer = wait_until(lambda: next((e for e in events if e["type"] == "answer"), None), what="the answer event")
    url = answer["evidence_frame_url"]
    assert reply.json()["streamvid"]["evidence_frame_url"] == url
    assert url.startswith(f"/v1/streams/{sid}/frames/at/") and url.endswith(".jpg")
    t_frame = float(url.rsplit("/", 1)[1].removesuffix(".jpg"))
    frame = http.get(url)
    assert frame.status_code == 200 and frame.headers["content-type"] == "image/jpeg"
    assert psnr(_jpeg(frame.content), source[t_frame]) >= 30.0
    _error(http.get(f"/v1/streams/{sid}/frames/at/9999.jpg"), 404, "holds no frame")
    _error(http.get(f"/v1/streams/{sid}/frames/at/soon.jpg"), 400, "number of seconds")

    # the webhook: the URLs and a small JPEG of the snapshot
    hooked = wait_until(lambda: receiver[1], what="the webhook")[0]
    assert hooked["stream_id"] == sid and hooked["snapshot_url"] == alert["snapshot_url"]
    assert hooked["clip_url"] == alert["clip_url"]
    thumbnail = Image.open(io.BytesIO(base64.b64decode(hooked["thumbnail"])))
    assert thumbnail.format == "JPEG" and max(thumbnail.size) <= 160

    # wrong ids, another stream's id, no key
    _error(http.get(f"/v1/streams/{sid}/alerts/a7/snapshot.jpg"), 404, "no alert 'a7'")
    _error(http.get(f"/v1/streams/{sid}/alerts/a7/clip.mp4"), 404, "no alert 'a7'")
    _error(http.get(f"/v1/streams/{sid}/alerts/a7"), 404, "no alert")
    _error(http.get(f"/v1/streams/{other}/alerts/a0/snapshot.jpg"), 404, f"on stream {other}")
    _error(http.get(f"/v1/streams/{other}/alerts/a0/clip.mp4"), 404, "no alert")
    assert http.get(f"/v1/streams/{other}/alerts").json() == {"object": "list", "data": []}
    _error(http.get("/v1/streams/vs-nope/alerts/a0/snapshot.jpg"), 404, "no stream")
    for path in ("alerts", "alerts/a0", "alerts/a0/snapshot.jpg", "alerts/a0/clip.mp4", f"frames/at/{t_frame}.jpg"):
        _error(httpx.get(f"{server}/v1/streams/{sid}/{path}", timeout=30), 401, "API key")

    # a deleted stream's media are gone
    assert http.delete(f"/v1/streams/{sid}").status_code == 200
    reader.join(timeout=30)
    for path in ("alerts", "alerts/a0/snapshot.jpg", "alerts/a0/clip.mp4", f"frames/at/{t_frame}.jpg"):
        _error(http.get(f"/v1/streams/{sid}/{path}"), 404, "no stream")
    assert http.delete(f"/v1/streams/{other}").status_code == 200


def test_a_clip_source_alert_carries_urls_and_its_snapshot(server, http, source):
    """A demo clip played by the server (its source hands over frames at their own size through the hub)."""
    sid = http.post("/v1/streams", json={"source": "shapes_7"}).json()["id"]
    try:
        http.post(f"/v1/streams/{sid}/watches", json={"condition": "a red hexagon", "fire": 0.0, "reset": 0.0})
        alert = wait_until(lambda: (data := http.get(f"/v1/streams/{sid}/alerts").json()["data"]) and data[0],
                           timeout_s=120, what="an alert on the clip")
        snapshot = wait_until(lambda: (r := http.get(alert["snapshot_url"])).status_code == 200 and r,
                              what="its snapshot")
        assert psnr(_jpeg(snapshot.content), source[alert["snapshot_t_s"]]) >= 30.0
    finally:
        http.delete(f"/v1/streams/{sid}")


def test_alert_media_cross_the_ray_ingress(tiny_model_dir):
    """Under --ray the replica holding the stream serves its media: bytes cross the Ray boundary."""
    pytest.importorskip("ray.serve", reason="needs ray[serve] (pip install -e '.[test]')")
    from conftest import random_frames
    from serve_helpers import ray_serve

    config = EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=4, trigger_k=1,
                                        alert_media_before_s=1.0, alert_media_after_s=0.5)
    options = ServeOptions(model_id="tiny", max_new_tokens=4, heartbeat_s=1.0)
    with ray_serve(config, options, replicas=1, cpus_per_replica=1.0, threads=1) as url, \
            httpx.Client(base_url=url, timeout=120.0) as http:
        sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
        http.post(f"/v1/streams/{sid}/watches", json={"condition": "a red circle", "fire": 0.0, "reset": 0.0})
        images = random_frames(8, seed=3, px=112)
        last_s = push_frames(http, sid, images)
        alert = wait_until(lambda: (data := http.get(f"/v1/streams/{sid}/alerts").json()["data"]) and data[0],
                           what="an alert")
        assert alert["snapshot_url"] == f"/v1/streams/{sid}/alerts/{alert['alert_id']}/snapshot.jpg"
        snapshot = http.get(alert["snapshot_url"])
        assert snapshot.status_code == 200 and snapshot.headers["content-type"] == "image/jpeg"
        assert _jpeg(snapshot.content).shape == (112, 112, 3)  # (noise: no PSNR bound for a JPEG of it)
        clip = wait_until(lambda: (r := http.get(alert["clip_url"])).status_code == 200 and r, what="the clip")
        with av.open(io.BytesIO(clip.content)) as container:
            assert container.streams.video[0].codec_context.name == "h264"
        assert http.get(f"/v1/streams/{sid}/frames/at/{last_s}.jpg").status_code == 200  # the ring's newest
        _error(http.get(f"/v1/streams/{sid}/alerts/a99/clip.mp4"), 404, "no alert 'a99'")
        assert http.delete(f"/v1/streams/{sid}").status_code == 200
        _error(http.get(alert["snapshot_url"]), 404, "no stream")
