"""`POST /v1/audio/speech` (OpenAI's route): any text spoken by the server's voice (`--tts`; voices.py).

    client.audio.speech.create(model="streamvid-tiny", voice="alloy", input="The star is red.",
                               response_format="wav")          # a WAV, 24 kHz mono PCM16 ("pcm": the raw samples)

`voice` is accepted and the server's own voice speaks (OpenAI's voice names are not ours); `speed` and
`instructions` are accepted and ignored. `response_format` must be "wav" or "pcm". `--tts off` answers 409.
"""

from __future__ import annotations

import asyncio
import functools
import io
import wave

from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from streamvid.audio.pcm import resample
from streamvid.hub.errors import Conflict, Refused
from streamvid.serve.errors import ServeError
from streamvid.serve.web import GetBackend
from streamvid.spoken import OUT_RATE
from streamvid.voices import VoiceUnavailable, load_voice, to_pcm16

MAX_INPUT = 4096  # characters, as OpenAI's


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    input: str = Field(max_length=MAX_INPUT)
    voice: object = None
    response_format: str = "wav"


@functools.lru_cache(maxsize=2)
def _loaded(name: str):
    return load_voice(None if name == "auto" else name)


def server_voice(tts: str):
    """The voice `tts` names (loaded once per process); Conflict (one line) when it is "off" or not installed."""
    if tts == "off":
        raise Conflict("this server does not speak (--tts off)")
    try:
        return _loaded(tts)
    except (VoiceUnavailable, ValueError) as e:
        raise Conflict(str(e)) from None


def speak(text: str, tts: str) -> bytes:
    """24 kHz mono PCM16 of `text` in the voice `tts` names; Conflict when it is "off" or not installed."""
    samples, rate = server_voice(tts).synthesize(text)
    return to_pcm16(resample(samples, rate, OUT_RATE)).tobytes()


def add_routes(app: FastAPI, get_backend: GetBackend, auth: list) -> None:
    @app.post("/v1/audio/speech", dependencies=auth)
    async def speech(body: SpeechRequest) -> Response:
        options = get_backend().options
        if body.model != options.model_id:
            raise ServeError(f"model {body.model[:100]!r} is not served here; this server serves "
                             f"{options.model_id!r} (GET /v1/models)", 404, "not_found_error", "model_not_found")
        if body.response_format not in ("wav", "pcm"):
            raise Refused(f'response_format must be "wav" or "pcm", got {body.response_format[:20]!r}')
        if not body.input.strip():
            raise Refused("input is empty: give the text to speak")
        pcm = await asyncio.to_thread(speak, body.input, options.tts)
        if body.response_format == "pcm":
            return Response(pcm, media_type="audio/pcm")
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(OUT_RATE)
            w.writeframes(pcm)
        return Response(buf.getvalue(), media_type="audio/wav")
