"""`streamvid serve --ray`: the same app as the ingress of a Ray Serve application on a local 2-CPU cluster on loopback,
two engine replicas (the tiny random checkpoint). Streams are pinned to the replica that opened them; a dead replica's
streams answer 503 while the other replica's go on. Skipped only where ray[serve] is not installed (CI installs it
with the test extra)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

pytest.importorskip("ray.serve", reason="needs ray[serve] (pip install -e '.[test]')")
openai = pytest.importorskip("openai")

from conftest import random_frames  # noqa: E402
from serve_helpers import engine_answer, push_frames, ray_serve, strict_json, wait_until  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from streamvid.config import EngineConfig  # noqa: E402
from streamvid.serve.options import ServeOptions  # noqa: E402

MODEL_ID = "tiny-qwen"
QUESTION = "What do you see?"


@pytest.fixture(scope="module")
def config(tiny_model_dir) -> EngineConfig:
    return EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=8)


@pytest.fixture(scope="module")
def cluster(config):
    options = ServeOptions(model_id=MODEL_ID, max_new_tokens=8, answer_timeout_s=60.0, heartbeat_s=1.0)
    with ray_serve(config, options, replicas=2, cpus_per_replica=1.0, threads=1) as url:
        yield url


@pytest.fixture(scope="module")
def http(cluster):
    with httpx.Client(base_url=cluster, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="module")
def two_streams(http):
    """Two push streams: the first on replica r0, the second on r1 (a new stream goes to the least loaded)."""
    a = http.post("/v1/streams", json={"source": "push"})
    b = http.post("/v1/streams", json={"source": "push"})
    assert a.status_code == b.status_code == 201, (a.text, b.text)
    return a.json()["id"], b.json()["id"]


def ask(base: str, sid: str, question: str = QUESTION):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120.0)
    return client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": sid},
                                          messages=[{"role": "user", "content": question}])


def test_two_streams_on_two_replicas_answer_from_their_own_frames(cluster, http, two_streams, config, adapter):
    a, b = two_streams
    assert a.startswith("r0.") and b.startswith("r1."), (a, b)
    assert {s["id"] for s in http.get("/v1/streams").json()["data"]} >= {a, b}
    frames = {a: random_frames(4, seed=11), b: random_frames(6, seed=12)}
    for sid, images in frames.items():
        push_frames(http, sid, images)
    assert http.get(f"/v1/streams/{a}").json()["frames_in"] == 4
    assert http.get(f"/v1/streams/{b}").json()["frames_in"] == 6
    for sid, images in frames.items():
        reply = ask(cluster, sid)
        extra = reply.model_extra["streamvid"]
        expected = engine_answer(config, adapter, images, QUESTION)
        assert extra["stream_id"] == sid
        assert (extra["t_s"], extra["evidence_t_s"]) == (expected["t_s"], expected["evidence_t_s"]), sid
        assert reply.choices[0].message.content == expected["text"], sid


def test_streamed_answers_events_and_the_socket_cross_the_ingress(cluster, http, two_streams):
    a, _ = two_streams
    client = openai.OpenAI(base_url=f"{cluster}/v1", api_key="unused", max_retries=0, timeout=120.0)
    plain = ask(cluster, a).choices[0].message.content
    chunks = list(client.chat.completions.create(model=MODEL_ID, extra_body={"stream_id": a}, stream=True,
                                                 messages=[{"role": "user", "content": QUESTION}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == plain

    events, lines = [], []

    def read():
        with httpx.Client(base_url=cluster, timeout=120.0) as c, c.stream("GET", f"/v1/streams/{a}/events") as r:
            event = None
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: ") and event:
                    events.append((event, strict_json(line.removeprefix("data: "))))
                    if event == "answer":
                        return  # (closing the event stream unsubscribes on the replica)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_until(lambda: ": subscribed" in lines, what="the event stream to open")
    with connect(cluster.replace("http://", "ws://") + f"/v1/streams/{a}/realtime") as ws:
        ws.send(json.dumps({"type": "question", "text": QUESTION}))
        got = []
        while not got or got[-1]["type"] != "answer":
            got.append(strict_json(ws.recv(timeout=120)))
        ws.send("{not json")
        while (error := strict_json(ws.recv(timeout=120)))["type"] != "error":
            pass
        assert error["message"] == "the message is not valid JSON"  # and the socket stayed open until here
    assert got[-1]["text"] == plain and any(m["type"] == "answer.delta" for m in got)
    reader.join(timeout=120)
    assert not reader.is_alive(), "no answer on the event stream"
    assert [d["text"] for e, d in events if e == "answer"][-1] == plain


def test_the_realtime_api_and_a_webrtc_call_cross_the_ingress(cluster, http, two_streams):
    """The GA realtime socket (the official SDK) and a WebRTC call (the SDK's calls.create and an aiortc peer) on
    the ingress, attached to streams held by engine replicas: each answers the typed question as the replica's own
    chat completion does, and the call's hangup leaves the attached stream open."""
    import asyncio

    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    a, b = two_streams
    plains = {sid: ask(cluster, sid).choices[0].message.content for sid in (a, b)}
    client = openai.AsyncOpenAI(base_url=f"{cluster}/v1", api_key="unused", max_retries=0, timeout=120.0,
                                websocket_base_url=cluster.replace("http://", "ws://") + "/v1")
    question = {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": QUESTION}]}}

    async def socket() -> str:
        async with client.realtime.connect(model=MODEL_ID, extra_query={"stream_id": a}) as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await conn.send(question)
            await conn.response.create()
            async for event in conn:
                if event.type == "response.done":
                    return event.response.output[0].content[0].text

    async def call() -> tuple[str, str]:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        channel = pc.createDataChannel("oai-events")
        inbox: asyncio.Queue = asyncio.Queue()
        channel.on("message", lambda m: inbox.put_nowait(json.loads(m)))
        channel.on("open", lambda: [channel.send(json.dumps(e)) for e in (question, {"type": "response.create"})])
        try:
            await pc.setLocalDescription(await pc.createOffer())
            raw = await client.realtime.calls.with_raw_response.create(sdp=pc.localDescription.sdp, session={
                "type": "realtime", "output_modalities": ["text"], "streamvid": {"stream_id": b}})
            await pc.setRemoteDescription(RTCSessionDescription(sdp=raw.content.decode(), type="answer"))
            while (event := await asyncio.wait_for(inbox.get(), 120))["type"] != "response.done":
                pass
            await client.realtime.calls.hangup(raw.headers["location"].rsplit("/", 1)[-1])
            return event["response"]["output"][0]["content"][0]["text"]
        finally:
            await pc.close()

    assert asyncio.run(socket()) == plains[a]
    assert asyncio.run(call()) == plains[b]
    assert http.get(f"/v1/streams/{b}").status_code == 200  # attached, not owned: still open


def test_a_dead_replica_answers_503_and_the_other_goes_on(cluster, http, two_streams):
    import ray

    a, b = two_streams
    (replica,) = [r for r in ray.util.list_named_actors(all_namespaces=True)
                  if r["name"].startswith("SERVE_REPLICA::streamvid#engine1#")]
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
    dead = http.get(f"/v1/streams/{b}")  # answered once the handle fails, or the restarted replica answers
    assert dead.status_code == 503, dead.text
    message = dead.json()["error"]["message"]
    assert "died or" in message and "r1" in message and "\n" not in message
    with pytest.raises(openai.InternalServerError, match="died or"):
        ask(cluster, b)
    assert http.get(f"/v1/streams/{a}").status_code == 200
    assert ask(cluster, a).choices[0].message.content is not None
    # the restarted replica serves new streams; the lost one stays lost
    def opened_on_r1():
        sid = http.post("/v1/streams", json={"source": "push"}).json()["id"]
        if sid.startswith("r1."):
            return sid
        http.delete(f"/v1/streams/{sid}")
        return None

    fresh = wait_until(opened_on_r1, timeout_s=120, what="the restarted replica to take a stream")
    assert fresh.split("-")[0] != b.split("-")[0]  # a new incarnation
    assert http.get(f"/v1/streams/{fresh}").status_code == 200
    assert http.get(f"/v1/streams/{b}").status_code == 503

