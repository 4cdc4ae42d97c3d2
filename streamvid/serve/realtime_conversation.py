"""A GA realtime session's conversation (the socket is realtime_ga.py's): its configuration, the user items it
was given, the response being given and the alerts and remarks waiting for it, the stream's outputs turned into
OpenAI's events (the response lifecycle is realtime_responses.py's, sound in realtime_input.py's).

    session = RealtimeSession(ws, backend, sid, items, fps)   # `items`: backend.events(sid, deltas=True)
    # (a WebRTC call passes its data channel as `ws` and its outbound audio track: realtime_calls.py)
    await session.run(granted)        # until the client goes: session.created first, then event by event

Each client event is handled in its turn (HANDLERS); whatever one raises is answered as an error event and the
session goes on. The stream's outputs come through `pump` (answers to the active response, alerts and narration
as server-initiated responses, server VAD's speech; `streamvid.*` copies for a session that asked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect

from streamvid.errors import Conflict, HubError
from streamvid.serve.errors import ServeError
from streamvid.serve.realtime_events import Outbox, error_event, new_id, streamvid_event, user_item
from streamvid.serve.realtime_input import AudioIn, b64_bytes, data_url_bytes, wav_bytes
from streamvid.serve.realtime_responses import Response
from streamvid.serve.realtime_session import ParamError, SessionConfig, max_tokens
from streamvid.serve.speech_route import server_voice

MAX_ITEMS = 256  # user items a session remembers (for delete / retrieve)


class RealtimeSession(AudioIn):
    """One connection: its session, its items, the response being given and the remarks waiting for it."""

    def __init__(self, ws: WebSocket, backend, sid: str, items, fps: float | None, voice_track=None):
        self.ws, self.backend, self.sid, self.items, self.fps = ws, backend, sid, items, fps
        self.voice_track = voice_track  # a WebRTC call's outbound audio (webrtc_media.SpokenTrack), or None
        self.options = backend.options
        self.limit = int(4 / 3 * self.options.max_body_mb * 2**20) + 65536
        self.buffer = bytearray()
        self.user_items: dict[str, dict] = {}
        self.pending: list[tuple[str, str]] = []  # (item_id, text): user words not yet answered
        self.response: Response | None = None
        self.early: list[dict] = []  # the stream's outputs while the active response's question is being queued
        self.asking = False
        self.waiting: deque[dict] = deque(maxlen=32)  # alerts and remarks for after the active response
        self.speech: list[dict] = []  # server VAD: the newest stretches of speech {"item_id", "start"}
        self.heard = False  # this client has appended sound to the stream (server VAD answers it)
        self.ready = asyncio.Event()  # set once run() has the session's configuration and outbox

    async def run(self, granted: dict | None) -> None:
        try:
            self.voice = await asyncio.to_thread(server_voice, self.options.tts)
        except Conflict:  # --tts off, or no voice installed: text only
            self.voice = None
        self.config = SessionConfig(self.options.model_id, self.sid, self.fps, self.voice is not None)
        self.out = Outbox(self.ws, self.voice_track)
        self.ready.set()
        refused = None
        if granted:  # a client secret's session is the session from the start
            try:
                await self.session_update({"session": granted}, announce=False)
            except Exception as e:  # noqa: BLE001
                refused = e
        self.out.put({"type": "session.created", "session": self.config.to_json()})
        if refused is not None:
            self.out.error(refused)
        pump = asyncio.create_task(self.pump())
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                event_id = None
                try:
                    event = self.parse(message)
                    event_id = event.get("event_id")
                    await self.handle(event)
                except Exception as e:  # noqa: BLE001 - one bad event never ends the session
                    self.out.error(e, event_id)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump
            if self.response is not None:
                self.response.cancel()
            await self.out.close()

    def parse(self, message: dict) -> dict:
        text = message.get("text")
        if text is None:
            raise ParamError("send JSON text messages (client events), not binary ones", None, "invalid_type")
        if len(text) > self.limit:
            raise ParamError(f"the event is {len(text) / 2**20:.1f} MB, above the {self.limit / 2**20:.1f} MB "
                             f"limit (--max-body-mb)", None, "event_too_large")
        try:
            event = json.loads(text)
        except ValueError:
            raise ParamError("the event is not valid JSON", None, "invalid_json") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ParamError('an event must be a JSON object with a "type"', "type", "invalid_type")
        return event

    async def handle(self, event: dict) -> None:
        kind = event["type"]
        handler = HANDLERS.get(kind)
        if handler is None:
            raise ParamError(f"unknown event type {kind[:60]!r}", "type", "invalid_event_type")
        await handler(self, event)

    # ---- the session ------------------------------------------------------------------------------------
    async def session_update(self, event: dict, announce: bool = True) -> None:
        was_manual = self.config.manual
        act = self.config.update(event.get("session"))
        if act["silence_s"] is not None:
            with contextlib.suppress(Conflict):  # not a push stream, or --audio off: no sound can be pushed anyway
                await self.backend.set_silence(self.sid, act["silence_s"])
        if self.config.manual != was_manual:
            self.buffer.clear()
        try:
            for condition in act["watches"]:
                watch = await self.backend.watch(self.sid, condition)
                self.config.watches.append({"id": watch["id"], "condition": watch["condition"]})
        finally:
            if announce:
                self.out.put({"type": "session.updated", "session": self.config.to_json()})

    # ---- items ------------------------------------------------------------------------------------------
    async def item_create(self, event: dict) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            raise ParamError('conversation.item.create needs "item": an object', "item", "invalid_type")
        if item.get("type", "message") != "message" or item.get("role") != "user":
            raise ParamError("only user messages (type \"message\", role \"user\") can be added to this "
                             "conversation", "item.role")
        content = item.get("content")
        if not isinstance(content, list) or not content or len(content) > 16:
            raise ParamError("item.content must be a list of 1 to 16 parts", "item.content", "invalid_type")
        ext = event.get("streamvid") if isinstance(event.get("streamvid"), dict) else {}
        item_id = item.get("id") if isinstance(item.get("id"), str) and 0 < len(item["id"]) <= 64 else new_id("item")
        said, shown = [], []
        for i, part in enumerate(content):
            where = f"item.content[{i}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "input_text":
                if not isinstance(part.get("text"), str) or not part["text"].strip():
                    raise ParamError(f"{where}.text must be a non-empty string", f"{where}.text")
                said.append(part["text"])
                shown.append({"type": "input_text", "text": part["text"]})
            elif kind == "input_image":
                data, content_type = data_url_bytes(part.get("image_url"), f"{where}.image_url")
                await self.backend.push(self.sid, data, content_type, ext.get("t_s"))
                shown.append({"type": "input_image", "detail": part.get("detail") or "auto"})
            elif kind == "input_audio":
                pcm = b64_bytes(part.get("audio"), f"{where}.audio")
                text = await self.backend.spoken_question(self.sid, wav_bytes(pcm), "wav")
                said.append(text)
                shown.append({"type": "input_audio", "transcript": text})
            else:
                raise ParamError(f"{where}.type must be input_text, input_image or input_audio", f"{where}.type")
        self.add_item(user_item(item_id, shown), " ".join(said) if said else None)

    def add_item(self, item: dict, said: str | None) -> None:
        self.user_items[item["id"]] = item
        while len(self.user_items) > MAX_ITEMS:
            self.user_items.pop(next(iter(self.user_items)))
        if said:
            self.pending = [*self.pending[-7:], (item["id"], said)]
        self.out.put({"type": "conversation.item.added", "previous_item_id": None, "item": item})
        self.out.put({"type": "conversation.item.done", "previous_item_id": None, "item": item})

    async def item_delete(self, event: dict) -> None:
        item_id = event.get("item_id")
        if not isinstance(item_id, str) or self.user_items.pop(item_id, None) is None:
            raise ParamError(f"no item {str(item_id)[:64]!r} in this conversation", "item_id", "item_not_found")
        self.pending = [(i, t) for i, t in self.pending if i != item_id]
        self.out.put({"type": "conversation.item.deleted", "item_id": item_id})

    async def item_retrieve(self, event: dict) -> None:
        item = self.user_items.get(event.get("item_id")) if isinstance(event.get("item_id"), str) else None
        if item is None:
            raise ParamError(f"no item {str(event.get('item_id'))[:64]!r} in this conversation", "item_id",
                             "item_not_found")
        self.out.put({"type": "conversation.item.retrieved", "item": item})

    # ---- audio in ---------------------------------------------------------------------------------------

    async def response_create(self, event: dict) -> None:
        params = event.get("response") or {}
        if not isinstance(params, dict):
            raise ParamError('response.create: "response" must be an object', "response", "invalid_type")
        if self.response is not None:
            raise ParamError(f"conversation already has an active response in progress: {self.response.id}; "
                             f"wait for its response.done or cancel it", None,
                             "conversation_already_has_active_response")
        for key in ("input", "tools", "prompt"):
            if params.get(key) not in (None, []):
                raise ParamError(f"response.{key} is not supported by this server", f"response.{key}",
                                 "unsupported_parameter")
        modalities = self.config.output_modalities
        if params.get("output_modalities") is not None:
            modalities = self.config.modalities(params["output_modalities"], "response.output_modalities")
        metadata = params.get("metadata")
        if metadata is not None and not (isinstance(metadata, dict) and len(metadata) <= 16 and all(
                isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
                for k, v in metadata.items())):
            raise ParamError("response.metadata must map at most 16 keys (64 characters) to strings (512)",
                             "response.metadata")
        cap = self.config.max_output_tokens
        if "max_output_tokens" in params:
            cap = max_tokens(params["max_output_tokens"], "response.max_output_tokens")
        instructions = params.get("instructions")
        question = self.pending[-1][1] if self.pending else instructions if isinstance(instructions, str) else None
        if not question or not question.strip():
            raise ParamError("there is no user message to answer: add one with conversation.item.create "
                             "(input_text or input_audio), or commit spoken audio, first", None, "no_user_message")
        await self.respond(None, question, modalities == ["audio"], metadata, cap)
        self.pending.clear()

    async def respond(self, qid: str | None, question: str | None, audio: bool, metadata: dict | None = None,
                      cap: int | str = "inf") -> None:
        """A response to question `qid` (already asked), or to `question` (asked here)."""
        r = self.response = Response(self.out, qid, audio, self.voice, metadata, cap, on_done=self.next)
        r.start()
        if qid is None:
            self.asking, self.early = True, []  # its answer may begin before the queueing returns its id
            try:
                r.qid = (await self.backend.question(self.sid, question))["id"]
            except BaseException:
                r.cancel(None, "failed")
                raise
            finally:
                self.asking = False
            early, self.early = self.early, []
            for item in early:
                self.answer_item(item)

    def next(self, r: Response) -> None:
        """A response is done: the next alert or remark waiting is said."""
        if self.response is r:
            self.response = None
        if self.response is None and self.waiting:
            self.remark(self.waiting.popleft())

    async def response_cancel(self, event: dict) -> None:
        r, wanted = self.response, event.get("response_id")
        if r is None or (wanted is not None and wanted != r.id):
            raise ParamError("there is no active response to cancel" if r is None else
                             f"response {str(wanted)[:40]!r} is not the active response", None,
                             "response_cancel_not_active")
        r.cancel("client_cancelled")

    async def audio_out_clear(self, event: dict) -> None:
        if self.voice_track is None:
            raise ParamError("output_audio_buffer.clear is for WebRTC calls (POST /v1/realtime/calls); on this "
                             "socket, response.cancel stops the audio deltas", "type", "invalid_event_type")
        self.voice_track.clear()

    def remark(self, item: dict) -> None:
        """An alert or a narration remark as a server-initiated response."""
        alert = item["type"] == "alert"
        details = {"streamvid_kind": "alert" if alert else "narration", "stream_id": self.sid,
                   **{k: item.get(k) for k in ("trigger_id", "alert_id", "condition", "t_s", "snapshot_url",
                                                "clip_url", "heard")}}
        metadata = {k: (f"{v:g}" if isinstance(v, float) else str(v))[:512] for k, v in details.items()
                    if v is not None}
        self.response = r = Response(self.out, None, self.config.audio_out, self.voice, metadata, on_done=self.next)
        r.start()
        r.say(str(item.get("text") or ""))

    # ---- the stream's outputs ---------------------------------------------------------------------------
    async def pump(self) -> None:
        try:
            async for item in self.items:
                if item is None:
                    continue
                try:
                    await self.on_item(item)
                except Exception as e:  # noqa: BLE001 - e.g. a question the hub refused
                    self.out.error(e)
        except (ServeError, HubError) as e:  # the stream's replica went away
            self.out.put(error_event(e))
        await self.out.close()
        with contextlib.suppress(Exception):
            await self.ws.close(code=1000)

    async def on_item(self, item: dict) -> None:
        kind = item.get("type")
        if self.config.events and kind != "answer.delta":
            self.out.put(streamvid_event(item))
        if kind in ("answer.delta", "answer"):
            self.answer_item(item)
        elif kind in ("alert", "say"):
            if self.response is None:
                self.remark(item)
            else:
                self.waiting.append(item)
        elif kind in ("voice_activity", "transcript") and self.heard and not self.config.manual:
            await self.vad_item(item)

    def answer_item(self, item: dict) -> None:
        r = self.response
        if r is None:
            return
        if self.asking:
            self.early.append(item)
        elif item.get("id") == r.qid:
            if item["type"] == "answer.delta":
                r.delta(item.get("text", ""))
            else:
                r.finish(item)


async def release(backend, items, owned_sid: str | None) -> None:
    """A session's end (the socket's or a call's): its subscription to the stream's outputs closed, and the stream
    it opened for itself, if any."""
    if items is not None:
        with contextlib.suppress(Exception):
            await items.aclose()
    if owned_sid is not None:
        with contextlib.suppress(Exception):
            await backend.close(owned_sid)


HANDLERS = {
    "session.update": RealtimeSession.session_update,
    "conversation.item.create": RealtimeSession.item_create,
    "conversation.item.delete": RealtimeSession.item_delete,
    "conversation.item.retrieve": RealtimeSession.item_retrieve,
    "input_audio_buffer.append": RealtimeSession.audio_append,
    "input_audio_buffer.commit": RealtimeSession.audio_commit,
    "input_audio_buffer.clear": RealtimeSession.audio_clear,
    "response.create": RealtimeSession.response_create,
    "response.cancel": RealtimeSession.response_cancel,
    "output_audio_buffer.clear": RealtimeSession.audio_out_clear,
}
