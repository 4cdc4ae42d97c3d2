"""The server events of a GA realtime session (realtime_ga.py) in OpenAI's shapes, each with its `event_id`, sent
in order by one writer; errors in OpenAI's error shape; ids for items and responses.

    out = Outbox(ws)                                   # one writer task: events go out in the order given
    out = Outbox(channel_socket, voice_track)          # a WebRTC call: spoken answers play on its audio track
    out.put({"type": "session.created", "session": {...}})            # from the event loop
    out.put_threadsafe({"type": "response.output_audio.delta", ...})  # from another thread (a speaker)
    out.error(ParamError("...", "session.type"), client_event_id)     # {"type": "error", "event_id", "error": {
                                                                      #  "type", "code", "message", "param",
                                                                      #  "event_id"}}

Every event put here must be one the official SDK's `RealtimeServerEvent` union parses (tests check each against
the SDK's models); streamvid's own (`streamvid.*`) go only to a client that asked for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets

from streamvid.serve.errors import wire_error
from streamvid.serve.realtime_session import ParamError
from streamvid.serve.web import dumps

MAX_QUEUED = 4096  # events waiting for a slow client: past this, the connection is closed (1008)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


class Outbox:
    def __init__(self, ws, voice_track=None):
        self.ws = ws
        self.voice_track = voice_track  # a WebRTC call's outbound audio (webrtc_media.SpokenTrack): speech goes there
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self._ids = itertools.count()
        self._prefix = secrets.token_hex(4)
        self.closed = False
        self.task = asyncio.create_task(self._write())

    def put(self, event: dict) -> None:
        if self.closed:
            return
        if self.queue.qsize() >= MAX_QUEUED:
            self.closed = True
            self._dropping = asyncio.ensure_future(self._drop("the client reads events too slowly"))
            return
        self.queue.put_nowait({"event_id": f"event_{self._prefix}{next(self._ids):06d}", **event})

    def put_threadsafe(self, event: dict) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the session is over
            self.loop.call_soon_threadsafe(self.put, event)

    def error(self, e: BaseException, event_id: str | None = None) -> None:
        self.put(error_event(e, event_id))

    async def _write(self) -> None:
        try:
            while True:
                event = await self.queue.get()
                await self.ws.send_text(dumps(event))
        except Exception:  # noqa: BLE001 - the socket went away: the receive loop ends the session
            self.closed = True

    async def _drop(self, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(code=1008, reason=reason)

    async def close(self, flush_s: float = 2.0) -> None:
        """Send what is queued (for at most `flush_s`), then stop the writer."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._drain(), flush_s)
        self.closed = True
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task

    async def _drain(self) -> None:
        while not self.queue.empty() and not self.task.done():
            await asyncio.sleep(0.01)


def error_event(e: BaseException, event_id: str | None = None) -> dict:
    """`e` in OpenAI's error shape (the client event it answers named by `event_id`)."""
    if isinstance(e, ParamError):
        kind, code, message, param = e.type, e.code, e.message, e.param
    else:
        se = wire_error(e)
        kind, code, message, param = se.type, se.code, se.message, None
    return {"type": "error", "error": {"type": kind, "code": code, "message": message, "param": param,
                                       "event_id": event_id if isinstance(event_id, str) else None}}


# ---- items ------------------------------------------------------------------------------------------------
def user_item(item_id: str, content: list[dict]) -> dict:
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user", "status": "completed",
            "content": content}


def assistant_item(item_id: str, status: str, part: dict | None) -> dict:
    """The response's message: "output_text" {"text"} or "output_audio" {"transcript"} once it has some."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant", "status": status,
            "content": [] if part is None else [part]}


def part_of(audio: bool, text: str) -> dict:
    """A content part as response.content_part.* carry it."""
    return {"type": "audio", "transcript": text} if audio else {"type": "text", "text": text}


def item_part(audio: bool, text: str) -> dict:
    """The same as the item's content carries it."""
    return {"type": "output_audio", "transcript": text} if audio else {"type": "output_text", "text": text}


def usage(input_tokens: int, output_tokens: int, cached: int = 0, text_in: int = 0) -> dict:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens,
            "input_token_details": {"cached_tokens": cached, "text_tokens": text_in, "audio_tokens": 0,
                                    "image_tokens": max(0, input_tokens - text_in)},
            "output_token_details": {"text_tokens": output_tokens, "audio_tokens": 0}}


def streamvid_event(item: dict) -> dict:
    """A stream's own output as a `streamvid.*` event (for a client whose session asked for them)."""
    kind = "narration" if item.get("type") == "say" else str(item.get("type", "status"))
    return {**{k: v for k, v in item.items() if k != "type"}, "type": f"streamvid.{kind}"}
