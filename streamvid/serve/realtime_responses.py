"""One response of a GA realtime session (realtime_ga.py): OpenAI's whole lifecycle, with ids, for an answer to a
question (as the engine generates it) or for something the stream says by itself (an alert, a narration remark:
a server-initiated response, its streamvid details as `response.metadata` strings).

    response.created -> response.output_item.added -> conversation.item.added -> response.content_part.added
    -> response.output_text.delta ...                       (output_modalities ["text"])
       or response.output_audio_transcript.delta + response.output_audio.delta ...   (["audio"]: each sentence
       as it is spoken: its words, then its PCM16 24 kHz audio; on a WebRTC call the audio plays on the call's
       track instead, between output_audio_buffer.started and .stopped, or .cleared when cancelled)
    -> response.output_text.done / response.output_audio.done + response.output_audio_transcript.done
    -> response.content_part.done -> response.output_item.done -> conversation.item.done
    -> response.done {"response": {"status": "completed" | "cancelled" | "incomplete", "status_details",
                                   "output": [the message], "usage", "metadata"}}

`usage` counts what the model read (the cached context of frames and memory, and the prompt) and the tokens it
generated, from the answer; a response cut at `max_output_tokens` is "incomplete" (reason "max_output_tokens"), one
cancelled by the client or by a new turn "cancelled" ("client_cancelled" / "turn_detected").
"""

from __future__ import annotations

import asyncio
import base64

from streamvid.audio.spoken import Speaker
from streamvid.serve.realtime_events import Outbox, assistant_item, item_part, new_id, part_of, usage

AUDIO_CHUNK_BYTES = 24000  # half a second of PCM16 at 24 kHz per audio delta
SPEAK_TIMEOUT_S = 120.0


class Response:
    def __init__(self, out: Outbox, qid: str | None, audio: bool, voice, metadata: dict[str, str] | None = None,
                 max_tokens: int | str = "inf", on_done=None):
        self.out, self.qid, self.metadata = out, qid, metadata or None
        self.audio = audio and voice is not None
        self.max_tokens = max_tokens
        self.id, self.item_id = new_id("resp"), new_id("item")
        self.pieces: list[str] = []  # text deltas sent
        self.spoken: list[str] = []  # sentences spoken (audio)
        self.state = "active"  # -> "finishing" (speech draining) -> "done"
        self.cut = False
        self.on_done = on_done
        self.speaker = None
        if self.audio:
            self.speaker = Speaker(voice, on_audio=self._audio, on_sentence=self._sentence,
                                   name="streamvid-realtime-speak")

    def _ids(self) -> dict:
        return {"response_id": self.id, "item_id": self.item_id, "output_index": 0, "content_index": 0}

    def _response(self, status: str, reason: str | None = None, used: dict | None = None) -> dict:
        item = [assistant_item(self.item_id, _item_status(status), item_part(self.audio, self.text))]
        details = None if status in ("in_progress", "completed") else {"type": status, "reason": reason}
        return {"id": self.id, "object": "realtime.response", "status": status, "status_details": details,
                "output": [] if status == "in_progress" else item, "conversation_id": None,
                "output_modalities": ["audio"] if self.audio else ["text"], "max_output_tokens": self.max_tokens,
                "metadata": self.metadata, "usage": used}

    @property
    def text(self) -> str:
        return " ".join(self.spoken) if self.audio else "".join(self.pieces)

    @property
    def active(self) -> bool:
        return self.state == "active"

    def start(self) -> None:
        self.out.put({"type": "response.created", "response": self._response("in_progress")})
        self.out.put({"type": "response.output_item.added", "response_id": self.id, "output_index": 0,
                      "item": assistant_item(self.item_id, "in_progress", None)})
        self.out.put({"type": "conversation.item.added", "previous_item_id": None,
                      "item": assistant_item(self.item_id, "in_progress", None)})
        self.out.put({"type": "response.content_part.added", **self._ids(), "part": part_of(self.audio, "")})

    # ---- what is said -------------------------------------------------------------------------------------
    def delta(self, piece: str) -> None:
        """A piece of the answer (one generated token)."""
        if not self.active or self.cut:
            return
        if isinstance(self.max_tokens, int) and len(self.pieces) >= self.max_tokens:
            self.cut = True
            return
        if not "".join(self.pieces).strip():
            piece = piece.lstrip()
        self.pieces.append(piece)
        if self.audio:
            self.speaker.feed(piece)
        elif piece:
            self.out.put({"type": "response.output_text.delta", **self._ids(), "delta": piece})

    def say(self, text: str) -> None:
        """A whole remark at once (an alert, a narration)."""
        self.delta(text)
        self.finish(None)

    def finish(self, answer: dict | None) -> None:
        """The answer is complete (`answer`: the engine's, for its usage): done once what is left is spoken."""
        if not self.active:
            return
        said = str((answer or {}).get("text") or "")
        if said.strip() and not "".join(self.pieces).strip():  # said whole, without token pieces (an
            self.pieces.append(said)                            # acknowledgement, "nothing seen yet")
            if self.audio:
                self.speaker.feed(said)
            else:
                self.out.put({"type": "response.output_text.delta", **self._ids(), "delta": said})
        self.state = "finishing"
        self._task = asyncio.ensure_future(self._finish(answer))  # (held: a task nobody holds may be collected)

    async def _finish(self, answer: dict | None) -> None:
        if self.speaker is not None:
            self.speaker.finish()
            await asyncio.to_thread(self.speaker.wait, SPEAK_TIMEOUT_S)
        if self.state == "done":  # cancelled while the rest was spoken
            return
        used = None
        if answer is not None:
            tokens = answer.get("tokens")
            out_tokens = len(self.pieces) if self.cut or not isinstance(tokens, int) else tokens
            prompt, context = int(answer.get("prompt_tokens") or 0), int(answer.get("context_tokens") or 0)
            used = usage(prompt + context, out_tokens, cached=context, text_in=prompt)
        if self.cut:
            self._close("incomplete", "max_output_tokens", used)
        else:
            self._close("completed", None, used)

    def cancel(self, reason: str | None = "client_cancelled", status: str = "cancelled") -> bool:
        """Stop it now (what is being spoken is not sent): "cancelled", or "failed" (its question was refused);
        False when it was already done."""
        if self.state == "done":
            return False
        if self.speaker is not None:
            self.speaker.cancel()
        if self.audio and self.out.voice_track is not None:
            self.out.voice_track.clear(self.id)
        self._close(status, reason, None)
        return True

    def _close(self, status: str, reason: str | None, used: dict | None) -> None:
        self.state = "done"
        ids, text = self._ids(), self.text
        if self.audio:
            self.out.put({"type": "response.output_audio.done", **ids})
            self.out.put({"type": "response.output_audio_transcript.done", **ids, "transcript": text})
        else:
            self.out.put({"type": "response.output_text.done", **ids, "text": text})
        self.out.put({"type": "response.content_part.done", **ids, "part": part_of(self.audio, text)})
        item = assistant_item(self.item_id, _item_status(status), item_part(self.audio, text))
        self.out.put({"type": "response.output_item.done", "response_id": self.id, "output_index": 0, "item": item})
        self.out.put({"type": "conversation.item.done", "previous_item_id": None, "item": item})
        self.out.put({"type": "response.done", "response": self._response(status, reason, used)})
        if self.audio and self.out.voice_track is not None:
            self.out.voice_track.end(self.id)
        if self.on_done is not None:
            self.on_done(self)

    # ---- the speaker's thread -----------------------------------------------------------------------------
    def _sentence(self, sentence: str) -> None:
        self.spoken.append(sentence)
        self.out.put_threadsafe({"type": "response.output_audio_transcript.delta", **self._ids(),
                                 "delta": sentence if len(self.spoken) == 1 else " " + sentence})

    def _audio(self, pcm: bytes) -> None:
        if self.out.voice_track is not None:  # a WebRTC call: the audio plays on its track, not in events
            self.out.voice_track.write(self.id, pcm)
            return
        for i in range(0, len(pcm), AUDIO_CHUNK_BYTES):
            self.out.put_threadsafe({"type": "response.output_audio.delta", **self._ids(),
                                     "delta": base64.b64encode(pcm[i:i + AUDIO_CHUNK_BYTES]).decode()})


def _item_status(status: str) -> str:
    return {"completed": "completed", "in_progress": "in_progress"}.get(status, "incomplete")
