"""One spoken question's glass-to-first-audio over the three ways in, side by side; the server's CPU per WebRTC call;
eight GA realtime sessions on one engine.

    python benchmarks/realtime_paths.py [--rounds 3] [--seconds 60]

One `streamvid serve` on 127.0.0.1 (the bundled model, --frame-px 112, the best installed voice) serves it all.
The question is espeak-ng saying "what shape is blue" (24 kHz), the camera a still of shapes_7 at 10 s.
1. Glass to first audio byte, `--rounds` times each, the paths taken in turn:
   - webrtc: an aiortc caller (POST /v1/realtime/calls through the official SDK; camera 30 fps, microphone in real
     time, server VAD with a 500 ms pause): from the moment its microphone sent the question's last sample to the
     first 20-ms frame of the answer with a non-zero sample on the call's audio track (its silence is zeros);
   - websocket: the official SDK's realtime client (GET /v1/realtime; the still as input_image items, the question
     appended in real-time 100 ms chunks, server VAD with a 500 ms pause): from the last sample sent to the first
     response.output_audio.delta;
   - http: the still pushed to POST /v1/streams/{id}/frames, the question as a chat completion's input_audio part,
     its answer sent to POST /v1/audio/speech: from the chat request (the question ended when it was sent) to the
     speech response's first byte.
   The two realtime paths wait the 500 ms pause that ends an utterance; the http one does not (its client sends
   the question whole).
2. The server's CPU (user + system, /proc) per wall second over `--cpu-seconds` with 0, 1 and 2 WebRTC calls
   (camera at 30 fps, taken at the stream's 2 fps; no questions).
3. Eight GA realtime sessions at once for `--seconds`: a frame a second (input_image), a typed question every 10 s
   (text answers); errors, TTFT (response.create to the first output_text.delta, ms) p50 / p95, frames dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fractions
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import wave

import av
import httpx
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack, VideoStreamTrack
from openai import AsyncOpenAI
from PIL import Image
from serve_load import start_server, stop_server

from streamvid.assets import demo_clip
from streamvid.config import BUNDLED_MODEL
from streamvid.media.file_source import FileSource
from streamvid.serve.realtime_input import wav_bytes

RATE = 24000
QUESTION = "what shape is blue"
MODEL = "streamvid-tiny"  # the bundled model's id
VAD = {"type": "server_vad", "silence_duration_ms": 500}
LOUD = 2000  # peak |sample| of a 20-ms frame that carries speech (the call's silence is zeros)


def speech() -> bytes:
    exe = shutil.which("espeak-ng")
    if exe is None:
        sys.exit("realtime_paths: espeak-ng is not installed")
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([exe, "-v", "en-us", "-w", f"{d}/q.wav", QUESTION], check=True, timeout=30)
        with wave.open(f"{d}/q.wav") as w:
            x, src = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32), w.getframerate()
    t = np.arange(int(len(x) * RATE / src)) / RATE
    return np.interp(t, np.arange(len(x)) / src, x).astype("<i2").tobytes()


def png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


class Still(VideoStreamTrack):
    def __init__(self, image):
        super().__init__()
        self.image = image

    async def recv(self):
        pts, time_base = await self.next_timestamp()
        frame = av.VideoFrame.from_ndarray(self.image, format="rgb24")
        frame.pts, frame.time_base = pts, time_base
        return frame


class Mic(MediaStreamTrack):
    kind = "audio"

    def __init__(self):
        super().__init__()
        self.pending, self.start, self.samples, self.last_sent = bytearray(), None, 0, None

    def say(self, pcm: bytes) -> None:
        self.pending += pcm
        self.speech_left = len(pcm)

    async def recv(self):
        n = RATE // 50
        if self.start is None:
            self.start = time.monotonic()
        else:
            self.samples += n
            await asyncio.sleep(max(0.0, self.start + self.samples / RATE - time.monotonic()))
        chunk = bytes(self.pending[:2 * n]).ljust(2 * n, b"\0")
        if self.pending:
            del self.pending[:2 * n]
            if not self.pending:
                self.last_sent = time.monotonic()
        frame = av.AudioFrame(format="s16", layout="mono", samples=n)
        frame.planes[0].update(chunk)
        frame.pts, frame.sample_rate, frame.time_base = self.samples, RATE, fractions.Fraction(1, RATE)
        return frame


class Caller:
    def __init__(self, image):
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = self.pc.createDataChannel("oai-events")
        self.events: asyncio.Queue = asyncio.Queue()
        self.channel.on("message", lambda m: self.events.put_nowait(json.loads(m)))
        self.pc.addTrack(Still(image))
        self.mic = Mic()
        self.pc.addTrack(self.mic)
        self.first_sound = None  # the first received frame with any non-zero sample (the call's silence is zeros)
        self.first_loud = None
        self.tasks = []
        self.pc.on("track", lambda t: self.tasks.append(asyncio.ensure_future(self.listen(t))))

    async def listen(self, track):
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                peak = np.abs(frame.to_ndarray()).max()
                if self.first_sound is None and peak > 0:
                    self.first_sound = time.monotonic()
                if self.first_loud is None and peak > LOUD:
                    self.first_loud = time.monotonic()

    async def call(self, client: AsyncOpenAI, session: dict) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        raw = await client.realtime.calls.with_raw_response.create(sdp=self.pc.localDescription.sdp,
                                                                    session=session)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=raw.content.decode(), type="answer"))
        while True:
            event = await asyncio.wait_for(self.events.get(), 60)
            if event["type"] == "session.created":
                return event["session"]["streamvid"]["stream_id"]

    async def close(self):
        await self.pc.close()
        for t in self.tasks:
            t.cancel()


async def wait_blocks(http: httpx.AsyncClient, sid: str, n: int) -> None:
    for _ in range(1200):
        if (await http.get(f"/v1/streams/{sid}")).json().get("blocks_encoded", 0) >= n:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the stream's frames did not reach the window")


async def webrtc_round(url, http, image, pcm) -> float:
    caller = Caller(image)
    try:
        sid = await caller.call(AsyncOpenAI(api_key="x", base_url=f"{url}/v1", max_retries=0),
                                {"type": "realtime", "audio": {"input": {"turn_detection": VAD}}})
        await wait_blocks(http, sid, 2)
        caller.mic.say(pcm)
        for _ in range(1200):
            if caller.first_loud is not None and caller.mic.last_sent is not None:
                return caller.first_sound - caller.mic.last_sent
            await asyncio.sleep(0.05)
        raise RuntimeError("no spoken answer on the call's track")
    finally:
        await caller.close()


async def websocket_round(url, http, image, pcm) -> float:
    client = AsyncOpenAI(api_key="x", base_url=f"{url}/v1", websocket_base_url=url.replace("http", "ws") + "/v1",
                         max_retries=0)
    async with client.realtime.connect(model=MODEL) as conn:
        sid = None
        await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"],
                                           "audio": {"input": {"turn_detection": VAD}}})
        data = "data:image/png;base64," + base64.b64encode(png(image)).decode()
        for _ in range(6):
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_image", "image_url": data}]})
            await asyncio.sleep(0.5)
        async for event in conn:
            if event.type == "session.updated":
                sid = event.session.model_extra["streamvid"]["stream_id"]
                break
        await wait_blocks(http, sid, 2)
        step, start = 2400 * 2, time.monotonic()
        body = pcm + bytes(RATE * 4)  # the question, then silence (its end is heard), as a microphone sends it
        last_sent = []

        async def talk():
            for i in range(0, len(body), step):
                await asyncio.sleep(max(0.0, start + i / (2 * RATE) - time.monotonic()))
                await conn.input_audio_buffer.append(audio=base64.b64encode(body[i:i + step]).decode())
                if i + step >= len(pcm) and not last_sent:
                    last_sent.append(time.monotonic())

        talking = asyncio.ensure_future(talk())
        try:
            async for event in conn:
                if event.type == "response.output_audio.delta":
                    return time.monotonic() - last_sent[0]
                if event.type == "error":
                    raise RuntimeError(event.error.message)
        finally:
            talking.cancel()
    raise RuntimeError("the socket closed before any audio")


async def http_round(url, http, image, pcm) -> float:
    sid = (await http.post("/v1/streams", json={"source": "push"})).json()["id"]
    try:
        for i in range(6):
            await http.post(f"/v1/streams/{sid}/frames", params={"t_s": i / 2}, content=png(image),
                            headers={"Content-Type": "image/png"})
            await asyncio.sleep(0.5)
        await wait_blocks(http, sid, 2)
        t0 = time.monotonic()
        r = await http.post("/v1/chat/completions", json={"model": MODEL, "stream_id": sid, "messages": [
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {
                "data": base64.b64encode(wav_bytes(pcm)).decode(), "format": "wav"}}]}]})
        text = r.json()["choices"][0]["message"]["content"]
        async with http.stream("POST", "/v1/audio/speech", json={"model": MODEL, "input": text,
                                                                 "response_format": "wav"}) as s:
            async for chunk in s.aiter_bytes():
                if chunk:
                    return time.monotonic() - t0
        raise RuntimeError("no speech bytes")
    finally:
        await http.delete(f"/v1/streams/{sid}")


def ms(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) in milliseconds."""
    if not values:
        return None
    values = sorted(values)
    return round(1000 * values[min(len(values) - 1, int(round(q * (len(values) - 1))))], 1)


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cpu_per_call(url, http, image, pid: int, seconds: float) -> dict:
    out, callers = {}, []
    try:
        for n in (0, 1, 2):
            while len(callers) < n:
                callers.append(Caller(image))
                await callers[-1].call(AsyncOpenAI(api_key="x", base_url=f"{url}/v1", max_retries=0),
                                       {"type": "realtime", "output_modalities": ["text"]})
            await asyncio.sleep(3)
            c0, t0 = cpu_s(pid), time.monotonic()
            await asyncio.sleep(seconds)
            out[n] = round((cpu_s(pid) - c0) / (time.monotonic() - t0), 3)
    finally:
        for c in callers:
            await c.close()
    return out


async def eight_sessions(url, http, image, seconds: float) -> dict:
    data = "data:image/png;base64," + base64.b64encode(png(image)).decode()
    errors, ttfts, sids = [], [], []

    async def one(k: int) -> None:
        client = AsyncOpenAI(api_key="x", base_url=f"{url}/v1",
                             websocket_base_url=url.replace("http", "ws") + "/v1", max_retries=0)
        async with client.realtime.connect(model=MODEL) as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            asked_at, start = None, time.monotonic()

            async def feed():
                i = 0
                while time.monotonic() - start < seconds:
                    await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                        {"type": "input_image", "image_url": data}]})
                    if i % 10 == 5 + k % 3:
                        await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                            {"type": "input_text", "text": "How many shapes are on screen?"}]})
                        nonlocal asked_at
                        asked_at = time.monotonic()
                        await conn.response.create()
                    i += 1
                    await asyncio.sleep(max(0.0, start + i - time.monotonic()))

            feeding = asyncio.ensure_future(feed())
            try:
                while not feeding.done():
                    try:
                        event = await asyncio.wait_for(conn.recv(), 1.0)
                    except asyncio.TimeoutError:
                        continue
                    if event.type == "session.updated" and not any(s[0] == k for s in sids):
                        sids.append((k, event.session.model_extra["streamvid"]["stream_id"]))
                    elif event.type == "response.output_text.delta" and asked_at is not None:
                        ttfts.append(time.monotonic() - asked_at)
                        asked_at = None
                    elif event.type == "error":
                        errors.append(event.error.message)
                await feeding
                dropped = [(await http.get(f"/v1/streams/{s}")).json() for kk, s in sids if kk == k]
                return dropped[0] if dropped else {}
            finally:
                feeding.cancel()

    stats = await asyncio.gather(*(one(k) for k in range(8)), return_exceptions=True)
    failed = [repr(s)[:200] for s in stats if isinstance(s, BaseException)]
    frames = [s for s in stats if isinstance(s, dict)]
    return {"sessions": 8, "errors": len(errors) + len(failed), "error_samples": (errors + failed)[:3],
            "answers": len(ttfts), "ttft_p50_ms": ms(ttfts, 0.5), "ttft_p95_ms": ms(ttfts, 0.95),
            "frames_in": sum(s.get("frames_in", 0) for s in frames),
            "frames_dropped": sum(s.get("frames_dropped", 0) for s in frames)}


async def run(args, url, pid) -> dict:
    source = FileSource(demo_clip("shapes_7"), fps=2.0)
    image = next(f.image for f in iter(source.read, None) if f.t_s >= 10.0)
    pcm = speech()
    result = {"glass_to_first_audio_s": {"webrtc": [], "websocket": [], "http": []}}
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for _ in range(args.rounds):
            for name, path in (("webrtc", webrtc_round), ("websocket", websocket_round), ("http", http_round)):
                result["glass_to_first_audio_s"][name].append(round(await path(url, http, image, pcm), 3))
        result["server_cpu_per_wall_s_by_calls"] = await cpu_per_call(url, http, image, pid, args.cpu_seconds)
        for _ in range(600):  # the calls' streams closed (the server holds at most 8)
            if not (await http.get("/v1/streams")).json()["data"]:
                break
            await asyncio.sleep(0.1)
        result["eight_sessions"] = await eight_sessions(url, http, image, args.seconds)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cpu-seconds", type=float, default=20.0)
    args = ap.parse_args()
    args.model, args.cameras, args.extra_serve_args = str(BUNDLED_MODEL), 8, []
    proc, url, _, log = start_server(args, ray=False)
    try:
        print(json.dumps(asyncio.run(run(args, url, proc.pid)), indent=1))
    finally:
        stop_server(proc)


if __name__ == "__main__":
    main()
