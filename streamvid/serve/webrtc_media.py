"""What a WebRTC call (realtime_calls.py) carries, as a GA realtime session (realtime_conversation.py) takes it: the
`oai-events` data channel as the session's socket, the peer's camera as the stream's frames, its microphone as the
stream's sound, and the spoken answers as an outbound audio track.

    socket = ChannelSocket()                 # the session's `ws`: receive() / send_text() / close()
    socket.attach(channel)                   # the peer's "oai-events" data channel, once it arrives
    asyncio.create_task(sample_frames(track, push, fps))   # newest frame wins, at most `fps` a second
    asyncio.create_task(hear(track, take_pcm))             # PCM16 24 kHz mono, 100 ms at a time
    voice = SpokenTrack(on_event)            # pc.addTrack(voice); voice.write(response_id, pcm) from any thread

Events that reach the channel before it opens wait (a bounded queue) and go out in order once it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import threading
import time
from collections import deque

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from streamvid.serve.realtime_session import RATE

FRAME_SAMPLES = RATE // 50  # 20 ms of sound per outbound frame
HEARD_BYTES = RATE // 10 * 2  # 100 ms of PCM16 per push of the peer's sound
MAX_EARLY = 256  # events queued before the data channel opens
MAX_SPOKEN_S = 300.0  # seconds of answer audio buffered for the peer: past this the oldest is dropped


class ChannelSocket:
    """The `oai-events` data channel with the WebSocket surface a realtime session uses (starlette's messages)."""

    def __init__(self):
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.channel = None
        self.early: deque[str] = deque(maxlen=MAX_EARLY)
        self.on_close = None  # called once when the session closes its "socket" (the call ends)

    def attach(self, channel) -> None:
        self.channel = channel

        @channel.on("message")
        def _message(message) -> None:
            key = "text" if isinstance(message, str) else "bytes"
            self.inbox.put_nowait({"type": "websocket.receive", key: message})

        @channel.on("open")
        def _open() -> None:
            self._flush()

        @channel.on("close")
        def _closed() -> None:
            self.hang_up()

        if channel.readyState == "open":
            self._flush()

    def hang_up(self) -> None:
        """The peer went away: the session's receive loop ends."""
        self.inbox.put_nowait({"type": "websocket.disconnect"})

    async def receive(self) -> dict:
        return await self.inbox.get()

    async def send_text(self, text: str) -> None:
        channel = self.channel
        if channel is not None and channel.readyState == "open":
            self._flush()
            channel.send(text)
        elif channel is None or channel.readyState == "connecting":
            self.early.append(text)
        else:
            raise RuntimeError("the data channel is closed")

    def _flush(self) -> None:
        while self.early and self.channel is not None and self.channel.readyState == "open":
            self.channel.send(self.early.popleft())

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.on_close is not None:
            on_close, self.on_close = self.on_close, None
            await on_close()


async def sample_frames(track, push, fps: float) -> None:
    """Read the peer's video `track` for as long as it lasts, and `push(rgb_array)` the newest frame at most `fps`
    times a second (frames in between are decoded, as video needs, and dropped: the newest wins)."""
    period = 1.0 / max(fps, 0.1)
    newest: list = [None]
    arrived = asyncio.Event()

    async def read() -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                newest[0] = await track.recv()
                arrived.set()
        arrived.set()

    reader = asyncio.create_task(read())
    try:
        next_at = 0.0
        while not reader.done() or newest[0] is not None:
            await arrived.wait()
            arrived.clear()
            frame, newest[0] = newest[0], None
            if frame is None:
                continue
            wait = next_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                frame, newest[0] = newest[0] or frame, None  # a newer one came while waiting
            next_at = time.monotonic() + period
            rgb = await asyncio.to_thread(frame.to_ndarray, format="rgb24")
            await push(rgb)
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader


async def hear(track, take_pcm) -> None:
    """Read the peer's audio `track` for as long as it lasts: `await take_pcm(pcm)` with PCM16 mono at 24 kHz,
    100 ms at a time."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    pending = bytearray()
    with contextlib.suppress(MediaStreamError):
        while True:
            frame = await track.recv()
            for out in resampler.resample(frame):
                pending += bytes(out.planes[0])[:out.samples * 2]
            if len(pending) >= HEARD_BYTES:
                chunk = bytes(pending)
                pending.clear()
                await take_pcm(chunk)


class SpokenTrack(MediaStreamTrack):
    """The call's outbound audio: silence, and each response's speech as it is written (PCM16 24 kHz mono), played
    in real time, one response after another. `on_event(event)` (on the event loop) gets OpenAI's WebRTC buffer
    events: output_audio_buffer.started when a response's audio begins to play, .stopped when it has all been
    played and the response is over, .cleared when `clear` cut it off."""

    kind = "audio"

    def __init__(self, on_event):
        super().__init__()
        self.on_event = on_event
        self._lock = threading.Lock()
        self._queue: deque[list] = deque()  # [response_id, bytearray, started, ended], the playing one first
        self._start = None
        self._samples = 0

    def write(self, response_id: str, pcm: bytes) -> None:
        """More of `response_id`'s speech (any thread)."""
        with self._lock:
            if not self._queue or self._queue[-1][0] != response_id:
                self._queue.append([response_id, bytearray(), False, False])
            self._queue[-1][1] += pcm
            while sum(len(q[1]) for q in self._queue) > MAX_SPOKEN_S * RATE * 2 and len(self._queue) > 1:
                self._queue.popleft()

    def end(self, response_id: str) -> None:
        """`response_id` has written all its audio (any thread)."""
        with self._lock:
            for q in self._queue:
                if q[0] == response_id:
                    q[3] = True

    def clear(self, response_id: str | None = None) -> bool:
        """Cut off the audio of `response_id` (None: all of it); whether any was cut."""
        with self._lock:
            cut = [q for q in self._queue if response_id is None or q[0] == response_id]
            for q in cut:
                self._queue.remove(q)
        for q in cut:
            self.on_event({"type": "output_audio_buffer.cleared", "response_id": q[0]})
        return bool(cut)

    @property
    def queued_s(self) -> float:
        """Seconds of speech waiting to be played."""
        with self._lock:
            return sum(len(q[1]) for q in self._queue) / (2 * RATE)

    async def recv(self):
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._samples += FRAME_SAMPLES
            wait = self._start + self._samples / RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        events, chunk = [], b""
        with self._lock:
            if self._queue:
                head = self._queue[0]
                chunk = bytes(head[1][:FRAME_SAMPLES * 2])
                del head[1][:FRAME_SAMPLES * 2]
                if chunk and not head[2]:
                    head[2] = True
                    events.append({"type": "output_audio_buffer.started", "response_id": head[0]})
                if not head[1] and head[3]:
                    self._queue.popleft()
                    if head[2]:
                        events.append({"type": "output_audio_buffer.stopped", "response_id": head[0]})
        for event in events:
            self.on_event(event)
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(chunk.ljust(FRAME_SAMPLES * 2, b"\0"))
        frame.pts, frame.sample_rate, frame.time_base = self._samples, RATE, fractions.Fraction(1, RATE)
        return frame
