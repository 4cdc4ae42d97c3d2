"""Sound and images from a GA realtime client (realtime_conversation.py's session): base64 payloads checked, and
the session's audio turns.

Turn detection null (push to talk): `input_audio_buffer.append` buffers the question being spoken (PCM16, 24 kHz,
at most 120 s), `input_audio_buffer.commit` transcribes it (the server's recogniser) into a user item that the next
`response.create` answers. Turn detection on (server VAD): appended sound is the stream's own (hub/sound.py),
heard by the stream's voice detector; its edges come as `input_audio_buffer.speech_started` / `speech_stopped`
(stream times in ms), each utterance as `input_audio_buffer.committed`, a user item and its transcription, and,
with `create_response`, a response (every utterance, or only one addressed with the wake word: the session's
`streamvid.questions`); speech while a response is being given cancels it (`interrupt_response`). Only a
session that has appended sound answers the stream's speech.
"""

from __future__ import annotations

import base64
import binascii

from streamvid.audio.encoding import encode
from streamvid.serve.realtime_events import new_id, user_item
from streamvid.serve.realtime_session import RATE, ParamError

MAX_BUFFER_S = 120.0  # seconds of a question spoken by hand


class AudioIn:
    """The audio handlers of RealtimeSession (a mixin: the session's config, backend, outbox and responses)."""

    async def audio_append(self, event: dict) -> None:
        ext = event.get("streamvid") if isinstance(event.get("streamvid"), dict) else {}
        await self.take_pcm(b64_bytes(event.get("audio"), "audio"), ext.get("t_s"))

    async def take_pcm(self, pcm: bytes, t_s: float | None = None) -> None:
        """PCM16 24 kHz mono from the client (appended, or a WebRTC call's microphone): the question being
        spoken (push to talk) or the stream's sound (turn detection on)."""
        if self.config.manual:
            if len(self.buffer) + len(pcm) > MAX_BUFFER_S * RATE * 2:
                raise ParamError(f"the input audio buffer holds more than {MAX_BUFFER_S:g} s: commit or clear it",
                                 "audio", "input_audio_buffer_full")
            self.buffer += pcm
            return
        self.heard = True
        await self.backend.push_audio(self.sid, pcm, "audio/pcm", RATE, t_s)

    async def audio_commit(self, event: dict) -> None:
        if not self.config.manual:
            raise ParamError("with server VAD the server commits each utterance itself; set audio.input."
                             "turn_detection to null to commit by hand", None, "input_audio_buffer_commit_vad")
        if len(self.buffer) < RATE // 10 * 2:
            raise ParamError("the input audio buffer holds less than 100 ms of audio: append more before "
                             "committing", None, "input_audio_buffer_commit_empty")
        pcm, item_id = bytes(self.buffer), new_id("item")
        self.buffer.clear()
        self.out.put({"type": "input_audio_buffer.committed", "item_id": item_id, "previous_item_id": None})
        text = await self.backend.spoken_question(self.sid, wav_bytes(pcm), "wav")
        self.heard_item(item_id, text, len(pcm) / (2 * RATE))

    def heard_item(self, item_id: str, text: str, seconds: float, pending: bool = True) -> None:
        """A committed utterance: its user item, then its transcription (when the session asks for it)."""
        self.add_item(user_item(item_id, [{"type": "input_audio", "transcript": text}]), text if pending else None)
        if self.config.transcription is not None:
            self.out.put({"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                          "content_index": 0, "transcript": text,
                          "usage": {"type": "duration", "seconds": round(seconds, 3)}})

    async def audio_clear(self, event: dict) -> None:
        self.buffer.clear()
        self.out.put({"type": "input_audio_buffer.cleared"})

    # ---- responses --------------------------------------------------------------------------------------

    async def vad_item(self, item: dict) -> None:
        td = self.config.turn_detection or {}
        t_ms = round(float(item.get("t_s") or 0.0) * 1000)
        if item["type"] == "voice_activity" and item.get("event") == "speech_started":
            self.speech = [*self.speech[-15:], {"item_id": new_id("item"), "start": t_ms}]
            self.out.put({"type": "input_audio_buffer.speech_started", "audio_start_ms": t_ms,
                          "item_id": self.speech[-1]["item_id"]})
            if td.get("interrupt_response", True) and self.response is not None and self.response.qid:
                self.response.cancel("turn_detected")
        elif item["type"] == "voice_activity" and item.get("event") == "speech_stopped" and self.speech:
            self.out.put({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": t_ms,
                          "item_id": self.speech[-1]["item_id"]})
        elif item["type"] == "transcript":
            end_ms = round(float(item.get("t_end_s") or 0.0) * 1000)
            item_id = next((s["item_id"] for s in reversed(self.speech) if t_ms <= s["start"] <= end_ms),
                           new_id("item"))
            qid = item.get("question_id")
            ask = td.get("create_response", True) and (qid or self.config.questions == "all")
            self.out.put({"type": "input_audio_buffer.committed", "item_id": item_id, "previous_item_id": None})
            text = str(item.get("text") or "")
            self.heard_item(item_id, text, max(0.0, (end_ms - t_ms) / 1000), pending=not ask)
            if ask and text.strip(" .,!?-"):
                if self.response is not None:
                    self.response.cancel("turn_detected")
                await self.respond(qid, text, self.config.audio_out, None, self.config.max_output_tokens)


def b64_bytes(value: object, param: str) -> bytes:
    if not isinstance(value, str):
        raise ParamError(f"{param} must be a base64 string", param, "invalid_type")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ParamError(f"{param} is not valid base64", param, "invalid_base64") from None
    if len(data) % 2:
        raise ParamError(f"{param}: PCM16 audio has an even number of bytes", param, "invalid_value")
    return data


def data_url_bytes(url: object, param: str) -> tuple[bytes, str]:
    """A `data:image/png;base64,...` (or image/jpeg) URL's bytes and media type."""
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url[:100]:
        raise ParamError(f"{param} must be a data URL (data:image/png;base64,... or data:image/jpeg;base64,...)",
                         param, "invalid_image_url")
    head, payload = url.split(",", 1)
    content_type = head[len("data:"):].split(";", 1)[0]
    try:
        return base64.b64decode(payload, validate=True), content_type
    except (binascii.Error, ValueError):
        raise ParamError(f"{param} is not valid base64", param, "invalid_base64") from None


def wav_bytes(pcm: bytes) -> bytes:
    """PCM16 mono at RATE as a WAV file (audio/encoding.py's, as /v1/audio/speech writes them)."""
    return encode(pcm, "wav")
