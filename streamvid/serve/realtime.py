"""`WS /v1/streams/{id}/realtime`: push frames, ask and watch over one socket, and get every output as it comes.

Client messages (JSON text):
    {"type": "input_image", "image": "<base64 PNG or JPEG>", "t_s": 12.5}     t_s optional
    {"type": "question", "text": "What colour is the circle?"}
    {"type": "watch", "condition": "a red circle appears"}
    {"type": "input_audio_buffer.append", "audio": "<base64 PCM16 mono>"}  24 kHz (OpenAI Realtime's name and
        format; "rate" may say otherwise); a push stream's sound, heard as {"type": "transcript"} messages; with
        turn detection off (session.update), the question being spoken: input_audio_buffer.commit asks it, and
        the answer comes as OpenAI Realtime's response.* events, spoken (voice_turns.py). At most 15 MiB of base64
        an append (413 otherwise), held to the stream's sound budget (twice real time and a 10-s burst: past it
        an error event with status 429; hub/sound_budget.py)
Server messages: every output of the stream as its JSON object with its "type" ("alert", "say", "status", ...);
answers streamed as {"type": "answer.delta", "id", "text"} pieces, then the full {"type": "answer", ...}. Each
client message but input_audio_buffer.append is acknowledged: {"type": "ack", "for": "input_image", "frames_in",
"frames_dropped", "t_s"},
{"type": "ack", "for": "question", "id"}, {"type": "ack", "for": "watch", "id"}. A bad message gets
{"type": "error", "message", "status"} and the socket stays open. With an API key the upgrade request needs
`Authorization: Bearer KEY` (refused with 401 otherwise); an unknown stream is refused with 404. The socket closes
(code 1000) after the stream's {"type": "status", "event": "closed"}.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json

from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect

from streamvid.errors import HubError, Refused, TooLarge
from streamvid.serve.errors import ServeError, wire_error
from streamvid.serve.voice_turns import VoiceTurns
from streamvid.serve.web import GetBackend, check_key, dumps, error_response

REALTIME_RATE = 24000  # OpenAI Realtime's PCM16 input rate
MAX_APPEND_CHARS = 15 * 2**20  # base64 characters one input_audio_buffer.append may carry (OpenAI's cap)
OFF_LOOP_CHARS = 2**20  # a message or an append this long is parsed or decoded off the event loop


def add_routes(app: FastAPI, get_backend: GetBackend) -> None:
    @app.websocket("/v1/streams/{sid}/realtime")
    async def realtime(ws: WebSocket, sid: str) -> None:
        backend = get_backend()
        items = None
        try:
            check_key(ws.headers.get("authorization"), backend.options)
            items = backend.events(sid, deltas=True)
            await anext(items)  # subscribed (404 for an unknown stream)
        except (ServeError, HubError) as e:
            if items is not None:
                await items.aclose()
            await _deny(ws, wire_error(e))
            return
        await ws.accept()
        lock = asyncio.Lock()

        async def send(obj: dict) -> None:
            async with lock:
                await ws.send_text(dumps(obj))

        turns = VoiceTurns(backend, sid, send)

        async def pump() -> None:
            try:
                async for item in items:
                    if item is not None:
                        await send(item)
                        await turns.on_item(item)
            except (ServeError, HubError) as e:  # the stream's replica went away
                e = wire_error(e)
                await send({"type": "error", "message": e.message, "status": e.status})
            with contextlib.suppress(Exception):
                await ws.close(code=1000)

        task = asyncio.create_task(pump())
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                try:
                    reply = await _handle(backend, sid, message, turns)
                except Exception as e:  # noqa: BLE001 - one bad message never closes the socket
                    e = wire_error(e)
                    reply = {"type": "error", "message": e.message, "status": e.status}
                if reply is not None:
                    await send(reply)
        except (WebSocketDisconnect, RuntimeError):  # RuntimeError: the socket closed under us
            pass
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await items.aclose()


async def _handle(backend, sid: str, message: dict, turns: VoiceTurns) -> dict | None:
    text = message.get("text")
    if text is None:
        raise Refused("send JSON text messages (input_image, input_audio_buffer.append, question, watch), not binary "
                      "ones")
    if len(text) > 4 * backend.options.max_body_mb * 2**20 / 3 + 1024:
        raise TooLarge(f"the message is above the {backend.options.max_body_mb:g} MB image limit")
    try:
        msg = json.loads(text) if len(text) < OFF_LOOP_CHARS else await asyncio.to_thread(json.loads, text)
    except ValueError:
        raise Refused("the message is not valid JSON") from None
    if not isinstance(msg, dict):
        raise Refused('a message must be a JSON object with a "type"')
    kind = msg.get("type")
    if kind == "input_image":
        image = msg.get("image")
        if not isinstance(image, str):
            raise Refused('input_image needs "image": the base64 PNG or JPEG')
        if image.startswith("data:") and "," in image:  # a data URL
            image = image.split(",", 1)[1]
        try:
            data = base64.b64decode(image, validate=True)
        except (binascii.Error, ValueError):
            raise Refused("input_image: \"image\" is not valid base64") from None
        result = await backend.push(sid, data, None, msg.get("t_s"))
        return {"type": "ack", "for": "input_image", **result}
    if kind == "input_audio_buffer.append":
        audio, rate = msg.get("audio"), msg.get("rate", REALTIME_RATE)
        if not isinstance(audio, str):
            raise Refused('input_audio_buffer.append needs "audio": base64 PCM16 mono')
        if len(audio) > MAX_APPEND_CHARS:
            raise TooLarge(f"input_audio_buffer.append: \"audio\" is {len(audio) / 2**20:.1f} MiB of base64, above "
                           f"the {MAX_APPEND_CHARS / 2**20:g} MiB an append may carry")
        try:
            data = base64.b64decode(audio, validate=True) if len(audio) < OFF_LOOP_CHARS else \
                await asyncio.to_thread(base64.b64decode, audio, validate=True)
        except (binascii.Error, ValueError):
            raise Refused("input_audio_buffer.append: \"audio\" is not valid base64") from None
        if turns.manual:  # turn detection off: the question being spoken, until it is committed
            turns.append(data)
        else:
            await backend.push_audio(sid, data, "audio/pcm", rate, msg.get("t_s"))
        return None  # (as OpenAI Realtime: appends are not acknowledged; what is heard comes as transcripts)
    if kind == "session.update":
        return await turns.update(msg.get("session"))
    if kind == "input_audio_buffer.commit":
        await turns.commit()
        return None
    if kind == "input_audio_buffer.clear":
        return turns.clear()
    if kind == "response.cancel":
        await turns.cancel()
        return None
    if kind == "question":
        return {"type": "ack", "for": "question", **await backend.question(sid, msg.get("text"))}
    if kind == "watch":
        result = await backend.watch(sid, msg.get("condition"), msg.get("fire"), msg.get("reset"))
        return {"type": "ack", "for": "watch", "id": result["id"]}
    raise Refused(f"unknown message type {str(kind)[:40]!r}: expected input_image, input_audio_buffer.append, "
                  f"input_audio_buffer.commit, input_audio_buffer.clear, session.update, response.cancel, question "
                  f"or watch")


async def _deny(ws: WebSocket, e: ServeError) -> None:
    """Refuse the upgrade with the error's HTTP status where the server can (else close with policy violation)."""
    try:
        await ws.send_denial_response(error_response(e))
    except RuntimeError:
        await ws.close(code=1008, reason=e.message[:120])
