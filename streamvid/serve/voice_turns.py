"""Talking to a stream over the realtime socket, with OpenAI Realtime's event names: a spoken question is
transcribed, asked, and answered in text and in speech as the answer is generated.

Turn detection on (`server_vad`, the default; `session.update` `{"session": {"turn_detection": {"type":
"server_vad", "silence_duration_ms": 500}}}`): appended audio is the stream's own sound (hub/sound.py). The voice
detector's edges come as they are seen, `input_audio_buffer.speech_started {"audio_start_ms", "item_id"}` and
`input_audio_buffer.speech_stopped {"audio_end_ms", "item_id"}` (stream times in ms); an utterance is a
{"type": "transcript"} output, and one that starts with the wake word is a question: `input_audio_buffer.committed`,
`conversation.item.input_audio_transcription.completed` and its response follow (same item_id).

Turn detection off (`"turn_detection": null`, push to talk):
    input_audio_buffer.append {"audio": b64 PCM16}   buffered as the question being spoken (24 kHz)
    input_audio_buffer.commit                        the buffered audio is a question: transcribed and asked
    input_audio_buffer.clear                         the buffer is dropped
A response, either way:
    response.output_text.delta {"response_id", "delta"}, response.output_audio_transcript.delta {"response_id",
    "delta"} (each sentence as it is spoken), response.output_audio.delta {"response_id", "delta": b64 PCM16 24 kHz},
    response.done {"response": {"id", "status": "completed" | "cancelled", "question_id", "text"}}
`response.cancel` stops the answer being spoken, and so does a new spoken question (it is answered instead).
Alerts are spoken too, each as a response of its own (`response.done` names its `trigger_id` and `alert_id`, its
`question_id` is null), after the response being spoken. With `"output_modalities": ["text"]` in `session.update`
nothing is spoken (the default is ["text", "audio"]; with `--tts off`, text only and alerts are not responses).
`session.update` is checked whole before anything changes (socket_session.py: which fields are applied, which
are taken and ignored; another audio format than PCM16 at 24 kHz, an unknown voice or an unknown field is an error
event naming the field). Appends, in either mode, are held to a sound budget (hub/sound_budget.py: twice real time
and a 10-s burst; past it an error event with status 429, and the socket stays open).
Other server events: session.updated, input_audio_buffer.committed {"item_id"}, input_audio_buffer.cleared,
conversation.item.input_audio_transcription.completed {"item_id", "transcript"}.
"""

from __future__ import annotations

import asyncio
import base64
import io
import secrets
import wave

from streamvid.audio.recognition import QUESTION_MAX_S
from streamvid.audio.spoken import Speaker
from streamvid.audio.vad import SILENCE_S
from streamvid.errors import Conflict, Refused
from streamvid.hub.sound_budget import SoundBudget
from streamvid.serve.socket_session import read_session
from streamvid.serve.speech_route import server_voice

MAX_BUFFER_S = QUESTION_MAX_S  # seconds of a spoken question: refused as it is appended, not at its commit


class VoiceTurns:
    def __init__(self, backend, sid: str, send, rate: int = 24000):
        self.backend, self.sid, self.send, self.rate = backend, sid, send, rate
        self.manual = False  # turn detection off: appended audio is the question being spoken
        self.silence_ms = round(SILENCE_S * 1000)  # server VAD: the pause that ends an utterance
        self.buffer = bytearray()
        self.response: dict | None = None  # {"id", "qid", "speaker", "text"}
        self._early: list[dict] | None = None  # the stream's outputs while a question is being queued
        self._speech: list[dict] = []  # server VAD: the newest stretches of speech {"item_id", "start", "end"}
        self.audio_out = True  # "audio" in the session's output_modalities: answers and alerts are spoken
        self.voice = "server"  # the voice the session asked for (the server's --tts voice speaks whichever)
        self.budget = SoundBudget()  # push to talk: how fast the question being spoken may be appended
        self._alerts: list[dict] = []  # alerts waiting for the response being spoken to end
        self.loop = asyncio.get_running_loop()

    async def update(self, session: object) -> dict:
        """A session.update: checked whole (socket_session.py: an unknown field, another audio format or an
        unknown voice is refused naming the field, and nothing changes), then applied."""
        settings = read_session(session)
        if "turn_detection" in settings:
            td = settings["turn_detection"]
            if td is not None and "silence_ms" in td:
                await self.backend.set_silence(self.sid, td["silence_ms"] / 1000)
                self.silence_ms = td["silence_ms"]
            self.manual = td is None
        self.audio_out = settings.get("audio_out", self.audio_out)
        self.voice = settings.get("voice", self.voice)
        return {"type": "session.updated", "session": {
            "turn_detection": None if self.manual else {"type": "server_vad", "silence_duration_ms": self.silence_ms},
            "input_audio_format": "pcm16", "output_audio_format": "pcm16", "voice": self.voice,
            "output_modalities": ["text", "audio"] if self.audio_out else ["text"]}}

    def append(self, data: bytes) -> None:
        """Push to talk: `data` (PCM16 at 24 kHz) added to the question being spoken, within the socket's sound
        budget (sound_budget.py: Busy past twice real time and a 10-s burst) and MAX_BUFFER_S."""
        if len(data) % 2:
            raise Refused("PCM16 audio must have an even number of bytes")
        if len(self.buffer) + len(data) > MAX_BUFFER_S * self.rate * 2:
            raise Refused(f"the input audio buffer holds more than {MAX_BUFFER_S:g} s: commit or clear it")
        self.budget.take(len(data) / 2 / self.rate)
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
        await self._respond(qid)
        early, self._early = self._early, None
        for item in early:
            await self.on_item(item)

    async def _respond(self, qid: str | None, alert: dict | None = None) -> dict:
        """A response: the answer to question `qid`, spoken sentence by sentence as it comes (on_item), or `alert`
        said at once."""
        rid = f"resp_{secrets.token_hex(8)}"
        voice = await self._voice()
        speaker = Speaker(voice or _Silent(), on_audio=lambda pcm: self._later(
            {"type": "response.output_audio.delta", "response_id": rid, "delta": base64.b64encode(pcm).decode()}),
            on_sentence=lambda s: self._later({"type": "response.output_audio_transcript.delta", "response_id": rid,
                                               "delta": s}))
        self.response = r = {"id": rid, "qid": qid, "speaker": speaker, "text": "", "alert": alert}
        if alert is not None:
            r["text"] = str(alert.get("text") or "")
            await self.send({"type": "response.output_text.delta", "response_id": rid, "delta": r["text"]})
            speaker.say(r["text"])
            asyncio.create_task(self._finish(r))
        return r

    async def _voice(self):
        """The server's voice (--tts), or None: --tts off, or the session's output_modalities leave audio out."""
        if not self.audio_out:
            return None
        try:
            return await asyncio.to_thread(server_voice, self.backend.options.tts)
        except Conflict:  # --tts off: in text only
            return None

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
        if not self.manual and item.get("type") in ("voice_activity", "transcript"):
            await self._heard(item)
        if item.get("type") == "alert" and await self._voice() is not None:
            self._alerts.append(item)  # spoken once what is being said has been
            if self.response is None:
                await self._respond(None, self._alerts.pop(0))
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
            if not r["text"] and item.get("text"):  # an answer that came whole (nothing seen yet): no pieces
                r["speaker"].feed(item["text"])
                await self.send({"type": "response.output_text.delta", "response_id": r["id"], "delta": item["text"]})
            r["text"] = item.get("text", r["text"])
            r["speaker"].finish()
            asyncio.create_task(self._finish(r))  # the pump goes on while the rest is spoken

    async def _heard(self, item: dict) -> None:
        """Server VAD: the voice detector's edges as OpenAI Realtime's speech_started / speech_stopped, and a
        question heard after the wake word as a committed item, its transcription and a response."""
        t_ms = int(round(float(item.get("t_s") or 0.0) * 1000))
        if item["type"] == "voice_activity" and item.get("event") == "speech_started":
            self._speech = [*self._speech[-15:], {"item_id": f"item_{secrets.token_hex(8)}", "start": t_ms, "end": None}]
            await self.send({"type": "input_audio_buffer.speech_started", "audio_start_ms": t_ms,
                             "item_id": self._speech[-1]["item_id"]})
        elif item["type"] == "voice_activity" and item.get("event") == "speech_stopped" and self._speech:
            self._speech[-1]["end"] = t_ms
            await self.send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": t_ms,
                             "item_id": self._speech[-1]["item_id"]})
        elif item["type"] == "transcript" and item.get("question_id"):
            item_id = self._item_of(t_ms, int(round(float(item.get("t_end_s") or 0.0) * 1000)))
            await self.send({"type": "input_audio_buffer.committed", "item_id": item_id})
            await self.send({"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                             "transcript": item.get("text", "")})
            await self.cancel(quiet=True)  # a new question stops the answer being spoken
            await self._respond(item["question_id"])

    def _item_of(self, start_ms: int, end_ms: int) -> str:
        """The item of the stretch of speech inside the utterance [start_ms, end_ms] (padded by the detector)."""
        for speech in reversed(self._speech):
            if start_ms <= speech["start"] <= end_ms:
                return speech["item_id"]
        return f"item_{secrets.token_hex(8)}"

    async def _finish(self, r: dict) -> None:
        await asyncio.to_thread(r["speaker"].wait, 120.0)
        if self.response is r:
            self.response = None
            await self.send(_done(r, "completed"))
            if self._alerts:
                await self._respond(None, self._alerts.pop(0))

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
    response = {"id": r["id"], "status": status, "question_id": r["qid"], "text": r["text"]}
    if r.get("alert") is not None:
        response.update({k: r["alert"][k] for k in ("trigger_id", "alert_id") if k in r["alert"]})
    return {"type": "response.done", "response": response}
