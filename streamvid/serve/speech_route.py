"""`POST /v1/audio/speech` (OpenAI's route): any text spoken by the server's voice (`--tts`; voices.py).

    client.audio.speech.create(model="tts-1", voice="alloy", input="The star is red.",
                               response_format="mp3")          # 24 kHz mono, as OpenAI's

`model` is the served model or one of OpenAI's speech models (MODELS: "tts-1", "tts-1-hd", "gpt-4o-mini-tts"), all
spoken by the server's one voice; another name is a 404 naming it. `voice` is accepted and the server's own voice
speaks (OpenAI's voice names are not ours); `speed` and `instructions` are accepted and ignored. `response_format`:
"mp3" (audio/mpeg), "opus" (Ogg Opus, audio/opus), "aac" (ADTS, audio/aac), "flac" (audio/flac), "wav" (the
default: audio/wav, PCM16) or "pcm" (audio/pcm: the raw samples, s16le), encoded by audio/encoding.py; another is
a one-line 400 naming it. `--tts off` answers 409.

Synthesis has a pool of its own (SPEECH_SLOTS threads, "streamvid-speech"), never the event loop's default
executor that the other routes' work runs on, and at most SPEECH_SLOTS replies are spoken at once per process: one
more is answered 429 at once (with Retry-After: 1), not queued; an address that keeps retrying at once (more than
PACE_AFTER refusals a second) has its next refusals held for that second before they are sent (RefusalPace). The input is at most MAX_INPUT characters, spoken piece
by piece (sentences, each at most MAX_PIECE characters): a reply of one piece is sent whole (a WAV with its exact
length); a longer one is streamed, each piece encoded and sent as soon as it is spoken (a WAV's header leaves the
length open, 0xFFFFFFFF, read to the end, as OpenAI's streamed WAVs do). A piece that fails to speak ends the
stream there (logged; an encoded reply is closed properly first).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import OrderedDict, deque

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from streamvid.audio.encoding import FORMATS, MEDIA_TYPES, Encoder, encode
from streamvid.audio.encoding import wav_header as encoded_wav_header
from streamvid.audio.pcm import resample
from streamvid.audio.recognition import IdlePool
from streamvid.audio.spoken import OUT_RATE
from streamvid.audio.voices import VoiceUnavailable, load_voice, to_pcm16
from streamvid.hub.errors import Conflict, Refused
from streamvid.once import once
from streamvid.serve.errors import ServeError
from streamvid.serve.web import GetBackend, StrictJSONResponse

log = logging.getLogger(__name__)

MAX_INPUT = 4096  # characters, as OpenAI's
MAX_PIECE = 400  # characters spoken in one synthesis call (a longer sentence is cut at a space)
SPEECH_SLOTS = 2  # replies spoken at once per process, and the threads of the synthesis pool
PACE_AFTER, PACE_WINDOW_S = 4, 1.0  # refusals an address gets at once within the window; the next ones are held
HOLD_S = 1.0  # how long (the Retry-After the refusal carries)
OPEN_LENGTH = 0xFFFFFFFF  # a streamed WAV's RIFF and data sizes: not known in advance, read to the end
MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # OpenAI's speech models: the server's voice speaks for each


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    input: str = Field(max_length=MAX_INPUT)
    voice: object = None
    response_format: str = "wav"


@once(maxsize=2)
def loaded_voice(name: str):
    """The voice `name` names, loaded once per process (`loaded_voice.cache_clear()` forgets them)."""
    return load_voice(None if name == "auto" else name)


def server_voice(tts: str):
    """The voice `tts` names (loaded once per process); Conflict (one line) when it is "off" or not installed."""
    if tts == "off":
        raise Conflict("this server does not speak (--tts off)")
    try:
        return loaded_voice(tts)
    except (VoiceUnavailable, ValueError) as e:
        raise Conflict(str(e)) from None


def speak(text: str, tts: str) -> bytes:
    """24 kHz mono PCM16 of `text` in the voice `tts` names; Conflict when it is "off" or not installed."""
    samples, rate = server_voice(tts).synthesize(text)
    return to_pcm16(resample(samples, rate, OUT_RATE)).tobytes()


def pieces(text: str, max_chars: int = MAX_PIECE) -> list[str]:
    """`text` cut into the pieces spoken one by one: its sentences (ending in . ! ? or a line break), a sentence
    longer than `max_chars` cut at its last space within them (or at `max_chars` without one)."""
    out = []
    for sentence in re.split(r"(?<=[.!?\u2026])\s+|\s*\n\s*", text.strip()):
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 1, max_chars + 1)
            cut = cut if cut > 0 else max_chars
            out.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence.strip():
            out.append(sentence.strip())
    return out


def wav_header(data_bytes: int | None) -> bytes:
    """A 24 kHz mono PCM16 WAV header for `data_bytes` of samples, or for a length left open (None)."""
    return encoded_wav_header(data_bytes, OUT_RATE)


def speak_encoded(text: str, tts: str, encoder: Encoder) -> bytes:
    """`text` spoken and fed to `encoder`: the bytes it has ready."""
    return encoder.feed(speak(text, tts))


class RefusalPace:
    """Who keeps retrying a refusal at once: an address refused more than PACE_AFTER times within PACE_WINDOW_S has
    its next refusals held HOLD_S before they are sent (the Retry-After it was told), so a client that ignores
    Retry-After costs a held connection, not a request loop spinning on the server's cores. Only refusals are
    counted and held: a request that gets a slot is never slowed, whatever its address. Bounded (`max_addresses`
    most recently refused); thread-safe; `clock` in seconds (for tests)."""

    def __init__(self, clock=time.monotonic, max_addresses: int = 10_000):
        self.clock, self.max_addresses = clock, max_addresses
        self._refused: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def hold_s(self, address: str) -> float:
        """Record one refusal of `address`; how long to hold it before it is sent."""
        now = self.clock()
        with self._lock:
            times = self._refused.pop(address, None) or deque(maxlen=PACE_AFTER + 1)
            while times and times[0] <= now - PACE_WINDOW_S:
                times.popleft()
            times.append(now)
            self._refused[address] = times
            while len(self._refused) > self.max_addresses:
                self._refused.popitem(last=False)
            return HOLD_S if len(times) > PACE_AFTER else 0.0


class Speaker:
    """The synthesis pool and its slots (SPEECH_SLOTS at once by default)."""

    def __init__(self, slots: int = SPEECH_SLOTS):
        self.slots = slots
        self.pool = IdlePool(slots, "streamvid-speech")
        self._free = threading.BoundedSemaphore(slots)
        self.pace = RefusalPace()

    def take(self) -> bool:
        """A slot for one reply (True), or False at once when all are taken."""
        return self._free.acquire(blocking=False)

    def busy(self) -> Response:
        """The 429 a reply gets when every slot is taken."""
        error = ServeError(f"the server is already speaking {self.slots} replies, its most at once; try again in a "
                           f"moment", 429, "rate_limit_error")
        return StrictJSONResponse(error.body(), status_code=429, headers={"Retry-After": "1"})

    def give(self) -> None:
        self._free.release()

    async def run(self, fn, *args):
        return await asyncio.wrap_future(self.pool.submit(fn, *args))

    async def stream(self, parts: list[str], tts: str, encoder: Encoder):
        """The head the format has before any sample (a WAV's header), then each piece, spoken and encoded, as soon
        as it is ready; then the encoding's end."""
        head = encoder.feed(b"")
        if head:
            yield head
        for i, part in enumerate(parts):
            try:
                data = await self.run(speak_encoded, part, tts, encoder)
            except Exception as e:  # noqa: BLE001 - the answer has begun: it ends here, and the log says why
                log.warning("speech: piece %d of %d failed, the reply ends there: %s", i + 1, len(parts), e)
                break
            if data:
                yield data
        try:
            data = await self.run(encoder.close)
        except Exception as e:  # noqa: BLE001 - as above: the reply ends, the log says why
            log.warning("speech: the %s encoding could not be finished: %s", encoder.fmt, e)
            return
        if data:
            yield data


class SpeechResponse(StreamingResponse):
    """A streamed reply that gives its slot back once it is sent, or the client went away."""

    def __init__(self, content, speaker: Speaker, media_type: str):
        super().__init__(content, media_type=media_type)
        self.speaker = speaker

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.speaker.give()


def add_routes(app: FastAPI, get_backend: GetBackend, auth: list, speaker: Speaker | None = None) -> None:
    speaker = speaker or Speaker()

    @app.post("/v1/audio/speech", dependencies=auth)
    async def speech(body: SpeechRequest, request: Request) -> Response:
        options = get_backend().options
        if body.model != options.model_id and body.model not in MODELS:
            raise ServeError(f"model {body.model[:100]!r} is not served here; this server speaks for "
                             f"{', '.join(repr(m) for m in (options.model_id, *MODELS))}", 404, "not_found_error",
                             "model_not_found")
        if body.response_format not in FORMATS:
            raise Refused(f"response_format {body.response_format[:20]!r} is not supported: use one of "
                          f"{', '.join(FORMATS)}")
        parts = pieces(body.input)
        if not parts:
            raise Refused("input is empty: give the text to speak")
        if not speaker.take():
            hold = speaker.pace.hold_s(request.client.host if request.client else "")
            if hold:
                await asyncio.sleep(hold)  # a client retrying at once: its refusal waits out its Retry-After
            return speaker.busy()
        streaming = False
        try:
            await speaker.run(server_voice, options.tts)  # loaded (or refused, 409) before any byte is sent
            media = MEDIA_TYPES[body.response_format]
            if len(parts) > 1:
                streaming = True
                return SpeechResponse(speaker.stream(parts, options.tts, Encoder(body.response_format)), speaker,
                                      media)
            pcm = await speaker.run(speak, parts[0], options.tts)
            data = await speaker.run(encode, pcm, body.response_format)
        finally:
            if not streaming:
                speaker.give()
        return Response(data, media_type=media)
