"""`POST /v1/audio/speech` (OpenAI's route): any text spoken by the server's voice (`--tts`; voices.py).

    client.audio.speech.create(model="tts-1", voice="alloy", input="The star is red.",
                               response_format="mp3")          # 24 kHz mono, as OpenAI's

`model` is the served model or one of OpenAI's speech models (MODELS: "tts-1", "tts-1-hd", "gpt-4o-mini-tts"), all
spoken by the server's one voice; another name is a 404 naming it. `voice` is accepted and the server's own voice
speaks (OpenAI's voice names are not ours); `speed` and `instructions` are accepted and ignored. `response_format`:
"mp3" (audio/mpeg), "opus" (Ogg Opus, audio/opus), "aac" (ADTS, audio/aac), "flac" (audio/flac), "wav" (the
default: audio/wav, PCM16) or "pcm" (audio/pcm: the raw samples, s16le), encoded by audio/encoding.py; another is
a one-line 400 naming it. `--tts off` answers 409.

Synthesis has a pool of its own (SPEECH_SLOTS threads, "streamvid-speech"), never the event loop's default executor
that the other routes' work runs on, and at most SPEECH_SLOTS replies are spoken at once per process: one more is
answered 429 at once (with Retry-After: 1), not queued; an address that keeps retrying at once (more than
refusal_pace.PACE_AFTER refusals a second) has its next refusals held for that second before they are sent. The
input is at most MAX_INPUT characters, spoken piece by piece (sentences, each at most MAX_PIECE characters): a reply
of one piece is sent whole (a WAV with its exact length); a longer one is streamed, each piece encoded and sent as
soon as it is spoken (a WAV's header leaves the length open, 0xFFFFFFFF, read to the end, as OpenAI's streamed WAVs
do). A piece that fails to speak ends the stream there (logged; an encoded reply is closed properly first). A
streamed reply is spoken ahead of its playback only so far: its first LEAD_S seconds of sound at once, then at most
PACE times real time (`ahead_wait_s`), so the slots of a server flooded with long replies cost it a few percent of a
core, not whole cores: a 4,095-character reply (about 4 minutes of speech) arrives in about a minute, always well
ahead of a player.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from streamvid.audio.encoding import FORMATS, MEDIA_TYPES, Encoder, encode
from streamvid.audio.encoding import wav_header as encoded_wav_header
from streamvid.audio.pcm import resample
from streamvid.audio.recognition import IdlePool
from streamvid.audio.spoken import OUT_RATE
from streamvid.audio.voices import VoiceUnavailable, load_voice, to_pcm16
from streamvid.errors import Conflict, Refused
from streamvid.once import once
from streamvid.serve.errors import ServeError
from streamvid.serve.refusal_pace import RefusalPace
from streamvid.serve.web import GetBackend, StrictJSONResponse

log = logging.getLogger(__name__)

MAX_INPUT = 4096  # characters, as OpenAI's
MAX_PIECE = 400  # characters spoken in one synthesis call (a longer sentence is cut at a space)
SPEECH_SLOTS = 2  # replies spoken at once per process, and the threads of the synthesis pool
LEAD_S, PACE = 20.0, 4.0  # a streamed reply: its first LEAD_S s of sound at once, then at most PACE x real time
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


def speak_encoded(text: str, tts: str, encoder: Encoder) -> tuple[bytes, float]:
    """`text` spoken and fed to `encoder`: the bytes it has ready, and the seconds of sound spoken."""
    pcm = speak(text, tts)
    return encoder.feed(pcm), len(pcm) / (2 * OUT_RATE)


def ahead_wait_s(spoken_s: float, elapsed_s: float, lead_s: float = LEAD_S, pace: float = PACE) -> float:
    """How long a streamed reply that has spoken `spoken_s` seconds of sound in `elapsed_s` seconds waits before
    its next piece: until the sound is at most `lead_s` ahead of `pace` times the time elapsed (0: at once)."""
    return max(0.0, (spoken_s - lead_s) / pace - elapsed_s)


class Speaker:
    """The synthesis pool and its slots (SPEECH_SLOTS at once by default)."""

    def __init__(self, slots: int = SPEECH_SLOTS, clock=time.monotonic, sleep=asyncio.sleep):
        self.slots = slots
        self.clock, self.sleep = clock, sleep
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
        as it is ready (and no further ahead of real time than `ahead_wait_s` lets it); then the encoding's end."""
        head = encoder.feed(b"")
        if head:
            yield head
        start, spoken_s = self.clock(), 0.0
        for i, part in enumerate(parts):
            if (wait := ahead_wait_s(spoken_s, self.clock() - start)) > 0:
                await self.sleep(wait)
            try:
                data, seconds = await self.run(speak_encoded, part, tts, encoder)
                spoken_s += seconds
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
