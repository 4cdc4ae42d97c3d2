"""Talking to a stream over the realtime socket, with OpenAI Realtime's event names: a spoken question (push to
talk: audio appended, then committed) is transcribed, asked, and answered in text and speech as it is generated.

Client events (with turn detection off, `session.update` `{"session": {"turn_detection": null}}`):
    input_audio_buffer.append {"audio": b64 PCM16}   buffered as the question being spoken (24 kHz)
    input_audio_buffer.commit                        the buffered audio is a question: transcribed and asked
    input_audio_buffer.clear                         the buffer is dropped
    response.cancel                                  the answer being spoken stops (a new commit stops it too)
Server events:
    session.updated, input_audio_buffer.committed {"item_id"}, input_audio_buffer.cleared,
    conversation.item.input_audio_transcription.completed {"item_id", "transcript"},
    response.output_text.delta {"response_id", "delta"}, response.output_audio_transcript.delta {"response_id",
    "delta"} (each sentence as it is spoken), response.output_audio.delta {"response_id", "delta": b64 PCM16 24 kHz},
    response.done {"response": {"id", "status": "completed" | "cancelled", "question_id", "text"}}

With turn detection on (`server_vad`, the default) appended audio is the stream's own sound (hub/sound.py): its
utterances are transcripts, and those that start with the wake word are questions.
"""

from __future__ import annotations

import asyncio
import base64
import io
import secrets
import wave

from streamvid.hub.errors import Conflict, Refused
from streamvid.serve.speech_route import server_voice
from streamvid.spoken import Speaker

MAX_BUFFER_S = 120.0  # seconds of a spoken question


class VoiceTurns:
    def __init__(self, backend, sid: str, send, rate: int = 24000):
        self.backend, self.sid, self.send, self.rate = backend, sid, send, rate
        self.manual = False  # turn detection off: appended audio is the question being spoken
        self.buffer = bytearray()
        self.response: dict | None = None  # {"id", "qid", "speaker", "text"}
        self._early: list[dict] | None = None  # the stream's outputs while a question is being queued
        self.loop = asyncio.get_running_loop()

    async def update(self, session: object) -> dict:
        if not isinstance(session, dict):
            raise Refused('session.update needs "session": an object')
        if "turn_detection" in session:
            td = session["turn_detection"]
            if td is not None and not (isinstance(td, dict) and td.get("type") == "server_vad"):
                raise Refused('turn_detection must be null (commit by hand) or {"type": "server_vad"}')
            self.manual = td is None
        fmt = session.get("input_audio_format", "pcm16")
        if fmt != "pcm16":
            raise Refused(f'input_audio_format must be "pcm16", got {str(fmt)[:20]!r}')
        return {"type": "session.updated", "session": {
            "turn_detection": None if self.manual else {"type": "server_vad"}, "input_audio_format": "pcm16"}}

    def append(self, data: bytes) -> None:
        if len(self.buffer) + len(data) > MAX_BUFFER_S * self.rate * 2:
            raise Refused(f"the input audio buffer holds more than {MAX_BUFFER_S:g} s: commit or clear it")
        self.buffer += data

    def clear(self) -> dict:
        self.buffer.clear()
        return {"type": "input_audio_buffer.cleared"}

    async def commit(self) -> None:
        if not self.buffer:
            raise Refused("the input audio buffer is empty: append audio before committing")
        item_id = f"item_{secrets.token_hex(8)}"
        wav = io.BytesIO()
        with wave.open(wav, "wb") as w:
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(self.rate)
            w.writeframes(bytes(self.buffer))
        self.buffer.clear()
        await self.send({"type": "input_audio_buffer.committed", "item_id": item_id})
        text = await self.backend.spoken_question(self.sid, wav.getvalue(), "wav")
        await self.send({"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                         "transcript": text})
        await self.cancel(quiet=True)  # a new question stops the answer being spoken
        self._early = []  # its answer may start before the queueing returns its id
        try:
            qid = (await self.backend.question(self.sid, text))["id"]
        except BaseException:
            self._early = None
            raise
        rid = f"resp_{secrets.token_hex(8)}"
        try:
            voice = await asyncio.to_thread(server_voice, self.backend.options.tts)
        except Conflict:  # --tts off: the answer in text only
            voice = _Silent()
        speaker = Speaker(voice, on_audio=lambda pcm: self._later(
            {"type": "response.output_audio.delta", "response_id": rid, "delta": base64.b64encode(pcm).decode()}),
            on_sentence=lambda s: self._later({"type": "response.output_audio_transcript.delta", "response_id": rid,
                                               "delta": s}))
        self.response = {"id": rid, "qid": qid, "speaker": speaker, "text": ""}
        early, self._early = self._early, None
        for item in early:
            await self.on_item(item)

    async def cancel(self, quiet: bool = False) -> None:
        r, self.response = self.response, None
        if r is None:
            if not quiet:
                raise Refused("there is no response to cancel")
            return
        r["speaker"].cancel()
        await self.send(_done(r, "cancelled"))

    async def on_item(self, item: dict) -> None:
        """An output of the stream (the socket's pump): the answer to the spoken question, as it comes."""
        if self._early is not None:
            self._early.append(item)
            return
        r = self.response
        if r is None or item.get("id") != r["qid"]:
            return
        if item.get("type") == "answer.delta":
            r["text"] += item.get("text", "")
            r["speaker"].feed(item.get("text", ""))
            await self.send({"type": "response.output_text.delta", "response_id": r["id"],
                             "delta": item.get("text", "")})
        elif item.get("type") == "answer":
            r["text"] = item.get("text", r["text"])
            r["speaker"].finish()
            asyncio.create_task(self._finish(r))  # the pump goes on while the rest is spoken

    async def _finish(self, r: dict) -> None:
        await asyncio.to_thread(r["speaker"].wait, 120.0)
        if self.response is r:
            self.response = None
            await self.send(_done(r, "completed"))

    def _later(self, event: dict) -> None:
        """From the speaker's thread: send `event` on the socket's loop."""
        asyncio.run_coroutine_threadsafe(self.send(event), self.loop)


class _Silent:
    """No voice (--tts off): nothing is spoken."""

    name = "off"

    def synthesize(self, text: str, variant=None):
        import numpy as np

        return np.zeros(0, np.float32), 24000


def _done(r: dict, status: str) -> dict:
    return {"type": "response.done", "response": {"id": r["id"], "status": status, "question_id": r["qid"],
                                                  "text": r["text"]}}
