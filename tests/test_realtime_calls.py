"""`POST /v1/realtime/calls` (WebRTC) driven by the official `openai` SDK (`client.realtime.calls.create` and
`.hangup`) and a real WebRTC peer (aiortc: camera, microphone, the `oai-events` data channel) against `streamvid
serve` on the bundled model. Every event on the channel is checked against the SDK's own models; answers against
the clip's ground truth (the still frame shows three shapes, one of them a blue square); the spoken question is
espeak-ng's; the answers' speech is measured on the peer's received audio track; what calls leave behind is counted
in threads, streams and UDP sockets."""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import io
import json
import os
import re
import threading
import time
from pathlib import Path

import av
import httpx
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack, VideoStreamTrack
from serve_helpers import frames_taken, running, spoken, wait_until

from streamvid.config import EngineConfig
from streamvid.engine.engine import Engine
from streamvid.eval.wer import words
from streamvid.media.file_source import FileSource
from streamvid.serve import ServeOptions, build_app, realtime_calls

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
from openai.types.realtime.realtime_server_event import RealtimeServerEvent

KEY = "k" * 24
MODEL = "streamvid-tiny"
BUNDLED = EngineConfig.from_settings(frame_px=112, max_new_tokens=12)
SERVER_EVENT = pydantic.TypeAdapter(RealtimeServerEvent)
STILL_T_S = 10.0  # shapes_7 at 10 s: a blue square, an orange circle, a purple star (its timeline.json)
WAIT_S = 120.0
RATE = 24000


@pytest.fixture(scope="module")
def bundled():
    engine = Engine(BUNDLED)
    app = build_app(engine, ServeOptions(api_key=KEY, model_id=MODEL, max_new_tokens=12))
    try:
        with running(app) as url:
            yield url, app
    finally:
        engine.close()


@pytest.fixture(scope="module")
def still():
    from streamvid.assets import demo_clip

    source = FileSource(demo_clip("shapes_7"), fps=2.0)
    return next(f.image for f in iter(source.read, None) if f.t_s >= STILL_T_S)


@pytest.fixture(scope="module")
def http(bundled):
    with httpx.Client(base_url=bundled[0], timeout=60.0, headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


def client(url: str, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key, base_url=f"{url}/v1", max_retries=0)


class Still(VideoStreamTrack):
    """A camera showing one picture (30 fps)."""

    def __init__(self, image: np.ndarray):
        super().__init__()
        self.image = image

    async def recv(self):
        pts, time_base = await self.next_timestamp()
        frame = av.VideoFrame.from_ndarray(self.image, format="rgb24")
        frame.pts, frame.time_base = pts, time_base
        return frame


class Mic(MediaStreamTrack):
    """A microphone: silence, and what `say` is given (PCM16 24 kHz), in real time."""

    kind = "audio"

    def __init__(self):
        super().__init__()
        self.pending = bytearray()
        self.start, self.samples = None, 0

    def say(self, pcm: bytes) -> None:
        self.pending += pcm

    async def recv(self):
        n = RATE // 50
        if self.start is None:
            self.start = time.monotonic()
        else:
            self.samples += n
            await asyncio.sleep(max(0.0, self.start + self.samples / RATE - time.monotonic()))
        chunk = bytes(self.pending[:2 * n]).ljust(2 * n, b"\0")
        del self.pending[:2 * n]
        frame = av.AudioFrame(format="s16", layout="mono", samples=n)
        frame.planes[0].update(chunk)
        frame.pts, frame.sample_rate, frame.time_base = self.samples, RATE, fractions.Fraction(1, RATE)
        return frame


class Peer:
    """A WebRTC caller: camera (optional), microphone, the oai-events channel; the server's audio it hears."""

    def __init__(self, image: np.ndarray | None = None, channel: bool = True):
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.seen: list = []
        self.heard: list[tuple[float, float]] = []  # (arrival time, peak |sample| of a received 20 ms frame)
        self.tasks: list[asyncio.Task] = []
        self.channel = self.pc.createDataChannel("oai-events") if channel else None
        if self.channel is not None:
            self.channel.on("message", self.inbox.put_nowait)
        if image is not None:
            self.pc.addTrack(Still(image))
        self.mic = Mic()
        self.pc.addTrack(self.mic)
        self.pc.on("track", lambda track: self.tasks.append(asyncio.ensure_future(self.listen(track))))

    async def listen(self, track) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                self.heard.append((time.monotonic(), float(np.abs(frame.to_ndarray()).max())))

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def connect(self, answer: str) -> None:
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        for _ in range(int(WAIT_S * 10)):
            if self.channel.readyState == "open":
                return
            await asyncio.sleep(0.1)
        raise AssertionError("the data channel did not open")

    def send(self, event: dict) -> None:
        self.channel.send(json.dumps(event))

    async def next(self):
        raw = await asyncio.wait_for(self.inbox.get(), WAIT_S)
        event = SERVER_EVENT.validate_json(raw)  # a type the SDK knows, with every required field
        self.seen.append(event)
        return event

    async def until(self, kind: str, pred=lambda e: True) -> list:
        got = []
        while True:
            got.append(await self.next())
            if got[-1].type == kind and pred(got[-1]):
                return got

    async def close(self) -> None:
        await self.pc.close()
        for task in self.tasks:
            task.cancel()


async def call(url: str, peer: Peer, session: dict | None = None, key: str = KEY) -> tuple[str, str]:
    """The peer's offer through the SDK: (the call's Location, the answer SDP), the peer connected."""
    raw = await client(url, key).realtime.calls.with_raw_response.create(sdp=await peer.offer(),
                                                                          **({"session": session} if session else {}))
    assert raw.status_code == 201 and raw.headers["content-type"].startswith("application/sdp")
    answer = raw.content.decode()
    await peer.connect(answer)
    return raw.headers["location"], answer


def transcript(done) -> str:
    part = done.response.output[0].content[0]
    return part.transcript if part.type == "output_audio" else part.text


def test_a_call_watches_the_camera_answers_typed_and_spoken_questions_aloud_and_hangs_up(bundled, http, still,
                                                                                      tmp_path):
    url, app = bundled
    asked = spoken(tmp_path, "what shape is blue", RATE).tobytes()
    secret = openai.OpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0).realtime.client_secrets.create(
        session={"type": "realtime"}).value

    async def main():
        peer = Peer(still)
        try:
            location, answer = await call(url, peer, key=secret, session={"type": "realtime", "audio": {"input": {
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}})
            assert location.startswith("/v1/realtime/calls/rtc_") and "m=video" in answer
            created = await peer.next()
            assert created.type == "session.created" and created.session.output_modalities == ["audio"]
            sid = created.session.model_extra["streamvid"]["stream_id"]
            fps = created.session.model_extra["streamvid"]["fps"]
            # the camera's frames reach the stream, never faster than its fps (the camera sends 30 a second)
            t0, n0 = time.monotonic(), frames_taken(http, sid)
            await asyncio.to_thread(wait_until, lambda: http.get(f"/v1/streams/{sid}").json()["blocks_encoded"]
                                    >= 3, WAIT_S, "three chunks of the camera in the window")
            taken, elapsed = frames_taken(http, sid) - n0, time.monotonic() - t0
            assert frames_taken(http, sid) >= 6 and 1 <= taken <= fps * elapsed + 2, (taken, elapsed, fps)

            # a typed question, answered aloud: transcript events on the channel, the speech on the audio track
            peer.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "How many shapes are on screen?"}]}})
            peer.send({"type": "response.create"})
            typed = await peer.until("output_audio_buffer.stopped")
            kinds = [e.type for e in typed]
            order = ["response.created", "response.output_audio_transcript.delta", "output_audio_buffer.started",
                     "response.done", "output_audio_buffer.stopped"]
            assert [k for k in order if k in kinds] == order and "response.output_audio.delta" not in kinds, kinds
            done = next(e for e in typed if e.type == "response.done")
            assert done.response.status == "completed" and "3" in transcript(done).split(), transcript(done)
            assert done.response.usage.input_tokens > done.response.usage.input_token_details.text_tokens > 0
            started = next(i for i, e in enumerate(peer.seen) if e.type == "output_audio_buffer.started")
            assert peer.seen[started].response_id == done.response.id

            # a spoken question on the microphone: server VAD, the transcription, an answer nobody created
            peer.mic.say(asked)
            got = await peer.until("response.done")
            heard = next(e for e in got if e.type == "conversation.item.input_audio_transcription.completed")
            assert {"shape", "blue"} <= set(words(heard.transcript)), heard.transcript
            assert got[-1].response.status == "completed" and "square" in words(transcript(got[-1]))
            await peer.until("output_audio_buffer.stopped")
            loud = [peak for _, peak in peer.heard if peak > 2000]
            assert len(loud) >= 25, f"{len(loud)} loud 20-ms frames of speech received"  # >= 0.5 s of speech

            # the SDK hangs up: the stream's input ends (the call's stream is closed), the peer is disconnected
            await client(url).realtime.calls.hangup(location.rsplit("/", 1)[-1])
            await asyncio.to_thread(wait_until, lambda: http.get(f"/v1/streams/{sid}").status_code == 404, 30,
                                    "the call's stream to close")
            await asyncio.to_thread(wait_until, lambda: peer.pc.connectionState in ("closed", "failed"), 60,
                                    "the peer to see the call end")
        finally:
            await peer.close()

    asyncio.run(main())
    assert len(app.state.calls) == 0


def udp_sockets() -> int:
    """UDP sockets this process holds (ICE's: a call's and a peer's), from /proc."""
    inodes = set()
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        with contextlib.suppress(OSError), open(name) as f:
            inodes |= {line.split()[9] for line in list(f)[1:]}
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            held += link.startswith("socket:[") and link[8:-1] in inodes
    return held


SDP_AV1_ONLY = "\r\n".join([
    "v=0", "o=- 1 1 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0",
    "m=video 9 UDP/TLS/RTP/SAVPF 96", "c=IN IP4 0.0.0.0", "a=mid:0", "a=sendonly", "a=rtcp-mux",
    "a=rtpmap:96 AV1/90000", "a=ice-ufrag:abcd", "a=ice-pwd:abcdefghijklmnopqrstuvwx",
    "a=fingerprint:sha-256 " + ":".join(["AB"] * 32), "a=setup:actpass", ""])


def test_bad_offers_many_calls_and_dead_peers_get_clear_refusals_and_leave_nothing_behind(bundled, http, still,
                                                                                         monkeypatch):
    url, app = bundled
    monkeypatch.setattr(realtime_calls, "ICE_TIMEOUT_S", 3.0)

    def ours() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith(("streamvid-hub", "streamvid-ingest",
                                                                      "streamvid-realtime"))}

    before_threads, before_udp = ours(), udp_sockets()
    auth = {"Authorization": f"Bearer {KEY}"}
    refused = [({"Content-Type": "text/plain"}, "v=0\r\nm=audio 9 RTP/AVP 0\r\n", 400, "unsupported_content_type"),
               ({"Content-Type": "application/sdp"}, "hello", 400, "invalid_sdp"),
               ({"Content-Type": "application/sdp"}, "v=0\r\ns=-\r\n", 400, "invalid_sdp"),
               ({"Content-Type": "application/sdp"}, "v=0\r\nm=video\r\na=rtpmap:x\r\n" + "a=" * 5000, 400,
                "invalid_sdp"),
               ({"Content-Type": "application/sdp"}, SDP_AV1_ONLY, 400, "unsupported_codec"),
               ({"Content-Type": "application/sdp"}, "v=0\r\n" + "a=x\r\n" * 20000 + "m=audio 9 x 0\r\n", 400,
                "invalid_sdp")]
    for headers, body, status, code in refused:
        r = httpx.post(f"{url}/v1/realtime/calls", content=body, headers={**auth, **headers}, timeout=60)
        assert r.status_code == status, (body[:40], r.text)
        error = r.json()["error"]
        assert error["code"] == code and "\n" not in error["message"], (body[:40], error)
    r = httpx.post(f"{url}/v1/realtime/calls", content=SDP_AV1_ONLY, headers={"Content-Type": "application/sdp"})
    assert r.status_code == 401

    async def main():
        sync = openai.OpenAI(api_key=KEY, base_url=f"{url}/v1", max_retries=0)
        # a used client secret, and one for a realtime socket used on a call: one session each
        secret = sync.realtime.client_secrets.create().value
        first = Peer(still)
        await call(url, first, key=secret)
        sid = (await first.next()).session.model_extra["streamvid"]["stream_id"]
        again = Peer()
        with pytest.raises(openai.AuthenticationError):
            await client(url, secret).realtime.calls.create(sdp=await again.offer())
        await again.close()
        # a second call on the same stream is refused while the first is live
        second = Peer(still)
        with pytest.raises(openai.ConflictError):
            await client(url).realtime.calls.create(sdp=await second.offer(), session={
                "type": "realtime", "streamvid": {"stream_id": sid}})
        # a session the socket would refuse is refused with the offer, naming the parameter
        with pytest.raises(openai.BadRequestError) as bad:
            await client(url).realtime.calls.create(sdp=await second.offer(), session={
                "type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}})
        assert "audio.input.format" in bad.value.message
        await second.close()
        # the first hangs up by closing its connection: its stream is closed
        await first.close()
        await asyncio.to_thread(wait_until, lambda: http.get(f"/v1/streams/{sid}").status_code == 404, 60,
                                "the closed peer's stream to close")
        # peers that never complete ICE (their answer never applied) are hung up on after ICE_TIMEOUT_S
        ghosts = [Peer(still) for _ in range(3)]
        for ghost in ghosts:
            await client(url).realtime.calls.create(sdp=await ghost.offer())
        await asyncio.to_thread(wait_until, lambda: len(app.state.calls) == 0, 60, "the unconnected calls to end")
        for ghost in ghosts:
            await ghost.close()
        # an audio-only call (no camera) is a stream without frames, and still takes questions
        voice = Peer()
        await call(url, voice, session={"type": "realtime", "output_modalities": ["text"]})
        await voice.next()
        voice.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What do you see?"}]}})
        voice.send({"type": "response.create"})
        done = (await voice.until("response.done"))[-1]
        assert done.response.status == "completed" and transcript(done)
        voice.send({"type": "response.create", "response": {"instructions": "x"}})  # (none to cancel after)
        voice.send({"type": "output_audio_buffer.clear"})
        await voice.close()

    asyncio.run(main())
    wait_until(lambda: http.get("/v1/streams").json()["data"] == [], 60, "every call's stream to close")
    wait_until(lambda: len(app.state.calls) == 0 and not ours() - before_threads, 60, "the calls' threads to end")
    wait_until(lambda: udp_sockets() == before_udp, 60, "the calls' UDP sockets (ICE) to close")


def test_the_docs_call_example_runs_as_written(bundled, http, still):
    """docs/api.md's WebRTC example, as written (its server address and key replaced), with the still as the camera:
    a question asked once the camera is in the window is answered (a completed response.done printed, its text the
    ground truth's)."""
    url, _ = bundled
    text = (Path(__file__).parents[1] / "docs" / "api.md").read_text()
    (block,) = re.findall(r"<!-- test: realtime-call -->\n```python\n(.*?)```", text, re.DOTALL)
    printed = io.StringIO()
    scope: dict = {}
    exec(compile(block.replace("127.0.0.1:8000", url.removeprefix("http://")).replace('"KEY"', repr(KEY)),  # noqa: S102
                 "docs/api.md", "exec"), scope)

    def done() -> list[dict]:
        return [e for e in map(json.loads, printed.getvalue().splitlines()) if e["type"] == "response.done"]

    async def main():
        pc, events, location = await scope["call"](Still(still))
        try:
            assert location.startswith("/v1/realtime/calls/rtc_")
            while not printed.getvalue():
                await asyncio.sleep(0.1)
            sid = json.loads(printed.getvalue().splitlines()[0])["session"]["streamvid"]["stream_id"]
            await asyncio.to_thread(wait_until, lambda: http.get(f"/v1/streams/{sid}").json()["blocks_encoded"]
                                    >= 2, WAIT_S, "the camera in the window")
            scope["ask"](events, "How many shapes are on screen?")
            for _ in range(int(WAIT_S * 10)):
                if done():
                    return
                await asyncio.sleep(0.1)
        finally:
            await pc.close()

    with contextlib.redirect_stdout(printed):
        asyncio.run(asyncio.wait_for(main(), 2 * WAIT_S))
    (response,) = [e["response"] for e in done()]
    assert response["status"] == "completed" and "3" in response["output"][0]["content"][0]["text"].split()
