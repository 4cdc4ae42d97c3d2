"""`GET /v1/realtime?model=MODEL` (WebSocket): OpenAI's Realtime API (GA) over a streamvid stream, so that the
official SDK's `client.realtime.connect(model=...)` (with `websocket_base_url=".../v1"`) watches, listens and talks.

A session is a live stream: connecting opens a "push" stream (closed when the socket closes), or attaches to an
existing one with `?stream_id=vs-...` (left open). The first event is `session.created`; then (client -> server):

    session.update                 the GA session object (realtime_session.py), answered by session.updated
    conversation.item.create       a user message: input_text (a question for the next response), input_image (a
                                   data URL: a frame of the stream at its arrival time, or at {"streamvid": {"t_s":
                                   12.5}} on the event), input_audio (PCM16 24 kHz: a spoken question, transcribed);
                                   -> conversation.item.added, conversation.item.done
    conversation.item.delete / .retrieve
    input_audio_buffer.append      turn detection on: the stream's sound (server VAD: speech_started /
                                   speech_stopped, then committed, conversation.item.added/done,
                                   conversation.item.input_audio_transcription.completed and, with create_response,
                                   a response); turn detection null: the question being spoken, until
    input_audio_buffer.commit / .clear
    response.create                answers the newest user message not yet answered (or, without one, its
                                   `instructions` as the question); `output_modalities`, `metadata`,
                                   `max_output_tokens` per response; the lifecycle is realtime_responses.py's
    response.cancel

An alert (a "tell me when" watch firing; watches come from `session.streamvid.watches`) or a narration remark is a
server-initiated response: `response.created` without a `response.create`, `response.metadata` holding
streamvid's details as strings ("streamvid_kind", "trigger_id", "alert_id", "condition", "t_s", "snapshot_url",
"clip_url"). A client whose session sets `streamvid.events` also gets the stream's own outputs as `streamvid.*`
events; no other client ever gets an event type the official SDK does not know. Errors are OpenAI's error event
({"type": "error", "event_id", "error": {"type", "code", "message", "param", "event_id"}}) and the session goes on:
invalid JSON, an unknown event type, invalid base64, an image above the pixel cap, a message above the size cap
(4/3 of --max-body-mb), a response.create while a response is active.

With `--api-key`, the upgrade needs `Authorization: Bearer` with the key or a client secret
(`POST /v1/realtime/client_secrets`, client_secrets.py: one session each, until it expires); refused with 401.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, WebSocket
from fastapi.responses import HTMLResponse

from streamvid.errors import HubError
from streamvid.serve import client_secrets, realtime_calls
from streamvid.serve.client_secrets import ClientSecrets, authorize
from streamvid.serve.errors import ServeError, wire_error
from streamvid.serve.realtime_calls import Calls
from streamvid.serve.realtime_conversation import RealtimeSession, release
from streamvid.serve.realtime_session import ParamError, check_model
from streamvid.serve.web import GetBackend, error_response


def add_routes(app: FastAPI, get_backend: GetBackend, secrets: ClientSecrets) -> None:
    @app.websocket("/v1/realtime")
    async def realtime_ga(ws: WebSocket) -> None:
        backend = get_backend()
        query = ws.query_params
        items, owned, sid = None, False, None
        try:
            granted = authorize(ws.headers.get("authorization"), ws.scope, backend.options, secrets)
            check_model(query.get("model"), backend.options.model_id, "model")
            sid = query.get("stream_id") or (granted or {}).get("streamvid", {}).get("stream_id")
            if not sid:
                sid, owned = (await backend.open("push"))["id"], True
            items = backend.events(sid, deltas=True)
            await anext(items)  # subscribed (404 for an unknown stream)
            status = await backend.status(sid)
        except (ParamError, ServeError, HubError) as e:
            await release(backend, items, sid if owned else None)
            await _deny(ws, ServeError(e.message, 404, "invalid_request_error", e.code) if isinstance(e, ParamError)
                        else wire_error(e))
            return
        await ws.accept()
        session = RealtimeSession(ws, backend, sid, items, status.get("fps"))
        try:
            await session.run(granted)
        finally:
            await release(backend, items, sid if owned else None)


async def _deny(ws: WebSocket, e: ServeError) -> None:
    try:
        await ws.send_denial_response(error_response(e))
    except RuntimeError:
        await ws.close(code=1008, reason=e.message[:120])


def mount(app: FastAPI, get_backend: GetBackend) -> Calls:
    """The page at /realtime, the GA realtime socket, WebRTC calls (`POST /v1/realtime/calls`, realtime_calls.py), `POST
    /v1/realtime/client_secrets`, and the door that lets a client secret in to the socket and the calls' offers
    (and nowhere else) on `app`; the calls (hang them up at shutdown: `await calls.hang_up_all()`)."""
    secrets = ClientSecrets()
    calls = Calls()
    page = (files("streamvid.serve") / "page" / "realtime.html").read_text()

    @app.get("/realtime", include_in_schema=False)
    async def realtime_page() -> HTMLResponse:  # the reference client (plain HTML and JS): camera, microphone, a call
        return HTMLResponse(page)

    add_routes(app, get_backend, secrets)
    realtime_calls.add_routes(app, get_backend, secrets, calls)
    client_secrets.add_routes(app, get_backend, secrets)
    app.add_middleware(client_secrets.SecretDoor, secrets=secrets, get_backend=get_backend)
    return calls
